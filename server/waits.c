/* Stream memory waits a client leaves behind (cuStreamWaitValue32/64, cuStreamBatchMemOp).
 *
 * A stream waiting for a value in memory that nobody will write never finishes: in a process of its own the
 * driver drops it with the context, here it would hold the client's worker in its final synchronization
 * forever, and the driver's device-wide waits (cuMemHostUnregister, cuModuleUnload on the reaper) with it.
 * So the server keeps, per client and address, the condition of the last wait sent there, and when the
 * client goes it writes a value that satisfies it (the client's own memory, which is freed next anyway).
 * Conditions that no value satisfies are refused when they are sent. */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "server/handlers.h"

#define WAITS_MAX (1u << 16) /* addresses waited on, per client; past it a wait is refused */

struct srv_wait {
    uint64_t address; /* 0: an empty slot (no client memory is at 0) */
    uint64_t value;
    uint32_t cond; /* CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR */
    uint8_t size;  /* 4 or 8 */
    uint8_t gpu;
};

static size_t slot_of(uint64_t address, uint32_t cap)
{
    uint64_t h = address * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static bool grow(struct srv_client *c)
{
    uint32_t cap = c->waits.cap ? c->waits.cap * 2 : 64;
    struct srv_wait *v = calloc(cap, sizeof *v);
    if (!v)
        return false;
    for (uint32_t i = 0; i < c->waits.cap; i++) {
        const struct srv_wait *w = &c->waits.list[i];
        if (!w->address)
            continue;
        size_t j = slot_of(w->address, cap);
        while (v[j].address)
            j = (j + 1) & (cap - 1);
        v[j] = *w;
    }
    free(c->waits.list);
    c->waits.list = v;
    c->waits.cap = cap;
    return true;
}

/* Whether some value of the word satisfies the condition: (x & 0) and ~(x | ~0) are never non-zero. */
static bool satisfiable(uint32_t cond, uint64_t value, uint8_t size)
{
    uint64_t all = size == 8 ? UINT64_MAX : UINT32_MAX;
    if (cond == CU_STREAM_WAIT_VALUE_AND)
        return (value & all) != 0;
    if (cond == CU_STREAM_WAIT_VALUE_NOR)
        return (value & all) != all;
    return true;
}

/* Whether a satisfies every GEQ wait that b does: a is b or later, in the driver's wrapping order. */
static bool geq_later(uint64_t a, uint64_t b, uint8_t size)
{
    return size == 8 ? (int64_t)(a - b) >= 0 : (int32_t)(uint32_t)(a - b) >= 0;
}

CUresult srv_wait_note(struct srv_client *c, int gpu, uint64_t address, uint8_t size, uint64_t value, uint32_t flags)
{
    uint32_t cond = flags & 3u; /* the rest are CU_STREAM_WAIT_VALUE_FLUSH, checked by the driver */
    if (!satisfiable(cond, value, size))
        return CUDA_ERROR_INVALID_VALUE;
    if ((c->waits.n + 1) * 2 > c->waits.cap) {
        if (c->waits.n >= WAITS_MAX || !grow(c))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t j = slot_of(address, c->waits.cap);
    while (c->waits.list[j].address && c->waits.list[j].address != address)
        j = (j + 1) & (c->waits.cap - 1);
    struct srv_wait *w = &c->waits.list[j];
    if (!w->address) {
        c->waits.n++;
    } else if (w->cond == CU_STREAM_WAIT_VALUE_GEQ && cond == CU_STREAM_WAIT_VALUE_GEQ && w->size == size &&
               geq_later(w->value, value, size)) {
        return CUDA_SUCCESS; /* the value kept already satisfies this wait too */
    }
    *w = (struct srv_wait){.address = address, .value = value, .cond = cond, .size = size, .gpu = (uint8_t)gpu};
    return CUDA_SUCCESS;
}

/* Writes, for each wait still on the client's memory, a value that meets it. */
static void write_all(struct srv_client *c, CUstream *s)
{
    for (uint32_t i = 0; i < c->waits.cap; i++) {
        const struct srv_wait *w = &c->waits.list[i];
        /* Memory the client freed meanwhile may be someone else's now: it is not written. */
        if (!w->address || w->gpu >= srv_gpu_count ||
            (!dev_ok(c, w->address, w->size) && !host_ok(c, w->address, w->size)))
            continue;
        use_gpu(c, w->gpu);
        if (!s[w->gpu] && cuStreamCreate(&s[w->gpu], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            s[w->gpu] = NULL;
            continue;
        }
        CUstreamBatchMemOpParams p;
        memset(&p, 0, sizeof p);
        p.writeValue.operation = w->size == 8 ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
        p.writeValue.address = w->address;
        /* The value itself meets GEQ, EQ and AND (its bits are not all zero: satisfiable); 0 meets NOR. */
        p.writeValue.value64 = w->cond == CU_STREAM_WAIT_VALUE_NOR ? 0 : w->value;
        const struct cumux_range *range = cumux_ranges_find(&c->memory.dev_ranges, w->address);
        CUresult r = srv_memop_run(w->gpu, s[w->gpu], &p, range && range->tag == RANGE_ALLOC);
        if (r != CUDA_SUCCESS)
            cumux_logf("client %u: cannot release its stream wait at 0x%llx (%d)", c->id,
                       (unsigned long long)w->address, (int)r);
    }
    for (int g = 0; g < srv_gpu_count && g < CUMUX_MAX_DEVICES; g++) {
        if (s[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(s[g]);
        }
    }
}

/* Whether all the client's streams are done, waiting up to ms milliseconds for it. */
static bool streams_idle(struct srv_client *c, unsigned ms)
{
    for (unsigned t = 0;; t++) {
        bool idle = true;
        for (uint32_t h = 1; h <= c->obj.nhandles && idle; h++) {
            struct srv_stream *st = handle_get(c, h, OBJ_STREAM);
            if (st) {
                use_gpu(c, st->ctx->gpu);
                idle = cuStreamQuery(st->cu) != CUDA_ERROR_NOT_READY;
            }
        }
        if (idle || t >= ms)
            return idle;
        usleep(1000);
    }
}

void srv_waits_release(struct srv_client *c)
{
    if (!c->waits.n)
        return;
    CUstream s[CUMUX_MAX_DEVICES] = {0};
    /* Work let go by one write may change another waited word before its stream sees it (a kernel over the
     * buffer): the values are written again while streams still wait, a few times. Then the final
     * synchronization waits as long as the client's work takes. */
    for (unsigned round = 0; round < 5; round++) {
        write_all(c, s);
        if (streams_idle(c, 100u << round))
            break;
    }
    for (int g = 0; g < srv_gpu_count && g < CUMUX_MAX_DEVICES; g++) {
        if (s[g]) {
            use_gpu(c, g);
            cuStreamDestroy(s[g]);
        }
    }
    free(c->waits.list);
    c->waits.list = NULL;
    c->waits.cap = c->waits.n = 0;
}
