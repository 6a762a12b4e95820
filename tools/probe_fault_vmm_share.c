/* Issue 10, probe 2: does VMM memory exported as a file descriptor outlive a faulting process, at the same
 * address in the next one, and how fast can a fresh process take over? A launcher with no CUDA of its own
 * forks a holder, which creates 64 MiB with cuMemCreate, fills it and exports it as a descriptor; the
 * launcher keeps the descriptor (the holder quits after round 2: does the launcher's descriptor alone keep
 * the memory?). Then workers, one after another: each imports the descriptor, reserves the address the
 * previous one used, maps, checks the previous pattern, writes its own, and faults (illegal address). The
 * next worker is started before the fault and waits with CUDA initialised and the allocation imported
 * ("pre-started"); the time from the fault to its check of the memory is the takeover time.
 * Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_fault_vmm_share.c -o /tmp/pfv -lcuda && /tmp/pfv 10 */
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe_util.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry fault_write(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
                          " ld.param.u64 %rd1, [p];\n mov.u32 %r1, 1;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n";

#define SIZE ((size_t)64 << 20)

struct report {
    double t;            /* when it happened (CLOCK_MONOTONIC, ms) */
    unsigned long long va;
    int step;            /* 1 ready (imported, waiting), 2 checked, 3 faulted */
    int intact;
    int result;          /* CUresult of the step's last call */
};

static CUcontext context(void)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("no CUDA context\n");
        exit(1);
    }
    return ctx;
}

static CUresult map_at(CUmemGenericAllocationHandle h, CUdeviceptr hint, CUdeviceptr *va)
{
    CUresult r = cuMemAddressReserve(va, SIZE, 0, hint, 0);
    if (r == CUDA_SUCCESS)
        r = cuMemMap(*va, SIZE, 0, h, 0);
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS)
        r = cuMemSetAccess(*va, SIZE, &acc, 1);
    return r;
}

/* The holder: makes the memory, fills it with 0xa5a5a5a5, hands the descriptor over, waits to be told. */
static void holder(int sock)
{
    context();
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    int fd = -1;
    if (cuMemCreate(&h, SIZE, &prop, 0) || map_at(h, 0, &va) || cuMemsetD32(va, 0xa5a5a5a5u, SIZE / 4) ||
        cuCtxSynchronize() || cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) {
        printf("holder: could not make the memory\n");
        exit(1);
    }
    unsigned long long v = va;
    probe_send_fd(sock, fd, &v, sizeof v);
    char c;
    (void)!read(sock, &c, 1); /* told to go */
    exit(0);
}

/* A worker: imports, says ready, waits for "go", maps at the hint, checks `want`, writes `mine`, faults. */
static void worker(int sock, int fd, CUdeviceptr hint, unsigned want, unsigned mine)
{
    struct report rep = {0};
    context();
    CUmemGenericAllocationHandle h;
    rep.result = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmodule mod = NULL;
    CUfunction fault = NULL;
    if (!rep.result)
        rep.result = cuModuleLoadData(&mod, ptx);
    if (!rep.result)
        rep.result = cuModuleGetFunction(&fault, mod, "fault_write");
    rep.step = 1;
    rep.t = now_ms();
    (void)!write(sock, &rep, sizeof rep);
    char c;
    if (read(sock, &c, 1) != 1 || rep.result)
        exit(1);
    CUdeviceptr va = 0;
    rep.result = map_at(h, hint, &va);
    rep.va = va;
    unsigned *host = malloc(SIZE);
    if (!rep.result)
        rep.result = cuMemcpyDtoH(host, va, SIZE);
    rep.intact = !rep.result;
    for (size_t i = 0; rep.intact && i < SIZE / 4; i++)
        rep.intact = host[i] == want;
    rep.step = 2;
    rep.t = now_ms();
    (void)!write(sock, &rep, sizeof rep);
    if (read(sock, &c, 1) != 1)
        exit(1);
    cuMemsetD32(va, mine, SIZE / 4);
    cuCtxSynchronize();
    CUdeviceptr bad = 0x10;
    void *args[] = {&bad};
    cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
    rep.result = cuCtxSynchronize();
    rep.step = 3;
    rep.t = now_ms();
    (void)!write(sock, &rep, sizeof rep);
    (void)!read(sock, &c, 1); /* held until told: the launcher kills it */
    exit(0);
}

static pid_t start_worker(int fd, CUdeviceptr hint, unsigned want, unsigned mine, int *sock)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0)
        exit(1);
    pid_t p = fork();
    if (p == 0) {
        close(sp[0]);
        worker(sp[1], fd, hint, want, mine);
    }
    close(sp[1]);
    *sock = sp[0];
    return p;
}

static int wait_report(int sock, struct report *r, int step)
{
    if (read(sock, r, sizeof *r) != (ssize_t)sizeof *r || r->step != step) {
        printf("a worker died before step %d\n", step);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    int hs[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, hs) < 0)
        return 1;
    pid_t hp = fork();
    if (hp == 0) {
        close(hs[0]);
        holder(hs[1]);
    }
    close(hs[1]);
    unsigned long long hint = 0;
    int fd = probe_recv_fd(hs[0], &hint, sizeof hint);
    if (fd < 0) {
        printf("SKIP or FAIL: the holder handed no descriptor over (no GPU?)\n");
        return 0;
    }
    printf("holder: 64 MiB at 0x%llx, descriptor %d\n", hint, fd);
    unsigned want = 0xa5a5a5a5u;
    int sock, intact = 0, same_va = 0, done = 0;
    double worst = 0, sum = 0;
    pid_t wp = start_worker(fd, hint, want, 1, &sock);
    struct report r;
    if (wait_report(sock, &r, 1) < 0)
        return 1;
    double t_fault = 0;
    for (int k = 1; k <= rounds; k++) {
        double t_go = now_ms();
        (void)!write(sock, "g", 1);
        if (wait_report(sock, &r, 2) < 0)
            break;
        double takeover = k > 1 ? r.t - t_fault : r.t - t_go;
        intact += r.intact;
        same_va += r.va == hint;
        if (k > 1) {
            sum += takeover;
            worst = takeover > worst ? takeover : worst;
        }
        printf("worker %d: at 0x%llx (%s), memory %s, %s %.1f ms\n", k, r.va, r.va == hint ? "same" : "moved",
               r.intact ? "intact" : "NOT intact", k > 1 ? "fault to checked" : "go to checked", takeover);
        hint = r.va;
        want = (unsigned)k;
        /* The next worker, pre-started, while this one faults. */
        int next_sock = -1;
        pid_t next = k < rounds ? start_worker(fd, hint, want, (unsigned)k + 1, &next_sock) : -1;
        if (next > 0 && wait_report(next_sock, &r, 1) < 0)
            break;
        (void)!write(sock, "f", 1);
        if (wait_report(sock, &r, 3) < 0)
            break;
        t_fault = r.t;
        printf("worker %d: faulted with %d\n", k, r.result);
        kill(wp, SIGKILL);
        waitpid(wp, NULL, 0);
        close(sock);
        if (k == 2) { /* from now on only the launcher's descriptor holds the memory */
            (void)!write(hs[0], "q", 1);
            waitpid(hp, NULL, 0);
            printf("holder gone\n");
        }
        done = k;
        if (next < 0)
            break;
        wp = next;
        sock = next_sock;
    }
    printf("SUMMARY: %d workers; same address %d, memory intact %d; takeover after a fault (pre-started) mean "
           "%.1f ms, worst %.1f ms\n",
           done, same_va, intact, done > 1 ? sum / (done - 1) : 0.0, worst);
    return 0;
}
