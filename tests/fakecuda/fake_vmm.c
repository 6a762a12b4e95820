/* Virtual memory management in the fake: a physical allocation is a memfd, a reservation is a stretch of
 * the device's address space kept for VMM (fc_vmm_va, PROT_NONE), a mapping maps the memfd there, still
 * inaccessible, and cuMemSetAccess makes it readable and writable and known to the oracle as device
 * memory. As the real driver: an allocation released while mapped lives until its last mapping goes; a
 * reservation is freed whole, unmapped; work touching a range unmapped under it is a GPU fault. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/map.h"
#include "fake.h"

#define FC_GRANULARITY (2ull << 20)
#define MAX_VMM 4096

struct vmm_alloc {
    int fd;
    bool exportable; /* made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or imported from one */
    uint64_t size;
    unsigned maps;
    unsigned handles; /* cuMemCreate's, the import's and cuMemRetainAllocationHandle's, not yet released */
    bool released;    /* handles is 0 */
    int dev; /* the GPU whose memory it is */
};

struct vmm_range {
    uint64_t base, size;
    struct vmm_alloc *alloc; /* a mapping's; NULL: a reservation */
    bool accessible;
};

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_range reservations[MAX_VMM], mappings[MAX_VMM];
static size_t nres, nmap;

static bool prop_ok(const CUmemAllocationProp *p)
{
    return p && p->type == CU_MEM_ALLOCATION_TYPE_PINNED && p->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           fc_gpu_ok(p->location.id);
}

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags o)
{
    CHECK_RET(fc_check_init());
    if (!g || !prop_ok(prop) || (o != CU_MEM_ALLOC_GRANULARITY_MINIMUM && o != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *g = FC_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    CHECK_RET(fc_check_init());
    if (!h || !prop_ok(prop) || flags || size == 0 || size % FC_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(fc_mem_account(prop->location.id, (int64_t)size));
    struct vmm_alloc *a = calloc(1, sizeof *a);
    int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (!a || fd < 0 || ftruncate(fd, (off_t)size) < 0) {
        if (fd >= 0)
            close(fd);
        free(a);
        fc_mem_account(prop->location.id, -(int64_t)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->fd = fd;
    a->handles = 1;
    a->dev = prop->location.id;
    a->size = size;
    a->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
    atomic_fetch_add(&fc_stats.vmm_allocations, 1);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return CUDA_SUCCESS;
}

/* A descriptor of the allocation (its memfd), as the driver gives one for an allocation made to be shared
 * that way; the memory lives while any descriptor or mapping of it does, in any process. */
CUresult cuMemExportToShareableHandle(void *handle, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
                                      unsigned long long flags)
{
    CHECK_RET(fc_check_init());
    struct vmm_alloc *a = (struct vmm_alloc *)(uintptr_t)h;
    if (!handle || !a || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a->exportable)
        return CUDA_ERROR_NOT_PERMITTED;
    int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle = fd;
    return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, CUmemAllocationHandleType type)
{
    CHECK_RET(fc_check_init());
    int src = (int)(intptr_t)os_handle;
    struct stat st;
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || src < 0 || fstat(src, &st) < 0 ||
        st.st_size <= 0 || (uint64_t)st.st_size % FC_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t size = (uint64_t)st.st_size;
    int dev = fc_current_device(); /* the fake cannot tell the exporter's GPU: counted on this one */
    CHECK_RET(fc_mem_account(dev, (int64_t)size));
    struct vmm_alloc *a = calloc(1, sizeof *a);
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    if (!a || fd < 0) {
        if (fd >= 0)
            close(fd);
        free(a);
        fc_mem_account(dev, -(int64_t)size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *a = (struct vmm_alloc){.fd = fd, .exportable = true, .size = size, .dev = dev, .handles = 1};
    atomic_fetch_add(&fc_stats.vmm_allocations, 1);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return CUDA_SUCCESS;
}

static void alloc_free(struct vmm_alloc *a)
{
    close(a->fd);
    fc_mem_account(a->dev, -(int64_t)a->size);
    free(a);
    atomic_fetch_sub(&fc_stats.vmm_allocations, 1);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    CHECK_RET(fc_check_init());
    struct vmm_alloc *a = (struct vmm_alloc *)(uintptr_t)h;
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    if (a->released) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    a->released = --a->handles == 0;
    bool now = a->released && a->maps == 0;
    pthread_mutex_unlock(&vmm_mu);
    if (now)
        alloc_free(a);
    return CUDA_SUCCESS;
}

/* Start of a free stretch of size bytes aligned to a in VMM's address space; 0 if none. First fit: the
 * start of the space or the end of a reservation. Caller holds vmm_mu. */
static uint64_t va_free_at(uint64_t size, uint64_t a)
{
    uint64_t end = fc_vmm_va + fc_vmm_va_size;
    for (size_t k = 0; k <= nres; k++) {
        uint64_t start = k == nres ? fc_vmm_va : reservations[k].base + reservations[k].size;
        start = (start + a - 1) & ~(a - 1);
        if (start < fc_vmm_va || start > end || size > end - start)
            continue;
        bool clear = true;
        for (size_t i = 0; i < nres && clear; i++)
            clear = reservations[i].base >= start + size || start >= reservations[i].base + reservations[i].size;
        if (clear)
            return start;
    }
    return 0;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    CHECK_RET(fc_check_init());
    if (!ptr || flags || size == 0 || size % FC_GRANULARITY || (align & (align - 1)) || align > (1ull << 40))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = align > FC_GRANULARITY ? align : FC_GRANULARITY;
    pthread_mutex_lock(&vmm_mu);
    uint64_t base = 0;
    /* The hint, as the real driver takes it when that stretch is free (cumuxd's arena in every worker). */
    if (addr && addr % a == 0 && addr >= fc_vmm_va && size <= fc_vmm_va_size &&
        addr - fc_vmm_va <= fc_vmm_va_size - size && nres < MAX_VMM) {
        bool clear = true;
        for (size_t i = 0; i < nres && clear; i++)
            clear = reservations[i].base >= addr + size || addr >= reservations[i].base + reservations[i].size;
        base = clear ? addr : 0;
    }
    if (!base)
        base = nres == MAX_VMM ? 0 : va_free_at(size, a);
    if (!base) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    reservations[nres++] = (struct vmm_range){.base = base, .size = size};
    pthread_mutex_unlock(&vmm_mu);
    atomic_fetch_add(&fc_stats.vmm_reservations, 1);
    *ptr = base;
    return CUDA_SUCCESS;
}

/* Index of the range of v holding [p, p+n) whole; -1 if none. Caller holds vmm_mu. */
static ptrdiff_t holding(const struct vmm_range *v, size_t count, uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < count; i++)
        if (p >= v[i].base && n <= v[i].size && p - v[i].base <= v[i].size - n)
            return (ptrdiff_t)i;
    return -1;
}

static bool overlaps_mapping(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < nmap; i++)
        if (mappings[i].base < p + n && p < mappings[i].base + mappings[i].size)
            return true;
    return false;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&vmm_mu);
    ptrdiff_t i = holding(reservations, nres, ptr, size);
    if (i < 0 || reservations[i].base != ptr || reservations[i].size != size || overlaps_mapping(ptr, size)) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    reservations[i] = reservations[--nres];
    pthread_mutex_unlock(&vmm_mu);
    /* Its address space stays the device's, inaccessible (nothing is mapped in it: checked above). */
    atomic_fetch_sub(&fc_stats.vmm_reservations, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
{
    CHECK_RET(fc_check_init());
    struct vmm_alloc *a = (struct vmm_alloc *)(uintptr_t)h;
    if (offset != 0) /* as the driver: whole allocations only */
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!a || flags || size == 0 || size % FC_GRANULARITY || offset % FC_GRANULARITY || offset > a->size ||
        size > a->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    if (a->released || holding(reservations, nres, ptr, size) < 0 || overlaps_mapping(ptr, size) || nmap == MAX_VMM) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *p = cumux_mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)offset);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mappings[nmap++] = (struct vmm_range){.base = ptr, .size = size, .alloc = a};
    a->maps++;
    pthread_mutex_unlock(&vmm_mu);
    atomic_fetch_add(&fc_stats.vmm_mappings, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&vmm_mu);
    ptrdiff_t i = holding(mappings, nmap, ptr, size);
    if (i < 0 || mappings[i].base != ptr || mappings[i].size != size) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct vmm_range m = mappings[i];
    mappings[i] = mappings[--nmap];
    if (m.accessible)
        fc_dev_range_remove(ptr);
    /* Back to reserved address space, inaccessible. */
    cumux_mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    bool last = --m.alloc->maps == 0 && m.alloc->released;
    pthread_mutex_unlock(&vmm_mu);
    if (last)
        alloc_free(m.alloc);
    atomic_fetch_sub(&fc_stats.vmm_mappings, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CHECK_RET(fc_check_init());
    if (!desc || count != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_gpu_ok(desc->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
               : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
               : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_NONE    ? PROT_NONE
                                                                 : -1;
    if (prot < 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    /* [ptr, ptr+size) must be tiled by whole mappings. */
    uint64_t at = ptr, end = ptr + size;
    while (at < end) {
        ptrdiff_t i = holding(mappings, nmap, at, 1);
        if (i < 0 || mappings[i].base != at) {
            pthread_mutex_unlock(&vmm_mu);
            return CUDA_ERROR_INVALID_VALUE;
        }
        at += mappings[i].size;
    }
    if (at != end || size == 0) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (at = ptr; at < end;) {
        struct vmm_range *m = &mappings[holding(mappings, nmap, at, 1)];
        mprotect((void *)(uintptr_t)m->base, m->size, prot);
        bool accessible = prot != PROT_NONE;
        if (accessible && !m->accessible)
            fc_dev_range_add(m->base, m->size);
        else if (!accessible && m->accessible)
            fc_dev_range_remove(m->base);
        m->accessible = accessible;
        at += m->size;
    }
    pthread_mutex_unlock(&vmm_mu);
    return CUDA_SUCCESS;
}

/* A handle of the allocation mapped at addr, as the driver gives one: released like any other. */
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    CHECK_RET(fc_check_init());
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_mu);
    ptrdiff_t i = holding(mappings, nmap, (uint64_t)(uintptr_t)addr, 1);
    if (i < 0) {
        pthread_mutex_unlock(&vmm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct vmm_alloc *a = mappings[i].alloc;
    a->handles++;
    a->released = false;
    pthread_mutex_unlock(&vmm_mu);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)a;
    return CUDA_SUCCESS;
}
