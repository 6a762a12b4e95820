/* What a launch costs the thread that makes it, in the ways cumuxd's worker differs from a native program:
 * a library kernel launched as its CUkernel (the driver finds the context's function at each launch) or as
 * the function cuKernelGetFunction gave; one thread launching into the context, or several at once, each on
 * its own non-blocking stream (cumuxd's workers share one context; a native program has its own); and the
 * hardware queue count, CUDA_DEVICE_MAX_CONNECTIONS (cumuxd sets 32, the driver's default is 8), which the
 * driver reads when the context is made: run the probe once per setting. The server's worker takes ~5.5 us
 * a launch where a native program takes ~4.5 (docs/performance.md); cumuxd's own code is 0.2 us of it.
 * Each thread: batches of 256 launches of an empty kernel, timed without the synchronize that follows each
 * batch (so no queue fills); the median batch's time per launch, and the mean over the threads.
 * Run on a GPU (bench/bench_kernels.fatbin of a build has empty_kernel):
 *   gcc -O2 -pthread -I/usr/local/cuda/include tools/probe_launch_cost.c -o /tmp/plc -lcuda &&
 *   for c in 8 32; do CUDA_DEVICE_MAX_CONNECTIONS=$c /tmp/plc build/bench/bench_kernels.fatbin; done */
#include <pthread.h>

#include "probe_util.h"

enum { BATCH = 256, BATCHES = 300, MAX_THREADS = 4 };

static CUcontext ctx;
static CUkernel kernel;
static CUfunction function;
static pthread_barrier_t start;

struct job {
    int as_kernel;
    double ns; /* the median batch's time per launch */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *launcher(void *arg)
{
    struct job *j = arg;
    CK(cuCtxSetCurrent(ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUfunction f = j->as_kernel ? (CUfunction)kernel : function;
    int x = 1;
    void *args[] = {&x};
    for (int i = 0; i < BATCH; i++) /* warm-up */
        CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
    double times[BATCHES];
    pthread_barrier_wait(&start);
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ms();
        for (int i = 0; i < BATCH; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        times[b] = (now_ms() - t0) * 1e6 / BATCH;
        CK(cuStreamSynchronize(s));
    }
    qsort(times, BATCHES, sizeof times[0], cmp_double);
    j->ns = times[BATCHES / 2];
    CK(cuStreamDestroy(s));
    return NULL;
}

static double run(int threads, int as_kernel)
{
    struct job jobs[MAX_THREADS];
    pthread_t t[MAX_THREADS];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        jobs[i].as_kernel = as_kernel;
        if (pthread_create(&t[i], NULL, launcher, &jobs[i])) {
            printf("FAIL pthread_create\n");
            exit(1);
        }
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        sum += jobs[i].ns;
    }
    pthread_barrier_destroy(&start);
    return sum / threads;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: probe_launch_cost FATBIN (with empty_kernel(int))\n");
        return 2;
    }
    CUdevice dev;
    ctx = probe_primary_context(&dev);
    char *img = probe_read_file(argv[1]);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&kernel, lib, "empty_kernel"));
    CK(cuKernelGetFunction(&function, kernel));
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("launch host time, ns per launch (median batch of %d, mean over threads), CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
           BATCH, conn ? conn : "unset");
    printf("%-8s %12s %12s %8s\n", "threads", "function", "kernel", "k/f");
    for (int threads = 1; threads <= MAX_THREADS; threads *= 2) {
        /* Each setting twice, in the order f k k f, so that a drift weighs on both alike. */
        double f1 = run(threads, 0), k1 = run(threads, 1), k2 = run(threads, 1), f2 = run(threads, 0);
        double f = (f1 + f2) / 2, k = (k1 + k2) / 2;
        printf("%-8d %12.0f %12.0f %8.3f\n", threads, f, k, k / f);
    }
    CK(cuLibraryUnload(lib));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
