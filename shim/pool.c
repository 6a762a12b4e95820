/* Stream-ordered allocation and memory pools. Each client has a default pool per device of its own in
 * the server, so that its attributes and its memory concern it alone. */
#include <stdlib.h>

#include "shim/client.h"

/* The pools the program made, to make them again after a resume (the default ones are in shim). */
static struct shim_list all_pools = SHIM_LIST_INIT;

static CUresult pool_object(uint32_t handle, int device, bool is_default, uint64_t max_size, CUmemoryPool *out)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = SHIM_MAGIC_POOL;
    p->handle = handle;
    p->device = device;
    p->is_default = is_default;
    p->max_size = max_size;
    if (!is_default)
        shim_list_add(&all_pools, p);
    *out = p;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&shim.ctx_lock);
    CUresult r = CUDA_SUCCESS;
    if (!shim.default_pool[dev]) {
        uint64_t h;
        r = shim_op_pool_default(dev, &h);
        if (r == CUDA_SUCCESS)
            r = pool_object((uint32_t)h, dev, true, 0, &shim.default_pool[dev]);
    }
    if (r == CUDA_SUCCESS)
        *pool = shim.default_pool[dev];
    pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

/* The attributes the program set, on the pool as the new worker has it. */
static CUresult pool_attributes_again(struct CUmemPoolHandle_st *p)
{
    CUresult r = CUDA_SUCCESS;
    uint32_t set = atomic_load(&p->attr_set);
    for (int32_t a = 1; a < 5 && r == CUDA_SUCCESS; a++)
        if (set >> a & 1)
            r = shim_op_pool_attribute(p->handle, a, 1, atomic_load(&p->attr_value[a]), NULL);
    return r;
}

/* After a resume: each device's default pool, and every pool the program made, with the attributes it
 * set (their memory came back with the rest of its memory: in containment all of it is in chunks). */
CUresult shim_pools_rebind(void)
{
    bool locked = pthread_mutex_trylock(&shim.ctx_lock) == 0; /* as shim_contexts_rebind */
    CUresult r = CUDA_SUCCESS;
    for (int dev = 0; dev < shim.device_count && r == CUDA_SUCCESS; dev++) {
        uint64_t h;
        if (shim.default_pool[dev] && (r = shim_op_pool_default(dev, &h)) == CUDA_SUCCESS) {
            shim.default_pool[dev]->handle = (uint32_t)h;
            r = pool_attributes_again(shim.default_pool[dev]);
        }
    }
    pthread_mutex_lock(&all_pools.lock);
    for (size_t i = 0; i < all_pools.n && r == CUDA_SUCCESS; i++) {
        struct CUmemPoolHandle_st *p = all_pools.v[i];
        uint64_t h;
        if (p->magic != SHIM_MAGIC_POOL)
            continue;
        if ((r = shim_op_pool_create(p->device, p->max_size, &h)) == CUDA_SUCCESS) {
            p->handle = (uint32_t)h;
            r = pool_attributes_again(p);
        }
    }
    pthread_mutex_unlock(&all_pools.lock);
    if (locked)
        pthread_mutex_unlock(&shim.ctx_lock);
    return r;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (dev >= 0 && dev < shim.device_count && shim.current_pool[dev] && pool) {
        *pool = shim.current_pool[dev];
        return CUDA_SUCCESS;
    }
    return cuDeviceGetDefaultMemPool(pool, dev);
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool || pool->magic != SHIM_MAGIC_POOL || pool->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    shim.current_pool[dev] = pool;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return cumux_unsupported("cuMemPoolCreate with shareable handles");
    int dev = props->location.id;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    uint64_t h;
    CUresult r = shim_op_pool_create(dev, props->maxSize, &h);
    return r == CUDA_SUCCESS ? pool_object((uint32_t)h, dev, false, props->maxSize, pool) : r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || pool->magic != SHIM_MAGIC_POOL || pool->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_op_pool_destroy(pool->handle);
    if (r == CUDA_SUCCESS) {
        if (shim.current_pool[pool->device] == pool)
            shim.current_pool[pool->device] = NULL;
        pool->magic = SHIM_MAGIC_DEAD; /* kept allocated: stale handles fail their check */
    }
    return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    if (!pool || pool->magic != SHIM_MAGIC_POOL)
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_pool_trim(pool->handle, keep);
}

static bool int_attribute(CUmemPool_attribute a)
{
    return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!pool || pool->magic != SHIM_MAGIC_POOL || !value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v = int_attribute(attr) ? (uint64_t)(int64_t) * (int *)value : *(cuuint64_t *)value;
    CUresult r = shim_op_pool_attribute(pool->handle, (int32_t)attr, 1, v, NULL);
    if (r == CUDA_SUCCESS && attr >= 1 && attr < 5) { /* a policy or the release threshold: kept */
        atomic_store(&pool->attr_value[attr], v);
        atomic_fetch_or(&pool->attr_set, 1u << attr);
    }
    return r;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!pool || pool->magic != SHIM_MAGIC_POOL || !value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    CUresult r = shim_op_pool_attribute(pool->handle, (int32_t)attr, 0, 0, &v);
    if (r == CUDA_SUCCESS) {
        if (int_attribute(attr))
            *(int *)value = (int)v;
        else
            *(cuuint64_t *)value = v;
    }
    return r;
}

/* ---- stream-ordered allocation ---- */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream hstream)
{
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t stream;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(hstream, &stream, &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool && (r = cuDeviceGetMemPool(&pool, ctx->device)) != CUDA_SUCCESS)
        return r;
    if (pool->magic != SHIM_MAGIC_POOL)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_mem_alloc_async_reply rep;
    r = shim_op_mem_alloc_async(stream, pool->handle, size, &rep);
    if (r != CUDA_SUCCESS)
        return r;
    shim_add_device_range(rep.ptr, size, ctx, rep.graph ? SHIM_RANGE_GRAPH : 0);
    *dptr = (CUdeviceptr)rep.ptr;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return alloc_async(dptr, size, NULL, s);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, size, pool, s);
}

CUresult cuMemFreeAsync(CUdeviceptr p, CUstream hstream)
{
    uint32_t stream;
    CUresult r = shim_resolve_stream(hstream, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    shim_peer_forget(p);
    if (!shim_forget_device_range(p))
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_mem_free_async(stream, p);
}

/* The pools of a location (CUDA 13): a device's pinned pools are the device's pools above. Host and
 * managed pools are not cumux's yet. */
static CUresult device_location(const CUmemLocation *l, CUmemAllocationType type, CUdevice *dev)
{
    if (!l || (type != CU_MEM_ALLOCATION_TYPE_PINNED && type != CU_MEM_ALLOCATION_TYPE_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED || l->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return cumux_unsupported("memory pools of host or managed memory (cuMemGetDefaultMemPool, cuMemGet/SetMemPool)");
    *dev = l->id;
    return CUDA_SUCCESS;
}

CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *l, CUmemAllocationType type)
{
    CUdevice dev = 0;
    CUresult r = device_location(l, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetDefaultMemPool(pool, dev) : r;
}

CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *l, CUmemAllocationType type)
{
    CUdevice dev = 0;
    CUresult r = device_location(l, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceGetMemPool(pool, dev) : r;
}

CUresult cuMemSetMemPool(CUmemLocation *l, CUmemAllocationType type, CUmemoryPool pool)
{
    CUdevice dev = 0;
    CUresult r = device_location(l, type, &dev);
    return r == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : r;
}
