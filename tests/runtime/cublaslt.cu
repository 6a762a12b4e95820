/* cublaslt: cublasLtMatmul with an algorithm from cublasLtMatmulAlgoGetHeuristic and a workspace, on a
 * created stream, against a CPU reference:
 * - fp32 A, B, C, D (fp32 compute), transposes TN and NT;
 * - bf16 A, B, C, D with fp32 compute (tolerance 1e-2 of the element's magnitude bound);
 * - fp32 with the RELU_BIAS epilogue (a bias per row, then max(0, .)); where the heuristic has no
 *   algorithm for it, that is logged and the case is not run.
 * The first candidate of the heuristic is the one run. */
#include "rt_test.h"

#include <cublasLt.h>

static void lt_check(cublasStatus_t st, const char *what, const char *file, int line)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)st, cublasLtGetStatusName(st));
}
#define LT(call) lt_check((call), #call, __FILE__, __LINE__)

static double at_op(const float *p, int ld, char t, int i, int j)
{
    return t == 'N' ? (double)p[i + (size_t)j * ld] : (double)p[j + (size_t)i * ld];
}

typedef struct {
    const char *name;
    int bf16;
    int relu_bias;
    int optional; /* "not supported" (no algorithm) is logged, not a failure */
    char ta, tb;
    int m, n, k;
} lt_case;

static void run_case(cublasLtHandle_t lt, cudaStream_t s, void *ws, size_t ws_size, const lt_case *c, uint64_t seed)
{
    const int m = c->m, n = c->n, k = c->k;
    const int arows = c->ta == 'N' ? m : k, acols = c->ta == 'N' ? k : m;
    const int brows = c->tb == 'N' ? k : n, bcols = c->tb == 'N' ? n : k;
    const int lda = arows, ldb = brows, ldc = m;
    const size_t na = (size_t)lda * acols, nb = (size_t)ldb * bcols, nc = (size_t)ldc * n;
    const size_t es = c->bf16 ? 2 : 4;
    const cudaDataType dt = c->bf16 ? CUDA_R_16BF : CUDA_R_32F;

    float *A = (float *)rt_malloc(na * 4), *B = (float *)rt_malloc(nb * 4), *C = (float *)rt_malloc(nc * 4);
    float *bias = (float *)rt_malloc((size_t)m * 4);
    rt_fill_float(A, na, seed + 1, 1.0f);
    rt_fill_float(B, nb, seed + 2, 1.0f);
    rt_fill_float(C, nc, seed + 3, 1.0f);
    rt_fill_float(bias, m, seed + 4, 2.0f);
    /* Device images of A, B, C in the case's type; for bf16 the reference uses the rounded values. */
    void *hA = rt_malloc(na * es), *hB = rt_malloc(nb * es), *hC = rt_malloc(nc * es), *hD = rt_malloc(nc * es);
    if (c->bf16) {
        for (size_t i = 0; i < na; i++)
            A[i] = rt_bf16_to_f32(((uint16_t *)hA)[i] = rt_f32_to_bf16(A[i]));
        for (size_t i = 0; i < nb; i++)
            B[i] = rt_bf16_to_f32(((uint16_t *)hB)[i] = rt_f32_to_bf16(B[i]));
        for (size_t i = 0; i < nc; i++)
            C[i] = rt_bf16_to_f32(((uint16_t *)hC)[i] = rt_f32_to_bf16(C[i]));
    } else {
        memcpy(hA, A, na * 4);
        memcpy(hB, B, nb * 4);
        memcpy(hC, C, nc * 4);
    }
    const float alpha = 0.75f, beta = -0.5f;

    void *dA = NULL, *dB = NULL, *dC = NULL, *dD = NULL, *dBias = NULL;
    CK(cudaMalloc(&dA, na * es));
    CK(cudaMalloc(&dB, nb * es));
    CK(cudaMalloc(&dC, nc * es));
    CK(cudaMalloc(&dD, nc * es));
    CK(cudaMalloc(&dBias, (size_t)m * 4));
    CK(cudaMemcpyAsync(dA, hA, na * es, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dB, hB, nb * es, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dC, hC, nc * es, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(dBias, bias, (size_t)m * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(dD, 0xff, nc * es, s));

    cublasLtMatmulDesc_t op;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = c->ta == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T, tb = c->tb == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (c->relu_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dBias, sizeof dBias));
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    LT(cublasLtMatrixLayoutCreate(&la, dt, (uint64_t)arows, (uint64_t)acols, lda));
    LT(cublasLtMatrixLayoutCreate(&lb, dt, (uint64_t)brows, (uint64_t)bcols, ldb));
    LT(cublasLtMatrixLayoutCreate(&lc, dt, (uint64_t)m, (uint64_t)n, ldc));
    LT(cublasLtMatrixLayoutCreate(&ld, dt, (uint64_t)m, (uint64_t)n, ldc));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof ws_size));
    cublasLtMatmulHeuristicResult_t res[4];
    memset(res, 0, sizeof res);
    int found = 0;
    cublasStatus_t hst = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 4, res, &found);
    if (c->optional && (hst == CUBLAS_STATUS_NOT_SUPPORTED || (hst == CUBLAS_STATUS_SUCCESS && found < 1))) {
        rt_info("%s: no algorithm for this combination (%s); not run", c->name, cublasLtGetStatusName(hst));
        found = 0;
    } else {
        lt_check(hst, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
        if (found < 1)
            rt_fail("%s: cublasLtMatmulAlgoGetHeuristic found no algorithm", c->name);
    }
    if (found > 0) {
        if (res[0].state != CUBLAS_STATUS_SUCCESS || res[0].workspaceSize > ws_size)
            rt_fail("%s: heuristic result 0: state %d, workspace %zu", c->name, (int)res[0].state,
                    res[0].workspaceSize);
        LT(cublasLtMatmul(lt, op, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, ld, &res[0].algo, ws, ws_size, s));
        rt_poison(hD, nc * es);
        CK(cudaMemcpyAsync(hD, dD, nc * es, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));

        const double rtol = c->bf16 ? 1e-2 : (double)k * 1.2e-7 + 1e-6;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double sum = 0, mag = 0;
                for (int l = 0; l < k; l++) {
                    double x = at_op(A, lda, c->ta, i, l) * at_op(B, ldb, c->tb, l, j);
                    sum += x;
                    mag += fabs(x);
                }
                double cv = C[i + (size_t)j * ldc];
                double want = alpha * sum + beta * cv;
                mag = fabs(alpha) * mag + fabs(beta * cv);
                if (c->relu_bias) {
                    want += bias[i];
                    mag += fabs(bias[i]);
                    want = want > 0 ? want : 0;
                }
                size_t idx = i + (size_t)j * ldc;
                double got = c->bf16 ? rt_bf16_to_f32(((uint16_t *)hD)[idx]) : ((float *)hD)[idx];
                double tol = rtol * mag + 1e-30;
                if (!(fabs(got - want) <= tol))
                    rt_fail("%s: D(%d,%d) = %.9g, expected %.9g (tolerance %.3g)", c->name, i, j, got, want, tol);
            }
        rt_info("%s: %d candidate(s), workspace %zu", c->name, found, res[0].workspaceSize);
    }

    LT(cublasLtMatmulPreferenceDestroy(pref));
    LT(cublasLtMatrixLayoutDestroy(la));
    LT(cublasLtMatrixLayoutDestroy(lb));
    LT(cublasLtMatrixLayoutDestroy(lc));
    LT(cublasLtMatrixLayoutDestroy(ld));
    LT(cublasLtMatmulDescDestroy(op));
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    CK(cudaFree(dD));
    CK(cudaFree(dBias));
    free(A);
    free(B);
    free(C);
    free(bias);
    free(hA);
    free(hB);
    free(hC);
    free(hD);
}

int main(void)
{
    rt_begin("cublaslt");
    rt_require_gpu();
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    rt_info("cuBLASLt version %zu", cublasLtGetVersion());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t ws_size = (size_t)32 << 20;
    void *ws = NULL;
    CK(cudaMalloc(&ws, ws_size));

    const lt_case cases[] = {
        {"fp32 TN", 0, 0, 0, 'T', 'N', 200, 136, 72},
        {"fp32 NT", 0, 0, 0, 'N', 'T', 64, 256, 40},
        {"bf16 TN", 1, 0, 0, 'T', 'N', 256, 128, 192},
        {"fp32 NN relu+bias", 0, 1, 1, 'N', 'N', 96, 64, 48},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(lt, s, ws, ws_size, &cases[i], 1000 * (uint64_t)(i + 1));

    CK(cudaFree(ws));
    CK(cudaStreamDestroy(s));
    LT(cublasLtDestroy(lt));
    rt_pass();
}
