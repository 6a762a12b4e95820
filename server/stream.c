/* Streams and events of a client. Every real stream is a non-blocking stream of the server's context;
 * the legacy stream's rule is kept by before_op/after_op (objects.c). */

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/priority.h"
#include "server/handlers.h"

/* ---------------------------------------------------------------- streams */

struct srv_stream *stream_new(struct srv_client *c, struct srv_ctx *x, enum srv_stream_kind kind, int priority,
                              CUresult *res)
{
    struct srv_stream *s = calloc(1, sizeof *s);
    if (!s) {
        *res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    use_gpu(c, x->gpu);
    /* The program's priority, placed in its class's band (common/priority.c); the program still sees its
     * own (the shim keeps it). */
    const struct cumux_device_info *d = &srv_gpus[x->gpu].info;
    int hw = cumux_priority_stream((enum cumux_priority)atomic_load(&c->streams.priority), priority,
                                   d->stream_priority_least, d->stream_priority_greatest);
    cumux_debugf("client %u: a stream of priority %d runs at %d (%s)", c->id, priority, hw,
                 cumux_priority_name((enum cumux_priority)atomic_load(&c->streams.priority)));
    s->ctx = x;
    s->hw_priority = hw;
    *res = srv_place_new_stream(c, x->gpu, hw, &s->cu, &s->placed, &s->placed_gen);
    if (*res != CUDA_SUCCESS) {
        free(s);
        return NULL;
    }
    s->ctx = x;
    s->kind = kind;
    s->seen_epoch = x->epoch;
    s->handle = handle_new(c, OBJ_STREAM, s);
    if (!s->handle) {
        cuStreamDestroy(s->cu);
        srv_place_stream_gone(s);
        free(s);
        *res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    s->next_in_ctx = x->streams;
    x->streams = s;
    atomic_fetch_add(&c->streams.nstreams, 1);
    return s;
}

/* cuStreamDestroy returns at once and the stream's work runs on: a graph's host node, a kernel writing the
 * client's memory. The client's end frees those (graph.c, memory.c) once its streams are done, so the
 * streams it destroyed leave an event behind to wait for (a fuzzing finding: a graph's host-node job was
 * freed while a launch on a destroyed stream still had to run it). Tails already passed are dropped here. */
static void keep_tail(struct srv_client *c, struct srv_stream *s)
{
    for (uint32_t i = 0; i < c->streams.ntails;) {
        use_gpu(c, c->streams.tails[i].gpu);
        if (cuEventQuery(c->streams.tails[i].done) == CUDA_ERROR_NOT_READY) {
            i++;
            continue;
        }
        cuEventDestroy(c->streams.tails[i].done);
        c->streams.tails[i] = c->streams.tails[--c->streams.ntails];
    }
    use_gpu(c, s->ctx->gpu);
    if (c->streams.ntails >= 4096) {
        cuStreamSynchronize(s->cu); /* bounded: a client that leaves this much running waits for it itself */
        return;
    }
    if (c->streams.ntails == c->streams.captails) {
        uint32_t cap = c->streams.captails ? c->streams.captails * 2 : 8;
        struct srv_stream_tail *t = realloc(c->streams.tails, cap * sizeof *t);
        if (!t) {
            cuStreamSynchronize(s->cu); /* no room to remember it: wait for it now */
            return;
        }
        c->streams.tails = t;
        c->streams.captails = cap;
    }
    CUevent e;
    if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        cuStreamSynchronize(s->cu);
        return;
    }
    if (cuEventRecord(e, s->cu) != CUDA_SUCCESS) {
        cuEventDestroy(e);
        cuStreamSynchronize(s->cu);
        return;
    }
    c->streams.tails[c->streams.ntails++] = (struct srv_stream_tail){e, s->ctx->gpu};
}

void srv_stream_tails_wait(struct srv_client *c)
{
    for (uint32_t i = 0; i < c->streams.ntails; i++) {
        use_gpu(c, c->streams.tails[i].gpu);
        cuEventSynchronize(c->streams.tails[i].done);
        cuEventDestroy(c->streams.tails[i].done);
    }
    free(c->streams.tails);
    c->streams.tails = NULL;
    c->streams.ntails = c->streams.captails = 0;
}

void stream_free(struct srv_client *c, struct srv_stream *s)
{
    srv_stream_confirmed(s); /* its work goes on without it: what is lost with it at a fault is not told */
    struct srv_ctx *x = s->ctx;
    use_gpu(c, x->gpu);
    if (s->dirty) {
        /* Its work still orders later legacy-stream work: hand that over before it goes. */
        for (size_t i = 0; i < x->ndirty; i++) {
            if (x->dirty[i] == s) {
                x->dirty[i] = x->dirty[--x->ndirty];
                break;
            }
        }
        if (x->legacy && x->legacy != s) {
            cuEventRecord(x->join_event, s->cu);
            cuStreamWaitEvent(x->legacy->cu, x->join_event, 0);
        }
    }
    for (struct srv_stream **p = &x->streams; *p; p = &(*p)->next_in_ctx) {
        if (*p == s) {
            *p = s->next_in_ctx;
            break;
        }
    }
    keep_tail(c, s);
    cuStreamDestroy(s->cu);
    srv_place_stream_gone(s);
    srv_marks_stream_gone(s);
    handle_drop(c, s->handle);
    atomic_fetch_sub(&c->streams.nstreams, 1);
    free(s);
}

CUresult op_stream_create(struct srv_client *c, const struct cumux_stream_create *m, struct srv_ctx *ctx,
                          uint8_t *out, uint32_t *out_len)
{
    if (m->flags & ~(uint32_t)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    struct srv_stream *s = stream_new(c, ctx, (m->flags & CU_STREAM_NON_BLOCKING) ? STREAM_NONBLOCKING : STREAM_BLOCKING,
                                      m->priority, &r);
    if (!s)
        return r;
    return reply_u64(out, out_len, s->handle);
}

CUresult op_stream_destroy(struct srv_client *c, struct srv_stream *stream)
{
    if (stream->kind == STREAM_LEGACY)
        return CUDA_ERROR_INVALID_HANDLE;
    srv_capture_abandon(c, stream);
    stream_free(c, stream);
    return CUDA_SUCCESS;
}

/* A stream the driver found idle, with no command of the client since that could have queued work on it,
 * is idle still (its client's commands are the only source of its work, and they come in order): the
 * answer needs no driver call (issue 12: round trips). */
bool srv_stream_known_idle(struct srv_client *c, struct srv_stream *s)
{
    return s->idle_gen == c->obj.work_gen && !s->capturing;
}

CUresult op_stream_sync(struct srv_client *c, struct srv_stream *stream)
{
    if (srv_stream_known_idle(c, stream))
        return take_pending(c, CUDA_SUCCESS);
    srv_marks_asked(c, stream);
    if (srv_marks_idle(c, stream)) {
        srv_usage_synced(c);
        return take_pending(c, CUDA_SUCCESS);
    }
    CHECK(before_op(stream)); /* the legacy stream also waits for blocking streams' earlier work */
    CUresult r = cuStreamSynchronize(stream->cu);
    if (r == CUDA_SUCCESS) {
        srv_usage_synced(c);
        stream->idle_gen = c->obj.work_gen;
        srv_stream_confirmed(stream);
    }
    return take_pending(c, r);
}

CUresult op_stream_query(struct srv_client *c, struct srv_stream *stream)
{
    if (srv_stream_known_idle(c, stream))
        return CUDA_SUCCESS;
    srv_marks_asked(c, stream);
    if (srv_marks_idle(c, stream))
        return CUDA_SUCCESS;
    CUresult m = srv_marks_query(c, stream);
    if (m != CUDA_ERROR_NOT_FOUND)
        return m;
    CHECK(before_op(stream));
    CUresult r = cuStreamQuery(stream->cu);
    if (r == CUDA_SUCCESS) {
        stream->idle_gen = c->obj.work_gen;
        srv_stream_confirmed(stream);
    }
    return r;
}

CUresult op_stream_wait_event(struct srv_client *c, const struct cumux_stream_wait_event *m,
                              struct srv_stream *stream, struct srv_event *event)
{
    /* Only an external wait becomes a node that names the event (a plain one joins the capture). */
    if ((m->flags & CU_EVENT_WAIT_EXTERNAL) && srv_stream_capturing(c, stream))
        event->in_graph = true;
    CHECK(before_op(stream));
    CUresult r = cuStreamWaitEvent(stream->cu, event->cu, m->flags);
    after_op(stream);
    return r;
}

/* One stream memory operation on the client's own memory: device memory, or pinned host memory by the
 * server's address (the client's shared memory: the GPU reads and writes the client's, nothing else). A
 * wait that is never satisfied holds only the client's stream, as a kernel that never ends would. */
CUresult op_stream_mem_op(struct srv_client *c, const struct cumux_stream_mem_op *m, struct srv_stream *stream)
{
    uint64_t size = m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || m->op == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
    CUstreamBatchMemOpParams p;
    memset(&p, 0, sizeof p);
    p.operation = (CUstreamBatchMemOpType)m->op;
    switch (m->op) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        if (m->address % size || (!dev_ok(c, m->address, size) && !host_ok(c, m->address, size)))
            return CUDA_ERROR_INVALID_VALUE;
        /* Flags the driver knows, so that its refusal below means the memory (memop_kernels.c). */
        if (m->op == CU_STREAM_MEM_OP_WAIT_VALUE_32 || m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64
                ? m->flags & ~(3u | CU_STREAM_WAIT_VALUE_FLUSH)
                : m->flags & ~(uint32_t)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
            return CUDA_ERROR_INVALID_VALUE;
        /* The wait and write layouts are the same: operation, address, value, flags. */
        p.waitValue.address = m->address;
        p.waitValue.value64 = size == 8 ? m->value : (uint32_t)m->value;
        p.waitValue.flags = m->flags;
        if (m->op == CU_STREAM_MEM_OP_WAIT_VALUE_32 || m->op == CU_STREAM_MEM_OP_WAIT_VALUE_64)
            CHECK(srv_wait_note(c, stream->ctx->gpu, m->address, (uint8_t)size, p.waitValue.value64, m->flags));
        break;
    case CU_STREAM_MEM_OP_BARRIER:
        p.memoryBarrier.flags = m->flags;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    CHECK(before_op(stream));
    /* cuMemAlloc's memory is pool memory here: where the driver refuses, the server's kernels do it. Not
     * in a capture: the client's graph would hold a kernel node of the server's. */
    const struct cumux_range *range = cumux_ranges_find(&c->memory.dev_ranges, m->address);
    bool pool = m->op != CU_STREAM_MEM_OP_BARRIER && range && range->tag == RANGE_ALLOC &&
                !srv_stream_capturing(c, stream);
    CUresult r = srv_memop_run(stream->ctx->gpu, stream->cu, &p, pool);
    after_op(stream);
    return r;
}

/* ---------------------------------------------------------------- events */

CUresult op_event_create(struct srv_client *c, const struct cumux_event_create *m, struct srv_ctx *ctx,
                         uint8_t *out, uint32_t *out_len)
{
    if (m->flags & ~(uint32_t)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if ((m->flags & CU_EVENT_INTERPROCESS) && !(m->flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE; /* as CUDA: interprocess events take no timings */
    struct srv_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, ctx->gpu);
    /* Every client of this GPU is in this one context: sharing among them needs no interprocess event of
     * the driver's; sharing with another GPU's worker (another process) does (ipc.c). */
    unsigned flags = srv_gpu_count > 1 ? m->flags : m->flags & ~(unsigned)CU_EVENT_INTERPROCESS;
    CUresult r = cuEventCreate(&e->cu, flags);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->ctx = ctx;
    e->flags = m->flags;
    e->handle = handle_new(c, OBJ_EVENT, e);
    if (!e->handle) {
        cuEventDestroy(e->cu);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, e->handle);
}

static void event_destroy(struct srv_event *e)
{
    if (e->ipc)
        srv_ipc_event_drop(e->ipc);
    else
        cuEventDestroy(e->cu);
    free(e);
}

void event_free(struct srv_client *c, struct srv_event *e)
{
    handle_drop(c, e->handle);
    if (e->in_graph && !c->graphs.graphs_released) {
        e->next_parked = c->graphs.parked_events;
        c->graphs.parked_events = e;
        return;
    }
    event_destroy(e);
}

void srv_events_unpark(struct srv_client *c)
{
    c->graphs.graphs_released = true;
    while (c->graphs.parked_events) {
        struct srv_event *e = c->graphs.parked_events;
        c->graphs.parked_events = e->next_parked;
        event_destroy(e);
    }
}

CUresult op_event_destroy(struct srv_client *c, struct srv_event *event)
{
    event_free(c, event);
    return CUDA_SUCCESS;
}

CUresult op_event_record(struct srv_client *c, const struct cumux_event_record *m, struct srv_event *event,
                         struct srv_stream *stream)
{
    /* Only an external record becomes a node that names the event (checked first: records are frequent). */
    if ((m->flags & CU_EVENT_RECORD_EXTERNAL) && srv_stream_capturing(c, stream))
        event->in_graph = true;
    CHECK(before_op(stream));
    CUresult r = m->flags ? cuEventRecordWithFlags(event->cu, stream->cu, m->flags) : cuEventRecord(event->cu, stream->cu);
    after_op(stream);
    if (!(event->flags & CU_EVENT_DISABLE_TIMING) && !stream->capturing) {
        c->marks.timing_window = true;
        c->marks.timing_quiet = SRV_TIMING_QUIET_LAUNCHES;
    }
    return r;
}

CUresult op_event_query(struct srv_client *c, struct srv_event *event)
{
    (void)c;
    return cuEventQuery(event->cu);
}

CUresult op_event_sync(struct srv_client *c, struct srv_event *event)
{
    return take_pending(c, cuEventSynchronize(event->cu));
}

CUresult op_event_elapsed(struct srv_client *c, struct srv_event *start, struct srv_event *end, uint8_t *out,
                          uint32_t *out_len)
{
    (void)c;
    struct cumux_elapsed_reply rep = {0};
    CHECK(cuEventElapsedTime(&rep.ms, start->cu, end->cu));
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}


/* A client's end: its in-flight work finishes first, since it may still use what is freed next. */
void srv_streams_drain(struct srv_client *c)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s) {
            use_gpu(c, s->ctx->gpu);
            cuStreamSynchronize(s->cu);
        }
    }
}
