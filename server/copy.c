/* Copies and memsets: every address checked against the client's own ranges; pageable copies through
 * the channel's staging slots. */

#include "common/channel.h"
#include "server/handlers.h"

/* ---------------------------------------------------------------- copies and memset */

CUresult op_copy(struct srv_client *c, const struct cumux_copy *m, struct srv_stream *stream, bool answered)
{
    bool ok = false;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        ok = host_ok(c, m->src, m->size) && dev_ok(c, m->dst, m->size);
        break;
    case CUMUX_COPY_DTOH:
        ok = dev_ok(c, m->src, m->size) && host_ok(c, m->dst, m->size);
        break;
    case CUMUX_COPY_DTOD:
        ok = dev_ok(c, m->src, m->size) && dev_ok(c, m->dst, m->size);
        break;
    }
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(stream));
    CUresult r;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        r = cuMemcpyHtoDAsync(m->dst, (const void *)(uintptr_t)m->src, m->size, stream->cu);
        break;
    case CUMUX_COPY_DTOH:
        r = cuMemcpyDtoHAsync((void *)(uintptr_t)m->dst, m->src, m->size, stream->cu);
        break;
    default:
        r = cuMemcpyDtoDAsync(m->dst, m->src, m->size, stream->cu);
        break;
    }
    after_op(stream);
    if (r == CUDA_SUCCESS && answered) {
        r = cuStreamSynchronize(stream->cu);
        if (r == CUDA_SUCCESS) {
            srv_usage_synced(c);          /* a synchronous copy ends what came before it (usage.c) */
            srv_stream_confirmed(stream); /* and a fault now loses nothing of that stream */
        }
        r = take_pending(c, r);
    }
    return r;
}

static CUresult copy_2d_async(CUmemorytype dt, uint64_t dst, uint64_t dpitch, CUmemorytype st, uint64_t src,
                              uint64_t spitch, uint64_t width, uint64_t height, CUstream s)
{
    CUDA_MEMCPY2D p = {0};
    p.srcMemoryType = st;
    p.srcPitch = spitch;
    p.dstMemoryType = dt;
    p.dstPitch = dpitch;
    p.WidthInBytes = width;
    p.Height = height;
    if (st == CU_MEMORYTYPE_HOST)
        p.srcHost = (const void *)(uintptr_t)src;
    else
        p.srcDevice = src;
    if (dt == CU_MEMORYTYPE_HOST)
        p.dstHost = (void *)(uintptr_t)dst;
    else
        p.dstDevice = dst;
    return cuMemcpy2DAsync(&p, s);
}

CUresult op_copy_2d(struct srv_client *c, const struct cumux_copy_2d *m, struct srv_stream *stream,
                    bool answered)
{
    uint64_t dspan, sspan;
    if (!cumux_span_2d(m->dst_pitch, m->width, m->height, &dspan) ||
        !cumux_span_2d(m->src_pitch, m->width, m->height, &sspan))
        return CUDA_ERROR_INVALID_VALUE;
    bool ok = false;
    CUmemorytype dt = CU_MEMORYTYPE_DEVICE, st = CU_MEMORYTYPE_DEVICE;
    switch (m->kind) {
    case CUMUX_COPY_HTOD:
        ok = host_ok(c, m->src, sspan) && dev_ok(c, m->dst, dspan);
        st = CU_MEMORYTYPE_HOST;
        break;
    case CUMUX_COPY_DTOH:
        ok = dev_ok(c, m->src, sspan) && host_ok(c, m->dst, dspan);
        dt = CU_MEMORYTYPE_HOST;
        break;
    case CUMUX_COPY_DTOD:
        ok = dev_ok(c, m->src, sspan) && dev_ok(c, m->dst, dspan);
        break;
    }
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(before_op(stream));
    CUresult r = copy_2d_async(dt, m->dst, m->dst_pitch, st, m->src, m->src_pitch, m->width, m->height, stream->cu);
    after_op(stream);
    if (r == CUDA_SUCCESS && answered) {
        r = cuStreamSynchronize(stream->cu);
        if (r == CUDA_SUCCESS)
            srv_stream_confirmed(stream);
        r = take_pending(c, r);
    }
    return r;
}

static void stage_set(struct srv_client *c, int slot, uint32_t state)
{
    atomic_store(&c->shm->stage_state[slot], state);
    atomic_fetch_add(&c->shm->stage_seq[slot], 1);
    cumux_futex_wake(&c->shm->stage_seq[slot], 1);
}

bool srv_staging_flush(struct srv_client *c, bool wait)
{
    bool left = false;
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++) {
        if (!c->staging.stage_pending[i])
            continue;
        if (wait)
            cuEventSynchronize(c->staging.stage_event[i]);
        else if (cuEventQuery(c->staging.stage_event[i]) == CUDA_ERROR_NOT_READY) {
            left = true;
            continue;
        }
        c->staging.stage_pending[i] = false;
        stage_set(c, i, CUMUX_STAGE_FREE);
    }
    return left;
}

CUresult op_copy_htod_staged(struct srv_client *c, const struct cumux_copy_staged *m,
                             struct srv_stream *stream)
{
    if (m->slot >= CUMUX_STAGING_SLOTS || m->size == 0 || m->size > CUMUX_STAGING_BYTES || c->staging.stage_pending[m->slot] ||
        atomic_load(&c->shm->stage_state[m->slot]) != CUMUX_STAGE_FULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (srv_stream_capturing(c, stream)) { /* the slot is reused at once: a graph would copy stale data */
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    uint64_t rows = m->width ? m->size / m->width : 1;
    uint64_t span = m->size;
    if (!c->staging.staging_registered || (m->width && (m->size % m->width || !cumux_span_2d(m->pitch, m->width, rows, &span))) ||
        !dev_ok(c, m->dev, span)) {
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = before_op(stream);
    if (r == CUDA_SUCCESS && m->width)
        r = copy_2d_async(CU_MEMORYTYPE_DEVICE, m->dev, m->pitch, CU_MEMORYTYPE_HOST,
                          (uint64_t)(uintptr_t)c->shm->staging[m->slot], m->width, m->width, rows, stream->cu);
    else if (r == CUDA_SUCCESS)
        r = cuMemcpyHtoDAsync(m->dev, c->shm->staging[m->slot], m->size, stream->cu);
    if (r == CUDA_SUCCESS)
        r = cuEventRecord(c->staging.stage_event[m->slot], stream->cu);
    after_op(stream);
    if (r != CUDA_SUCCESS) {
        cuStreamSynchronize(stream->cu);
        stage_set(c, (int)m->slot, CUMUX_STAGE_FREE);
        return r;
    }
    c->staging.stage_pending[m->slot] = true;
    /* Give back the slots of earlier chunks whose copies are done, without waiting: a copy may sit behind
     * work that waits for this client's next message (a stream wait on a value the client sets after a
     * question, a host function), so the worker must go on; it looks again while idle (client.c). */
    srv_staging_flush(c, false);
    return CUDA_SUCCESS;
}

/* Wait until the client has emptied a slot; false when it went away. */
static bool stage_wait_free(struct srv_client *c, int slot)
{
    for (;;) {
        uint32_t seq = atomic_load(&c->shm->stage_seq[slot]);
        if (atomic_load(&c->shm->stage_state[slot]) == CUMUX_STAGE_FREE)
            return true;
        if (atomic_load(&c->dead))
            return false;
        cumux_futex_wait(&c->shm->stage_seq[slot], seq, 100000000);
    }
}

CUresult op_copy_dtoh_staged(struct srv_client *c, const struct cumux_copy_staged *m,
                             struct srv_stream *stream)
{
    if (srv_stream_capturing(c, stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* pageable memory cannot be in a graph */
    /* 2-D: whole rows per chunk, packed; the client unpacks them. */
    uint64_t width = m->width, rows = width ? m->size / width : 0;
    uint64_t chunk = width ? (CUMUX_STAGING_BYTES / width) * width : CUMUX_STAGING_BYTES;
    uint64_t span = m->size;
    if (!c->staging.staging_registered || chunk == 0 || m->size == 0 ||
        (width && (m->size % width || !cumux_span_2d(m->pitch, width, rows, &span))) || !dev_ok(c, m->dev, span))
        return CUDA_ERROR_INVALID_VALUE;
    srv_staging_flush(c, true); /* this copy needs every slot */
    CHECK(before_op(stream));
    /* Chunk i is copied into slot i % N while the client copies chunk i-1 out of its slot. */
    uint64_t nchunks = (m->size + chunk - 1) / chunk;
    CUresult r = CUDA_SUCCESS;
    for (uint64_t i = 0; i <= nchunks; i++) {
        if (i < nchunks) {
            int slot = (int)(i % CUMUX_STAGING_SLOTS);
            uint64_t off = i * chunk;
            uint64_t len = m->size - off < chunk ? m->size - off : chunk;
            if (!stage_wait_free(c, slot)) {
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            if (width)
                r = copy_2d_async(CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)c->shm->staging[slot], width,
                                  CU_MEMORYTYPE_DEVICE, m->dev + (off / width) * m->pitch, m->pitch, width,
                                  len / width, stream->cu);
            else
                r = cuMemcpyDtoHAsync(c->shm->staging[slot], m->dev + off, len, stream->cu);
            if (r == CUDA_SUCCESS)
                r = cuEventRecord(c->staging.stage_event[slot], stream->cu);
            if (r != CUDA_SUCCESS)
                break;
        }
        if (i > 0) {
            int prev = (int)((i - 1) % CUMUX_STAGING_SLOTS);
            r = cuEventSynchronize(c->staging.stage_event[prev]);
            if (r != CUDA_SUCCESS)
                break;
            stage_set(c, prev, CUMUX_STAGE_READY);
        }
    }
    after_op(stream);
    if (r != CUDA_SUCCESS)
        cuStreamSynchronize(stream->cu); /* no copy may still be writing into a slot the client reuses */
    else {
        srv_usage_synced(c); /* its last chunk came after everything before it on the stream */
        srv_stream_confirmed(stream);
    }
    return take_pending(c, r);
}

CUresult op_memset(struct srv_client *c, const struct cumux_memset *m, struct srv_stream *stream)
{
    uint64_t span;
    if (!memset_span(m, &span))
        return CUDA_ERROR_INVALID_VALUE;
    if (span == 0)
        return CUDA_SUCCESS;
    if (!dev_ok(c, m->dst, span) && !host_ok(c, m->dst, span)) /* pinned memory is the device's too */
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t row = m->width * m->elem_size; /* no overflow: memset_span checked it */
    CHECK(before_op(stream));
    CUresult r;
    bool twod = m->height > 1 || m->pitch != 0;
    size_t pitch = (size_t)(m->pitch ? m->pitch : row);
    switch (m->elem_size) {
    case 1:
        r = twod ? cuMemsetD2D8Async(m->dst, pitch, (unsigned char)m->value, m->width, m->height, stream->cu)
                 : cuMemsetD8Async(m->dst, (unsigned char)m->value, m->width, stream->cu);
        break;
    case 2:
        r = twod ? cuMemsetD2D16Async(m->dst, pitch, (unsigned short)m->value, m->width, m->height, stream->cu)
                 : cuMemsetD16Async(m->dst, (unsigned short)m->value, m->width, stream->cu);
        break;
    default:
        r = twod ? cuMemsetD2D32Async(m->dst, pitch, m->value, m->width, m->height, stream->cu)
                 : cuMemsetD32Async(m->dst, m->value, m->width, stream->cu);
        break;
    }
    after_op(stream);
    return r;
}


/* A client's end: its staged copies finish before anything they use goes. */
void srv_staging_release(struct srv_client *c)
{
    srv_staging_flush(c, true);
}

/* A client's end: the staging slots' events (the buffers stay mapped until the reaper has unregistered
 * them, srv_client_free). */
void srv_staging_events_release(struct srv_client *c)
{
    use_gpu(c, 0);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        if (c->staging.stage_event[i])
            cuEventDestroy(c->staging.stage_event[i]);
}
