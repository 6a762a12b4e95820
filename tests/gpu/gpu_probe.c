/* Exit 0 when a CUDA GPU is usable, 77 (with a SKIP line) when not: used by run.sh. */
#include <stdio.h>

#include "gpu_test.h"

int main(void)
{
    gt_begin("probe");
    gt_require_gpu();
    int n = 0;
    CK(cuDeviceGetCount(&n));
    printf("probe: %d CUDA device(s)\n", n);
    return 0;
}
