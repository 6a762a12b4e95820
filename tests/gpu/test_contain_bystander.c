/* A bystander of another program's fault (issue 10): it holds device memory of three sizes (a small
 * allocation, one of its own chunk's size, a stream-ordered one) with known contents; with "wait" it says
 * "bystander: ready" and waits for a line on stdin (meanwhile tests/test_contain_memory.sh makes another
 * program fault the GPU). Then its memory must read back intact at the same addresses, and it computes
 * again: new memory, a module loaded now, a kernel on its old memory, results against the CPU.
 * Without "wait" it does the same with no fault in between (part of the GPU suite). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

static void expect_words(CUdeviceptr p, size_t bytes, unsigned first, const char *what)
{
    unsigned *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(h, p, bytes));
    for (size_t i = 0; i < bytes / 4; i++)
        if (h[i] != first + (unsigned)i)
            gt_fail("%s: word %zu is 0x%x, expected 0x%x", what, i, h[i], first + (unsigned)i);
    free(h);
}

static void fill_words(CUdeviceptr p, size_t bytes, unsigned first)
{
    unsigned *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    for (size_t i = 0; i < bytes / 4; i++)
        h[i] = first + (unsigned)i;
    CK(cuMemcpyHtoD(p, h, bytes));
    free(h);
}

int main(int argc, char **argv)
{
    gt_begin("contain_bystander");
    gt_require_gpu();
    bool wait = argc > 1 && !strcmp(argv[1], "wait");
    gt_primary_ctx(0, NULL);
    enum { SMALL = 4096, BIG = 3 << 20, ASYNC = 96 << 10 };
    CUdeviceptr small, big, async;
    CK(cuMemAlloc(&small, SMALL));
    CK(cuMemAlloc(&big, BIG));
    CK(cuMemAllocAsync(&async, ASYNC, NULL));
    fill_words(small, SMALL, 0x1000);
    fill_words(big, BIG, 0x200000);
    fill_words(async, ASYNC, 0x3000000);
    CK(cuCtxSynchronize());
    if (wait) {
        printf("bystander: ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            gt_fail("no line on stdin");
    }
    /* Its memory, where it was. */
    expect_words(small, SMALL, 0x1000, "the small allocation after the fault");
    expect_words(big, BIG, 0x200000, "the large allocation after the fault");
    expect_words(async, ASYNC, 0x3000000, "the stream-ordered allocation after the fault");
    /* Computing again: a module loaded now, a kernel on its old memory (+7 to every word of big). */
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction add = gt_function(mod, "add_u32");
    unsigned long long n = BIG / 4;
    unsigned seven = 7;
    void *args[] = {&big, &n, &seven};
    CK(cuLaunchKernel(add, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    expect_words(big, BIG, 0x200000 + 7, "the large allocation after a kernel added 7");
    CUdeviceptr fresh;
    CK(cuMemAlloc(&fresh, SMALL));
    fill_words(fresh, SMALL, 0x42);
    expect_words(fresh, SMALL, 0x42, "new memory");
    CK(cuMemFree(fresh));
    CK(cuMemFree(small));
    CK(cuMemFree(big));
    CK(cuMemFreeAsync(async, NULL));
    CK(cuCtxSynchronize());
    CK(cuModuleUnload(mod));
    gt_pass();
}
