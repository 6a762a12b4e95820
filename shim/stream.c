/* Streams and events. Work submitted to them travels one way; queries and synchronizations are round trips,
 * except about a stream known idle (below). */
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

/* Captures of this process begun and not yet ended (graph.c). A begin counts before it is sent, so that a
 * query made after the begin returned cannot miss it; an end that succeeded uncounts it. After an end that
 * failed, which streams left the capture is the server's to say, and every query asks it from then on.
 * While no capture is open no stream can be capturing: a stream joins a capture only by waiting for an
 * event recorded inside one. PyTorch asks at many of its operations; natively the answer is a lookup. */
static _Atomic int captures_open;
static _Atomic bool captures_unsure;

void shim_capture_counted(int delta) { atomic_fetch_add(&captures_open, delta); }
void shim_capture_unsure(void) { atomic_store(&captures_unsure, true); }
bool shim_capture_possible(void) { return atomic_load(&captures_open) > 0 || atomic_load(&captures_unsure); }

CUresult shim_capture_status(uint32_t stream, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    if (!shim_capture_possible()) {
        /* No capture open in this process: no stream can be capturing (no round trip). */
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (id)
            *id = 0;
        return CUDA_SUCCESS;
    }
    struct cumux_capture_info rep;
    CUresult r = shim_op_capture_info(stream, &rep);
    if (r == CUDA_SUCCESS) {
        *status = (CUstreamCaptureStatus)rep.status;
        if (id)
            *id = rep.id;
    }
    return r;
}

/* Every stream object the program made, to make them again after a resume. */
static struct shim_list all_streams = SHIM_LIST_INIT;

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    /* Clamp to the device's range, as the driver does. */
    const struct cumux_device_info *d = &shim.devices[c->device];
    if (priority > d->stream_priority_least)
        priority = d->stream_priority_least;
    if (priority < d->stream_priority_greatest)
        priority = d->stream_priority_greatest;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t handle;
    r = shim_op_stream_create(c->handle, flags, priority, &handle);
    if (r != CUDA_SUCCESS) {
        free(s);
        return r;
    }
    s->magic = SHIM_MAGIC_STREAM;
    s->handle = (uint32_t)handle;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority;
    s->id = atomic_fetch_add(&shim_next_stream_id, 1);
    atomic_store(&s->lost, atomic_load(&shim_lost_epoch));
    shim_list_add(&all_streams, s);
    *ph = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
    return stream_create(ph, flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    return stream_create(ph, flags, priority);
}

static bool is_real_stream(CUstream s)
{
    return s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
}

CUresult cuStreamDestroy(CUstream s)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!is_real_stream(s) || s->magic != SHIM_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    s->magic = SHIM_MAGIC_DEAD; /* the object stays allocated so that stale handles fail their check */
    return shim_op_stream_destroy(s->handle);
}

/* What is known of h's completion: a stream's own, the legacy stream's in its context; NULL for the
 * per-thread default stream (asked every time). */
static struct shim_idle *idle_of(CUstream h, struct CUctx_st *ctx)
{
    if (h == NULL)
        h = cumux_tls_ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_PER_THREAD)
        return NULL;
    return h == CU_STREAM_LEGACY ? &ctx->legacy_idle : &h->idle;
}

/* A stream the server found idle (or synchronized) stays so while this process sends no work: the
 * question is answered here, with no round trip (issue 12). Errors of earlier one-way work were reported
 * by the synchronize that made the answer; a query's answer is reused for queries only. */
CUresult cuStreamSynchronize(CUstream h)
{
    uint32_t s;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(h, &s, &ctx);
    if (r == CUDA_SUCCESS)
        r = shim_stream_lost(h, ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_idle *known = idle_of(h, ctx);
    if (known && shim_idle_still(atomic_load(&known->sync_seq)))
        return CUDA_SUCCESS;
    if (shim_marks_stream_idle(s))
        return CUDA_SUCCESS;
    r = shim_op_stream_sync(s);
    if (r == CUDA_ERROR_LAUNCH_FAILED) /* in flight at a fault (connection.c): said */
        shim_lost_said(shim_stream_lost_word(h, ctx));
    if (r == CUDA_SUCCESS && known) {
        atomic_store(&known->sync_seq, shim_question_seq + 1);
        atomic_store(&known->query_seq, shim_question_seq + 1);
    }
    return r;
}

CUresult cuStreamQuery(CUstream h)
{
    uint32_t s;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(h, &s, &ctx);
    if (r == CUDA_SUCCESS)
        r = shim_stream_lost(h, ctx);
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_idle *known = idle_of(h, ctx);
    if (known && (shim_idle_still(atomic_load(&known->query_seq)) || shim_idle_still(atomic_load(&known->sync_seq))))
        return CUDA_SUCCESS;
    if (shim_marks_stream_idle(s))
        return CUDA_SUCCESS;
    r = shim_op_stream_query(s);
    if (r == CUDA_SUCCESS && known)
        atomic_store(&known->query_seq, shim_question_seq + 1);
    return r;
}

CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!e || e->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    if (CUMUX_HANDLE_GPU(e->handle) != CUMUX_HANDLE_GPU(s)) {
        /* An event of another GPU, whose worker is another process: the wait is done here, before the
         * stream's later work is sent (the caller's thread waits, which CUDA's does not). */
        return cuEventSynchronize(e);
    }
    return shim_op_stream_wait_event(s, e->handle, flags);
}

/* The stream object behind h, or NULL for the legacy and per-thread default streams (after checking
 * that a context is current, as the driver does for them). */
static CUresult stream_object(CUstream h, struct CUstream_st **out)
{
    *out = NULL;
    if (!is_real_stream(h)) {
        struct CUctx_st *c;
        return shim_need_ctx(&c);
    }
    if (h->magic != SHIM_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = h;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetFlags(CUstream h, unsigned int *flags)
{
    struct CUstream_st *s;
    CUresult r = flags ? stream_object(h, &s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *flags = s ? s->flags : 0;
    return r;
}

CUresult cuStreamGetPriority(CUstream h, int *priority)
{
    struct CUstream_st *s;
    CUresult r = priority ? stream_object(h, &s) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *priority = s ? s->priority : 0;
    return r;
}

CUresult cuStreamGetId(CUstream h, unsigned long long *id)
{
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = stream_object(h, &s);
    if (r != CUDA_SUCCESS || s) {
        if (s)
            *id = s->id;
        return r;
    }
    return shim_default_stream_id(h, id); /* ids are never reused, as the driver's */
}

CUresult cuStreamGetCtx(CUstream h, CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t s;
    struct CUctx_st *c = NULL;
    CUresult r = shim_resolve_stream(h, &s, &c);
    if (r == CUDA_SUCCESS)
        *pctx = c;
    return r;
}

/* cumux has no green contexts: a stream's green context is always NULL. */
CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *green)
{
    if (!pctx || !green)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuStreamGetCtx(h, pctx);
    if (r == CUDA_SUCCESS)
        *green = NULL;
    return r;
}

CUresult cuStreamGetDevice(CUstream h, CUdevice *dev)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t s;
    struct CUctx_st *c = NULL;
    CUresult r = shim_resolve_stream(h, &s, &c);
    if (r == CUDA_SUCCESS)
        *dev = c->device;
    return r;
}

/* ---- events ---- */
CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE; /* interprocess events take no timings */
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t handle;
    r = shim_op_event_create(c->handle, flags, &handle);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->magic = SHIM_MAGIC_EVENT;
    e->handle = (uint32_t)handle;
    e->ctx = c;
    e->flags = flags;
    atomic_store(&e->lost, atomic_load(&shim_lost_epoch));
    shim_event_remember(e);
    *ph = e;
    return CUDA_SUCCESS;
}

/* Every event object by its server handle (an event node names its event by handle). Event objects are
 * never freed (a destroyed one is marked dead), so the table holds no dangling pointer. */
static struct shim_table events_by_handle;
static pthread_mutex_t event_table_lock = PTHREAD_MUTEX_INITIALIZER;

void shim_event_remember(struct CUevent_st *e)
{
    pthread_mutex_lock(&event_table_lock);
    void **slot = shim_table_slot(&events_by_handle, e->handle);
    if (slot)
        *slot = e;
    pthread_mutex_unlock(&event_table_lock);
}

struct CUevent_st *shim_event_of(uint32_t handle)
{
    pthread_mutex_lock(&event_table_lock);
    struct CUevent_st *e = shim_table_get(&events_by_handle, handle);
    pthread_mutex_unlock(&event_table_lock);
    return e && e->magic == SHIM_MAGIC_EVENT && e->handle == handle ? e : NULL;
}

CUresult cuEventDestroy(CUevent e)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!e || e->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    e->magic = SHIM_MAGIC_DEAD;
    return shim_op_event_destroy(e->handle);
}

static CUresult event_record(CUevent e, CUstream h, unsigned flags)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!e || e->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&e->recorded_on, s); /* at a fault, it lost its work if that stream did */
    r = shim_op_event_record(e->handle, s, flags);
    if (r == CUDA_SUCCESS && (e->flags & CU_EVENT_INTERPROCESS)) {
        /* Another process may wait on it as soon as this returns (told by a pipe, say): the record must be
         * the driver's by then, not still in the channel. A call answered after it in the same channel
         * (the stream's capture state: harmless in a capture too) says it was made; its answer is not
         * this call's. */
        struct cumux_capture_info ci;
        CUresult q = shim_op_capture_info(s, &ci);
        (void)q;
    }
    return r;
}

CUresult cuEventRecord(CUevent e, CUstream h)
{
    return event_record(e, h, 0);
}

CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags)
{
    return event_record(e, h, flags);
}

static CUresult event_check(CUevent e)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!e || e->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    return shim_check_channel(); /* come back first: e->handle is then the new worker's */
}

CUresult cuEventQuery(CUevent e)
{
    CUresult r = event_check(e);
    if (r == CUDA_SUCCESS)
        r = shim_lost_report(&e->lost);
    return r != CUDA_SUCCESS ? r : shim_op_event_query(e->handle);
}

CUresult cuEventSynchronize(CUevent e)
{
    CUresult r = event_check(e);
    if (r == CUDA_SUCCESS)
        r = shim_lost_report(&e->lost);
    if (r == CUDA_SUCCESS && (r = shim_op_event_sync(e->handle)) == CUDA_ERROR_LAUNCH_FAILED)
        shim_lost_said(&e->lost);
    return r;
}

CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a || !b || a->magic != SHIM_MAGIC_EVENT || b->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct cumux_elapsed_reply rep = {0};
    CUresult r = shim_op_event_elapsed(a->handle, b->handle, &rep);
    if (r == CUDA_SUCCESS)
        *ms = rep.ms;
    return r;
}

#undef cuEventElapsedTime
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b); /* the legacy name: same call */
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    return cuEventElapsedTime_v2(ms, a, b);
}

/* ---- capture status (graph.c captures) ---- */
static CUresult capture_status(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    return shim_capture_status(s, status, id);
}

CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
    return capture_status(h, status, NULL);
}

/* The query with the capture's graph and dependencies (cuStreamGetCaptureInfo_v3 and _v2) is graph.c's.
 * The first form of it (cuda.h maps the plain name to _v3): */
#undef cuStreamGetCaptureInfo
CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id);

CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_status(h, status, id);
}

/* ---- stream memory operations ---- */
/* One operation on the program's memory: device memory as it is, pinned host memory by the server's
 * address (unified addressing: the program may name either by its own pointer). */
static CUresult mem_op(CUstream h, uint32_t op, CUdeviceptr addr, uint64_t value, unsigned flags)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (op != CU_STREAM_MEM_OP_BARRIER) {
        uint64_t size = op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || op == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
        if (addr % size)
            return CUDA_ERROR_INVALID_VALUE;
        if (!shim_is_device_ptr(addr, size) && !(addr = shim_pinned_server_addr((const void *)(uintptr_t)addr, size)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return shim_op_stream_mem_op(s, op, addr, value, flags);
}

CUresult cuStreamWaitValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return mem_op(h, CU_STREAM_MEM_OP_WAIT_VALUE_32, addr, value, flags);
}

CUresult cuStreamWaitValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return mem_op(h, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags);
}

CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return mem_op(h, CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, value, flags);
}

CUresult cuStreamWriteValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return mem_op(h, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags);
}

/* A batch is its operations in order on the stream (one message each: all are one-way). */
CUresult cuStreamBatchMemOp_v2(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    if (count == 0 || !ops || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        const CUstreamBatchMemOpParams *p = &ops[i];
        CUresult r;
        switch (p->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            r = mem_op(h, p->operation, p->waitValue.address,
                       p->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? p->waitValue.value64 : p->waitValue.value,
                       p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            r = mem_op(h, p->operation, p->writeValue.address,
                       p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? p->writeValue.value64 : p->writeValue.value,
                       p->writeValue.flags);
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            r = mem_op(h, p->operation, 0, 0, p->memoryBarrier.flags);
            break;
        default:
            return cumux_unsupported("cuStreamBatchMemOp with an operation other than waits, writes and barriers");
        }
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* The first forms (cuda.h maps the plain names to _v2): the same operations. */
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
CUresult cuStreamWaitValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWaitValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamWriteValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamBatchMemOp(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags);

CUresult cuStreamWaitValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return cuStreamWaitValue32_v2(h, addr, value, flags);
}

CUresult cuStreamWaitValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return cuStreamWaitValue64_v2(h, addr, value, flags);
}

CUresult cuStreamWriteValue32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return cuStreamWriteValue32_v2(h, addr, value, flags);
}

CUresult cuStreamWriteValue64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return cuStreamWriteValue64_v2(h, addr, value, flags);
}

CUresult cuStreamBatchMemOp(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return cuStreamBatchMemOp_v2(h, count, ops, flags);
}

/* The events live in the table (once each, under their handle). */
static void each_event(void (*fn)(struct CUevent_st *e, const void *arg), const void *arg)
{
    pthread_mutex_lock(&event_table_lock);
    for (size_t i = 0; i < events_by_handle.cap; i++) {
        struct CUevent_st *e = events_by_handle.v[i];
        if (e && e->magic == SHIM_MAGIC_EVENT && shim_table_key(e->handle) == i)
            fn(e, arg);
    }
    pthread_mutex_unlock(&event_table_lock);
}

static void event_note_lost(struct CUevent_st *e, const void *arg)
{
    uint32_t on = atomic_load(&e->recorded_on);
    e->spared = !on || !shim_lost_stream(arg, on);
}

void shim_streams_note_lost(const struct shim_lost_work *lw, uint64_t *unclaimed)
{
    pthread_mutex_lock(&all_streams.lock);
    for (size_t i = 0; i < all_streams.n; i++) {
        struct CUstream_st *s = all_streams.v[i];
        if (s->magic != SHIM_MAGIC_STREAM || !s->ctx || s->ctx->magic != SHIM_MAGIC_CTX)
            continue;
        s->spared = !shim_lost_stream(lw, s->handle);
        if (!s->spared)
            s->ctx->sync_spared = false;
        uint32_t ix = CUMUX_HANDLE_INDEX(s->handle);
        if (ix < CUMUX_LOST_STREAM_WORDS * 64)
            unclaimed[ix / 64] &= ~(1ull << (ix % 64));
    }
    pthread_mutex_unlock(&all_streams.lock);
    each_event(event_note_lost, lw);
}

static void event_spare(struct CUevent_st *e, const void *arg)
{
    if (e->spared)
        shim_lost_spare(&e->lost, *(const uint32_t *)arg);
}

void shim_streams_spare(uint32_t next)
{
    pthread_mutex_lock(&all_streams.lock);
    for (size_t i = 0; i < all_streams.n; i++) {
        struct CUstream_st *s = all_streams.v[i];
        if (s->magic == SHIM_MAGIC_STREAM && s->spared)
            shim_lost_spare(&s->lost, next);
    }
    pthread_mutex_unlock(&all_streams.lock);
    each_event(event_spare, &next);
}

CUresult shim_streams_rebind(unsigned *streams, unsigned *events)
{
    CUresult r = CUDA_SUCCESS;
    *streams = *events = 0;
    pthread_mutex_lock(&all_streams.lock);
    for (size_t i = 0; i < all_streams.n && r == CUDA_SUCCESS; i++) {
        struct CUstream_st *s = all_streams.v[i];
        uint64_t h;
        if (s->magic != SHIM_MAGIC_STREAM || !s->ctx || s->ctx->magic != SHIM_MAGIC_CTX)
            continue;
        if ((r = shim_op_stream_create(s->ctx->handle, s->flags, s->priority, &h)) == CUDA_SUCCESS) {
            s->handle = (uint32_t)h;
            atomic_store(&s->idle.query_seq, 0);
            atomic_store(&s->idle.sync_seq, 0);
            (*streams)++;
        }
    }
    pthread_mutex_unlock(&all_streams.lock);
    /* Events: each live one (the table's objects, once each) made again, and the table rebuilt. */
    pthread_mutex_lock(&event_table_lock);
    size_t cap = events_by_handle.cap, n = 0;
    struct CUevent_st **evs = cap ? calloc(cap, sizeof *evs) : NULL;
    for (size_t i = 0; evs && i < cap; i++) {
        struct CUevent_st *e = events_by_handle.v[i];
        if (e && e->magic == SHIM_MAGIC_EVENT && shim_table_key(e->handle) == i)
            evs[n++] = e;
    }
    if (cap)
        memset(events_by_handle.v, 0, cap * sizeof *events_by_handle.v);
    pthread_mutex_unlock(&event_table_lock);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct CUevent_st *e = evs[i];
        uint64_t h;
        if (!e->ctx || e->ctx->magic != SHIM_MAGIC_CTX || (e->flags & CU_EVENT_INTERPROCESS)) {
            e->magic = SHIM_MAGIC_DEAD; /* unknown to the new worker: refused, not sent */
            continue;
        }
        atomic_store(&e->recorded_on, 0); /* a handle of the old worker's */
        if ((r = shim_op_event_create(e->ctx->handle, e->flags, &h)) == CUDA_SUCCESS) {
            e->handle = (uint32_t)h;
            shim_event_remember(e);
            (*events)++;
        }
    }
    free(evs);
    return r;
}
