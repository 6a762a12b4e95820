/* Synchronous copy bandwidth, H2D and D2H, from pinned (cuMemAllocHost) and pageable (malloc,
 * touched first) memory; median of REPS copies, GB/s = 1e9 bytes/s.
 * usage: bench_copy [MIB=256] [REPS=10] */
#include "bench_util.h"

static double timed(int h2d, CUdeviceptr d, void *h, size_t n, int reps)
{
    double gbs[100];
    if (h2d) /* warm-up */
        BCK(cuMemcpyHtoD(d, h, n));
    else
        BCK(cuMemcpyDtoH(h, d, n));
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        if (h2d)
            BCK(cuMemcpyHtoD(d, h, n));
        else
            BCK(cuMemcpyDtoH(h, d, n));
        gbs[r] = (double)n / (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    return bench_median(gbs, reps);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (mib < 1 || reps < 1 || reps > 100)
        return 2;
    size_t n = mib << 20;

    bench_init();
    CUdeviceptr d;
    BCK(cuMemAlloc(&d, n));
    void *pinned;
    BCK(cuMemAllocHost(&pinned, n));
    unsigned char *pageable = malloc(n);
    if (!pageable)
        return 1;
    for (size_t i = 0; i < n; i++)
        pageable[i] = (unsigned char)(i * 131u + 7u);
    memcpy(pinned, pageable, n);

    double h2d_pin = timed(1, d, pinned, n, reps);
    double d2h_pin = timed(0, d, pinned, n, reps);
    double h2d_page = timed(1, d, pageable, n, reps);
    double d2h_page = timed(0, d, pageable, n, reps);

    /* The copies must also be right: pinned -> device -> pageable. */
    memset(pageable, 0, n);
    BCK(cuMemcpyHtoD(d, pinned, n));
    BCK(cuMemcpyDtoH(pageable, d, n));
    if (memcmp(pinned, pageable, n) != 0) {
        fprintf(stderr, "error: copied data differs\n");
        return 1;
    }
    printf("h2d_pinned_gbs=%.2f d2h_pinned_gbs=%.2f h2d_pageable_gbs=%.2f d2h_pageable_gbs=%.2f mib=%zu reps=%d\n",
           h2d_pin, d2h_pin, h2d_page, d2h_page, mib, reps);
    BCK(cuMemFreeHost(pinned));
    BCK(cuMemFree(d));
    free(pageable);
    return 0;
}
