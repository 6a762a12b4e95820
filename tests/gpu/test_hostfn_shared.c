/* Two client processes with host functions: A's host function takes 1.5 s (it sleeps); B, told to go while
 * A's runs, queues a host function of its own and waits for its stream: B must be done in well under A's
 * time. The driver runs a context's host functions on one thread; under cumux every client is in one
 * context, so a host function that held that thread would make B wait for A (invariant 1). */
#include <stdio.h>
#include <stdlib.h>

#include "mp_util.h"

#define A_SLEEP_MS 1500
#define B_LIMIT_MS 500.0

static int a_pipe = -1;
static void CUDA_CB a_slow(void *arg)
{
    (void)arg;
    mp_send(a_pipe, 'S', (double)gt_now_ns(), 0, 0, 0);
    gt_sleep_ms(A_SLEEP_MS);
}

static volatile int b_ran;
static void CUDA_CB b_quick(void *arg)
{
    (void)arg;
    b_ran = 1;
}

static void client_a(int wfd)
{
    a_pipe = wfd;
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuLaunchHostFunc(s, a_slow, NULL));
    CK(cuStreamSynchronize(s));
    mp_send(wfd, 'D', (double)gt_now_ns(), 0, 0, 0);
    exit(0);
}

static void client_b(int wfd, int go_fd)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuLaunchHostFunc(s, b_quick, NULL)); /* warm-up: the shim's host-function thread is running */
    CK(cuStreamSynchronize(s));
    b_ran = 0;
    mp_send(wfd, 'R', 0, 0, 0, 0);
    char go;
    if (read(go_fd, &go, 1) != 1)
        gt_fail("client B: no go from the parent");
    double t0 = (double)gt_now_ns();
    CK(cuLaunchHostFunc(s, b_quick, NULL));
    CK(cuStreamSynchronize(s));
    double t1 = (double)gt_now_ns();
    if (!b_ran)
        gt_fail("client B: its host function did not run before its stream was done");
    mp_send(wfd, 'B', t0, t1, 0, 0);
    exit(0);
}

int main(void)
{
    gt_begin("hostfn_shared");
    gt_require_gpu_in_child();
    mp_msg sa, da, mb;
    mp_two_clients(client_b, client_a, 'S', 'B', 'D', &sa, &mb, &da);
    double b_ms = (mb.v[1] - mb.v[0]) / 1e6, a_ms = (da.v[0] - sa.v[0]) / 1e6;
    printf("hostfn_shared: A's host function %.0f ms; B's host function and stream %.1f ms meanwhile\n", a_ms, b_ms);
    if (a_ms < A_SLEEP_MS * 0.9)
        gt_fail("A's host function took only %.0f ms", a_ms);
    if (b_ms >= B_LIMIT_MS)
        gt_fail("B's host function took %.0f ms while A's ran (limit %.0f ms): B waited for A", b_ms, B_LIMIT_MS);
    gt_pass();
}
