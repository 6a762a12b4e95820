/* One process of the spin benchmark: 16 blocks x 128 threads spinning 2,000,000 cycles, 10 launches
 * then a stream synchronize, in a loop. All processes share a wall-clock start time and count the
 * launches completed inside [start, start + duration]. BLOCKS: another grid (issue 13's many clients use 4).
 * usage: bench_spin START_REALTIME_NS DURATION_S [CYCLES [BLOCKS]] */
#include "bench_util.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s START_REALTIME_NS DURATION_S [CYCLES]\n", argv[0]);
        return 2;
    }
    uint64_t start = strtoull(argv[1], NULL, 10);
    double dur = strtod(argv[2], NULL);
    long long cycles = argc > 3 ? strtoll(argv[3], NULL, 10) : 2000000;
    unsigned blocks = argc > 4 ? (unsigned)strtoul(argv[4], NULL, 10) : 16;
    if (blocks == 0)
        blocks = 16;
    uint64_t end = start + (uint64_t)(dur * 1e9);

    bench_init();
    CUfunction fn = bench_function("spin_cycles");
    void *args[] = {&cycles};
    BCK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, NULL, args, NULL)); /* warm-up */
    BCK(cuStreamSynchronize(NULL));

    uint64_t now = bench_ns(CLOCK_REALTIME);
    double late_ms = now > start ? (double)(now - start) / 1e6 : 0.0;
    while ((now = bench_ns(CLOCK_REALTIME)) < start) {
        uint64_t left = start - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    long launches = 0;
    for (;;) {
        for (int i = 0; i < 10; i++)
            BCK(cuLaunchKernel(fn, blocks, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        BCK(cuStreamSynchronize(NULL));
        if (bench_ns(CLOCK_REALTIME) > end)
            break;
        launches += 10;
    }
    printf("spin launches=%ld window_s=%.3f launches_per_s=%.1f late_ms=%.1f\n", launches, dur,
           (double)launches / dur, late_ms);
    return 0;
}
