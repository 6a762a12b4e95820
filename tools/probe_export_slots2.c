/* What do TOOLS_TLS slot 2 and table 21318c60... slots 4, 51 and 39 write, byte by byte, with a context
 * current? (cuBLAS and cuFFT call them; tools/probe_export_slots.c and `cumux trace --native` gave the
 * shapes.) Run on a GPU: gcc -O2 -I/usr/local/cuda/include tools/probe_export_slots2.c -o /tmp/pe2 -ldl -lcuda */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void uuid_of(const char *hex, CUuuid *id)
{
    for (int k = 0; k < 16; k++)
        sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id->bytes[k]);
}

static void bytes(const char *what, const uint8_t *b, int n)
{
    printf("  %s:", what);
    for (int i = 0; i < n; i++)
        printf(" %02x", b[i]);
    printf("\n");
}

typedef uint64_t (*fn)(void *, void *, void *, void *, void *, void *);

int main(void)
{
    CUcontext ctx;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 1;
    CUuuid a, b;
    const void **tls, **t21;
    uuid_of("42d85a8123f6cb478298f6e78a3aecdc", &a);
    uuid_of("21318c60971432488ca641ff7324c8f2", &b);
    if (cuGetExportTable((const void **)&tls, &a) || cuGetExportTable((const void **)&t21, &b))
        return 1;
    uint8_t buf[32];
    memset(buf, 0xab, sizeof buf);
    uint64_t r = ((fn)(uintptr_t)tls[2])(buf, (void *)0x14, (void *)1, 0, 0, 0);
    printf("ctx %p; TOOLS_TLS[2] r=%llu\n", (void *)ctx, (unsigned long long)r);
    bytes("out", buf, 16);
    cuCtxSetCurrent(NULL);
    memset(buf, 0xab, sizeof buf);
    r = ((fn)(uintptr_t)tls[2])(buf, (void *)0x14, (void *)1, 0, 0, 0);
    printf("no ctx current: TOOLS_TLS[2] r=%llu\n", (unsigned long long)r);
    bytes("out", buf, 16);
    cuCtxSetCurrent(ctx);
    memset(buf, 0xab, sizeof buf);
    r = ((fn)(uintptr_t)t21[4])(ctx, buf, 0, 0, 0, 0);
    printf("21318c60[4](ctx) r=%llu\n", (unsigned long long)r);
    bytes("out", buf, 16);
    memset(buf, 0xab, sizeof buf);
    r = ((fn)(uintptr_t)t21[4])(NULL, buf, 0, 0, 0, 0);
    printf("21318c60[4](NULL) r=%llu\n", (unsigned long long)r);
    bytes("out", buf, 16);
    CUcontext other;
    CUctxCreateParams cp;
    memset(&cp, 0, sizeof cp);
    if (cuCtxCreate(&other, &cp, 0, dev) == CUDA_SUCCESS) {
        memset(buf, 0xab, sizeof buf);
        r = ((fn)(uintptr_t)t21[4])(other, buf, 0, 0, 0, 0);
        printf("21318c60[4](created ctx) r=%llu\n", (unsigned long long)r);
        bytes("out", buf, 16);
        cuCtxPopCurrent(NULL);
        cuCtxSetCurrent(ctx);
    }
    CUstream s[6] = {NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, 0, 0, 0};
    int lo, hi;
    cuCtxGetStreamPriorityRange(&lo, &hi);
    cuStreamCreate(&s[3], 0);
    cuStreamCreate(&s[4], CU_STREAM_NON_BLOCKING);
    cuStreamCreateWithPriority(&s[5], CU_STREAM_NON_BLOCKING, hi);
    for (int i = 0; i < 6; i++) {
        void *obj = (void *)0xabababababababab;
        r = ((fn)(uintptr_t)t21[51])(ctx, s[i], &obj, 0, 0, 0);
        printf("stream %d (%p): 21318c60[51] r=%llu obj=%p\n", i, (void *)s[i], (unsigned long long)r, obj);
        memset(buf, 0xab, sizeof buf);
        r = ((fn)(uintptr_t)t21[39])(ctx, obj, buf, 0, 0, 0);
        printf("  21318c60[39] r=%llu\n", (unsigned long long)r);
        bytes("out", buf, 16);
        unsigned long long id = 0;
        cuStreamGetId(s[i], &id);
        printf("  stream id %llu\n", id);
    }
    return 0;
}
