/* Does cumux's integrity answer match the real driver's? Asks the real driver's INTEGRITY_CHECK slot 1
 * and recomputes it with shim/integrity.c from the same facts (the real driver's own table addresses).
 * Run on a GPU: gcc -O2 -I. -I/usr/local/cuda/include tools/probe_integrity.c shim/integrity.c -o /tmp/pi -ldl -lpthread && /tmp/pi */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/integrity.h"

static void uuid_of(const char *hex, CUuuid *id)
{
    for (int k = 0; k < 16; k++)
        sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id->bytes[k]);
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
#define SYM(name) __typeof__(&name) p_##name = (__typeof__(&name))dlsym(h, #name)
    SYM(cuInit);
    SYM(cuDriverGetVersion);
    SYM(cuDeviceGetCount);
    SYM(cuDeviceGetUuid);
    SYM(cuDeviceGetAttribute);
    SYM(cuGetExportTable);
    if (p_cuInit(0))
        return 1;
    int drv = 0, n = 0;
    p_cuDriverGetVersion(&drv);
    p_cuDeviceGetCount(&n);
    struct cumux_integrity_device devs[16];
    for (int d = 0; d < n && d < 16; d++) {
        CUuuid u;
        p_cuDeviceGetUuid(&u, d);
        memcpy(devs[d].uuid, u.bytes, 16);
        p_cuDeviceGetAttribute(&devs[d].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
        p_cuDeviceGetAttribute(&devs[d].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
        p_cuDeviceGetAttribute(&devs[d].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
    }
    CUuuid rt, ic;
    uuid_of("6bd5fb6c5bf4e74a8987d93912fd9df9", &rt);
    uuid_of("d4082055bde6704b8d34ba123c66e1f2", &ic);
    const void **rtt = NULL, **ict = NULL;
    if (p_cuGetExportTable((const void **)&rtt, &rt) || p_cuGetExportTable((const void **)&ict, &ic))
        return 1;
    CUresult (*fn)(uint32_t, uint64_t, uint64_t *) = (CUresult(*)(uint32_t, uint64_t, uint64_t *))(uintptr_t)ict[1];
    int bad = 0;
    const uint32_t versions[] = {13000, 13001, 13002, 12085, 13007, 11083};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        uint64_t now = (uint64_t)time(NULL), real[2] = {0, 0}, ours[2] = {0, 0};
        CUresult r = fn(versions[i], now, real);
        cumux_integrity_answer((uint32_t)drv, versions[i], (uint32_t)getpid(), (uint32_t)pthread_self(), rtt, ict,
                               ict[1], now, devs, n, ours);
        int same = real[0] == ours[0] && real[1] == ours[1];
        bad += !same;
        printf("version %u: driver r=%d %016llx %016llx, cumux %016llx %016llx: %s\n", versions[i], (int)r,
               (unsigned long long)real[0], (unsigned long long)real[1], (unsigned long long)ours[0],
               (unsigned long long)ours[1], same ? "SAME" : "DIFFERENT");
    }
    printf("integrity probe: %s (driver %d, %d device(s))\n", bad ? "MISMATCH" : "all match", drv, n);
    return bad != 0;
}
