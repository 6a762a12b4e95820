/* The server's GPUs: the facts clients ask about, of every device the driver shows; and the primary
 * context of the one GPU this worker serves (srv_gpu_served, its fault domain). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/server.h"

struct srv_gpu srv_gpus[CUMUX_MAX_DEVICES];
int srv_gpu_count;
int srv_gpu_served; /* the supervisor sets it in each worker it forks */
int srv_driver_version;

static const char *errname(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

int srv_gpus_init(void)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        cumux_logf("cuInit failed: %s (%d)", errname(r), (int)r);
        return -1;
    }
    cuDriverGetVersion(&srv_driver_version);
    srv_coredump_enable(); /* before the contexts: set on one afterwards, it wrote nothing */
    int n = 0;
    r = cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        cumux_logf("no CUDA device: %s (%d)", errname(r), (int)r);
        return -1;
    }
    if (n > CUMUX_MAX_DEVICES)
        n = CUMUX_MAX_DEVICES;
    if (srv_gpu_served < 0 || srv_gpu_served >= n) {
        cumux_logf("GPU %d is not there: the driver shows %d", srv_gpu_served, n);
        return -1;
    }
    /* How a worker thread waits in a synchronize. The driver's "auto" spins while the process has fewer
     * contexts than cores: here one context, so every client waiting in a synchronize held a core, and
     * 48 clients on 16 cores got half the launches they got with "yield" (docs/performance.md).
     * CUMUX_SYNC=yield (default) | spin | blocking | auto. */
    const char *sync_env = getenv("CUMUX_SYNC");
    unsigned sched = CU_CTX_SCHED_YIELD;
    if (sync_env && *sync_env) {
        static const struct { const char *name; unsigned flag; } modes[] = {
            {"yield", CU_CTX_SCHED_YIELD}, {"spin", CU_CTX_SCHED_SPIN},
            {"blocking", CU_CTX_SCHED_BLOCKING_SYNC}, {"auto", CU_CTX_SCHED_AUTO}};
        size_t m = 0;
        while (m < sizeof modes / sizeof modes[0] && strcmp(modes[m].name, sync_env) != 0)
            m++;
        if (m < sizeof modes / sizeof modes[0])
            sched = modes[m].flag;
        else {
            cumux_logf("CUMUX_SYNC=%s: not yield, spin, blocking or auto; waiting by yielding", sync_env);
            sync_env = "yield";
        }
    } else {
        sync_env = "yield";
    }
    for (int i = 0; i < n; i++) {
        struct srv_gpu *g = &srv_gpus[i];
        struct cumux_device_info *info = &g->info;
        memset(info, 0, sizeof *info);
        if ((r = cuDeviceGet(&g->dev, i)) != CUDA_SUCCESS ||
            (r = cuDeviceGetName(info->name, sizeof info->name, g->dev)) != CUDA_SUCCESS ||
            (r = cuDeviceTotalMem(&info->total_mem, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: %s", i, errname(r));
            return -1;
        }
        CUuuid uuid;
        if (cuDeviceGetUuid(&uuid, g->dev) == CUDA_SUCCESS)
            memcpy(info->uuid, uuid.bytes, 16);
        cuDeviceGetPCIBusId(info->pci_bus_id, sizeof info->pci_bus_id, g->dev);
        for (int a = 0; a < CUMUX_MAX_ATTRS; a++) {
            int v;
            info->attrs[a] = cuDeviceGetAttribute(&v, (CUdevice_attribute)a, g->dev) == CUDA_SUCCESS
                                 ? v
                                 : CUMUX_ATTR_MISSING;
        }
        /* What its links to the others can do, as the driver says (the shim answers peer questions). */
        for (int peer = 0; peer < CUMUX_MAX_DEVICES; peer++) {
            CUdevice pd;
            bool there = peer < n && peer != i && cuDeviceGet(&pd, peer) == CUDA_SUCCESS;
            for (int a = 0; a < CUMUX_P2P_ATTRS; a++) {
                int v;
                info->p2p[peer * CUMUX_P2P_ATTRS + a] =
                    there && cuDeviceGetP2PAttribute(&v, (CUdevice_P2PAttribute)(a + 1), g->dev, pd) == CUDA_SUCCESS
                        ? v
                        : CUMUX_ATTR_MISSING;
            }
        }
        if (i != srv_gpu_served)
            continue; /* described only: another worker serves it */
        if ((r = cuDevicePrimaryCtxSetFlags(g->dev, sched)) != CUDA_SUCCESS)
            cumux_logf("device %d: waiting by %s: %s", i, sync_env, errname(r));
        if ((r = cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: primary context: %s", i, errname(r));
            return -1;
        }
        cuCtxSetCurrent(g->ctx);
        if ((r = cuDeviceGetDefaultMemPool(&g->pool, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: no memory pool: %s", i, errname(r));
            return -1;
        }
        srv_memop_kernels_load(i); /* failing, only such operations on pool memory fail */
        cuCtxGetStreamPriorityRange(&info->stream_priority_least, &info->stream_priority_greatest);
        /* the mode logged is the one the driver holds, not the one asked for */
        unsigned flags = 0;
        int active = 0;
        static const char *const sched_names[8] = {"auto", "spin", "yield", "?", "blocking", "?", "?", "?"};
        cuDevicePrimaryCtxGetState(g->dev, &flags, &active);
        cumux_logf("GPU %d: %s, %d SMs, %llu MiB, %s, waits by %s", i, info->name,
                   info->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT],
                   (unsigned long long)(info->total_mem >> 20), info->pci_bus_id,
                   sched_names[flags & CU_CTX_SCHED_MASK]);
    }
    srv_gpu_count = n;
    return 0;
}

void srv_gpus_fini(void)
{
    for (int i = 0; i < srv_gpu_count; i++)
        if (srv_gpus[i].ctx)
            cuDevicePrimaryCtxRelease(srv_gpus[i].dev);
    srv_gpu_count = 0;
}

/* The stack limit each context had before standing by (0: not changed). On an H200 a context holds
 * ~520 MiB, half of it the local memory reserved for every resident thread's 1 KiB stack: a standby that
 * may never serve need not hold that. */
static size_t standby_stack[CUMUX_MAX_DEVICES];
#define STANDBY_STACK_BYTES 16

void srv_gpus_stand_by(void)
{
    for (int i = 0; i < srv_gpu_count; i++) {
        if (!srv_gpus[i].ctx)
            continue;
        size_t v = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        if (cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && v > STANDBY_STACK_BYTES &&
            cuCtxSetLimit(CU_LIMIT_STACK_SIZE, STANDBY_STACK_BYTES) == CUDA_SUCCESS)
            standby_stack[i] = v;
    }
}

void srv_gpus_take_over(void)
{
    for (int i = 0; i < srv_gpu_count; i++) {
        if (!standby_stack[i])
            continue;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        /* Failing (the GPU full by now), kernels still run: the driver grows the stack a launch needs. */
        CUresult r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, standby_stack[i]);
        if (r != CUDA_SUCCESS)
            cumux_logf("GPU %d: stack limit back to %zu bytes: %s", i, standby_stack[i], errname(r));
        standby_stack[i] = 0;
    }
}
