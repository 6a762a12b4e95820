/* cublas: cuBLAS against a CPU reference (double precision, from the same inputs).
 * - cublasSgemm: several shapes (square, odd, thin, k larger than m and n), all four transpose
 *   combinations, alpha and beta not 0/1, leading dimensions larger than the rows (the padding must
 *   stay untouched), on a created stream.
 * - cublasGemmEx with bf16 A and B, fp32 compute, fp32 output and bf16 output.
 * - cublasSgemmStridedBatched: 7 problems with padded strides.
 * - cublasSdot in host and device pointer mode.
 * Tolerance of an element: its accumulation bound, rtol * sum_k |alpha a b| + |beta c|, with rtol
 * from the precision (fp32: k * 2^-23; bf16 output: 1e-2). */
#include "rt_test.h"

#include <cublas_v2.h>

static void cb_check(cublasStatus_t st, const char *what, const char *file, int line)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)st, cublasGetStatusName(st));
}
#define CB(call) cb_check((call), #call, __FILE__, __LINE__)

/* Column-major: element (i, j) of a matrix with leading dimension ld is p[i + j * ld]. */
static double at_op(const float *p, int ld, char t, int i, int j)
{
    return t == 'N' ? (double)p[i + (size_t)j * ld] : (double)p[j + (size_t)i * ld];
}

/* C = alpha op(A) op(B) + beta C0 and the magnitude bound of each element (m x n, ld = m). */
static void ref_gemm(char ta, char tb, int m, int n, int k, double alpha, const float *A, int lda, const float *B,
                     int ldb, double beta, const float *C0, int ldc, double *ref, double *mag)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0, g = 0;
            for (int l = 0; l < k; l++) {
                double x = at_op(A, lda, ta, i, l) * at_op(B, ldb, tb, l, j);
                s += x;
                g += fabs(x);
            }
            double c = (double)C0[i + (size_t)j * ldc];
            ref[i + (size_t)j * m] = alpha * s + beta * c;
            mag[i + (size_t)j * m] = fabs(alpha) * g + fabs(beta * c);
        }
}

/* got has leading dimension ldc; rows m..ldc-1 must still hold C0's values. */
static void expect_gemm(const char *what, const float *got, int ldc, const float *C0, const double *ref,
                        const double *mag, int m, int n, double rtol)
{
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            double g = (double)got[i + (size_t)j * ldc], w = ref[i + (size_t)j * m];
            double tol = rtol * mag[i + (size_t)j * m] + 1e-30;
            if (!(fabs(g - w) <= tol))
                rt_fail("%s: C(%d,%d) = %.9g, expected %.9g (tolerance %.3g)", what, i, j, g, w, tol);
        }
        for (int i = m; i < ldc; i++)
            if (memcmp(&got[i + (size_t)j * ldc], &C0[i + (size_t)j * ldc], sizeof(float)) != 0)
                rt_fail("%s: padding C(%d,%d) was written", what, i, j);
    }
}

static cublasOperation_t op_of(char t)
{
    return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
}

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static void test_sgemm(cublasHandle_t h, cudaStream_t s)
{
    const int shapes[][3] = {{64, 64, 64}, {127, 33, 65}, {256, 128, 300}, {1, 513, 7}, {300, 1, 129}, {17, 19, 1}};
    const char ts[] = {'N', 'T'};
    int seed = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
                char ta = ts[a], tb = ts[b];
                int arows = ta == 'N' ? m : k, acols = ta == 'N' ? k : m;
                int brows = tb == 'N' ? k : n, bcols = tb == 'N' ? n : k;
                int lda = arows + 3, ldb = brows + 1, ldc = m + 2;
                size_t na = (size_t)lda * acols, nb = (size_t)ldb * bcols, nc = (size_t)ldc * n;
                float *A = (float *)rt_malloc(na * 4), *B = (float *)rt_malloc(nb * 4);
                float *C0 = (float *)rt_malloc(nc * 4), *C = (float *)rt_malloc(nc * 4);
                double *ref = (double *)rt_malloc((size_t)m * n * 8), *mag = (double *)rt_malloc((size_t)m * n * 8);
                rt_fill_float(A, na, 100 + (uint64_t)seed, 1.0f);
                rt_fill_float(B, nb, 200 + (uint64_t)seed, 1.0f);
                rt_fill_float(C0, nc, 300 + (uint64_t)seed, 1.0f);
                seed++;
                const float alpha = 1.25f, beta = -0.75f;
                ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, ldc, ref, mag);
                float *dA = (float *)dmalloc(na * 4), *dB = (float *)dmalloc(nb * 4), *dC = (float *)dmalloc(nc * 4);
                CK(cudaMemcpyAsync(dA, A, na * 4, cudaMemcpyHostToDevice, s));
                CK(cudaMemcpyAsync(dB, B, nb * 4, cudaMemcpyHostToDevice, s));
                CK(cudaMemcpyAsync(dC, C0, nc * 4, cudaMemcpyHostToDevice, s));
                CB(cublasSgemm(h, op_of(ta), op_of(tb), m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
                rt_poison(C, nc * 4);
                CK(cudaMemcpyAsync(C, dC, nc * 4, cudaMemcpyDeviceToHost, s));
                CK(cudaStreamSynchronize(s));
                char what[96];
                snprintf(what, sizeof what, "sgemm %c%c m=%d n=%d k=%d", ta, tb, m, n, k);
                expect_gemm(what, C, ldc, C0, ref, mag, m, n, (double)k * 1.2e-7 + 1e-6);
                CK(cudaFree(dA));
                CK(cudaFree(dB));
                CK(cudaFree(dC));
                free(A);
                free(B);
                free(C0);
                free(C);
                free(ref);
                free(mag);
            }
}

static void test_gemmex_bf16(cublasHandle_t h, cudaStream_t s)
{
    const int m = 96, n = 80, k = 136;
    const char ta = 'T', tb = 'N';
    const int lda = k, ldb = k, ldc = m; /* A stored k x m (transposed), B k x n */
    float *A = (float *)rt_malloc((size_t)lda * m * 4), *B = (float *)rt_malloc((size_t)ldb * n * 4);
    uint16_t *Ab = (uint16_t *)rt_malloc((size_t)lda * m * 2), *Bb = (uint16_t *)rt_malloc((size_t)ldb * n * 2);
    rt_fill_float(A, (size_t)lda * m, 401, 2.0f);
    rt_fill_float(B, (size_t)ldb * n, 402, 2.0f);
    /* The reference uses exactly the bf16 values the GPU sees. */
    for (size_t i = 0; i < (size_t)lda * m; i++)
        A[i] = rt_bf16_to_f32(Ab[i] = rt_f32_to_bf16(A[i]));
    for (size_t i = 0; i < (size_t)ldb * n; i++)
        B[i] = rt_bf16_to_f32(Bb[i] = rt_f32_to_bf16(B[i]));
    float *C0 = (float *)rt_malloc((size_t)ldc * n * 4), *C = (float *)rt_malloc((size_t)ldc * n * 4);
    uint16_t *C0b = (uint16_t *)rt_malloc((size_t)ldc * n * 2), *Cb = (uint16_t *)rt_malloc((size_t)ldc * n * 2);
    rt_fill_float(C0, (size_t)ldc * n, 403, 1.0f);
    for (size_t i = 0; i < (size_t)ldc * n; i++)
        C0[i] = rt_bf16_to_f32(C0b[i] = rt_f32_to_bf16(C0[i]));
    double *ref = (double *)rt_malloc((size_t)m * n * 8), *mag = (double *)rt_malloc((size_t)m * n * 8);
    const float alpha = 0.5f, beta = 2.0f;
    ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, ldc, ref, mag);

    void *dA = dmalloc((size_t)lda * m * 2), *dB = dmalloc((size_t)ldb * n * 2);
    void *dC = dmalloc((size_t)ldc * n * 4), *dCb = dmalloc((size_t)ldc * n * 2);
    CK(cudaMemcpyAsync(dA, Ab, (size_t)lda * m * 2, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dB, Bb, (size_t)ldb * n * 2, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dC, C0, (size_t)ldc * n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dCb, C0b, (size_t)ldc * n * 2, cudaMemcpyHostToDevice, s));

    /* bf16 x bf16 -> fp32. */
    CB(cublasGemmEx(h, op_of(ta), op_of(tb), m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB, CUDA_R_16BF, ldb, &beta, dC,
                    CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    rt_poison(C, (size_t)ldc * n * 4);
    CK(cudaMemcpyAsync(C, dC, (size_t)ldc * n * 4, cudaMemcpyDeviceToHost, s));
    /* bf16 x bf16 -> bf16. */
    CB(cublasGemmEx(h, op_of(ta), op_of(tb), m, n, k, &alpha, dA, CUDA_R_16BF, lda, dB, CUDA_R_16BF, ldb, &beta,
                    dCb, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    rt_poison(Cb, (size_t)ldc * n * 2);
    CK(cudaMemcpyAsync(Cb, dCb, (size_t)ldc * n * 2, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    expect_gemm("gemmEx bf16 -> fp32", C, ldc, C0, ref, mag, m, n, 1e-3);
    float *Cbf = (float *)rt_malloc((size_t)ldc * n * 4);
    for (size_t i = 0; i < (size_t)ldc * n; i++)
        Cbf[i] = rt_bf16_to_f32(Cb[i]);
    expect_gemm("gemmEx bf16 -> bf16", Cbf, ldc, C0, ref, mag, m, n, 1e-2);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    CK(cudaFree(dCb));
    free(A);
    free(B);
    free(Ab);
    free(Bb);
    free(C0);
    free(C);
    free(C0b);
    free(Cb);
    free(Cbf);
    free(ref);
    free(mag);
}

static void test_strided_batched(cublasHandle_t h, cudaStream_t s)
{
    const int batch = 7, m = 40, n = 56, k = 24;
    const char ta = 'T', tb = 'N';
    const int lda = k + 1, ldb = k, ldc = m;            /* A: k x m stored, B: k x n */
    const long long sA = (long long)lda * m + 5, sB = (long long)ldb * n + 16, sC = (long long)ldc * n + 8;
    size_t na = (size_t)sA * batch, nb = (size_t)sB * batch, nc = (size_t)sC * batch;
    float *A = (float *)rt_malloc(na * 4), *B = (float *)rt_malloc(nb * 4);
    float *C0 = (float *)rt_malloc(nc * 4), *C = (float *)rt_malloc(nc * 4);
    rt_fill_float(A, na, 501, 1.0f);
    rt_fill_float(B, nb, 502, 1.0f);
    rt_fill_float(C0, nc, 503, 1.0f);
    float *dA = (float *)dmalloc(na * 4), *dB = (float *)dmalloc(nb * 4), *dC = (float *)dmalloc(nc * 4);
    CK(cudaMemcpyAsync(dA, A, na * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dB, B, nb * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dC, C0, nc * 4, cudaMemcpyHostToDevice, s));
    const float alpha = -1.5f, beta = 0.25f;
    CB(cublasSgemmStridedBatched(h, op_of(ta), op_of(tb), m, n, k, &alpha, dA, lda, sA, dB, ldb, sB, &beta, dC, ldc,
                                 sC, batch));
    rt_poison(C, nc * 4);
    CK(cudaMemcpyAsync(C, dC, nc * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double *ref = (double *)rt_malloc((size_t)m * n * 8), *mag = (double *)rt_malloc((size_t)m * n * 8);
    for (int b = 0; b < batch; b++) {
        ref_gemm(ta, tb, m, n, k, alpha, A + b * sA, lda, B + b * sB, ldb, beta, C0 + b * sC, ldc, ref, mag);
        char what[64];
        snprintf(what, sizeof what, "sgemmStridedBatched problem %d", b);
        expect_gemm(what, C + b * sC, ldc, C0 + b * sC, ref, mag, m, n, (double)k * 1.2e-7 + 1e-6);
        /* The gap between two problems' C is not written. */
        for (long long g = (long long)ldc * n; g < sC && b < batch; g++)
            if (memcmp(&C[b * sC + g], &C0[b * sC + g], 4) != 0)
                rt_fail("sgemmStridedBatched wrote between problems (problem %d, offset %lld)", b, g);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    free(A);
    free(B);
    free(C0);
    free(C);
    free(ref);
    free(mag);
}

static void test_dot(cublasHandle_t h, cudaStream_t s)
{
    const int n = 100001;
    float *x = (float *)rt_malloc((size_t)n * 4), *y = (float *)rt_malloc((size_t)n * 4);
    rt_fill_float(x, n, 601, 1.0f);
    rt_fill_float(y, n, 602, 1.0f);
    double ref = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        ref += (double)x[i] * y[i];
        mag += fabs((double)x[i] * y[i]);
    }
    float *dx = (float *)dmalloc((size_t)n * 4), *dy = (float *)dmalloc((size_t)n * 4), *dr = (float *)dmalloc(4);
    CK(cudaMemcpyAsync(dx, x, (size_t)n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dy, y, (size_t)n * 4, cudaMemcpyHostToDevice, s));
    float host_r = NAN, dev_r = NAN;
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CB(cublasSdot(h, n, dx, 1, dy, 1, &host_r)); /* blocks until the result is on the host */
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CK(cudaMemsetAsync(dr, 0xff, 4, s));
    CB(cublasSdot(h, n, dx, 1, dy, 1, dr));
    CK(cudaMemcpyAsync(&dev_r, dr, 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    CB(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    double tol = mag * 1e-5;
    if (!(fabs(host_r - ref) <= tol) || !(fabs(dev_r - ref) <= tol))
        rt_fail("sdot: host mode %.9g, device mode %.9g, expected %.9g (tolerance %.3g)", (double)host_r,
                (double)dev_r, ref, tol);
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dr));
    free(x);
    free(y);
}

int main(void)
{
    rt_begin("cublas");
    rt_require_gpu();
    cublasHandle_t h;
    CB(cublasCreate(&h));
    int ver = 0;
    CB(cublasGetVersion(h, &ver));
    rt_info("cuBLAS version %d", ver);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CB(cublasSetStream(h, s));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)); /* no TF32 for the fp32 cases */

    test_sgemm(h, s);
    test_gemmex_bf16(h, s);
    test_strided_batched(h, s);
    test_dot(h, s);

    CB(cublasDestroy(h));
    CK(cudaStreamDestroy(s));
    rt_pass();
}
