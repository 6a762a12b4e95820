/* Two client processes: A runs a ~2 s spin kernel on its legacy stream; B, told to go while it runs,
 * runs small kernels on its own legacy stream and must finish in well under A's kernel time.
 * B sets up (context, module, memory) before A's kernel starts: loading a module waits for every kernel
 * running in a context, and under cumux all clients share one (docs/architecture.md, known limits).
 * What is tested here is that the legacy streams of two clients do not wait for each other. */
#include <stdio.h>
#include <stdlib.h>

#include "mp_util.h"

#define SPIN_MS 2000.0
#define B_LIMIT_MS 500.0
#define B_ITERS 10
#define B_N (1 << 16)

static void client_a(int wfd)
{
    CUdevice dev;
    CK(cuInit(0));
    gt_primary_ctx(0, &dev);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction spin = gt_function(mod, "spin_flag");
    CUdeviceptr flag;
    CK(cuMemAlloc(&flag, sizeof(int)));
    long long zero = 0;
    int value = 0;
    void *wargs[] = {&zero, &flag, &value};
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, NULL, wargs, NULL)); /* warm-up: loads the kernel */
    CK(cuCtxSynchronize());

    CUevent e0, e1;
    CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    long long cycles = gt_cycles_for_ms(dev, SPIN_MS);
    value = 7;
    void *args[] = {&cycles, &flag, &value};
    CK(cuEventRecord(e0, NULL));
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CK(cuEventRecord(e1, NULL));
    mp_send(wfd, 'L', (double)gt_now_ns(), 0, 0, 0);
    CK(cuCtxSynchronize());
    double t_end = (double)gt_now_ns();
    float ms = 0;
    CK(cuEventElapsedTime(&ms, e0, e1));
    int got = 0;
    CK(cuMemcpyDtoH(&got, flag, sizeof got));
    if (got != 7)
        gt_fail("client A: flag %d after its spin, expected 7", got);
    mp_send(wfd, 'D', t_end, ms, 0, 0);
    exit(0);
}

static void client_b(int wfd, int go_fd)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction fill = gt_function(mod, "fill_pattern"), xf = gt_function(mod, "xform");
    CUdeviceptr d_in, d_out;
    CK(cuMemAlloc(&d_in, B_N * sizeof(unsigned)));
    CK(cuMemAlloc(&d_out, B_N * sizeof(unsigned)));
    static unsigned host[B_N];
    mp_send(wfd, 'R', 0, 0, 0, 0);
    char go;
    if (read(go_fd, &go, 1) != 1)
        gt_fail("client B: no go from the parent");
    double t_start = (double)gt_now_ns(), t_ready = t_start;
    int n = B_N;
    long long delay = 0;
    for (int it = 0; it < B_ITERS; it++) {
        unsigned seed = gt_mix((unsigned)it, 99u);
        void *fargs[] = {&d_in, &seed, &n, &delay};
        void *xargs[] = {&d_in, &d_out, &n};
        CK(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, NULL, fargs, NULL));
        CK(cuLaunchKernel(xf, 64, 1, 1, 256, 1, 1, 0, NULL, xargs, NULL));
        CK(cuStreamSynchronize(NULL));
        memset(host, 0, sizeof host);
        CK(cuMemcpyDtoH(host, d_out, sizeof host));
        for (int i = 0; i < B_N; i++)
            if (host[i] != gt_xform(gt_mix((unsigned)i, seed)))
                gt_fail("client B: iteration %d element %d wrong", it, i);
    }
    double t_end = (double)gt_now_ns();
    mp_send(wfd, 'B', t_start, t_ready, t_end, 0);
    exit(0);
}

int main(void)
{
    gt_begin("two_clients");
    gt_require_gpu_in_child();

    mp_msg la, da, mb;
    mp_two_clients(client_b, client_a, 'L', 'B', 'D', &la, &mb, &da);

    double b_work = (mb.v[2] - mb.v[1]) / 1e6, b_total = (mb.v[2] - mb.v[0]) / 1e6;
    double a_kernel = da.v[1], b_end_vs_a_end = (da.v[0] - mb.v[2]) / 1e6;
    (void)b_total;
    printf("two_clients: A spin %.0f ms; B went %.0f ms after A's launch, %d iterations in %.1f ms, "
           "finished %.0f ms before A\n",
           a_kernel, (mb.v[0] - la.v[0]) / 1e6, B_ITERS, b_work, b_end_vs_a_end);
    if (a_kernel < SPIN_MS / 2)
        gt_fail("A's spin kernel took only %.0f ms", a_kernel);
    if (b_work >= B_LIMIT_MS)
        gt_fail("B's kernels took %.0f ms while A's kernel ran (limit %.0f ms): B waited for A", b_work, B_LIMIT_MS);
    if (b_end_vs_a_end <= 0)
        gt_fail("B finished %.0f ms after A's kernel ended: B did not progress while A ran", -b_end_vs_a_end);
    gt_pass();
}
