/* cusparse: the generic API's SpMV on a CSR matrix (cusparseCreateCsr, cusparseCreateDnVec,
 * cusparseSpMV_bufferSize, cusparseSpMV_preprocess, cusparseSpMV) against a CPU product:
 * a random 1000 x 700 matrix, about 3% dense, with empty rows; y = alpha op(A) x + beta y for
 * op = N and T, with the default algorithm and CSR_ALG2, on a created stream.
 * Tolerance of an element: 1e-5 of sum |alpha a x| + |beta y|. */
#include "rt_test.h"

#include <cusparse.h>

static void sp_check(cusparseStatus_t st, const char *what, const char *file, int line)
{
    if (st != CUSPARSE_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s: %s)", file, line, what, (int)st, cusparseGetErrorName(st),
                cusparseGetErrorString(st));
}
#define SP(call) sp_check((call), #call, __FILE__, __LINE__)

int main(void)
{
    rt_begin("cusparse");
    rt_require_gpu();
    const int rows = 1000, cols = 700;

    /* CSR with about 3% non-zeros per row, every 17th row empty, sorted column indices. */
    int *rowptr = (int *)rt_malloc((size_t)(rows + 1) * sizeof(int));
    int cap = rows * cols / 20 + 16, nnz = 0;
    int *colind = (int *)rt_malloc((size_t)cap * sizeof(int));
    float *val = (float *)rt_malloc((size_t)cap * sizeof(float));
    rt_rng r;
    rt_rng_seed(&r, 4711);
    for (int i = 0; i < rows; i++) {
        rowptr[i] = nnz;
        if (i % 17 == 0)
            continue;
        for (int j = 0; j < cols && nnz < cap; j++)
            if (rt_rng_next(&r) % 100 < 3) {
                colind[nnz] = j;
                val[nnz] = rt_rng_float(&r) * 4.0f;
                nnz++;
            }
    }
    rowptr[rows] = nnz;

    float *x_n = (float *)rt_malloc((size_t)cols * 4), *x_t = (float *)rt_malloc((size_t)rows * 4);
    float *y0 = (float *)rt_malloc((size_t)rows * 4), *y0_t = (float *)rt_malloc((size_t)cols * 4);
    rt_fill_float(x_n, cols, 1, 1.0f);
    rt_fill_float(x_t, rows, 2, 1.0f);
    rt_fill_float(y0, rows, 3, 1.0f);
    rt_fill_float(y0_t, cols, 4, 1.0f);
    const float alpha = 1.5f, beta = -0.5f;

    /* CPU: y = alpha A x + beta y0 and y_t = alpha A^T x_t + beta y0_t, with magnitude bounds. */
    double *ref = (double *)rt_malloc((size_t)rows * 8), *mag = (double *)rt_malloc((size_t)rows * 8);
    double *ref_t = (double *)calloc((size_t)cols, 8), *mag_t = (double *)calloc((size_t)cols, 8);
    if (!ref_t || !mag_t)
        rt_fail("out of host memory");
    for (int i = 0; i < rows; i++) {
        double s = 0, g = 0;
        for (int p = rowptr[i]; p < rowptr[i + 1]; p++) {
            s += (double)val[p] * x_n[colind[p]];
            g += fabs((double)val[p] * x_n[colind[p]]);
            ref_t[colind[p]] += (double)val[p] * x_t[i];
            mag_t[colind[p]] += fabs((double)val[p] * x_t[i]);
        }
        ref[i] = alpha * s + beta * (double)y0[i];
        mag[i] = fabs(alpha) * g + fabs(beta * (double)y0[i]);
    }
    for (int j = 0; j < cols; j++) {
        ref_t[j] = alpha * ref_t[j] + beta * (double)y0_t[j];
        mag_t[j] = fabs(alpha) * mag_t[j] + fabs(beta * (double)y0_t[j]);
    }

    cusparseHandle_t h;
    SP(cusparseCreate(&h));
    int ver = 0;
    SP(cusparseGetVersion(h, &ver));
    rt_info("cuSPARSE version %d, matrix %d x %d with %d non-zeros", ver, rows, cols, nnz);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    SP(cusparseSetStream(h, s));

    int *d_rowptr = NULL, *d_col = NULL;
    float *d_val = NULL, *d_xn = NULL, *d_xt = NULL, *d_y = NULL, *d_yt = NULL;
    CK(cudaMalloc((void **)&d_rowptr, (size_t)(rows + 1) * sizeof(int)));
    CK(cudaMalloc((void **)&d_col, (size_t)nnz * sizeof(int)));
    CK(cudaMalloc((void **)&d_val, (size_t)nnz * sizeof(float)));
    CK(cudaMalloc((void **)&d_xn, (size_t)cols * 4));
    CK(cudaMalloc((void **)&d_xt, (size_t)rows * 4));
    CK(cudaMalloc((void **)&d_y, (size_t)rows * 4));
    CK(cudaMalloc((void **)&d_yt, (size_t)cols * 4));
    CK(cudaMemcpyAsync(d_rowptr, rowptr, (size_t)(rows + 1) * sizeof(int), cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_col, colind, (size_t)nnz * sizeof(int), cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_val, val, (size_t)nnz * sizeof(float), cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_xn, x_n, (size_t)cols * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_xt, x_t, (size_t)rows * 4, cudaMemcpyHostToDevice, s));

    cusparseSpMatDescr_t A;
    SP(cusparseCreateCsr(&A, rows, cols, nnz, d_rowptr, d_col, d_val, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                         CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    cusparseDnVecDescr_t vxn, vxt, vy, vyt;
    SP(cusparseCreateDnVec(&vxn, cols, d_xn, CUDA_R_32F));
    SP(cusparseCreateDnVec(&vxt, rows, d_xt, CUDA_R_32F));
    SP(cusparseCreateDnVec(&vy, rows, d_y, CUDA_R_32F));
    SP(cusparseCreateDnVec(&vyt, cols, d_yt, CUDA_R_32F));

    float *got = (float *)rt_malloc((size_t)(rows > cols ? rows : cols) * 4);
    const cusparseSpMVAlg_t algs[] = {CUSPARSE_SPMV_ALG_DEFAULT, CUSPARSE_SPMV_CSR_ALG2};
    for (int ai = 0; ai < 2; ai++)
        for (int t = 0; t < 2; t++) {
            cusparseOperation_t op = t ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
            cusparseDnVecDescr_t vx = t ? vxt : vxn, vyy = t ? vyt : vy;
            float *dy = t ? d_yt : d_y;
            const float *yinit = t ? y0_t : y0;
            int len = t ? cols : rows;
            if (ai == 1 && t == 1)
                continue; /* CSR_ALG2 is for the non-transposed product */
            CK(cudaMemcpyAsync(dy, yinit, (size_t)len * 4, cudaMemcpyHostToDevice, s));
            size_t bsize = 0;
            SP(cusparseSpMV_bufferSize(h, op, &alpha, A, vx, &beta, vyy, CUDA_R_32F, algs[ai], &bsize));
            void *buf = NULL;
            CK(cudaMalloc(&buf, bsize ? bsize : 1));
            SP(cusparseSpMV_preprocess(h, op, &alpha, A, vx, &beta, vyy, CUDA_R_32F, algs[ai], buf));
            SP(cusparseSpMV(h, op, &alpha, A, vx, &beta, vyy, CUDA_R_32F, algs[ai], buf));
            rt_poison(got, (size_t)len * 4);
            CK(cudaMemcpyAsync(got, dy, (size_t)len * 4, cudaMemcpyDeviceToHost, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaFree(buf));
            const double *w = t ? ref_t : ref, *g = t ? mag_t : mag;
            for (int i = 0; i < len; i++) {
                double tol = 1e-5 * g[i] + 1e-30;
                if (!(fabs((double)got[i] - w[i]) <= tol))
                    rt_fail("SpMV alg %d op %c: y[%d] = %.9g, expected %.9g (tolerance %.3g)", (int)algs[ai],
                            t ? 'T' : 'N', i, (double)got[i], w[i], tol);
            }
        }

    SP(cusparseDestroySpMat(A));
    SP(cusparseDestroyDnVec(vxn));
    SP(cusparseDestroyDnVec(vxt));
    SP(cusparseDestroyDnVec(vy));
    SP(cusparseDestroyDnVec(vyt));
    SP(cusparseDestroy(h));
    CK(cudaFree(d_rowptr));
    CK(cudaFree(d_col));
    CK(cudaFree(d_val));
    CK(cudaFree(d_xn));
    CK(cudaFree(d_xt));
    CK(cudaFree(d_y));
    CK(cudaFree(d_yt));
    CK(cudaStreamDestroy(s));
    free(rowptr);
    free(colind);
    free(val);
    free(x_n);
    free(x_t);
    free(y0);
    free(y0_t);
    free(ref);
    free(mag);
    free(ref_t);
    free(mag_t);
    free(got);
    rt_pass();
}
