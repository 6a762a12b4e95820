/* How faithfully events time a piece of work, the way cuDNN's benchmark mode times each candidate plan
 * (cudnn_frontend time_sorted_plan, which PyTorch samples once per plan): synchronize, record a start
 * event, launch the plan's kernels with the library's host work between them, record a stop event, wait
 * for it, read the elapsed time. A plan's time is its kernels' GPU time plus whatever the GPU waits for the
 * host; anything more (a server that must be woken before it launches) is noise in the ranking that picks
 * which kernels a program then runs for its whole life.
 * Each case: K kernels of about 50 us (spin_cycles, 100,000 SM clocks), HOST_GAP us of host busy work after
 * the start record and between launches; REPS samples; prints the median, p90 and largest elapsed time.
 * Then "lib": one kernel after the questions a library asks before it (attributes, a set, tensor maps).
 * Last, "plan": the shape of a cuDNN candidate as `cumux trace` shows them in a ResNet-50's search (a small
 * memset, then three kernels over the whole GPU, 2 blocks per SM of ~10 us each, the second launched with
 * cuLaunchKernelEx in clusters of 2), no host work between: where the GPU waits on each launch's arrival.
 * usage: bench_event_timing [REPS=200] */
#include <stdbool.h>

#include "bench_util.h"

struct span_case {
    const char *name;
    unsigned kernels, gap_us;
    bool library; /* before its kernel, the questions a library asks (the "lib" case) */
    bool plan;    /* a memset and three short whole-GPU kernels instead (the "plan" case) */
};

static CUfunction fn;
static void *args[1], *short_args[1];
static CUdeviceptr buf;
static unsigned sms;

/* The "plan" case's work, on the legacy stream as PyTorch's current stream is; the first error, so that
 * a GPU without clusters skips the case rather than the whole table. */
static CUresult plan_work(void)
{
    CUresult r = cuMemsetD8Async(buf, 0, 4, NULL);
    if (r == CUDA_SUCCESS)
        r = cuLaunchKernel(fn, 2 * sms, 1, 1, 128, 1, 1, 0, NULL, short_args, NULL);
    CUlaunchAttribute cluster = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    cluster.value.clusterDim.x = 2;
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {.gridDimX = 2 * sms, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                          .blockDimZ = 1, .hStream = NULL, .attrs = &cluster, .numAttrs = 1};
    if (r == CUDA_SUCCESS)
        r = cuLaunchKernelEx(&cfg, fn, short_args, NULL);
    if (r == CUDA_SUCCESS)
        r = cuLaunchKernel(fn, 2 * sms, 1, 1, 128, 1, 1, 0, NULL, short_args, NULL);
    return r;
}

/* The questions as cuDNN asks them before a Hopper kernel, the same each time: attributes, the dynamic
 * shared memory size set again, four tensor maps of its operands. */
static void library_questions(void)
{
    cuuint64_t dim[2] = {256, 256}, strides[1] = {256 * sizeof(float)};
    cuuint32_t box[2] = {32, 32}, es[2] = {1, 1};
    int a;
    BCK(cuFuncGetAttribute(&a, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
    BCK(cuFuncGetAttribute(&a, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    BCK(cuFuncGetAttribute(&a, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
    BCK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    for (int m = 0; m < 4; m++) {
        CUtensorMap map;
        BCK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)(buf + 65536 * m), dim,
                                   strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    }
}

/* One sample: synchronize, start event, the case's host work and kernels, stop event; microseconds. */
static double sample(const struct span_case *c, CUevent start, CUevent stop)
{
    BCK(cuCtxSynchronize());
    BCK(cuEventRecord(start, NULL));
    if (c->plan)
        BCK(plan_work());
    for (unsigned k = 0; k < c->kernels; k++) {
        bench_busy_us(c->gap_us);
        if (c->library)
            library_questions();
        BCK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    }
    BCK(cuEventRecord(stop, NULL));
    BCK(cuEventSynchronize(stop));
    float ms;
    BCK(cuEventElapsedTime(&ms, start, stop));
    return ms * 1000.0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 10 || reps > 100000)
        return 2;
    bench_init();
    fn = bench_function("spin_cycles");
    long long cycles = 100000, short_cycles = 20000;
    args[0] = &cycles;
    short_args[0] = &short_cycles;
    CUdevice dev;
    int n_sm = 0;
    BCK(cuCtxGetDevice(&dev));
    BCK(cuDeviceGetAttribute(&n_sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    sms = n_sm > 0 ? (unsigned)n_sm : 1;
    CUevent start, stop;
    BCK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    BCK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    BCK(cuMemAlloc(&buf, 1 << 20));
    BCK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL)); /* loaded before anything is timed */
    BCK(cuCtxSynchronize());

    static const struct span_case cases[] = {
        {"k1_g0", 1, 0, false, false},   {"k1_g30", 1, 30, false, false}, {"k1_g80", 1, 80, false, false},
        {"k1_g300", 1, 300, false, false}, {"k3_g0", 3, 0, false, false},  {"k3_g80", 3, 80, false, false},
        {"k1_lib", 1, 0, true, false}, {"plan", 0, 0, false, true},
    };
    double *v = malloc((size_t)reps * sizeof *v);
    if (!v)
        return 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CUresult tried = cases[c].plan ? plan_work() : CUDA_SUCCESS;
        if (tried == CUDA_SUCCESS && cases[c].plan)
            tried = cuCtxSynchronize();
        if (tried != CUDA_SUCCESS) {
            printf("evtime_%s skipped: its work returned %d\n", cases[c].name, (int)tried);
            continue;
        }
        for (int i = 0; i < reps; i++)
            v[i] = sample(&cases[c], start, stop);
        double med = bench_median(v, reps); /* sorts v */
        printf("evtime_%s med_us=%.1f p90_us=%.1f max_us=%.1f\n", cases[c].name, med, v[reps * 9 / 10], v[reps - 1]);
        /* The table's keys, one per line: NAME=VALUE. */
        printf("evtime_%s_med_us=%.1f\nevtime_%s_p90_us=%.1f\n", cases[c].name, med, cases[c].name, v[reps * 9 / 10]);
    }
    free(v);
    BCK(cuMemFree(buf));
    BCK(cuEventDestroy(start));
    BCK(cuEventDestroy(stop));
    return 0;
}
