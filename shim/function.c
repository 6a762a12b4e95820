/* A kernel's attributes, cache preference, parameters and occupancy: answered by the server's copy of it
 * on the GPU asked about (a library kernel's copy there, module.c), and kept here while they hold. */
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

/* ---- attributes and parameters ---- */
/* Attributes whose set, once it succeeded, succeeds again with no effect: each is independent of the
 * others. A cluster's required dimensions (11-13) are not: they go to the server every time, and a change
 * of them forgets every set remembered. */
static bool attr_set_repeatable(int attr)
{
    return attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
           attr == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT ||
           attr == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED ||
           attr == CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
}

/* The tag of answers about f given now: its attribute generation plus one, never 0 (never asked). 2^32 sets
 * later a stale answer would match again: it would need exactly that many. */
static uint32_t attr_tag(struct CUfunc_st *f)
{
    uint32_t tag = atomic_load(&f->attr_gen) + 1;
    return tag ? tag : 1;
}

/* A question about f (op, message m of len bytes, a u64 answer) whose answer depends on the message and on
 * f's state in the server: its attributes, and the cache preference its copy was last given. Asked again
 * in the same state, it is answered from answers.c. Occupancy: cuBLAS asks a kernel's cluster occupancy
 * more often than it launches (47 against 18 launches in data/traces/cublas-cumux-summary.txt), and
 * cuOccupancyMaxPotentialBlockSize asks once per block size. Function objects are never freed, so the
 * object's address names it for the process's life. */
struct function_question_key {
    const struct CUfunc_st *f;
    uint32_t tag;
    int32_t cache;
    uint8_t m[SHIM_ANSWER_KEY_MAX - 16];
};

CUresult shim_function_question(struct CUfunc_st *f, uint16_t op, const void *m, size_t len, uint64_t *answer)
{
    struct function_question_key key;
    bool keep = len <= sizeof key.m;
    size_t key_len = offsetof(struct function_question_key, m) + len;
    if (keep) {
        memset(&key, 0, sizeof key);
        key.f = f;
        key.tag = attr_tag(f);
        key.cache = atomic_load(&f->cache_sent);
        memcpy(key.m, m, len);
        if (shim_answer_lookup(op, &key, key_len, answer, sizeof *answer))
            return CUDA_SUCCESS;
    }
    struct cumux_u64_reply rep = {0};
    CUresult r = shim_call(op, m, (uint32_t)len, &rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS) {
        *answer = rep.value;
        if (keep)
            shim_answer_store(op, &key, key_len, answer, sizeof *answer);
    }
    return r;
}

/* dev: the device named (cuKernel*Attribute), else -1: the current context's. */
static CUresult func_attr(struct CUfunc_st *f, int attr, int value, bool set, int *out, int dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult fr = shim_function_for(f, dev, &f);
    if (fr != CUDA_SUCCESS)
        return fr;
    bool known_attr = attr >= 0 && attr < CU_FUNC_ATTRIBUTE_MAX;
    if (set) {
        uint64_t ok = (1ull << 32) | (uint32_t)value;
        if (known_attr && attr_set_repeatable(attr) && atomic_load(&f->attr_set_ok[attr]) == ok)
            return CUDA_SUCCESS;
        CUresult r = shim_op_func_set_attribute(f->handle, attr, value);
        if (r == CUDA_SUCCESS) { /* remembered, to be set again after a resume */
            unsigned i = 0;
            while (i < f->nattr_set && f->attr_set[i][0] != attr)
                i++;
            if (i < 8) {
                f->attr_set[i][0] = attr;
                f->attr_set[i][1] = value;
                if (i == f->nattr_set)
                    f->nattr_set++;
            }
            /* After the server's change: an answer asked before it is of the old generation. */
            atomic_fetch_add(&f->attr_gen, 1);
            if (known_attr && attr_set_repeatable(attr)) {
                atomic_store(&f->attr_set_ok[attr], ok);
            } else {
                for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX; a++)
                    atomic_store(&f->attr_set_ok[a], 0);
            }
        }
        return r;
    }
    uint32_t tag = attr_tag(f);
    if (known_attr) {
        uint64_t k = atomic_load(&f->attr_known[attr]);
        if ((uint32_t)(k >> 32) == tag) {
            if (out)
                *out = (int)(uint32_t)k;
            return CUDA_SUCCESS;
        }
    }
    uint64_t v = 0;
    CUresult r = shim_op_func_get_attribute(f->handle, attr, 0, &v);
    if (r == CUDA_SUCCESS && out)
        *out = (int)(int64_t)v;
    if (r == CUDA_SUCCESS && known_attr)
        atomic_store(&f->attr_known[attr], ((uint64_t)tag << 32) | (uint32_t)(int32_t)(int64_t)v);
    return r;
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute attr, CUfunction fn)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    return func_attr(fn, attr, 0, false, v, -1);
}

CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attr, int value)
{
    return func_attr(fn, attr, value, true, NULL, -1);
}

CUresult cuKernelGetAttribute(int *v, CUfunction_attribute attr, CUkernel k, CUdevice dev)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (shim.initialized && (dev < 0 || dev >= shim.device_count))
        return CUDA_ERROR_INVALID_DEVICE;
    return func_attr((struct CUfunc_st *)k, attr, 0, false, v, dev);
}

CUresult cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel k, CUdevice dev)
{
    if (shim.initialized && (dev < 0 || dev >= shim.device_count))
        return CUDA_ERROR_INVALID_DEVICE;
    return func_attr((struct CUfunc_st *)k, attr, value, true, NULL, dev);
}

/* The preference is the program's, for its copy of the function in the server: given to the server before
 * the function's next launch (shim_cache_config_sync), with the context's where the function has none.
 * dev: the device named (cuKernelSetCacheConfig), else -1: the current context's. */
static CUresult set_cache_config(struct CUfunc_st *fn, CUfunc_cache cfg, int dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fn || fn->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((unsigned)cfg > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_function_for(fn, dev, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    atomic_store(&fn->cache_own, (int)cfg);
    return CUDA_SUCCESS;
}

CUresult cuFuncSetCacheConfig(CUfunction fn, CUfunc_cache cfg)
{
    return set_cache_config(fn, cfg, -1);
}

CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache cfg, CUdevice dev)
{
    if (shim.initialized && (dev < 0 || dev >= shim.device_count))
        return CUDA_ERROR_INVALID_DEVICE;
    return set_cache_config((struct CUfunc_st *)k, cfg, dev);
}

CUresult shim_cache_config_sync(struct CUfunc_st *f, const struct CUctx_st *ctx)
{
    int own = atomic_load_explicit(&f->cache_own, memory_order_relaxed);
    int want = own != CU_FUNC_CACHE_PREFER_NONE ? own : __atomic_load_n(&ctx->cache_config, __ATOMIC_RELAXED);
    if (want == atomic_load_explicit(&f->cache_sent, memory_order_relaxed))
        return CUDA_SUCCESS;
    CUresult r = shim_op_func_set_cache_config(f->handle, (uint32_t)want);
    if (r == CUDA_SUCCESS)
        atomic_store(&f->cache_sent, want);
    return r;
}

static CUresult param_info(struct CUfunc_st *f, size_t index, size_t *off, size_t *size)
{
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = f->params[index].offset;
    if (size)
        *size = f->params[index].size;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction fn, size_t index, size_t *off, size_t *size)
{
    return param_info(fn, index, off, size);
}

CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t *off, size_t *size)
{
    return param_info((struct CUfunc_st *)k, index, off, size);
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction fn)
{
    if (!fn || fn->magic != SHIM_MAGIC_FUNCTION || !state)
        return CUDA_ERROR_INVALID_HANDLE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction fn)
{
    if (!fn || fn->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS; /* the server loaded it when it was looked up */
}

/* ---- occupancy ---- */
static CUresult occupancy(struct CUfunc_st *f, uint32_t query, int a, int b, size_t dyn, unsigned flags, uint64_t *out)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult fr = shim_function_for(f, -1, &f);
    if (fr != CUDA_SUCCESS)
        return fr;
    struct cumux_func_occupancy m;
    memset(&m, 0, sizeof m);
    m.function = f->handle;
    m.query = query;
    m.a = a;
    m.b = b;
    m.dyn_smem = dyn;
    m.flags = flags;
    return shim_function_question(f, CUMUX_OP_FUNC_OCCUPANCY, &m, sizeof m, out);
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction fn, int block_size, size_t dyn,
                                                              unsigned int flags)
{
    if (!blocks)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    CUresult r = occupancy(fn, CUMUX_OCC_MAX_ACTIVE_BLOCKS, block_size, 0, dyn, flags, &v);
    if (r == CUDA_SUCCESS)
        *blocks = (int)v;
    return r;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction fn, int block_size, size_t dyn)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, fn, block_size, dyn, 0);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction fn, int blocks, int block_size)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    CUresult r = occupancy(fn, CUMUX_OCC_AVAILABLE_DYN_SMEM, blocks, block_size, 0, 0, &v);
    if (r == CUDA_SUCCESS)
        *bytes = (size_t)v;
    return r;
}

/* The block size with the highest occupancy, searched here: the callback that gives the dynamic shared
 * memory for a block size lives in this process. */
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block_size, CUfunction fn,
                                                   CUoccupancyB2DSize dyn_of, size_t dyn, int limit, unsigned int flags)
{
    if (!min_grid || !block_size)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fn || fn->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_HANDLE;
    int max_threads = 0;
    CUresult r = cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
    if (r != CUDA_SUCCESS)
        return r;
    if (limit > 0 && limit < max_threads)
        max_threads = limit;
    const int32_t *a = shim.devices[fn->module->ctx->device].attrs;
    int warp = a[CU_DEVICE_ATTRIBUTE_WARP_SIZE] > 0 ? a[CU_DEVICE_ATTRIBUTE_WARP_SIZE] : 32;
    int best_threads = 0, best_size = 0, best_blocks = 0;
    for (int bs = max_threads - max_threads % warp; bs > 0; bs -= warp) {
        size_t d = dyn_of ? dyn_of(bs) : dyn;
        int blocks = 0;
        r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, bs, d, flags);
        if (r != CUDA_SUCCESS)
            return r;
        if (blocks * bs > best_threads) {
            best_threads = blocks * bs;
            best_size = bs;
            best_blocks = blocks;
        }
    }
    *block_size = best_size;
    *min_grid = best_blocks * a[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size, CUfunction fn, CUoccupancyB2DSize dyn_of,
                                          size_t dyn, int limit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block_size, fn, dyn_of, dyn, limit, 0);
}
