/* A client holding ~1 GiB and launching kernels is SIGKILLed while another client keeps computing:
 * the survivor must stay correct, and the killed client's memory must come back. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

#include "mp_util.h"

#define A_BYTES ((size_t)1 << 30)
#define B_N (1 << 20)
#define MiB (1024.0 * 1024.0)

/* Free device memory as seen by a fresh process (the parent itself never touches CUDA). */
static double probe_free(void)
{
    int p[2];
    if (pipe(p))
        gt_fail("pipe: %s", strerror(errno));
    pid_t pid = mp_fork();
    if (pid == 0) {
        close(p[0]);
        size_t fr = 0, total = 0;
        CK(cuInit(0));
        gt_primary_ctx(0, NULL);
        CK(cuMemGetInfo(&fr, &total));
        mp_send(p[1], 'F', (double)fr, (double)total, 0, 0);
        exit(0);
    }
    close(p[1]);
    mp_msg m;
    int r = mp_recv(p[0], &m, 60000);
    close(p[0]);
    if (mp_wait(pid) != 0 || r != 0)
        gt_fail("memory probe process failed");
    return m.v[0];
}

static void client_a(int wfd)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction add = gt_function(mod, "add_u32");
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, A_BYTES));
    CK(cuMemsetD32(buf, 1, A_BYTES / 4));
    unsigned long long n = A_BYTES / 4;
    unsigned one = 1;
    void *args[] = {&buf, &n, &one};
    uint64_t t0 = gt_now_ns();
    for (unsigned long long it = 0;; it++) {
        CK(cuLaunchKernel(add, 1056, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        if (it % 8 == 7) {
            CK(cuCtxSynchronize());
            if (it == 7)
                mp_send(wfd, 'R', 0, 0, 0, 0);
        }
        if (gt_now_ns() - t0 > 120ull * 1000000000ull)
            gt_fail("client A was never killed");
    }
}

/* Verifies fresh results in a loop; 'K' on ctl marks the kill, 'S' stops. Reports counts. */
static void client_b(int wfd, int ctl)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction fill = gt_function(mod, "fill_pattern"), xf = gt_function(mod, "xform");
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d_in, d_out;
    CK(cuMemAlloc(&d_in, B_N * sizeof(unsigned)));
    CK(cuMemAlloc(&d_out, B_N * sizeof(unsigned)));
    unsigned *host;
    CK(cuMemAllocHost((void **)&host, B_N * sizeof(unsigned)));
    fcntl(ctl, F_SETFL, O_NONBLOCK);
    int n = B_N, killed = 0, stop = 0;
    long long delay = 0;
    long before = 0, after = 0;
    uint64_t t_kill = 0;
    for (unsigned it = 0;; it++) {
        unsigned seed = gt_mix(it, 5u);
        void *fargs[] = {&d_in, &seed, &n, &delay};
        void *xargs[] = {&d_in, &d_out, &n};
        CK(cuLaunchKernel(fill, 264, 1, 1, 256, 1, 1, 0, s, fargs, NULL));
        CK(cuLaunchKernel(xf, 264, 1, 1, 256, 1, 1, 0, s, xargs, NULL));
        CK(cuMemcpyDtoHAsync(host, d_out, B_N * sizeof(unsigned), s));
        CK(cuStreamSynchronize(s));
        for (int i = 0; i < B_N; i++)
            if (host[i] != gt_xform(gt_mix((unsigned)i, seed)))
                gt_fail("client B: iteration %u (%s the kill) element %d wrong", it, killed ? "after" : "before", i);
        memset(host, 0, B_N * sizeof(unsigned));
        if (killed)
            after++;
        else
            before++;
        if (it == 0)
            mp_send(wfd, 'R', 0, 0, 0, 0);
        char c;
        while (read(ctl, &c, 1) == 1) {
            if (c == 'K') {
                killed = 1;
                t_kill = gt_now_ns();
            } else if (c == 'S') {
                stop = 1;
            }
        }
        /* Asked to stop: once it has verified 5 times since the kill (a slow machine, ASan across the
         * network, takes longer than the parent's second for that), or after 30 s, whichever is first. */
        double since = killed ? (double)(gt_now_ns() - t_kill) / 1e6 : 0;
        if (stop && (after >= 5 || since > 30000)) {
            mp_send(wfd, 'B', (double)before, (double)after, since, 0);
            exit(0);
        }
    }
}

int main(void)
{
    gt_begin("client_killed");
    gt_require_gpu_in_child();

    double free0 = probe_free();

    int pa[2], pb[2], pc[2];
    if (pipe(pa))
        gt_fail("pipe: %s", strerror(errno));
    pid_t a = mp_fork();
    if (a == 0) {
        close(pa[0]);
        client_a(pa[1]);
    }
    close(pa[1]);
    mp_msg m;
    if (mp_recv(pa[0], &m, 60000) || m.tag != 'R') {
        mp_kill_wait(a);
        gt_fail("client A did not start its kernel loop");
    }
    double free1 = probe_free();
    if (free1 > free0 - 0.75 * (double)A_BYTES) {
        mp_kill_wait(a);
        gt_fail("free memory %.0f MiB while A holds 1 GiB, %.0f MiB before: allocation not visible", free1 / MiB,
                free0 / MiB);
    }

    /* Created only now so that A holds no end of B's pipes (EOF must mean B died). */
    if (pipe(pb) || pipe(pc)) {
        mp_kill_wait(a);
        gt_fail("pipe: %s", strerror(errno));
    }
    pid_t b = mp_fork();
    if (b == 0) {
        close(pb[0]);
        close(pc[1]);
        client_b(pb[1], pc[0]);
    }
    close(pb[1]);
    close(pc[0]);
    if (mp_recv(pb[0], &m, 60000) || m.tag != 'R') {
        mp_kill_wait(a);
        mp_kill_wait(b);
        gt_fail("client B did not start verifying");
    }
    gt_sleep_ms(200); /* B verifies alongside a running A for a moment */
    kill(a, SIGKILL);
    int sa = mp_wait(a);
    if (write(pc[1], "K", 1) != 1)
        gt_fail("pipe write: %s", strerror(errno));
    gt_sleep_ms(1100);
    if (write(pc[1], "S", 1) != 1)
        gt_fail("pipe write: %s", strerror(errno));
    if (mp_recv(pb[0], &m, 60000) || m.tag != 'B') {
        mp_kill_wait(b);
        gt_fail("client B failed after A was killed");
    }
    int sb = mp_wait(b);
    if (sa != -1 || sb != 0)
        gt_fail("unexpected exits: A %d (expected killed), B %d", sa, sb);
    /* What matters is that B went on after the kill: asked to stop, it goes on until it verified 5 times
     * since (within 30 s). How long that took depends on the machine's load: reported, not required (it
     * once read 879 ms of the parent's 1,100 under ASan on two busy cores; across the network under ASan,
     * 3 to 4 verifications fitted in that second). */
    if (m.v[1] < 5)
        gt_fail("client B verified %.0f times over %.0f ms after the kill (expected >= 5)", m.v[1], m.v[2]);

    /* The killed client's memory is released asynchronously: give it a few seconds. */
    double free2 = 0;
    for (int i = 0; i < 20; i++) {
        free2 = probe_free();
        if (free2 >= free0 - 64.0 * MiB)
            break;
        gt_sleep_ms(250);
    }
    printf("client_killed: free before %.0f MiB, with A %.0f MiB, after kill %.0f MiB; B verified %.0f times "
           "before and %.0f times after the kill\n",
           free0 / MiB, free1 / MiB, free2 / MiB, m.v[0], m.v[1]);
    if (free2 < free0 - 64.0 * MiB)
        gt_fail("free memory %.0f MiB after the kill, %.0f MiB before A: %.0f MiB not reclaimed", free2 / MiB,
                free0 / MiB, (free0 - free2) / MiB);
    gt_pass();
}
