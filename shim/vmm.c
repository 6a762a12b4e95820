/* Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess...). The
 * reservations, physical allocations and mappings are the server's (server/vmm.c); a
 * CUmemGenericAllocationHandle is the server's handle for the allocation. The shim checks what the
 * driver checks before it asks, keeps each allocation's properties (cuMemGetAllocationPropertiesFromHandle)
 * and records mapped, writable ranges as device memory so that copies classify them. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim/client.h"

/* The properties each live allocation was created with, by handle. */
static pthread_mutex_t props_lock = PTHREAD_MUTEX_INITIALIZER;
static CUmemAllocationProp *props;
static uint32_t nprops;

static bool prop_ok(const CUmemAllocationProp *p)
{
    return p && p->type == CU_MEM_ALLOCATION_TYPE_PINNED && p->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           p->location.id >= 0 && p->location.id < shim.device_count;
}

static void remember_props(uint32_t h, const CUmemAllocationProp *prop)
{
    pthread_mutex_lock(&props_lock);
    if (h >= nprops) {
        uint32_t n = h * 2 + 16;
        CUmemAllocationProp *v = realloc(props, n * sizeof *v);
        if (v) {
            for (uint32_t i = nprops; i < n; i++)
                v[i] = (CUmemAllocationProp){0};
            props = v;
            nprops = n;
        }
    }
    if (h < nprops)
        props[h] = *prop;
    pthread_mutex_unlock(&props_lock);
}

static uint32_t handle_of(CUmemGenericAllocationHandle h)
{
    return h > 0 && h <= UINT32_MAX ? (uint32_t)h : 0;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!granularity || !prop_ok(prop))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t g;
    r = shim_op_vmm_granularity(prop->location.id, (uint32_t)option, &g);
    if (r == CUDA_SUCCESS)
        *granularity = (size_t)g;
    return r;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || !prop_ok(prop) || flags || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return cumux_unsupported("cuMemCreate with a shareable handle type other than a file descriptor");
    uint64_t h;
    r = shim_op_vmm_create(prop->location.id, size, &h);
    if (r != CUDA_SUCCESS)
        return r;
    remember_props((uint32_t)h, prop);
    *handle = h;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = handle_of(handle);
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    r = shim_op_vmm_release(h);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&props_lock);
        if (h < nprops)
            props[h] = (CUmemAllocationProp){0};
        pthread_mutex_unlock(&props_lock);
    }
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t h = handle_of(handle);
    pthread_mutex_lock(&props_lock);
    bool known = h && h < nprops && props[h].type == CU_MEM_ALLOCATION_TYPE_PINNED;
    if (known)
        *prop = props[h];
    pthread_mutex_unlock(&props_lock);
    return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || size == 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p;
    r = shim_op_vmm_reserve(size, alignment, addr, flags, &p);
    if (r == CUDA_SUCCESS) {
        *ptr = (CUdeviceptr)p;
        shim_hold_device_va(p, size); /* its mappings come later: nothing of ours may land there meanwhile */
    }
    return r;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = shim_require_init();
    return r != CUDA_SUCCESS ? r : shim_op_vmm_address_free(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = handle_of(handle);
    if (!h || flags)
        return CUDA_ERROR_INVALID_VALUE;
    r = shim_op_vmm_map(ptr, size, offset, h);
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
}

/* The shim's record of mapped, writable memory in [ptr, ptr+size) goes. */
static void forget_ranges(uint64_t ptr, uint64_t size)
{
    pthread_rwlock_wrlock(&shim.ranges_lock);
    for (size_t i = shim.dev_ranges.n; i-- > 0;) {
        const struct cumux_range *r = &shim.dev_ranges.v[i];
        if (r->base >= ptr && r->base - ptr < size)
            cumux_ranges_remove(&shim.dev_ranges, r->base, NULL);
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    r = shim_op_vmm_unmap(ptr, size);
    if (r == CUDA_SUCCESS)
        forget_ranges(ptr, size);
    return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= shim.device_count)
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        r = shim_op_vmm_set_access(ptr, size, desc[i].location.id, (uint32_t)desc[i].flags);
    if (r != CUDA_SUCCESS)
        return r;
    /* Like a module global, VMM memory is not cuMemFree's to free. */
    forget_ranges(ptr, size);
    if (desc[count - 1].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        shim_add_device_range(ptr, size, c, SHIM_RANGE_GLOBAL | SHIM_RANGE_VMM);
    return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t f;
    r = shim_op_vmm_get_access(ptr, location->id, &f);
    if (r == CUDA_SUCCESS)
        *flags = f;
    return r;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h;
    r = shim_op_vmm_retain((uint64_t)(uintptr_t)addr, &h);
    if (r == CUDA_SUCCESS)
        *handle = h;
    return r;
}

/* A file descriptor handle: a memfd of the shim's, which the server records by its inode; another
 * process under the same server imports the allocation by handing it back. */
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = handle_of(handle);
    if (!shareable || !h || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return cumux_unsupported("cuMemExportToShareableHandle of a handle type other than a file descriptor");
    int fd = memfd_create("cumux-vmm-export", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cumux_vmm_export m = {.alloc = h};
    /* The descriptor and the command reach the server together, in the order of other threads' pairs. */
    r = shim_call_fd(fd, CUMUX_OP_VMM_EXPORT, &m, sizeof m, NULL, 0, NULL);
    if (r != CUDA_SUCCESS) {
        close(fd);
        return r;
    }
    *(int *)shareable = fd;
    return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return cumux_unsupported("cuMemImportFromShareableHandle of a handle type other than a file descriptor");
    int fd = (int)(intptr_t)os_handle;
    struct cumux_vmm_import m = {0};
    struct cumux_vmm_import_reply rep;
    r = shim_call_fd(fd, CUMUX_OP_VMM_IMPORT, &m, sizeof m, &rep, sizeof rep, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = shim_program_gpu(rep.device)},
                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    remember_props(rep.alloc, &p);
    *handle = rep.alloc;
    return CUDA_SUCCESS;
}

/* A dma-buf descriptor for a range of the program's device memory: the server asks the driver and sends
 * the descriptor over the socket before its answer. */
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, CUmemRangeHandleType type,
                                       unsigned long long flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
        return cumux_unsupported("cuMemGetHandleForAddressRange of a handle type other than a dma-buf descriptor");
    if (!shim_is_device_ptr(p, size))
        return CUDA_ERROR_INVALID_VALUE;
    /* The memory's GPU's worker asks its driver: the message goes there (by its address) and the
     * descriptor comes on that channel's socket. */
    struct shim_chan *ch = shim_chan_of_ptr(p);
    pthread_mutex_lock(&ch->sock_lock);
    CUresult r = shim_op_mem_range_handle(p, size, (uint32_t)type, flags);
    int fd = r == CUDA_SUCCESS ? shim_recv_fd_on(ch) : -1;
    pthread_mutex_unlock(&ch->sock_lock);
    if (r == CUDA_SUCCESS && fd < 0)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    if (r == CUDA_SUCCESS)
        *(int *)handle = fd;
    return r;
}
