/* Issue 12's benchmark, one process of it:
 *   bench_latency latency START_REALTIME_NS DURATION_S [KERNEL_US] [--greatest]
 *     a latency-critical client: one small kernel (1 block of 32 threads spinning KERNEL_US, default 20)
 *     then a stream synchronize, in a loop; prints the median, 99th percentile and mean of each round
 *     trip in microseconds. --greatest: its stream at the device's greatest priority (natively the only way
 *     to ask; under cumux `cumux run --priority high` does it for every stream).
 *   bench_latency load START_REALTIME_NS DURATION_S [BLOCK_US]
 *     a training-like neighbour: grids that fill every SM (8 blocks of 256 threads an SM) whose blocks spin
 *     BLOCK_US (default 500), 4 launches then a synchronize, in a loop; prints grids per second.
 * Both wait for the common start and count only what falls inside [start, start + duration]. */
#include <stdbool.h>
#include <string.h>

#include "bench_util.h"

static long long cycles_for_us(CUdevice dev, double us)
{
    int khz = 0;
    BCK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    return (long long)(us * khz / 1000.0);
}

static void wait_start(uint64_t start)
{
    uint64_t now;
    while ((now = bench_ns(CLOCK_REALTIME)) < start) {
        uint64_t left = start - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "latency") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "usage: %s latency|load START_REALTIME_NS DURATION_S [US] [--greatest]\n", argv[0]);
        return 2;
    }
    bool latency = !strcmp(argv[1], "latency");
    uint64_t start = strtoull(argv[2], NULL, 10);
    double dur = strtod(argv[3], NULL);
    double us = argc > 4 && argv[4][0] != '-' ? strtod(argv[4], NULL) : (latency ? 20 : 500);
    bool greatest = argc > 4 && !strcmp(argv[argc - 1], "--greatest");
    uint64_t end = start + (uint64_t)(dur * 1e9);
    bench_init();
    CUdevice dev;
    BCK(cuCtxGetDevice(&dev));
    CUfunction fn = bench_function("spin_cycles");
    long long cycles = cycles_for_us(dev, us);
    void *args[] = {&cycles};
    int least = 0, great = 0, sms = 0;
    BCK(cuCtxGetStreamPriorityRange(&least, &great));
    BCK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CUstream s;
    BCK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest ? great : least));
    unsigned grid = latency ? 1 : (unsigned)sms * 8, block = latency ? 32 : 256;
    BCK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, s, args, NULL)); /* warm-up */
    BCK(cuStreamSynchronize(s));
    wait_start(start);
    if (!latency) {
        long grids = 0;
        for (;;) {
            for (int i = 0; i < 4; i++)
                BCK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
            BCK(cuStreamSynchronize(s));
            if (bench_ns(CLOCK_REALTIME) > end)
                break;
            grids += 4;
        }
        printf("load grids=%ld grids_per_s=%.1f block_us=%.0f grid=%u\n", grids, grids / dur, us, grid);
        return 0;
    }
    size_t cap = 1 << 20, n = 0;
    double *lat = malloc(cap * sizeof *lat), sum = 0;
    if (!lat)
        return 1;
    while (n < cap) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
        BCK(cuStreamSynchronize(s));
        uint64_t t1 = bench_ns(CLOCK_MONOTONIC);
        if (bench_ns(CLOCK_REALTIME) > end)
            break;
        lat[n++] = (double)(t1 - t0) / 1e3;
        sum += (double)(t1 - t0) / 1e3;
    }
    if (n == 0) {
        printf("latency rounds=0\n");
        return 1;
    }
    qsort(lat, n, sizeof *lat, bench_cmp_double);
    printf("latency rounds=%zu p50_us=%.1f p99_us=%.1f mean_us=%.1f kernel_us=%.0f stream_priority=%d\n", n,
           lat[n / 2], lat[(size_t)((double)n * 0.99)], sum / (double)n, us, greatest ? great : least);
    free(lat);
    return 0;
}
