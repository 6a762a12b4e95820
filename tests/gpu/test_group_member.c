/* A program in a client group with a memory limit (tests/test_groups.sh; server/groups.c): it sees its GPU
 * as the group's limit less what the group's other programs hold (cuMemGetInfo and cuDeviceTotalMem), it
 * can allocate and use what it holds, and one byte past what the group has left fails with
 * CUDA_ERROR_OUT_OF_MEMORY. Alone it means nothing, so it is no test of the suite.
 *   gpu_group_member SEE_MIB HOLD_MIB   sees SEE MiB, holds HOLD of them, prints "HOLDING", waits for a
 *                                       line on stdin, then checks the GPU it sees again (SEE_AFTER: the
 *                                       environment's GT_SEE_AFTER_MIB, when others came or went) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define MiB (1ull << 20)

static void check_sees(uint64_t want, uint64_t held, const char *when)
{
    size_t free_b = 0, total = 0;
    CK(cuMemGetInfo(&free_b, &total));
    if (total != want)
        gt_fail("%s: cuMemGetInfo total %zu MiB, want the group's %llu MiB left", when, (size_t)(total / MiB),
                (unsigned long long)(want / MiB));
    if (free_b > want - held)
        gt_fail("%s: cuMemGetInfo free %zu MiB, more than %llu less the %llu held", when, (size_t)(free_b / MiB),
                (unsigned long long)(want / MiB), (unsigned long long)(held / MiB));
}

int main(int argc, char **argv)
{
    uint64_t see = argc == 3 ? strtoull(argv[1], NULL, 10) * MiB : 0, hold = argc == 3 ? strtoull(argv[2], NULL, 10) * MiB : 0;
    if (!see || hold > see)
        gt_fail("usage: gpu_group_member SEE_MIB HOLD_MIB");
    gt_begin("group_member");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    size_t tm = 0;
    CK(cuDeviceTotalMem(&tm, dev));
    if (tm != see)
        gt_fail("cuDeviceTotalMem %zu MiB, want the group's %llu MiB left", (size_t)(tm / MiB), (unsigned long long)(see / MiB));
    check_sees(see, 0, "at start");
    CUdeviceptr p = 0, q = 0;
    if (hold) {
        CK(cuMemAlloc(&p, hold));
        CK(cuMemsetD8(p, 0x5a, hold));
        unsigned char b[64];
        CK(cuMemcpyDtoH(b, p + hold - sizeof b, sizeof b));
        for (size_t i = 0; i < sizeof b; i++)
            if (b[i] != 0x5a)
                gt_fail("byte %zu of the held memory reads 0x%x", i, b[i]);
    }
    check_sees(see, hold, "holding");
    CUresult r = cuMemAlloc(&q, see - hold + MiB);
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        gt_fail("an allocation past what the group has left (%llu MiB) returned %d, not CUDA_ERROR_OUT_OF_MEMORY",
                (unsigned long long)((see - hold) / MiB), (int)r);
    printf("HOLDING\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        gt_fail("no line on stdin");
    const char *after = getenv("GT_SEE_AFTER_MIB");
    if (after)
        check_sees(strtoull(after, NULL, 10) * MiB, hold, "after the others changed");
    if (p)
        CK(cuMemFree(p));
    gt_pass();
}
