/* Does the same kernel run slower depending on where its memory came from or which stream runs it (issue 9:
 * under cumux a GPU-bound training, a matrix product and a streaming add ran 2-4 % slower than natively,
 * at the same clocks)? Natively and under `cumux run`, with the same binary:
 *   memory: cuMemAlloc, the device's default pool (cuMemAllocFromPoolAsync), cuMemCreate + cuMemMap without
 *           and with a POSIX file-descriptor handle type
 *   stream: the legacy default stream, a non-blocking stream, the same at the greatest and least priority
 * For each pair: a streaming add over 1 GiB (GB/s), and once per stream an FMA loop that touches no memory
 * (TFLOP/s). Then the way a training loop runs: 5 streaming adds, then a wait (cuCtxSynchronize,
 * cuStreamSynchronize, cuEventSynchronize), over and over for 2 s, timed on the CPU's clock: GB/s as the
 * program sees it, waits included. Build: nvcc -O2 -arch=sm_90 tools/probe_exec_speed.cu -o probe_exec_speed -lcuda */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                          \
    do {                                                                                               \
        CUresult r_ = (x);                                                                             \
        if (r_) {                                                                                      \
            const char *s_ = "?";                                                                      \
            cuGetErrorName(r_, &s_);                                                                   \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #x, s_);                                      \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

__global__ void add_one(float4 *a, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = a[i];
        v.x += 1.f, v.y += 1.f, v.z += 1.f, v.w += 1.f;
        a[i] = v;
    }
}

__global__ void fma_loop(float *out, int iters)
{
    float x = threadIdx.x, y = 1.0001f, z = 0.5f, w = blockIdx.x;
    for (int i = 0; i < iters; i++) {
        x = fmaf(x, y, z);
        w = fmaf(w, y, z);
        z = fmaf(z, y, x);
        y = fmaf(y, 0.9999f, 0.0001f);
    }
    if (x + w + z + y == 1234.5f) /* never in practice: keeps the loop */
        out[0] = x;
}

static const size_t BYTES = 1ull << 30;

/* The GPU's time for what run() queues on s (after one untimed warm-up call of it), in ms. */
template <typename F> static float gpu_ms(CUstream s, F run)
{
    CUevent a, b;
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    run(true);
    CK(cuEventRecord(a, s));
    run(false);
    CK(cuEventRecord(b, s));
    CK(cuEventSynchronize(b));
    float ms;
    CK(cuEventElapsedTime(&ms, a, b));
    cuEventDestroy(a);
    cuEventDestroy(b);
    return ms;
}

static double stream_add(CUdeviceptr p, CUstream s, int sms)
{
    size_t n = BYTES / sizeof(float4);
    const int reps = 40;
    float ms = gpu_ms(s, [&](bool warm) {
        for (int i = 0; i < (warm ? 1 : reps); i++)
            add_one<<<sms * 8, 512, 0, (cudaStream_t)s>>>((float4 *)p, n);
    });
    return 2.0 * BYTES * reps / (ms / 1e3) / 1e9;
}

static double fma_rate(CUdeviceptr p, CUstream s, int sms)
{
    const int iters = 20000, blocks = sms * 16, threads = 256;
    float ms = gpu_ms(s, [&](bool warm) {
        fma_loop<<<blocks, threads, 0, (cudaStream_t)s>>>((float *)p, warm ? 100 : iters);
    });
    return 8.0 * iters * blocks * threads / (ms / 1e3) / 1e12;
}

/* Rounds of 5 adds then a wait of the given kind, for 2 s: GB/s by the CPU's clock. */
static double cycles(CUdeviceptr p, int sms, int kind)
{
    size_t n = BYTES / sizeof(float4);
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CK(cuCtxSynchronize());
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long adds = 0;
    double el;
    do {
        for (int i = 0; i < 5; i++, adds++)
            add_one<<<sms * 8, 512>>>((float4 *)p, n);
        if (kind == 0)
            CK(cuCtxSynchronize());
        else if (kind == 1)
            CK(cuStreamSynchronize(NULL));
        else {
            CK(cuEventRecord(e, NULL));
            CK(cuEventSynchronize(e));
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        el = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
    } while (el < 2.0);
    cuEventDestroy(e);
    return 2.0 * BYTES * adds / el / 1e9;
}

int main(void)
{
    if (cudaFree(0) != cudaSuccess) { /* the runtime's primary context, as the kernels' launches use */
        printf("SKIP probe_exec_speed: no CUDA device\n");
        return 77;
    }
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    int sms;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    int least, greatest;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CUstream streams[4] = {NULL};
    const char *snames[4] = {"legacy", "nonblocking", "prio-greatest", "prio-least"};
    CK(cuStreamCreate(&streams[1], CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreateWithPriority(&streams[2], CU_STREAM_NON_BLOCKING, greatest));
    CK(cuStreamCreateWithPriority(&streams[3], CU_STREAM_NON_BLOCKING, least));

    const char *mnames[4] = {"cuMemAlloc", "pool", "vmm", "vmm-fd"};
    CUdeviceptr ptr[4] = {0};
    CK(cuMemAlloc(&ptr[0], BYTES));
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, dev));
    CK(cuMemAllocFromPoolAsync(&ptr[1], BYTES, pool, NULL));
    CK(cuStreamSynchronize(NULL));
    CUmemGenericAllocationHandle h[2];
    for (int k = 0; k < 2; k++) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        prop.requestedHandleTypes = k ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
        CUresult r = cuMemCreate(&h[k], BYTES, &prop, 0);
        if (r != CUDA_SUCCESS) {
            const char *s = "?";
            cuGetErrorName(r, &s);
            printf("PROBE %s: cuMemCreate %s\n", mnames[2 + k], s);
            continue;
        }
        CK(cuMemAddressReserve(&ptr[2 + k], BYTES, 0, 0, 0));
        CK(cuMemMap(ptr[2 + k], BYTES, 0, h[k], 0));
        CUmemAccessDesc acc = {};
        acc.location = prop.location;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CK(cuMemSetAccess(ptr[2 + k], BYTES, &acc, 1));
    }
    for (int m = 0; m < 4; m++)
        if (ptr[m])
            CK(cuMemsetD32(ptr[m], 0, BYTES / 4));
    CK(cuCtxSynchronize());
    for (int round = 0; round < 2; round++) {
        for (int m = 0; m < 4; m++) {
            if (!ptr[m])
                continue;
            printf("PROBE round=%d memory=%-10s", round, mnames[m]);
            for (int s = 0; s < 4; s++)
                printf(" %s=%.0fGB/s", snames[s], stream_add(ptr[m], streams[s], sms));
            printf("\n");
        }
        printf("PROBE round=%d fma", round);
        for (int s = 0; s < 4; s++)
            printf(" %s=%.2fTF/s", snames[s], fma_rate(ptr[0], streams[s], sms));
        printf("\n");
    }
    const char *wnames[3] = {"ctx-sync", "stream-sync", "event-sync"};
    printf("PROBE cycles of 5 adds then a wait, GB/s by the CPU's clock:");
    for (int k = 0; k < 3; k++)
        printf(" %s=%.0f", wnames[k], cycles(ptr[0], sms, k));
    printf("\n");
    /* Under cumux a context's synchronize looked at every stream of the context: with the three idle
     * streams gone, does it cost what a stream's does? */
    for (int s = 1; s < 4; s++)
        CK(cuStreamDestroy(streams[s]));
    printf("PROBE cycles with the legacy stream alone: ctx-sync=%.0f\n", cycles(ptr[0], sms, 0));
    /* Every add landed: each buffer holds the number of adds made to it (1 + 40 per stream per round). */
    float v[4];
    for (int m = 0; m < 4; m++) {
        if (!ptr[m])
            continue;
        CK(cuMemcpyDtoH(v, ptr[m] + BYTES - sizeof v, sizeof v));
        if (m == 0) /* the cycles' adds too: whole rounds of 5 */
            v[3] -= 2 * 4 * 41;
        if (m == 0 ? (v[3] <= 0 || (int)v[3] % 5 != 0) : v[3] != 2 * 4 * 41) {
            printf("FAIL probe_exec_speed: %s holds %g, not %d\n", mnames[m], v[3], 2 * 4 * 41);
            return 1;
        }
    }
    printf("PROBE done\n");
    return 0;
}
