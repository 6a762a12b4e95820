/* Kernel launches. */

#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/launch_attrs.h"
#include "server/handlers.h"

/* CUMUX_LAUNCH_FUNCTIONS=1: a library kernel is launched as its function in the GPU's primary context,
 * looked up once at its first launch there (cuKernelGetFunction), the handle NVIDIA's libraries launch
 * natively, rather than as the CUkernel, which the driver resolves to that same function at every launch.
 * Streams in a green context and streams being captured keep the kernel (its function is the primary
 * context's; a captured node names what it was given). Off until measured on the GPU (docs/performance.md). */
static _Atomic int launch_functions = -1;

static CUfunction launch_handle(struct srv_function *f, const struct srv_stream *s)
{
    if (!f->is_kernel || s->placed || s->capturing || f->launch_unresolved)
        return f->fn;
    int on = atomic_load_explicit(&launch_functions, memory_order_relaxed);
    if (on < 0) {
        const char *e = getenv("CUMUX_LAUNCH_FUNCTIONS");
        on = e && e[0] == '1';
        atomic_store_explicit(&launch_functions, on, memory_order_relaxed);
    }
    if (!on)
        return f->fn;
    int gpu = s->ctx->gpu; /* current: stream_get made it so */
    if (f->launch_fn)
        return f->launch_gpu == gpu ? f->launch_fn : f->fn;
    CUfunction fn;
    if (cuKernelGetFunction(&fn, (CUkernel)f->fn) != CUDA_SUCCESS || !fn) {
        f->launch_unresolved = true; /* the launch of the kernel answers what the driver has to say */
        return f->fn;
    }
    f->launch_fn = fn;
    f->launch_gpu = gpu;
    return fn;
}

/* kernelParams, the driver's usual path: passing the arguments as one `extra` buffer instead cost a tenth
 * of the launch rate (docs/performance.md, "The transport's own costs"). Without attributes, cuLaunchKernel. */
static CUresult launch_on(const CUlaunchConfig *cfg, CUfunction fn, const struct srv_function *function, void **kp)
{
    void **params = function->nparams ? kp : NULL;
    if (cfg->numAttrs == 0)
        return cuLaunchKernel(fn, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
                              cfg->blockDimZ, cfg->sharedMemBytes, cfg->hStream, params, NULL);
    return cuLaunchKernelEx(cfg, fn, params, NULL);
}

CUresult op_launch(struct srv_client *c, const struct cumux_launch *m, struct srv_function *function,
                   struct srv_stream *stream, const uint8_t *payload, uint32_t payload_len)
{
    if (m->nattrs > 16 || (uint64_t)m->nattrs * sizeof(struct cumux_launch_attr) + m->param_bytes > payload_len ||
        m->param_bytes != function->param_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *params = payload + m->nattrs * sizeof(struct cumux_launch_attr);
    /* kernelParams: pointers to each argument in the message. */
    void *kp[CUMUX_MAX_PARAMS];
    for (uint32_t i = 0; i < function->nparams; i++)
        kp[i] = (void *)(params + function->param_offsets[i]);
    srv_pace_launch(c, stream);
    CHECK(before_op(stream));
    int timed = srv_usage_begin(c, stream);
    CUlaunchAttribute attrs[16];
    const struct cumux_launch_attr *a = (const struct cumux_launch_attr *)payload;
    for (uint32_t i = 0; i < m->nattrs; i++) {
        memcpy(&attrs[i].value, a[i].value, sizeof attrs[i].value);
        attrs[i].id = (CUlaunchAttributeID)a[i].id;
        if (!cumux_launch_attr_plain(a[i].id)) {
            srv_usage_end(c, stream, timed, CUDA_ERROR_NOT_SUPPORTED);
            after_op(stream);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    CUlaunchConfig cfg = {.gridDimX = m->grid[0], .gridDimY = m->grid[1], .gridDimZ = m->grid[2],
                          .blockDimX = m->block[0], .blockDimY = m->block[1], .blockDimZ = m->block[2],
                          .sharedMemBytes = m->shared_bytes, .hStream = stream->cu, .attrs = attrs,
                          .numAttrs = m->nattrs};
    CUevent timed_from = srv_kprof_wanted() ? srv_kprof_before(c, stream) : NULL;
    CUresult r = launch_on(&cfg, launch_handle(function, stream), function, kp);
    if (timed_from)
        srv_kprof_after(c, stream, timed_from, function, r);
    if (r == CUDA_ERROR_INVALID_CLUSTER_SIZE && (cfg.hStream = srv_place_outside(c, stream)) != NULL) {
        /* its green context's SMs cannot hold the clusters: on a stream of the primary context, as the kernel */
        r = launch_on(&cfg, function->fn, function, kp);
        srv_place_outside_end(stream, cfg.hStream);
    }
    srv_usage_end(c, stream, timed, r);
    after_op(stream);
    atomic_fetch_add_explicit(&c->usage.launches, 1, memory_order_relaxed);
    return r;
}
