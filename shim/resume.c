/* After the GPU worker failed for another program's fault, the program comes back to the worker that took
 * over (connection.c) and what it held is made again there (docs/faults.md, issue 10). So far: its contexts
 * (primary and its own) and their legacy streams, its pools (default and its own), and its device memory, which the new worker has
 * kept at the same addresses (server/chunks.c): the shim tells which allocations it holds, and the server
 * takes back those that lie in the chunks of this program; then the streams, events, modules, libraries
 * and functions (with the attributes it set), its pinned host memory, and its graphs and graph instances
 * (graph_resume.c), with the limits it set on its contexts (context.c). A program holding arrays, textures
 * or surfaces (array.c), other programs' memory opened through IPC (ipc.c), or the address of a module
 * global (module.c), does not come back; its interprocess events are refused from then on (stream.c).
 * Globals of its modules are the new worker's, with the image's values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/log.h"
#include "shim/client.h"
#include "shim/graph.h"

/* The allocations, in batches that fit a message. */
static CUresult resume_memory(void)
{
    enum { BATCH = 1024 };
    struct {
        struct cumux_resume_memory m;
        struct cumux_resume_range r[BATCH];
    } *msg = malloc(sizeof *msg);
    if (!msg)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t restored = 0, asked = 0;
    CUresult r = CUDA_SUCCESS;
    pthread_rwlock_rdlock(&shim.ranges_lock);
    size_t i = 0, n = shim.dev_ranges.n;
    while (r == CUDA_SUCCESS && (i < n || asked == 0)) {
        uint32_t k = 0;
        for (; i < n && k < BATCH; i++) {
            const struct cumux_range *g = &shim.dev_ranges.v[i];
            if (g->tag >> 32) /* a module global, IPC, VMM or graph memory: not an allocation of its own */
                continue;
            msg->r[k++] = (struct cumux_resume_range){.ptr = g->base, .size = g->size, .gpu = (int32_t)(g->tag - 1)};
        }
        msg->m = (struct cumux_resume_memory){.count = k};
        uint64_t got = 0;
        uint32_t len = 0;
        r = shim_call(CUMUX_OP_RESUME_MEMORY, msg, sizeof msg->m + k * sizeof msg->r[0], &got, sizeof got, &len);
        restored += r == CUDA_SUCCESS && len == sizeof got ? got : 0;
        asked += k ? k : 1;
        if (i >= n)
            break;
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
    free(msg);
    if (r == CUDA_SUCCESS)
        cumux_logf("after the worker failed: %llu allocation(s) of device memory kept", (unsigned long long)restored);
    return r;
}

static double ms_since(uint64_t *t)
{
    uint64_t now = cumux_now_ns(), d = now - *t;
    *t = now;
    return d / 1e6;
}

/* What keeps a program from coming back: objects whose state or address was the failed worker's alone. */
static const struct {
    unsigned (*count)(void);
    const char *what; /* takes the count */
} keeps_away[] = {
    {shim_arrays_live, "holds %u array(s), texture or surface object(s), which cannot come back (their contents, "
                       "and a texture's value, were the failed worker's)"},
    {shim_module_globals_asked, "asked for the address of a module global %u time(s); a module loaded again has "
                                "its globals elsewhere, with the image's values"},
    {shim_ipc_opened_live, "holds %u allocation(s) of other programs open (CUDA IPC), which the new worker does not "
                           "know of"},
};

static CUresult rebuild(const struct shim_lost_work *lw)
{
    for (size_t i = 0; i < sizeof keeps_away / sizeof keeps_away[0]; i++) {
        unsigned n = keeps_away[i].count();
        if (n) {
            char why[256];
            snprintf(why, sizeof why, keeps_away[i].what, n);
            cumux_logf("after the worker failed: this program %s: it does not come back", why);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    /* Which objects lost work, read while they still hold the failed worker's handles. */
    uint64_t unclaimed[CUMUX_LOST_STREAM_WORDS];
    memcpy(unclaimed, lw->streams, sizeof unclaimed);
    if (lw->any) {
        shim_contexts_note_lost(lw, unclaimed);
        shim_streams_note_lost(lw, unclaimed);
    }
    /* Each step's time goes in the log: coming back must take milliseconds (docs/faults.md). */
    uint64_t t = cumux_now_ns();
    double ms[7] = {0};
    CUresult r = shim_contexts_rebind();
    ms[0] = ms_since(&t);
    if (r == CUDA_SUCCESS)
        r = shim_pools_rebind();
    ms[1] = ms_since(&t);
    if (r == CUDA_SUCCESS)
        r = resume_memory();
    ms[2] = ms_since(&t);
    unsigned streams = 0, events = 0, modules = 0, functions = 0, host = 0;
    if (r == CUDA_SUCCESS)
        r = shim_host_rebind(&host);
    ms[3] = ms_since(&t);
    if (r == CUDA_SUCCESS)
        r = shim_streams_rebind(&streams, &events);
    ms[4] = ms_since(&t);
    if (r == CUDA_SUCCESS)
        r = shim_modules_rebind(&modules, &functions);
    ms[5] = ms_since(&t);
    unsigned execs = 0, execs_lost = 0, graphs = 0, graphs_lost = 0;
    if (r == CUDA_SUCCESS) /* last: graphs use the functions, events and memory made again above */
        r = shim_graph_execs_rebind(&execs, &execs_lost, &graphs, &graphs_lost);
    ms[6] = ms_since(&t);
    if (r == CUDA_SUCCESS && lw->any) {
        /* The epoch moves on: what lost work says so once; what lost none stays caught up. Bits left
         * unclaimed are streams of no object here: per-thread streams, which are spared only without any. */
        bool ptds_spared = !lw->all;
        for (unsigned i = 0; i < CUMUX_LOST_STREAM_WORDS; i++)
            ptds_spared &= unclaimed[i] == 0;
        uint32_t next = atomic_load(&shim_lost_epoch) + 1;
        shim_streams_spare(next);
        shim_contexts_spare(next, ptds_spared);
        atomic_store(&shim_lost_epoch, next);
    }
    if (r == CUDA_SUCCESS)
        cumux_logf("after the worker failed: made again %u stream(s), %u event(s), %u module(s) and librar(ies), "
                   "%u function(s), %u graph(s), %u graph instance(s); %u range(s) of pinned host memory shared "
                   "again (ms: contexts %.1f, pools %.1f, memory %.1f, host %.1f, streams %.1f, modules %.1f, "
                   "graphs %.1f)",
                   streams, events, modules, functions, graphs, execs, host, ms[0], ms[1], ms[2], ms[3], ms[4],
                   ms[5], ms[6]);
    return r;
}

/* Before the program binds to a GPU it holds nothing of a GPU's (no context, pool, memory, stream): what
 * it may have made (libraries, graphs) is made again with the worker of the GPU it binds to. */
static CUresult rebuild_after_move(void)
{
    unsigned n1 = 0, n2 = 0, n3 = 0, n4 = 0;
    CUresult r = shim_contexts_rebind();
    if (r == CUDA_SUCCESS)
        r = shim_pools_rebind();
    if (r == CUDA_SUCCESS)
        r = shim_streams_rebind(&n1, &n2);
    if (r == CUDA_SUCCESS)
        r = shim_modules_rebind(&n1, &n2);
    if (r == CUDA_SUCCESS)
        r = shim_graph_execs_rebind(&n1, &n2, &n3, &n4);
    return r;
}

__attribute__((constructor)) static void register_rebuild(void)
{
    shim_set_rebuild(rebuild, rebuild_after_move);
}
