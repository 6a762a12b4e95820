/* fault_assert: a device-side assert fails in one thread of a kernel. The program expects the next
 * synchronization to return cudaErrorAssert, and prints what it got:
 *   fault: got=<error name> expected=cudaErrorAssert
 * then what the context does afterwards (the error is sticky: later calls fail too), as info lines.
 * Under cumux this is the "reported as an error to that client" case; run.sh records, separately, what
 * happened to a bystander process running at the same time. */
#include "rt_test.h"

#include <assert.h>

__global__ void check_value(const int *v, int n, int *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        assert(v[i] != 42);
        out[i] = v[i] * 2;
    }
}

int main(void)
{
    rt_begin("fault_assert");
    rt_require_gpu();

    const int n = 4096;
    int *h = (int *)rt_malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        h[i] = i == 3001 ? 42 : i % 41;
    int *dv = NULL, *dout = NULL;
    CK(cudaMalloc((void **)&dv, n * sizeof(int)));
    CK(cudaMalloc((void **)&dout, n * sizeof(int)));
    CK(cudaMemcpy(dv, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());

    check_value<<<n / 256, 256>>>(dv, n, dout);
    rt_fault_expect(cudaErrorAssert);
}
