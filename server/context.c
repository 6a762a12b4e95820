/* Contexts, streams and events of a client. */

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/dispatch.h"
#include "server/server.h"

/* ---------------------------------------------------------------- streams and contexts */

static struct srv_stream *stream_new(struct srv_client *c, struct srv_ctx *x, enum srv_stream_kind kind,
                                     int priority, CUresult *res)
{
    struct srv_stream *s = calloc(1, sizeof *s);
    if (!s) {
        *res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    use_gpu(c, x->gpu);
    *res = cuStreamCreateWithPriority(&s->cu, CU_STREAM_NON_BLOCKING, priority);
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
        free(s);
        *res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    s->next_in_ctx = x->streams;
    x->streams = s;
    atomic_fetch_add(&c->nstreams, 1);
    return s;
}

static void stream_free(struct srv_client *c, struct srv_stream *s)
{
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
    cuStreamDestroy(s->cu);
    handle_drop(c, s->handle);
    atomic_fetch_sub(&c->nstreams, 1);
    free(s);
}

CUresult op_ctx_create(struct srv_client *c, const struct cumux_ctx_create *m, uint8_t *out, uint32_t *out_len)
{
    if (m->device < 0 || m->device >= srv_gpu_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct srv_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->gpu = m->device;
    use_gpu(c, x->gpu);
    CUresult r = cuEventCreate(&x->join_event, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = cuEventCreate(&x->epoch_event, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) {
        x->handle = handle_new(c, OBJ_CTX, x);
        if (!x->handle)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        x->legacy = stream_new(c, x, STREAM_LEGACY, 0, &r);
    if (r != CUDA_SUCCESS) {
        if (x->join_event)
            cuEventDestroy(x->join_event);
        if (x->epoch_event)
            cuEventDestroy(x->epoch_event);
        if (x->handle)
            handle_drop(c, x->handle);
        free(x);
        return r;
    }
    struct cumux_ctx_reply rep = {.ctx = x->handle, .legacy_stream = x->legacy->handle};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

static CUresult ctx_sync(struct srv_client *c, struct srv_ctx *x)
{
    use_gpu(c, x->gpu);
    CUresult first = CUDA_SUCCESS;
    for (struct srv_stream *s = x->streams; s; s = s->next_in_ctx) {
        CUresult r = cuStreamSynchronize(s->cu);
        if (first == CUDA_SUCCESS)
            first = r;
    }
    return first;
}

void ctx_free(struct srv_client *c, struct srv_ctx *x)
{
    ctx_sync(c, x);
    /* Events of the context go with it, as in CUDA. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_event *e = handle_get(c, h, OBJ_EVENT);
        if (e && e->ctx == x) {
            cuEventDestroy(e->cu);
            handle_drop(c, h);
            free(e);
        }
    }
    /* Modules go with their context, as in CUDA; libraries are not bound to one. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (mod && mod->ctx == x)
            module_free(c, h, mod);
    }
    while (x->streams)
        stream_free(c, x->streams);
    cuEventDestroy(x->join_event);
    cuEventDestroy(x->epoch_event);
    free(x->dirty);
    handle_drop(c, x->handle);
    free(x);
}

/* A reset of the client's primary context: as in CUDA, its libraries come back as freshly loaded (their
 * globals at their initial values). Each is loaded again from the image kept for it, and its kernels are
 * looked up again under the same handles. */
static void libraries_reload(struct srv_client *c, int gpu)
{
    use_gpu(c, gpu);
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (!mod || mod->kind != CUMUX_IMAGE_LIBRARY || mod->borrowed || mod->gpu != gpu || !mod->image)
            continue;
        CUlibrary fresh;
        if (cuLibraryLoadData(&fresh, mod->image, NULL, NULL, 0, NULL, NULL, 0) != CUDA_SUCCESS) {
            cumux_logf("client %u: library %u could not be loaded again after a reset", c->id, h);
            continue;
        }
        srv_reap(REAP_LIBRARY, gpu, NULL, 0, mod->lib);
        mod->lib = fresh;
        for (size_t i = 0; i < mod->nglobals; i++)
            cumux_ranges_remove(&c->dev_ranges, mod->globals[i], NULL);
        mod->nglobals = 0;
        for (uint32_t k = 1; k <= c->nhandles; k++) {
            struct srv_function *f = handle_get(c, k, OBJ_FUNCTION);
            CUkernel kern;
            if (f && f->module == h && f->name && cuLibraryGetKernel(&kern, fresh, f->name) == CUDA_SUCCESS)
                f->fn = (CUfunction)kern;
        }
    }
}

CUresult op_ctx_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_ctx *x = handle_get(c, m->handle, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    int gpu = x->gpu;
    ctx_free(c, x);
    if (m->flags & CUMUX_CTX_DESTROY_RESET)
        libraries_reload(c, gpu);
    return CUDA_SUCCESS;
}

CUresult op_ctx_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_ctx *x = handle_get(c, m->handle, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    return take_pending(c, ctx_sync(c, x));
}

CUresult op_ctx_limit(struct srv_client *c, const struct cumux_ctx_limit *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    use_gpu(c, x->gpu);
    /* Limits are properties of the one shared context: a client may raise them, never lower them under
     * what another client relies on. */
    size_t v = 0;
    CHECK(cuCtxGetLimit(&v, (CUlimit)m->limit));
    if (m->set && m->value > v)
        CHECK(cuCtxSetLimit((CUlimit)m->limit, (size_t)m->value));
    if (!m->set) {
        struct cumux_u64_reply rep = {v};
        memcpy(out, &rep, sizeof rep);
        *out_len = sizeof rep;
    }
    return CUDA_SUCCESS;
}

CUresult op_stream_create(struct srv_client *c, const struct cumux_stream_create *m, uint8_t *out,
                          uint32_t *out_len)
{
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (m->flags & ~(uint32_t)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    struct srv_stream *s = stream_new(c, x, (m->flags & CU_STREAM_NON_BLOCKING) ? STREAM_NONBLOCKING : STREAM_BLOCKING,
                                      m->priority, &r);
    if (!s)
        return r;
    return reply_u64(out, out_len, s->handle);
}

CUresult op_stream_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s || s->kind == STREAM_LEGACY)
        return CUDA_ERROR_INVALID_HANDLE;
    stream_free(c, s);
    return CUDA_SUCCESS;
}

CUresult op_stream_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s)); /* the legacy stream also waits for blocking streams' earlier work */
    return take_pending(c, cuStreamSynchronize(s->cu));
}

CUresult op_stream_query(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s));
    return cuStreamQuery(s->cu);
}

CUresult op_stream_wait_event(struct srv_client *c, const struct cumux_stream_wait_event *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    struct srv_event *e = handle_get(c, m->event, OBJ_EVENT);
    if (!s || !e)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s));
    CUresult r = cuStreamWaitEvent(s->cu, e->cu, m->flags);
    after_op(s);
    return r;
}

/* ---------------------------------------------------------------- events */

CUresult op_event_create(struct srv_client *c, const struct cumux_event_create *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Interprocess events would hand out a handle that other processes could use: not yet. */
    if (m->flags & ~(uint32_t)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, x->gpu);
    CUresult r = cuEventCreate(&e->cu, m->flags);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->ctx = x;
    uint32_t h = handle_new(c, OBJ_EVENT, e);
    if (!h) {
        cuEventDestroy(e->cu);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, h);
}

CUresult op_event_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    cuEventDestroy(e->cu);
    handle_drop(c, m->handle);
    free(e);
    return CUDA_SUCCESS;
}

CUresult op_event_record(struct srv_client *c, const struct cumux_event_record *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    struct srv_event *e = handle_get(c, m->event, OBJ_EVENT);
    if (!s || !e)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s));
    CUresult r = m->flags ? cuEventRecordWithFlags(e->cu, s->cu, m->flags) : cuEventRecord(e->cu, s->cu);
    after_op(s);
    return r;
}

CUresult op_event_query(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return cuEventQuery(e->cu);
}

CUresult op_event_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return take_pending(c, cuEventSynchronize(e->cu));
}

CUresult op_event_elapsed(struct srv_client *c, const struct cumux_event_elapsed *m, uint8_t *out,
                          uint32_t *out_len)
{
    struct srv_event *a = handle_get(c, m->start, OBJ_EVENT);
    struct srv_event *b = handle_get(c, m->end, OBJ_EVENT);
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE;
    struct cumux_elapsed_reply rep = {0};
    CHECK(cuEventElapsedTime(&rep.ms, a->cu, b->cu));
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

