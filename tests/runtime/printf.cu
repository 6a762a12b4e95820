/* printf: device-side printf. The device's lines reach the process's stdout at synchronization points;
 * this program cannot read its own stdout, so run.sh checks that every expected line appears exactly
 * once (see expected_lines in run.sh; keep the two in step). The program itself checks that the
 * launches and synchronizations succeed and that the printf FIFO size limit reads back.
 *
 * Expected device lines (order between threads is not defined):
 *   devprintf: block B thread T value V      for B in 0..1, T in 0..3, V = 100*B + 7*T
 *   devprintf: float 3.250 int -42 hex 0xcafe str cumux
 *   devprintf: second launch n=12345 */
#include "rt_test.h"

__global__ void say(int base)
{
    if (threadIdx.x < 4)
        printf("devprintf: block %d thread %d value %d\n", (int)blockIdx.x, (int)threadIdx.x,
               base * (int)blockIdx.x + 7 * (int)threadIdx.x);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        printf("devprintf: float %.3f int %d hex 0x%x str %s\n", 3.25, -42, 0xcafe, "cumux");
}

__global__ void say_again(int n)
{
    printf("devprintf: second launch n=%d\n", n);
}

int main(void)
{
    rt_begin("printf");
    rt_require_gpu();

    size_t fifo = 0;
    CK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
    if (fifo < 4096)
        rt_fail("printf FIFO size %zu", fifo);
    printf("host: before the first launch\n");
    say<<<2, 32>>>(100);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    printf("host: after the first synchronization\n");
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    say_again<<<1, 1, 0, s>>>(12345);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    CK(cudaDeviceSynchronize());
    fflush(stdout);
    rt_pass();
}
