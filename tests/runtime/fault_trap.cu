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
    cudaError_t launch = cudaGetLastError();
    if (launch != cudaSuccess)
        rt_fail("the launch itself failed (%s), before the kernel ran", cudaGetErrorName(launch));
    cudaError_t got = cudaDeviceSynchronize();
    printf("fault: got=%s expected=cudaErrorLaunchFailure\n", cudaGetErrorName(got));
    fflush(stdout);
    rt_info("cudaGetLastError after: %s", cudaGetErrorName(cudaGetLastError()));
    void *p = NULL;
    rt_info("cudaMalloc after: %s", cudaGetErrorName(cudaMalloc(&p, 16)));
    rt_info("cudaDeviceSynchronize again: %s", cudaGetErrorName(cudaDeviceSynchronize()));
    if (got != cudaErrorLaunchFailure)
        rt_fail("cudaDeviceSynchronize returned %s, expected cudaErrorLaunchFailure", cudaGetErrorName(got));
    rt_pass();
}
