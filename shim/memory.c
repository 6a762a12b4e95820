/* Memory: device allocations, pinned host memory shared with the server, copies and memset.
 * The shim classifies every pointer itself (unified addressing): device memory it allocated, pinned
 * memory it got from the server (copied by the GPU directly), or ordinary pageable memory (staged
 * through the channel's pinned buffers, as the driver stages it through its own). */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/channel.h"
#include "shim/client.h"

/* ---- the shim's address ranges ---- */
void shim_add_device_range(uint64_t base, uint64_t size, struct CUctx_st *ctx, bool global)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    if (!cumux_ranges_find(&shim.dev_ranges, base))
        cumux_ranges_add(&shim.dev_ranges, base, size, ((uint64_t)ctx->device + 1) | (global ? SHIM_RANGE_GLOBAL : 0),
                         (uint64_t)(uintptr_t)ctx);
    pthread_rwlock_unlock(&shim.ranges_lock);
}

bool shim_forget_device_range(uint64_t p)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    const struct cumux_range *rg = cumux_ranges_find(&shim.dev_ranges, p);
    bool ok = rg && rg->base == p && !(rg->tag & SHIM_RANGE_GLOBAL);
    if (ok)
        cumux_ranges_remove(&shim.dev_ranges, p, NULL);
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

bool shim_is_device_ptr(uint64_t p, uint64_t len)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    bool ok = cumux_ranges_covers(&shim.dev_ranges, p, len) != NULL;
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

/* The server's address of [p, p+len) when it lies in pinned memory from the server; 0 otherwise. */
static uint64_t pinned_server_addr(const void *p, uint64_t len)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_covers(&shim.pinned_ranges, (uint64_t)(uintptr_t)p, len);
    uint64_t a = r ? r->extra + ((uint64_t)(uintptr_t)p - r->base) : 0;
    pthread_rwlock_unlock(&shim.ranges_lock);
    return a;
}

/* ---- allocation ---- */
CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t ptr;
    r = shim_op_mem_alloc(c->handle, size, &ptr);
    if (r != CUDA_SUCCESS)
        return r;
    shim_add_device_range(ptr, size, c, false);
    *dptr = (CUdeviceptr)ptr;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    if (!pitch || (elem != 4 && elem != 8 && elem != 16) || width == 0 || height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The driver's pitch alignment on current GPUs is 512 bytes (texture pitch alignment is 32). */
    size_t p = (width + 511) & ~(size_t)511;
    CUresult r = cuMemAlloc(dptr, p * height);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

CUresult cuMemFree(CUdeviceptr p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (p == 0)
        return CUDA_SUCCESS;
    if (!shim_forget_device_range(p))
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_mem_free(p);
}

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct cumux_mem_info rep;
    r = shim_op_mem_info(c->handle, 0, &rep);
    if (r != CUDA_SUCCESS)
        return r;
    if (free_bytes)
        *free_bytes = rep.free;
    if (total)
        *total = rep.total;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.dev_ranges, p);
    struct cumux_range found = r ? *r : (struct cumux_range){0};
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (!r)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = found.base;
    if (size)
        *size = found.size;
    return CUDA_SUCCESS;
}

/* ---- pinned host memory: a memfd mapped by both processes, registered with CUDA by the server ---- */
#define PINNED_REGISTERED (1ull << 63) /* range tag: memory of the program's, registered in place */

/* Hand the server a memfd of host memory mapped here at `mine`; it maps it (at the same address when it
 * can) and registers it with CUDA. */
static CUresult share_with_server(int fd, void *mine, size_t len, unsigned flags, uint64_t *server_addr)
{
    struct cumux_host_alloc m = {.size = len, .flags = flags, .client_addr = (uint64_t)(uintptr_t)mine};
    struct cumux_u64_reply rep;
    /* The descriptor and the command must reach the server in the same order as other threads' pairs. */
    pthread_mutex_lock(&shim.sock_lock);
    CUresult r = shim_send_fd(fd);
    if (r == CUDA_SUCCESS)
        r = shim_call(CUMUX_OP_HOST_ALLOC, &m, sizeof m, &rep, sizeof rep, NULL);
    pthread_mutex_unlock(&shim.sock_lock);
    if (r == CUDA_SUCCESS)
        *server_addr = rep.value;
    return r;
}
CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pp || size == 0 || (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                                  CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t len = (size + 4095) & ~(size_t)4095;
    int fd = memfd_create("cumux-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)len) < 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *mine = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mine == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t server_addr;
    r = share_with_server(fd, mine, len, flags, &server_addr);
    if (r != CUDA_SUCCESS) {
        munmap(mine, len);
        close(fd);
        return r;
    }
    if (server_addr != (uint64_t)(uintptr_t)mine) {
        /* The server mapped it elsewhere: move ours there if we can, so that both agree on the address. */
        void *moved = mmap((void *)(uintptr_t)server_addr, len, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (moved != MAP_FAILED && (uint64_t)(uintptr_t)moved == server_addr) {
            munmap(mine, len);
            mine = moved;
        } else if (moved != MAP_FAILED) {
            munmap(moved, len);
        }
    }
    close(fd);
    pthread_rwlock_wrlock(&shim.ranges_lock);
    cumux_ranges_add(&shim.pinned_ranges, (uint64_t)(uintptr_t)mine, len, len, server_addr);
    pthread_rwlock_unlock(&shim.ranges_lock);
    *pp = mine;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t size)
{
    return cuMemHostAlloc(pp, size, 0);
}

CUresult cuMemFreeHost(void *p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct cumux_range r;
    pthread_rwlock_wrlock(&shim.ranges_lock);
    const struct cumux_range *f = cumux_ranges_find(&shim.pinned_ranges, (uint64_t)(uintptr_t)p);
    int found = f && f->base == (uint64_t)(uintptr_t)p && !(f->tag & PINNED_REGISTERED)
                    ? cumux_ranges_remove(&shim.pinned_ranges, (uint64_t)(uintptr_t)p, &r)
                    : -1;
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (found < 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = shim_op_host_free(r.extra);
    munmap(p, r.size);
    return res;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = pinned_server_addr(p, 1);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    /* Unified addressing: the device address is the server's host address of the same memory. */
    *dptr = (CUdeviceptr)a;
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.pinned_ranges, (uint64_t)(uintptr_t)p);
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (!r || !flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

/* cuMemHostRegister: the program's own pages are moved, in place, into a memfd (contents copied, then
 * the same addresses mapped over it), which the server then maps and registers like cuMemHostAlloc's.
 * Writes another thread makes to those pages during the call may be lost. */
CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!p || size == 0 || (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                                 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return cumux_unsupported("cuMemHostRegister of I/O memory");
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)p + size + 4095) & ~(uintptr_t)4095;
    size_t len = end - base;
    pthread_rwlock_rdlock(&shim.ranges_lock);
    bool taken = cumux_ranges_find(&shim.pinned_ranges, base) || cumux_ranges_find(&shim.pinned_ranges, end - 1);
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (taken)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    int fd = memfd_create("cumux-registered", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t done = 0; done < len;) {
        ssize_t w = pwrite(fd, (const char *)base + done, len - done, (off_t)done);
        if (w <= 0) {
            close(fd);
            return CUDA_ERROR_INVALID_VALUE; /* not readable memory */
        }
        done += (size_t)w;
    }
    if (mmap((void *)base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t server_addr;
    r = share_with_server(fd, (void *)base, len, flags, &server_addr);
    close(fd);
    if (r != CUDA_SUCCESS)
        return r; /* the pages stay file-backed with the same contents: the program sees no difference */
    pthread_rwlock_wrlock(&shim.ranges_lock);
    cumux_ranges_add(&shim.pinned_ranges, base, len, PINNED_REGISTERED | len, server_addr);
    pthread_rwlock_unlock(&shim.ranges_lock);
    return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)4095;
    struct cumux_range r;
    pthread_rwlock_wrlock(&shim.ranges_lock);
    const struct cumux_range *f = cumux_ranges_find(&shim.pinned_ranges, base);
    int found = f && f->base == base && (f->tag & PINNED_REGISTERED)
                    ? cumux_ranges_remove(&shim.pinned_ranges, base, &r)
                    : -1;
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (found < 0)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    /* The pages stay as they are (shared with nobody once the server lets go). */
    return shim_op_host_free(r.extra);
}

/* ---- copies ---- */
/* Synchronous calls wait for the answer; asynchronous ones go one way. */
static CUresult send_or_call(uint16_t op, const void *m, size_t len, bool sync)
{
    return sync ? shim_call(op, m, len, NULL, 0, NULL) : shim_send(op, m, len, NULL, 0);
}

static CUresult copy_direct(uint32_t kind, uint32_t stream, uint64_t dst, uint64_t src, uint64_t n, bool sync)
{
    return shim_op_copy(kind, stream, dst, src, n, sync);
}

static bool stage_wait(int slot, uint32_t want, struct cumux_reply_slot *reply, uint32_t reply_before)
{
    unsigned n = 0;
    for (;;) {
        uint32_t seq = atomic_load(&shim.shm->stage_seq[slot]);
        if (atomic_load(&shim.shm->stage_state[slot]) == want)
            return true;
        if (reply && atomic_load(&reply->seq) != reply_before)
            return false; /* the server answered early: an error */
        if (++n < 2000) {
            sched_yield();
            continue;
        }
        if (cumux_futex_wait(&shim.shm->stage_seq[slot], seq, 20000000) < 0 && !shim_server_alive())
            return false;
    }
}

/* Pageable to device: through the staging slots, one way; returns once the data is staged, as CUDA does.
 * width 0: n contiguous bytes. Otherwise rows of width bytes, spitch apart in the program's memory and
 * dpitch apart on the device, n = width * rows; whole rows are packed into each slot. */
static CUresult copy_htod_staged(uint32_t stream, uint64_t dst, uint64_t dpitch, const void *src, uint64_t spitch,
                                 uint64_t width, uint64_t n)
{
    uint64_t chunk = width ? (CUMUX_STAGING_BYTES / width) * width : CUMUX_STAGING_BYTES;
    pthread_mutex_lock(&shim.stage_lock);
    CUresult r = CUDA_SUCCESS;
    for (uint64_t off = 0; off < n && r == CUDA_SUCCESS;) {
        uint64_t len = n - off < chunk ? n - off : chunk;
        int slot = (int)(shim.stage_next++ % CUMUX_STAGING_SLOTS);
        if (!stage_wait(slot, CUMUX_STAGE_FREE, NULL, 0)) {
            r = CUDA_ERROR_MPS_CONNECTION_FAILED;
            break;
        }
        uint8_t *buf = shim.shm->staging[slot];
        struct cumux_copy_staged m = {.stream = stream, .slot = (uint32_t)slot, .size = len, .width = width, .pitch = dpitch};
        if (width) {
            uint64_t row0 = off / width;
            for (uint64_t i = 0; i < len / width; i++)
                memcpy(buf + i * width, (const char *)src + (row0 + i) * spitch, width);
            m.dev = dst + row0 * dpitch;
        } else {
            shim_memcpy(buf, (const char *)src + off, len);
            m.dev = dst + off;
        }
        atomic_store(&shim.shm->stage_state[slot], CUMUX_STAGE_FULL);
        r = shim_send(CUMUX_OP_COPY_HTOD_STAGED, &m, sizeof m, NULL, 0);
        off += len;
    }
    pthread_mutex_unlock(&shim.stage_lock);
    return r;
}

/* Device to pageable: the server fills the slots in turn while we empty them. Same layout rules. */
static CUresult copy_dtoh_staged(uint32_t stream, void *dst, uint64_t dpitch, uint64_t src, uint64_t spitch,
                                 uint64_t width, uint64_t n)
{
    uint64_t chunk = width ? (CUMUX_STAGING_BYTES / width) * width : CUMUX_STAGING_BYTES;
    pthread_mutex_lock(&shim.stage_lock);
    int s = shim_reply_slot();
    struct cumux_reply_slot *reply = &shim.shm->replies[s];
    uint32_t before = atomic_load(&reply->seq);
    struct cumux_copy_staged m = {.stream = stream, .dev = src, .size = n, .width = width, .pitch = spitch};
    CUresult r = CUDA_SUCCESS;
    /* Sent with a reply slot by hand: the answer comes after all the chunks. */
    struct {
        struct cumux_msg_hdr h;
        struct cumux_copy_staged b;
    } msg = {{CUMUX_OP_COPY_DTOH_STAGED, (uint16_t)s, cumux_msg_size(sizeof m)}, m};
    pthread_mutex_lock(&shim.ring_lock);
    void *p = shim_ring_reserve(msg.h.size, &r);
    if (!p) {
        pthread_mutex_unlock(&shim.ring_lock);
        pthread_mutex_unlock(&shim.stage_lock);
        return r;
    }
    memcpy(p, &msg, sizeof msg);
    cumux_ring_commit(shim.shm, msg.h.size);
    pthread_mutex_unlock(&shim.ring_lock);
    uint64_t nchunks = (n + chunk - 1) / chunk;
    for (uint64_t i = 0; i < nchunks; i++) {
        int slot = (int)(i % CUMUX_STAGING_SLOTS);
        if (!stage_wait(slot, CUMUX_STAGE_READY, reply, before))
            break;
        uint64_t off = i * chunk;
        uint64_t len = n - off < chunk ? n - off : chunk;
        const uint8_t *buf = shim.shm->staging[slot];
        if (width) {
            uint64_t row0 = off / width;
            for (uint64_t k = 0; k < len / width; k++)
                memcpy((char *)dst + (row0 + k) * dpitch, buf + k * width, width);
        } else {
            shim_memcpy((char *)dst + off, buf, len);
        }
        atomic_store(&shim.shm->stage_state[slot], CUMUX_STAGE_FREE);
        atomic_fetch_add(&shim.shm->stage_seq[slot], 1);
        cumux_futex_wake(&shim.shm->stage_seq[slot], 1);
    }
    if (cumux_reply_wait(reply, before, shim_server_alive) < 0)
        r = CUDA_ERROR_MPS_CONNECTION_FAILED;
    else
        r = (CUresult)reply->result;
    /* After an error some slots may still say READY: the server's next staged copy starts from FREE. */
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        atomic_store(&shim.shm->stage_state[i], CUMUX_STAGE_FREE);
    pthread_mutex_unlock(&shim.stage_lock);
    return r;
}

static CUresult sync_stream_handle(uint32_t stream)
{
    return shim_op_stream_sync(stream, 0);
}

enum { PTR_HOST = 0, PTR_DEVICE = 1 };

/* One copy of n bytes in any direction; `sync` for the calls that CUDA makes synchronous. */
static CUresult copy_any(uint64_t dst, uint64_t src, uint64_t n, CUstream hstream, bool sync, int dst_kind, int src_kind)
{
    uint32_t stream;
    CUresult r = shim_resolve_stream(hstream, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0)
        return CUDA_SUCCESS;
    if ((dst_kind == PTR_DEVICE && !shim_is_device_ptr(dst, n)) || (src_kind == PTR_DEVICE && !shim_is_device_ptr(src, n)))
        return CUDA_ERROR_INVALID_VALUE;
    if (dst_kind == PTR_DEVICE && src_kind == PTR_DEVICE)
        return copy_direct(CUMUX_COPY_DTOD, stream, dst, src, n, false);
    if (dst_kind == PTR_DEVICE) {
        uint64_t a = pinned_server_addr((const void *)(uintptr_t)src, n);
        if (a)
            return copy_direct(CUMUX_COPY_HTOD, stream, dst, a, n, sync);
        r = copy_htod_staged(stream, dst, 0, (const void *)(uintptr_t)src, 0, 0, n);
        /* A synchronous copy is complete when it returns, whichever stream comes next. */
        return r == CUDA_SUCCESS && sync ? sync_stream_handle(stream) : r;
    }
    if (src_kind == PTR_DEVICE) {
        uint64_t a = pinned_server_addr((const void *)(uintptr_t)dst, n);
        if (a)
            return copy_direct(CUMUX_COPY_DTOH, stream, a, src, n, sync);
        return copy_dtoh_staged(stream, (void *)(uintptr_t)dst, 0, src, 0, 0, n);
    }
    /* Host to host: ordered after the stream's earlier work, as the driver orders it. */
    r = sync_stream_handle(stream);
    if (r == CUDA_SUCCESS)
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return r;
}

static int classify(uint64_t p)
{
    return shim_is_device_ptr(p, 1) ? PTR_DEVICE : PTR_HOST;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return copy_any(dst, (uint64_t)(uintptr_t)src, n, NULL, true, PTR_DEVICE, PTR_HOST);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return copy_any(dst, (uint64_t)(uintptr_t)src, n, s, false, PTR_DEVICE, PTR_HOST);
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    return copy_any((uint64_t)(uintptr_t)dst, src, n, NULL, true, PTR_HOST, PTR_DEVICE);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_any((uint64_t)(uintptr_t)dst, src, n, s, false, PTR_HOST, PTR_DEVICE);
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_any(dst, src, n, NULL, true, PTR_DEVICE, PTR_DEVICE);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_any(dst, src, n, s, false, PTR_DEVICE, PTR_DEVICE);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy_any(dst, src, n, NULL, true, classify(dst), classify(src));
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy_any(dst, src, n, s, false, classify(dst), classify(src));
}

CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    if (!dctx || !sctx || dctx->magic != SHIM_MAGIC_CTX || sctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dctx->device != sctx->device)
        return cumux_unsupported("cuMemcpyPeer between devices");
    return copy_any(dst, src, n, NULL, true, PTR_DEVICE, PTR_DEVICE);
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s)
{
    if (!dctx || !sctx || dctx->magic != SHIM_MAGIC_CTX || sctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dctx->device != sctx->device)
        return cumux_unsupported("cuMemcpyPeerAsync between devices");
    return copy_any(dst, src, n, s, false, PTR_DEVICE, PTR_DEVICE);
}

/* ---- 2-D copies ---- */
static CUresult endpoint(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                         uint64_t *addr, int *kind)
{
    uint64_t base;
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        base = (uint64_t)(uintptr_t)host;
        *kind = PTR_HOST;
        break;
    case CU_MEMORYTYPE_DEVICE:
        base = dev;
        *kind = PTR_DEVICE;
        break;
    case CU_MEMORYTYPE_UNIFIED:
        base = dev;
        *kind = classify(dev);
        break;
    case CU_MEMORYTYPE_ARRAY:
        return cumux_unsupported("cuMemcpy2D with a CUDA array");
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *addr = base + (uint64_t)y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream hstream, bool sync)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t stream;
    CUresult r = shim_resolve_stream(hstream, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t src = 0, dst = 0;
    int sk = PTR_HOST, dk = PTR_HOST;
    if ((r = endpoint(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch, &src, &sk)) ||
        (r = endpoint(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch, &dst, &dk)))
        return r;
    uint64_t w = p->WidthInBytes, h = p->Height, sp = p->srcPitch, dp = p->dstPitch;
    if (w == 0 || h == 0)
        return CUDA_SUCCESS;
    if (h > 1 && (sp < w || dp < w))
        return CUDA_ERROR_INVALID_VALUE;
    if (h == 1 || (sp == w && dp == w))
        return copy_any(dst, src, w * h, hstream, sync, dk, sk);
    uint64_t sspan = sp * (h - 1) + w, dspan = dp * (h - 1) + w;
    if ((dk == PTR_DEVICE && !shim_is_device_ptr(dst, dspan)) || (sk == PTR_DEVICE && !shim_is_device_ptr(src, sspan)))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_copy_2d m = {.stream = stream, .dst = dst, .dst_pitch = dp, .src = src, .src_pitch = sp, .width = w,
                              .height = h};
    if (sk == PTR_HOST && dk == PTR_HOST) {
        r = sync_stream_handle(stream);
        for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
            memmove((char *)(uintptr_t)dst + i * dp, (const char *)(uintptr_t)src + i * sp, w);
        return r;
    }
    if (sk == PTR_DEVICE && dk == PTR_DEVICE) {
        m.kind = CUMUX_COPY_DTOD;
        return shim_send(CUMUX_OP_COPY_2D, &m, sizeof m, NULL, 0);
    }
    if (dk == PTR_DEVICE) {
        uint64_t a = pinned_server_addr((const void *)(uintptr_t)src, sspan);
        if (a) {
            m.kind = CUMUX_COPY_HTOD;
            m.src = a;
            return send_or_call(CUMUX_OP_COPY_2D, &m, sizeof m, sync);
        }
        if (w > CUMUX_STAGING_BYTES) {
            for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
                r = copy_any(dst + i * dp, src + i * sp, w, hstream, false, PTR_DEVICE, PTR_HOST);
        } else {
            r = copy_htod_staged(stream, dst, dp, (const void *)(uintptr_t)src, sp, w, w * h);
        }
        return r == CUDA_SUCCESS && sync ? sync_stream_handle(stream) : r;
    }
    uint64_t a = pinned_server_addr((const void *)(uintptr_t)dst, dspan);
    if (a) {
        m.kind = CUMUX_COPY_DTOH;
        m.dst = a;
        return send_or_call(CUMUX_OP_COPY_2D, &m, sizeof m, sync);
    }
    if (w > CUMUX_STAGING_BYTES) {
        for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
            r = copy_any(dst + i * dp, src + i * sp, w, hstream, true, PTR_HOST, PTR_DEVICE);
        return r;
    }
    return copy_dtoh_staged(stream, (void *)(uintptr_t)dst, dp, src, sp, w, w * h);
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
    return copy_2d(p, NULL, true);
}

CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *p)
{
    return copy_2d(p, NULL, true);
}

CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    return copy_2d(p, s, false);
}

/* ---- memset ---- */
static CUresult memset_any(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem, size_t width, size_t height,
                           CUstream hstream)
{
    uint32_t stream;
    CUresult r = shim_resolve_stream(hstream, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    uint64_t row = (uint64_t)width * elem;
    if (height > 1 && pitch < row)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t span = height > 1 ? (uint64_t)pitch * (height - 1) + row : row;
    if (!shim_is_device_ptr(dst, span) || (dst % elem) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_memset(stream, elem, dst, pitch, width, height, value);
}

CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return memset_any(d, 0, v, 1, n, 1, NULL); }
CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) { return memset_any(d, 0, v, 2, n, 1, NULL); }
CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) { return memset_any(d, 0, v, 4, n, 1, NULL); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_any(d, 0, v, 1, n, 1, s); }
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return memset_any(d, 0, v, 2, n, 1, s); }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_any(d, 0, v, 4, n, 1, s); }

CUresult cuMemsetD2D8(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h)
{
    return memset_any(d, pitch, v, 1, w, h, NULL);
}
CUresult cuMemsetD2D16(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h)
{
    return memset_any(d, pitch, v, 2, w, h, NULL);
}
CUresult cuMemsetD2D32(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h)
{
    return memset_any(d, pitch, v, 4, w, h, NULL);
}
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s)
{
    return memset_any(d, pitch, v, 1, w, h, s);
}
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s)
{
    return memset_any(d, pitch, v, 2, w, h, s);
}
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s)
{
    return memset_any(d, pitch, v, 4, w, h, s);
}

/* ---- pointer attributes: answered locally ---- */
/* Every attribute, for memory the shim knows (device allocations, module globals, pinned or registered
 * host memory) and for memory it does not. The plural form answers empty values where an attribute does
 * not apply (PyTorch and the runtime rely on it for ordinary host memory); the singular form fails. */
static CUresult pointer_attribute(void *data, CUpointer_attribute a, CUdeviceptr p, bool lenient)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *d = cumux_ranges_find(&shim.dev_ranges, p);
    const struct cumux_range *h = d ? NULL : cumux_ranges_find(&shim.pinned_ranges, p);
    struct cumux_range dr = d ? *d : (struct cumux_range){0}, hr = h ? *h : (struct cumux_range){0};
    pthread_rwlock_unlock(&shim.ranges_lock);
    bool known = d || h;
    if (!known && !lenient)
        return CUDA_ERROR_INVALID_VALUE;
    const struct cumux_range *r = d ? &dr : &hr;
    int device = d ? (int)(dr.tag & 0xffff) - 1 : 0;
    struct CUctx_st *ctx = d ? (struct CUctx_st *)(uintptr_t)dr.extra : shim.primary[0];
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = !known ? NULL : ctx ? ctx : shim_current_ctx();
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = d ? CU_MEMORYTYPE_DEVICE : h ? CU_MEMORYTYPE_HOST : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = d ? p : h ? (CUdeviceptr)(hr.extra + (p - hr.base)) : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (d && !lenient)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = h ? (void *)(uintptr_t)p : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        if (!lenient)
            return cumux_unsupported("cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_P2P_TOKENS)");
        memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS));
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = known ? 1 : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = known ? r->base : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = known ? device : -1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = known ? r->base : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = known ? r->size : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = known ? (void *)(uintptr_t)r->base : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = known ? r->size : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(int *)data = known ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, a, p, false);
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (!data[i])
            continue;
        CUresult r = pointer_attribute(data[i], attrs[i], p, true);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}
