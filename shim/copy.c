/* Copies and memsets. Device memory and pinned memory from the server are copied by the GPU directly;
 * ordinary pageable memory is staged through the channel's pinned buffers, as the driver stages it
 * through its own. Synchronous calls wait for the answer; asynchronous ones go one way. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/log.h"
#include "shim/client.h"

/* ---- copies ---- */
static CUresult copy_direct(uint32_t kind, uint32_t stream, uint64_t dst, uint64_t src, uint64_t n, bool sync)
{
    return shim_op_copy(kind, stream, dst, src, n, sync);
}

static bool stage_wait(struct shim_chan *ch, int slot, uint32_t want, struct cumux_reply_slot *reply,
                       uint32_t reply_before)
{
    unsigned n = 0;
    for (;;) {
        uint32_t seq = atomic_load(&ch->shm->stage_seq[slot]);
        if (atomic_load(&ch->shm->stage_state[slot]) == want)
            return true;
        /* The server answered: an error, or the slot became ready just before the answer (the server makes
         * the last slot ready, then answers), which the look above may have missed. */
        if (reply && atomic_load(&reply->seq) != reply_before)
            return atomic_load(&ch->shm->stage_state[slot]) == want;
        if (++n < 2000) {
            sched_yield();
            continue;
        }
        cumux_futex_wait(&ch->shm->stage_seq[slot], seq, 20000000);
        if (atomic_load(&ch->shm->stage_seq[slot]) == seq && !shim_chan_alive(ch))
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
    struct shim_chan *ch = shim_chan_of_handle(stream);
    CUresult r = shim_chan_check(ch);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&ch->stage_lock);
    for (uint64_t off = 0; off < n && r == CUDA_SUCCESS;) {
        uint64_t len = n - off < chunk ? n - off : chunk;
        int slot = (int)(ch->stage_next++ % CUMUX_STAGING_SLOTS);
        if (!stage_wait(ch, slot, CUMUX_STAGE_FREE, NULL, 0)) {
            r = shim_chan_in_flight_lost(ch);
            break;
        }
        uint8_t *buf = ch->shm->staging[slot];
        uint64_t dev;
        if (width) {
            uint64_t row0 = off / width;
            for (uint64_t i = 0; i < len / width; i++)
                memcpy(buf + i * width, (const char *)src + (row0 + i) * spitch, width);
            dev = dst + row0 * dpitch;
        } else {
            shim_memcpy(buf, (const char *)src + off, len);
            dev = dst + off;
        }
        atomic_store(&ch->shm->stage_state[slot], CUMUX_STAGE_FULL);
        r = shim_op_copy_htod_staged(stream, (uint32_t)slot, dev, len, width, dpitch);
        off += len;
    }
    pthread_mutex_unlock(&ch->stage_lock);
    return r;
}

/* Device to pageable: the server fills the slots in turn while we empty them. Same layout rules. */
static CUresult copy_dtoh_staged(uint32_t stream, void *dst, uint64_t dpitch, uint64_t src, uint64_t spitch,
                                 uint64_t width, uint64_t n)
{
    uint64_t chunk = width ? (CUMUX_STAGING_BYTES / width) * width : CUMUX_STAGING_BYTES;
    struct shim_chan *ch = shim_chan_of_handle(stream);
    CUresult checked = shim_chan_check(ch);
    if (checked != CUDA_SUCCESS)
        return checked;
    pthread_mutex_lock(&ch->stage_lock);
    int s = shim_reply_slot();
    struct cumux_reply_slot *reply = &ch->shm->replies[s];
    uint32_t before = atomic_load(&reply->seq);
    struct cumux_copy_staged m = {.stream = stream, .dev = src, .size = n, .width = width, .pitch = spitch};
    CUresult r = CUDA_SUCCESS;
    /* Sent with a reply slot by hand: the answer comes after all the chunks. */
    struct {
        struct cumux_msg_hdr h;
        struct cumux_copy_staged b;
    } msg = {{CUMUX_OP_COPY_DTOH_STAGED, (uint16_t)s, cumux_msg_size(sizeof m)}, m};
    pthread_mutex_lock(&ch->ring_lock);
    void *p = shim_ring_reserve_on(ch, msg.h.size, &r);
    if (!p) { /* only when the server is gone */
        pthread_mutex_unlock(&ch->ring_lock);
        pthread_mutex_unlock(&ch->stage_lock);
        return shim_chan_in_flight_lost(ch);
    }
    memcpy(p, &msg, sizeof msg);
    shim_ring_commit_on(ch, msg.h.op, msg.h.size);
    pthread_mutex_unlock(&ch->ring_lock);
    uint64_t nchunks = (n + chunk - 1) / chunk, i;
    for (i = 0; i < nchunks; i++) {
        int slot = (int)(i % CUMUX_STAGING_SLOTS);
        if (!stage_wait(ch, slot, CUMUX_STAGE_READY, reply, before))
            break;
        uint64_t off = i * chunk;
        uint64_t len = n - off < chunk ? n - off : chunk;
        const uint8_t *buf = ch->shm->staging[slot];
        if (width) {
            uint64_t row0 = off / width;
            for (uint64_t k = 0; k < len / width; k++)
                memcpy((char *)dst + (row0 + k) * dpitch, buf + k * width, width);
        } else {
            shim_memcpy((char *)dst + off, buf, len);
        }
        atomic_store(&ch->shm->stage_state[slot], CUMUX_STAGE_FREE);
        atomic_fetch_add(&ch->shm->stage_seq[slot], 1);
        cumux_futex_wake(&ch->shm->stage_seq[slot], 1);
    }
    if (shim_chan_reply_wait(ch, reply, before) < 0)
        r = shim_chan_in_flight_lost(ch);
    else
        r = shim_answer((CUresult)reply->result);
    /* Success with chunks never made ready would leave the program's buffer unwritten: never report it. */
    if (r == CUDA_SUCCESS && i < nchunks) {
        cumux_logf("cuMemcpyDtoH: the server answered before chunk %llu of %llu was ready",
                   (unsigned long long)i, (unsigned long long)nchunks);
        r = CUDA_ERROR_UNKNOWN;
    }
    /* After an error some slots may still say READY: the server's next staged copy starts from FREE. */
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        atomic_store(&ch->shm->stage_state[i], CUMUX_STAGE_FREE);
    pthread_mutex_unlock(&ch->stage_lock);
    return r;
}

static CUresult sync_stream_handle(uint32_t stream)
{
    return shim_op_stream_sync(stream);
}

enum { PTR_HOST = 0, PTR_DEVICE = 1 };

/* Memory of another GPU than the stream's (a program using several): on a default stream, the work goes to
 * the legacy stream of the memory's context, on its GPU's worker, as the driver would reach it through
 * unified addressing; on a stream of the program's own, not yet. */
static CUresult on_memory_gpu(CUstream hstream, uint64_t devptr, uint32_t *stream)
{
    struct CUctx_st *owner = shim_ptr_ctx(devptr);
    if (hstream && hstream != CU_STREAM_LEGACY && hstream != CU_STREAM_PER_THREAD)
        return cumux_unsupported("a copy or memset on one GPU's stream of another GPU's memory");
    if (!owner || owner->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_VALUE;
    *stream = owner->legacy_stream;
    return CUDA_SUCCESS;
}

/* Device memory of two GPUs of this program, each served by its own worker, where the stream's worker
 * cannot view the other's (pool or VMM memory, no peer access): through the program's memory, chunk by
 * chunk, from the source's context's legacy stream to the destination's, after the work of the stream the
 * copy is ordered on (`stream`), and complete when it returns. */
static CUresult copy_across_gpus(uint64_t dst, uint64_t src, uint64_t n, uint32_t stream)
{
    struct CUctx_st *sx = shim_ptr_ctx(src), *dx = shim_ptr_ctx(dst);
    if (!sx || !dx || sx->magic != SHIM_MAGIC_CTX || dx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_op_stream_sync(stream);
    uint64_t chunk = n < (64u << 20) ? n : (64u << 20);
    uint8_t *buf = r == CUDA_SUCCESS ? malloc(chunk) : NULL;
    if (r == CUDA_SUCCESS && !buf)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (uint64_t off = 0; off < n && r == CUDA_SUCCESS; off += chunk) {
        uint64_t len = n - off < chunk ? n - off : chunk;
        r = copy_dtoh_staged(sx->legacy_stream, buf, 0, src + off, 0, 0, len);
        if (r == CUDA_SUCCESS)
            r = copy_htod_staged(dx->legacy_stream, dst + off, 0, buf, 0, 0, len);
    }
    if (r == CUDA_SUCCESS)
        r = shim_op_stream_sync(dx->legacy_stream);
    free(buf);
    return r;
}

/* One copy of n bytes in any direction; `sync` for the calls that CUDA makes synchronous. */
static CUresult copy_any(uint64_t dst, uint64_t src, uint64_t n, CUstream hstream, bool sync, int dst_kind, int src_kind)
{
    uint32_t stream;
    struct CUctx_st *ctx;
    CUresult r = shim_resolve_stream(hstream, &stream, &ctx);
    if (r == CUDA_SUCCESS && sync) /* a synchronous copy waits for the stream's work: lost work says so */
        r = shim_stream_lost(hstream, ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0)
        return CUDA_SUCCESS;
    /* Host memory the device can use through the same pointer (managed, or pinned and mapped) may stand
     * where device memory is expected, as with unified addressing: it is copied as the host memory it is. */
    if (dst_kind == PTR_DEVICE && shim_pinned_server_addr((const void *)(uintptr_t)dst, n))
        dst_kind = PTR_HOST;
    if (src_kind == PTR_DEVICE && shim_pinned_server_addr((const void *)(uintptr_t)src, n))
        src_kind = PTR_HOST;
    if ((dst_kind == PTR_DEVICE && !shim_is_device_ptr(dst, n)) || (src_kind == PTR_DEVICE && !shim_is_device_ptr(src, n)))
        return CUDA_ERROR_INVALID_VALUE;
    /* A program using several GPUs: each GPU's memory is its worker's (one GPU: all is the main channel's). */
    struct shim_chan *ch = shim_chan_of_handle(stream);
    struct shim_chan *dc = dst_kind == PTR_DEVICE ? shim_chan_of_ptr(dst) : ch;
    struct shim_chan *sc = src_kind == PTR_DEVICE ? shim_chan_of_ptr(src) : ch;
    if (dc != ch || sc != ch) {
        if ((dc == ch || shim_peer_view(dst, ch->gpu)) && (sc == ch || shim_peer_view(src, ch->gpu))) {
            /* The other GPU's memory is viewed by the stream's worker (peer.c): the copy runs there, at peer
             * bandwidth. A synchronous one is ordered after the other GPU's legacy stream and complete when it
             * returns, as the driver serializes it with both contexts' work. */
            struct CUctx_st *other = shim_ptr_ctx(dc != ch ? dst : src);
            if (sync && other && other->magic == SHIM_MAGIC_CTX && (r = shim_op_stream_sync(other->legacy_stream)) != CUDA_SUCCESS)
                return r;
            if (dst_kind == PTR_DEVICE && src_kind == PTR_DEVICE) {
                r = copy_direct(CUMUX_COPY_DTOD, stream, dst, src, n, false);
                return r == CUDA_SUCCESS && sync ? sync_stream_handle(stream) : r;
            }
        } else if (dst_kind == PTR_DEVICE && src_kind == PTR_DEVICE && dc != sc) {
            return copy_across_gpus(dst, src, n, stream);
        } else { /* on the default stream of the memory's context */
            if ((r = on_memory_gpu(hstream, dc != ch ? dst : src, &stream)) != CUDA_SUCCESS)
                return r;
            ch = dc != ch ? dc : sc;
        }
    }
    bool mapped_here = ch == &shim.main; /* pinned memory is shared with the main worker only */
    if (dst_kind == PTR_DEVICE && src_kind == PTR_DEVICE)
        return copy_direct(CUMUX_COPY_DTOD, stream, dst, src, n, false);
    if (dst_kind == PTR_DEVICE) {
        uint64_t a = mapped_here ? shim_pinned_server_addr((const void *)(uintptr_t)src, n) : 0;
        if (a)
            return copy_direct(CUMUX_COPY_HTOD, stream, dst, a, n, sync);
        r = copy_htod_staged(stream, dst, 0, (const void *)(uintptr_t)src, 0, 0, n);
        /* A synchronous copy is complete when it returns, whichever stream comes next. */
        return r == CUDA_SUCCESS && sync ? sync_stream_handle(stream) : r;
    }
    if (src_kind == PTR_DEVICE) {
        uint64_t a = mapped_here ? shim_pinned_server_addr((const void *)(uintptr_t)dst, n) : 0;
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
    return copy_any(dst, src, n, NULL, true, PTR_DEVICE, PTR_DEVICE); /* between GPUs: copy_across_gpus */
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s)
{
    if (!dctx || !sctx || dctx->magic != SHIM_MAGIC_CTX || sctx->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
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

CUresult shim_copy_2d(const CUDA_MEMCPY2D *p, CUstream hstream, bool sync)
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
    if (sk == PTR_HOST && dk == PTR_HOST) {
        r = sync_stream_handle(stream);
        for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
            memmove((char *)(uintptr_t)dst + i * dp, (const char *)(uintptr_t)src + i * sp, w);
        return r;
    }
    if (sk == PTR_DEVICE && dk == PTR_DEVICE)
        return shim_op_copy_2d(CUMUX_COPY_DTOD, stream, dst, dp, src, sp, w, h, false);
    if (dk == PTR_DEVICE) {
        uint64_t a = shim_pinned_server_addr((const void *)(uintptr_t)src, sspan);
        if (a)
            return shim_op_copy_2d(CUMUX_COPY_HTOD, stream, dst, dp, a, sp, w, h, sync);
        if (w > CUMUX_STAGING_BYTES) {
            for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
                r = copy_any(dst + i * dp, src + i * sp, w, hstream, false, PTR_DEVICE, PTR_HOST);
        } else {
            r = copy_htod_staged(stream, dst, dp, (const void *)(uintptr_t)src, sp, w, w * h);
        }
        return r == CUDA_SUCCESS && sync ? sync_stream_handle(stream) : r;
    }
    uint64_t a = shim_pinned_server_addr((const void *)(uintptr_t)dst, dspan);
    if (a)
        return shim_op_copy_2d(CUMUX_COPY_DTOH, stream, a, dp, src, sp, w, h, sync);
    if (w > CUMUX_STAGING_BYTES) {
        for (uint64_t i = 0; r == CUDA_SUCCESS && i < h; i++)
            r = copy_any(dst + i * dp, src + i * sp, w, hstream, true, PTR_HOST, PTR_DEVICE);
        return r;
    }
    return copy_dtoh_staged(stream, (void *)(uintptr_t)dst, dp, src, sp, w, w * h);
}

/* A batch: each copy as cuMemcpyAsync makes it, in order on the stream (CUDA promises no order within a
 * batch, so in order is one of the orders it allows). Pageable sources are read during the call, which
 * every source access order accepts. The attributes are checked as the driver checks them. */
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                               CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream h)
{
    if (!count || !dsts || !srcs || !sizes || !attrs || !idxs || !nattrs || nattrs > count || idxs[0] != 0 ||
        (h == NULL && !cumux_tls_ptds) || h == CU_STREAM_LEGACY)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nattrs; k++) {
        if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count ||
            attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        CUresult r = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], h);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* cuMemcpy2D and its forms are array.c's: they may name arrays. */

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
    if ((dst % elem) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!shim_is_device_ptr(dst, span)) {
        /* Unified addressing: pinned host memory is device memory too (XLA clears its pinned buffers so).
         * The server knows it at its own address. */
        dst = shim_pinned_server_addr((const void *)(uintptr_t)dst, span);
        if (!dst)
            return CUDA_ERROR_INVALID_VALUE;
    } else if (shim_chan_of_ptr(dst) != shim_chan_of_handle(stream) &&
               (r = on_memory_gpu(hstream, dst, &stream)) != CUDA_SUCCESS) {
        return r;
    }
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

