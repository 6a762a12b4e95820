/* `cumux status`: the text a person reads and the records programs parse (cumux top, status --records),
 * and the snapshot of the clients that /metrics shares. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "common/text.h"
#include "common/sock.h"
#include "server/groups.h"
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"
#include "server/supervisor.h"

time_t srv_started_at;

char *srv_status_report(bool gpu_only)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    bool locked = false;
    if (!buf)
        return NULL;
#define APPEND(...)                                                                                    \
    do {                                                                                               \
        int n_;                                                                                        \
        while ((n_ = snprintf(buf + len, cap - len, __VA_ARGS__)) >= 0 && (size_t)n_ >= cap - len) {   \
            char *nb_ = realloc(buf, cap * 2);                                                         \
            if (!nb_)                                                                                  \
                goto out;                                                                              \
            buf = nb_;                                                                                 \
            cap *= 2;                                                                                  \
        }                                                                                              \
        if (n_ > 0)                                                                                    \
            len += (size_t)n_;                                                                         \
    } while (0)
    buf[0] = 0;
    if (!gpu_only) {
        /* The server as a whole: every GPU's faults (the supervisor's history), then GPU 0's part. */
        APPEND("cumuxd pid %d, up %lds, pipe directory %s, driver %d.%d", (int)srv_supervisor_pid,
               (long)(time(NULL) - srv_started_at), cumux_pipe_directory(), srv_driver_version / 1000,
               (srv_driver_version % 1000) / 10);
        if (srv_gpu_count > 1)
            APPEND(", %d GPUs", srv_gpu_count);
        APPEND("\n");
        struct srv_fault_record *faults = calloc(SRV_FAULTS_KEPT, sizeof *faults);
        uint32_t nfaults = faults ? srv_fault_history(faults, NULL, -1, NULL, NULL) : 0;
        for (uint32_t i = nfaults > 5 ? nfaults - 5 : 0; i < nfaults; i++) {
            const struct srv_fault_record *f = &faults[i % SRV_FAULTS_KEPT];
            const char *fname = NULL;
            cuGetErrorName((CUresult)f->code, &fname);
            time_t at = (time_t)(f->at_ms / 1000);
            struct tm tm;
            char when[32];
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&at, &tm));
            APPEND("fault %u: %s GPU %d %s (%s), serving again after %lld ms; culprit: %s; other clients then: %s\n",
                   i + 1, when, f->gpu, f->why[0] ? f->why : "fatal GPU error", fname ? fname : "?",
                   (long long)f->recovered_ms, f->culprit[0] ? f->culprit : "not known",
                   f->clients[0] ? f->clients : "none");
        }
        free(faults);
    }
    /* This worker's GPU (its fault domain): the GPU, the worker, its standby, its clients. */
    int i = srv_gpu_served;
    if (i >= 0 && i < srv_gpu_count) {
        size_t f = 0, t = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        cuMemGetInfo(&f, &t);
        APPEND("GPU %d: %s, %s, %d SMs, memory %zu MiB used of %zu MiB\n", i, srv_gpus[i].info.name,
               srv_gpus[i].info.pci_bus_id, srv_gpus[i].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT],
               (t - f) >> 20, t >> 20);
    }
    uint32_t gfaults = 0, grestarts = 0;
    srv_fault_history(NULL, NULL, i, &gfaults, &grestarts);
    if (gfaults || grestarts)
        APPEND("worker pid %d; fatal GPU faults: %u; workers restarted: %u\n", (int)getpid(), gfaults, grestarts);
    pid_t sb_pid = 0;
    int sb = srv_standby_state(&sb_pid);
    if (sb < 0)
        APPEND("standby worker: none (CUMUX_STANDBY=0)\n");
    else if (sb_pid)
        APPEND("standby worker: pid %d, %s\n", (int)sb_pid, sb ? "ready" : "starting");
    else
        APPEND("standby worker: none yet\n");
    uint64_t kept_n = 0, kept_b = 0;
    if (srv_chunks_on() && srv_kept_memory(&kept_n, &kept_b) == 0)
        APPEND("clients' memory outside the worker: %llu chunk(s), %.1f MiB (CUMUX_CONTAIN)\n",
               (unsigned long long)kept_n, kept_b / 1048576.0);
    pthread_mutex_lock(&srv_clients_lock);
    locked = true;
    int n = 0;
    for (struct srv_client *c = srv_clients; c; c = c->next)
        n += !atomic_load(&c->finished);
    APPEND("clients: %d\n", n);
    if (n)
        APPEND("%6s %8s %6s %12s %12s %12s %8s %12s %10s %8s %6s  %s\n", "id", "pid", "uid", "device_MiB", "limit_MiB",
               "pinned_MiB", "streams", "kernels", "gpu_s", "priority", "SMs", "group");
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        if (atomic_load(&c->finished))
            continue;
        srv_usage_refresh(c);
        char limit[24] = "-";
        uint64_t l = atomic_load(&c->memory.mem_limit);
        if (l)
            snprintf(limit, sizeof limit, "%.1f", l / 1048576.0);
        char sms[16] = "-"; /* r: reserved for it alone */
        if (atomic_load(&c->placement.sms_now))
            snprintf(sms, sizeof sms, "%u%s", atomic_load(&c->placement.sms_now), atomic_load(&c->placement.sms_reserved) ? "r" : "");
        char group[CUMUX_GROUP_PATH];
        srv_group_label(c, group, sizeof group);
        APPEND("%6u %8d %6u %12.1f %12s %12.1f %8u %12llu %10.3f %8s %6s  %s\n", c->id, (int)c->pid, (unsigned)c->uid,
               atomic_load(&c->memory.mem_bytes) / 1048576.0, limit, atomic_load(&c->memory.host_bytes) / 1048576.0,
               atomic_load(&c->streams.nstreams), (unsigned long long)atomic_load(&c->usage.launches),
               atomic_load(&c->usage.gpu_ns) / 1e9, cumux_priority_name((enum cumux_priority)atomic_load(&c->streams.priority)), sms,
               group);
    }
    pthread_mutex_unlock(&srv_clients_lock);
    locked = false;
    struct srv_group_stat gs[SRV_GROUPS_MAX];
    size_t ng = srv_groups_snapshot(gs, SRV_GROUPS_MAX);
    if (ng)
        APPEND("groups (cumux set --group): %zu\n%12s %12s %8s %8s %8s %6s  %s\n", ng, "device_MiB", "limit_MiB",
               "programs", "priority", "threads", "sms", "cgroup");
    for (size_t k = 0; k < ng; k++) {
        char glimit[24] = "-", gpct[16] = "-", gsms[16] = "-";
        if (gs[k].sms)
            snprintf(gsms, sizeof gsms, "%ur", gs[k].sms);
        if (gs[k].limit)
            snprintf(glimit, sizeof glimit, "%.1f", gs[k].limit / 1048576.0);
        if (gs[k].percent)
            snprintf(gpct, sizeof gpct, "%u%%", gs[k].percent);
        APPEND("%12.1f %12s %8u %8s %8s %6s  %s\n", gs[k].bytes / 1048576.0, glimit, gs[k].members,
               gs[k].priority >= 0 ? cumux_priority_name((enum cumux_priority)gs[k].priority) : "-", gpct, gsms,
               gs[k].path);
    }
    return buf;
out:
    if (locked)
        pthread_mutex_unlock(&srv_clients_lock);
    free(buf);
    return NULL;
#undef APPEND
}

ssize_t srv_clients_snapshot(struct srv_client_stat **out)
{
    size_t n = 0, cap = 16;
    struct srv_client_stat *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        if (atomic_load(&c->finished))
            continue;
        if (n == cap) {
            struct srv_client_stat *g = realloc(v, 2 * cap * sizeof *v);
            if (!g)
                break;
            v = g;
            cap *= 2;
        }
        srv_usage_refresh(c);
        struct srv_client_stat *s = &v[n++];
        *s = (struct srv_client_stat){.id = c->id, .uid = (uint32_t)c->uid, .streams = atomic_load(&c->streams.nstreams),
                                      .pid = (int32_t)c->pid, .mem = atomic_load(&c->memory.mem_bytes),
                                      .limit = atomic_load(&c->memory.mem_limit), .pinned = atomic_load(&c->memory.host_bytes),
                                      .launches = atomic_load(&c->usage.launches), .gpu_ns = atomic_load(&c->usage.gpu_ns),
                                      .priority = atomic_load(&c->streams.priority), .sms = atomic_load(&c->placement.sms_now),
                                      .reserved = atomic_load(&c->placement.sms_reserved),
                                      .percent = atomic_load(&c->placement.want_percent)};
        snprintf(s->cmd, sizeof s->cmd, "%s", c->cmd[0] ? c->cmd : "?");
        srv_group_label(c, s->group, sizeof s->group);
        if (atomic_load(&c->named))
            snprintf(s->name, sizeof s->name, "%s", c->name);
    }
    pthread_mutex_unlock(&srv_clients_lock);
    *out = v;
    return (ssize_t)n;
}

/* The status for programs (CUMUX_STATUS_RECORDS in common/proto.h): one record a line, sizes in bytes. */
char *srv_status_records(void)
{
    struct cumux_text t = cumux_text_new(1024);
    uint32_t restarts = 0;
    uint32_t nfaults = srv_fault_history(NULL, &restarts, -1, NULL, NULL);
    cumux_text_printf(&t, "server %d %d %llu %s %u %d %u %u\n", (int)srv_supervisor_pid, (int)getpid(),
              (unsigned long long)srv_default_mem_limit_of(0), cumux_priority_name((enum cumux_priority)srv_default_priority()),
              srv_default_thread_percent() ? srv_default_thread_percent() : 100, srv_gpu_count, nfaults, restarts);
    int i = srv_gpu_served;
    if (i >= 0 && i < srv_gpu_count) {
        size_t f = 0, total = 0;
        uint32_t gfaults = 0, grestarts = 0;
        srv_fault_history(NULL, NULL, i, &gfaults, &grestarts);
        cuCtxSetCurrent(srv_gpus[i].ctx);
        cuMemGetInfo(&f, &total);
        cumux_text_printf(&t, "gpu %d %d %s %d %zu %zu %llu %u %u %s\n", i, (int)getpid(),
                  srv_gpus[i].info.pci_bus_id[0] ? srv_gpus[i].info.pci_bus_id : "-",
                  srv_gpus[i].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], total - f, total,
                  (unsigned long long)srv_default_mem_limit_of(i), gfaults, grestarts, srv_gpus[i].info.name);
    }
    struct srv_client_stat *cs = NULL;
    ssize_t n = srv_clients_snapshot(&cs);
    for (ssize_t k = 0; k < n; k++)
        cumux_text_printf(&t, "client %u %d %d %u %llu %llu %llu %u %llu %llu %s %u %d %u %s =%s %s\n", cs[k].id, i,
                          (int)cs[k].pid, cs[k].uid, (unsigned long long)cs[k].mem, (unsigned long long)cs[k].limit,
                          (unsigned long long)cs[k].pinned, cs[k].streams, (unsigned long long)cs[k].launches,
                          (unsigned long long)cs[k].gpu_ns, cumux_priority_name((enum cumux_priority)cs[k].priority),
                          cs[k].sms, (int)cs[k].reserved, cs[k].percent ? cs[k].percent : 100, cs[k].group,
                          cs[k].name, cs[k].cmd);
    struct srv_group_stat gs[SRV_GROUPS_MAX];
    size_t ng = srv_groups_snapshot(gs, SRV_GROUPS_MAX);
    for (size_t k = 0; k < ng; k++) {
        for (ssize_t j = 0; j < n; j++) /* the live members' GPU time */
            if (!strcmp(cs[j].group, gs[k].path))
                gs[k].gpu_ns += cs[j].gpu_ns;
        cumux_text_printf(&t, "group %d %s %llu %llu %u %s %u %llu %llu %u %s\n", i, gs[k].path, (unsigned long long)gs[k].limit,
                          (unsigned long long)gs[k].bytes, gs[k].members,
                          gs[k].priority >= 0 ? cumux_priority_name((enum cumux_priority)gs[k].priority) : "-",
                          gs[k].percent ? gs[k].percent : 100, (unsigned long long)gs[k].gpu_ns,
                          (unsigned long long)gs[k].peak, gs[k].sms, gs[k].labels[0] ? gs[k].labels : "-");
    }
    free(cs);
    if (n < 0) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
