/* Which SMs this program's kernels run on, for tests/test_sms.sh (reserved SMs, thread percentages): each
 * round launches a grid of 4 blocks an SM, each block spinning MS milliseconds (so that the grid spreads
 * over every SM it may use), then reads which SMs the blocks ran on (kernel sm_ids) and prints
 *   sms: N: LIST
 * (LIST: the SM numbers, comma-separated). Between rounds it waits for a line on stdin, so that the test
 * can change its SMs meanwhile. Every id must be a real SM of the device, and at least one must be set.
 * Alone it proves nothing, so it is no test of the suite. With "free" it does not wait between rounds and
 * prints when each round's SMs were read (CLOCK_REALTIME ns): "sms: N t=NS: LIST" (bench/sms.sh times a
 * change of SMs with it). With "cluster:N" each grid is launched in thread-block clusters of N blocks
 * (non-portable sizes allowed past 8; the grid rounded up to whole clusters): a reservation of a few SMs
 * may not hold a cluster the whole device does (server/placement.c srv_place_outside).
 *   gpu_sm_ids ROUNDS [MS [free|cluster:N]] */
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
    unsigned cluster = argc >= 4 && !strncmp(argv[3], "cluster:", 8) ? (unsigned)atoi(argv[3] + 8) : 0;
    if (rounds <= 0 || rounds > 100000 || ms <= 0 || (argc >= 4 && !free_running && (cluster < 1 || cluster > 64)))
        gt_fail("usage: gpu_sm_ids ROUNDS [MS [free|cluster:N]]");
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
    unsigned blocks = (unsigned)nsm * 4;
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    if (cluster) {
        if (cluster > 8)
            CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
        blocks = (blocks + cluster - 1) / cluster * cluster;
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cluster, attr.value.clusterDim.y = 1, attr.value.clusterDim.z = 1;
        CUlaunchConfig q = {.gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                            .blockDimZ = 1, .attrs = &attr, .numAttrs = 1};
        int most = 0;
        CK(cuOccupancyMaxPotentialClusterSize(&most, f, &q));
        if (most < (int)cluster) {
            printf("SKIP sm_ids: clusters of %u blocks: this GPU holds %d at most\n", cluster, most);
            exit(GT_SKIP_CODE);
        }
    }
    CUdeviceptr bitmap;
    CK(cuMemAlloc(&bitmap, 32));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    long long cycles = gt_cycles_for_ms(dev, ms);
    for (int r = 0; r < rounds; r++) {
        CK(cuMemsetD8Async(bitmap, 0, 32, s));
        void *args[] = {&bitmap, &cycles};
        if (cluster) {
            CUlaunchConfig cfg = {.gridDimX = blocks, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                                  .blockDimZ = 1, .hStream = s, .attrs = &attr, .numAttrs = 1};
            CK(cuLaunchKernelEx(&cfg, f, args, NULL));
        } else {
            CK(cuLaunchKernel(f, blocks, 1, 1, 32, 1, 1, 0, s, args, NULL));
        }
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
