/* Launch rate and call latency from one process:
 *  - empty kernel <<<1,1>>>(int) launched N times on the legacy stream, then a context sync (median of reps);
 *  - median round trip of cuStreamQuery and cuCtxSynchronize with no work pending (under cumux answered from
 *    what is known of the stream, when nothing was sent since the last answer);
 *  - the same question when it must be asked (a one-way event record on another stream just before:
 *    query_asked_ns: includes the server's handling of that record); the round trip alone of such a
 *    question, the record given 30 us to be done first (query_rt_ns, ctx_sync_rt_ns); and a launch of the
 *    empty kernel followed by its stream's synchronize (launch_sync_ns: the latency of the smallest piece
 *    of GPU work).
 * usage: bench_launch [LAUNCHES=200000] [REPS=5] [CALLS=20000] */
#include "bench_util.h"

/* Median time of a question (cuStreamQuery of `own`, or cuCtxSynchronize when own is NULL) asked 30 us
 * after an event record on `other`. */
static double question_after_record(CUevent ev, CUstream other, CUstream own, double *lat, int calls)
{
    for (int i = 0; i < calls; i++) {
        BCK(cuEventRecord(ev, other));
        bench_busy_us(30);
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(own ? cuStreamQuery(own) : cuCtxSynchronize());
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    return bench_median(lat, calls);
}

int main(int argc, char **argv)
{
    long launches = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    int calls = argc > 3 ? atoi(argv[3]) : 20000;
    if (launches < 1 || reps < 1 || reps > 100 || calls < 1)
        return 2;

    bench_init();
    CUfunction fn = bench_function("empty_kernel");
    int x = 1;
    void *args[] = {&x};
    for (int i = 0; i < 1000; i++) /* warm-up */
        BCK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    BCK(cuCtxSynchronize());

    double rate[100];
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        for (long i = 0; i < launches; i++)
            BCK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        BCK(cuCtxSynchronize());
        rate[r] = (double)launches / ((double)(bench_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        printf("rep %d: %.0f launches/s\n", r, rate[r]);
    }
    double launch_rate = bench_median(rate, reps);
    /* Host time of one launch call: batches short enough never to fill a queue, timed without the sync. */
    enum { BATCH = 256, BATCHES = 400 };
    double per[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < BATCH; i++)
            BCK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        per[b] = (double)(bench_ns(CLOCK_MONOTONIC) - t0) / BATCH;
        BCK(cuCtxSynchronize());
    }
    double launch_call_ns = bench_median(per, BATCHES);

    double *lat = malloc(sizeof(double) * (size_t)calls);
    if (!lat)
        return 1;
    for (int i = 0; i < calls; i++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuStreamQuery(NULL));
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    double query_ns = bench_median(lat, calls);
    /* The same on a stream of the program's own: under cumux every stream, the legacy one included, is
     * such a stream in the server, so this is the driver's share of the round trip. */
    CUstream own;
    BCK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < calls; i++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuStreamQuery(own));
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    double query_own_ns = bench_median(lat, calls);
    CUstream other;
    CUevent ev;
    BCK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    BCK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < calls; i++) {
        BCK(cuEventRecord(ev, other));
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuStreamQuery(own));
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    double query_asked_ns = bench_median(lat, calls);
    /* The same after the record has had time to be done (30 us), alone the question's round trip: under
     * cumux the message, the worker's driver call on a stream it cannot know idle, and the answer. */
    double query_rt_ns = question_after_record(ev, other, own, lat, calls);
    double ctx_sync_rt_ns = question_after_record(ev, other, NULL, lat, calls);
    for (int i = 0; i < calls; i++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, own, args, NULL));
        BCK(cuStreamSynchronize(own));
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    double launch_sync_ns = bench_median(lat, calls);
    BCK(cuEventDestroy(ev));
    BCK(cuStreamDestroy(other));
    BCK(cuStreamDestroy(own));
    for (int i = 0; i < calls; i++) {
        uint64_t t0 = bench_ns(CLOCK_MONOTONIC);
        BCK(cuCtxSynchronize());
        lat[i] = (double)(bench_ns(CLOCK_MONOTONIC) - t0);
    }
    double sync_ns = bench_median(lat, calls);
    free(lat);
    printf("launch_rate=%.0f launch_call_ns=%.0f stream_query_ns=%.0f stream_query_own_ns=%.0f ctx_sync_ns=%.0f "
           "query_asked_ns=%.0f query_rt_ns=%.0f ctx_sync_rt_ns=%.0f launch_sync_ns=%.0f\n",
           launch_rate, launch_call_ns, query_ns, query_own_ns, sync_ns, query_asked_ns, query_rt_ns, ctx_sync_rt_ns,
           launch_sync_ns);
    return 0;
}
