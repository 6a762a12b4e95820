/* Memory pools: each client has its own default pool per device, so that its attributes and its memory
 * concern it alone. */

#include <stdlib.h>

#include "server/handlers.h"

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
    p->bounded = max_size != 0;
    *out = p;
    return CUDA_SUCCESS;
}

/* The client's own default pool of a GPU: its memory and attributes are nobody else's. */
CUresult default_pool(struct srv_client *c, int gpu, struct srv_pool **out)
{
    if (!c->memory.default_pool[gpu])
        CHECK(pool_new(c, gpu, 0, true, &c->memory.default_pool[gpu]));
    *out = c->memory.default_pool[gpu];
    return CUDA_SUCCESS;
}

/* An allocation from pool p made in a chunk: counted in its attributes until it is freed. */
void srv_pool_chunk_alloc(struct srv_client *c, struct srv_pool *p, uint64_t ptr, uint64_t size)
{
    if (cumux_ranges_add(&p->chunk_live, ptr, size, 0, 0) < 0)
        return; /* not counted: the attribute says less, as before */
    if (!p->chunked) {
        p->chunked = true;
        p->next_chunked = c->memory.chunked_pools;
        c->memory.chunked_pools = p;
    }
    p->chunk_used += size;
    if (p->chunk_used > p->chunk_used_high)
        p->chunk_used_high = p->chunk_used;
    if (p->chunk_used > p->chunk_reserved)
        p->chunk_reserved = p->chunk_used;
    if (p->chunk_reserved > p->chunk_reserved_high)
        p->chunk_reserved_high = p->chunk_reserved;
}

/* A pool keeps what was freed up to its release threshold (at the next synchronize, natively) or what a
 * trim keeps: so does its count of memory in chunks, whose freed space stays in the client's chunks. Applied
 * when the count is read or trimmed: it says what a synchronize since would have released. */
static void chunk_release(struct srv_pool *p, uint64_t keep)
{
    if (p->chunk_reserved > keep)
        p->chunk_reserved = keep > p->chunk_used ? keep : p->chunk_used;
}

/* An allocation the client no longer holds: out of its pool's count, if a pool's chunk had it. */
void srv_pool_chunk_forget(struct srv_client *c, uint64_t ptr)
{
    struct cumux_range gone;
    for (struct srv_pool *p = c->memory.chunked_pools; p; p = p->next_chunked) {
        if (cumux_ranges_remove(&p->chunk_live, ptr, &gone) == 0) {
            p->chunk_used -= gone.size;
            return;
        }
    }
}

void pool_free(struct srv_client *c, struct srv_pool *p)
{
    if (p->chunked) {
        struct srv_pool **q = &c->memory.chunked_pools;
        while (*q && *q != p)
            q = &(*q)->next_chunked;
        if (*q)
            *q = p->next_chunked;
    }
    cumux_ranges_free(&p->chunk_live);
    handle_drop(c, p->handle);
    if (c->memory.default_pool[p->gpu] == p)
        c->memory.default_pool[p->gpu] = NULL;
    srv_reap(REAP_POOL, p->gpu, NULL, 0, p->pool); /* may wait for the context: not on this worker */
    free(p);
}

CUresult op_pool_default(struct srv_client *c, const struct cumux_pool_default *m, uint8_t *out,
                         uint32_t *out_len)
{
    struct srv_pool *p;
    CHECK(default_pool(c, m->device, &p));
    return reply_u64(out, out_len, p->handle);
}

CUresult op_pool_create(struct srv_client *c, const struct cumux_pool_create *m, uint8_t *out,
                        uint32_t *out_len)
{
    struct srv_pool *p;
    CHECK(pool_new(c, m->device, m->max_size, false, &p));
    return reply_u64(out, out_len, p->handle);
}

CUresult op_pool_destroy(struct srv_client *c, struct srv_pool *pool)
{
    use_gpu(c, pool->gpu);
    if (pool->is_default)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver answers for a device's default pool */
    pool_free(c, pool);
    return CUDA_SUCCESS;
}

CUresult op_pool_trim(struct srv_client *c, const struct cumux_pool_trim *m, struct srv_pool *pool)
{
    use_gpu(c, pool->gpu);
    srv_chunks_trim(c, pool->gpu); /* its chunks, if its memory is in chunks: all or nothing for now */
    chunk_release(pool, m->keep);
    return cuMemPoolTrimTo(pool->pool, (size_t)m->keep);
}

CUresult op_pool_attribute(struct srv_client *c, const struct cumux_pool_attribute *m, struct srv_pool *pool,
                           uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, pool->gpu);
    /* Three attributes are ints, the others 64-bit. */
    bool is_int = m->attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
                  m->attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
                  m->attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
    int iv = (int)m->value;
    cuuint64_t uv = m->value;
    void *v = is_int ? (void *)&iv : (void *)&uv;
    /* Memory in chunks is the pool's too, for what it says of its use: its allocations are in use, what
     * it keeps after their frees (chunk_release) is reserved, and their high marks are the pool's. */
    if (m->set) {
        CHECK(cuMemPoolSetAttribute(pool->pool, (CUmemPool_attribute)m->attr, v));
        if (m->attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) /* only 0 is accepted: the mark starts again from now */
            pool->chunk_used_high = pool->chunk_used;
        if (m->attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            pool->chunk_reserved_high = pool->chunk_reserved;
        return CUDA_SUCCESS;
    }
    CHECK(cuMemPoolGetAttribute(pool->pool, (CUmemPool_attribute)m->attr, v));
    if (m->attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT && pool->chunked) {
        cuuint64_t threshold = 0;
        if (cuMemPoolGetAttribute(pool->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS)
            chunk_release(pool, threshold);
    }
    if (m->attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        uv += pool->chunk_used;
    else if (m->attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        uv += pool->chunk_reserved;
    else if (m->attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        uv += pool->chunk_used_high;
    else if (m->attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
        uv += pool->chunk_reserved_high;
    return reply_u64(out, out_len, is_int ? (uint64_t)(int64_t)iv : uv);
}

