/* The server's GPUs: one primary context per visible device, and the facts clients ask about. */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "server/server.h"

struct srv_gpu srv_gpus[CUMUX_MAX_DEVICES];
int srv_gpu_count;
int srv_driver_version;

static const char *errname(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

int srv_gpus_init(void)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        cumux_logf("cuInit failed: %s (%d)", errname(r), (int)r);
        return -1;
    }
    cuDriverGetVersion(&srv_driver_version);
    srv_coredump_enable(); /* before the contexts: set on one afterwards, it wrote nothing */
    int n = 0;
    r = cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        cumux_logf("no CUDA device: %s (%d)", errname(r), (int)r);
        return -1;
    }
    if (n > CUMUX_MAX_DEVICES)
        n = CUMUX_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        struct srv_gpu *g = &srv_gpus[i];
        struct cumux_device_info *info = &g->info;
        memset(info, 0, sizeof *info);
        if ((r = cuDeviceGet(&g->dev, i)) != CUDA_SUCCESS ||
            (r = cuDeviceGetName(info->name, sizeof info->name, g->dev)) != CUDA_SUCCESS ||
            (r = cuDeviceTotalMem(&info->total_mem, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: %s", i, errname(r));
            return -1;
        }
        CUuuid uuid;
        if (cuDeviceGetUuid(&uuid, g->dev) == CUDA_SUCCESS)
            memcpy(info->uuid, uuid.bytes, 16);
        cuDeviceGetPCIBusId(info->pci_bus_id, sizeof info->pci_bus_id, g->dev);
        for (int a = 0; a < CUMUX_MAX_ATTRS; a++) {
            int v;
            info->attrs[a] = cuDeviceGetAttribute(&v, (CUdevice_attribute)a, g->dev) == CUDA_SUCCESS
                                 ? v
                                 : CUMUX_ATTR_MISSING;
        }
        if ((r = cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: primary context: %s", i, errname(r));
            return -1;
        }
        cuCtxSetCurrent(g->ctx);
        if ((r = cuDeviceGetDefaultMemPool(&g->pool, g->dev)) != CUDA_SUCCESS) {
            cumux_logf("device %d: no memory pool: %s", i, errname(r));
            return -1;
        }
        srv_memop_kernels_load(i); /* failing, only such operations on pool memory fail */
        cuCtxGetStreamPriorityRange(&info->stream_priority_least, &info->stream_priority_greatest);
        cumux_logf("GPU %d: %s, %d SMs, %llu MiB, %s", i, info->name,
                   info->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT],
                   (unsigned long long)(info->total_mem >> 20), info->pci_bus_id);
    }
    srv_gpu_count = n;
    return 0;
}

void srv_gpus_fini(void)
{
    for (int i = 0; i < srv_gpu_count; i++)
        cuDevicePrimaryCtxRelease(srv_gpus[i].dev);
    srv_gpu_count = 0;
}

/* The stack limit each context had before standing by (0: not changed). On an H200 a context holds
 * ~520 MiB, half of it the local memory reserved for every resident thread's 1 KiB stack: a standby that
 * may never serve need not hold that. */
static size_t standby_stack[CUMUX_MAX_DEVICES];
#define STANDBY_STACK_BYTES 16

void srv_gpus_stand_by(void)
{
    for (int i = 0; i < srv_gpu_count; i++) {
        size_t v = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        if (cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS && v > STANDBY_STACK_BYTES &&
            cuCtxSetLimit(CU_LIMIT_STACK_SIZE, STANDBY_STACK_BYTES) == CUDA_SUCCESS)
            standby_stack[i] = v;
    }
}

void srv_gpus_take_over(void)
{
    for (int i = 0; i < srv_gpu_count; i++) {
        if (!standby_stack[i])
            continue;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        /* Failing (the GPU full by now), kernels still run: the driver grows the stack a launch needs. */
        CUresult r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, standby_stack[i]);
        if (r != CUDA_SUCCESS)
            cumux_logf("GPU %d: stack limit back to %zu bytes: %s", i, standby_stack[i], errname(r));
        standby_stack[i] = 0;
    }
}
