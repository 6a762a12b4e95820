/* Virtual memory management: physical allocations (cuMemCreate), address reservations and the mappings
 * of one into the other. The server owns all three in the shared context; a client maps only its own
 * allocations into its own reservations, and only ranges that are mapped and made accessible join the
 * device memory it may name (dev_ranges). All of it goes with the client. */

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/ask.h"
#include "common/sock.h"
#include "server/handlers.h"

/* A physical allocation that several clients' allocations name (exported and imported): the last of them
 * to go releases it. vmm_lock guards the counts and the exports, which clients' workers share. */
struct vmm_shared {
    CUmemGenericAllocationHandle h;
    unsigned refs;
};

/* An exported allocation, known by the inode of the descriptor its owner was given. */
struct vmm_export {
    dev_t dev;
    ino_t ino;
    int fd; /* the server's copy: the inode stays this export's while it lives */
    struct srv_vmm_alloc *owner;
    struct vmm_export *next;
};

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_export *exports;

struct srv_vmm_alloc {
    CUmemGenericAllocationHandle h;
    uint64_t size;
    int gpu;
    struct vmm_shared *shared; /* NULL: this client's alone */
    bool charged;     /* created by this client: counted in its memory */
    uint32_t handle;  /* the client's, while it holds references */
    uint32_t refs;    /* the client's references: cuMemCreate and each cuMemRetainAllocationHandle */
    uint32_t maps;    /* mappings of it that remain */
    bool released;    /* every reference released: the memory goes with the last mapping */
};

/* Tags of vmm_mapped: MAPPED, with the access granted (CUmemAccess_flags) in the low bits. */
enum { MAPPED = 0x10, ACCESS_MASK = 0xf };
#define MAPPED_ACCESSIBLE (MAPPED | CU_MEM_ACCESS_FLAGS_PROT_READWRITE)

static CUmemAllocationProp device_prop(int gpu)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = gpu}};
    return p;
}

static void alloc_free(struct srv_client *c, struct srv_vmm_alloc *a)
{
    bool last = true;
    pthread_mutex_lock(&vmm_lock);
    for (struct vmm_export **p = &exports; *p;) { /* no more imports of it */
        struct vmm_export *e = *p;
        if (e->owner == a) {
            *p = e->next;
            close(e->fd);
            free(e);
        } else {
            p = &e->next;
        }
    }
    if (a->shared) {
        last = --a->shared->refs == 0;
        if (last)
            free(a->shared);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (last)
        cuMemRelease(a->h);
    if (a->charged)
        srv_mem_uncharge(c, a->size);
    free(a);
}

CUresult op_vmm_granularity(struct srv_client *c, const struct cumux_vmm_granularity *m, uint8_t *out,
                            uint32_t *out_len)
{
    if (m->option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && m->option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, m->device);
    CUmemAllocationProp p = device_prop(m->device);
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)m->option));
    return reply_u64(out, out_len, g);
}

CUresult op_vmm_create(struct srv_client *c, const struct cumux_vmm_create *m, uint8_t *out, uint32_t *out_len)
{
    if (m->size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_vmm_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, m->device);
    CUmemAllocationProp p = device_prop(m->device);
    /* Exportable where the GPU can: a program on another GPU's worker imports it through this worker
     * (srv_vmm_fetch), which hands that worker a descriptor the driver made. */
    if (srv_gpus[m->device].info.attrs[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] == 1)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult r = srv_mem_charge(c, m->size);
    if (r == CUDA_SUCCESS && (r = cuMemCreate(&a->h, (size_t)m->size, &p, 0)) != CUDA_SUCCESS)
        srv_mem_uncharge(c, m->size);
    if (r != CUDA_SUCCESS) {
        free(a);
        return r;
    }
    a->size = m->size;
    a->gpu = m->device;
    a->refs = 1;
    a->charged = true;
    a->handle = handle_new(c, OBJ_VMM_ALLOC, a);
    if (!a->handle) {
        alloc_free(c, a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, a->handle);
}

CUresult op_vmm_release(struct srv_client *c, struct srv_vmm_alloc *alloc)
{
    if (--alloc->refs > 0)
        return CUDA_SUCCESS; /* retained: other references remain */
    handle_drop(c, alloc->handle);
    alloc->handle = 0;
    alloc->released = true;
    if (alloc->maps == 0)
        alloc_free(c, alloc);
    return CUDA_SUCCESS;
}

CUresult op_vmm_reserve(struct srv_client *c, const struct cumux_vmm_reserve *m, uint8_t *out, uint32_t *out_len)
{
    uint64_t end;
    if (m->size == 0 || !cumux_add_u64(m->addr, m->size, &end) || (m->alignment & (m->alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->obj.current_gpu);
    CUdeviceptr p = 0;
    CHECK(cuMemAddressReserve(&p, (size_t)m->size, (size_t)m->alignment, (CUdeviceptr)m->addr, m->flags));
    if (cumux_ranges_add(&c->vmm.vmm_reserved, p, m->size, 0, (uint64_t)c->obj.current_gpu) < 0) {
        cuMemAddressFree(p, (size_t)m->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, p);
}

/* Whether any mapping lies in [p, p+n). */
static bool any_mapping_in(struct srv_client *c, uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < c->vmm.vmm_mapped.n; i++) {
        const struct cumux_range *r = &c->vmm.vmm_mapped.v[i];
        if (r->base < p + n && p < r->base + r->size)
            return true;
    }
    return false;
}

CUresult op_vmm_address_free(struct srv_client *c, const struct cumux_vmm_address_free *m)
{
    const struct cumux_range *r = cumux_ranges_find(&c->vmm.vmm_reserved, m->ptr);
    if (!r || r->base != m->ptr || r->size != m->size || any_mapping_in(c, r->base, r->size))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, (int)r->extra);
    CHECK(cuMemAddressFree((CUdeviceptr)m->ptr, (size_t)m->size));
    cumux_ranges_remove(&c->vmm.vmm_reserved, m->ptr, NULL);
    return CUDA_SUCCESS;
}

CUresult op_vmm_map(struct srv_client *c, const struct cumux_vmm_map *m, struct srv_vmm_alloc *alloc)
{
    uint64_t end;
    if (m->offset != 0) /* the driver maps whole allocations only (it answers NOT_SUPPORTED, on the H200 too) */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (m->size == 0 || !cumux_add_u64(m->offset, m->size, &end) || end > alloc->size ||
        !cumux_ranges_covers(&c->vmm.vmm_reserved, m->ptr, m->size) || any_mapping_in(c, m->ptr, m->size))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, alloc->gpu);
    /* The mapping names its allocation by the server's pointer: the client's handle may be released first. */
    if (cumux_ranges_add(&c->vmm.vmm_mapped, m->ptr, m->size, MAPPED, (uint64_t)(uintptr_t)alloc) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuMemMap((CUdeviceptr)m->ptr, (size_t)m->size, (size_t)m->offset, alloc->h, 0);
    if (r != CUDA_SUCCESS) {
        cumux_ranges_remove(&c->vmm.vmm_mapped, m->ptr, NULL);
        return r;
    }
    alloc->maps++;
    return CUDA_SUCCESS;
}

/* The mappings that exactly tile [p, p+n): indices first..first+*count-1 of vmm_mapped. */
static bool whole_mappings(struct srv_client *c, uint64_t p, uint64_t n, size_t *first, size_t *count)
{
    uint64_t end;
    if (n == 0 || !cumux_add_u64(p, n, &end))
        return false;
    const struct cumux_range *r = cumux_ranges_find(&c->vmm.vmm_mapped, p);
    if (!r || r->base != p)
        return false;
    size_t i = (size_t)(r - c->vmm.vmm_mapped.v);
    *first = i;
    uint64_t at = p;
    while (at < end) {
        if (i >= c->vmm.vmm_mapped.n || c->vmm.vmm_mapped.v[i].base != at)
            return false;
        at += c->vmm.vmm_mapped.v[i].size; /* no overflow: each mapping lies in a reservation */
        i++;
    }
    *count = i - *first;
    return at == end;
}

/* Unmap mapping i; its allocation goes if the client released it and this was its last mapping. */
static void mapping_unmap(struct srv_client *c, size_t i)
{
    struct cumux_range r = c->vmm.vmm_mapped.v[i];
    struct srv_vmm_alloc *a = (struct srv_vmm_alloc *)(uintptr_t)r.extra;
    use_gpu(c, a->gpu);
    cuMemUnmap((CUdeviceptr)r.base, (size_t)r.size);
    if (r.tag == MAPPED_ACCESSIBLE)
        cumux_ranges_remove(&c->memory.dev_ranges, r.base, NULL);
    cumux_ranges_remove(&c->vmm.vmm_mapped, r.base, NULL);
    if (--a->maps == 0 && a->released)
        alloc_free(c, a);
}

CUresult op_vmm_unmap(struct srv_client *c, const struct cumux_vmm_unmap *m)
{
    size_t first, count;
    if (!whole_mappings(c, m->ptr, m->size, &first, &count))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = count; k-- > 0;)
        mapping_unmap(c, first + k);
    return CUDA_SUCCESS;
}

CUresult op_vmm_set_access(struct srv_client *c, const struct cumux_vmm_set_access *m)
{
    size_t first, count;
    if (!whole_mappings(c, m->ptr, m->size, &first, &count))
        return CUDA_ERROR_INVALID_VALUE;
    if (m->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && m->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        m->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, m->device);
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = m->device},
                         .flags = (CUmemAccess_flags)m->flags};
    CHECK(cuMemSetAccess((CUdeviceptr)m->ptr, (size_t)m->size, &d, 1));
    /* Only memory the GPU may write joins what copies and memsets may name: a copy into read-only
     * mappings would fault the shared context. */
    bool writable = m->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (size_t i = first; i < first + count; i++) {
        struct cumux_range *r = &c->vmm.vmm_mapped.v[i];
        if (writable && r->tag != MAPPED_ACCESSIBLE &&
            cumux_ranges_add(&c->memory.dev_ranges, r->base, r->size, RANGE_VMM, (uint64_t)m->device) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!writable && r->tag == MAPPED_ACCESSIBLE)
            cumux_ranges_remove(&c->memory.dev_ranges, r->base, NULL);
        r->tag = MAPPED | m->flags;
    }
    return CUDA_SUCCESS;
}

CUresult op_vmm_get_access(struct srv_client *c, const struct cumux_vmm_get_access *m, uint8_t *out,
                           uint32_t *out_len)
{
    const struct cumux_range *r = cumux_ranges_find(&c->vmm.vmm_mapped, m->ptr);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    return reply_u64(out, out_len, r->tag & ACCESS_MASK);
}

CUresult op_vmm_retain(struct srv_client *c, const struct cumux_vmm_retain *m, uint8_t *out, uint32_t *out_len)
{
    const struct cumux_range *r = cumux_ranges_find(&c->vmm.vmm_mapped, m->ptr);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_vmm_alloc *a = (struct srv_vmm_alloc *)(uintptr_t)r->extra;
    if (a->released) { /* released while mapped: it has a handle again */
        a->handle = handle_new(c, OBJ_VMM_ALLOC, a);
        if (!a->handle)
            return CUDA_ERROR_OUT_OF_MEMORY;
        a->released = false;
    }
    a->refs++;
    return reply_u64(out, out_len, a->handle);
}

CUresult op_vmm_export(struct srv_client *c, const struct cumux_vmm_export *m)
{
    int fd = recv_client_fd(c, 0); /* first, whatever else is wrong */
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_vmm_alloc *a = handle_get(c, m->alloc, OBJ_VMM_ALLOC);
    struct stat st;
    struct vmm_export *e = a && fstat(fd, &st) == 0 ? calloc(1, sizeof *e) : NULL;
    struct vmm_shared *sh = e && !a->shared ? calloc(1, sizeof *sh) : NULL;
    if (!e || (!a->shared && !sh)) {
        close(fd);
        free(e);
        return a ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    *e = (struct vmm_export){.dev = st.st_dev, .ino = st.st_ino, .fd = fd, .owner = a};
    pthread_mutex_lock(&vmm_lock);
    if (sh) {
        *sh = (struct vmm_shared){.h = a->h, .refs = 1};
        a->shared = sh;
    }
    e->next = exports;
    exports = e;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

/* A descriptor exported by a client of another GPU's worker: each other worker is asked (VMM_FETCH, the
 * descriptor's device and inode); the one that knows it sends the driver's descriptor of the allocation,
 * imported here as an allocation of its own (the driver keeps the memory while either process holds it). */
static CUresult fetch_other_gpu(struct srv_client *c, const struct stat *st, struct srv_vmm_alloc *a)
{
    for (int g = 0; g < srv_gpu_count; g++) {
        if (g == srv_gpu_served)
            continue;
        struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = CUMUX_HELLO_VMM_FETCH,
                                .arg = (uint64_t)st->st_dev, .token = (uint64_t)st->st_ino};
        struct cumux_welcome w;
        int fd = -1;
        int s = cumux_ask_open(g, &h, 5000, &w, &fd, NULL, 0);
        if (s < 0)
            continue;
        close(s);
        if (w.status != 0 || fd < 0) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        struct cumux_vmm_fetch info;
        memcpy(&info, w.message, sizeof info);
        CUmemGenericAllocationHandle mh = 0;
        use_gpu(c, srv_gpu_served);
        CUresult r = cuMemImportFromShareableHandle(&mh, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        struct vmm_shared *sh = r == CUDA_SUCCESS ? calloc(1, sizeof *sh) : NULL;
        if (!sh) {
            if (mh)
                cuMemRelease(mh);
            return r == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : r;
        }
        *sh = (struct vmm_shared){.h = mh, .refs = 1};
        *a = (struct srv_vmm_alloc){.h = mh, .size = info.size, .gpu = g, .shared = sh, .refs = 1};
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

int srv_vmm_fetch(uint64_t dev, uint64_t ino, struct cumux_vmm_fetch *info)
{
    int fd = -1;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_export *e = exports;
    while (e && !((uint64_t)e->dev == dev && (uint64_t)e->ino == ino))
        e = e->next;
    if (e) {
        cuCtxSetCurrent(srv_gpus[e->owner->gpu].ctx);
        if (cuMemExportToShareableHandle(&fd, e->owner->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
            fd = -1;
        info->size = e->owner->size;
    }
    pthread_mutex_unlock(&vmm_lock);
    return fd;
}

CUresult op_vmm_import(struct srv_client *c, uint8_t *out, uint32_t *out_len)
{
    int fd = recv_client_fd(c, 0);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct stat st;
    int ok = fstat(fd, &st);
    close(fd);
    struct srv_vmm_alloc *a = calloc(1, sizeof *a);
    if (ok != 0 || !a) {
        free(a);
        return ok != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&vmm_lock);
    struct vmm_export *e = exports;
    while (e && !(e->dev == st.st_dev && e->ino == st.st_ino))
        e = e->next;
    if (e) {
        *a = (struct srv_vmm_alloc){.h = e->owner->h, .size = e->owner->size, .gpu = e->owner->gpu,
                                    .shared = e->owner->shared, .refs = 1};
        a->shared->refs++;
    }
    pthread_mutex_unlock(&vmm_lock);
    if (!e && fetch_other_gpu(c, &st, a) != CUDA_SUCCESS) {
        free(a);
        return CUDA_ERROR_INVALID_VALUE; /* not a descriptor this server gave out, or its owner let go */
    }
    a->handle = handle_new(c, OBJ_VMM_ALLOC, a);
    if (!a->handle) {
        alloc_free(c, a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct cumux_vmm_import_reply rep = {.alloc = a->handle, .device = a->gpu, .size = a->size};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

void srv_vmm_release_all(struct srv_client *c)
{
    while (c->vmm.vmm_mapped.n)
        mapping_unmap(c, c->vmm.vmm_mapped.n - 1);
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_vmm_alloc *a = handle_get(c, h, OBJ_VMM_ALLOC);
        if (a) {
            handle_drop(c, h);
            alloc_free(c, a);
        }
    }
    while (c->vmm.vmm_reserved.n) {
        struct cumux_range r = c->vmm.vmm_reserved.v[c->vmm.vmm_reserved.n - 1];
        use_gpu(c, (int)r.extra);
        cuMemAddressFree((CUdeviceptr)r.base, (size_t)r.size);
        cumux_ranges_remove(&c->vmm.vmm_reserved, r.base, NULL);
    }
    cumux_ranges_free(&c->vmm.vmm_mapped);
    cumux_ranges_free(&c->vmm.vmm_reserved);
}
