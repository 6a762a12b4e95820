/* fault_illegal: a kernel stores through an address no allocation covers. The program expects the next
 * synchronization to return cudaErrorIllegalAddress, and prints what it got:
 *   fault: got=<error name> expected=cudaErrorIllegalAddress
 * then what the context does afterwards (the error is sticky), as info lines. run.sh records, separately,
 * what happened to a bystander process running at the same time. */
#include "rt_test.h"

__global__ void poke(int *valid, int *wild)
{
    valid[threadIdx.x] = (int)threadIdx.x;
    if (threadIdx.x == 5)
        *wild = 0xdead;
}

int main(void)
{
    rt_begin("fault_illegal");
    rt_require_gpu();

    int *valid = NULL;
    CK(cudaMalloc((void **)&valid, 64 * sizeof(int)));
    CK(cudaDeviceSynchronize());
    /* Far below any allocation; the first page is never mapped. */
    int *wild = (int *)(uintptr_t)0x100;
    poke<<<1, 64>>>(valid, wild);
    rt_fault_expect(cudaErrorIllegalAddress);
}
