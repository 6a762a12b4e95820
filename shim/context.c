/* Contexts as the program sees them. Each maps onto the server's one real context of its device; the
 * server gives each its own legacy default stream, so a client's NULL stream and cuCtxSynchronize
 * concern only that client's work (invariant 1). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

/* cuStreamGetId of every stream of the process, its contexts' legacy and per-thread streams included. */
_Atomic uint64_t shim_next_stream_id = 1000;

/* The plain names are the legacy entry points (cuda.h maps them to _v2): define both. */
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);

static __thread struct CUctx_st *tls_ctx_stack[32];
static __thread int tls_ctx_depth; /* tls_ctx_stack[depth-1] is current; depth 0: none */
static _Atomic uint64_t next_ctx_id = 1;

/* The per-thread default stream of each context this thread used (CU_STREAM_PER_THREAD). */
struct ptds_entry {
    struct CUctx_st *ctx;
    uint32_t generation; /* the context's, when the stream was made: a reset makes new streams */
    uint32_t stream;
    uint64_t id; /* what cuStreamGetId answers: unique in the process, never reused */
    _Atomic uint32_t lost; /* shim_lost word: a stream made anew after a resume keeps the old one's */
};
static __thread struct ptds_entry tls_ptds[8];
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;

static void ptds_thread_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < 8; i++) {
        if (tls_ptds[i].ctx && shim.initialized && tls_ptds[i].ctx->magic == SHIM_MAGIC_CTX) {
            shim_op_stream_destroy(tls_ptds[i].stream);
        }
        tls_ptds[i].ctx = NULL;
    }
}

static void ptds_init(void)
{
    pthread_key_create(&ptds_key, ptds_thread_exit);
}

struct CUctx_st *shim_current_ctx(void)
{
    return tls_ctx_depth > 0 ? tls_ctx_stack[tls_ctx_depth - 1] : NULL;
}

struct shim_chan *shim_current_chan(void)
{
    if (!atomic_load_explicit(&shim_extra_count, memory_order_relaxed))
        return &shim.main;
    struct CUctx_st *c = shim_current_ctx();
    return c && c->device >= 0 && c->device < shim.device_count ? shim_chan_of_gpu(shim.server_gpu[c->device])
                                                                : &shim.main;
}

/* The current context's scheduling flags: how the program asked its threads to wait for the GPU
 * (cudaSetDeviceFlags, cuCtxCreate, cuDevicePrimaryCtxSetFlags). Natively AUTO spins while the process has
 * fewer contexts than CPUs; here it spins and yields up to 20 ms, then sleeps, and sleeps after 50 us while
 * the server's clients are more than half the CPUs (common/channel.h). */
static enum cumux_wait_mode ctx_wait_mode(void)
{
    struct CUctx_st *c = shim_current_ctx();
    switch (c ? c->flags & CU_CTX_SCHED_MASK : 0) {
    case CU_CTX_SCHED_SPIN:
        return CUMUX_WAIT_SPIN;
    case CU_CTX_SCHED_YIELD:
        return CUMUX_WAIT_YIELD;
    case CU_CTX_SCHED_BLOCKING_SYNC:
        return CUMUX_WAIT_BLOCK;
    default:
        return CUMUX_WAIT_AUTO;
    }
}

__attribute__((constructor)) static void register_wait_mode(void)
{
    shim_set_wait_mode_lookup(ctx_wait_mode);
}

CUresult shim_need_ctx(struct CUctx_st **out)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* Come back first if the worker went: the handles read below are then the new worker's. */
    CUresult r = shim_check_channel();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = shim_current_ctx();
    if (!c || c->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

/* The last resume that lost work spared every per-thread stream: from (high half) the epoch before it to
 * (low half) the one it began; 0: none. A thread's per-thread stream is made anew at its next use. */
static _Atomic uint64_t ptds_spared_span;

static CUresult ptds_stream(struct CUctx_st *ctx, uint32_t *out)
{
    int free_i = -1;
    uint32_t lost = atomic_load(&shim_lost_epoch);
    for (int i = 0; i < 8; i++) {
        if (tls_ptds[i].ctx == ctx && tls_ptds[i].generation != ctx->generation) {
            tls_ptds[i].ctx = NULL; /* made before a reset of the context (or a resume): gone with it */
            lost = atomic_load(&tls_ptds[i].lost); /* what it had going may have been lost */
            uint64_t span = atomic_load(&ptds_spared_span);
            if (span && lost == (uint32_t)(span >> 32) && atomic_load(&shim_lost_epoch) == (uint32_t)span)
                lost = (uint32_t)span; /* it lost nothing then */
        }
        if (tls_ptds[i].ctx == ctx) {
            *out = tls_ptds[i].stream;
            return CUDA_SUCCESS;
        }
        if (!tls_ptds[i].ctx && free_i < 0)
            free_i = i;
    }
    if (free_i < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_once(&ptds_once, ptds_init);
    /* A blocking stream of its own: it synchronizes with the legacy stream, as CUDA's does. */
    uint64_t stream;
    CUresult r = shim_op_stream_create(ctx->handle, 0, 0, &stream);
    if (r != CUDA_SUCCESS)
        return r;
    tls_ptds[free_i] = (struct ptds_entry){ctx, ctx->generation, (uint32_t)stream,
                                           atomic_fetch_add(&shim_next_stream_id, 1), lost};
    pthread_setspecific(ptds_key, (void *)1);
    *out = (uint32_t)stream;
    return CUDA_SUCCESS;
}

_Atomic uint32_t *shim_stream_lost_word(CUstream h, struct CUctx_st *ctx)
{
    if (h == NULL)
        h = cumux_tls_ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY)
        return &ctx->legacy_lost;
    if (h != CU_STREAM_PER_THREAD)
        return &h->lost;
    for (int i = 0; i < 8; i++)
        if (tls_ptds[i].ctx == ctx)
            return &tls_ptds[i].lost;
    static _Atomic uint32_t none; /* not made yet: nothing of it was lost */
    atomic_store(&none, atomic_load(&shim_lost_epoch));
    return &none;
}

CUresult shim_stream_lost(CUstream h, struct CUctx_st *ctx)
{
    return ctx ? shim_lost_report(shim_stream_lost_word(h, ctx)) : CUDA_SUCCESS;
}

CUresult shim_default_stream_id(CUstream h, unsigned long long *id)
{
    uint32_t s;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(h, &s, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (s == ctx->legacy_stream) {
        *id = ctx->legacy_stream_id;
        return CUDA_SUCCESS;
    }
    for (int i = 0; i < 8; i++) {
        if (tls_ptds[i].ctx == ctx && tls_ptds[i].stream == s) {
            *id = tls_ptds[i].id;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult shim_resolve_stream(CUstream h, uint32_t *out, struct CUctx_st **ctx_out)
{
    struct CUctx_st *ctx = NULL;
    if (h == NULL)
        h = cumux_tls_ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        CUresult r = shim_need_ctx(&ctx);
        if (r != CUDA_SUCCESS)
            return r;
        if (ctx_out)
            *ctx_out = ctx;
        if (h == CU_STREAM_LEGACY) {
            *out = ctx->legacy_stream;
            return CUDA_SUCCESS;
        }
        return ptds_stream(ctx, out);
    }
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (h->magic != SHIM_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = shim_check_channel(); /* as in shim_need_ctx */
    if (r != CUDA_SUCCESS)
        return r;
    *out = h->handle;
    if (ctx_out)
        *ctx_out = h->ctx;
    return CUDA_SUCCESS;
}

/* ---- storage that lives as long as a context (the runtime's per-context state: export table
 * CONTEXT_LOCAL_STORAGE) ---- */
struct cls_entry {
    CUcontext ctx;
    void *key;
    void *value;
    cls_dtor dtor;
    struct cls_entry *next;
};

static struct cls_entry *cls_head;
static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult cls_context(CUcontext *ctx)
{
    if (*ctx)
        return (*ctx)->magic == SHIM_MAGIC_CTX ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    *ctx = c;
    return r;
}

CUresult shim_cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor)
{
    CUresult r = cls_context(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cls_lock);
    struct cls_entry *e = cls_head;
    while (e && !(e->ctx == ctx && e->key == key))
        e = e->next;
    if (!e && (e = calloc(1, sizeof *e))) {
        e->ctx = ctx;
        e->key = key;
        e->next = cls_head;
        cls_head = e;
    }
    if (e) {
        e->value = value;
        e->dtor = dtor;
    }
    pthread_mutex_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult shim_cls_delete(CUcontext ctx, void *key)
{
    CUresult r = cls_context(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cls_lock);
    r = CUDA_ERROR_INVALID_HANDLE;
    for (struct cls_entry **p = &cls_head; *p; p = &(*p)->next) {
        if ((*p)->ctx == ctx && (*p)->key == key) {
            struct cls_entry *e = *p;
            *p = e->next;
            free(e);
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&cls_lock);
    return r;
}

CUresult shim_cls_get(void **value, CUcontext ctx, void *key)
{
    CUresult r = cls_context(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cls_lock);
    r = CUDA_ERROR_INVALID_HANDLE;
    for (struct cls_entry *e = cls_head; e; e = e->next) {
        if (e->ctx == ctx && e->key == key) {
            *value = e->value;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&cls_lock);
    return r;
}

static void context_storage_release(CUcontext ctx)
{
    /* Taken out under the lock, destroyed outside it: a destructor may call back into the driver. */
    pthread_mutex_lock(&cls_lock);
    struct cls_entry *mine = NULL;
    for (struct cls_entry **p = &cls_head; *p;) {
        struct cls_entry *e = *p;
        if (e->ctx == ctx) {
            *p = e->next;
            e->next = mine;
            mine = e;
        } else {
            p = &e->next;
        }
    }
    pthread_mutex_unlock(&cls_lock);
    while (mine) {
        struct cls_entry *e = mine;
        mine = e->next;
        if (e->dtor)
            e->dtor(ctx, e->key, e->value);
        free(e);
    }
}

/* ---- creation and destruction ---- */
/* Every context object the program made (primary or its own), to make them again after a resume. */
static struct shim_list all_contexts = SHIM_LIST_INIT;

static CUresult ctx_new(int dev, unsigned flags, bool primary, struct CUctx_st **out)
{
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cumux_ctx_reply rep;
    CUresult r = shim_op_ctx_create(dev, flags, &rep);
    if (r != CUDA_SUCCESS) {
        free(c);
        return r;
    }
    c->magic = SHIM_MAGIC_CTX;
    c->handle = rep.ctx;
    c->legacy_stream = rep.legacy_stream;
    c->device = dev;
    c->flags = flags;
    c->primary = primary;
    c->id = atomic_fetch_add(&next_ctx_id, 1);
    c->legacy_stream_id = atomic_fetch_add(&shim_next_stream_id, 1);
    atomic_store(&c->legacy_lost, atomic_load(&shim_lost_epoch));
    atomic_store(&c->sync_lost, atomic_load(&shim_lost_epoch));
    shim_list_add(&all_contexts, c);
    *out = c;
    return CUDA_SUCCESS;
}

static void ctx_forget_current(struct CUctx_st *c)
{
    for (int i = 0; i < tls_ctx_depth; i++)
        if (tls_ctx_stack[i] == c)
            tls_ctx_stack[i] = NULL;
    while (tls_ctx_depth > 0 && !tls_ctx_stack[tls_ctx_depth - 1])
        tls_ctx_depth--;
}

static CUresult ctx_delete(struct CUctx_st *c)
{
    context_storage_release(c);
    CUresult r = shim_op_ctx_destroy(c->handle, 0);
    for (int i = 0; i < 8; i++)
        if (tls_ptds[i].ctx == c)
            tls_ptds[i].ctx = NULL;
    c->magic = SHIM_MAGIC_DEAD;
    ctx_forget_current(c);
    /* The object stays allocated: stale handles then fail the magic check instead of reading freed memory. */
    return r;
}

void shim_contexts_note_lost(const struct shim_lost_work *lw, uint64_t *unclaimed)
{
    pthread_mutex_lock(&all_contexts.lock);
    for (size_t i = 0; i < all_contexts.n; i++) {
        struct CUctx_st *c = all_contexts.v[i];
        if (c->magic != SHIM_MAGIC_CTX)
            continue;
        uint32_t h = CUMUX_HANDLE_INDEX(c->legacy_stream);
        c->legacy_spared = !shim_lost_stream(lw, h);
        c->sync_spared = c->legacy_spared; /* and its streams' (stream.c), and the per-thread ones' */
        if (h < CUMUX_LOST_STREAM_WORDS * 64)
            unclaimed[h / 64] &= ~(1ull << (h % 64));
    }
    pthread_mutex_unlock(&all_contexts.lock);
}

void shim_contexts_spare(uint32_t next, bool ptds_spared)
{
    pthread_mutex_lock(&all_contexts.lock);
    for (size_t i = 0; i < all_contexts.n; i++) {
        struct CUctx_st *c = all_contexts.v[i];
        if (c->magic != SHIM_MAGIC_CTX)
            continue;
        if (c->legacy_spared)
            shim_lost_spare(&c->legacy_lost, next);
        if (c->sync_spared && ptds_spared)
            shim_lost_spare(&c->sync_lost, next);
    }
    pthread_mutex_unlock(&all_contexts.lock);
    atomic_store(&ptds_spared_span, ptds_spared ? (uint64_t)(next - 1) << 32 | next : 0);
}

CUresult shim_contexts_rebind(void)
{
    /* ctx_lock may be held by this very thread (a call that found the worker gone): try, else go on. */
    bool locked = pthread_mutex_trylock(&shim.ctx_lock) == 0;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&all_contexts.lock);
    for (size_t i = 0; i < all_contexts.n && r == CUDA_SUCCESS; i++) {
        struct CUctx_st *c = all_contexts.v[i];
        struct cumux_ctx_reply rep;
        if (c->magic == SHIM_MAGIC_CTX && (r = shim_op_ctx_create(c->device, c->flags, &rep)) == CUDA_SUCCESS) {
            c->handle = rep.ctx;
            c->legacy_stream = rep.legacy_stream;
            c->generation++; /* every thread's per-thread default stream of it is made anew when next used */
            atomic_store(&c->synced_seq, 0);
            atomic_store(&c->legacy_idle.query_seq, 0);
            atomic_store(&c->legacy_idle.sync_seq, 0);
            /* The limits it set (a stack size its kernels need, a heap for their malloc): set again, before
             * any of its kernels runs in the new worker; one that cannot be fails the comeback. */
            for (unsigned l = 0; l < CU_LIMIT_MAX && r == CUDA_SUCCESS; l++) {
                uint64_t v = atomic_load(&c->limits_set[l]), unused;
                if (v)
                    r = shim_op_ctx_limit(c->handle, l, true, v, &unused);
            }
        }
    }
    pthread_mutex_unlock(&all_contexts.lock);
    if (locked)
        pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&shim.ctx_lock);
    CUresult r = CUDA_SUCCESS;
    if (!shim.primary[dev])
        r = ctx_new(dev, shim.primary_flags[dev], true, &shim.primary[dev]);
    if (r == CUDA_SUCCESS) {
        shim.primary_refs[dev]++;
        *pctx = shim.primary[dev];
    }
    pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&shim.ctx_lock);
    CUresult r = CUDA_SUCCESS;
    if (shim.primary_refs[dev] <= 0) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--shim.primary_refs[dev] == 0) {
        /* As in CUDA, the last release destroys the primary context and what it holds. */
        r = ctx_delete(shim.primary[dev]);
        shim.primary[dev] = NULL;
    }
    pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease(dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&shim.ctx_lock);
    CUresult r = CUDA_SUCCESS;
    struct CUctx_st *c = shim.primary[dev];
    if (c) {
        /* The primary context keeps its handle across a reset (the runtime holds on to it): its state in
         * the server is destroyed and made anew under the same object. */
        context_storage_release(c);
        r = shim_op_ctx_destroy(c->handle, CUMUX_CTX_DESTROY_RESET);
        struct CUctx_st *fresh;
        if (r == CUDA_SUCCESS && (r = ctx_new(dev, 0, true, &fresh)) == CUDA_SUCCESS) {
            c->handle = fresh->handle;
            c->legacy_stream = fresh->legacy_stream;
            c->legacy_stream_id = fresh->legacy_stream_id;
            c->flags = 0;
            c->generation++;
            for (unsigned l = 0; l < CU_LIMIT_MAX; l++)
                atomic_store(&c->limits_set[l], 0); /* the reset context has the driver's defaults */
            free(fresh);
        }
    }
    shim.primary_flags[dev] = 0;
    pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return cuDevicePrimaryCtxReset(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&shim.ctx_lock);
    *flags = shim.primary_flags[dev];
    *active = shim.primary[dev] != NULL;
    pthread_mutex_unlock(&shim.ctx_lock);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    /* Scheduling flags only shape how the host waits; the server decides that for everyone. */
    if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&shim.ctx_lock);
    shim.primary_flags[dev] = flags;
    if (shim.primary[dev])
        shim.primary[dev]->flags = flags;
    pthread_mutex_unlock(&shim.ctx_lock);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags(dev, flags);
}

static CUresult ctx_create_push(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = ctx_new(dev, flags, false, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (tls_ctx_depth >= 32) {
        ctx_delete(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    tls_ctx_stack[tls_ctx_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create_push(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags, CUdevice dev)
{
    if (params && n > 0)
        return cumux_unsupported("cuCtxCreate_v3 with execution affinity");
    return ctx_create_push(pctx, flags, dev);
}

CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams))
        return cumux_unsupported("cuCtxCreate_v4 with affinity or CIG parameters");
    return ctx_create_push(pctx, flags, dev);
}

CUresult cuCtxDestroy(CUcontext ctx)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx || ctx->magic != SHIM_MAGIC_CTX || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    return ctx_delete(ctx);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && ctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (tls_ctx_depth > 0)
            tls_ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (tls_ctx_depth == 0)
        tls_ctx_depth = 1;
    tls_ctx_stack[tls_ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = shim_current_ctx();
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx || ctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_ctx_depth >= 32)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_ctx_stack[tls_ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (tls_ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = tls_ctx_stack[--tls_ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

static CUresult ctx_or_current(CUcontext ctx, struct CUctx_st **out)
{
    if (!ctx)
        return shim_need_ctx(out);
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    *dev = c->device;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    struct CUctx_st *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    *dev = c->device;
    return CUDA_SUCCESS;
}

/* As a stream's synchronize (stream.c): while no work has been sent since the last one, the next needs no
 * round trip. */
static CUresult ctx_sync(struct CUctx_st *c)
{
    CUresult r = shim_lost_report(&c->sync_lost);
    if (r != CUDA_SUCCESS)
        return r;
    if (shim_idle_still(atomic_load(&c->synced_seq)) || shim_marks_ctx_idle(c->handle))
        return CUDA_SUCCESS;
    r = shim_op_ctx_sync(c->handle);
    if (r == CUDA_ERROR_LAUNCH_FAILED) /* in flight at a fault (connection.c): said */
        shim_lost_said(&c->sync_lost);
    if (r == CUDA_SUCCESS)
        atomic_store(&c->synced_seq, shim_question_seq + 1);
    return r;
}

CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    return r == CUDA_SUCCESS ? ctx_sync(c) : r;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct CUctx_st *c;
    CUresult r = ctx_or_current(ctx, &c);
    return r == CUDA_SUCCESS ? ctx_sync(c) : r;
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetFlags(unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    c->flags = flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    struct CUctx_st *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = c->id;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct CUctx_st *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020; /* what the driver reports for contexts made with the current API */
    return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (least)
        *least = shim.devices[c->device].stream_priority_least;
    if (greatest)
        *greatest = shim.devices[c->device].stream_priority_greatest;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache *cfg)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!cfg)
        return CUDA_ERROR_INVALID_VALUE;
    *cfg = (CUfunc_cache)__atomic_load_n(&c->cache_config, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache cfg)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((unsigned)cfg > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    /* The shared context's own preference is every client's: this one is given to each of the program's
     * functions that has none of its own, before its next launch (module.c shim_cache_config_sync). */
    __atomic_store_n(&c->cache_config, (int)cfg, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

static CUresult ctx_limit(CUlimit limit, bool set, size_t *value)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t answer = 0;
    r = shim_op_ctx_limit(c->handle, (uint32_t)limit, set, set ? *value : 0, &answer);
    if (r == CUDA_SUCCESS && !set)
        *value = (size_t)answer;
    if (r == CUDA_SUCCESS && set && (unsigned)limit < CU_LIMIT_MAX)
        atomic_store(&c->limits_set[limit], (uint64_t)*value);
    return r;
}

CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_limit(limit, false, value);
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    return ctx_limit(limit, true, &value);
}

/* Shared memory banks are four bytes wide on every GPU cumux serves (Volta and later): the setting has no
 * effect there, and the driver accepts any valid value and reports four-byte banks. */
static bool shared_config_ok(CUsharedconfig c)
{
    return c == CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || c == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE ||
           c == CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE;
}

CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    return shared_config_ok(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return CUDA_SUCCESS;
}

CUresult cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig config)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    return shared_config_ok(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
