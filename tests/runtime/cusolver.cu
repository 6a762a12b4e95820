/* cusolver: dense factorizations of cuSOLVER solving A X = B (3 right-hand sides), on a created stream:
 * - LU with partial pivoting: cusolverDnSgetrf_bufferSize, cusolverDnSgetrf, cusolverDnSgetrs, on a
 *   random general 256 x 256 matrix (lda > n);
 * - Cholesky: cusolverDnSpotrf_bufferSize, cusolverDnSpotrf, cusolverDnSpotrs, on a symmetric positive
 *   definite 200 x 200 matrix;
 * Checked: info = 0, pivots in range, the normwise backward error
 *   max_j ||b_j - A x_j||_inf / (||A||_inf ||x_j||_inf + ||b_j||_inf)  <= 1e-5 (computed in double),
 * and for the well-conditioned SPD system the solution against a CPU Cholesky solve in double. */
#include "rt_test.h"

#include <cusolverDn.h>

static void so_check(cusolverStatus_t st, const char *what, const char *file, int line)
{
    if (st != CUSOLVER_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d", file, line, what, (int)st);
}
#define SO(call) so_check((call), #call, __FILE__, __LINE__)

/* Column-major n x n A (leading dimension lda), X and B n x nrhs with leading dimension n. */
static double backward_error(int n, int nrhs, const float *A, int lda, const float *X, const float *B)
{
    double anorm = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++)
            s += fabs((double)A[i + (size_t)j * lda]);
        anorm = s > anorm ? s : anorm;
    }
    double worst = 0;
    for (int c = 0; c < nrhs; c++) {
        double rmax = 0, xmax = 0, bmax = 0;
        for (int i = 0; i < n; i++) {
            double r = (double)B[i + (size_t)c * n];
            for (int j = 0; j < n; j++)
                r -= (double)A[i + (size_t)j * lda] * (double)X[j + (size_t)c * n];
            rmax = fabs(r) > rmax ? fabs(r) : rmax;
            xmax = fabs((double)X[i + (size_t)c * n]) > xmax ? fabs((double)X[i + (size_t)c * n]) : xmax;
            bmax = fabs((double)B[i + (size_t)c * n]) > bmax ? fabs((double)B[i + (size_t)c * n]) : bmax;
        }
        double e = rmax / (anorm * xmax + bmax);
        if (!(e == e))
            return INFINITY;
        worst = e > worst ? e : worst;
    }
    return worst;
}

static int read_info(const int *d_info)
{
    int info = -12345;
    CK(cudaMemcpy(&info, d_info, sizeof info, cudaMemcpyDeviceToHost));
    return info;
}

static void test_lu(cusolverDnHandle_t h, cudaStream_t s)
{
    const int n = 256, lda = n + 5, nrhs = 3;
    float *A = (float *)rt_malloc((size_t)lda * n * 4), *B = (float *)rt_malloc((size_t)n * nrhs * 4);
    float *X = (float *)rt_malloc((size_t)n * nrhs * 4);
    rt_fill_float(A, (size_t)lda * n, 71, 1.0f);
    rt_fill_float(B, (size_t)n * nrhs, 72, 1.0f);
    float *dA = NULL, *dB = NULL, *work = NULL;
    int *ipiv = NULL, *info = NULL;
    CK(cudaMalloc((void **)&dA, (size_t)lda * n * 4));
    CK(cudaMalloc((void **)&dB, (size_t)n * nrhs * 4));
    CK(cudaMalloc((void **)&ipiv, (size_t)n * sizeof(int)));
    CK(cudaMalloc((void **)&info, sizeof(int)));
    CK(cudaMemcpyAsync(dA, A, (size_t)lda * n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dB, B, (size_t)n * nrhs * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(info, 0xff, sizeof(int), s));
    int lwork = 0;
    SO(cusolverDnSgetrf_bufferSize(h, n, n, dA, lda, &lwork));
    CK(cudaMalloc((void **)&work, (size_t)(lwork > 0 ? lwork : 1) * 4));
    SO(cusolverDnSgetrf(h, n, n, dA, lda, work, ipiv, info));
    CK(cudaStreamSynchronize(s));
    int inf = read_info(info);
    if (inf != 0)
        rt_fail("getrf: info = %d", inf);
    int *hp = (int *)rt_malloc((size_t)n * sizeof(int));
    CK(cudaMemcpy(hp, ipiv, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
    int swaps = 0;
    for (int i = 0; i < n; i++) {
        if (hp[i] < i + 1 || hp[i] > n)
            rt_fail("getrf: pivot %d is %d (1-based, must be in [%d, %d])", i, hp[i], i + 1, n);
        swaps += hp[i] != i + 1;
    }
    CK(cudaMemsetAsync(info, 0xff, sizeof(int), s));
    SO(cusolverDnSgetrs(h, CUBLAS_OP_N, n, nrhs, dA, lda, ipiv, dB, n, info));
    rt_poison(X, (size_t)n * nrhs * 4);
    CK(cudaMemcpyAsync(X, dB, (size_t)n * nrhs * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    inf = read_info(info);
    if (inf != 0)
        rt_fail("getrs: info = %d", inf);
    double be = backward_error(n, nrhs, A, lda, X, B);
    rt_info("LU n=%d: %d row swaps, backward error %.3g", n, swaps, be);
    if (!(be <= 1e-5))
        rt_fail("getrf + getrs: backward error %.3g above 1e-5", be);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(work));
    CK(cudaFree(ipiv));
    CK(cudaFree(info));
    free(A);
    free(B);
    free(X);
    free(hp);
}

static void test_cholesky(cusolverDnHandle_t h, cudaStream_t s)
{
    const int n = 200, nrhs = 3;
    /* A = M M^T / n + I: symmetric positive definite, eigenvalues in about [1, 2.4]. */
    float *M = (float *)rt_malloc((size_t)n * n * 4), *A = (float *)rt_malloc((size_t)n * n * 4);
    rt_fill_float(M, (size_t)n * n, 81, 1.0f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double sum = 0;
            for (int l = 0; l < n; l++)
                sum += (double)M[i + (size_t)l * n] * M[j + (size_t)l * n];
            float v = (float)(sum / n + (i == j ? 1.0 : 0.0));
            A[i + (size_t)j * n] = A[j + (size_t)i * n] = v;
        }
    float *B = (float *)rt_malloc((size_t)n * nrhs * 4), *X = (float *)rt_malloc((size_t)n * nrhs * 4);
    rt_fill_float(B, (size_t)n * nrhs, 82, 1.0f);

    /* CPU Cholesky in double: A = L L^T, then forward and back substitution. */
    double *L = (double *)calloc((size_t)n * n, 8), *Xr = (double *)rt_malloc((size_t)n * nrhs * 8);
    if (!L)
        rt_fail("out of host memory");
    for (int j = 0; j < n; j++) {
        double d = A[j + (size_t)j * n];
        for (int l = 0; l < j; l++)
            d -= L[j + (size_t)l * n] * L[j + (size_t)l * n];
        if (d <= 0)
            rt_fail("CPU Cholesky: matrix not positive definite (test bug)");
        L[j + (size_t)j * n] = sqrt(d);
        for (int i = j + 1; i < n; i++) {
            double v = A[i + (size_t)j * n];
            for (int l = 0; l < j; l++)
                v -= L[i + (size_t)l * n] * L[j + (size_t)l * n];
            L[i + (size_t)j * n] = v / L[j + (size_t)j * n];
        }
    }
    for (int c = 0; c < nrhs; c++) {
        double *x = Xr + (size_t)c * n;
        for (int i = 0; i < n; i++) {
            double v = B[i + (size_t)c * n];
            for (int l = 0; l < i; l++)
                v -= L[i + (size_t)l * n] * x[l];
            x[i] = v / L[i + (size_t)i * n];
        }
        for (int i = n - 1; i >= 0; i--) {
            double v = x[i];
            for (int l = i + 1; l < n; l++)
                v -= L[l + (size_t)i * n] * x[l];
            x[i] = v / L[i + (size_t)i * n];
        }
    }

    float *dA = NULL, *dB = NULL, *work = NULL;
    int *info = NULL;
    CK(cudaMalloc((void **)&dA, (size_t)n * n * 4));
    CK(cudaMalloc((void **)&dB, (size_t)n * nrhs * 4));
    CK(cudaMalloc((void **)&info, sizeof(int)));
    CK(cudaMemcpyAsync(dA, A, (size_t)n * n * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dB, B, (size_t)n * nrhs * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(info, 0xff, sizeof(int), s));
    int lwork = 0;
    SO(cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, dA, n, &lwork));
    CK(cudaMalloc((void **)&work, (size_t)(lwork > 0 ? lwork : 1) * 4));
    SO(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, n, dA, n, work, lwork, info));
    CK(cudaStreamSynchronize(s));
    int inf = read_info(info);
    if (inf != 0)
        rt_fail("potrf: info = %d", inf);
    CK(cudaMemsetAsync(info, 0xff, sizeof(int), s));
    SO(cusolverDnSpotrs(h, CUBLAS_FILL_MODE_LOWER, n, nrhs, dA, n, dB, n, info));
    rt_poison(X, (size_t)n * nrhs * 4);
    CK(cudaMemcpyAsync(X, dB, (size_t)n * nrhs * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    inf = read_info(info);
    if (inf != 0)
        rt_fail("potrs: info = %d", inf);
    double be = backward_error(n, nrhs, A, n, X, B);
    double fe = 0, xn = 0;
    for (size_t i = 0; i < (size_t)n * nrhs; i++) {
        fe = fabs((double)X[i] - Xr[i]) > fe ? fabs((double)X[i] - Xr[i]) : fe;
        xn = fabs(Xr[i]) > xn ? fabs(Xr[i]) : xn;
    }
    fe = fe / xn;
    rt_info("Cholesky n=%d: backward error %.3g, forward error vs CPU %.3g", n, be, fe);
    if (!(be <= 1e-5))
        rt_fail("potrf + potrs: backward error %.3g above 1e-5", be);
    if (!(fe <= 1e-4))
        rt_fail("potrf + potrs: solution differs from the CPU's by %.3g (relative, max norm)", fe);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(work));
    CK(cudaFree(info));
    free(M);
    free(A);
    free(B);
    free(X);
    free(L);
    free(Xr);
}

int main(void)
{
    rt_begin("cusolver");
    rt_require_gpu();
    int ver = 0;
    SO(cusolverGetVersion(&ver));
    rt_info("cuSOLVER version %d", ver);
    cusolverDnHandle_t h;
    SO(cusolverDnCreate(&h));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SO(cusolverDnSetStream(h, s));
    test_lu(h, s);
    test_cholesky(h, s);
    SO(cusolverDnDestroy(h));
    CK(cudaStreamDestroy(s));
    rt_pass();
}
