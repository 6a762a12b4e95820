/* CUDA IPC between programs under one server: memory (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) and interprocess events (cuIpcGetEventHandle, cuIpcOpenEventHandle). The server
 * keeps the exports (server/ipc.c); a handle carries the export's token and the GPU whose worker made it.
 * An opened memory handle gives the same device address as the owner's (another GPU's worker maps it
 * there) and an opened event is the same event, since every client's work on a GPU lives in one context
 * (another GPU's worker opens the driver's interprocess event of it). */
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "shim/client.h"

static const char ipc_magic[8] = "CUMUXIPC";

/* What a CUipcMemHandle holds. */
struct ipc_payload {
    char magic[8];
    struct cumux_ipc_mem_handle h;
};
_Static_assert(sizeof(struct ipc_payload) <= sizeof(CUipcMemHandle), "fits a CUipcMemHandle");

/* How many times this process has each address open: the shim classifies it as device memory until the
 * last close. */
#define MAX_OPEN 1024
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t base;
    unsigned count;
} opened[MAX_OPEN];

CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr ptr)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_payload p;
    memcpy(p.magic, ipc_magic, sizeof p.magic);
    r = shim_op_ipc_get_mem_handle(ptr, &p.h);
    if (r != CUDA_SUCCESS)
        return r;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &p, sizeof p);
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *ptr, CUipcMemHandle handle, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct ipc_payload p;
    memcpy(&p, handle.reserved, sizeof p);
    if (!ptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || memcmp(p.magic, ipc_magic, sizeof p.magic))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_ipc_mem_handle got;
    r = shim_op_ipc_open_mem_handle(p.h.token, p.h.owner_gpu, &got);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&open_lock);
    int slot = -1;
    for (int i = 0; i < MAX_OPEN && slot < 0; i++)
        if (opened[i].count && opened[i].base == got.base)
            slot = i;
    for (int i = 0; i < MAX_OPEN && slot < 0; i++)
        if (!opened[i].count)
            slot = i;
    if (slot >= 0) {
        opened[slot].base = got.base;
        opened[slot].count++;
    }
    pthread_mutex_unlock(&open_lock);
    if (slot < 0) {
        shim_op_ipc_close_mem_handle(got.base);
        return CUDA_ERROR_TOO_MANY_PEERS;
    }
    /* Like a module global: not cuMemFree's to free. */
    shim_add_device_range(got.base, got.size, c, SHIM_RANGE_GLOBAL);
    *ptr = (CUdeviceptr)got.base;
    return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    r = shim_op_ipc_close_mem_handle(ptr);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&open_lock);
    bool last = false;
    for (int i = 0; i < MAX_OPEN; i++)
        if (opened[i].count && opened[i].base == ptr) {
            last = --opened[i].count == 0;
            break;
        }
    pthread_mutex_unlock(&open_lock);
    if (last) {
        pthread_rwlock_wrlock(&shim.ranges_lock);
        cumux_ranges_remove(&shim.dev_ranges, ptr, NULL);
        pthread_rwlock_unlock(&shim.ranges_lock);
    }
    return CUDA_SUCCESS;
}

unsigned shim_ipc_opened_live(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < MAX_OPEN; i++)
        n += opened[i].count != 0;
    pthread_mutex_unlock(&open_lock);
    return n;
}

/* What a CUipcEventHandle holds. */
struct ipc_event_payload {
    char magic[8];
    uint64_t token;
    int32_t owner_gpu; /* the server's number of the event's GPU */
};
_Static_assert(sizeof(struct ipc_event_payload) <= sizeof(CUipcEventHandle), "fits a CUipcEventHandle");

CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent e)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (!e || e->magic != SHIM_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!(e->flags & CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    struct ipc_event_payload p;
    memcpy(p.magic, ipc_magic, sizeof p.magic);
    p.owner_gpu = e->ctx && e->ctx->device >= 0 && e->ctx->device < shim.device_count ? shim.server_gpu[e->ctx->device] : 0;
    r = shim_op_ipc_get_event_handle(e->handle, &p.token);
    if (r != CUDA_SUCCESS)
        return r;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &p, sizeof p);
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct ipc_event_payload p;
    memcpy(&p, handle.reserved, sizeof p);
    if (!phEvent || memcmp(p.magic, ipc_magic, sizeof p.magic))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t h;
    r = shim_op_ipc_open_event_handle(c->handle, p.owner_gpu, p.token, &h); /* another GPU's: its worker leases it */
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    *e = (struct CUevent_st){.magic = SHIM_MAGIC_EVENT, .handle = (uint32_t)h, .ctx = c,
                             .flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
                             .lost = atomic_load(&shim_lost_epoch)};
    shim_event_remember(e);
    *phEvent = e;
    return CUDA_SUCCESS;
}
