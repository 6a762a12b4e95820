/* A client of tests/test_limits.sh: the limits of the one shared context. A program raises its stack
 * limit (the driver then reserves that much local memory for every thread the GPU can hold: 3 KiB more is
 * ~800 MiB on an H200); the limit must stay at least that while it runs, whatever others do, and come back
 * down once it has gone. Alone it proves nothing, so it is no test of the suite.
 *   gpu_limits read           prints "stack N" (its context's stack limit)
 *   gpu_limits raise N [hold] sets the stack limit to N bytes, checks it reads at least N, and with hold
 *                             prints "raised" and waits for a line on stdin, then checks it again */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

static size_t stack_limit(void)
{
    size_t v = 0;
    CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    return v;
}

int main(int argc, char **argv)
{
    bool read_only = argc == 2 && !strcmp(argv[1], "read");
    bool raise = (argc == 3 || argc == 4) && !strcmp(argv[1], "raise");
    bool hold = argc == 4 && !strcmp(argv[3], "hold");
    if (!read_only && !(raise && (argc == 3 || hold)))
        gt_fail("usage: gpu_limits read | raise BYTES [hold]");
    gt_begin("limits");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    if (read_only) {
        printf("stack %zu\n", stack_limit());
        return 0;
    }
    size_t want = (size_t)strtoull(argv[2], NULL, 10);
    if (!want)
        gt_fail("a stack of 0 bytes");
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, want));
    if (stack_limit() < want)
        gt_fail("stack limit %zu after setting %zu", stack_limit(), want);
    if (hold) {
        printf("raised\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            gt_fail("no line on stdin");
        if (stack_limit() < want)
            gt_fail("stack limit %zu while holding %zu (another program lowered it)", stack_limit(), want);
    }
    gt_pass();
}
