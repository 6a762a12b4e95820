/* What the program asks of the server, from its environment (and the memfds it hands the server): its memory limit, priority class, SMs and
 * name, per GPU in MPS's form where MPS has one (the hello and CLIENT_INFO of each of its channels). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "shim/client.h"

/* The device memory limit the program asks for on its GPU dev (as it numbers them): CUMUX_MEMORY_LIMIT
 * (`cumux run --memory`), else MPS's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (its entry for dev). -1, logged,
 * when malformed: a limit that was meant must not silently become none. */
int shim_requested_memory_limit(int dev, uint64_t *bytes)
{
    const char *own = getenv("CUMUX_MEMORY_LIMIT"), *mps = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    *bytes = 0;
    if (own && *own) {
        if (cumux_parse_size(own, bytes))
            return 0;
        cumux_logf("CUMUX_MEMORY_LIMIT=%s is not a size (4G, 512M, none)", own);
        return -1;
    }
    if (mps && *mps && !cumux_parse_device_limits(mps, dev, bytes)) {
        cumux_logf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s is not of the form 0=4G,1=512M", mps);
        return -1;
    }
    return 0;
}

/* The priority class the program asks for: CUMUX_PRIORITY (`cumux run --priority`: high, normal, low),
 * else MPS's CUDA_MPS_CLIENT_PRIORITY (0 normal, 1 below normal); unset: the server's default. One that
 * cannot be read is logged and left unset. */
static uint32_t requested_priority(void)
{
    static const char *const vars[] = {"CUMUX_PRIORITY", "CUDA_MPS_CLIENT_PRIORITY"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        enum cumux_priority p;
        if (!v || !*v)
            continue;
        if (cumux_priority_parse(v, &p) && (i == 0 || p != CUMUX_PRIORITY_HIGH))
            return (uint32_t)p;
        cumux_logf("%s=%s is not a priority (%s): the server's default applies", vars[i], v,
                   i == 0 ? "high, normal, low" : "0 normal, 1 below normal");
        return CUMUX_PRIORITY_UNSET;
    }
    return CUMUX_PRIORITY_UNSET;
}

/* The entry of the variable for the program's GPU dev (as it numbers them): "V" for every GPU, or
 * MPS's per-device form "0=V,1=W"; "" when it has none; NULL, said, when the variable is malformed. */
static const char *device_value(const char *var, int dev, char *buf, size_t cap)
{
    const char *v = getenv(var);
    if (!v || !*v) {
        buf[0] = 0;
        return buf;
    }
    if (!cumux_device_entry(v, dev, buf, cap, NULL)) {
        cumux_logf("%s=%s is not a value nor of the form 0=V,1=W: ignored", var, v);
        return NULL;
    }
    return buf;
}

/* A whole number from 1 to max in the variable (its entry for the program's GPU dev), 0 when unset; said
 * and 0 when it is something else. */
static uint32_t requested_count(const char *var, uint32_t max, const char *what, int dev)
{
    char buf[64];
    const char *v = device_value(var, dev, buf, sizeof buf);
    uint32_t n = 0;
    if (!v || !*v)
        return 0;
    if (!cumux_parse_count(v, max, &n) || n == 0)
        cumux_logf("%s=%s is not %s (1 to %u): ignored", var, getenv(var), what, max);
    return n;
}

/* MPS's active thread percentage (a decimal number above 0, at most 100; its entry for the program's GPU
 * dev), rounded up; 0 when unset or not one (said). */
static uint32_t requested_percent(int dev)
{
    const char *var = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    char buf[64];
    const char *v = device_value(var, dev, buf, sizeof buf);
    if (!v || !*v)
        return 0;
    char *end = NULL;
    errno = 0;
    double p = strtod(v, &end);
    if (errno || *end || !(p > 0 && p <= 100)) {
        cumux_logf("%s=%s is not a percentage (above 0, at most 100): ignored", var, getenv(var));
        return 0;
    }
    uint32_t whole = (uint32_t)p;
    return whole + (p > whole);
}

void shim_client_info(int program_gpu, struct cumux_client_info *info)
{
    *info = (struct cumux_client_info){
        .priority = requested_priority(),
        .sms = requested_count("CUMUX_SMS", 4096, "a number of SMs", program_gpu),
        .thread_percent = requested_percent(program_gpu)};
    const char *name = getenv("CUMUX_CLIENT_NAME");
    if (name)
        snprintf(info->name, sizeof info->name, "%s", name);
}


int shim_sealable_memfd(const char *name, const void *data, size_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    /* write(2), not a mapping: the server seals the file against writes, which a writable map prevents. */
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, (const char *)data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    return fd;
}
