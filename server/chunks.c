/* Client device memory that can outlive the worker (issue 10, docs/faults.md; on unless CUMUX_CONTAIN=0,
 * since 2026-12-03). Instead of the driver's pool, a client's cuMemAlloc and
 * cuMemAllocAsync (its default pool) are carved from VMM chunks of its own, made exportable as file
 * descriptors and mapped inside one arena of addresses that the worker reserves at start, so that a
 * worker taking over after a fault can map the same chunks at the same addresses.
 *
 * Chunks: a client's first chunk on a GPU is 2 MiB, each next one twice the last up to 64 MiB; an
 * allocation of 1 MiB or more has a chunk of its own (its size rounded up to the granularity), released
 * when it is freed. Inside a chunk, first fit at 512-byte alignment over a sorted list of free extents.
 *
 * Stream order, as the pool it replaces: a free is ordered after the work before it on its stream (a
 * synchronous free: after all of the client's work); the extent is reused once an event recorded there has
 * completed, looked at when the next allocation wants room. A chunk of its own is unmapped likewise once
 * its free's event has completed (whether cuMemUnmap itself waits for other clients' kernels is
 * tools/probe_fault_contain.c's question 4: if it does, this belongs on the reaper thread).
 *
 * The worker alone touches a client's chunks (its own worker thread, and the cleanup after it ended). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/ranges.h"
#include "server/handlers.h"

#define CHUNK_FIRST (2ull << 20)
#define CHUNK_MAX (64ull << 20)
#define CHUNK_OWN (1ull << 20) /* from this size an allocation has a chunk of its own */
#define ALLOC_ALIGN 512ull

struct extent {
    uint64_t off, size;
};

struct chunk {
    uint64_t base, size; /* in the arena */
    int gpu;
    bool own;            /* one allocation's alone: released when it is freed */
    bool taken_back;     /* a failed worker's, taken back by op_resume_memory: where its allocations may be */
    unsigned holds;      /* left its client's list: memory in it others hold open (srv_chunk_hold) */
    struct extent *free; /* sorted by offset, coalesced */
    size_t nfree, capfree;
    struct chunk *next;
};

struct pending { /* a freed block waiting for its event; a whole chunk of its own when off is UINT64_MAX */
    struct chunk *ch;
    uint64_t off, size;
    CUevent ev;
    struct pending *next;
};

struct remote_free { /* srv_chunk_free_later: freed by the last opener, once `done` has completed */
    uint64_t ptr;
    CUevent done;
    struct remote_free *next;
};

struct srv_chunks {
    struct chunk *chunks;
    struct pending *pending;
    struct remote_free *_Atomic remote; /* pushed by other clients' workers, taken all at once */
    uint64_t next_size[CUMUX_MAX_DEVICES];
    struct cumux_ranges live; /* its allocations: base, size (as taken from the chunk), extra: the chunk */
};

static int contain_on = -1;
static uint64_t arena_base, arena_size, arena_next;
static struct extent *arena_free; /* released stretches of the arena, for reuse */
static size_t narena_free, caparena_free;
static pthread_mutex_t arena_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t granularity = 2ull << 20;

bool srv_chunks_on(void)
{
    return contain_on > 0;
}

void srv_chunks_arena(uint64_t *base, uint64_t *size)
{
    *base = contain_on > 0 ? arena_base : 0;
    *size = contain_on > 0 ? arena_size : 0;
}

bool srv_chunks_in_arena(uint64_t p)
{
    return contain_on > 0 && p >= arena_base && p - arena_base < arena_size;
}

void srv_chunks_start(void)
{
    const char *e = getenv("CUMUX_CONTAIN");
    contain_on = 0;
    if ((e && !strcmp(e, "0")) || srv_gpu_served < 0)
        return; /* on unless CUMUX_CONTAIN=0 */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = srv_gpus[srv_gpu_served].dev},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    size_t g = 0;
    uint64_t total = 0;
    cuCtxSetCurrent(srv_gpus[srv_gpu_served].ctx);
    total = srv_gpus[srv_gpu_served].info.total_mem; /* the GPU this worker serves: the others' arenas are their workers' */
    CUresult r = cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r == CUDA_SUCCESS && g) {
        granularity = g;
        /* Twice the devices' memory: room for chunks released and made again elsewhere in it. */
        arena_size = (total * 2 + g - 1) / g * g;
        /* The first worker's address, which the supervisor passes on (srv_arena_hint), so that a worker
         * taking over can map the failed one's chunks where they were. */
        CUdeviceptr base = 0;
        if (srv_arena_hint_size)
            arena_size = srv_arena_hint_size;
        r = cuMemAddressReserve(&base, arena_size, 0, srv_arena_hint, 0);
        arena_base = base;
        if (r == CUDA_SUCCESS && srv_arena_hint_size && base != srv_arena_hint)
            cumux_logf("the arena is at 0x%llx, not at 0x%llx as in the first worker: clients' memory cannot be taken "
                       "over from it", (unsigned long long)base, (unsigned long long)srv_arena_hint);
    }
    if (r != CUDA_SUCCESS) {
        cumux_logf("CUMUX_CONTAIN: no arena of addresses for clients' memory (%d): memory stays in pools", (int)r);
        return;
    }
    contain_on = 1;
    cumux_logf("clients' device memory in VMM chunks of an arena at 0x%llx (%llu GiB; CUMUX_CONTAIN)",
               (unsigned long long)arena_base, (unsigned long long)(arena_size >> 30));
}

/* ---- extents: sorted, coalesced lists of free stretches ---- */

static int extents_grow(struct extent **v, size_t *cap)
{
    size_t nc = *cap ? *cap * 2 : 8;
    struct extent *nv = realloc(*v, nc * sizeof *nv);
    if (!nv)
        return -1;
    *v = nv;
    *cap = nc;
    return 0;
}

static int extents_put(struct extent **v, size_t *n, size_t *cap, uint64_t off, uint64_t size)
{
    size_t i = 0;
    while (i < *n && (*v)[i].off < off)
        i++;
    bool join_prev = i > 0 && (*v)[i - 1].off + (*v)[i - 1].size == off;
    bool join_next = i < *n && off + size == (*v)[i].off;
    if (join_prev && join_next) {
        (*v)[i - 1].size += size + (*v)[i].size;
        memmove(&(*v)[i], &(*v)[i + 1], (*n - i - 1) * sizeof **v);
        (*n)--;
    } else if (join_prev) {
        (*v)[i - 1].size += size;
    } else if (join_next) {
        (*v)[i].off = off;
        (*v)[i].size += size;
    } else {
        if (*n == *cap && extents_grow(v, cap) < 0)
            return -1;
        memmove(&(*v)[i + 1], &(*v)[i], (*n - i) * sizeof **v);
        (*v)[i] = (struct extent){off, size};
        (*n)++;
    }
    return 0;
}

/* Takes [off, off + size) out of extent i, which holds it whole: what is left before and after stays free.
 * -1 when the list has no room for the split. */
static int extent_split(struct extent **v, size_t *n, size_t *cap, size_t i, uint64_t off, uint64_t size)
{
    struct extent x = (*v)[i];
    uint64_t lead = off - x.off, tail = x.size - lead - size;
    if (lead && tail) {
        if (*n == *cap && extents_grow(v, cap) < 0)
            return -1;
        memmove(&(*v)[i + 2], &(*v)[i + 1], (*n - i - 1) * sizeof **v);
        (*v)[i] = (struct extent){x.off, lead};
        (*v)[i + 1] = (struct extent){off + size, tail};
        (*n)++;
    } else if (lead) {
        (*v)[i].size = lead;
    } else if (tail) {
        (*v)[i] = (struct extent){off + size, tail};
    } else {
        memmove(&(*v)[i], &(*v)[i + 1], (*n - i - 1) * sizeof **v);
        (*n)--;
    }
    return 0;
}

/* First fit: size bytes at an offset whose address (base + offset) is a multiple of align; UINT64_MAX when
 * no extent has room. */
static uint64_t extents_take(struct extent **v, size_t *n, size_t *cap, uint64_t base, uint64_t size, uint64_t align)
{
    for (size_t i = 0; i < *n; i++) {
        struct extent e = (*v)[i];
        uint64_t start = (base + e.off + align - 1) / align * align - base;
        uint64_t lead = start - e.off;
        if (lead > e.size || e.size - lead < size)
            continue;
        return extent_split(v, n, cap, i, start, size) == 0 ? start : UINT64_MAX;
    }
    return UINT64_MAX;
}

/* ---- the arena ---- */

static uint64_t arena_take(uint64_t size)
{
    pthread_mutex_lock(&arena_mu);
    uint64_t off = extents_take(&arena_free, &narena_free, &caparena_free, 0, size, granularity);
    if (off == UINT64_MAX && size <= arena_size && arena_next <= arena_size - size) {
        off = arena_next;
        arena_next += size;
    }
    pthread_mutex_unlock(&arena_mu);
    return off == UINT64_MAX ? 0 : arena_base + off;
}

static void arena_give(uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&arena_mu);
    if (extents_put(&arena_free, &narena_free, &caparena_free, base - arena_base, size) < 0)
        cumux_logf("arena: %llu bytes at 0x%llx lost to reuse (no memory)", (unsigned long long)size,
                   (unsigned long long)base);
    pthread_mutex_unlock(&arena_mu);
}

/* ---- chunks ---- */

static struct srv_chunks *chunks_of(struct srv_client *c)
{
    if (!c->chunks)
        c->chunks = calloc(1, sizeof *c->chunks);
    return c->chunks;
}

static CUresult chunk_new(struct srv_client *c, int gpu, uint64_t size, bool own, struct chunk **out)
{
    size = (size + granularity - 1) / granularity * granularity;
    struct chunk *ch = calloc(1, sizeof *ch);
    uint64_t base = ch ? arena_take(size) : 0;
    if (!base) {
        free(ch);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = srv_gpus[gpu].dev},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle h = 0;
    use_gpu(c, gpu);
    int fd = -1;
    CUresult r = cuMemCreate(&h, size, &prop, 0);
    if (r == CUDA_SUCCESS) {
        r = cuMemMap(base, size, 0, h, 0);
        if (r == CUDA_SUCCESS)
            r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        cuMemRelease(h); /* the mapping holds it, and the descriptor the supervisor keeps */
        if (r == CUDA_SUCCESS && (r = cuMemSetAccess(base, size, &rw, 1)) != CUDA_SUCCESS)
            cuMemUnmap(base, size);
    }
    if (r == CUDA_SUCCESS && !own && extents_put(&ch->free, &ch->nfree, &ch->capfree, 0, size) < 0) {
        cuMemUnmap(base, size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        arena_give(base, size);
        free(ch);
        return r;
    }
    if (fd >= 0) { /* the supervisor holds the memory beyond this worker's life */
        struct srv_kept_chunk k = {.client = c->id, .gpu = gpu, .base = base, .size = size, .token = c->fault.resume_token,
                                   .pid = (int32_t)c->pid, .uid = (uint32_t)c->uid, .fd = fd};
        srv_supervisor_keep(&k);
        close(fd);
    }
    ch->base = base;
    ch->size = size;
    ch->gpu = gpu;
    ch->own = own;
    ch->next = c->chunks->chunks;
    c->chunks->chunks = ch;
    *out = ch;
    return CUDA_SUCCESS;
}

static void chunk_unmap(struct srv_client *c, struct chunk *ch)
{
    struct chunk **p = &c->chunks->chunks;
    while (*p && *p != ch)
        p = &(*p)->next;
    if (*p)
        *p = ch->next;
    use_gpu(c, ch->gpu);
    cuMemUnmap(ch->base, ch->size);
    srv_supervisor_drop(ch->base);
    arena_give(ch->base, ch->size);
    free(ch->free);
    free(ch);
}

static int live_add(struct srv_chunks *k, uint64_t ptr, uint64_t size, struct chunk *ch);

/* Frees the last openers made (srv_chunk_free_later) become the worker's own pending frees. */
static void take_remote(struct srv_client *c)
{
    struct srv_chunks *k = c->chunks;
    struct remote_free *f = atomic_exchange(&k->remote, NULL);
    while (f) {
        struct remote_free *next = f->next;
        const struct cumux_range *l = cumux_ranges_find(&k->live, f->ptr);
        struct pending *b = l && l->base == f->ptr ? calloc(1, sizeof *b) : NULL;
        if (b) {
            b->ch = (struct chunk *)(uintptr_t)l->extra;
            b->off = b->ch->own ? UINT64_MAX : f->ptr - b->ch->base;
            b->size = l->size;
            b->ev = f->done;
            cumux_ranges_remove(&k->live, f->ptr, NULL);
            b->next = k->pending;
            k->pending = b;
        } else {
            cuEventDestroy(f->done); /* not its allocation (cannot be: ipc.c checked), or no memory: kept */
        }
        free(f);
        f = next;
    }
}

void srv_chunk_free_later(struct srv_client *owner, uint64_t ptr, CUevent done)
{
    struct srv_chunks *k = owner->chunks;
    struct remote_free *f = k ? malloc(sizeof *f) : NULL;
    if (!f) {
        cuEventDestroy(done); /* it stays allocated until the owner's end */
        return;
    }
    *f = (struct remote_free){.ptr = ptr, .done = done, .next = atomic_load(&k->remote)};
    while (!atomic_compare_exchange_weak(&k->remote, &f->next, f)) {
    }
}

int srv_chunk_extent(struct srv_client *c, uint64_t ptr, uint64_t *base, uint64_t *size)
{
    struct srv_chunks *k = c->chunks;
    const struct cumux_range *l = k ? cumux_ranges_find(&k->live, ptr) : NULL;
    if (!l || l->base != ptr)
        return -1;
    const struct chunk *ch = (const struct chunk *)(uintptr_t)l->extra;
    *base = ch->base;
    *size = ch->size;
    return 0;
}

struct chunk *srv_chunk_hold(struct srv_client *c, uint64_t ptr)
{
    struct srv_chunks *k = c->chunks;
    const struct cumux_range *l = k ? cumux_ranges_find(&k->live, ptr) : NULL;
    if (!l || l->base != ptr)
        return NULL;
    struct chunk *ch = (struct chunk *)(uintptr_t)l->extra, **p = &k->chunks;
    while (*p && *p != ch)
        p = &(*p)->next;
    if (*p)
        *p = ch->next; /* no longer the client's: its end leaves it mapped */
    ch->next = NULL;
    ch->holds++;
    return ch;
}

void srv_chunk_unhold(struct srv_client *c, struct chunk *ch)
{
    if (!ch || --ch->holds)
        return;
    if (c)
        use_gpu(c, ch->gpu);
    else
        cuCtxSetCurrent(srv_gpus[ch->gpu].ctx); /* the main thread (ipc.c's lease end) */
    cuMemUnmap(ch->base, ch->size); /* the supervisor dropped its descriptor at the owner's end */
    arena_give(ch->base, ch->size);
    free(ch->free);
    free(ch);
}

/* Freed blocks whose event has completed go back to their chunks (chunks of their own are unmapped). */
static void reclaim(struct srv_client *c, bool wait)
{
    if (atomic_load_explicit(&c->chunks->remote, memory_order_relaxed))
        take_remote(c);
    struct pending **p = &c->chunks->pending;
    while (*p) {
        struct pending *b = *p;
        if (wait)
            cuEventSynchronize(b->ev);
        else if (cuEventQuery(b->ev) == CUDA_ERROR_NOT_READY) {
            p = &b->next;
            continue;
        }
        *p = b->next;
        cuEventDestroy(b->ev);
        if (b->off == UINT64_MAX)
            chunk_unmap(c, b->ch);
        else if (extents_put(&b->ch->free, &b->ch->nfree, &b->ch->capfree, b->off, b->size) < 0)
            cumux_logf("client %u: %llu bytes of a chunk lost to reuse (no memory)", c->id,
                       (unsigned long long)b->size);
        free(b);
    }
}

static int live_add(struct srv_chunks *k, uint64_t ptr, uint64_t size, struct chunk *ch)
{
    return cumux_ranges_add(&k->live, ptr, size, 0, (uint64_t)(uintptr_t)ch);
}

CUresult srv_chunk_alloc(struct srv_client *c, int gpu, uint64_t size, uint64_t *out)
{
    struct srv_chunks *k = chunks_of(c);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (size == 0 || size > (1ull << 48))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t need = (size + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
    struct chunk *ch = NULL;
    uint64_t off = UINT64_MAX;
    if (k->pending || atomic_load_explicit(&k->remote, memory_order_relaxed))
        reclaim(c, false);
    if (need >= CHUNK_OWN) {
        CHECK(chunk_new(c, gpu, need, true, &ch));
        off = 0;
    } else {
        for (ch = k->chunks; ch; ch = ch->next) {
            if (ch->own || ch->gpu != gpu)
                continue;
            off = extents_take(&ch->free, &ch->nfree, &ch->capfree, ch->base, need, ALLOC_ALIGN);
            if (off != UINT64_MAX)
                break;
        }
        if (!ch) {
            uint64_t s = k->next_size[gpu] ? k->next_size[gpu] : CHUNK_FIRST;
            k->next_size[gpu] = s * 2 < CHUNK_MAX ? s * 2 : CHUNK_MAX;
            CHECK(chunk_new(c, gpu, s, false, &ch));
            off = extents_take(&ch->free, &ch->nfree, &ch->capfree, ch->base, need, ALLOC_ALIGN);
            if (off == UINT64_MAX)
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (live_add(k, ch->base + off, need, ch) < 0) {
        if (ch->own)
            chunk_unmap(c, ch);
        else
            extents_put(&ch->free, &ch->nfree, &ch->capfree, off, need);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = ch->base + off;
    return CUDA_SUCCESS;
}

CUresult srv_chunk_free(struct srv_client *c, uint64_t ptr, CUstream after)
{
    struct srv_chunks *k = c->chunks;
    const struct cumux_range *l = k ? cumux_ranges_find(&k->live, ptr) : NULL;
    if (!l || l->base != ptr)
        return CUDA_ERROR_INVALID_VALUE;
    struct chunk *ch = (struct chunk *)(uintptr_t)l->extra;
    uint64_t size = l->size;
    struct pending *b = calloc(1, sizeof *b);
    if (!b)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, ch->gpu);
    CUresult r = after ? CUDA_SUCCESS : after_client_work(c, ch->gpu, &after);
    if (r == CUDA_SUCCESS)
        r = cuEventCreate(&b->ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS && (r = cuEventRecord(b->ev, after)) != CUDA_SUCCESS)
        cuEventDestroy(b->ev);
    if (r != CUDA_SUCCESS) {
        free(b);
        return r;
    }
    cumux_ranges_remove(&k->live, ptr, NULL);
    b->ch = ch;
    b->off = ch->own ? UINT64_MAX : ptr - ch->base;
    b->size = size;
    b->next = k->pending;
    k->pending = b;
    return CUDA_SUCCESS;
}

void srv_chunks_trim(struct srv_client *c, int gpu)
{
    if (!c->chunks)
        return;
    reclaim(c, false);
    /* Shared chunks with nothing allocated from them: one free extent of their whole size. */
    for (struct chunk *ch = c->chunks->chunks, *next; ch; ch = next) {
        next = ch->next;
        if (!ch->own && ch->gpu == gpu && ch->nfree == 1 && ch->free[0].off == 0 && ch->free[0].size == ch->size)
            chunk_unmap(c, ch);
    }
}

void srv_chunks_release_all(struct srv_client *c)
{
    struct srv_chunks *k = c->chunks;
    if (!k)
        return;
    reclaim(c, true); /* what it had left is uncharged with its dev_ranges (dispatch.c) */
    size_t n = 0;
    uint64_t bytes = 0;
    for (struct chunk *ch = k->chunks; ch; ch = ch->next, n++)
        bytes += ch->size;
    cumux_debugf("client %u: its device memory was in VMM chunks: %zu left at its end (%llu MiB), %zu allocations",
                 c->id, n, (unsigned long long)(bytes >> 20), k->live.n);
    /* The client's work has been waited for by its cleanup: nothing runs on its chunks now. */
    while (k->chunks)
        chunk_unmap(c, k->chunks);
    srv_supervisor_drop_client(c->id);
    cumux_ranges_free(&k->live);
    free(k);
    c->chunks = NULL;
}

/* ---- taking over a failed worker's chunks ---- */

struct orphan { /* a failed worker's chunk, mapped where it was, until its client takes it back */
    struct srv_kept_chunk k; /* fd closed */
    uint64_t deadline_ns;
};
static struct orphan *orphans;
static size_t norphans;
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t resume_wait_ns(void)
{
    const char *e = getenv("CUMUX_RESUME_WAIT_MS");
    char *end;
    unsigned long v = e && *e ? strtoul(e, &end, 10) : 10000;
    if (e && *e && (*end || v > 3600000))
        v = 10000;
    return (uint64_t)v * 1000000ull;
}

/* Whether a kept chunk may be mapped here: only where the failed worker had it, inside this arena, which
 * is at the same address. */
static bool adoptable(const struct srv_kept_chunk *k)
{
    return contain_on > 0 && srv_gpu_serves(k->gpu) && k->size && k->token && k->base >= arena_base &&
           k->size <= arena_size && k->base - arena_base <= arena_size - k->size;
}

/* Imports a kept chunk's descriptor and maps it where it was, read and write for its GPU. */
static CUresult map_kept(const struct srv_kept_chunk *k)
{
    CUmemGenericAllocationHandle h = 0;
    cuCtxSetCurrent(srv_gpus[k->gpu].ctx);
    CUresult r = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)k->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuMemMap(k->base, k->size, 0, h, 0);
    cuMemRelease(h);
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = srv_gpus[k->gpu].dev},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS && (r = cuMemSetAccess(k->base, k->size, &rw, 1)) != CUDA_SUCCESS)
        cuMemUnmap(k->base, k->size);
    return r;
}

/* ---- chunks mapped ahead, while this worker is the standby (the supervisor's mirror calls, from the
 * main thread before the takeover; srv_chunks_adopt uses them, after which there are none). ---- */
struct mirrored {
    uint64_t id, base, size;
    int gpu;
};
static struct mirrored *mirrors;
static size_t nmirrors, capmirrors;

void srv_chunks_mirror_add(struct srv_kept_chunk *k)
{
    if (nmirrors == capmirrors) {
        size_t nc = capmirrors ? capmirrors * 2 : 64;
        struct mirrored *nv = realloc(mirrors, nc * sizeof *nv);
        if (!nv) { /* mapped at the takeover instead */
            close(k->fd);
            return;
        }
        mirrors = nv;
        capmirrors = nc;
    }
    /* Not over another (one whose going was not told yet would be: mapped at the takeover then). */
    bool clear = adoptable(k);
    for (size_t i = 0; i < nmirrors && clear; i++)
        clear = k->base + k->size <= mirrors[i].base || mirrors[i].base + mirrors[i].size <= k->base;
    if (clear && map_kept(k) == CUDA_SUCCESS)
        mirrors[nmirrors++] = (struct mirrored){.id = k->id, .base = k->base, .size = k->size, .gpu = k->gpu};
    close(k->fd);
}

void srv_chunks_mirror_remove(uint64_t id)
{
    for (size_t i = 0; i < nmirrors; i++) {
        if (mirrors[i].id != id)
            continue;
        cuCtxSetCurrent(srv_gpus[mirrors[i].gpu].ctx);
        cuMemUnmap(mirrors[i].base, mirrors[i].size);
        mirrors[i] = mirrors[--nmirrors];
        return;
    }
}

/* Whether kept chunk k was mapped ahead, where it is now (then it is no mirror any more). */
static bool mirrored_take(const struct srv_kept_chunk *k)
{
    for (size_t i = 0; i < nmirrors; i++) {
        if (mirrors[i].id == k->id && mirrors[i].base == k->base && mirrors[i].size == k->size &&
            mirrors[i].gpu == k->gpu) {
            mirrors[i] = mirrors[--nmirrors];
            return true;
        }
    }
    return false;
}

struct adoption {
    struct srv_kept_chunk *k;
    size_t n;
    bool *ahead; /* k[i] was mapped ahead */
};
/* The failed worker's chunks are being mapped (under orphans_mu): a client coming back waits for them in
 * op_resume_memory, while new clients are served meanwhile. Mapping costs milliseconds per chunk on a
 * GPU, and a tenant may have hundreds. */
static bool adopting;
static pthread_cond_t adopted = PTHREAD_COND_INITIALIZER;

static void adopt_all(struct srv_kept_chunk *k, size_t n, bool *ahead)
{
    size_t mapped = 0, clients = 0, were_ahead = 0;
    uint64_t bytes = 0, t0 = mono_ns();
    struct orphan *o = calloc(n, sizeof *o);
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = k[j].token == k[i].token;
        clients += !seen;
        CUresult r = CUDA_ERROR_INVALID_VALUE;
        if (ahead && ahead[i]) {
            r = CUDA_SUCCESS; /* mapped while this worker was the standby */
            were_ahead++;
            if (!o) {
                cuCtxSetCurrent(srv_gpus[k[i].gpu].ctx);
                cuMemUnmap(k[i].base, k[i].size);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else if (o && adoptable(&k[i])) {
            r = map_kept(&k[i]);
        }
        close(k[i].fd);
        k[i].fd = -1;
        if (r != CUDA_SUCCESS) {
            if (adoptable(&k[i]))
                arena_give(k[i].base, k[i].size); /* its stretch, held for it in srv_chunks_adopt */
            srv_supervisor_drop(k[i].base);
            continue;
        }
        o[mapped++] = (struct orphan){.k = k[i]};
        bytes += k[i].size;
    }
    /* Their clients have CUMUX_RESUME_WAIT_MS from now to take them back. */
    uint64_t deadline = mono_ns() + resume_wait_ns();
    for (size_t i = 0; i < mapped; i++)
        o[i].deadline_ns = deadline;
    pthread_mutex_lock(&orphans_mu);
    if (o && mapped) {
        struct orphan *all = realloc(orphans, (norphans + mapped) * sizeof *all);
        if (all) {
            memcpy(all + norphans, o, mapped * sizeof *all);
            orphans = all;
            norphans += mapped;
        } else { /* nowhere to keep them: let them go now */
            for (size_t i = 0; i < mapped; i++) {
                cuCtxSetCurrent(srv_gpus[o[i].k.gpu].ctx);
                cuMemUnmap(o[i].k.base, o[i].k.size);
                arena_give(o[i].k.base, o[i].k.size);
                srv_supervisor_drop(o[i].k.base);
            }
        }
    }
    free(o);
    adopting = false;
    pthread_cond_broadcast(&adopted);
    pthread_mutex_unlock(&orphans_mu);
    cumux_logf("took over %zu of %zu chunk(s) of %zu client(s) of the failed worker (%llu MiB) at their addresses "
               "(%zu mapped ahead) in %.1f ms; kept %.1f s for their clients to come back",
               mapped, n, clients, (unsigned long long)(bytes >> 20), were_ahead, (mono_ns() - t0) / 1e6,
               resume_wait_ns() / 1e9);
    free(k);
    free(ahead);
}

static void *adopt_thread(void *arg)
{
    struct adoption a = *(struct adoption *)arg;
    free(arg);
    adopt_all(a.k, a.n, a.ahead);
    return NULL;
}

void srv_chunks_adopt(struct srv_kept_chunk *k, size_t n)
{
    /* Which were mapped ahead; the other mappings ahead are of chunks gone meanwhile: unmapped before any
     * client is served, since new chunks may go there. */
    bool *ahead = n ? calloc(n, sizeof *ahead) : NULL;
    for (size_t i = 0; ahead && i < n; i++)
        ahead[i] = mirrored_take(&k[i]);
    for (size_t i = 0; i < nmirrors; i++) {
        cuCtxSetCurrent(srv_gpus[mirrors[i].gpu].ctx);
        cuMemUnmap(mirrors[i].base, mirrors[i].size);
    }
    free(mirrors);
    mirrors = NULL;
    nmirrors = capmirrors = 0;
    if (!n) {
        free(k);
        return;
    }
    /* Their stretches of the arena are taken before any client is served: this worker has made no chunk
     * yet, and makes its own above them. */
    pthread_mutex_lock(&arena_mu);
    for (size_t i = 0; i < n; i++)
        if (adoptable(&k[i]) && k[i].base - arena_base + k[i].size > arena_next)
            arena_next = k[i].base - arena_base + k[i].size;
    pthread_mutex_unlock(&arena_mu);
    pthread_mutex_lock(&orphans_mu);
    adopting = true;
    pthread_mutex_unlock(&orphans_mu);
    struct adoption *a = malloc(sizeof *a);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (a)
        *a = (struct adoption){k, n, ahead};
    if (!a || pthread_create(&t, &attr, adopt_thread, a) != 0) {
        free(a);
        adopt_all(k, n, ahead); /* here, then */
    }
    pthread_attr_destroy(&attr);
}

void srv_chunks_expire(void)
{
    if (!norphans) /* read without the lock: a miss is seen at the next call */
        return;
    uint64_t now = mono_ns();
    pthread_mutex_lock(&orphans_mu);
    size_t gone = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < norphans;) {
        if (orphans[i].deadline_ns > now) {
            i++;
            continue;
        }
        cuCtxSetCurrent(srv_gpus[orphans[i].k.gpu].ctx);
        cuMemUnmap(orphans[i].k.base, orphans[i].k.size);
        srv_supervisor_drop(orphans[i].k.base);
        arena_give(orphans[i].k.base, orphans[i].k.size);
        bytes += orphans[i].k.size;
        gone++;
        orphans[i] = orphans[--norphans];
    }
    pthread_mutex_unlock(&orphans_mu);
    if (gone)
        cumux_logf("%zu chunk(s) of the failed worker's clients (%llu MiB) not taken back: let go", gone,
                   (unsigned long long)(bytes >> 20));
}

/* Takes [off, off + size) out of a free extent that holds it whole; -1 when none does. */
static int extents_carve(struct extent **v, size_t *n, size_t *cap, uint64_t off, uint64_t size)
{
    for (size_t e = 0; e < *n; e++) {
        struct extent x = (*v)[e];
        if (off >= x.off && size <= x.size && off - x.off <= x.size - size)
            return extent_split(v, n, cap, e, off, size);
    }
    return -1;
}

/* A client back after its worker failed (hello RESUME): the first time, its chunks (those its token, pid
 * and uid made) become its own, all free; then each range it says it holds is an allocation again if it
 * lies wholly in what is still free of one of them. Nothing the client says is trusted: a range elsewhere
 * is only not taken. It may come in several messages. */
CUresult op_resume_memory(struct srv_client *c, const struct cumux_resume_memory *m, const uint8_t *payload,
                          uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    if (!c->fault.resume_claim || (uint64_t)m->count * sizeof(struct cumux_resume_range) != payload_len)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_chunks *k = chunks_of(c);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t claimed = 0;
    pthread_mutex_lock(&orphans_mu);
    while (adopting) /* its chunks may not be mapped yet */
        pthread_cond_wait(&adopted, &orphans_mu);
    for (size_t i = 0; i < norphans;) {
        struct orphan *o = &orphans[i];
        if (o->k.token != c->fault.resume_claim || o->k.pid != (int32_t)c->pid || o->k.uid != (uint32_t)c->uid) {
            i++;
            continue;
        }
        struct chunk *ch = calloc(1, sizeof *ch);
        if (!ch || extents_put(&ch->free, &ch->nfree, &ch->capfree, 0, o->k.size) < 0) {
            free(ch);
            break; /* stays an orphan: let go at its deadline */
        }
        ch->base = o->k.base;
        ch->size = o->k.size;
        ch->gpu = o->k.gpu;
        ch->taken_back = true;
        ch->next = k->chunks;
        k->chunks = ch;
        orphans[i] = orphans[--norphans];
        claimed++;
    }
    pthread_mutex_unlock(&orphans_mu);
    uint64_t restored = 0;
    const struct cumux_resume_range *rr = (const struct cumux_resume_range *)payload;
    for (uint32_t i = 0; i < m->count; i++) {
        struct cumux_resume_range r;
        memcpy(&r, &rr[i], sizeof r); /* the payload may be unaligned */
        struct chunk *ch = k->chunks;
        while (ch && !(ch->taken_back && ch->gpu == r.gpu && r.size && r.ptr >= ch->base && r.size <= ch->size &&
                       r.ptr - ch->base <= ch->size - r.size))
            ch = ch->next;
        if (!ch || srv_mem_charge(c, r.size) != CUDA_SUCCESS)
            continue;
        if (extents_carve(&ch->free, &ch->nfree, &ch->capfree, r.ptr - ch->base, r.size) < 0) {
            srv_mem_uncharge(c, r.size); /* not free: it overlaps one taken back already */
            continue;
        }
        if (cumux_ranges_add(&c->memory.dev_ranges, r.ptr, r.size, RANGE_ALLOC, (uint64_t)ch->gpu) < 0 ||
            live_add(k, r.ptr, r.size, ch) < 0) {
            cumux_ranges_remove(&c->memory.dev_ranges, r.ptr, NULL);
            extents_put(&ch->free, &ch->nfree, &ch->capfree, r.ptr - ch->base, r.size);
            srv_mem_uncharge(c, r.size);
            continue;
        }
        restored++;
    }
    cumux_logf("client %u (pid %d): back after its worker failed: %zu chunk(s) taken back, %llu of %u allocation(s) "
               "intact", c->id, (int)c->pid, claimed, (unsigned long long)restored, m->count);
    return reply_u64(out, out_len, restored);
}
