/* A client of known GPU time, for tests/test_usage.sh (what cumux status, cumux top and /metrics say
 * each client used): COUNT kernels of MS milliseconds each (spin_flag) on one stream, then checks that
 * every one ran (each wrote its index), prints "busy: done N ms", and waits for a line on stdin before it
 * exits, so that the server can be asked meanwhile. Alone it proves nothing, so it is no test of the suite.
 * With PRIORITY its stream is made with that priority, which cuStreamGetPriority must give back as asked
 * (the server may run it at another: tests/test_priority.sh). With GPU_BUSY_TIMED=1 each kernel is timed
 * as a library's benchmark times a candidate: the stream synchronized, a timing event recorded, the kernel,
 * another event (tests/test_timed_spans.sh); each time is checked.
 *   gpu_busy MS COUNT [PRIORITY] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

int main(int argc, char **argv)
{
    double ms = argc == 3 || argc == 4 ? atof(argv[1]) : 0;
    int count = argc == 3 || argc == 4 ? atoi(argv[2]) : 0;
    if (ms <= 0 || count <= 0 || count > 100000)
        gt_fail("usage: gpu_busy MS COUNT [PRIORITY]");
    gt_begin("busy");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction f = gt_function(mod, "spin_flag");
    CUdeviceptr flags;
    CK(cuMemAlloc(&flags, (size_t)count * 4));
    CUstream s;
    if (argc == 4) {
        int want = atoi(argv[3]), got = 1;
        CK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, want));
        CK(cuStreamGetPriority(s, &got));
        if (got != want)
            gt_fail("cuStreamGetPriority: %d, asked for %d", got, want);
    } else {
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    }
    const char *timed_env = getenv("GPU_BUSY_TIMED");
    bool timed = timed_env && !strcmp(timed_env, "1");
    CUevent start = NULL, stop = NULL;
    if (timed) {
        CK(cuEventCreate(&start, CU_EVENT_DEFAULT));
        CK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    }
    long long cycles = gt_cycles_for_ms(dev, ms);
    for (int i = 0; i < count; i++) {
        CUdeviceptr flag = flags + (CUdeviceptr)i * 4;
        int value = i + 1;
        void *args[] = {&cycles, &flag, &value};
        if (timed) {
            CK(cuStreamSynchronize(s));
            CK(cuEventRecord(start, s));
        }
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
        if (timed) {
            CK(cuEventRecord(stop, s));
            CK(cuEventSynchronize(stop));
            float span = 0;
            CK(cuEventElapsedTime(&span, start, stop));
            if (span < ms * 0.5)
                gt_fail("kernel %d, timed by events: %.3f ms, not about %.3f", i, span, ms);
        }
    }
    CK(cuStreamSynchronize(s));
    int *h = malloc((size_t)count * 4);
    if (!h)
        gt_fail("malloc");
    CK(cuMemcpyDtoH(h, flags, (size_t)count * 4));
    for (int i = 0; i < count; i++)
        if (h[i] != i + 1)
            gt_fail("kernel %d wrote %d, not %d", i, h[i], i + 1);
    printf("busy: done %.0f ms\n", ms * count);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        gt_fail("no line on stdin");
    free(h);
    gt_pass();
}
