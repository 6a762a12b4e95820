/* The fake driver as several GPUs (CUMUX_FAKE_GPUS=4, linked in: fakecuda_static): each its own identity,
 * primary context, memory and default pool; peer access and copies between them refused and allowed as
 * the driver does. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#include "fake_check.h"
#define IS(call, want) CHECK((call) == (want), "%s: not %s", #call, #want)

#define NGPUS 4

/* A count out of range is refused at cuInit (in a child: cuInit runs once a process). */
static void bad_count(const char *value)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CUMUX_FAKE_GPUS", value, 1);
        _exit(cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "CUMUX_FAKE_GPUS=%s was not refused at cuInit", value);
}

int main(void)
{
    bad_count("0");
    bad_count("9");
    bad_count("two");
    setenv("CUMUX_FAKE_GPUS", "4", 1);
    setenv("CUMUX_FAKE_MEMORY_MB", "64", 1);
    CK(cuInit(0));
    int n = 0;
    CK(cuDeviceGetCount(&n));
    CHECK(n == NGPUS, "%d GPUs, not %d", n, NGPUS);
    CUdevice d;
    IS(cuDeviceGet(&d, NGPUS), CUDA_ERROR_INVALID_DEVICE);

    CUcontext ctx[NGPUS];
    CUmemoryPool pool[NGPUS];
    for (int i = 0; i < NGPUS; i++) {
        CK(cuDeviceGet(&d, i));
        CHECK(d == i, "device %d is %d", i, d);
        CUuuid u;
        char bus[32];
        CK(cuDeviceGetUuid(&u, d));
        CK(cuDeviceGetPCIBusId(bus, sizeof bus, d));
        int bus_attr = -1;
        CK(cuDeviceGetAttribute(&bus_attr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
        size_t total = 0;
        CK(cuDeviceTotalMem(&total, d));
        CHECK(total == 64u << 20, "GPU %d has %zu bytes", i, total);
        for (int j = 0; j < i; j++) {
            CUuuid v;
            char other[32];
            CK(cuDeviceGetUuid(&v, j));
            CK(cuDeviceGetPCIBusId(other, sizeof other, j));
            CHECK(memcmp(u.bytes, v.bytes, 16) != 0, "GPUs %d and %d share a UUID", i, j);
            CHECK(strcmp(bus, other) != 0, "GPUs %d and %d share a PCI bus id (%s)", i, j, bus);
        }
        unsigned bus_num = 0;
        CHECK(sscanf(bus, "%*x:%x:", &bus_num) == 1 && (int)bus_num == bus_attr,
              "GPU %d: PCI bus id %s against the attribute %d", i, bus, bus_attr);
        CK(cuDevicePrimaryCtxRetain(&ctx[i], d));
        for (int j = 0; j < i; j++)
            CHECK(ctx[i] != ctx[j], "GPUs %d and %d share a primary context", i, j);
        CK(cuDeviceGetDefaultMemPool(&pool[i], d));
        for (int j = 0; j < i; j++)
            CHECK(pool[i] != pool[j], "GPUs %d and %d share a default pool", i, j);
    }

    /* Memory is each GPU's: an allocation in GPU 1's context lowers GPU 1's free memory alone. */
    size_t free0 = 0, free1 = 0, total = 0, now = 0;
    CK(cuCtxSetCurrent(ctx[0]));
    CK(cuMemGetInfo(&free0, &total));
    CK(cuCtxSetCurrent(ctx[1]));
    CK(cuMemGetInfo(&free1, &total));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr on1 = 0, on2 = 0;
    CK(cuMemAllocAsync(&on1, 1 << 20, s)); /* the current context's GPU */
    CK(cuStreamSynchronize(s));
    CK(cuMemGetInfo(&now, &total));
    CHECK(now == free1 - (1 << 20), "GPU 1's free memory %zu after 1 MiB, was %zu", now, free1);
    CUdevice cur = -1;
    CK(cuCtxGetDevice(&cur));
    CHECK(cur == 1, "the current context's GPU is %d, not 1", cur);
    CK(cuCtxSetCurrent(ctx[0]));
    CK(cuMemGetInfo(&now, &total));
    CHECK(now == free0, "GPU 0's free memory changed from %zu to %zu by GPU 1's allocation", free0, now);
    /* More than one GPU holds is refused on it, not taken from another's. */
    CUdeviceptr big = 0;
    CK(cuCtxSetCurrent(ctx[1]));
    IS(cuMemAllocAsync(&big, 64u << 20, s), CUDA_ERROR_OUT_OF_MEMORY);
    /* From GPU 2's pool while GPU 1's context is current: the pool's GPU. */
    CK(cuMemAllocFromPoolAsync(&on2, 1 << 20, pool[2], s));
    CK(cuStreamSynchronize(s));
    CK(cuCtxSetCurrent(ctx[2]));
    size_t free2 = 0;
    CK(cuMemGetInfo(&free2, &total));
    CHECK(free2 == total - (1 << 20), "GPU 2's free memory %zu after 1 MiB from its pool", free2);

    /* Peer access: every pair may, a GPU not with itself; enabled once, disabled once. */
    int can = -1;
    CK(cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1, "GPU 0 cannot reach GPU 1");
    CK(cuDeviceCanAccessPeer(&can, 2, 2));
    CHECK(can == 0, "GPU 2 is its own peer");
    IS(cuDeviceCanAccessPeer(&can, 0, NGPUS), CUDA_ERROR_INVALID_DEVICE);
    int attr = -1;
    CK(cuDeviceGetP2PAttribute(&attr, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 3));
    CHECK(attr == 1, "P2P access not supported between 0 and 3");
    CK(cuCtxSetCurrent(ctx[0]));
    IS(cuCtxDisablePeerAccess(ctx[1]), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CK(cuCtxEnablePeerAccess(ctx[1], 0));
    IS(cuCtxEnablePeerAccess(ctx[1], 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    IS(cuCtxEnablePeerAccess(ctx[0], 0), CUDA_ERROR_INVALID_CONTEXT);
    IS(cuCtxEnablePeerAccess(ctx[2], 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxDisablePeerAccess(ctx[1]));

    /* A peer copy: GPU 1's memory to GPU 2's, each side named with its own context. */
    static unsigned pattern[1024] __attribute__((aligned(4096))), back[1024] __attribute__((aligned(4096)));
    CK(cuMemHostRegister(pattern, sizeof pattern, 0)); /* what the server copies from is pinned */
    CK(cuMemHostRegister(back, sizeof back, 0));
    for (int i = 0; i < 1024; i++)
        pattern[i] = 0xc0de0000u + (unsigned)i;
    memset(back, 0, sizeof back);
    CK(cuMemcpyHtoDAsync(on1, pattern, sizeof pattern, s));
    CK(cuMemcpyPeerAsync(on2, ctx[2], on1, ctx[1], sizeof pattern, s));
    CK(cuMemcpyDtoHAsync(back, on2, sizeof back, s));
    CK(cuStreamSynchronize(s));
    CHECK(!memcmp(pattern, back, sizeof back), "the peer copy did not carry the data");
    CK(cuMemHostUnregister(pattern));
    CK(cuMemHostUnregister(back));
    /* A side that is not its context's GPU's memory is refused. */
    IS(cuMemcpyPeerAsync(on2, ctx[1], on1, ctx[1], 16, s), CUDA_ERROR_INVALID_VALUE);
    IS(cuMemcpyPeerAsync(on2, NULL, on1, ctx[1], 16, s), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuMemFreeAsync(on1, s));
    CK(cuMemFreeAsync(on2, s));
    CK(cuStreamSynchronize(s));
    CK(cuStreamDestroy(s));
    CK(cuCtxSetCurrent(ctx[1]));
    CK(cuMemGetInfo(&now, &total));
    CHECK(now == free1, "GPU 1's memory not back after the free: %zu, was %zu", now, free1);
    for (int i = 0; i < NGPUS; i++)
        CK(cuDevicePrimaryCtxRelease(i));
    if (failures) {
        printf("FAIL fake_gpus: %d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS fake_gpus: %d GPUs, their memory, contexts, pools, peer access and a peer copy\n", NGPUS);
    return 0;
}
