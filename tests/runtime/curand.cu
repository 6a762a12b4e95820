/* curand: the cuRAND host API generating on the GPU (curandCreateGenerator), for XORWOW, Philox and
 * MRG32k3a, on a created stream:
 * - curandGenerateUniform: every value in (0, 1], mean, variance and a 16-bin histogram within
 *   6 standard errors of the uniform distribution's;
 * - curandGenerateNormal (mean 2, stddev 3): mean and variance within bounds;
 * - determinism: a second generator with the same seed gives the same bits, another seed other values;
 * - curandGenerate (raw 32-bit output): logged, how much of it equals the CPU generator's
 *   (curandCreateGeneratorHost, same type and seed); the documentation promises no equality. */
#include "rt_test.h"

#include <curand.h>

static const char *curand_name(curandStatus_t st)
{
    switch (st) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "?";
    }
}

static void cr_check(curandStatus_t st, const char *what, const char *file, int line)
{
    if (st != CURAND_STATUS_SUCCESS)
        rt_fail("%s:%d: %s returned %d (%s)", file, line, what, (int)st, curand_name(st));
}
#define CR(call) cr_check((call), #call, __FILE__, __LINE__)

static const size_t N = (size_t)1 << 22;

static curandGenerator_t make_gen(curandRngType_t type, unsigned long long seed, cudaStream_t s)
{
    curandGenerator_t g;
    CR(curandCreateGenerator(&g, type));
    CR(curandSetPseudoRandomGeneratorSeed(g, seed));
    CR(curandSetStream(g, s));
    return g;
}

static void check_uniform(const char *tn, const float *u)
{
    double sum = 0, sq = 0;
    size_t bins[16] = {0};
    for (size_t i = 0; i < N; i++) {
        float v = u[i];
        if (!(v > 0.0f && v <= 1.0f))
            rt_fail("%s uniform: value %zu is %.9g, outside (0, 1]", tn, i, (double)v);
        sum += v;
        int b = (int)(v * 16.0f);
        bins[b > 15 ? 15 : b]++;
    }
    double mean = sum / (double)N;
    for (size_t i = 0; i < N; i++)
        sq += ((double)u[i] - mean) * ((double)u[i] - mean);
    double var = sq / (double)(N - 1);
    double se_mean = sqrt(1.0 / 12.0 / (double)N), se_var = sqrt((1.0 / 80.0 - 1.0 / 144.0) / (double)N);
    if (fabs(mean - 0.5) > 6 * se_mean || fabs(var - 1.0 / 12.0) > 6 * se_var)
        rt_fail("%s uniform: mean %.6f (0.5 +- %.2g), variance %.6f (%.6f +- %.2g)", tn, mean, 6 * se_mean, var,
                1.0 / 12.0, 6 * se_var);
    double expect = (double)N / 16.0, se_bin = sqrt(expect * 15.0 / 16.0);
    for (int b = 0; b < 16; b++)
        if (fabs((double)bins[b] - expect) > 6 * se_bin)
            rt_fail("%s uniform: bin %d holds %zu values, expected %.0f +- %.0f", tn, b, bins[b], expect, 6 * se_bin);
    rt_info("%s uniform: mean %.6f variance %.6f", tn, mean, var);
}

static void check_normal(const char *tn, const float *x, double mu, double sigma)
{
    double sum = 0, sq = 0;
    for (size_t i = 0; i < N; i++) {
        if (!isfinite(x[i]))
            rt_fail("%s normal: value %zu is not finite", tn, i);
        sum += x[i];
    }
    double mean = sum / (double)N;
    for (size_t i = 0; i < N; i++)
        sq += ((double)x[i] - mean) * ((double)x[i] - mean);
    double var = sq / (double)(N - 1);
    double se_mean = sigma / sqrt((double)N), se_var = sigma * sigma * sqrt(2.0 / (double)N);
    if (fabs(mean - mu) > 6 * se_mean || fabs(var - sigma * sigma) > 6 * se_var)
        rt_fail("%s normal: mean %.5f (%.1f +- %.2g), variance %.5f (%.1f +- %.2g)", tn, mean, mu, 6 * se_mean, var,
                sigma * sigma, 6 * se_var);
    rt_info("%s normal: mean %.5f variance %.5f", tn, mean, var);
}

int main(void)
{
    rt_begin("curand");
    rt_require_gpu();
    int ver = 0;
    CR(curandGetVersion(&ver));
    rt_info("cuRAND version %d", ver);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d = NULL, *d2 = NULL;
    CK(cudaMalloc((void **)&d, N * 4));
    CK(cudaMalloc((void **)&d2, N * 4));
    float *h = NULL, *h2 = NULL;
    CK(cudaMallocHost((void **)&h, N * 4));
    CK(cudaMallocHost((void **)&h2, N * 4));

    const struct {
        curandRngType_t type;
        const char *name;
        int host_compare; /* log the comparison with the CPU generator */
    } types[] = {
        {CURAND_RNG_PSEUDO_DEFAULT, "XORWOW", 1},
        {CURAND_RNG_PSEUDO_PHILOX4_32_10, "Philox4x32-10", 1},
        {CURAND_RNG_PSEUDO_MRG32K3A, "MRG32k3a", 1},
    };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const char *tn = types[t].name;
        curandGenerator_t g = make_gen(types[t].type, 1234ull + t, s);
        CK(cudaMemsetAsync(d, 0xff, N * 4, s));
        CR(curandGenerateUniform(g, d, N));
        rt_poison(h, N * 4);
        CK(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        check_uniform(tn, h);

        /* Same seed, new generator: the same bits. */
        curandGenerator_t g2 = make_gen(types[t].type, 1234ull + t, s);
        CR(curandGenerateUniform(g2, d2, N));
        rt_poison(h2, N * 4);
        CK(cudaMemcpyAsync(h2, d2, N * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        if (memcmp(h, h2, N * 4) != 0)
            rt_fail("%s: two generators with the same seed gave different numbers", tn);
        CR(curandDestroyGenerator(g2));
        /* Another seed: (almost) all values differ. */
        g2 = make_gen(types[t].type, 999999ull, s);
        CR(curandGenerateUniform(g2, d2, N));
        CK(cudaMemcpyAsync(h2, d2, N * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        size_t same = 0;
        for (size_t i = 0; i < N; i++)
            same += h[i] == h2[i];
        if (same > N / 1000)
            rt_fail("%s: another seed repeated %zu of %zu values", tn, same, N);
        CR(curandDestroyGenerator(g2));

        /* Normal, from the first generator (its sequence continues). */
        CK(cudaMemsetAsync(d, 0xff, N * 4, s));
        CR(curandGenerateNormal(g, d, N, 2.0f, 3.0f));
        rt_poison(h, N * 4);
        CK(cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        check_normal(tn, h, 2.0, 3.0);
        CR(curandDestroyGenerator(g));

        if (types[t].host_compare) {
            const size_t m = 100000;
            curandGenerator_t gd = make_gen(types[t].type, 4242ull, s), gh;
            CR(curandCreateGeneratorHost(&gh, types[t].type));
            CR(curandSetPseudoRandomGeneratorSeed(gh, 4242ull));
            unsigned *hu = (unsigned *)rt_malloc(m * 4), *du_h = (unsigned *)rt_malloc(m * 4);
            CR(curandGenerate(gd, (unsigned *)d, m));
            rt_poison(du_h, m * 4);
            CK(cudaMemcpyAsync(du_h, d, m * 4, cudaMemcpyDeviceToHost, s));
            CK(cudaStreamSynchronize(s));
            rt_poison(hu, m * 4);
            CR(curandGenerate(gh, hu, m));
            size_t agree = 0;
            for (size_t i = 0; i < m; i++)
                agree += hu[i] == du_h[i];
            rt_info("%s: raw output of the GPU and CPU generators agrees on %zu of %zu values", tn, agree, m);
            CR(curandDestroyGenerator(gd));
            CR(curandDestroyGenerator(gh));
            free(hu);
            free(du_h);
        }
    }

    CK(cudaFree(d));
    CK(cudaFree(d2));
    CK(cudaFreeHost(h));
    CK(cudaFreeHost(h2));
    CK(cudaStreamDestroy(s));
    rt_pass();
}
