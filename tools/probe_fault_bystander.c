/* Issue 10, probe 3: in one context (as in cumuxd), what does a fault on one stream do to a kernel running on
 * another? Stream A runs a kernel that counts milliseconds into pinned memory for about 3 s; 300 ms in,
 * stream B writes to an illegal address. The host watches A's counter: does A stop at once, when, and what
 * do A's and B's queries answer. With "coredump", GPU coredumps are turned on with the flags that keep the
 * process alive (CU_COREDUMP_SKIP_ABORT, lightweight): does the process survive, is a dump written, does
 * A keep running meanwhile.
 * Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_fault_bystander.c -o /tmp/pfb -lcuda
 *   /tmp/pfb plain; /tmp/pfb coredump */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "probe_util.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry fault_write(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
                          " ld.param.u64 %rd1, [p];\n mov.u32 %r1, 1;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n"
                          ".visible .entry progress(.param .u64 c, .param .u32 iters, .param .u64 per)\n{\n"
                          " .reg .pred %p<3>;\n .reg .b32 %r<4>;\n .reg .b64 %rd<8>;\n"
                          " ld.param.u64 %rd1, [c];\n ld.param.u32 %r1, [iters];\n ld.param.u64 %rd2, [per];\n"
                          " mov.u32 %r2, 0;\nLOOP:\n mov.u64 %rd3, %clock64;\nSPIN:\n mov.u64 %rd4, %clock64;\n"
                          " sub.s64 %rd5, %rd4, %rd3;\n setp.lt.s64 %p1, %rd5, %rd2;\n @%p1 bra SPIN;\n"
                          " add.u32 %r2, %r2, 1;\n st.volatile.global.u32 [%rd1], %r2;\n membar.sys;\n"
                          " setp.lt.u32 %p2, %r2, %r1;\n @%p2 bra LOOP;\n ret;\n}\n";

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    bool dump = argc > 1 && !strcmp(argv[1], "coredump");
    char core[256];
    snprintf(core, sizeof core, "/tmp/cumux-probe-core.%d", (int)getpid());
    if (dump) {
        bool on = true;
        int flags = CU_COREDUMP_LIGHTWEIGHT_FLAGS | CU_COREDUMP_SKIP_ABORT;
        printf("coredump on: %s, flags: %s, file: %s\n",
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, (size_t[]){sizeof on})),
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, (size_t[]){sizeof flags})),
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, core, (size_t[]){strlen(core) + 1})));
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fault, progress;
    int clock_khz = 0;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&mod, ptx) || cuModuleGetFunction(&fault, mod, "fault_write") ||
        cuModuleGetFunction(&progress, mod, "progress") ||
        cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev)) {
        printf("SKIP: no usable CUDA GPU\n");
        return 0;
    }
    volatile unsigned *counter;
    CUdeviceptr dcounter;
    CUstream a, b;
    if (cuMemHostAlloc((void **)&counter, 4096, CU_MEMHOSTALLOC_DEVICEMAP) ||
        cuMemHostGetDevicePointer(&dcounter, (void *)counter, 0) || cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) ||
        cuStreamCreate(&b, CU_STREAM_NON_BLOCKING)) {
        printf("setup failed\n");
        return 1;
    }
    *counter = 0;
    unsigned iters = 3000;
    unsigned long long per = (unsigned long long)clock_khz; /* cycles in a millisecond */
    void *pargs[] = {&dcounter, &iters, &per};
    CUresult lr = cuLaunchKernel(progress, 1, 1, 1, 1, 1, 1, 0, a, pargs, NULL);
    sleep_ms(300);
    unsigned at_fault = *counter;
    CUdeviceptr bad = 0x10;
    void *fargs[] = {&bad};
    double t_fault = now_ms();
    CUresult fr = cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, b, fargs, NULL);
    unsigned last = *counter;
    double t_last_change = t_fault, t_b_error = -1, t_a_error = -1;
    CUresult qa = CUDA_ERROR_NOT_READY, qb = CUDA_ERROR_NOT_READY;
    while (now_ms() - t_fault < 4000) {
        unsigned v = *counter;
        if (v != last) {
            last = v;
            t_last_change = now_ms();
        }
        if (t_b_error < 0 && (qb = cuStreamQuery(b)) != CUDA_ERROR_NOT_READY)
            t_b_error = now_ms() - t_fault;
        if (t_a_error < 0 && (qa = cuStreamQuery(a)) != CUDA_ERROR_NOT_READY)
            t_a_error = now_ms() - t_fault;
        sleep_ms(2);
    }
    struct stat st;
    bool have_dump = stat(core, &st) == 0;
    printf("launch A %s, launch B %s\n", ename(lr), ename(fr));
    printf("A's counter: %u at the fault, %u at the end (of %u); last moved %.1f ms after the fault\n", at_fault, last,
           iters, t_last_change - t_fault);
    printf("B's query: %s after %.1f ms; A's query: %s after %.1f ms; cuCtxSynchronize: %s\n", ename(qb), t_b_error,
           ename(qa), t_a_error, ename(cuCtxSynchronize()));
    if (dump)
        printf("coredump file %s: %s (%lld bytes); the process is alive\n", core, have_dump ? "written" : "absent",
               have_dump ? (long long)st.st_size : 0LL);
    printf("SUMMARY %s: A %s after B's fault (%u of %u steps done, last step %.1f ms after)\n", dump ? "coredump" : "plain",
           last >= iters ? "ran to its end" : "stopped", last, iters, t_last_change - t_fault);
    return 0;
}
