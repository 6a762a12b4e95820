/* What a launch costs the thread that makes it, in the ways cumuxd's worker differs from a native program:
 * a library kernel launched as its CUkernel (the driver finds the context's function at each launch) or as
 * the function cuKernelGetFunction gave; several launchers at once, each on its own non-blocking stream, placed
 * as cumuxd's workers are (threads of one process in one context) or otherwise: threads each in a green
 * context of its own over every SM (CUMUX_GREEN_QUEUES), or processes each with its own context (native
 * programs, and NVIDIA MPS's clients, which have a driver each). A launch from one process's threads that
 * costs more than from separate processes is the shared driver's, and whether green contexts, which share
 * the primary context's memory as cumuxd needs, escape it says what cumuxd could do. The hardware queue count,
 * CUDA_DEVICE_MAX_CONNECTIONS (cumuxd sets 32, the driver's default is 8), is read when a context is made:
 * run the probe once per setting. The server's worker takes ~5.5 us a launch where a native program takes
 * ~4.5 (docs/performance.md); cumuxd's own code is 0.2 us of it.
 * Each launcher: batches of 256 launches of an empty kernel, timed without the synchronize that follows each
 * batch (so no queue fills); the median batch's time per launch, and the mean over the launchers.
 * Run on a GPU (bench/bench_kernels.fatbin of a build has empty_kernel):
 *   gcc -O2 -pthread -I/usr/local/cuda/include tools/probe_launch_cost.c -o /tmp/plc -lcuda &&
 *   for c in 8 32; do CUDA_DEVICE_MAX_CONNECTIONS=$c /tmp/plc build/bench/bench_kernels.fatbin; done */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_util.h"

enum { BATCH = 256, MAX_BATCHES = 300, MAX_THREADS = 4 };
static int batches = MAX_BATCHES; /* PROBE_BATCHES: fewer, for the flow's test on the fake driver */

/* Where a launcher's stream lives. */
enum place { SHARED_CTX, OWN_GREEN };

static CUdevice dev;
static CUcontext ctx;
static CUkernel kernel;
static CUfunction function;
static pthread_barrier_t start;

struct job {
    int as_kernel;
    enum place place;
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
    CUgreenCtx green = NULL;
    CUstream s;
    if (j->place == OWN_GREEN) {
        CK(cuCtxSetCurrent(ctx));
        CUdevResource sm;
        CUdevResourceDesc desc;
        CK(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
        CK(cuDevResourceGenerateDesc(&desc, &sm, 1));
        CK(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CK(cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0));
    } else {
        CK(cuCtxSetCurrent(ctx));
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    }
    CUfunction f = j->as_kernel ? (CUfunction)kernel : function;
    int x = 1;
    void *args[] = {&x};
    for (int i = 0; i < BATCH; i++) /* warm-up */
        CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
    double times[MAX_BATCHES];
    pthread_barrier_wait(&start);
    for (int b = 0; b < batches; b++) {
        double t0 = now_ms();
        for (int i = 0; i < BATCH; i++)
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        times[b] = (now_ms() - t0) * 1e6 / BATCH;
        CK(cuStreamSynchronize(s));
    }
    qsort(times, (size_t)batches, sizeof times[0], cmp_double);
    j->ns = times[batches / 2];
    CK(cuStreamDestroy(s));
    if (green)
        CK(cuGreenCtxDestroy(green));
    return NULL;
}

static double run(int threads, int as_kernel, enum place place)
{
    struct job jobs[MAX_THREADS];
    pthread_t t[MAX_THREADS];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        jobs[i].as_kernel = as_kernel;
        jobs[i].place = place;
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

static void load_kernel(const char *fatbin)
{
    ctx = probe_primary_context(&dev);
    char *img = probe_read_file(fatbin);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&kernel, lib, "empty_kernel"));
    CK(cuKernelGetFunction(&function, kernel));
}

/* N processes, each with its own driver and context, one launcher each, started together (a pipe each way):
 * what native programs and MPS's clients do. Forked before this process touches CUDA. */
static void by_processes(const char *fatbin, double out[MAX_THREADS + 1])
{
    for (int n = 1; n <= MAX_THREADS; n *= 2) {
        int ready[2], go[2], res[2];
        if (pipe(ready) || pipe(go) || pipe(res)) {
            printf("FAIL pipe\n");
            exit(1);
        }
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();
            if (pid < 0) {
                printf("FAIL fork\n");
                exit(1);
            }
            if (pid == 0) {
                load_kernel(fatbin);
                pthread_barrier_init(&start, NULL, 1);
                char b = 1;
                if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
                    _exit(1);
                struct job j = {.as_kernel = 1, .place = SHARED_CTX};
                launcher(&j);
                _exit(write(res[1], &j.ns, sizeof j.ns) == sizeof j.ns ? 0 : 1);
            }
        }
        close(ready[1]), close(go[0]), close(res[1]); /* so that a child that died reads as end of file */
        char b;
        for (int i = 0; i < n; i++)
            if (read(ready[0], &b, 1) != 1) {
                printf("FAIL a child did not start\n");
                exit(1);
            }
        for (int i = 0; i < n; i++)
            if (write(go[1], &b, 1) != 1)
                exit(1);
        double sum = 0;
        for (int i = 0; i < n; i++) {
            double ns;
            if (read(res[0], &ns, sizeof ns) != sizeof ns) {
                printf("FAIL a child did not report\n");
                exit(1);
            }
            sum += ns;
        }
        for (int i = 0; i < n; i++) {
            int st;
            if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
                printf("FAIL a child failed\n");
                exit(1);
            }
        }
        out[n] = sum / n;
        close(ready[0]), close(go[1]), close(res[0]);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: probe_launch_cost FATBIN (with empty_kernel(int))\n");
        return 2;
    }
    const char *nb = getenv("PROBE_BATCHES");
    if (nb && atoi(nb) > 0 && atoi(nb) <= MAX_BATCHES)
        batches = atoi(nb);
    double procs[MAX_THREADS + 1];
    by_processes(argv[1], procs);
    load_kernel(argv[1]);
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("launch host time, ns per launch (median batch of %d, mean over launchers), CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
           BATCH, conn ? conn : "unset");
    printf("%-9s %12s %12s %8s %12s %12s\n", "launchers", "function", "kernel", "k/f", "own green", "processes");
    printf("%-9s %12s %12s %8s %12s %12s\n", "", "one context", "one context", "", "kernel", "kernel");
    for (int threads = 1; threads <= MAX_THREADS; threads *= 2) {
        /* Each setting twice, in the order f k k f, so that a drift weighs on both alike. */
        double f1 = run(threads, 0, SHARED_CTX), k1 = run(threads, 1, SHARED_CTX);
        double g1 = run(threads, 1, OWN_GREEN), g2 = run(threads, 1, OWN_GREEN);
        double k2 = run(threads, 1, SHARED_CTX), f2 = run(threads, 0, SHARED_CTX);
        double f = (f1 + f2) / 2, k = (k1 + k2) / 2;
        printf("%-9d %12.0f %12.0f %8.3f %12.0f %12.0f\n", threads, f, k, k / f, (g1 + g2) / 2, procs[threads]);
    }
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
