/* Memory: device allocations, pinned host memory shared with the server, and the address ranges by
 * which the shim classifies every pointer itself (unified addressing): device memory it allocated,
 * pinned memory it got from the server, or ordinary pageable memory. Copies and memsets: copy.c. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/map.h"
#include "common/channel.h"
#include "common/log.h"
#include "shim/client.h"

/* ---- the shim's address ranges ---- */

/* Device addresses are the server's, and unified addressing takes every pointer as either device or host
 * memory by its number alone; so no memory of this process may lie where the server's device memory does.
 * Each device range the shim learns is held here, without access and without memory (PROT_NONE,
 * MAP_NORESERVE), so that nothing the program maps afterwards lands there. The holds are kept when the
 * memory is freed (the driver reuses its addresses), and given up only where the server's host memory is
 * to be mapped at the same address (release_va). A range this process already uses cannot be held: that
 * is said once, since pointers there would be taken for device memory. Caller holds ranges_lock. */
static void hold_va(uint64_t base, uint64_t size)
{
    static bool said;
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), start = base & ~(pg - 1), end;
    if (!cumux_add_u64(base, size, &end) || !cumux_add_u64(end, pg - 1, &end))
        return;
    end &= ~(pg - 1);
    for (uint64_t cur = start; cur < end;) {
        const struct cumux_range *r = cumux_ranges_find(&shim.va_reserved, cur);
        if (r) {
            cur = r->base + r->size;
            continue;
        }
        uint64_t stop = end;
        for (size_t i = 0; i < shim.va_reserved.n; i++)
            if (shim.va_reserved.v[i].base > cur) { /* sorted: the first past cur */
                if (shim.va_reserved.v[i].base < stop)
                    stop = shim.va_reserved.v[i].base;
                break;
            }
        void *m = mmap((void *)(uintptr_t)cur, stop - cur, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED || (uint64_t)(uintptr_t)m != cur) {
            if (m != MAP_FAILED)
                munmap(m, stop - cur); /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
            if (!said) {
                said = true;
                cumux_logf("device memory at %#llx..%#llx: this process has memory at the same addresses: "
                           "pointers there are taken for device memory",
                           (unsigned long long)cur, (unsigned long long)stop);
            }
            cur = stop;
            continue;
        }
        cumux_ranges_add(&shim.va_reserved, cur, stop - cur, 0, 0);
        cur = stop;
    }
}

/* Gives up the holds on [base, base+size): the server's host memory is to be mapped there. */
static void release_va(uint64_t base, uint64_t size)
{
    uint64_t end;
    if (!cumux_add_u64(base, size, &end))
        return;
    pthread_rwlock_wrlock(&shim.ranges_lock);
    for (size_t i = 0; i < shim.va_reserved.n;) {
        struct cumux_range r = shim.va_reserved.v[i];
        if (r.base >= end || r.base + r.size <= base) {
            i++;
            continue;
        }
        /* Cut the overlap out; what is left on either side stays held. */
        uint64_t lo = r.base > base ? r.base : base, hi = r.base + r.size < end ? r.base + r.size : end;
        munmap((void *)(uintptr_t)lo, hi - lo);
        cumux_ranges_remove(&shim.va_reserved, r.base, NULL);
        if (lo > r.base)
            cumux_ranges_add(&shim.va_reserved, r.base, lo - r.base, 0, 0);
        if (hi < r.base + r.size)
            cumux_ranges_add(&shim.va_reserved, hi, r.base + r.size - hi, 0, 0);
        i = 0; /* the table changed: start over (few entries overlap a host mapping) */
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
}

void shim_hold_device_va(uint64_t base, uint64_t size)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    hold_va(base, size);
    pthread_rwlock_unlock(&shim.ranges_lock);
}

void shim_add_device_range(uint64_t base, uint64_t size, struct CUctx_st *ctx, uint64_t flags)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    if (!cumux_ranges_find(&shim.dev_ranges, base))
        cumux_ranges_add(&shim.dev_ranges, base, size, ((uint64_t)ctx->device + 1) | flags, (uint64_t)(uintptr_t)ctx);
    hold_va(base, size);
    pthread_rwlock_unlock(&shim.ranges_lock);
}

bool shim_forget_device_range(uint64_t p)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    const struct cumux_range *rg = cumux_ranges_find(&shim.dev_ranges, p);
    bool ok = rg && rg->base == p && !(rg->tag & SHIM_RANGE_GLOBAL);
    if (ok && !(rg->tag & SHIM_RANGE_GRAPH))
        cumux_ranges_remove(&shim.dev_ranges, p, NULL);
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

struct CUctx_st *shim_ptr_ctx(uint64_t p)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.dev_ranges, p);
    struct CUctx_st *c = r ? (struct CUctx_st *)(uintptr_t)r->extra : NULL;
    pthread_rwlock_unlock(&shim.ranges_lock);
    return c;
}

int shim_ptr_device(uint64_t p)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.dev_ranges, p);
    int dev = r ? (int)(r->tag & 0xffffffffu) - 1 : -1;
    pthread_rwlock_unlock(&shim.ranges_lock);
    return dev;
}

struct shim_chan *shim_chan_of_ptr(uint64_t p)
{
    if (!atomic_load_explicit(&shim_extra_count, memory_order_relaxed))
        return &shim.main;
    int dev = shim_ptr_device(p);
    return dev >= 0 && dev < shim.device_count ? shim_chan_of_gpu(shim.server_gpu[dev]) : &shim.main; /* none known: the server refuses it */
}

bool shim_is_device_ptr(uint64_t p, uint64_t len)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    bool ok = cumux_ranges_covers(&shim.dev_ranges, p, len) != NULL;
    /* VMM mappings made accessible one by one but back to back are one span (the server agrees). */
    const struct cumux_range *r = ok ? NULL : cumux_ranges_find(&shim.dev_ranges, p);
    uint64_t end;
    if (r && (r->tag & SHIM_RANGE_VMM) && cumux_add_u64(p, len, &end)) {
        while (r && end - r->base > r->size) {
            uint64_t next = r->base + r->size;
            r = cumux_ranges_find(&shim.dev_ranges, next);
            if (r && (r->base != next || !(r->tag & SHIM_RANGE_VMM)))
                r = NULL;
        }
        ok = r != NULL;
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

/* The server's address of [p, p+len) when it lies in pinned memory from the server; 0 otherwise. */
uint64_t shim_pinned_server_addr(const void *p, uint64_t len)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_covers(&shim.pinned_ranges, (uint64_t)(uintptr_t)p, len);
    uint64_t a = r ? r->extra + ((uint64_t)(uintptr_t)p - r->base) : 0;
    pthread_rwlock_unlock(&shim.ranges_lock);
    return a;
}

/* The program's address of the server's address a of pinned memory; 0 when it is none of the program's. */
uint64_t shim_pinned_client_addr(uint64_t a)
{
    uint64_t p = 0;
    pthread_rwlock_rdlock(&shim.ranges_lock);
    for (size_t i = 0; i < shim.pinned_ranges.n && !p; i++) {
        const struct cumux_range *r = &shim.pinned_ranges.v[i];
        if (a >= r->extra && a - r->extra < r->size)
            p = r->base + (a - r->extra);
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
    return p;
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
    shim_add_device_range(ptr, size, c, 0);
    shim_peer_allocated(ptr, shim.server_gpu[c->device]);
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

static CUresult managed_free(uint64_t p);

CUresult cuMemFree(CUdeviceptr p)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (p == 0)
        return CUDA_SUCCESS;
    struct shim_chan *ch = shim_chan_of_ptr(p); /* its GPU's worker, whichever context is current */
    shim_peer_forget(p);
    if (!shim_forget_device_range(p))
        return managed_free(p);
    struct cumux_mem_free m = {.ptr = p};
    return shim_call_on(ch, CUMUX_OP_MEM_FREE, &m, sizeof m, NULL, 0, NULL);
}

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct cumux_mem_info rep;
    r = shim_op_mem_info(c->handle, &rep);
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
#define PINNED_MANAGED (1ull << 62)    /* range tag: managed memory (cuMemAllocManaged) */

/* Hand the server a memfd of host memory mapped here at `mine`; it maps it (at the same address when it
 * can) and registers it with CUDA. */
static CUresult share_with_server(int fd, void *mine, size_t len, unsigned flags, uint64_t *server_addr)
{
    struct cumux_host_alloc m = {.size = len, .flags = flags, .client_addr = (uint64_t)(uintptr_t)mine};
    struct cumux_u64_reply rep;
    /* The descriptor and the command must reach the server in the same order as other threads' pairs. */
    pthread_mutex_lock(&shim.main.sock_lock);
    CUresult r = shim_send_fd(fd);
    if (r == CUDA_SUCCESS)
        r = shim_call(CUMUX_OP_HOST_ALLOC, &m, sizeof m, &rep, sizeof rep, NULL);
    pthread_mutex_unlock(&shim.main.sock_lock);
    if (r == CUDA_SUCCESS)
        *server_addr = rep.value;
    return r;
}
/* The memfds of pinned host memory, kept while the server can resume (shim.resume_token) to share the
 * memory again with the worker that takes over after a fault (shim_host_rebind); closed otherwise. */
struct kept_host {
    uint64_t base, len;
    int fd;
    unsigned flags;
};
static struct kept_host *kept_host;
static size_t nkept_host, capkept_host;
static pthread_mutex_t kept_host_lock = PTHREAD_MUTEX_INITIALIZER;

static void host_keep(uint64_t base, uint64_t len, int fd, unsigned flags)
{
    pthread_mutex_lock(&kept_host_lock);
    if (shim.resume_token && nkept_host == capkept_host) {
        size_t nc = capkept_host ? capkept_host * 2 : 16;
        struct kept_host *nv = realloc(kept_host, nc * sizeof *nv);
        if (nv) {
            kept_host = nv;
            capkept_host = nc;
        }
    }
    if (shim.resume_token && nkept_host < capkept_host)
        kept_host[nkept_host++] = (struct kept_host){base, len, fd, flags};
    else
        close(fd);
    pthread_mutex_unlock(&kept_host_lock);
}

static void host_forget(uint64_t base)
{
    pthread_mutex_lock(&kept_host_lock);
    for (size_t i = 0; i < nkept_host; i++) {
        if (kept_host[i].base == base) {
            close(kept_host[i].fd);
            kept_host[i] = kept_host[--nkept_host];
            break;
        }
    }
    pthread_mutex_unlock(&kept_host_lock);
}

CUresult shim_host_rebind(unsigned *count)
{
    *count = 0;
    /* sock_lock may be this thread's own (a call that found the worker gone): try, else go on. */
    bool sock_locked = pthread_mutex_trylock(&shim.main.sock_lock) == 0;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&kept_host_lock);
    for (size_t i = 0; i < nkept_host && r == CUDA_SUCCESS; i++) {
        struct kept_host *k = &kept_host[i];
        struct cumux_host_alloc m = {.size = k->len, .flags = k->flags, .client_addr = k->base};
        struct cumux_u64_reply rep;
        r = shim_send_fd(k->fd);
        if (r == CUDA_SUCCESS)
            r = shim_call(CUMUX_OP_HOST_ALLOC, &m, sizeof m, &rep, sizeof rep, NULL);
        if (r != CUDA_SUCCESS)
            break;
        /* The new worker's address of it (the same as ours when it could map it there). */
        pthread_rwlock_wrlock(&shim.ranges_lock);
        const struct cumux_range *g = cumux_ranges_find(&shim.pinned_ranges, k->base);
        if (g && g->base == k->base)
            ((struct cumux_range *)g)->extra = rep.value;
        pthread_rwlock_unlock(&shim.ranges_lock);
        (*count)++;
    }
    pthread_mutex_unlock(&kept_host_lock);
    if (sock_locked)
        pthread_mutex_unlock(&shim.main.sock_lock);
    return r;
}

/* Pinned host memory shared with the server, at the same address in both processes when possible;
 * managed: only then (the program and its kernels use the one pointer), and tagged so. */
static CUresult pinned_alloc(void **pp, size_t size, unsigned int flags, bool managed)
{
    CUresult r;
    size_t len = (size + 4095) & ~(size_t)4095;
    int fd = memfd_create("cumux-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, (off_t)len) < 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *mine = cumux_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
        /* The server mapped it elsewhere: move ours there if we can, so that both agree on the address (a
         * hold on device addresses there is stale: the server's host memory is there now). */
        release_va(server_addr, len);
        void *moved = cumux_mmap((void *)(uintptr_t)server_addr, len, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
        if (moved != MAP_FAILED && (uint64_t)(uintptr_t)moved == server_addr) {
            munmap(mine, len);
            mine = moved;
        } else if (moved != MAP_FAILED) {
            munmap(moved, len);
        }
    }
    if (managed && server_addr != (uint64_t)(uintptr_t)mine) {
        close(fd);
        shim_op_host_free(server_addr);
        munmap(mine, len);
        return CUDA_ERROR_OUT_OF_MEMORY; /* no address both processes could use */
    }
    host_keep((uint64_t)(uintptr_t)mine, len, fd, flags);
    pthread_rwlock_wrlock(&shim.ranges_lock);
    cumux_ranges_add(&shim.pinned_ranges, (uint64_t)(uintptr_t)mine, len, len | (managed ? PINNED_MANAGED : 0),
                     server_addr);
    pthread_rwlock_unlock(&shim.ranges_lock);
    *pp = mine;
    return CUDA_SUCCESS;
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
    return pinned_alloc(pp, size, flags, false);
}

/* Managed memory: host memory that the program and the GPU both use through one pointer (pinned, shared
 * with the server at the same address, mapped for the device). The GPU reaches it over the bus: it is
 * correct everywhere and fast where the program touches it most; prefetches and advice change nothing. */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    void *p;
    r = pinned_alloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, true);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

/* Whether [p, p+n) lies in one managed allocation. */
static bool managed_range(uint64_t p, uint64_t n)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_covers(&shim.pinned_ranges, p, n);
    bool ok = r && (r->tag & PINNED_MANAGED);
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

/* What the program said of each managed allocation (advice, last prefetch), answered back by
 * cuMemRangeGetAttribute; kept per allocation, not per byte range. */
#define MAX_MANAGED_ADVICE 1024
static pthread_mutex_t advice_lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed_advice {
    uint64_t base; /* 0: free */
    int read_mostly;
    CUmemLocation preferred, prefetched; /* type 0: none */
    uint32_t accessed_by;                /* devices, a bit each */
} advice[MAX_MANAGED_ADVICE];

/* The advice record of the managed allocation holding p (made on first use); NULL when there is no room.
 * Caller holds advice_lock. */
static struct managed_advice *advice_of(uint64_t p)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.pinned_ranges, p);
    uint64_t base = r && (r->tag & PINNED_MANAGED) ? r->base : 0;
    pthread_rwlock_unlock(&shim.ranges_lock);
    struct managed_advice *free_slot = NULL;
    for (int i = 0; base && i < MAX_MANAGED_ADVICE; i++) {
        if (advice[i].base == base)
            return &advice[i];
        if (!advice[i].base && !free_slot)
            free_slot = &advice[i];
    }
    if (free_slot)
        *free_slot = (struct managed_advice){.base = base};
    return base ? free_slot : NULL;
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation location, unsigned int flags, CUstream h)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags != 0 || !managed_range(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&advice_lock);
    struct managed_advice *a = advice_of(p);
    if (a)
        a->prefetched = location;
    pthread_mutex_unlock(&advice_lock);
    return CUDA_SUCCESS;
}

#undef cuMemPrefetchAsync
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream h); /* the CUDA 12 form */
CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream h)
{
    CUmemLocation l = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dst};
    return cuMemPrefetchAsync_v2(p, n, l, 0, h);
}

CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise what, CUmemLocation location)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!managed_range(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&advice_lock);
    struct managed_advice *a = advice_of(p);
    bool dev = location.type == CU_MEM_LOCATION_TYPE_DEVICE && location.id >= 0 && location.id < 32;
    if (a) {
        switch (what) {
        case CU_MEM_ADVISE_SET_READ_MOSTLY: a->read_mostly = 1; break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY: a->read_mostly = 0; break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: a->preferred = location; break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: a->preferred = (CUmemLocation){0}; break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY: a->accessed_by |= dev ? 1u << location.id : 0; break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY: a->accessed_by &= dev ? ~(1u << location.id) : ~0u; break;
        default: break;
        }
    }
    pthread_mutex_unlock(&advice_lock);
    return CUDA_SUCCESS;
}

/* A location as the older attributes give it: a device ordinal, CU_DEVICE_CPU, or CU_DEVICE_INVALID. */
static int location_ordinal(CUmemLocation l)
{
    return l.type == CU_MEM_LOCATION_TYPE_DEVICE ? l.id : l.type == CU_MEM_LOCATION_TYPE_HOST ? CU_DEVICE_CPU
                                                                                               : CU_DEVICE_INVALID;
}

CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr p, size_t n)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data || !managed_range(p, n) || (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY ? size % 4 : size != 4))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&advice_lock);
    struct managed_advice *a = advice_of(p);
    struct managed_advice none = {0};
    if (!a)
        a = &none;
    int *out = data;
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: *out = a->read_mostly; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *out = location_ordinal(a->preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: *out = (int)a->preferred.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: *out = a->preferred.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *out = location_ordinal(a->prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: *out = (int)a->prefetched.type; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: *out = a->prefetched.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        size_t k = 0;
        for (int d = 0; d < 32 && k < size / 4; d++)
            if (a->accessed_by & (1u << d))
                out[k++] = d;
        while (k < size / 4)
            out[k++] = CU_DEVICE_INVALID;
        break;
    }
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&advice_lock);
    return r;
}

CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs, size_t count,
                                 CUdeviceptr p, size_t n)
{
    if (!data || !sizes || !attrs || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = cuMemRangeGetAttribute(data[i], sizes[i], attrs[i], p, n);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

#undef cuMemAdvise
CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice device); /* the CUDA 12 form */
CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice device)
{
    CUmemLocation l = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device};
    return cuMemAdvise_v2(p, n, advice, l);
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
    int found = f && f->base == (uint64_t)(uintptr_t)p && !(f->tag & (PINNED_REGISTERED | PINNED_MANAGED))
                    ? cumux_ranges_remove(&shim.pinned_ranges, (uint64_t)(uintptr_t)p, &r)
                    : -1;
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (found < 0)
        return CUDA_ERROR_INVALID_VALUE;
    host_forget((uint64_t)(uintptr_t)p);
    CUresult res = shim_op_host_free(r.extra);
    munmap(p, r.size);
    return res;
}

/* cuMemFree of managed memory. CUDA_ERROR_INVALID_VALUE when p starts none. */
static CUresult managed_free(uint64_t p)
{
    struct cumux_range r;
    pthread_rwlock_wrlock(&shim.ranges_lock);
    const struct cumux_range *f = cumux_ranges_find(&shim.pinned_ranges, p);
    int found = f && f->base == p && (f->tag & PINNED_MANAGED) ? cumux_ranges_remove(&shim.pinned_ranges, p, &r) : -1;
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (found < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&advice_lock);
    for (int i = 0; i < MAX_MANAGED_ADVICE; i++)
        if (advice[i].base == p)
            advice[i].base = 0;
    pthread_mutex_unlock(&advice_lock);
    /* The program's other streams may still use it: the server's free waits for the client's work. */
    host_forget(p);
    CUresult res = shim_op_host_free(r.extra);
    munmap((void *)(uintptr_t)p, r.size);
    return res;
}

CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = shim_pinned_server_addr(p, 1);
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
    if (cumux_mmap((void *)base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t server_addr;
    r = share_with_server(fd, (void *)base, len, flags, &server_addr);
    if (r != CUDA_SUCCESS) {
        close(fd);
        return r; /* the pages stay file-backed with the same contents: the program sees no difference */
    }
    host_keep(base, len, fd, flags);
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
    host_forget(base);
    return shim_op_host_free(r.extra);
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
        *(unsigned int *)data = d || (h && (hr.tag & PINNED_MANAGED)) ? CU_MEMORYTYPE_DEVICE : h ? CU_MEMORYTYPE_HOST : 0;
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
        *(int *)data = h && (hr.tag & PINNED_MANAGED) ? 1 : 0;
        return CUDA_SUCCESS;
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
