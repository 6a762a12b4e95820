/* Device memory (stream-ordered, from the client's pools: pool.c) and pinned host memory. */

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/map.h"
#include "common/sock.h"
#include "server/groups.h"
#include "server/handlers.h"

/* ---------------------------------------------------------------- memory */

static CUresult alloc_reply(uint8_t *out, uint32_t *out_len, uint64_t ptr, bool graph)
{
    struct cumux_mem_alloc_async_reply rep = {.ptr = ptr, .graph = graph};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_mem_alloc_async(struct srv_client *c, const struct cumux_mem_alloc_async *m,
                            struct srv_stream *stream, struct srv_pool *pool, uint8_t *out, uint32_t *out_len)
{
    if (m->size == 0 || pool->gpu != stream->ctx->gpu)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr ptr;
    /* Captured: a graph allocation (graph.c), from the graph's memory whatever the pool. Not in a capture
     * that adds to one of the client's graphs: whether a failed one leaves its nodes there is unknown. */
    if (srv_stream_capturing(c, stream)) {
        if (srv_capture_adds_to_graph(stream))
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        CHECK(srv_mem_fits(c, m->size));
        CHECK(before_op(stream));
        CUresult r = cuMemAllocAsync(&ptr, (size_t)m->size, stream->cu);
        after_op(stream);
        if (r != CUDA_SUCCESS)
            return r;
        CHECK(srv_graph_mem_captured(c, stream, ptr, m->size, pool->gpu));
        return alloc_reply(out, out_len, ptr, true);
    }
    CHECK(srv_mem_charge(c, m->size));
    CUresult r;
    /* Memory that can outlive the worker (chunks.c), from any pool but one with a maximum size, which
     * only the driver's pool enforces. */
    if (srv_chunks_on() && !pool->bounded) {
        uint64_t p64 = 0;
        r = srv_chunk_alloc(c, pool->gpu, m->size, &p64);
        ptr = p64;
    } else if ((r = before_op(stream)) == CUDA_SUCCESS) {
        r = cuMemAllocFromPoolAsync(&ptr, (size_t)m->size, pool->pool, stream->cu);
        after_op(stream);
    }
    if (r != CUDA_SUCCESS) {
        srv_mem_uncharge(c, m->size);
        return r;
    }
    if (cumux_ranges_add(&c->memory.dev_ranges, ptr, m->size, RANGE_ALLOC, (uint64_t)pool->gpu) < 0) {
        if (srv_chunks_in_arena(ptr))
            srv_chunk_free(c, ptr, stream->cu);
        else
            cuMemFreeAsync(ptr, stream->cu);
        srv_mem_uncharge(c, m->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (srv_chunks_in_arena(ptr))
        srv_pool_chunk_alloc(c, pool, ptr, m->size);
    return alloc_reply(out, out_len, ptr, false);
}

/* The allocation that starts at ptr (not a global), or NULL. */
static const struct cumux_range *allocation_at(struct srv_client *c, uint64_t ptr)
{
    const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, ptr);
    return r && r->base == ptr && r->tag == RANGE_ALLOC ? r : NULL;
}

/* Take it out of the client's table: only once its free has been queued, so that an allocation whose free
 * failed stays the client's, and is freed when the client goes, instead of being lost to everyone. */
static void take_allocation(struct srv_client *c, uint64_t ptr)
{
    struct cumux_range gone;
    if (cumux_ranges_remove(&c->memory.dev_ranges, ptr, &gone) == 0)
        srv_mem_uncharge(c, gone.size);
    if (c->memory.chunked_pools)
        srv_pool_chunk_forget(c, ptr);
}

CUresult op_mem_free_async(struct srv_client *c, const struct cumux_mem_free_async *m,
                           struct srv_stream *stream)
{
    /* A graph allocation's free (a free node when captured): the address stays the client's while its
     * graph lives, freed or not. */
    if (srv_graph_mem_is(c, m->ptr)) {
        bool captured = srv_stream_capturing(c, stream);
        CHECK(before_op(stream));
        CUresult res = cuMemFreeAsync(m->ptr, stream->cu);
        after_op(stream);
        if (res == CUDA_SUCCESS && !captured)
            srv_graph_mem_freed(c, m->ptr);
        return res;
    }
    const struct cumux_range *r = allocation_at(c, m->ptr);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    /* Captured, the free would happen only if and when the graph runs, while the table already says the
     * memory is gone (and never freed if the graph never runs). Not supported, like allocations. */
    if (srv_stream_capturing(c, stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CHECK(before_op(stream));
    if (srv_ipc_defer_free(c, m->ptr, (int)r->extra, stream->cu)) {
        after_op(stream);
        take_allocation(c, m->ptr);
        return CUDA_SUCCESS;
    }
    CUresult res = srv_chunks_in_arena(m->ptr) ? srv_chunk_free(c, m->ptr, stream->cu)
                                               : cuMemFreeAsync(m->ptr, stream->cu);
    after_op(stream);
    if (res == CUDA_SUCCESS)
        take_allocation(c, m->ptr);
    return res;
}

CUresult op_mem_alloc(struct srv_client *c, const struct cumux_mem_alloc *m, struct srv_ctx *ctx, uint8_t *out,
                      uint32_t *out_len)
{
    if (m->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (srv_chunks_on()) { /* memory that can outlive the worker (chunks.c) */
        uint64_t p64 = 0;
        CHECK(srv_mem_charge(c, m->size));
        CUresult r = srv_chunk_alloc(c, ctx->gpu, m->size, &p64);
        if (r == CUDA_SUCCESS && cumux_ranges_add(&c->memory.dev_ranges, p64, m->size, RANGE_ALLOC, (uint64_t)ctx->gpu) < 0) {
            srv_chunk_free(c, p64, NULL);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r != CUDA_SUCCESS) {
            srv_mem_uncharge(c, m->size);
            return r;
        }
        return reply_u64(out, out_len, p64);
    }
    CUstream ms;
    CHECK(alloc_stream(c, ctx->gpu, &ms));
    /* From the client's pool, on a stream of its own: cuMemFree of ordinary allocations waits for every
     * kernel in the context, that is for every client; a stream-ordered free waits for none. Not on the
     * stream of frees: waiting for this allocation would wait for every free queued there, and so for all
     * the client's work before them. */
    struct srv_pool *pool;
    CHECK(default_pool(c, ctx->gpu, &pool));
    CUdeviceptr p;
    CHECK(srv_mem_charge(c, m->size));
    CUresult r = cuMemAllocFromPoolAsync(&p, (size_t)m->size, pool->pool, ms);
    if (r != CUDA_SUCCESS) {
        srv_mem_uncharge(c, m->size);
        return r;
    }
    r = cuStreamSynchronize(ms); /* usable on any stream once this returns, as cuMemAlloc's */
    if (r != CUDA_SUCCESS || cumux_ranges_add(&c->memory.dev_ranges, p, m->size, RANGE_ALLOC, (uint64_t)ctx->gpu) < 0) {
        cuMemFreeAsync(p, ms);
        srv_mem_uncharge(c, m->size);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, p);
}

/* A dma-buf descriptor for a range of the client's own device memory. It goes to the client over its
 * socket before the answer, without waiting: a client that never reads its socket gets an error, the
 * worker is never stuck on it. */
CUresult op_mem_range_handle(struct srv_client *c, const struct cumux_mem_range_handle *m)
{
    if (m->handle_type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || m->size == 0 || !dev_ok(c, m->ptr, m->size))
        return CUDA_ERROR_INVALID_VALUE;
    const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, m->ptr);
    use_gpu(c, (int)r->extra);
    int fd = -1;
    CHECK(cuMemGetHandleForAddressRange(&fd, m->ptr, (size_t)m->size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, m->flags));
    uint64_t tag = CUMUX_MAGIC;
    int sent = cumux_sock_send_now(c->conn.sock, &tag, sizeof tag, fd);
    close(fd);
    return sent == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Free after everything the client has queued so far, on any of its streams, is done. */
static CUresult mem_release(struct srv_client *c, uint64_t ptr, int gpu)
{
    if (srv_chunks_in_arena(ptr))
        return srv_chunk_free(c, ptr, NULL);
    CUstream ms;
    CHECK(after_client_work(c, gpu, &ms));
    return cuMemFreeAsync(ptr, ms);
}

CUresult op_mem_free(struct srv_client *c, const struct cumux_mem_free *m)
{
    if (srv_graph_mem_is(c, m->ptr)) { /* after the client's work, as cuMemFree waits for it */
        const struct cumux_range *g = cumux_ranges_find(&c->memory.dev_ranges, m->ptr);
        CUstream ms;
        CHECK(g ? mem_stream(c, (int)g->extra, &ms) : CUDA_ERROR_INVALID_VALUE);
        CHECK(cuMemFreeAsync(m->ptr, ms));
        srv_graph_mem_freed(c, m->ptr);
        return cuStreamSynchronize(ms);
    }
    const struct cumux_range *r = allocation_at(c, m->ptr);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    if (srv_ipc_defer_free(c, m->ptr, (int)r->extra, NULL)) {
        take_allocation(c, m->ptr); /* others opened it: the last of them frees it */
        return CUDA_SUCCESS;
    }
    CUresult res = mem_release(c, m->ptr, (int)r->extra);
    if (res == CUDA_SUCCESS)
        take_allocation(c, m->ptr);
    return res;
}

CUresult op_mem_info(struct srv_client *c, struct srv_ctx *ctx, uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, ctx->gpu);
    size_t f, t;
    CHECK(cuMemGetInfo(&f, &t));
    /* A client with a limit sees a GPU of that size, of which what it holds is used; in a group with a limit,
     * of what the others of the group leave it. */
    uint64_t limit = atomic_load(&c->memory.mem_limit), used = atomic_load(&c->memory.mem_bytes);
    uint64_t room = srv_group_room(c);
    if (room != UINT64_MAX && (!limit || room < limit))
        limit = room ? room : 1;
    if (limit && limit < t) {
        t = (size_t)limit;
        if ((uint64_t)f > (used < limit ? limit - used : 0))
            f = (size_t)(used < limit ? limit - used : 0);
    }
    struct cumux_mem_info rep = {f, t};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_host_alloc(struct srv_client *c, const struct cumux_host_alloc *m, uint8_t *out, uint32_t *out_len)
{
    /* A client that shrank the file under the server's mapping would crash the server on access. */
    int fd = recv_sealed_fd(c, m->size, F_SEAL_SHRINK);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->size == 0 || m->size > (1ull << 40)) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t len = (size_t)m->size;
    /* The same address in both processes lets a kernel use the pointer the client was given. */
    void *p = MAP_FAILED;
    if (m->client_addr && (m->client_addr & 4095) == 0)
        p = cumux_mmap((void *)(uintptr_t)m->client_addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                       fd, 0);
    if (p != MAP_FAILED && (uint64_t)(uintptr_t)p != m->client_addr) {
        munmap(p, len); /* old kernels ignore MAP_FIXED_NOREPLACE */
        p = MAP_FAILED;
    }
    if (p == MAP_FAILED)
        p = cumux_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, 0);
    CUresult r = cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS || cumux_ranges_add(&c->memory.host_ranges, (uint64_t)(uintptr_t)p, len, RANGE_HOST, len) < 0) {
        if (r == CUDA_SUCCESS)
            cuMemHostUnregister(p);
        munmap(p, len);
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&c->memory.host_bytes, len);
    return reply_u64(out, out_len, (uint64_t)(uintptr_t)p);
}

void host_release(struct srv_client *c, uint64_t base)
{
    struct cumux_range gone;
    if (cumux_ranges_remove(&c->memory.host_ranges, base, &gone) < 0)
        return;
    /* cuMemHostUnregister waits for every kernel in the context: not on this client's time. */
    srv_reap(REAP_HOST_MEMORY, 0, (void *)(uintptr_t)gone.base, gone.extra, NULL);
    atomic_fetch_sub(&c->memory.host_bytes, gone.extra);
}

CUresult op_host_free(struct srv_client *c, const struct cumux_mem_free *m)
{
    const struct cumux_range *r = cumux_ranges_find(&c->memory.host_ranges, m->ptr);
    if (!r || r->base != m->ptr)
        return CUDA_ERROR_INVALID_VALUE;
    /* Copies into it may still be in flight: the reaper's unregister waits for them. */
    host_release(c, m->ptr);
    return CUDA_SUCCESS;
}


/* A client's end: its allocations (chunks go whole, srv_chunks_release_all), then the streams that made
 * and freed them, their memory given back to the device now rather than at the pool's leisure. */
void srv_memory_release(struct srv_client *c)
{
    while (c->memory.dev_ranges.n) {
        struct cumux_range r = c->memory.dev_ranges.v[c->memory.dev_ranges.n - 1];
        cumux_ranges_remove(&c->memory.dev_ranges, r.base, NULL);
        if (r.tag == RANGE_ALLOC) {
            CUstream ms;
            if (!srv_chunks_in_arena(r.base) && mem_stream(c, (int)r.extra, &ms) == CUDA_SUCCESS)
                cuMemFreeAsync(r.base, ms);
            srv_mem_uncharge(c, r.size);
        }
    }
    cumux_ranges_free(&c->memory.dev_ranges);
    for (int g = 0; g < srv_gpu_count; g++) {
        if (c->memory.alloc_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->memory.alloc_stream[g]);
            cuStreamDestroy(c->memory.alloc_stream[g]);
        }
        if (c->memory.mem_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->memory.mem_stream[g]);
            cuStreamDestroy(c->memory.mem_stream[g]);
            if (c->memory.default_pool[g])
                cuMemPoolTrimTo(c->memory.default_pool[g]->pool, 0);
        }
    }
    if (c->memory.mem_event) /* it ordered the memory streams after the client's: both are done */
        cuEventDestroy(c->memory.mem_event);
    c->memory.mem_event = NULL;
}

/* A client's end: its registered host memory. */
void srv_host_release_all(struct srv_client *c)
{
    while (c->memory.host_ranges.n)
        host_release(c, c->memory.host_ranges.v[0].base);
    cumux_ranges_free(&c->memory.host_ranges);
}
