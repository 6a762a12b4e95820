/* Contexts of a client: each with its legacy stream (stream.c), on one GPU of the shared context. */

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/handlers.h"

CUresult op_ctx_create(struct srv_client *c, const struct cumux_ctx_create *m, uint8_t *out, uint32_t *out_len)
{
    struct srv_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->gpu = m->device;
    x->unconfirmed = &c->fault.unconfirmed;
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
        if (srv_stream_known_idle(c, s))
            continue;
        srv_marks_asked(c, s);
        if (srv_marks_idle(c, s))
            continue;
        CUresult r = cuStreamSynchronize(s->cu);
        if (r == CUDA_SUCCESS) {
            s->idle_gen = c->obj.work_gen;
            srv_stream_confirmed(s);
        }
        if (first == CUDA_SUCCESS)
            first = r;
    }
    return first;
}

void ctx_free(struct srv_client *c, struct srv_ctx *x)
{
    /* Captures its streams are in end first, as a stream's destruction ends its own (op_stream_destroy):
     * their graph allocations and graphs would otherwise outlive the stream unseen (a fuzzing finding). */
    for (struct srv_stream *s = x->streams; s; s = s->next_in_ctx)
        srv_capture_abandon(c, s);
    ctx_sync(c, x);
    /* Events of the context go with it, as in CUDA. */
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_event *e = handle_get(c, h, OBJ_EVENT);
        if (e && e->ctx == x)
            event_free(c, e);
    }
    /* Modules go with their context, as in CUDA; libraries are not bound to one. */
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (mod && mod->ctx == x)
            module_free(c, mod);
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
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (!mod || mod->kind != CUMUX_IMAGE_LIBRARY || mod->borrowed || mod->gpu != gpu || !mod->image)
            continue;
        CUlibrary fresh;
        if (srv_library_load(&fresh, mod->image, NULL, NULL, 0) != CUDA_SUCCESS) {
            cumux_logf("client %u: library %u could not be loaded again after a reset", c->id, h);
            continue;
        }
        srv_reap(REAP_LIBRARY, gpu, NULL, 0, mod->lib);
        mod->lib = fresh;
        mod->lib_module = NULL;
        for (size_t i = 0; i < mod->nglobals; i++)
            cumux_ranges_remove(&c->memory.dev_ranges, mod->globals[i], NULL);
        mod->nglobals = 0;
        SRV_FOR_EACH_HANDLE(c, k) {
            struct srv_function *f = handle_get(c, k, OBJ_FUNCTION);
            CUkernel kern;
            if (f && f->module == h && f->name && cuLibraryGetKernel(&kern, fresh, f->name) == CUDA_SUCCESS) {
                f->fn = (CUfunction)kern;
                f->launch_fn = NULL; /* the old library's function: looked up again at the next launch */
                f->launch_unresolved = false;
                srv_library_note_module(mod, kern);
            }
        }
    }
}

CUresult op_ctx_destroy(struct srv_client *c, const struct cumux_ctx_destroy *m, struct srv_ctx *ctx)
{
    int gpu = ctx->gpu;
    ctx_free(c, ctx);
    if (m->flags & CUMUX_CTX_DESTROY_RESET)
        libraries_reload(c, gpu);
    return CUDA_SUCCESS;
}

CUresult op_ctx_sync(struct srv_client *c, struct srv_ctx *ctx)
{
    CUresult r = ctx_sync(c, ctx);
    if (r == CUDA_SUCCESS)
        srv_usage_synced(c);
    return take_pending(c, r);
}

/* What each client asked of the shared context's limits (at least this much), so that when the last one
 * that raised a limit goes, it comes back down: a 4 KiB stack held ~800 MiB more of an H200's memory long
 * after the program that wanted it had gone. Limits are few and clients that set them fewer: a list. */
struct limit_want {
    struct srv_client *c;
    int gpu;
    size_t at_least[CU_LIMIT_MAX];
};
static struct limit_want *wants;
static size_t nwants, capwants;
static size_t limit_base[CUMUX_MAX_DEVICES][CU_LIMIT_MAX]; /* before any client raised it */
static bool limit_based[CUMUX_MAX_DEVICES][CU_LIMIT_MAX];
static pthread_mutex_t wants_mu = PTHREAD_MUTEX_INITIALIZER;

/* Only limits that are amounts of memory or depth, where more is what a client needs. */
static bool lowerable(unsigned limit)
{
    return limit == CU_LIMIT_STACK_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE || limit == CU_LIMIT_MALLOC_HEAP_SIZE ||
           limit == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH || limit == CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT ||
           limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE;
}

static const char *limit_name(unsigned l)
{
    switch (l) {
    case CU_LIMIT_STACK_SIZE: return "stack size";
    case CU_LIMIT_PRINTF_FIFO_SIZE: return "printf buffer";
    case CU_LIMIT_MALLOC_HEAP_SIZE: return "malloc heap";
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return "device runtime sync depth";
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return "device runtime pending launches";
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE: return "persisting L2 size";
    default: return "limit";
    }
}

static void want_note(struct srv_client *c, int gpu, unsigned limit, size_t value, size_t before)
{
    pthread_mutex_lock(&wants_mu);
    if (!limit_based[gpu][limit]) {
        limit_base[gpu][limit] = before;
        limit_based[gpu][limit] = true;
    }
    struct limit_want *w = NULL;
    for (size_t i = 0; i < nwants && !w; i++)
        if (wants[i].c == c && wants[i].gpu == gpu)
            w = &wants[i];
    if (!w && nwants == capwants) {
        size_t nc = capwants ? capwants * 2 : 16;
        struct limit_want *nv = realloc(wants, nc * sizeof *nv);
        if (nv) {
            wants = nv;
            capwants = nc;
        }
    }
    if (!w && nwants < capwants) {
        w = &wants[nwants++];
        *w = (struct limit_want){.c = c, .gpu = gpu};
    }
    if (w && value > w->at_least[limit]) /* no room to note it: the limit stays raised, as before */
        w->at_least[limit] = value;
    pthread_mutex_unlock(&wants_mu);
}

void srv_limits_release(struct srv_client *c)
{
    pthread_mutex_lock(&wants_mu);
    for (size_t i = 0; i < nwants;) {
        if (wants[i].c != c) {
            i++;
            continue;
        }
        struct limit_want gone = wants[i];
        wants[i] = wants[--nwants];
        for (unsigned l = 0; l < CU_LIMIT_MAX; l++) {
            if (!gone.at_least[l])
                continue;
            size_t keep = limit_base[gone.gpu][l], now = 0;
            for (size_t j = 0; j < nwants; j++)
                if (wants[j].gpu == gone.gpu && wants[j].at_least[l] > keep)
                    keep = wants[j].at_least[l];
            use_gpu(c, gone.gpu);
            if (cuCtxGetLimit(&now, (CUlimit)l) != CUDA_SUCCESS || now <= keep)
                continue;
            CUresult r = cuCtxSetLimit((CUlimit)l, keep);
            if (r == CUDA_SUCCESS)
                cumux_logf("client %u gone: GPU %d %s back from %zu to %zu", c->id, gone.gpu, limit_name(l), now, keep);
            else
                cumux_logf("client %u gone: GPU %d %s stays %zu (lowering it to %zu failed: %d)", c->id, gone.gpu,
                           limit_name(l), now, keep, (int)r);
        }
    }
    pthread_mutex_unlock(&wants_mu);
}

CUresult op_ctx_limit(struct srv_client *c, const struct cumux_ctx_limit *m, struct srv_ctx *ctx, uint8_t *out,
                      uint32_t *out_len)
{
    use_gpu(c, ctx->gpu);
    /* Limits are properties of the one shared context: a client may raise them, never lower them under
     * what another client relies on; they come down when the clients that raised them have gone. */
    size_t v = 0;
    CHECK(cuCtxGetLimit(&v, (CUlimit)m->limit));
    if (m->set && m->value > v)
        CHECK(cuCtxSetLimit((CUlimit)m->limit, (size_t)m->value));
    if (m->set && m->limit < CU_LIMIT_MAX && lowerable(m->limit))
        want_note(c, ctx->gpu, m->limit, (size_t)m->value, v);
    if (!m->set) {
        struct cumux_u64_reply rep = {v};
        memcpy(out, &rep, sizeof rep);
        *out_len = sizeof rep;
    }
    return CUDA_SUCCESS;
}
