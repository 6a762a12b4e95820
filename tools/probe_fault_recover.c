/* Issue 10, probe 1: can the process that holds a context use CUDA again after a sticky fault, and does
 * VMM memory survive it? Each round: a context (the primary one, or a created one), the probe's kernels
 * loaded from PTX, the VMM allocation mapped at the same address and checked against what the previous
 * round wrote, a new pattern written, a fault (illegal address or trap), then the context reset
 * (cuDevicePrimaryCtxReset) or destroyed (cuCtxDestroy). Prints one line per round and a summary: whether
 * work runs again, whether the memory kept its contents, the time of each step, free memory (leaks).
 * Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_fault_recover.c -o /tmp/pfr -lcuda
 *   /tmp/pfr reset illegal 20; /tmp/pfr recreate trap 20 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe_util.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry fault_write(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
                          " ld.param.u64 %rd1, [p];\n mov.u32 %r1, 1;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n"
                          ".visible .entry do_trap()\n{\n trap;\n ret;\n}\n"
                          ".visible .entry fill(.param .u64 p, .param .u32 v, .param .u64 n)\n{\n"
                          " .reg .pred %p<2>;\n .reg .b32 %r<6>;\n .reg .b64 %rd<6>;\n"
                          " ld.param.u64 %rd1, [p];\n ld.param.u32 %r1, [v];\n ld.param.u64 %rd2, [n];\n"
                          " mov.u32 %r2, %ctaid.x;\n mov.u32 %r3, %ntid.x;\n mov.u32 %r4, %tid.x;\n"
                          " mad.lo.s32 %r5, %r2, %r3, %r4;\n cvt.u64.u32 %rd3, %r5;\n"
                          " setp.ge.u64 %p1, %rd3, %rd2;\n @%p1 bra DONE;\n shl.b64 %rd4, %rd3, 2;\n"
                          " add.s64 %rd5, %rd1, %rd4;\n add.u32 %r5, %r5, %r1;\n st.global.u32 [%rd5], %r5;\n"
                          "DONE:\n ret;\n}\n";

#define WORDS (16u << 20) /* 64 MiB of 32-bit words */

#define TRY(x, what)                                                                                   \
    do {                                                                                               \
        CUresult r_ = (x);                                                                             \
        if (r_ != CUDA_SUCCESS) {                                                                      \
            printf("  %s: %s -> %s\n", what, #x, ename(r_));                                           \
            ok = 0;                                                                                    \
        }                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "reset") && strcmp(argv[1], "recreate")) ||
        (strcmp(argv[2], "illegal") && strcmp(argv[2], "trap"))) {
        fprintf(stderr, "usage: %s reset|recreate illegal|trap ROUNDS\n", argv[0]);
        return 2;
    }
    int reset = !strcmp(argv[1], "reset"), trap = !strcmp(argv[2], "trap"), rounds = atoi(argv[3]);
    if (cuInit(0) != CUDA_SUCCESS) {
        printf("SKIP: no CUDA GPU\n");
        return 0;
    }
    CUdevice dev;
    cuDeviceGet(&dev, 0);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    size_t size = (size_t)WORDS * 4;
    unsigned *host = malloc(size);
    int runs_again = 0, intact = 0, checked = 0;
    double worst_recover = 0, sum_recover = 0;
    size_t free0 = 0, free_now = 0, total = 0;
    for (int round = 0; round < rounds; round++) {
        int ok = 1;
        double t0 = now_ms();
        CUcontext ctx = NULL;
        if (reset) {
            TRY(cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
            TRY(cuCtxSetCurrent(ctx), "set current");
        } else {
            CUctxCreateParams cp;
            memset(&cp, 0, sizeof cp);
            TRY(cuCtxCreate(&ctx, &cp, 0, dev), "create");
        }
        CUmodule mod = NULL;
        CUfunction fault = NULL, trapf = NULL, fill = NULL;
        TRY(cuModuleLoadData(&mod, ptx), "load");
        if (mod) {
            TRY(cuModuleGetFunction(&fault, mod, "fault_write"), "fault_write");
            TRY(cuModuleGetFunction(&trapf, mod, "do_trap"), "do_trap");
            TRY(cuModuleGetFunction(&fill, mod, "fill"), "fill");
        }
        double t_ready = now_ms();
        if (round == 0) {
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = dev;
            prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            TRY(cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
            TRY(cuMemAddressReserve(&va, size, 0, 0, 0), "reserve");
            cuMemGetInfo(&free0, &total);
        }
        /* The allocation at the same address in this context; the previous round's pattern checked. */
        CUresult mr = cuMemMap(va, size, 0, h, 0);
        if (mr != CUDA_SUCCESS && mr != CUDA_ERROR_INVALID_VALUE) /* still mapped from before: fine */
            printf("  map again: %s\n", ename(mr));
        CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        TRY(cuMemSetAccess(va, size, &acc, 1), "set access");
        if (round > 0) {
            CUresult cr = cuMemcpyDtoH(host, va, size);
            int same = cr == CUDA_SUCCESS;
            for (unsigned i = 0; same && i < WORDS; i++)
                same = host[i] == (unsigned)(round - 1) * 1000u + i;
            checked++;
            intact += same;
            if (!same)
                printf("  round %d: the memory written before the fault is %s\n", round,
                       cr == CUDA_SUCCESS ? "changed" : ename(cr));
        }
        unsigned v = (unsigned)round * 1000u;
        unsigned long long n = WORDS;
        void *fargs[] = {&va, &v, &n};
        if (fill)
            TRY(cuLaunchKernel(fill, WORDS / 256, 1, 1, 256, 1, 1, 0, NULL, fargs, NULL), "fill");
        TRY(cuCtxSynchronize(), "sync after fill");
        if (round > 0 && ok)
            runs_again++;
        /* The fault. */
        CUdeviceptr bad = 0x10;
        void *bargs[] = {&bad};
        double t_fault = now_ms();
        CUresult lr = trap ? cuLaunchKernel(trapf, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL)
                           : cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, NULL, bargs, NULL);
        CUresult sr = cuCtxSynchronize(), sr2 = cuCtxSynchronize();
        double t_seen = now_ms();
        /* Away with the context. */
        CUresult ur = cuMemUnmap(va, size);
        CUresult dr = reset ? cuDevicePrimaryCtxReset(dev) : cuCtxDestroy(ctx);
        if (reset)
            cuDevicePrimaryCtxRelease(dev);
        double t_gone = now_ms();
        cuMemGetInfo(&free_now, &total); /* no context: may fail; then the previous value stays */
        double recover = t_gone - t_seen + (t_ready - t0);
        if (round > 0) {
            sum_recover += recover;
            if (recover > worst_recover)
                worst_recover = recover;
        }
        printf("round %2d: ready %.1f ms, launch %s, sync %s then %s (%.1f ms), unmap %s, %s %s (%.1f ms), "
               "free %zu MiB\n",
               round, t_ready - t0, ename(lr), ename(sr), ename(sr2), t_seen - t_fault, ename(ur),
               reset ? "reset" : "destroy", ename(dr), t_gone - t_seen, free_now >> 20);
    }
    printf("SUMMARY %s %s: %d rounds; work ran again in %d of %d; memory intact in %d of %d; recovery (ready + "
           "teardown) mean %.1f ms, worst %.1f ms; free at start %zu MiB, at end %zu MiB\n",
           argv[1], argv[2], rounds, runs_again, rounds - 1, intact, checked,
           rounds > 1 ? sum_recover / (rounds - 1) : 0.0, worst_recover, free0 >> 20, free_now >> 20);
    free(host);
    return 0;
}
