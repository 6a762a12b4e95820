/* sgemm_loop: one process of the cuBLAS throughput benchmark (tests/runtime/bench_sgemm.sh). SGEMMs of
 * N x N (default 512) in a loop, a stream synchronization every 20, counted inside a wall-clock window
 * that all processes share: [START, START + DURATION] (CLOCK_REALTIME, as bench/bench_spin.c).
 * After the window, one product is checked against the CPU on 64 sampled elements.
 * usage: rt_sgemm_loop_{static,shared} START_REALTIME_NS DURATION_S [N]
 *   START 0: start now.
 * Prints: sgemm iters=I window_s=D iters_per_s=R gflops=G late_ms=L */
#include "rt_test.h"

#include <cublas_v2.h>

static void cb_check(cublasStatus_t st, const char *what, int line)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        rt_fail("line %d: %s returned %d (%s)", line, what, (int)st, cublasGetStatusName(st));
}
#define CB(call) cb_check((call), #call, __LINE__)

int main(int argc, char **argv)
{
    rt_begin("sgemm_loop");
    if (argc < 3) {
        fprintf(stderr, "usage: %s START_REALTIME_NS DURATION_S [N]\n", argv[0]);
        return 2;
    }
    uint64_t start = strtoull(argv[1], NULL, 10);
    double dur = strtod(argv[2], NULL);
    int n = argc > 3 ? atoi(argv[3]) : 512;
    if (dur <= 0 || n <= 0)
        rt_fail("bad arguments: duration %s, n %d", argv[2], n);
    rt_require_gpu();

    const size_t elems = (size_t)n * n;
    float *A = (float *)rt_malloc(elems * 4), *B = (float *)rt_malloc(elems * 4), *C = (float *)rt_malloc(elems * 4);
    rt_fill_float(A, elems, 1, 1.0f);
    rt_fill_float(B, elems, 2, 1.0f);
    float *dA, *dB, *dC;
    CK(cudaMalloc((void **)&dA, elems * 4));
    CK(cudaMalloc((void **)&dB, elems * 4));
    CK(cudaMalloc((void **)&dC, elems * 4));
    CK(cudaMemcpy(dA, A, elems * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, elems * 4, cudaMemcpyHostToDevice));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CB(cublasSetStream(h, s));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    const float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < 20; i++) /* warm-up: library load, kernel selection */
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n, dB, n, &beta, dC, n));
    CK(cudaStreamSynchronize(s));

    uint64_t now = rt_now_ns(CLOCK_REALTIME);
    if (start == 0)
        start = now;
    double late_ms = now > start ? (double)(now - start) / 1e6 : 0.0;
    while ((now = rt_now_ns(CLOCK_REALTIME)) < start) {
        uint64_t left = start - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    const uint64_t end = start + (uint64_t)(dur * 1e9);
    long iters = 0;
    for (;;) {
        for (int i = 0; i < 20; i++)
            CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n, dB, n, &beta, dC, n));
        CK(cudaStreamSynchronize(s));
        if (rt_now_ns(CLOCK_REALTIME) > end)
            break;
        iters += 20;
    }

    /* The last product, sampled. */
    CK(cudaMemcpy(C, dC, elems * 4, cudaMemcpyDeviceToHost));
    rt_rng r;
    rt_rng_seed(&r, 3);
    for (int t = 0; t < 64; t++) {
        int i = (int)(rt_rng_next(&r) % (uint64_t)n), j = (int)(rt_rng_next(&r) % (uint64_t)n);
        double sum = 0, mag = 0;
        for (int l = 0; l < n; l++) {
            double x = (double)A[i + (size_t)l * n] * B[l + (size_t)j * n];
            sum += x;
            mag += fabs(x);
        }
        double got = C[i + (size_t)j * n];
        if (!(fabs(got - sum) <= (n * 1.2e-7 + 1e-6) * mag))
            rt_fail("C(%d,%d) = %.9g, expected %.9g", i, j, got, sum);
    }
    printf("sgemm iters=%ld window_s=%.3f iters_per_s=%.1f gflops=%.1f late_ms=%.1f n=%d\n", iters, dur,
           (double)iters / dur, 2.0 * n * n * (double)n * (double)iters / dur / 1e9, late_ms, n);
    CB(cublasDestroy(h));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    free(A);
    free(B);
    free(C);
    rt_pass();
}
