/* Running a client's commands: validation of every message, the table from command to handler, handles,
 * the legacy-stream rule, and the cleanup of a client that is gone. The handlers are in one file per
 * concern: context.c, memory.c, copy.c, module.c, launch.c, graph.c. */

#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "server/handlers.h"
#define SRV_ROUTES_IMPL
#include "server/generated/routes.h"

/* ---------------------------------------------------------------- init */

CUresult op_init(struct srv_client *c, uint8_t *out, uint32_t *out_len)
{
    struct cumux_init_reply rep = {.driver_version = srv_driver_version, .device_count = srv_gpu_count,
                                   .client_id = c->id};
    memcpy(out, &rep, sizeof rep);
    uint64_t limit = atomic_load(&c->mem_limit); /* a client with a limit sees a GPU of that size */
    for (int i = 0; i < srv_gpu_count; i++) {
        struct cumux_device_info info = srv_gpus[i].info;
        if (limit && limit < info.total_mem)
            info.total_mem = limit;
        memcpy(out + sizeof rep + (size_t)i * sizeof info, &info, sizeof info);
    }
    *out_len = (uint32_t)(sizeof rep + (size_t)srv_gpu_count * sizeof(struct cumux_device_info));
    return CUDA_SUCCESS;
}

CUresult op_client_info(struct srv_client *c, const struct cumux_client_info *m)
{
    /* Its name, once: printable, without the characters that quote it in /metrics and the records. */
    if (!atomic_load(&c->named)) {
        size_t i = 0;
        for (; i + 1 < sizeof c->name && i < sizeof m->name && m->name[i]; i++) {
            unsigned char ch = (unsigned char)m->name[i];
            c->name[i] = ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\' ? '_' : (char)ch;
        }
        c->name[i] = 0;
        atomic_store(&c->named, true);
    }
    /* Its priority class, if it asked for one (else the server's default, set when it connected). */
    if (m->priority >= CUMUX_PRIORITY_LOW && m->priority <= CUMUX_PRIORITY_HIGH)
        atomic_store(&c->priority, (int)m->priority);
    /* Its SMs: a reservation, a thread percentage (else the server's default). A reservation that cannot
     * be had is logged, and the program runs on the shared SMs. */
    uint32_t pct = m->thread_percent ? m->thread_percent : srv_default_thread_percent();
    if (m->sms || (pct && pct < 100)) {
        char why[256];
        int rc = srv_placement_want(c, m->sms, pct, why, sizeof why);
        cumux_logf("client %u (pid %d): %s%s", c->id, (int)c->pid, rc ? "its SMs as asked cannot be had: " : "",
                   why);
    }
    return CUDA_SUCCESS;
}

_Static_assert(sizeof(struct cumux_init_reply) + CUMUX_MAX_DEVICES * sizeof(struct cumux_device_info) <= CUMUX_REPLY_DATA,
               "init reply must fit a reply slot");

/* ---------------------------------------------------------------- dispatch */

int srv_dispatch(struct srv_client *c, void *msg, uint32_t size)
{
    const struct cumux_msg_hdr *hdr = msg;
    if (hdr->op == CUMUX_OP_PAD || hdr->op >= CUMUX_OP_COUNT)
        return -1;
    uint32_t body_len = size - (uint32_t)sizeof *hdr;
    if (body_len < srv_op_shape[hdr->op].body)
        return -1;
    bool answered = hdr->reply != CUMUX_NO_REPLY;
    if (answered && hdr->reply >= CUMUX_REPLY_SLOTS)
        return -1;
    uint8_t direction = srv_op_shape[hdr->op].direction; /* 0 answered, 1 one-way, 2 either */
    if ((direction == 1 && answered) || (direction == 0 && !answered))
        return -1;
    const void *body = hdr + 1;
    const uint8_t *payload = (const uint8_t *)body + srv_op_shape[hdr->op].body;
    uint32_t payload_len = body_len - srv_op_shape[hdr->op].body;

    /* Handlers write their reply here, in server memory, never straight into the reply slot: the slot is
     * shared memory the client may rewrite while a handler runs, so nothing there may be read back. */
    static __thread uint8_t scratch[CUMUX_REPLY_DATA];
    struct cumux_reply_slot *slot = answered ? &c->shm->replies[hdr->reply] : NULL;
    uint8_t *out = scratch;
    uint32_t out_len = 0;
    CUresult r;
    /* Anything but a question of completion may queue work: streams known idle before are not now. */
    if (hdr->op != CUMUX_OP_STREAM_QUERY && hdr->op != CUMUX_OP_STREAM_SYNC && hdr->op != CUMUX_OP_CTX_SYNC)
        c->work_gen++;
    if (srv_route(c, hdr->op, body, payload, payload_len, answered, out, &out_len, &r) < 0)
        return -1;
    if (slot) {
        if (r != CUDA_SUCCESS)
            out_len = 0;
        if (srv_fault_is_fatal(r))
            r = srv_fault_answer(c, r); /* never returns for a client that comes back */
        else if (r == CUDA_SUCCESS && srv_coredump_path[0])
            srv_fault_hold_if_dumping(); /* a success the driver gives while it dumps a fault is not one */
        cumux_reply_post(slot, r, out, out_len);
    } else if (r != CUDA_SUCCESS && c->pending_error == CUDA_SUCCESS) {
        c->pending_error = r; /* reported by the next synchronizing call (invariant 2) */
    }
    return 0;
}

/* ---------------------------------------------------------------- cleanup */

void srv_client_release_all(struct srv_client *c)
{
    srv_hostfn_release(c); /* no stream waits any more for a host function the client will not run */
    srv_waits_release(c);  /* nor for memory the client will not write */
    srv_staging_flush(c, true);
    /* Captures left running end first, their graphs destroyed (graph.c): a synchronize of a capturing
     * stream fails at once, without waiting for the work queued before the capture began (a fuzzing
     * finding: a graph's host node ran after its job was freed). */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s)
            srv_capture_abandon(c, s);
    }
    /* Let in-flight work finish first: it may still use the memory freed below. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s) {
            use_gpu(c, s->ctx->gpu);
            cuStreamSynchronize(s->cu);
        }
    }
    srv_stream_tails_wait(c); /* and that of the streams it destroyed */
    srv_kprof_release(c); /* its work is done: the last timings can be read */
    srv_usage_departed(c);
    srv_usage_release(c);
    srv_graph_release_all(c); /* graphs name the client's kernels and memory: before those go */
    srv_events_unpark(c);     /* and the events their nodes may name */
    srv_array_release_all(c);
    srv_link_release_all(c);
    srv_vmm_release_all(c);
    srv_ipc_release_all(c); /* before its allocations go: others may hold some of them open */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (mod)
            module_free(c, h, mod);
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_ctx *x = handle_get(c, h, OBJ_CTX);
        if (x)
            ctx_free(c, x);
    }
    srv_stream_tails_wait(c); /* the streams just destroyed with their contexts (done already: synchronized) */
    srv_limits_release(c);
    while (c->dev_ranges.n) {
        struct cumux_range r = c->dev_ranges.v[c->dev_ranges.n - 1];
        cumux_ranges_remove(&c->dev_ranges, r.base, NULL);
        if (r.tag == RANGE_ALLOC) {
            CUstream ms;
            if (!srv_chunks_in_arena(r.base) && mem_stream(c, (int)r.extra, &ms) == CUDA_SUCCESS)
                cuMemFreeAsync(r.base, ms); /* chunks go whole, below */
            srv_mem_uncharge(c, r.size);
        }
    }
    cumux_ranges_free(&c->dev_ranges);
    for (int g = 0; g < srv_gpu_count; g++) {
        if (c->alloc_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->alloc_stream[g]);
            cuStreamDestroy(c->alloc_stream[g]);
        }
        if (c->mem_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->mem_stream[g]);
            cuStreamDestroy(c->mem_stream[g]);
            /* Give the freed memory back to the device now, not at the pool's leisure. */
            if (c->default_pool[g])
                cuMemPoolTrimTo(c->default_pool[g]->pool, 0);
        }
    }
    srv_chunks_release_all(c); /* after its streams were synchronized: nothing runs on its chunks */
    if (c->mem_event)
        cuEventDestroy(c->mem_event);
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_pool *p = handle_get(c, h, OBJ_POOL);
        if (p)
            pool_free(c, p);
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        if (c->handles[h - 1].type != OBJ_NONE) /* anything left is a bug: say so rather than leak quietly */
            cumux_logf("client %u: handle %u of type %d left after cleanup", c->id, h, c->handles[h - 1].type);
    }
    free(c->handles);
    c->handles = NULL;
    c->nhandles = c->caphandles = 0;
    while (c->host_ranges.n)
        host_release(c, c->host_ranges.v[0].base);
    cumux_ranges_free(&c->host_ranges);
    use_gpu(c, 0);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        if (c->stage_event[i])
            cuEventDestroy(c->stage_event[i]);
    srv_placement_release(c); /* after its streams: their green contexts go, and its reservation */
    /* The staging buffers stay mapped until the reaper has unregistered them (srv_client_free). */
}

