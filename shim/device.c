/* Devices and the driver version: answered from what the server told at cuInit, with no round trip. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "shim/client.h"

#undef cuDeviceGetUuid /* cuda.h maps it to _v2: both are entry points */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);

#define REQUIRE_INIT()                                                                                 \
    do {                                                                                               \
        if (!shim.initialized)                                                                         \
            return CUDA_ERROR_NOT_INITIALIZED;                                                         \
    } while (0)

static const struct cumux_device_info *dev_info(CUdevice d)
{
    return d >= 0 && d < shim.device_count ? &shim.devices[d] : NULL;
}

CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    /* Before cuInit the real driver already answers: advertise the CUDA version the shim was built for. */
    *v = shim.initialized ? shim.driver_version : CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = shim.device_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    REQUIRE_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", i->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = i->total_mem;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!v || (int)a < 0 || (int)a >= CUMUX_MAX_ATTRS || i->attrs[a] == CUMUX_ATTR_MISSING)
        return CUDA_ERROR_INVALID_VALUE;
    *v = i->attrs[a];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, i->uuid, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice d)
{
    return cuDeviceGetUuid(uuid, d);
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d)
{
    CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    return r;
}

CUresult cuDeviceGetProperties(CUdevprop *p, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const int32_t *a = i->attrs;
    p->maxThreadsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    p->maxThreadsDim[0] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
    p->maxThreadsDim[1] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y];
    p->maxThreadsDim[2] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z];
    p->maxGridSize[0] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
    p->maxGridSize[1] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y];
    p->maxGridSize[2] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z];
    p->sharedMemPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK];
    p->totalConstantMemory = a[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY];
    p->SIMDWidth = a[CU_DEVICE_ATTRIBUTE_WARP_SIZE];
    p->memPitch = a[CU_DEVICE_ATTRIBUTE_MAX_PITCH];
    p->regsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
    p->clockRate = a[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
    p->textureAlign = a[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
    REQUIRE_INIT();
    const struct cumux_device_info *i = dev_info(d);
    if (!i)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(id, (size_t)len, "%s", i->pci_bus_id);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *id)
{
    REQUIRE_INIT();
    if (!dev || !id)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus, slot;
    /* Accept "dddd:bb:ss.f" and "bb:ss.f", any case, as the driver does. */
    if (sscanf(id, "%x:%x:%x", &dom, &bus, &slot) != 3) {
        dom = 0;
        if (sscanf(id, "%x:%x", &bus, &slot) != 2)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (int d = 0; d < shim.device_count; d++) {
        const int32_t *a = shim.devices[d].attrs;
        if ((unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] == dom && (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] == bus &&
            (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] == slot) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice d)
{
    (void)luid;
    (void)mask;
    REQUIRE_INIT();
    if (!dev_info(d))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_ERROR_NOT_SUPPORTED; /* Windows only, as with the real driver on Linux */
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
    REQUIRE_INIT();
    if (!dev_info(d) || !dev_info(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    *can = shim_peer_attribute(d, peer, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED) == 1;
    return CUDA_SUCCESS;
}

/* What the server's driver said of the link from d to peer, by the server's numbers of both; a device and
 * itself have none (CUMUX_ATTR_MISSING). */
int shim_peer_attribute(CUdevice d, CUdevice peer, int attr)
{
    const struct cumux_device_info *i = dev_info(d);
    if (!i || !dev_info(peer) || attr < 1 || attr > CUMUX_P2P_ATTRS || d == peer)
        return CUMUX_ATTR_MISSING;
    return i->p2p[shim.server_gpu[peer] * CUMUX_P2P_ATTRS + attr - 1];
}

CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
    REQUIRE_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_info(src) || !dev_info(dst) || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((int)attr < 1 || (int)attr > CUMUX_P2P_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    int v = shim_peer_attribute(src, dst, (int)attr);
    if (v == CUMUX_ATTR_MISSING)
        return CUDA_ERROR_INVALID_VALUE; /* the server's driver refused it */
    *value = v;
    return CUDA_SUCCESS;
}

int shim_program_gpu(int g)
{
    for (int i = 0; i < shim.device_count; i++)
        if (shim.server_gpu[i] == g)
            return i;
    return -1;
}
