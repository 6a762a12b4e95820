/* Kernel launches. */

#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/launch_attrs.h"
#include "server/handlers.h"

/* Without attributes, cuLaunchKernel with kernelParams: the driver's usual, fastest path. */
static CUresult launch_on(const CUlaunchConfig *cfg, const struct srv_function *function, void **kp, void **extra,
                          size_t psize)
{
    if (cfg->numAttrs == 0)
        return cuLaunchKernel(function->fn, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX,
                              cfg->blockDimY, cfg->blockDimZ, cfg->sharedMemBytes, cfg->hStream,
                              function->nparams ? kp : NULL, NULL);
    return cuLaunchKernelEx(cfg, function->fn, NULL, psize ? extra : NULL);
}

CUresult op_launch(struct srv_client *c, const struct cumux_launch *m, struct srv_function *function,
                   struct srv_stream *stream, const uint8_t *payload, uint32_t payload_len)
{
    if (m->nattrs > 16 || (uint64_t)m->nattrs * sizeof(struct cumux_launch_attr) + m->param_bytes > payload_len ||
        m->param_bytes != function->param_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *params = payload + m->nattrs * sizeof(struct cumux_launch_attr);
    size_t psize = m->param_bytes;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                     CU_LAUNCH_PARAM_END};
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
    CUresult r = launch_on(&cfg, function, kp, extra, psize);
    if (timed_from)
        srv_kprof_after(c, stream, timed_from, function, r);
    if (r == CUDA_ERROR_INVALID_CLUSTER_SIZE && (cfg.hStream = srv_place_outside(c, stream)) != NULL) {
        r = launch_on(&cfg, function, kp, extra, psize); /* its green context's SMs cannot hold the clusters */
        srv_place_outside_end(stream, cfg.hStream);
    }
    srv_usage_end(c, stream, timed, r);
    after_op(stream);
    atomic_fetch_add_explicit(&c->launches, 1, memory_order_relaxed);
    return r;
}
