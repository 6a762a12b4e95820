/* cudnn: cuDNN convolutions (the cuDNN 9 "legacy" convolution API, what most frameworks' fallbacks call)
 * on small NCHW fp32 tensors, against a direct convolution on the CPU in double:
 * forward (y), backward data (dx from dy), backward filter (dw from x and dy), for three geometries
 * (padding 1 stride 1; no padding stride 2; dilation 2 padding 2), each with the algorithm the _v7
 * heuristic ranks first and with algorithm 0 (implicit GEMM), on a created stream. Math type
 * CUDNN_FMA_MATH: no TF32. Outputs are NaN-poisoned and beta is 0 (cuDNN must not read them).
 * Tolerance of an element: 1e-4 of the sum of the magnitudes of its terms.
 * Built only where cuDNN is found (tests/runtime/CMakeLists.txt). */
#include "rt_test.h"

#include <cudnn.h>

static void dn_check(cudnnStatus_t st, const char *what, const char *file, int line)
{
    if (st != CUDNN_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)st, cudnnGetErrorString(st));
}
#define DN(call) dn_check((call), #call, __FILE__, __LINE__)

typedef struct {
    int n, c, h, w, k, r, s;
    int pad, stride, dil;
} geom;

static size_t idx4(int a, int b, int c, int d, int B, int C, int D)
{
    return (((size_t)a * B + b) * C + c) * D + d;
}

static void expect(const char *what, const char *algo, const float *got, const double *want, const double *mag,
                   size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-4 * mag[i] + 1e-30;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            rt_fail("%s (%s): element %zu is %.9g, expected %.9g (tolerance %.3g)", what, algo, i, (double)got[i],
                    want[i], tol);
    }
}

/* A heuristic entry this test can run: it works, fits the workspace and computes in fp32 (FMA). */
static bool usable(cudnnStatus_t st, size_t memory, cudnnMathType_t math, size_t ws_limit)
{
    return st == CUDNN_STATUS_SUCCESS && memory <= ws_limit &&
           (math == CUDNN_FMA_MATH || math == CUDNN_DEFAULT_MATH);
}

static void run_geom(cudnnHandle_t h, cudaStream_t s, const geom *g, uint64_t seed)
{
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    DN(cudnnCreateTensorDescriptor(&xd));
    DN(cudnnCreateTensorDescriptor(&yd));
    DN(cudnnCreateFilterDescriptor(&wd));
    DN(cudnnCreateConvolutionDescriptor(&cd));
    DN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g->n, g->c, g->h, g->w));
    DN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g->k, g->c, g->r, g->s));
    DN(cudnnSetConvolution2dDescriptor(cd, g->pad, g->pad, g->stride, g->stride, g->dil, g->dil,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
    int on, oc, oh, ow;
    DN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
    int eh = (g->h + 2 * g->pad - g->dil * (g->r - 1) - 1) / g->stride + 1;
    int ew = (g->w + 2 * g->pad - g->dil * (g->s - 1) - 1) / g->stride + 1;
    if (on != g->n || oc != g->k || oh != eh || ow != ew)
        rt_fail("output dims %dx%dx%dx%d, expected %dx%dx%dx%d", on, oc, oh, ow, g->n, g->k, eh, ew);
    DN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));

    const size_t nx = (size_t)g->n * g->c * g->h * g->w, nw = (size_t)g->k * g->c * g->r * g->s;
    const size_t ny = (size_t)on * oc * oh * ow;
    float *x = (float *)rt_malloc(nx * 4), *w = (float *)rt_malloc(nw * 4), *dy = (float *)rt_malloc(ny * 4);
    rt_fill_float(x, nx, seed + 1, 1.0f);
    rt_fill_float(w, nw, seed + 2, 1.0f);
    rt_fill_float(dy, ny, seed + 3, 1.0f);

    /* CPU: every (n, k, p, q, c, r, s) term contributes to y, dx and dw. */
    double *y_ref = (double *)calloc(ny, 8), *y_mag = (double *)calloc(ny, 8);
    double *dx_ref = (double *)calloc(nx, 8), *dx_mag = (double *)calloc(nx, 8);
    double *dw_ref = (double *)calloc(nw, 8), *dw_mag = (double *)calloc(nw, 8);
    if (!y_ref || !y_mag || !dx_ref || !dx_mag || !dw_ref || !dw_mag)
        rt_fail("out of host memory");
    for (int n = 0; n < g->n; n++)
        for (int k = 0; k < g->k; k++)
            for (int p = 0; p < oh; p++)
                for (int q = 0; q < ow; q++) {
                    size_t yi = idx4(n, k, p, q, g->k, oh, ow);
                    for (int c = 0; c < g->c; c++)
                        for (int r = 0; r < g->r; r++)
                            for (int t = 0; t < g->s; t++) {
                                int hh = p * g->stride - g->pad + r * g->dil;
                                int ww = q * g->stride - g->pad + t * g->dil;
                                if (hh < 0 || hh >= g->h || ww < 0 || ww >= g->w)
                                    continue;
                                size_t xi = idx4(n, c, hh, ww, g->c, g->h, g->w);
                                size_t wi = idx4(k, c, r, t, g->c, g->r, g->s);
                                double xv = x[xi], wv = w[wi], dyv = dy[yi];
                                y_ref[yi] += xv * wv;
                                y_mag[yi] += fabs(xv * wv);
                                dx_ref[xi] += dyv * wv;
                                dx_mag[xi] += fabs(dyv * wv);
                                dw_ref[wi] += dyv * xv;
                                dw_mag[wi] += fabs(dyv * xv);
                            }
                }

    float *d_x, *d_w, *d_y, *d_dy, *d_dx, *d_dw;
    CK(cudaMalloc((void **)&d_x, nx * 4));
    CK(cudaMalloc((void **)&d_w, nw * 4));
    CK(cudaMalloc((void **)&d_y, ny * 4));
    CK(cudaMalloc((void **)&d_dy, ny * 4));
    CK(cudaMalloc((void **)&d_dx, nx * 4));
    CK(cudaMalloc((void **)&d_dw, nw * 4));
    CK(cudaMemcpyAsync(d_x, x, nx * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_w, w, nw * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(d_dy, dy, ny * 4, cudaMemcpyHostToDevice, s));
    const size_t ws_limit = (size_t)64 << 20;
    void *ws = NULL;
    CK(cudaMalloc(&ws, ws_limit));
    float *got = (float *)rt_malloc((nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw)) * 4);
    const float one = 1.0f, zero = 0.0f;
    char algo_name[64];

    /* Forward. */
    cudnnConvolutionFwdAlgoPerf_t fp[16];
    int nf = 0;
    DN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 16, &nf, fp));
    cudnnConvolutionFwdAlgo_t fwd_algos[2] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
    for (int i = 0; i < nf; i++)
        if (usable(fp[i].status, fp[i].memory, fp[i].mathType, ws_limit)) {
            fwd_algos[0] = fp[i].algo;
            break;
        }
    for (int a = 0; a < 2; a++) {
        if (a == 1 && fwd_algos[1] == fwd_algos[0])
            break;
        size_t need = 0;
        DN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, fwd_algos[a], &need));
        if (need > ws_limit)
            rt_fail("forward algorithm %d needs %zu bytes of workspace", (int)fwd_algos[a], need);
        CK(cudaMemsetAsync(d_y, 0xff, ny * 4, s));
        DN(cudnnConvolutionForward(h, &one, xd, d_x, wd, d_w, cd, fwd_algos[a], ws, ws_limit, &zero, yd, d_y));
        rt_poison(got, ny * 4);
        CK(cudaMemcpyAsync(got, d_y, ny * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        snprintf(algo_name, sizeof algo_name, "fwd algo %d", (int)fwd_algos[a]);
        expect("forward", algo_name, got, y_ref, y_mag, ny);
    }

    /* Backward data. */
    cudnnConvolutionBwdDataAlgoPerf_t bp[16];
    int nb = 0;
    DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 16, &nb, bp));
    cudnnConvolutionBwdDataAlgo_t bd_algos[2] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
    for (int i = 0; i < nb; i++)
        if (usable(bp[i].status, bp[i].memory, bp[i].mathType, ws_limit)) {
            bd_algos[0] = bp[i].algo;
            break;
        }
    for (int a = 0; a < 2; a++) {
        if (a == 1 && bd_algos[1] == bd_algos[0])
            break;
        size_t need = 0;
        DN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, bd_algos[a], &need));
        if (need > ws_limit)
            rt_fail("backward-data algorithm %d needs %zu bytes of workspace", (int)bd_algos[a], need);
        CK(cudaMemsetAsync(d_dx, 0xff, nx * 4, s));
        DN(cudnnConvolutionBackwardData(h, &one, wd, d_w, yd, d_dy, cd, bd_algos[a], ws, ws_limit, &zero, xd, d_dx));
        rt_poison(got, nx * 4);
        CK(cudaMemcpyAsync(got, d_dx, nx * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        snprintf(algo_name, sizeof algo_name, "bwd-data algo %d", (int)bd_algos[a]);
        expect("backward data", algo_name, got, dx_ref, dx_mag, nx);
    }

    /* Backward filter. */
    cudnnConvolutionBwdFilterAlgoPerf_t wp[16];
    int nwp = 0;
    DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 16, &nwp, wp));
    cudnnConvolutionBwdFilterAlgo_t bf_algos[2] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0};
    for (int i = 0; i < nwp; i++)
        if (usable(wp[i].status, wp[i].memory, wp[i].mathType, ws_limit)) {
            bf_algos[0] = wp[i].algo;
            break;
        }
    for (int a = 0; a < 2; a++) {
        if (a == 1 && bf_algos[1] == bf_algos[0])
            break;
        size_t need = 0;
        DN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, bf_algos[a], &need));
        if (need > ws_limit)
            rt_fail("backward-filter algorithm %d needs %zu bytes of workspace", (int)bf_algos[a], need);
        CK(cudaMemsetAsync(d_dw, 0xff, nw * 4, s));
        DN(cudnnConvolutionBackwardFilter(h, &one, xd, d_x, yd, d_dy, cd, bf_algos[a], ws, ws_limit, &zero, wd,
                                          d_dw));
        rt_poison(got, nw * 4);
        CK(cudaMemcpyAsync(got, d_dw, nw * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        snprintf(algo_name, sizeof algo_name, "bwd-filter algo %d", (int)bf_algos[a]);
        expect("backward filter", algo_name, got, dw_ref, dw_mag, nw);
    }
    rt_info("geometry pad %d stride %d dilation %d: fwd algo %d, bwd-data algo %d, bwd-filter algo %d", g->pad,
            g->stride, g->dil, (int)fwd_algos[0], (int)bd_algos[0], (int)bf_algos[0]);

    DN(cudnnDestroyTensorDescriptor(xd));
    DN(cudnnDestroyTensorDescriptor(yd));
    DN(cudnnDestroyFilterDescriptor(wd));
    DN(cudnnDestroyConvolutionDescriptor(cd));
    CK(cudaFree(d_x));
    CK(cudaFree(d_w));
    CK(cudaFree(d_y));
    CK(cudaFree(d_dy));
    CK(cudaFree(d_dx));
    CK(cudaFree(d_dw));
    CK(cudaFree(ws));
    free(x);
    free(w);
    free(dy);
    free(got);
    free(y_ref);
    free(y_mag);
    free(dx_ref);
    free(dx_mag);
    free(dw_ref);
    free(dw_mag);
}

int main(void)
{
    rt_begin("cudnn");
    rt_require_gpu();
    rt_info("cuDNN version %zu (headers %d), built against CUDA runtime %zu", cudnnGetVersion(), CUDNN_VERSION,
            cudnnGetCudartVersion());
    cudnnHandle_t h;
    DN(cudnnCreate(&h));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DN(cudnnSetStream(h, s));

    const geom geoms[] = {
        {2, 3, 9, 11, 4, 3, 3, 1, 1, 1},
        {2, 3, 10, 9, 5, 3, 3, 0, 2, 1},
        {1, 4, 12, 12, 3, 3, 3, 2, 1, 2},
    };
    for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
        run_geom(h, s, &geoms[i], 100 * (uint64_t)(i + 1));

    DN(cudnnDestroy(h));
    CK(cudaStreamDestroy(s));
    rt_pass();
}
