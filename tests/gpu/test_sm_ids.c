/* Which SMs this program's kernels run on, for tests/test_sms.sh (reserved SMs, thread percentages): each
 * round launches a grid of 4 blocks an SM, each block spinning MS milliseconds (so that the grid spreads
 * over every SM it may use), then reads which SMs the blocks ran on (kernel sm_ids) and prints
 *   sms: N: LIST
 * (LIST: the SM numbers, comma-separated). Between rounds it waits for a line on stdin, so that the test
 * can change its SMs meanwhile. Every id must be a real SM of the device, and at least one must be set.
 * Alone it proves nothing, so it is no test of the suite. With "free" it does not wait between rounds and
 * prints when each round's SMs were read (CLOCK_REALTIME ns): "sms: N t=NS: LIST" (bench/sms.sh times a
 * change of SMs with it).
 *   gpu_sm_ids ROUNDS [MS [free]] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test.h"

int main(int argc, char **argv)
{
    int rounds = argc >= 2 ? atoi(argv[1]) : 0;
    double ms = argc >= 3 ? atof(argv[2]) : 2.0;
    bool free_running = argc >= 4 && !strcmp(argv[3], "free");
    if (rounds <= 0 || rounds > 100000 || ms <= 0)
        gt_fail("usage: gpu_sm_ids ROUNDS [MS [free]]");
    gt_begin("sm_ids");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    int nsm = 0;
    CK(cuDeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    if (nsm <= 0 || nsm > 256)
        gt_fail("%d SMs: the bitmap holds 256", nsm);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction f = gt_function(mod, "sm_ids");
    CUdeviceptr bitmap;
    CK(cuMemAlloc(&bitmap, 32));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    long long cycles = gt_cycles_for_ms(dev, ms);
    for (int r = 0; r < rounds; r++) {
        CK(cuMemsetD8Async(bitmap, 0, 32, s));
        void *args[] = {&bitmap, &cycles};
        CK(cuLaunchKernel(f, (unsigned)nsm * 4, 1, 1, 32, 1, 1, 0, s, args, NULL));
        unsigned words[8];
        CK(cuMemcpyDtoHAsync(words, bitmap, sizeof words, s));
        CK(cuStreamSynchronize(s));
        char list[1024] = "";
        size_t len = 0;
        int n = 0;
        for (int id = 0; id < 256; id++) {
            if (!(words[id / 32] >> (id % 32) & 1))
                continue;
            if (id >= nsm)
                gt_fail("a block ran on SM %d of %d", id, nsm);
            n++;
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", id);
        }
        if (n == 0)
            gt_fail("round %d: no SM recorded", r);
        if (free_running) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            printf("sms: %d t=%lld: %s\n", n, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, list);
        } else {
            printf("sms: %d: %s\n", n, list);
        }
        fflush(stdout);
        if (r + 1 < rounds && !free_running) {
            char line[16];
            if (!fgets(line, sizeof line, stdin))
                gt_fail("no line on stdin");
        }
    }
    gt_pass();
}
