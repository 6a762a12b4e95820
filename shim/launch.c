/* Kernel launches: arguments packed by the shim from the layout the server sent with the kernel, and
 * written straight into the ring; one way, no round trip (invariant 2). */
#include <string.h>

#include "common/launch_attrs.h"
#include "shim/client.h"

/* Checked before any ring space is taken, so that packing cannot fail half-way. */
static CUresult check_params(const struct CUfunc_st *f, void **params, void **extra, const void **buf)
{
    if (params) {
        for (uint32_t i = 0; i < f->nparams; i++)
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    if (extra) {
        size_t size = 0;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                *buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(const size_t *)extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        return *buf && size >= f->param_bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    return f->param_bytes == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static void pack_params(const struct CUfunc_st *f, void **params, const void *buf, uint8_t *dst)
{
    if (params) {
        for (uint32_t i = 0; i < f->nparams; i++)
            memcpy(dst + f->params[i].offset, params[i], f->params[i].size);
    } else if (buf) {
        memcpy(dst, buf, f->param_bytes);
    }
}

static CUresult launch(struct CUfunc_st *f, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                       CUstream h, void **params, void **extra, const CUlaunchAttribute *attrs, unsigned nattrs)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t stream;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(h, &stream, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    int gpu = shim.server_gpu[ctx->device]; /* a library kernel runs as its copy on the stream's GPU */
    if (CUMUX_HANDLE_GPU(f->handle) != gpu && (r = shim_function_on_gpu(f, gpu, &f)) != CUDA_SUCCESS)
        return r;
    /* What the driver rejects at once is rejected here too, rather than at the next synchronization. */
    const int32_t *a = shim.devices[ctx->device].attrs;
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0 ||
        (uint64_t)block[0] * block[1] * block[2] > (uint64_t)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] ||
        block[0] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] ||
        block[1] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] ||
        block[2] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] ||
        grid[0] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] ||
        grid[1] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] || grid[2] > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z])
        return CUDA_ERROR_INVALID_VALUE;
    if (nattrs > 16)
        return CUDA_ERROR_INVALID_VALUE;
    const void *buf = NULL;
    if ((r = check_params(f, params, extra, &buf)) != CUDA_SUCCESS)
        return r;
    if ((r = shim_cache_config_sync(f, ctx)) != CUDA_SUCCESS)
        return r;
    size_t attr_bytes = nattrs * sizeof(struct cumux_launch_attr);
    uint8_t *body = shim_send_begin_on(shim_chan_of_handle(stream), CUMUX_OP_LAUNCH,
                                       sizeof(struct cumux_launch) + attr_bytes + f->param_bytes, &r);
    if (!body)
        return r;
    struct cumux_launch *m = (struct cumux_launch *)body;
    m->function = f->handle;
    m->stream = stream;
    memcpy(m->grid, grid, sizeof m->grid);
    memcpy(m->block, block, sizeof m->block);
    m->shared_bytes = shmem;
    m->param_bytes = f->param_bytes;
    m->nattrs = nattrs;
    m->pad = 0;
    struct cumux_launch_attr *la = (struct cumux_launch_attr *)(m + 1);
    for (unsigned i = 0; i < nattrs; i++) {
        la[i].id = (uint32_t)attrs[i].id;
        la[i].pad = 0;
        memcpy(la[i].value, &attrs[i].value, sizeof la[i].value);
    }
    pack_params(f, params, buf, body + sizeof *m + attr_bytes);
    shim_send_end();
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, shmem, s, params, extra, NULL, 0);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
    if (!cfg)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < cfg->numAttrs; i++) {
        if (!cumux_launch_attr_plain(cfg->attrs[i].id))
            return cumux_unsupported("cuLaunchKernelEx with an event or access-policy attribute");
    }
    const unsigned grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
    const unsigned block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
    return launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, params, extra, cfg->attrs, cfg->numAttrs);
}

/* A cooperative launch is a launch with the cooperative attribute (as cuLaunchKernelEx's). */
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    coop.value.cooperative = 1;
    return launch(f, grid, block, shmem, s, params, NULL, &coop, 1);
}

/* Cluster occupancy: the launch configuration travels as a launch would, with no arguments. */
static CUresult cluster_query(uint32_t query, int *out, CUfunction f, const CUlaunchConfig *cfg)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !cfg || cfg->numAttrs > 16)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult fr = shim_function_for(f, -1, &f);
    if (fr != CUDA_SUCCESS)
        return fr;
    struct {
        struct cumux_cluster_occupancy l;
        struct cumux_launch_attr a[16];
    } m;
    memset(&m, 0, sizeof m);
    m.l.function = f->handle;
    m.l.grid[0] = cfg->gridDimX, m.l.grid[1] = cfg->gridDimY, m.l.grid[2] = cfg->gridDimZ;
    m.l.block[0] = cfg->blockDimX, m.l.block[1] = cfg->blockDimY, m.l.block[2] = cfg->blockDimZ;
    m.l.shared_bytes = cfg->sharedMemBytes;
    m.l.nattrs = cfg->numAttrs;
    m.l.query = query;
    for (unsigned i = 0; i < cfg->numAttrs; i++) {
        if (!cumux_launch_attr_plain(cfg->attrs[i].id))
            return CUDA_ERROR_INVALID_VALUE;
        m.a[i].id = (uint32_t)cfg->attrs[i].id;
        memcpy(m.a[i].value, &cfg->attrs[i].value, sizeof m.a[i].value);
    }
    uint64_t v = 0;
    CUresult r = shim_function_question(f, CUMUX_OP_FUNC_CLUSTER_OCCUPANCY, &m, sizeof m.l + cfg->numAttrs * sizeof m.a[0],
                                        &v);
    if (r == CUDA_SUCCESS)
        *out = (int)v;
    return r;
}

CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction f, const CUlaunchConfig *cfg)
{
    return cluster_query(0, clusters, f, cfg);
}

CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction f, const CUlaunchConfig *cfg)
{
    return cluster_query(1, size, f, cfg);
}
