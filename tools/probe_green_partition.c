/* Can cumuxd reserve SMs for one client (issue 11) inside its one context? Green contexts partition the
 * SMs; the questions, on a GPU:
 *  1. a kernel of a module loaded in the primary context, launched with the primary context current on a
 *     stream of a green context (cuGreenCtxStreamCreate): accepted? (then clients' code needs no reload)
 *  2. the same with a CUkernel of a context-independent library (cuLibraryLoadData)
 *  3. does the stream keep to its SMs: a grid of one block per SM of 1 warp spinning T ms takes ~T on
 *     the whole GPU and ~2T on half of it
 *  4. two disjoint halves at once: each as fast as alone on its half (>= 0.95x)
 *  5. what making a partition and a stream in it costs (a change of SMs must take effect in 100 ms)
 *  6. does the primary context keep off a green half (reserved, not just capped)
 *  7. issue 13: 64 streams of 4-block 1 ms kernels in the primary context (32 hardware queues) against 64
 *     green contexts over the whole GPU, a stream each: do green contexts bring queues of their own?
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_green_partition.c -o /tmp/pgp -lcuda && \
 *     /tmp/pgp build/tests/gpu/gpu_kernels.fatbin */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *ename(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

#define CK(x)                                                                                          \
    do {                                                                                               \
        CUresult r_ = (x);                                                                             \
        if (r_) {                                                                                      \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #x, ename(r_));                               \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static void *slurp(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", p);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        exit(1);
    fclose(f);
    return b;
}

/* Time of one grid of `blocks` 1-warp blocks spinning `cycles` on stream s (ms). */
static double grid_ms(CUfunction f, CUstream s, unsigned blocks, long long cycles)
{
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    double t = now_ms();
    CUresult r = cuLaunchKernel(f, blocks, 1, 1, 32, 1, 1, 0, s, args, NULL);
    if (r == CUDA_SUCCESS)
        r = cuStreamSynchronize(s);
    return r == CUDA_SUCCESS ? now_ms() - t : -(double)r;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: %s gpu_kernels.fatbin\n", argv[0]);
        return 2;
    }
    CUdevice dev;
    CUcontext prim;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&prim, dev));
    CK(cuCtxSetCurrent(prim));
    void *img = slurp(argv[1]);
    CUmodule mod;
    CUfunction f;
    CK(cuModuleLoadData(&mod, img));
    CK(cuModuleGetFunction(&f, mod, "spin_flag"));
    CUlibrary lib;
    CUkernel k;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&k, lib, "spin_flag"));
    int khz = 0, nsm = 0;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    CK(cuDeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    long long cycles = (long long)khz * 20; /* 20 ms */
    CUdevResource all, half[2], rest;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned groups = 2;
    double t = now_ms();
    CK(cuDevSmResourceSplitByCount(half, &groups, &all, &rest, 0, all.sm.smCount / 2));
    double t_split = now_ms() - t;
    printf("SMs %u: %u groups of %u (rest %u), split %.2f ms\n", all.sm.smCount, groups, half[0].sm.smCount,
           rest.sm.smCount, t_split);
    CUgreenCtx g[2];
    CUstream s[2];
    double t_make[2];
    for (int i = 0; i < 2; i++) {
        CUdevResourceDesc desc;
        t = now_ms();
        CK(cuDevResourceGenerateDesc(&desc, &half[i], 1));
        CK(cuGreenCtxCreate(&g[i], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CK(cuGreenCtxStreamCreate(&s[i], g[i], CU_STREAM_NON_BLOCKING, 0));
        t_make[i] = now_ms() - t;
    }
    printf("5. a green context and a stream in it: %.2f ms, %.2f ms\n", t_make[0], t_make[1]);
    CK(cuCtxSetCurrent(prim));
    CUstream ps;
    CK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    double whole = grid_ms(f, ps, (unsigned)nsm, cycles);
    printf("whole GPU, %d blocks of 20 ms: %.1f ms\n", nsm, whole);
    double q1 = grid_ms(f, s[0], (unsigned)nsm, cycles);
    if (q1 < 0)
        printf("1. primary-context function on a green stream: refused (%s)\n", ename((CUresult)(-q1)));
    else
        printf("1. primary-context function on a green stream: ran, %.1f ms (%s)\n", q1,
               q1 > 1.6 * whole ? "kept to its half" : "NOT kept to its half");
    double q2 = grid_ms((CUfunction)k, s[0], (unsigned)nsm, cycles);
    if (q2 < 0)
        printf("2. library kernel on a green stream: refused (%s)\n", ename((CUresult)(-q2)));
    else
        printf("2. library kernel on a green stream: ran, %.1f ms (%s)\n", q2,
               q2 > 1.6 * whole ? "kept to its half" : "NOT kept to its half");
    CUfunction use = q1 >= 0 ? f : (CUfunction)k;
    /* 3 and 4: half alone, then both halves at once. */
    unsigned hb = half[0].sm.smCount;
    double alone = grid_ms(use, s[0], hb * 4, cycles);
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    t = now_ms();
    for (int i = 0; i < 2; i++)
        CK(cuLaunchKernel(use, hb * 4, 1, 1, 32, 1, 1, 0, s[i], args, NULL));
    for (int i = 0; i < 2; i++)
        CK(cuStreamSynchronize(s[i]));
    double both = now_ms() - t;
    printf("3/4. %u blocks (4 waves) on one half alone %.1f ms; both halves at once %.1f ms: %.2fx of alone\n",
           hb * 4, alone, both, alone / both);
    /* 6: the primary context's own stream beside a green stream: does it use the green half's SMs? */
    t = now_ms();
    CK(cuLaunchKernel(use, hb * 4, 1, 1, 32, 1, 1, 0, s[0], args, NULL));
    CK(cuLaunchKernel(f, (unsigned)nsm * 4, 1, 1, 32, 1, 1, 0, ps, args, NULL));
    CK(cuStreamSynchronize(s[0]));
    double green_beside = now_ms() - t;
    CK(cuStreamSynchronize(ps));
    printf("6. the green half's grid beside a whole-GPU grid of the primary context: %.1f ms (alone %.1f): %s\n",
           green_beside, alone, green_beside < 1.15 * alone ? "its SMs kept for it" : "shared with the primary context");
    /* 7: 64 streams of the primary context against 64 whole-GPU green contexts, 20 launches of 4 blocks each. */
    enum { NS = 64, LAUNCHES = 20 };
    long long ms1 = (long long)khz; /* 1 ms */
    void *a1[] = {&ms1, &p0, &v};
    CUstream many[NS];
    CUgreenCtx wg[NS];
    for (int i = 0; i < NS; i++)
        CK(cuStreamCreate(&many[i], CU_STREAM_NON_BLOCKING));
    t = now_ms();
    for (int l = 0; l < LAUNCHES; l++)
        for (int i = 0; i < NS; i++)
            CK(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, many[i], a1, NULL));
    CK(cuCtxSynchronize());
    double prim_ms = now_ms() - t;
    CUdevResourceDesc wdesc;
    CK(cuDevResourceGenerateDesc(&wdesc, &all, 1));
    for (int i = 0; i < NS; i++) {
        CK(cuGreenCtxCreate(&wg[i], wdesc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CK(cuGreenCtxStreamCreate(&many[i], wg[i], CU_STREAM_NON_BLOCKING, 0));
    }
    CK(cuCtxSetCurrent(prim));
    t = now_ms();
    for (int l = 0; l < LAUNCHES; l++)
        for (int i = 0; i < NS; i++)
            CK(cuLaunchKernel(use, 4, 1, 1, 128, 1, 1, 0, many[i], a1, NULL));
    for (int i = 0; i < NS; i++)
        CK(cuStreamSynchronize(many[i]));
    double green_ms = now_ms() - t;
    printf("7. %d streams x %d launches of 4 blocks x 1 ms: primary context %.1f ms, %d green contexts %.1f ms "
           "(ideal, all concurrent: ~%d ms)\n", NS, LAUNCHES, prim_ms, NS, green_ms, LAUNCHES);
    printf("SUMMARY q1 %s, q2 %s, half alone %.1f ms, halves together %.2fx, partition+stream %.2f ms, "
           "64 streams %.0f ms vs 64 green %.0f ms\n", q1 < 0 ? "refused" : "ran", q2 < 0 ? "refused" : "ran", alone,
           alone / both, t_make[0], prim_ms, green_ms);
    return 0;
}
