/* The cost of a synchronizing call, the round trip a program pays each time it waits on the GPU (the
 * figure remote programs pay the network for, issue 45): median and 99th percentile of N tries of
 *   dtoh4   cuMemcpyDtoH of 4 bytes into pageable memory (staged: a message, a chunk, an answer)
 *   sync    cuMemsetD32Async of one word then cuStreamSynchronize (one-way work, then a wait)
 *   query   cuStreamQuery right after such a memset (asked until it says done)
 *   idle    the sync case after 5 ms of doing nothing each time (N/20 tries, at least 10): what a program
 *           that waits now and then pays, everything on the way having gone quiet (spin's 10 ms of kernels
 *           between synchronizes)
 * No kernels: it runs on the fake driver too. Checks the value read back each time.
 * usage: bench_roundtrip [N=2000]   (docs/performance.md: local against across the network) */
#include "bench_util.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, uint64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof *ns, cmp_u64);
    printf("%s_us_median=%.2f %s_us_p99=%.2f ", name, ns[n / 2] / 1e3, name, ns[(n * 99) / 100] / 1e3);
}

/* n timed tries (after `warm` untimed) of a one-word memset then cuStreamSynchronize, each after gap_ns of
 * doing nothing. */
static void sync_tries(CUdeviceptr d, CUstream s, uint64_t *ns, int warm, int n, long gap_ns)
{
    for (int i = -warm; i < n; i++) {
        if (gap_ns)
            nanosleep(&(struct timespec){0, gap_ns}, NULL);
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuMemsetD32Async(d, (unsigned)i, 1, s));
        BCK(cuStreamSynchronize(s));
        if (i >= 0)
            ns[i] = bench_ns(CLOCK_MONOTONIC) - t0;
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    if (n < 10 || n > 1000000)
        return 2;
    uint64_t *ns = malloc((size_t)n * sizeof *ns);
    if (!ns)
        return 1;
    bench_init();
    CUstream s;
    BCK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    BCK(cuMemAlloc(&d, 4096));

    for (int i = -10; i < n; i++) {
        unsigned v = 0;
        BCK(cuMemsetD32Async(d, (unsigned)i * 2654435761u, 1, s));
        BCK(cuStreamSynchronize(s));
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuMemcpyDtoH(&v, d, sizeof v));
        if (i >= 0)
            ns[i] = bench_ns(CLOCK_MONOTONIC) - t0;
        if (v != (unsigned)i * 2654435761u) {
            fprintf(stderr, "error: read back %u, expected %u\n", v, (unsigned)i * 2654435761u);
            return 1;
        }
    }
    report("dtoh4", ns, n);

    sync_tries(d, s, ns, 10, n, 0);
    report("sync", ns, n);

    for (int i = -10; i < n; i++) {
        BCK(cuMemsetD32Async(d, (unsigned)i, 1, s));
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        CUresult r;
        while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY)
            ;
        BCK(r);
        if (i >= 0)
            ns[i] = bench_ns(CLOCK_MONOTONIC) - t0;
    }
    report("query", ns, n);

    int idle_n = n / 20 < 10 ? 10 : n / 20;
    sync_tries(d, s, ns, 2, idle_n, 5000000);
    report("idle", ns, idle_n);
    printf("n=%d\n", n);
    BCK(cuMemFree(d));
    BCK(cuStreamDestroy(s));
    free(ns);
    return 0;
}
