/* Can cumuxd reserve SMs for one client (issue 11) inside its one context? Green contexts partition the
 * SMs; the questions, on a GPU:
 *  1. a kernel of a module loaded in the primary context, launched with the primary context current on a
 *     stream of a green context (cuGreenCtxStreamCreate): accepted? (then clients' code needs no reload)
 *  2. the same with a CUkernel of a context-independent library (cuLibraryLoadData)
 *  3. does the stream keep to its SMs: a grid of one block per SM (each block takes the SM's whole shared
 *     memory, so no two share an SM) spinning T ms takes ~T on the whole GPU and ~2T on half of it
 *  4. two disjoint halves at once: each as fast as alone on its half (>= 0.95x)
 *  5. what making a partition and a stream in it costs (a change of SMs must take effect in 100 ms)
 *  6. does the primary context keep off a green half (reserved, not just capped)
 *  7. issue 13: 64 streams of 4-block 1 ms kernels in the primary context (32 hardware queues) against 64
 *     green contexts over the whole GPU, a stream each: do green contexts bring queues of their own?
 *     Launched round-robin (benign: every queue's head is runnable) and in bursts of 10 a stream (as a
 *     client does: a stream's second kernel at the head of a shared queue holds back the streams behind
 *     it), for 32, 64 and 128 streams; ideal 10 ms a burst.
 *  8. the primary context's memory written by a kernel on a green stream, copied and set on it, an event
 *     recorded there and waited on by a primary stream (all with the primary context current)
 *  9. what 128 green contexts over the whole GPU cost: time and device memory
 * 10. the split's granularity: minSmPartitionSize and smCoscheduledAlignment of the device, and the group
 *     the driver gives for 1 SM with and without CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING
 *     (server/placement.c, CUMUX_SM_GROUPS=fine)
 * 11. thread-block clusters of 2, 4, 8 (cuLaunchKernelEx) in the primary context, in a green context of
 *     coscheduled groups and in one of fine groups (66 SMs): which launch
 * The probe sets CUDA_DEVICE_MAX_CONNECTIONS=32 for itself, as cumuxd does.
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_green_partition.c -o /tmp/pgp -lcuda && \
 *     /tmp/pgp build/tests/gpu/gpu_kernels.fatbin */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "probe_util.h"

static unsigned smem_all; /* shared memory a block asks for: an SM's all, so one block an SM */

/* Time of one grid of `blocks` 1-warp blocks spinning `cycles` on stream s (ms), one block an SM. */
static double grid_ms(CUfunction f, CUstream s, unsigned blocks, long long cycles)
{
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    double t = now_ms();
    CUresult r = cuLaunchKernel(f, blocks, 1, 1, 32, 1, 1, smem_all, s, args, NULL);
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
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
    CUdevice dev;
    CUcontext prim;
    prim = probe_primary_context(&dev);
    void *img = probe_read_file(argv[1]);
    CUmodule mod;
    CUfunction f;
    CK(cuModuleLoadData(&mod, img));
    CK(cuModuleGetFunction(&f, mod, "spin_flag"));
    CUlibrary lib;
    CUkernel k;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&k, lib, "spin_flag"));
    int optin = 0;
    CK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    smem_all = (unsigned)optin;
    CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin));
    CK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin, k, dev));
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
        /* the split rounds to the SM-group granularity (66 -> 72 on an H200): one group, the rest the other */
        CK(cuDevResourceGenerateDesc(&desc, groups > 1 || i == 0 ? &half[i] : &rest, 1));
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
    /* 3 and 4: half alone, then both halves at once: two waves each. */
    unsigned hb = half[0].sm.smCount;
    double alone = grid_ms(use, s[0], hb * 2, cycles);
    void *p0 = NULL;
    int v = 0;
    void *args[] = {&cycles, &p0, &v};
    t = now_ms();
    for (int i = 0; i < 2; i++)
        CK(cuLaunchKernel(use, hb * 2, 1, 1, 32, 1, 1, smem_all, s[i], args, NULL));
    for (int i = 0; i < 2; i++)
        CK(cuStreamSynchronize(s[i]));
    double both = now_ms() - t;
    printf("3/4. %u blocks (2 waves) on one half alone %.1f ms; both halves at once %.1f ms: %.2fx of alone\n",
           hb * 2, alone, both, alone / both);
    /* 6: the primary context's own stream beside a green stream: does it use the green half's SMs? */
    t = now_ms();
    CK(cuLaunchKernel(use, hb * 2, 1, 1, 32, 1, 1, smem_all, s[0], args, NULL));
    CK(cuLaunchKernel(f, (unsigned)nsm * 4, 1, 1, 32, 1, 1, smem_all, ps, args, NULL));
    CK(cuStreamSynchronize(s[0]));
    double green_beside = now_ms() - t;
    CK(cuStreamSynchronize(ps));
    printf("6. the green half's grid beside a whole-GPU grid of the primary context: %.1f ms (alone %.1f): %s\n",
           green_beside, alone, green_beside < 1.15 * alone ? "its SMs kept for it" : "shared with the primary context");
    /* 7: N streams of the primary context against N whole-GPU green contexts, a stream each. */
    enum { NMAX = 128, BURST = 10 };
    long long ms1 = (long long)khz; /* 1 ms */
    void *a1[] = {&ms1, &p0, &v};
    static CUstream pstreams[NMAX], gstreams[NMAX];
    static CUgreenCtx wg[NMAX];
    for (int i = 0; i < NMAX; i++)
        CK(cuStreamCreate(&pstreams[i], CU_STREAM_NON_BLOCKING));
    size_t free0 = 0, free1 = 0, total = 0;
    CK(cuMemGetInfo(&free0, &total));
    CUdevResourceDesc wdesc;
    CK(cuDevResourceGenerateDesc(&wdesc, &all, 1));
    t = now_ms();
    int made = 0;
    for (; made < NMAX; made++) {
        CUresult r = cuGreenCtxCreate(&wg[made], wdesc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
        if (r == CUDA_SUCCESS)
            r = cuGreenCtxStreamCreate(&gstreams[made], wg[made], CU_STREAM_NON_BLOCKING, 0);
        if (r != CUDA_SUCCESS) {
            printf("9. green context %d: %s\n", made, ename(r));
            break;
        }
    }
    double make_ms = now_ms() - t;
    CK(cuCtxSetCurrent(prim));
    CK(cuMemGetInfo(&free1, &total));
    printf("9. %d whole-GPU green contexts with a stream each: %.1f ms, %.1f MiB of device memory\n", made,
           make_ms, ((double)free0 - (double)free1) / 1048576.0);
    double res[2][2][3]; /* [primary, green][round-robin, burst][32, 64, 128] */
    static const int counts[3] = {32, 64, 128};
    for (int g = 0; g < 2; g++)
        for (int order = 0; order < 2; order++)
            for (int c = 0; c < 3; c++) {
                int n = counts[c];
                CUstream *st = g ? gstreams : pstreams;
                if (n > (g ? made : NMAX)) {
                    res[g][order][c] = -1;
                    continue;
                }
                t = now_ms();
                if (order == 0) {
                    for (int l = 0; l < BURST; l++)
                        for (int i = 0; i < n; i++)
                            CK(cuLaunchKernel(use, 4, 1, 1, 128, 1, 1, 0, st[i], a1, NULL));
                } else {
                    for (int i = 0; i < n; i++)
                        for (int l = 0; l < BURST; l++)
                            CK(cuLaunchKernel(use, 4, 1, 1, 128, 1, 1, 0, st[i], a1, NULL));
                }
                for (int i = 0; i < n; i++)
                    CK(cuStreamSynchronize(st[i]));
                res[g][order][c] = now_ms() - t;
            }
    for (int order = 0; order < 2; order++)
        for (int c = 0; c < 3; c++)
            printf("7. %3d streams x %d launches of 4 blocks x 1 ms, %s: primary context %.1f ms, green contexts "
                   "%.1f ms (ideal ~%d ms)\n", counts[c], BURST, order ? "bursts of 10 a stream" : "round-robin",
                   res[0][order][c], res[1][order][c], BURST);
    /* 8: memory and events shared between the primary context and a green stream. */
    enum { NINT = 1 << 20 };
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, NINT * sizeof(int)));
    CUfunction wv;
    CK(cuModuleGetFunction(&wv, mod, "write_value"));
    int val = 1234567;
    CUdeviceptr last = buf + (NINT - 1) * sizeof(int);
    void *wargs[] = {&last, &val};
    CK(cuMemsetD32Async(buf, 7, NINT, gstreams[0]));
    CK(cuLaunchKernel(wv, 1, 1, 1, 1, 1, 1, 0, gstreams[0], wargs, NULL));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuLaunchKernel(use, 1, 1, 1, 32, 1, 1, 0, gstreams[0], a1, NULL)); /* 1 ms, so the wait matters */
    CK(cuEventRecord(ev, gstreams[0]));
    CK(cuStreamWaitEvent(ps, ev, 0));
    int *host = malloc(NINT * sizeof(int));
    CK(cuMemcpyDtoHAsync(host, buf, NINT * sizeof(int), ps));
    CK(cuStreamSynchronize(ps));
    int bad = 0;
    for (int i = 0; i < NINT - 1; i++)
        bad += host[i] != 7;
    bad += host[NINT - 1] != val;
    int host2 = 0;
    CK(cuMemcpyDtoHAsync(&host2, last, sizeof host2, gstreams[1]));
    CK(cuStreamSynchronize(gstreams[1]));
    printf("8. primary memory set, written and read on green streams, event across: %s\n",
           bad == 0 && host2 == val ? "all right" : "WRONG");
    /* 10: granularity. */
    printf("10. device SM resource: %u SMs, minSmPartitionSize %u, smCoscheduledAlignment %u\n", all.sm.smCount,
           all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);
    unsigned fine_per = 0, co_per = 0;
    for (int fl = 0; fl < 2; fl++) {
        CUdevResource one[1];
        unsigned k1 = 1;
        CUresult r = cuDevSmResourceSplitByCount(one, &k1, &all, NULL,
                                                 fl ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0, 1);
        unsigned per = r == CUDA_SUCCESS ? one[0].sm.smCount : 0;
        *(fl ? &fine_per : &co_per) = per;
        printf("10. 1 SM asked for%s: %s, a group of %u\n", fl ? " (IGNORE_SM_COSCHEDULING)" : "", ename(r), per);
    }
    /* 11: clusters in green contexts of coscheduled and of fine groups, 66 SMs or the nearest above. */
    CUstream cs[3] = {ps, NULL, NULL};
    const char *cname[3] = {"primary context", "coscheduled green (72 SMs)", "fine green"};
    for (int fl = 0; fl < 2; fl++) {
        unsigned per = fl ? fine_per : co_per;
        if (!per)
            continue;
        static CUdevResource grp[256];
        CUdevResource rest2;
        unsigned ng = all.sm.smCount / per;
        if (ng > 256)
            ng = 256;
        CUresult r = cuDevSmResourceSplitByCount(grp, &ng, &all, &rest2, fl ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0, per);
        unsigned take = (66 + per - 1) / per;
        if (r != CUDA_SUCCESS || take > ng) {
            printf("11. %s split: %s\n", fl ? "fine" : "coscheduled", ename(r));
            continue;
        }
        CUdevResourceDesc d;
        CUgreenCtx gc;
        r = cuDevResourceGenerateDesc(&d, grp, take);
        if (r == CUDA_SUCCESS)
            r = cuGreenCtxCreate(&gc, d, dev, CU_GREEN_CTX_DEFAULT_STREAM);
        if (r == CUDA_SUCCESS)
            r = cuGreenCtxStreamCreate(&cs[1 + fl], gc, CU_STREAM_NON_BLOCKING, 0);
        if (r != CUDA_SUCCESS)
            printf("11. %s green context of %u groups: %s\n", fl ? "fine" : "coscheduled", take, ename(r));
        else if (fl)
            printf("11. fine green context: %u groups of %u = %u SMs\n", take, per, take * per);
    }
    CK(cuCtxSetCurrent(prim));
    for (int w = 0; w < 3; w++) {
        if (!cs[w])
            continue;
        printf("11. clusters on %s:", cname[w]);
        for (unsigned cl = 2; cl <= 8; cl *= 2) {
            CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
            at.value.clusterDim.x = cl;
            at.value.clusterDim.y = 1;
            at.value.clusterDim.z = 1;
            CUlaunchConfig cfg = {.gridDimX = cl * 8, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                                  .blockDimZ = 1, .sharedMemBytes = 0, .hStream = cs[w], .attrs = &at, .numAttrs = 1};
            CUresult r = cuLaunchKernelEx(&cfg, use, a1, NULL);
            if (r == CUDA_SUCCESS)
                r = cuStreamSynchronize(cs[w]);
            printf(" %u: %s", cl, ename(r));
        }
        printf("\n");
    }
    printf("SUMMARY q1 %s (%.0f ms, whole %.0f), q2 %s (%.0f ms), halves together %.2fx, partition+stream %.2f ms, "
           "burst of 10 on 64 streams: primary %.0f ms, green %.0f ms; 128: %.0f vs %.0f ms; memory %s\n",
           q1 < 0 ? "refused" : "ran", q1, whole, q2 < 0 ? "refused" : "ran", q2, alone / both, t_make[0],
           res[0][1][1], res[1][1][1], res[0][1][2], res[1][1][2], bad == 0 && host2 == val ? "shared" : "WRONG");
    return 0;
}
