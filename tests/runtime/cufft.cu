/* cufft: cuFFT single precision against a naive DFT computed in double on the CPU:
 * - 1-D C2C, n=64, batch 3: forward out of place, then inverse in place (must give n * input);
 * - 1-D C2C through cufftPlanMany, n=100 and n=97 (a prime), batch 2, forward and inverse;
 * - 2-D C2C 16 x 24, forward and inverse;
 * - 1-D R2C n=128, batch 2 (n/2+1 outputs each), then C2R back (n * input).
 * Tolerance of every output element: 1e-5 of the L1 norm of its transform's input (which bounds the
 * magnitude of every output). Plans run on a created stream. */
#include "rt_test.h"

#include <cufft.h>

static const char *cufft_name(cufftResult r)
{
    switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "?";
    }
}

static void ff_check(cufftResult r, const char *what, const char *file, int line)
{
    if (r != CUFFT_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)r, cufft_name(r));
}
#define FF(call) ff_check((call), #call, __FILE__, __LINE__)

static const double PI = 3.14159265358979323846;

/* out[k] = sum_j in[j] * exp(sign * 2 pi i * j k / n), strided access for 2-D use. */
static void dft(const double *re, const double *im, size_t stride, int n, int sign, double *ore, double *oim)
{
    for (int k = 0; k < n; k++) {
        double sr = 0, si = 0;
        for (int j = 0; j < n; j++) {
            double ang = sign * 2.0 * PI * (double)(((long long)j * k) % n) / n;
            double c = cos(ang), s = sin(ang);
            double xr = re[(size_t)j * stride], xi = im[(size_t)j * stride];
            sr += xr * c - xi * s;
            si += xr * s + xi * c;
        }
        ore[k] = sr;
        oim[k] = si;
    }
}

static void expect_complex(const char *what, const cufftComplex *got, const double *re, const double *im, size_t n,
                           double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i].x - re[i]) <= tol) || !(fabs(got[i].y - im[i]) <= tol))
            rt_fail("%s: element %zu is (%.7g, %.7g), expected (%.7g, %.7g), tolerance %.3g", what, i,
                    (double)got[i].x, (double)got[i].y, re[i], im[i], tol);
}

static void random_complex(cufftComplex *x, size_t n, uint64_t seed)
{
    rt_rng r;
    rt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        x[i].x = rt_rng_float(&r);
        x[i].y = rt_rng_float(&r);
    }
}

static double l1(const cufftComplex *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs(x[i].x) + fabs(x[i].y);
    return s;
}

/* Batched 1-D C2C through `plan`, forward then inverse in place, against the DFT. */
static void check_c2c_1d(const char *what, cufftHandle plan, cudaStream_t s, int n, int batch, uint64_t seed)
{
    size_t total = (size_t)n * batch;
    cufftComplex *x = (cufftComplex *)rt_malloc(total * sizeof *x), *y = (cufftComplex *)rt_malloc(total * sizeof *y);
    random_complex(x, total, seed);
    cufftComplex *dx = NULL, *dy = NULL;
    CK(cudaMalloc((void **)&dx, total * sizeof *dx));
    CK(cudaMalloc((void **)&dy, total * sizeof *dy));
    CK(cudaMemcpyAsync(dx, x, total * sizeof *x, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(dy, 0xff, total * sizeof *dy, s));
    FF(cufftExecC2C(plan, dx, dy, CUFFT_FORWARD));
    rt_poison(y, total * sizeof *y);
    CK(cudaMemcpyAsync(y, dy, total * sizeof *y, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double *re = (double *)rt_malloc((size_t)n * 8), *im = (double *)rt_malloc((size_t)n * 8);
    double *ore = (double *)rt_malloc((size_t)n * 8), *oim = (double *)rt_malloc((size_t)n * 8);
    char msg[128];
    for (int b = 0; b < batch; b++) {
        const cufftComplex *xb = x + (size_t)b * n;
        for (int j = 0; j < n; j++) {
            re[j] = xb[j].x;
            im[j] = xb[j].y;
        }
        dft(re, im, 1, n, -1, ore, oim);
        snprintf(msg, sizeof msg, "%s forward, batch %d", what, b);
        expect_complex(msg, y + (size_t)b * n, ore, oim, (size_t)n, 1e-5 * l1(xb, (size_t)n));
    }
    /* Inverse, in place on the device result: n * x. */
    FF(cufftExecC2C(plan, dy, dy, CUFFT_INVERSE));
    rt_poison(y, total * sizeof *y);
    CK(cudaMemcpyAsync(y, dy, total * sizeof *y, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int b = 0; b < batch; b++) {
        const cufftComplex *xb = x + (size_t)b * n;
        for (int j = 0; j < n; j++) {
            ore[j] = (double)n * xb[j].x;
            oim[j] = (double)n * xb[j].y;
        }
        snprintf(msg, sizeof msg, "%s inverse(forward) = n * x, batch %d", what, b);
        expect_complex(msg, y + (size_t)b * n, ore, oim, (size_t)n, 1e-5 * n * l1(xb, (size_t)n));
    }
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    free(x);
    free(y);
    free(re);
    free(im);
    free(ore);
    free(oim);
}

static void check_c2c_2d(cudaStream_t s)
{
    const int nx = 16, ny = 24; /* row-major: ny is contiguous */
    const size_t total = (size_t)nx * ny;
    cufftHandle plan;
    FF(cufftPlan2d(&plan, nx, ny, CUFFT_C2C));
    FF(cufftSetStream(plan, s));
    cufftComplex *x = (cufftComplex *)rt_malloc(total * sizeof *x), *y = (cufftComplex *)rt_malloc(total * sizeof *y);
    random_complex(x, total, 77);
    cufftComplex *dx = NULL, *dy = NULL;
    CK(cudaMalloc((void **)&dx, total * sizeof *dx));
    CK(cudaMalloc((void **)&dy, total * sizeof *dy));
    CK(cudaMemcpyAsync(dx, x, total * sizeof *x, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(dy, 0xff, total * sizeof *dy, s));
    FF(cufftExecC2C(plan, dx, dy, CUFFT_FORWARD));
    rt_poison(y, total * sizeof *y);
    CK(cudaMemcpyAsync(y, dy, total * sizeof *y, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    /* Separable: rows (along y) then columns (along x). */
    double *re = (double *)rt_malloc(total * 8), *im = (double *)rt_malloc(total * 8);
    double *tre = (double *)rt_malloc(total * 8), *tim = (double *)rt_malloc(total * 8);
    double *ore = (double *)rt_malloc(total * 8), *oim = (double *)rt_malloc(total * 8);
    double col_re[64], col_im[64];
    for (size_t i = 0; i < total; i++) {
        re[i] = x[i].x;
        im[i] = x[i].y;
    }
    for (int r = 0; r < nx; r++)
        dft(re + (size_t)r * ny, im + (size_t)r * ny, 1, ny, -1, tre + (size_t)r * ny, tim + (size_t)r * ny);
    for (int c = 0; c < ny; c++) {
        dft(tre + c, tim + c, (size_t)ny, nx, -1, col_re, col_im);
        for (int r = 0; r < nx; r++) {
            ore[(size_t)r * ny + c] = col_re[r];
            oim[(size_t)r * ny + c] = col_im[r];
        }
    }
    double tol = 1e-5 * l1(x, total);
    expect_complex("2-D C2C 16x24 forward", y, ore, oim, total, tol);
    FF(cufftExecC2C(plan, dy, dx, CUFFT_INVERSE));
    rt_poison(y, total * sizeof *y);
    CK(cudaMemcpyAsync(y, dx, total * sizeof *y, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < total; i++) {
        ore[i] = (double)total * x[i].x;
        oim[i] = (double)total * x[i].y;
    }
    expect_complex("2-D C2C 16x24 inverse(forward) = n * x", y, ore, oim, total, tol * (double)total);
    FF(cufftDestroy(plan));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    free(x);
    free(y);
    free(re);
    free(im);
    free(tre);
    free(tim);
    free(ore);
    free(oim);
}

static void check_r2c(cudaStream_t s)
{
    const int n = 128, batch = 2, nh = n / 2 + 1;
    cufftHandle fwd, inv;
    FF(cufftPlan1d(&fwd, n, CUFFT_R2C, batch));
    FF(cufftPlan1d(&inv, n, CUFFT_C2R, batch));
    FF(cufftSetStream(fwd, s));
    FF(cufftSetStream(inv, s));
    float *x = (float *)rt_malloc((size_t)n * batch * 4), *xb = (float *)rt_malloc((size_t)n * batch * 4);
    cufftComplex *y = (cufftComplex *)rt_malloc((size_t)nh * batch * sizeof *y);
    rt_fill_float(x, (size_t)n * batch, 88, 1.0f);
    cufftReal *dx = NULL;
    cufftComplex *dy = NULL;
    CK(cudaMalloc((void **)&dx, (size_t)n * batch * 4));
    CK(cudaMalloc((void **)&dy, (size_t)nh * batch * sizeof *dy));
    CK(cudaMemcpyAsync(dx, x, (size_t)n * batch * 4, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(dy, 0xff, (size_t)nh * batch * sizeof *dy, s));
    FF(cufftExecR2C(fwd, dx, dy));
    rt_poison(y, (size_t)nh * batch * sizeof *y);
    CK(cudaMemcpyAsync(y, dy, (size_t)nh * batch * sizeof *y, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double re[128], im[128], ore[128], oim[128];
    for (int b = 0; b < batch; b++) {
        double norm = 0;
        for (int j = 0; j < n; j++) {
            re[j] = x[b * n + j];
            im[j] = 0;
            norm += fabs(re[j]);
        }
        dft(re, im, 1, n, -1, ore, oim);
        expect_complex("1-D R2C n=128", y + (size_t)b * nh, ore, oim, (size_t)nh, 1e-5 * norm);
    }
    /* C2R overwrites its input: run it on the device copy. */
    CK(cudaMemsetAsync(dx, 0xff, (size_t)n * batch * 4, s));
    FF(cufftExecC2R(inv, dy, dx));
    rt_poison(xb, (size_t)n * batch * 4);
    CK(cudaMemcpyAsync(xb, dx, (size_t)n * batch * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int b = 0; b < batch; b++) {
        double norm = 0;
        for (int j = 0; j < n; j++)
            norm += fabs((double)x[b * n + j]);
        for (int j = 0; j < n; j++) {
            double want = (double)n * x[b * n + j], got = xb[b * n + j];
            if (!(fabs(got - want) <= 1e-5 * n * norm))
                rt_fail("C2R(R2C(x)) = n * x: batch %d element %d is %.7g, expected %.7g", b, j, got, want);
        }
    }
    FF(cufftDestroy(fwd));
    FF(cufftDestroy(inv));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    free(x);
    free(xb);
    free(y);
}

int main(void)
{
    rt_begin("cufft");
    rt_require_gpu();
    int ver = 0;
    FF(cufftGetVersion(&ver));
    rt_info("cuFFT version %d", ver);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cufftHandle p64;
    FF(cufftPlan1d(&p64, 64, CUFFT_C2C, 3));
    FF(cufftSetStream(p64, s));
    check_c2c_1d("1-D C2C n=64 batch 3", p64, s, 64, 3, 11);
    FF(cufftDestroy(p64));

    const int sizes[] = {100, 97};
    for (int i = 0; i < 2; i++) {
        int n = sizes[i];
        cufftHandle p;
        FF(cufftPlanMany(&p, 1, &n, NULL, 1, n, NULL, 1, n, CUFFT_C2C, 2));
        FF(cufftSetStream(p, s));
        char what[64];
        snprintf(what, sizeof what, "1-D C2C (PlanMany) n=%d batch 2", n);
        check_c2c_1d(what, p, s, n, 2, 20 + (uint64_t)n);
        FF(cufftDestroy(p));
    }
    check_c2c_2d(s);
    check_r2c(s);

    CK(cudaStreamDestroy(s));
    rt_pass();
}
