/* reset: cudaDeviceReset, then use the device again, three times over. Each cycle allocates device and
 * pinned memory, creates a stream and an event, writes a __device__ symbol, runs kernels (the module
 * is loaded again after each reset) and checks the results; then resets with work just finished,
 * and once with work still queued. */
#include "rt_test.h"

__device__ int g_bias;

__global__ void iota_bias(int *out, int n, int mul)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = i * mul + g_bias;
}

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

int main(void)
{
    rt_begin("reset");
    rt_require_gpu();

    const int n = 1 << 20;
    const size_t bytes = (size_t)n * sizeof(int);
    for (int cycle = 0; cycle < 4; cycle++) {
        int *d = NULL, *h = NULL;
        cudaStream_t s;
        cudaEvent_t ev;
        CK(cudaMalloc((void **)&d, bytes));
        CK(cudaMallocHost((void **)&h, bytes));
        CK(cudaStreamCreate(&s));
        CK(cudaEventCreate(&ev));
        int bias = 1000 * cycle - 7;
        CK(cudaMemcpyToSymbol(g_bias, &bias, sizeof bias));
        CK(cudaMemsetAsync(d, 0xff, bytes, s));
        iota_bias<<<128, 256, 0, s>>>(d, n, cycle + 2);
        CK_LAUNCH();
        CK(cudaEventRecord(ev, s));
        rt_poison(h, bytes);
        CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaEventSynchronize(ev));
        for (int i = 0; i < n; i++)
            if (h[i] != i * (cycle + 2) + bias)
                rt_fail("cycle %d: element %d is %d, expected %d", cycle, i, h[i], i * (cycle + 2) + bias);
        int back = 0;
        CK(cudaMemcpyFromSymbol(&back, g_bias, sizeof back));
        if (back != bias)
            rt_fail("cycle %d: g_bias reads %d, expected %d", cycle, back, bias);
        if (cycle == 2) {
            /* Reset with a kernel still running: the reset waits for it or discards it; either way the
             * device is usable afterwards. */
            spin<<<1, 1, 0, s>>>(rt_cycles_for_ms(20));
            CK_LAUNCH();
        }
        /* Everything of this cycle (d, h, s, ev) is destroyed by the reset. */
        CK(cudaDeviceReset());
        CK(cudaGetLastError());
    }
    /* After the last reset: a fresh symbol starts from its initial value again. */
    int v = -1;
    CK(cudaMemcpyFromSymbol(&v, g_bias, sizeof v));
    if (v != 0)
        rt_fail("after cudaDeviceReset, g_bias is %d instead of its initial 0", v);
    CK(cudaDeviceSynchronize());
    rt_pass();
}
