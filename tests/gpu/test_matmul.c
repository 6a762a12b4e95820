/* Tiled matrix multiply 512x384x256 vs a double-precision CPU reference; module via cuModuleLoad(path). */
#include <math.h>
#include <stdlib.h>

#include "gpu_test.h"

#define M 512
#define N 384
#define K 256

int main(void)
{
    gt_begin("matmul");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);

    CUmodule mod;
    CK(cuModuleLoad(&mod, GT_FATBIN));
    CUfunction fn = gt_function(mod, "matmul_tiled");

    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N);
    double *ref = malloc(sizeof(double) * M * N), *mag = malloc(sizeof(double) * M * N);
    if (!A || !B || !C || !ref || !mag)
        gt_fail("out of host memory");
    gt_rng r;
    gt_rng_seed(&r, 777);
    for (int i = 0; i < M * K; i++)
        A[i] = gt_rng_float(&r);
    for (int i = 0; i < K * N; i++)
        B[i] = gt_rng_float(&r);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)A[i * K + k] * (double)B[k * N + j];
                s += p;
                m += fabs(p);
            }
            ref[i * N + j] = s;
            mag[i * N + j] = m;
        }

    CUdeviceptr dA, dB, dC;
    CK(cuMemAlloc(&dA, sizeof(float) * M * K));
    CK(cuMemAlloc(&dB, sizeof(float) * K * N));
    CK(cuMemAlloc(&dC, sizeof(float) * M * N));
    CK(cuMemcpyHtoD(dA, A, sizeof(float) * M * K));
    CK(cuMemcpyHtoD(dB, B, sizeof(float) * K * N));
    CK(cuMemsetD32(dC, 0x7fc00001u, M * N));

    int m = M, n = N, k = K;
    void *args[] = {&dA, &dB, &dC, &m, &n, &k};
    CK(cuLaunchKernel(fn, (N + GT_TILE - 1) / GT_TILE, (M + GT_TILE - 1) / GT_TILE, 1, GT_TILE, GT_TILE, 1,
                      0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    for (int i = 0; i < M * N; i++)
        C[i] = NAN;
    CK(cuMemcpyDtoH(C, dC, sizeof(float) * M * N));

    /* Error bound relative to the sum of |products|: robust where the sum itself cancels. */
    for (int i = 0; i < M * N; i++) {
        double err = fabs((double)C[i] - ref[i]);
        if (!(err <= 2e-5 * mag[i] + 1e-6))
            gt_fail("C[%d][%d] = %.7g, expected %.7g (err %.3g, scale %.3g)", i / N, i % N, (double)C[i],
                    ref[i], err, mag[i]);
    }

    CK(cuMemFree(dA));
    CK(cuMemFree(dB));
    CK(cuMemFree(dC));
    CK(cuModuleUnload(mod));
    free(A);
    free(B);
    free(C);
    free(ref);
    free(mag);
    gt_pass();
}
