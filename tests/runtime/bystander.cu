/* bystander: another client, for the fault tests. Runs checked kernel + copy rounds for DURATION_S
 * seconds (default 3); prints "bystander: running" once the first round passed (run.sh waits for it
 * before it starts the faulting program), then PASS, or FAIL with the first error or wrong result.
 * With RT_BYSTANDER_LOST_OK=1 (cumux with containment: docs/faults.md) a round whose synchronize says
 * cudaErrorLaunchFailure, the work another program's fault took away, is done again (counted); any other
 * error still fails. Its input, written once before the rounds, must stay intact throughout.
 * usage: rt_bystander_{static,shared} [DURATION_S] */
#include "rt_test.h"

__global__ void mul_add(const int *in, int *out, int n, int k)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * 3 + k;
}

int main(int argc, char **argv)
{
    rt_begin("bystander");
    rt_require_gpu();
    double dur = argc > 1 ? strtod(argv[1], NULL) : 3.0;
    const int n = 1 << 16;
    const size_t bytes = (size_t)n * sizeof(int);
    int *h = NULL, *r = NULL, *din = NULL, *dout = NULL;
    CK(cudaMallocHost((void **)&h, bytes));
    CK(cudaMallocHost((void **)&r, bytes));
    CK(cudaMalloc((void **)&din, bytes));
    CK(cudaMalloc((void **)&dout, bytes));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < n; i++)
        h[i] = i * 7 - 1000;
    CK(cudaMemcpy(din, h, bytes, cudaMemcpyHostToDevice));
    uint64_t end = rt_now_ns(CLOCK_MONOTONIC) + (uint64_t)(dur * 1e9);
    long rounds = 0, lost = 0;
    const bool lost_ok = getenv("RT_BYSTANDER_LOST_OK") && !strcmp(getenv("RT_BYSTANDER_LOST_OK"), "1");
    do {
        int k = (int)(rounds % 1000);
        CK(cudaMemsetAsync(dout, 0xff, bytes, s));
        mul_add<<<32, 256, 0, s>>>(din, dout, n, k);
        CK_LAUNCH();
        CK(cudaMemcpyAsync(r, dout, bytes, cudaMemcpyDeviceToHost, s));
        cudaError_t e = cudaStreamSynchronize(s);
        if (e == cudaErrorLaunchFailure && lost_ok && lost < 10) {
            lost++;
            (void)cudaGetLastError();
            rt_info("round %ld: its work was lost at another program's fault; done again", rounds);
            continue;
        }
        CK(e);
        for (int i = 0; i < n; i++)
            if (r[i] != h[i] * 3 + k)
                rt_fail("round %ld: element %d is %d, expected %d", rounds, i, r[i], h[i] * 3 + k);
        if (rounds == 0)
            printf("bystander: running\n");
        rounds++;
    } while (rt_now_ns(CLOCK_MONOTONIC) < end);
    rt_info("%ld rounds in %.1f s, %ld lost at faults and done again", rounds, dur, lost);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(din));
    CK(cudaFree(dout));
    CK(cudaFreeHost(h));
    CK(cudaFreeHost(r));
    rt_pass();
}
