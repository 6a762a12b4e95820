/* Running a client's commands: validation of every message and handle, and the CUDA calls they stand for. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/launch_attrs.h"
#include "common/log.h"
#include "common/sock.h"
#include "server/dispatch.h"
#include "server/server.h"


CUresult reply_u64(uint8_t *out, uint32_t *out_len, uint64_t v)
{
    struct cumux_u64_reply rep = {v};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- handles */

uint32_t handle_new(struct srv_client *c, enum srv_obj_type type, void *obj)
{
    for (uint32_t i = c->free_hint; i < c->nhandles; i++) {
        if (c->handles[i].type == OBJ_NONE) {
            c->handles[i] = (struct srv_handle){type, obj};
            c->free_hint = i + 1;
            return i + 1;
        }
    }
    if (c->nhandles == c->caphandles) {
        uint32_t cap = c->caphandles ? c->caphandles * 2 : 64;
        if (cap > (1u << 24))
            return 0;
        struct srv_handle *h = realloc(c->handles, cap * sizeof *h);
        if (!h)
            return 0;
        c->handles = h;
        c->caphandles = cap;
    }
    c->handles[c->nhandles] = (struct srv_handle){type, obj};
    c->free_hint = c->nhandles + 1;
    return ++c->nhandles;
}

/* The object behind a handle of this client, if it has that type; otherwise NULL. */
void *handle_get(struct srv_client *c, uint32_t h, enum srv_obj_type type)
{
    if (h == 0 || h > c->nhandles || c->handles[h - 1].type != type)
        return NULL;
    return c->handles[h - 1].obj;
}

void handle_drop(struct srv_client *c, uint32_t h)
{
    c->handles[h - 1] = (struct srv_handle){OBJ_NONE, NULL};
    if (h - 1 < c->free_hint)
        c->free_hint = h - 1;
}

void use_gpu(struct srv_client *c, int gpu)
{
    if (c->current_gpu != gpu && gpu < srv_gpu_count) {
        cuCtxSetCurrent(srv_gpus[gpu].ctx);
        c->current_gpu = gpu;
    }
}

/* ---------------------------------------------------------------- legacy-stream emulation
 * Every real stream is non-blocking, so clients never meet on the real NULL stream. Within a client
 * context, an operation on the legacy stream first waits for the work of each blocking stream that has
 * had any since it last did, and a blocking stream first waits for the legacy stream's last operation
 * (CUDA's "legacy default stream" rule). Costs nothing while a client uses a single stream. */

CUresult before_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    if (s->capturing)
        return CUDA_SUCCESS; /* captured work is not run now: it takes no part in the legacy rule */
    if (s->kind == STREAM_LEGACY) {
        for (size_t i = 0; i < x->ndirty; i++) {
            struct srv_stream *b = x->dirty[i];
            CHECK(cuEventRecord(x->join_event, b->cu));
            CHECK(cuStreamWaitEvent(x->legacy->cu, x->join_event, 0));
            b->dirty = false;
        }
        x->ndirty = 0;
    } else if (s->kind == STREAM_BLOCKING && s->seen_epoch != x->epoch) {
        if (x->epoch_event_epoch != x->epoch) {
            CHECK(cuEventRecord(x->epoch_event, x->legacy->cu));
            x->epoch_event_epoch = x->epoch;
        }
        CHECK(cuStreamWaitEvent(s->cu, x->epoch_event, 0));
        s->seen_epoch = x->epoch;
    }
    return CUDA_SUCCESS;
}

void after_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    if (s->capturing)
        return;
    if (s->kind == STREAM_LEGACY) {
        x->epoch++;
    } else if (s->kind == STREAM_BLOCKING && !s->dirty) {
        if (x->ndirty == x->capdirty) {
            size_t cap = x->capdirty ? x->capdirty * 2 : 8;
            struct srv_stream **d = realloc(x->dirty, cap * sizeof *d);
            if (!d) {
                /* Without room to remember it, make the stream safe now: the legacy stream waits. */
                cuEventRecord(x->join_event, s->cu);
                cuStreamWaitEvent(x->legacy->cu, x->join_event, 0);
                return;
            }
            x->dirty = d;
            x->capdirty = cap;
        }
        x->dirty[x->ndirty++] = s;
        s->dirty = true;
    }
}

/* Look up a stream handle and make its context current. */
struct srv_stream *stream_get(struct srv_client *c, uint32_t h)
{
    struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
    if (s)
        use_gpu(c, s->ctx->gpu);
    return s;
}

static CUresult take_pending(struct srv_client *c, CUresult r)
{
    if (r == CUDA_SUCCESS && c->pending_error != CUDA_SUCCESS) {
        r = c->pending_error;
        c->pending_error = CUDA_SUCCESS;
    }
    return r;
}

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

static CUresult op_ctx_create(struct srv_client *c, const struct cumux_ctx_create *m, uint8_t *out, uint32_t *out_len)
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

static void module_free(struct srv_client *c, uint32_t h, struct srv_module *mod);

static void ctx_free(struct srv_client *c, struct srv_ctx *x)
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

static CUresult op_ctx_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
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

static CUresult op_ctx_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_ctx *x = handle_get(c, m->handle, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    return take_pending(c, ctx_sync(c, x));
}

static CUresult op_ctx_limit(struct srv_client *c, const struct cumux_ctx_limit *m, uint8_t *out, uint32_t *out_len)
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

static CUresult op_stream_create(struct srv_client *c, const struct cumux_stream_create *m, uint8_t *out,
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

static CUresult op_stream_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s || s->kind == STREAM_LEGACY)
        return CUDA_ERROR_INVALID_HANDLE;
    stream_free(c, s);
    return CUDA_SUCCESS;
}

static CUresult op_stream_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s)); /* the legacy stream also waits for blocking streams' earlier work */
    return take_pending(c, cuStreamSynchronize(s->cu));
}

static CUresult op_stream_query(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_stream *s = stream_get(c, m->handle);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    CHECK(before_op(s));
    return cuStreamQuery(s->cu);
}

static CUresult op_stream_wait_event(struct srv_client *c, const struct cumux_stream_wait_event *m)
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

static CUresult op_event_create(struct srv_client *c, const struct cumux_event_create *m, uint8_t *out, uint32_t *out_len)
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

static CUresult op_event_destroy(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    cuEventDestroy(e->cu);
    handle_drop(c, m->handle);
    free(e);
    return CUDA_SUCCESS;
}

static CUresult op_event_record(struct srv_client *c, const struct cumux_event_record *m)
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

static CUresult op_event_query(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return cuEventQuery(e->cu);
}

static CUresult op_event_sync(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_event *e = handle_get(c, m->handle, OBJ_EVENT);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return take_pending(c, cuEventSynchronize(e->cu));
}

static CUresult op_event_elapsed(struct srv_client *c, const struct cumux_event_elapsed *m, uint8_t *out,
                                 uint32_t *out_len)
{
    struct srv_event *a = handle_get(c, m->start, OBJ_EVENT);
    struct srv_event *b = handle_get(c, m->end, OBJ_EVENT);
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE;
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, a->cu, b->cu));
    memcpy(out, &ms, sizeof ms);
    *out_len = sizeof ms;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

/* The stream a client's allocations and frees are ordered on, for one GPU. */
static CUresult mem_stream(struct srv_client *c, int gpu, CUstream *out)
{
    use_gpu(c, gpu);
    if (!c->mem_event)
        CHECK(cuEventCreate(&c->mem_event, CU_EVENT_DISABLE_TIMING));
    if (!c->mem_stream[gpu])
        CHECK(cuStreamCreate(&c->mem_stream[gpu], CU_STREAM_NON_BLOCKING));
    *out = c->mem_stream[gpu];
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memory pools */

static CUresult pool_new(struct srv_client *c, int gpu, uint64_t max_size, bool is_default, struct srv_pool **out)
{
    use_gpu(c, gpu);
    struct srv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = srv_gpus[gpu].dev;
    props.maxSize = (size_t)max_size;
    CUresult r = cuMemPoolCreate(&p->pool, &props);
    if (r == CUDA_SUCCESS && !(p->handle = handle_new(c, OBJ_POOL, p))) {
        cuMemPoolDestroy(p->pool);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(p);
        return r;
    }
    p->gpu = gpu;
    p->is_default = is_default;
    *out = p;
    return CUDA_SUCCESS;
}

/* The client's own default pool of a GPU: its memory and attributes are nobody else's. */
static CUresult default_pool(struct srv_client *c, int gpu, struct srv_pool **out)
{
    if (!c->default_pool[gpu])
        CHECK(pool_new(c, gpu, 0, true, &c->default_pool[gpu]));
    *out = c->default_pool[gpu];
    return CUDA_SUCCESS;
}

static void pool_free(struct srv_client *c, struct srv_pool *p)
{
    handle_drop(c, p->handle);
    if (c->default_pool[p->gpu] == p)
        c->default_pool[p->gpu] = NULL;
    srv_reap(REAP_POOL, p->gpu, NULL, 0, p->pool); /* may wait for the context: not on this worker */
    free(p);
}

static CUresult op_pool(struct srv_client *c, uint16_t op, const struct cumux_pool_op *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_pool *p = NULL;
    switch (op) {
    case CUMUX_OP_POOL_DEFAULT:
    case CUMUX_OP_POOL_CREATE:
        if (m->device < 0 || m->device >= srv_gpu_count)
            return CUDA_ERROR_INVALID_DEVICE;
        if (op == CUMUX_OP_POOL_DEFAULT)
            CHECK(default_pool(c, m->device, &p));
        else
            CHECK(pool_new(c, m->device, m->value, false, &p));
        return reply_u64(out, out_len, p->handle);
    default:
        break;
    }
    p = handle_get(c, m->pool, OBJ_POOL);
    if (!p)
        return CUDA_ERROR_INVALID_HANDLE;
    use_gpu(c, p->gpu);
    switch (op) {
    case CUMUX_OP_POOL_DESTROY:
        if (p->is_default)
            return CUDA_ERROR_INVALID_VALUE; /* as the driver answers for a device's default pool */
        pool_free(c, p);
        return CUDA_SUCCESS;
    case CUMUX_OP_POOL_TRIM:
        return cuMemPoolTrimTo(p->pool, (size_t)m->value);
    case CUMUX_OP_POOL_ATTRIBUTE: {
        /* Three attributes are ints, the others 64-bit. */
        bool is_int = m->attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
                      m->attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
                      m->attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
        int iv = (int)m->value;
        cuuint64_t uv = m->value;
        void *v = is_int ? (void *)&iv : (void *)&uv;
        if (m->set)
            return cuMemPoolSetAttribute(p->pool, (CUmemPool_attribute)m->attr, v);
        CHECK(cuMemPoolGetAttribute(p->pool, (CUmemPool_attribute)m->attr, v));
        return reply_u64(out, out_len, is_int ? (uint64_t)(int64_t)iv : uv);
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult op_mem_alloc_async(struct srv_client *c, const struct cumux_mem_alloc_async *m, uint8_t *out,
                                   uint32_t *out_len)
{
    struct srv_stream *s = stream_get(c, m->stream);
    struct srv_pool *p = handle_get(c, m->pool, OBJ_POOL);
    if (!s || !p)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->size == 0 || p->gpu != s->ctx->gpu)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(s));
    CUdeviceptr ptr;
    CUresult r = cuMemAllocFromPoolAsync(&ptr, (size_t)m->size, p->pool, s->cu);
    after_op(s);
    if (r != CUDA_SUCCESS)
        return r;
    if (cumux_ranges_add(&c->dev_ranges, ptr, m->size, RANGE_ALLOC, (uint64_t)p->gpu) < 0) {
        cuMemFreeAsync(ptr, s->cu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->mem_bytes, m->size);
    return reply_u64(out, out_len, ptr);
}

/* Take the allocation that starts at ptr out of the client's table (not a global); false if there is none. */
static bool take_allocation(struct srv_client *c, uint64_t ptr, struct cumux_range *gone)
{
    const struct cumux_range *r = cumux_ranges_find(&c->dev_ranges, ptr);
    if (!r || r->base != ptr || r->tag != RANGE_ALLOC)
        return false;
    cumux_ranges_remove(&c->dev_ranges, ptr, gone);
    atomic_fetch_sub(&c->mem_bytes, gone->size);
    return true;
}

static CUresult op_mem_free_async(struct srv_client *c, const struct cumux_mem_free_async *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    struct cumux_range gone;
    if (!take_allocation(c, m->ptr, &gone))
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(s));
    CUresult res = cuMemFreeAsync(m->ptr, s->cu);
    after_op(s);
    return res;
}

static CUresult op_mem_alloc(struct srv_client *c, const struct cumux_mem_alloc *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (m->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream ms;
    CHECK(mem_stream(c, x->gpu, &ms));
    /* From the device's pool, on the client's own memory stream: cuMemFree of ordinary allocations waits
     * for every kernel in the context, that is for every client; a stream-ordered free waits for none. */
    struct srv_pool *pool;
    CHECK(default_pool(c, x->gpu, &pool));
    CUdeviceptr p;
    CHECK(cuMemAllocFromPoolAsync(&p, (size_t)m->size, pool->pool, ms));
    CUresult r = cuStreamSynchronize(ms); /* usable on any stream once this returns, as cuMemAlloc's */
    if (r != CUDA_SUCCESS || cumux_ranges_add(&c->dev_ranges, p, m->size, RANGE_ALLOC, (uint64_t)x->gpu) < 0) {
        cuMemFreeAsync(p, ms);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->mem_bytes, m->size);
    return reply_u64(out, out_len, p);
}

/* Free after everything the client has queued so far, on any of its streams, is done. */
static CUresult mem_release(struct srv_client *c, uint64_t ptr, int gpu)
{
    CUstream ms;
    CHECK(mem_stream(c, gpu, &ms));
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s && s->ctx->gpu == gpu) {
            CHECK(cuEventRecord(c->mem_event, s->cu));
            CHECK(cuStreamWaitEvent(ms, c->mem_event, 0));
        }
    }
    return cuMemFreeAsync(ptr, ms);
}

static CUresult op_mem_free(struct srv_client *c, const struct cumux_mem_free *m)
{
    struct cumux_range gone;
    if (!take_allocation(c, m->ptr, &gone))
        return CUDA_ERROR_INVALID_VALUE;
    return mem_release(c, m->ptr, (int)gone.extra);
}

static CUresult op_mem_info(struct srv_client *c, const struct cumux_handle_arg *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_ctx *x = handle_get(c, m->handle, OBJ_CTX);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    use_gpu(c, x->gpu);
    size_t f, t;
    CHECK(cuMemGetInfo(&f, &t));
    struct cumux_mem_info rep = {f, t};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

/* A descriptor the client sent over the socket just before the command that needs it. */
static int recv_client_fd(struct srv_client *c, uint64_t min_size)
{
    uint64_t tag;
    int fd;
    /* The shim sends the descriptor before the command: if it is not there now, it never comes. */
    struct pollfd p = {.fd = c->sock, .events = POLLIN};
    if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
        return -1;
    if (cumux_sock_recv(c->sock, &tag, sizeof tag, &fd) < 0 || tag != CUMUX_MAGIC) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < min_size) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static CUresult op_host_alloc(struct srv_client *c, const struct cumux_host_alloc *m, uint8_t *out, uint32_t *out_len)
{
    int fd = recv_client_fd(c, m->size);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->size == 0 || m->size > (1ull << 40)) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* A client that shrank the file under the server's mapping would crash the server on access. */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t len = (size_t)m->size;
    /* The same address in both processes lets a kernel use the pointer the client was given. */
    void *p = MAP_FAILED;
    if (m->client_addr && (m->client_addr & 4095) == 0)
        p = mmap((void *)(uintptr_t)m->client_addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (p != MAP_FAILED && (uint64_t)(uintptr_t)p != m->client_addr) {
        munmap(p, len); /* old kernels ignore MAP_FIXED_NOREPLACE */
        p = MAP_FAILED;
    }
    if (p == MAP_FAILED)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, 0);
    CUresult r = cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS || cumux_ranges_add(&c->host_ranges, (uint64_t)(uintptr_t)p, len, RANGE_HOST, len) < 0) {
        if (r == CUDA_SUCCESS)
            cuMemHostUnregister(p);
        munmap(p, len);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->host_bytes, len);
    return reply_u64(out, out_len, (uint64_t)(uintptr_t)p);
}

static void host_release(struct srv_client *c, uint64_t base)
{
    struct cumux_range gone;
    if (cumux_ranges_remove(&c->host_ranges, base, &gone) < 0)
        return;
    /* cuMemHostUnregister waits for every kernel in the context: not on this client's time. */
    srv_reap(REAP_HOST_MEMORY, 0, (void *)(uintptr_t)gone.base, gone.extra, NULL);
    atomic_fetch_sub(&c->host_bytes, gone.extra);
}

static CUresult op_host_free(struct srv_client *c, const struct cumux_mem_free *m)
{
    const struct cumux_range *r = cumux_ranges_find(&c->host_ranges, m->ptr);
    if (!r || r->base != m->ptr)
        return CUDA_ERROR_INVALID_VALUE;
    /* Copies into it may still be in flight: the reaper's unregister waits for them. */
    host_release(c, m->ptr);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- copies and memset */

bool dev_ok(struct srv_client *c, uint64_t p, uint64_t n)
{
    return cumux_ranges_covers(&c->dev_ranges, p, n) != NULL;
}

bool host_ok(struct srv_client *c, uint64_t p, uint64_t n)
{
    return cumux_ranges_covers(&c->host_ranges, p, n) != NULL;
}

static CUresult op_copy(struct srv_client *c, const struct cumux_copy *m, bool sync)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    bool ok = false;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        ok = host_ok(c, m->src, m->size) && dev_ok(c, m->dst, m->size);
        break;
    case CUMUX_COPY_DTOH:
        ok = dev_ok(c, m->src, m->size) && host_ok(c, m->dst, m->size);
        break;
    case CUMUX_COPY_DTOD:
        ok = dev_ok(c, m->src, m->size) && dev_ok(c, m->dst, m->size);
        break;
    }
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(s));
    CUresult r;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        r = cuMemcpyHtoDAsync(m->dst, (const void *)(uintptr_t)m->src, m->size, s->cu);
        break;
    case CUMUX_COPY_DTOH:
        r = cuMemcpyDtoHAsync((void *)(uintptr_t)m->dst, m->src, m->size, s->cu);
        break;
    default:
        r = cuMemcpyDtoDAsync(m->dst, m->src, m->size, s->cu);
        break;
    }
    after_op(s);
    if (r == CUDA_SUCCESS && sync)
        r = take_pending(c, cuStreamSynchronize(s->cu));
    return r;
}

/* Bytes from the first to the last byte of height rows of width bytes, pitch apart; 0 when invalid. */
uint64_t span_2d(uint64_t pitch, uint64_t width, uint64_t height)
{
    if (width == 0 || height == 0 || width > (1ull << 40) || height > (1ull << 32) || pitch > (1ull << 40) ||
        (height > 1 && pitch < width))
        return 0;
    return pitch * (height - 1) + width;
}

static CUresult copy_2d_async(CUmemorytype dt, uint64_t dst, uint64_t dpitch, CUmemorytype st, uint64_t src,
                              uint64_t spitch, uint64_t width, uint64_t height, CUstream s)
{
    CUDA_MEMCPY2D p = {0};
    p.srcMemoryType = st;
    p.srcPitch = spitch;
    p.dstMemoryType = dt;
    p.dstPitch = dpitch;
    p.WidthInBytes = width;
    p.Height = height;
    if (st == CU_MEMORYTYPE_HOST)
        p.srcHost = (const void *)(uintptr_t)src;
    else
        p.srcDevice = src;
    if (dt == CU_MEMORYTYPE_HOST)
        p.dstHost = (void *)(uintptr_t)dst;
    else
        p.dstDevice = dst;
    return cuMemcpy2DAsync(&p, s);
}

static CUresult op_copy_2d(struct srv_client *c, const struct cumux_copy_2d *m, bool sync)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t dspan = span_2d(m->dst_pitch, m->width, m->height), sspan = span_2d(m->src_pitch, m->width, m->height);
    if (!dspan || !sspan)
        return CUDA_ERROR_INVALID_VALUE;
    bool ok = false;
    CUmemorytype dt = CU_MEMORYTYPE_DEVICE, st = CU_MEMORYTYPE_DEVICE;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        ok = host_ok(c, m->src, sspan) && dev_ok(c, m->dst, dspan);
        st = CU_MEMORYTYPE_HOST;
        break;
    case CUMUX_COPY_DTOH:
        ok = dev_ok(c, m->src, sspan) && host_ok(c, m->dst, dspan);
        dt = CU_MEMORYTYPE_HOST;
        break;
    case CUMUX_COPY_DTOD:
        ok = dev_ok(c, m->src, sspan) && dev_ok(c, m->dst, dspan);
        break;
    }
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(s));
    CUresult r = copy_2d_async(dt, m->dst, m->dst_pitch, st, m->src, m->src_pitch, m->width, m->height, s->cu);
    after_op(s);
    if (r == CUDA_SUCCESS && sync)
        r = take_pending(c, cuStreamSynchronize(s->cu));
    return r;
}

static void stage_set(struct srv_client *c, int slot, uint32_t state)
{
    atomic_store(&c->shm->stage_state[slot], state);
    atomic_fetch_add(&c->shm->stage_seq[slot], 1);
    cumux_futex_wake(&c->shm->stage_seq[slot], 1);
}

void srv_staging_flush(struct srv_client *c)
{
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++) {
        if (c->stage_pending[i]) {
            cuEventSynchronize(c->stage_event[i]);
            c->stage_pending[i] = false;
            stage_set(c, i, CUMUX_STAGE_FREE);
        }
    }
}

static CUresult op_copy_htod_staged(struct srv_client *c, const struct cumux_copy_staged *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->slot >= CUMUX_STAGING_SLOTS || m->size == 0 || m->size > CUMUX_STAGING_BYTES || c->stage_pending[m->slot] ||
        atomic_load(&c->shm->stage_state[m->slot]) != CUMUX_STAGE_FULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (srv_stream_capturing(c, s)) { /* the slot is reused at once: a graph would copy stale data */
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    uint64_t rows = m->width ? m->size / m->width : 1;
    uint64_t span = m->width ? span_2d(m->pitch, m->width, rows) : m->size;
    if (!c->staging_registered || (m->width && m->size % m->width) || !span || !dev_ok(c, m->dev, span)) {
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = before_op(s);
    if (r == CUDA_SUCCESS && m->width)
        r = copy_2d_async(CU_MEMORYTYPE_DEVICE, m->dev, m->pitch, CU_MEMORYTYPE_HOST,
                          (uint64_t)(uintptr_t)c->shm->staging[m->slot], m->width, m->width, rows, s->cu);
    else if (r == CUDA_SUCCESS)
        r = cuMemcpyHtoDAsync(m->dev, c->shm->staging[m->slot], m->size, s->cu);
    if (r == CUDA_SUCCESS)
        r = cuEventRecord(c->stage_event[m->slot], s->cu);
    after_op(s);
    if (r != CUDA_SUCCESS) {
        cuStreamSynchronize(s->cu);
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return r;
    }
    c->stage_pending[m->slot] = true;
    /* Give back the slots of earlier chunks as their copies finish; this chunk's copy runs meanwhile. */
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++) {
        if (i != (int)m->slot && c->stage_pending[i]) {
            cuEventSynchronize(c->stage_event[i]);
            c->stage_pending[i] = false;
            stage_set(c, i, CUMUX_STAGE_FREE);
        }
    }
    return CUDA_SUCCESS;
}

/* Wait until the client has emptied a slot; false when it went away. */
static bool stage_wait_free(struct srv_client *c, int slot)
{
    for (;;) {
        uint32_t seq = atomic_load(&c->shm->stage_seq[slot]);
        if (atomic_load(&c->shm->stage_state[slot]) == CUMUX_STAGE_FREE)
            return true;
        if (atomic_load(&c->dead))
            return false;
        cumux_futex_wait(&c->shm->stage_seq[slot], seq, 100000000);
    }
}

static CUresult op_copy_dtoh_staged(struct srv_client *c, const struct cumux_copy_staged *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (srv_stream_capturing(c, s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* pageable memory cannot be in a graph */
    /* 2-D: whole rows per chunk, packed; the client unpacks them. */
    uint64_t width = m->width, rows = width ? m->size / width : 0;
    uint64_t chunk = width ? (CUMUX_STAGING_BYTES / width) * width : CUMUX_STAGING_BYTES;
    uint64_t span = width ? span_2d(m->pitch, width, rows) : m->size;
    if (!c->staging_registered || chunk == 0 || (width && m->size % width) || !span || !dev_ok(c, m->dev, span))
        return CUDA_ERROR_INVALID_VALUE;
    srv_staging_flush(c);
    CHECK(before_op(s));
    /* Chunk i is copied into slot i % N while the client copies chunk i-1 out of its slot. */
    uint64_t nchunks = (m->size + chunk - 1) / chunk;
    CUresult r = CUDA_SUCCESS;
    for (uint64_t i = 0; i <= nchunks; i++) {
        if (i < nchunks) {
            int slot = (int)(i % CUMUX_STAGING_SLOTS);
            uint64_t off = i * chunk;
            uint64_t len = m->size - off < chunk ? m->size - off : chunk;
            if (!stage_wait_free(c, slot)) {
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            if (width)
                r = copy_2d_async(CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)c->shm->staging[slot], width,
                                  CU_MEMORYTYPE_DEVICE, m->dev + (off / width) * m->pitch, m->pitch, width,
                                  len / width, s->cu);
            else
                r = cuMemcpyDtoHAsync(c->shm->staging[slot], m->dev + off, len, s->cu);
            if (r == CUDA_SUCCESS)
                r = cuEventRecord(c->stage_event[slot], s->cu);
            if (r != CUDA_SUCCESS)
                break;
        }
        if (i > 0) {
            int prev = (int)((i - 1) % CUMUX_STAGING_SLOTS);
            r = cuEventSynchronize(c->stage_event[prev]);
            if (r != CUDA_SUCCESS)
                break;
            stage_set(c, prev, CUMUX_STAGE_READY);
        }
    }
    after_op(s);
    if (r != CUDA_SUCCESS)
        cuStreamSynchronize(s->cu); /* no copy may still be writing into a slot the client reuses */
    return take_pending(c, r);
}

/* ---------------------------------------------------------------- host functions */

/* Runs on the driver's host-function thread when the stream gets there: hands the function to the client
 * and holds the stream until the client has run it, as CUDA does. A client that goes away releases it. */
void CUDA_CB hostfn_trampoline(void *arg)
{
    struct hostfn_job *j = arg;
    struct srv_client *c = j->c;
    struct cumux_shm *shm = c->shm;
    pthread_mutex_lock(&c->hostfn_lock);
    uint32_t n = atomic_load(&shm->hostfn_posted);
    shm->hostfn_ids[n % CUMUX_HOSTFN_RING] = j->id;
    atomic_store(&shm->hostfn_posted, n + 1);
    pthread_mutex_unlock(&c->hostfn_lock);
    cumux_futex_wake(&shm->hostfn_posted, 1);
    for (;;) {
        uint32_t done = atomic_load(&shm->hostfn_done);
        if ((int32_t)(done - (n + 1)) >= 0 || atomic_load(&c->dead))
            break;
        cumux_futex_wait(&shm->hostfn_done, done, 100000000);
    }
    if (!j->persistent)
        free(j);
}

static CUresult op_host_func(struct srv_client *c, const struct cumux_host_func *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    struct hostfn_job *j = malloc(sizeof *j);
    if (!j)
        return CUDA_ERROR_OUT_OF_MEMORY;
    j->c = c;
    j->id = m->id;
    /* Captured into a graph, it runs at every launch of the graph: it lives as long as the client. */
    j->persistent = srv_stream_capturing(c, s);
    if (j->persistent)
        srv_keep_hostfn_job(c, j);
    CUresult r = before_op(s);
    if (r == CUDA_SUCCESS)
        r = cuLaunchHostFunc(s->cu, hostfn_trampoline, j);
    after_op(s);
    if (r != CUDA_SUCCESS && !j->persistent)
        free(j);
    return r;
}

static CUresult op_memset(struct srv_client *c, const struct cumux_memset *m)
{
    struct srv_stream *s = stream_get(c, m->stream);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->elem_size != 1 && m->elem_size != 2 && m->elem_size != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->width == 0 || m->height == 0)
        return CUDA_SUCCESS;
    uint64_t row = m->width * m->elem_size;
    if (m->width > (1ull << 48) || m->height > (1ull << 32) || (m->height > 1 && m->pitch < row) || m->pitch > (1ull << 40))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t span = m->height > 1 ? m->pitch * (m->height - 1) + row : row;
    if (!dev_ok(c, m->dst, span))
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(s));
    CUresult r;
    bool twod = m->height > 1 || m->pitch != 0;
    size_t pitch = (size_t)(m->pitch ? m->pitch : row);
    switch (m->elem_size) {
    case 1:
        r = twod ? cuMemsetD2D8Async(m->dst, pitch, (unsigned char)m->value, m->width, m->height, s->cu)
                 : cuMemsetD8Async(m->dst, (unsigned char)m->value, m->width, s->cu);
        break;
    case 2:
        r = twod ? cuMemsetD2D16Async(m->dst, pitch, (unsigned short)m->value, m->width, m->height, s->cu)
                 : cuMemsetD16Async(m->dst, (unsigned short)m->value, m->width, s->cu);
        break;
    default:
        r = twod ? cuMemsetD2D32Async(m->dst, pitch, m->value, m->width, m->height, s->cu)
                 : cuMemsetD32Async(m->dst, m->value, m->width, s->cu);
        break;
    }
    after_op(s);
    return r;
}

/* ---------------------------------------------------------------- modules and functions */

static void module_free(struct srv_client *c, uint32_t h, struct srv_module *mod)
{
    use_gpu(c, mod->gpu);
    /* Its functions and globals die with it. */
    for (uint32_t i = 1; i <= c->nhandles; i++) {
        struct srv_function *f = handle_get(c, i, OBJ_FUNCTION);
        if (f && f->module == h) {
            handle_drop(c, i);
            free(f->param_offsets);
            free(f->name);
            free(f);
        }
    }
    for (size_t i = 0; i < mod->nglobals; i++)
        cumux_ranges_remove(&c->dev_ranges, mod->globals[i], NULL);
    free(mod->globals);
    /* Unloading waits for every kernel in the context: the reaper does it. */
    if (mod->borrowed)
        ; /* the library it came from owns it */
    else if (mod->kind == CUMUX_IMAGE_LIBRARY)
        srv_reap(REAP_LIBRARY, mod->gpu, mod->image, mod->image_size, mod->lib);
    else
        srv_reap(REAP_MODULE, mod->gpu, mod->image, mod->image_size, mod->mod);
    handle_drop(c, h);
    free(mod);
}

static CUresult op_module_load(struct srv_client *c, const struct cumux_module_load *m, uint8_t *out, uint32_t *out_len)
{
    int fd = recv_client_fd(c, m->size);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    /* The driver parses the image while the client could still write it: forbid writes and shrinking. */
    if (!x || (m->kind != CUMUX_IMAGE_MODULE && m->kind != CUMUX_IMAGE_LIBRARY) || m->size == 0 ||
        m->size > (4ull << 30) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0) {
        close(fd);
        return x ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_INVALID_CONTEXT;
    }
    struct srv_module *mod = calloc(1, sizeof *mod);
    if (!mod) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* One zero byte past the image: PTX text must end in NUL and the driver reads it as a C string. */
    mod->image_size = (size_t)m->size + 1;
    mod->image = mmap(NULL, mod->image_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (mod->image == MAP_FAILED) {
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mod->kind = m->kind;
    mod->ctx = m->kind == CUMUX_IMAGE_LIBRARY ? NULL : x;
    mod->gpu = x->gpu;
    use_gpu(c, x->gpu);
    CUresult r = m->kind == CUMUX_IMAGE_LIBRARY
                     ? cuLibraryLoadData(&mod->lib, mod->image, NULL, NULL, 0, NULL, NULL, 0)
                     : cuModuleLoadData(&mod->mod, mod->image);
    uint32_t h = 0;
    if (r == CUDA_SUCCESS) {
        h = handle_new(c, OBJ_MODULE, mod);
        if (!h) {
            if (m->kind == CUMUX_IMAGE_LIBRARY)
                cuLibraryUnload(mod->lib);
            else
                cuModuleUnload(mod->mod);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r != CUDA_SUCCESS) {
        munmap(mod->image, mod->image_size);
        free(mod);
        return r;
    }
    if (m->kind == CUMUX_IMAGE_MODULE) {
        /* The driver has its own copy of a module; a library may load lazily, so keep its image. */
        munmap(mod->image, mod->image_size);
        mod->image = NULL;
    }
    return reply_u64(out, out_len, h);
}

static CUresult op_module_unload(struct srv_client *c, const struct cumux_handle_arg *m)
{
    struct srv_module *mod = handle_get(c, m->handle, OBJ_MODULE);
    if (!mod)
        return CUDA_ERROR_INVALID_HANDLE;
    module_free(c, m->handle, mod);
    return CUDA_SUCCESS;
}

static bool name_ok(const struct cumux_module_symbol *m)
{
    return memchr(m->name, 0, sizeof m->name) != NULL && m->name[0] != 0;
}

static CUresult op_module_get_function(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                                       uint32_t *out_len)
{
    struct srv_module *mod = handle_get(c, m->module, OBJ_MODULE);
    if (!mod)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!name_ok(m))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, mod->gpu);
    struct srv_function *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r;
    if (mod->kind == CUMUX_IMAGE_LIBRARY) {
        CUkernel k;
        r = cuLibraryGetKernel(&k, mod->lib, m->name);
        f->fn = (CUfunction)k;
        f->is_kernel = true;
    } else {
        r = cuModuleGetFunction(&f->fn, mod->mod, m->name);
    }
    if (r != CUDA_SUCCESS) {
        free(f);
        return r;
    }
    /* Parameter layout, so the client packs arguments itself and launches need no round trip. */
    struct cumux_function_info *info = (struct cumux_function_info *)out;
    struct cumux_param_layout *p = (struct cumux_param_layout *)(info + 1);
    uint32_t n = 0, bytes = 0;
    size_t max = (CUMUX_REPLY_DATA - sizeof *info) / sizeof *p;
    for (; n < max && n < CUMUX_MAX_PARAMS; n++) {
        size_t off, sz;
        CUresult q = f->is_kernel ? cuKernelGetParamInfo((CUkernel)f->fn, n, &off, &sz)
                                  : cuFuncGetParamInfo(f->fn, n, &off, &sz);
        if (q != CUDA_SUCCESS)
            break;
        p[n].offset = (uint32_t)off;
        p[n].size = (uint32_t)sz;
        if (off + sz > bytes)
            bytes = (uint32_t)(off + sz);
    }
    f->module = m->module;
    f->param_bytes = bytes;
    f->nparams = n;
    f->name = f->is_kernel ? strdup(m->name) : NULL;
    f->param_offsets = malloc((n + 1) * sizeof *f->param_offsets);
    for (uint32_t i = 0; f->param_offsets && i < n; i++)
        f->param_offsets[i] = p[i].offset;
    uint32_t h = f->param_offsets ? handle_new(c, OBJ_FUNCTION, f) : 0;
    if (!h) {
        free(f->param_offsets);
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    info->function = h;
    info->nparams = n;
    info->param_bytes = bytes;
    info->pad = 0;
    *out_len = (uint32_t)(sizeof *info + n * sizeof *p);
    return CUDA_SUCCESS;
}

static CUresult op_module_get_global(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                                     uint32_t *out_len)
{
    struct srv_module *mod = handle_get(c, m->module, OBJ_MODULE);
    if (!mod)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!name_ok(m))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, mod->gpu);
    CUdeviceptr p;
    size_t sz;
    if (mod->kind == CUMUX_IMAGE_LIBRARY)
        CHECK(cuLibraryGetGlobal(&p, &sz, mod->lib, m->name));
    else
        CHECK(cuModuleGetGlobal(&p, &sz, mod->mod, m->name));
    /* The client may now copy to and from it. */
    if (sz && !cumux_ranges_find(&c->dev_ranges, p)) {
        uint64_t *g = realloc(mod->globals, (mod->nglobals + 1) * sizeof *g);
        if (!g || cumux_ranges_add(&c->dev_ranges, p, sz, RANGE_GLOBAL, (uint64_t)mod->gpu) < 0) {
            if (g)
                mod->globals = g;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        mod->globals = g;
        mod->globals[mod->nglobals++] = p;
    }
    struct cumux_global_info rep = {p, sz};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

static CUresult op_module_function_names(struct srv_client *c, const struct cumux_handle_arg *a, uint8_t *out,
                                        uint32_t *out_len)
{
    struct srv_module *mod = handle_get(c, a->handle, OBJ_MODULE);
    if (!mod)
        return CUDA_ERROR_INVALID_HANDLE;
    use_gpu(c, mod->gpu);
    unsigned int total = 0;
    CUresult r = mod->kind == CUMUX_IMAGE_LIBRARY ? cuLibraryGetKernelCount(&total, mod->lib)
                                                  : cuModuleGetFunctionCount(&total, mod->mod);
    if (r != CUDA_SUCCESS)
        return r;
    void **fns = calloc(total ? total : 1, sizeof *fns);
    if (!fns)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (total)
        r = mod->kind == CUMUX_IMAGE_LIBRARY ? cuLibraryEnumerateKernels((CUkernel *)fns, total, mod->lib)
                                             : cuModuleEnumerateFunctions((CUfunction *)fns, total, mod->mod);
    struct cumux_function_names *h = (struct cumux_function_names *)out;
    size_t used = sizeof *h;
    uint32_t count = 0;
    for (uint32_t i = a->flags; r == CUDA_SUCCESS && i < total; i++) {
        const char *name = NULL;
        r = mod->kind == CUMUX_IMAGE_LIBRARY ? cuKernelGetName(&name, (CUkernel)fns[i])
                                             : cuFuncGetName(&name, (CUfunction)fns[i]);
        if (r != CUDA_SUCCESS)
            break;
        size_t len = strlen(name) + 1;
        if (len > CUMUX_NAME_MAX || used + len > CUMUX_REPLY_DATA)
            break;
        memcpy(out + used, name, len);
        used += len;
        count++;
    }
    free(fns);
    if (r != CUDA_SUCCESS)
        return r;
    h->total = total;
    h->count = count;
    *out_len = (uint32_t)used;
    return CUDA_SUCCESS;
}

static CUresult op_arch_data(struct srv_client *c, const struct cumux_handle_arg *a, uint8_t *out, uint32_t *out_len)
{
    if (a->handle >= (uint32_t)srv_gpu_count)
        return CUDA_ERROR_INVALID_DEVICE;
    use_gpu(c, (int)a->handle);
    return srv_arch_data((int)a->handle, out, CUMUX_REPLY_DATA, out_len);
}

static CUresult op_library_get_module(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                                      uint32_t *out_len)
{
    struct srv_module *lib = handle_get(c, m->module, OBJ_MODULE);
    if (!lib || lib->kind != CUMUX_IMAGE_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    use_gpu(c, lib->gpu);
    struct srv_module *mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuLibraryGetModule(&mod->mod, lib->lib);
    uint32_t h = 0;
    if (r == CUDA_SUCCESS) {
        mod->kind = CUMUX_IMAGE_MODULE;
        mod->borrowed = true;
        mod->gpu = lib->gpu;
        mod->ctx = lib->ctx;
        h = handle_new(c, OBJ_MODULE, mod);
        if (!h)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(mod);
        return r;
    }
    return reply_u64(out, out_len, h);
}

static CUresult op_func_occupancy(struct srv_client *c, const struct cumux_func_occupancy *m, uint8_t *out,
                                  uint32_t *out_len)
{
    struct srv_function *f = handle_get(c, m->function, OBJ_FUNCTION);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    struct srv_module *mod = handle_get(c, f->module, OBJ_MODULE);
    use_gpu(c, mod ? mod->gpu : 0);
    CUfunction fn = f->fn;
    if (f->is_kernel) /* occupancy queries want the kernel's function in this context */
        CHECK(cuKernelGetFunction(&fn, (CUkernel)f->fn));
    if (m->query == CUMUX_OCC_MAX_ACTIVE_BLOCKS) {
        int blocks = 0;
        CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, m->a, (size_t)m->dyn_smem, m->flags));
        return reply_u64(out, out_len, (uint64_t)blocks);
    }
    if (m->query == CUMUX_OCC_AVAILABLE_DYN_SMEM) {
        size_t bytes = 0;
        CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, fn, m->a, m->b));
        return reply_u64(out, out_len, bytes);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult op_cluster_occupancy(struct srv_client *c, const struct cumux_launch *m, const uint8_t *payload,
                                     uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    struct srv_function *f = handle_get(c, m->function, OBJ_FUNCTION);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->nattrs > 16 || (uint64_t)m->nattrs * sizeof(struct cumux_launch_attr) > payload_len || m->query > 1)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_module *mod = handle_get(c, f->module, OBJ_MODULE);
    use_gpu(c, mod ? mod->gpu : 0);
    CUfunction fn = f->fn;
    if (f->is_kernel)
        CHECK(cuKernelGetFunction(&fn, (CUkernel)f->fn));
    CUlaunchAttribute attrs[16];
    const struct cumux_launch_attr *a = (const void *)payload;
    for (uint32_t i = 0; i < m->nattrs; i++) {
        if (!cumux_launch_attr_plain(a[i].id))
            return CUDA_ERROR_INVALID_VALUE;
        attrs[i].id = (CUlaunchAttributeID)a[i].id;
        memcpy(&attrs[i].value, a[i].value, sizeof attrs[i].value);
    }
    CUlaunchConfig cfg = {.gridDimX = m->grid[0], .gridDimY = m->grid[1], .gridDimZ = m->grid[2],
                          .blockDimX = m->block[0], .blockDimY = m->block[1], .blockDimZ = m->block[2],
                          .sharedMemBytes = m->shared_bytes, .attrs = attrs, .numAttrs = m->nattrs};
    int v = 0;
    if (m->query == 0)
        CHECK(cuOccupancyMaxActiveClusters(&v, fn, &cfg));
    else
        CHECK(cuOccupancyMaxPotentialClusterSize(&v, fn, &cfg));
    return reply_u64(out, out_len, (uint64_t)v);
}

static CUresult op_func_attr(struct srv_client *c, const struct cumux_func_attr *m, bool set, uint8_t *out,
                             uint32_t *out_len)
{
    struct srv_function *f = handle_get(c, m->function, OBJ_FUNCTION);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    struct srv_module *mod = handle_get(c, f->module, OBJ_MODULE);
    int gpu = mod ? mod->gpu : 0;
    use_gpu(c, gpu);
    int v = 0;
    if (set) {
        if (f->is_kernel)
            return cuKernelSetAttribute((CUfunction_attribute)m->attr, m->value, (CUkernel)f->fn, srv_gpus[gpu].dev);
        return cuFuncSetAttribute(f->fn, (CUfunction_attribute)m->attr, m->value);
    }
    if (f->is_kernel)
        CHECK(cuKernelGetAttribute(&v, (CUfunction_attribute)m->attr, (CUkernel)f->fn, srv_gpus[gpu].dev));
    else
        CHECK(cuFuncGetAttribute(&v, (CUfunction_attribute)m->attr, f->fn));
    memcpy(out, &v, sizeof v);
    *out_len = sizeof v;
    return CUDA_SUCCESS;
}

static CUresult op_launch(struct srv_client *c, const struct cumux_launch *m, const uint8_t *payload, uint32_t payload_len)
{
    struct srv_function *f = handle_get(c, m->function, OBJ_FUNCTION);
    struct srv_stream *s = stream_get(c, m->stream);
    if (!f || !s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->nattrs > 16 || (uint64_t)m->nattrs * sizeof(struct cumux_launch_attr) + m->param_bytes > payload_len ||
        m->param_bytes != f->param_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *params = payload + m->nattrs * sizeof(struct cumux_launch_attr);
    size_t psize = m->param_bytes;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
    /* kernelParams: pointers to each argument in the message (the driver's usual, fastest path). */
    void *kp[CUMUX_MAX_PARAMS];
    for (uint32_t i = 0; i < f->nparams; i++)
        kp[i] = (void *)(params + f->param_offsets[i]);
    CHECK(before_op(s));
    CUresult r;
    if (m->nattrs == 0) {
        r = cuLaunchKernel(f->fn, m->grid[0], m->grid[1], m->grid[2], m->block[0], m->block[1], m->block[2],
                           m->shared_bytes, s->cu, f->nparams ? kp : NULL, NULL);
    } else {
        CUlaunchAttribute attrs[16];
        const struct cumux_launch_attr *a = (const struct cumux_launch_attr *)payload;
        for (uint32_t i = 0; i < m->nattrs; i++) {
            memcpy(&attrs[i].value, a[i].value, sizeof attrs[i].value);
            attrs[i].id = (CUlaunchAttributeID)a[i].id;
            if (!cumux_launch_attr_plain(a[i].id)) {
                after_op(s);
                return CUDA_ERROR_NOT_SUPPORTED;
            }
        }
        CUlaunchConfig cfg = {.gridDimX = m->grid[0], .gridDimY = m->grid[1], .gridDimZ = m->grid[2],
                              .blockDimX = m->block[0], .blockDimY = m->block[1], .blockDimZ = m->block[2],
                              .sharedMemBytes = m->shared_bytes, .hStream = s->cu, .attrs = attrs,
                              .numAttrs = m->nattrs};
        r = cuLaunchKernelEx(&cfg, f->fn, NULL, psize ? extra : NULL);
    }
    after_op(s);
    atomic_fetch_add_explicit(&c->launches, 1, memory_order_relaxed);
    return r;
}

/* ---------------------------------------------------------------- init */

static CUresult op_init(struct srv_client *c, uint8_t *out, uint32_t *out_len)
{
    struct cumux_init_reply rep = {.driver_version = srv_driver_version, .device_count = srv_gpu_count,
                                   .client_id = c->id};
    memcpy(out, &rep, sizeof rep);
    for (int i = 0; i < srv_gpu_count; i++)
        memcpy(out + sizeof rep + (size_t)i * sizeof(struct cumux_device_info), &srv_gpus[i].info,
               sizeof(struct cumux_device_info));
    *out_len = (uint32_t)(sizeof rep + (size_t)srv_gpu_count * sizeof(struct cumux_device_info));
    return CUDA_SUCCESS;
}

_Static_assert(sizeof(struct cumux_init_reply) + CUMUX_MAX_DEVICES * sizeof(struct cumux_device_info) <= CUMUX_REPLY_DATA,
               "init reply must fit a reply slot");

/* ---------------------------------------------------------------- dispatch */

static const struct {
    uint32_t body;
    uint8_t oneway;
} op_shape[CUMUX_OP_COUNT] = {
#define CUMUX_OP_SHAPE(name, body_t, ow) [CUMUX_OP_##name] = {sizeof(struct body_t), ow},
    CUMUX_OPS(CUMUX_OP_SHAPE)
#undef CUMUX_OP_SHAPE
};

int srv_dispatch(struct srv_client *c, void *msg, uint32_t size)
{
    const struct cumux_msg_hdr *hdr = msg;
    if (hdr->op == CUMUX_OP_PAD || hdr->op >= CUMUX_OP_COUNT)
        return -1;
    uint32_t body_len = size - (uint32_t)sizeof *hdr;
    if (body_len < op_shape[hdr->op].body)
        return -1;
    bool answered = hdr->reply != CUMUX_NO_REPLY;
    if (answered && hdr->reply >= CUMUX_REPLY_SLOTS)
        return -1;
    if ((op_shape[hdr->op].oneway == 1 && answered) || (op_shape[hdr->op].oneway == 0 && !answered))
        return -1;
    const void *body = hdr + 1;
    const uint8_t *payload = (const uint8_t *)body + op_shape[hdr->op].body;
    uint32_t payload_len = body_len - op_shape[hdr->op].body;

    static __thread uint8_t scratch[CUMUX_REPLY_DATA];
    struct cumux_reply_slot *slot = answered ? &c->shm->replies[hdr->reply] : NULL;
    uint8_t *out = slot ? slot->data : scratch;
    uint32_t out_len = 0;
    CUresult r;
    switch ((enum cumux_op)hdr->op) {
    case CUMUX_OP_INIT: r = op_init(c, out, &out_len); break;
    case CUMUX_OP_CTX_CREATE: r = op_ctx_create(c, body, out, &out_len); break;
    case CUMUX_OP_CTX_DESTROY: r = op_ctx_destroy(c, body); break;
    case CUMUX_OP_CTX_SYNC: r = op_ctx_sync(c, body); break;
    case CUMUX_OP_CTX_LIMIT: r = op_ctx_limit(c, body, out, &out_len); break;
    case CUMUX_OP_MEM_ALLOC: r = op_mem_alloc(c, body, out, &out_len); break;
    case CUMUX_OP_MEM_FREE: r = op_mem_free(c, body); break;
    case CUMUX_OP_MEM_INFO: r = op_mem_info(c, body, out, &out_len); break;
    case CUMUX_OP_HOST_ALLOC: r = op_host_alloc(c, body, out, &out_len); break;
    case CUMUX_OP_HOST_FREE: r = op_host_free(c, body); break;
    case CUMUX_OP_MODULE_LOAD: r = op_module_load(c, body, out, &out_len); break;
    case CUMUX_OP_MODULE_UNLOAD: r = op_module_unload(c, body); break;
    case CUMUX_OP_MODULE_GET_FUNCTION: r = op_module_get_function(c, body, out, &out_len); break;
    case CUMUX_OP_MODULE_GET_GLOBAL: r = op_module_get_global(c, body, out, &out_len); break;
    case CUMUX_OP_LIBRARY_GET_MODULE: r = op_library_get_module(c, body, out, &out_len); break;
    case CUMUX_OP_MODULE_FUNCTION_NAMES: r = op_module_function_names(c, body, out, &out_len); break;
    case CUMUX_OP_ARCH_DATA: r = op_arch_data(c, body, out, &out_len); break;
    case CUMUX_OP_FUNC_OCCUPANCY: r = op_func_occupancy(c, body, out, &out_len); break;
    case CUMUX_OP_FUNC_CLUSTER_OCCUPANCY: r = op_cluster_occupancy(c, body, payload, payload_len, out, &out_len); break;
    case CUMUX_OP_FUNC_GET_ATTRIBUTE: r = op_func_attr(c, body, false, out, &out_len); break;
    case CUMUX_OP_FUNC_SET_ATTRIBUTE: r = op_func_attr(c, body, true, out, &out_len); break;
    case CUMUX_OP_STREAM_CREATE: r = op_stream_create(c, body, out, &out_len); break;
    case CUMUX_OP_STREAM_DESTROY: r = op_stream_destroy(c, body); break;
    case CUMUX_OP_STREAM_SYNC: r = op_stream_sync(c, body); break;
    case CUMUX_OP_STREAM_QUERY: r = op_stream_query(c, body); break;
    case CUMUX_OP_STREAM_WAIT_EVENT: r = op_stream_wait_event(c, body); break;
    case CUMUX_OP_EVENT_CREATE: r = op_event_create(c, body, out, &out_len); break;
    case CUMUX_OP_EVENT_DESTROY: r = op_event_destroy(c, body); break;
    case CUMUX_OP_EVENT_RECORD: r = op_event_record(c, body); break;
    case CUMUX_OP_EVENT_QUERY: r = op_event_query(c, body); break;
    case CUMUX_OP_EVENT_SYNC: r = op_event_sync(c, body); break;
    case CUMUX_OP_EVENT_ELAPSED: r = op_event_elapsed(c, body, out, &out_len); break;
    case CUMUX_OP_COPY: r = op_copy(c, body, answered); break;
    case CUMUX_OP_COPY_2D: r = op_copy_2d(c, body, answered); break;
    case CUMUX_OP_COPY_HTOD_STAGED: r = op_copy_htod_staged(c, body); break;
    case CUMUX_OP_COPY_DTOH_STAGED: r = op_copy_dtoh_staged(c, body); break;
    case CUMUX_OP_MEMSET: r = op_memset(c, body); break;
    case CUMUX_OP_LAUNCH: r = op_launch(c, body, payload, payload_len); break;
    case CUMUX_OP_POOL_DEFAULT:
    case CUMUX_OP_POOL_CREATE:
    case CUMUX_OP_POOL_DESTROY:
    case CUMUX_OP_POOL_ATTRIBUTE:
    case CUMUX_OP_POOL_TRIM: r = op_pool(c, hdr->op, body, out, &out_len); break;
    case CUMUX_OP_MEM_ALLOC_ASYNC: r = op_mem_alloc_async(c, body, out, &out_len); break;
    case CUMUX_OP_MEM_FREE_ASYNC: r = op_mem_free_async(c, body); break;
    case CUMUX_OP_HOST_FUNC: r = op_host_func(c, body); break;
    case CUMUX_OP_CAPTURE_BEGIN:
    case CUMUX_OP_CAPTURE_END:
    case CUMUX_OP_CAPTURE_INFO:
    case CUMUX_OP_GRAPH_CREATE:
    case CUMUX_OP_GRAPH_DESTROY:
    case CUMUX_OP_GRAPH_INSTANTIATE:
    case CUMUX_OP_GRAPH_EXEC_DESTROY:
    case CUMUX_OP_GRAPH_LAUNCH:
    case CUMUX_OP_GRAPH_UPLOAD:
    case CUMUX_OP_GRAPH_EXEC_UPDATE:
    case CUMUX_OP_GRAPH_ADD_NODE:
    case CUMUX_OP_GRAPH_SET_NODE:
    case CUMUX_OP_GRAPH_QUERY:
    case CUMUX_OP_GRAPH_ADD_DEPS: r = srv_graph_op(c, hdr->op, body, payload, payload_len, out, &out_len); break;
    default: return -1;
    }
    if (slot) {
        if (r != CUDA_SUCCESS)
            out_len = 0;
        cumux_reply_post(slot, r, out, out_len);
    } else if (r != CUDA_SUCCESS && c->pending_error == CUDA_SUCCESS) {
        c->pending_error = r; /* reported by the next synchronizing call (invariant 2) */
    }
    return 0;
}

/* ---------------------------------------------------------------- cleanup */

void srv_client_release_all(struct srv_client *c)
{
    srv_staging_flush(c);
    /* Let in-flight work finish first: it may still use the memory freed below. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s) {
            use_gpu(c, s->ctx->gpu);
            cuStreamSynchronize(s->cu);
        }
    }
    srv_graph_release_all(c); /* graphs name the client's kernels and memory: before those go */
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
    while (c->dev_ranges.n) {
        struct cumux_range r = c->dev_ranges.v[c->dev_ranges.n - 1];
        cumux_ranges_remove(&c->dev_ranges, r.base, NULL);
        if (r.tag == RANGE_ALLOC) {
            CUstream ms;
            if (mem_stream(c, (int)r.extra, &ms) == CUDA_SUCCESS)
                cuMemFreeAsync(r.base, ms);
            atomic_fetch_sub(&c->mem_bytes, r.size);
        }
    }
    cumux_ranges_free(&c->dev_ranges);
    for (int g = 0; g < srv_gpu_count; g++) {
        if (c->mem_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->mem_stream[g]);
            cuStreamDestroy(c->mem_stream[g]);
            /* Give the freed memory back to the device now, not at the pool's leisure. */
            if (c->default_pool[g])
                cuMemPoolTrimTo(c->default_pool[g]->pool, 0);
        }
    }
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
    /* The staging buffers stay mapped until the reaper has unregistered them (srv_client_free). */
}
