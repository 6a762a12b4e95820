/* fault_trap: a kernel traps (__trap()). The program expects the next synchronization to return
 * cudaErrorLaunchFailure, and prints what it got:
 *   fault: got=<error name> expected=cudaErrorLaunchFailure
 * then what the context does afterwards (the error is sticky), as info lines. run.sh records, separately,
 * what happened to a bystander process running at the same time. */
#include "rt_test.h"

__global__ void trap_at(int *valid, int at)
{
    valid[threadIdx.x] = (int)threadIdx.x;
    if ((int)threadIdx.x == at)
        __trap();
}

int main(void)
{
    rt_begin("fault_trap");
    rt_require_gpu();

    int *valid = NULL;
    CK(cudaMalloc((void **)&valid, 64 * sizeof(int)));
    CK(cudaDeviceSynchronize());
    trap_at<<<1, 64>>>(valid, 5);
    rt_fault_expect(cudaErrorLaunchFailure);
}
