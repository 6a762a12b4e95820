/* CUDA IPC between two processes, as torch.multiprocessing shares a CUDA tensor: the owner fills an
 * allocation and sends its cuIpcGetMemHandle over a pipe; the other process opens it, checks every
 * element against the CPU, writes the second half with a memset and a kernel, closes it; the owner then
 * sees those writes. An interprocess event orders the opener after the owner's asynchronous work: the
 * owner queues a 64 MiB memset and records the event without waiting; the opener waits on the opened
 * event and must see the memset's values. Also refused: a handle that was never exported, closing what
 * was not opened.
 * `gpu_ipc hold`: the owner frees its memory and exits while the opener holds it open; the opener still
 * reads the owner's values, writes its own, reads them back, and exits without closing (its end closes).
 * The opener then records the same event after its own kernel, without waiting, and the owner's
 * cuEventSynchronize of it must see the kernel's writes.
 * GT_IPC_OWNER_DEVICES and GT_IPC_OPENER_DEVICES, when set, are each process's CUDA_VISIBLE_DEVICES: the two
 * on different GPUs, the opener's access is peer access.
 * The parent forks before any CUDA call (CUDA is not fork-safe) and only coordinates. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "mp_util.h"

#define N (1 << 20)
#define BIG (16 << 20) /* floats: 64 MiB */

struct handles {
    CUipcMemHandle small, big;
    CUipcEventHandle done; /* recorded after the memset of big */
};

static void owner(int to_child, int from_child)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    size_t bytes = (size_t)N * sizeof(float);
    float *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    CUdeviceptr d;
    CK(cuMemAlloc(&d, bytes));
    CK(cuMemcpyHtoD(d, h, bytes));
    struct handles hs;
    CK(cuIpcGetMemHandle(&hs.small, d));
    CUdeviceptr big;
    CK(cuMemAlloc(&big, (size_t)BIG * sizeof(float)));
    CUevent done;
    CK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemsetD32Async(big, 0x3fc00000u, BIG, s)); /* 1.5f; not waited for here */
    CK(cuEventRecord(done, s));
    CK(cuIpcGetMemHandle(&hs.big, big));
    CK(cuIpcGetEventHandle(&hs.done, done));
    if (write(to_child, &hs, sizeof hs) != (ssize_t)sizeof hs)
        gt_fail("pipe write: %s", strerror(errno));
    mp_msg m;
    /* The opener recorded the event after its kernel and did not wait: waiting on it here waits for that. */
    if (mp_recv(from_child, &m, 60000) < 0 || m.tag != 'K')
        gt_fail("the other process did not say it recorded the event");
    CK(cuEventSynchronize(done));
    CK(cuMemcpyDtoH(h, d, bytes));
    for (int i = N / 2; i < N; i++)
        if (h[i] != (float)(i - N / 2) + 2.0f)
            gt_fail("owner, after the opener's record: element %d = %g, expected %g", i, (double)h[i],
                    (double)(i - N / 2) + 2.0f);
    mp_send(to_child, 'R', 0, 0, 0, 0);
    if (mp_recv(from_child, &m, 60000) < 0 || m.tag != 'C')
        gt_fail("the other process did not finish with the memory");
    CK(cuMemcpyDtoH(h, d, bytes));
    for (int i = 0; i < N; i++) {
        float want = i < N / 2 ? (float)i : (float)(i - N / 2) + 2.0f;
        if (h[i] != want)
            gt_fail("owner: element %d = %g after the other process wrote, expected %g", i, (double)h[i],
                    (double)want);
    }
    CK(cuMemFree(d));
    CK(cuMemFree(big));
    CK(cuEventDestroy(done));
    CK(cuStreamDestroy(s));
    free(h);
    gt_pass();
}

static void opener(int from_owner, int to_owner)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction vec_add = gt_function(mod, "vec_add");
    struct handles hs;
    if (read(from_owner, &hs, sizeof hs) != (ssize_t)sizeof hs)
        gt_fail("no handles from the owner");
    CUipcMemHandle handle = hs.small;
    /* The owner's memset of big, ordered by its interprocess event. */
    CUevent done;
    CK(cuIpcOpenEventHandle(&done, hs.done));
    CUdeviceptr big;
    CK(cuIpcOpenMemHandle(&big, hs.big, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CK(cuStreamWaitEvent(NULL, done, 0));
    float tail[256];
    CK(cuMemcpyDtoH(tail, big + ((size_t)BIG - 256) * sizeof(float), sizeof tail));
    for (int i = 0; i < 256; i++)
        if (tail[i] != 1.5f)
            gt_fail("after waiting on the owner's event: big[%d] = %g, expected 1.5", BIG - 256 + i, (double)tail[i]);
    CK(cuEventSynchronize(done));
    CK(cuIpcCloseMemHandle(big));
    /* Never exported: refused. */
    CUipcMemHandle bogus;
    memset(&bogus, 0x5a, sizeof bogus);
    CUdeviceptr x;
    if (cuIpcOpenMemHandle(&x, bogus, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS)
        gt_fail("a handle that was never exported opened");
    CUdeviceptr d;
    CK(cuIpcOpenMemHandle(&d, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    size_t bytes = (size_t)N * sizeof(float);
    float *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(h, d, bytes));
    for (int i = 0; i < N; i++)
        if (h[i] != (float)i)
            gt_fail("opener: element %d = %g, expected %d", i, (double)h[i], i);
    /* The second half: 2.0 by a memset, then the first half added by a kernel (what the owner expects). */
    CUdeviceptr second = d + bytes / 2;
    CK(cuMemsetD32(second, 0x40000000u, N / 2)); /* 2.0f */
    int n = N / 2;
    void *args[] = {&d, &second, &second, &n}; /* second[i] = first[i] + second[i] */
    CK(cuLaunchKernel(vec_add, (N / 2 + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    /* The owner waits for the kernel through the event, recorded here without waiting. */
    CK(cuEventRecord(done, NULL));
    mp_send(to_owner, 'K', 0, 0, 0, 0);
    mp_msg m;
    if (mp_recv(from_owner, &m, 60000) < 0 || m.tag != 'R')
        gt_fail("the owner did not see the kernel's writes");
    CK(cuEventDestroy(done));
    CK(cuCtxSynchronize());
    /* Closing what was not opened is refused; closing what was is not. */
    CUdeviceptr mine;
    CK(cuMemAlloc(&mine, 4096));
    if (cuIpcCloseMemHandle(mine) == CUDA_SUCCESS)
        gt_fail("closing memory that was not opened succeeded");
    CK(cuMemFree(mine));
    CK(cuIpcCloseMemHandle(d));
    free(h);
    CK(cuModuleUnload(mod));
    mp_send(to_owner, 'C', 0, 0, 0, 0);
    gt_pass();
}

/* `hold`: the owner goes first. */
static void owner_frees(int to_child, int from_child)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    size_t bytes = (size_t)N * sizeof(float);
    CUdeviceptr d;
    CK(cuMemAlloc(&d, bytes));
    CK(cuMemsetD32(d, 0x40400000u, N)); /* 3.0f */
    CK(cuCtxSynchronize());
    struct handles hs;
    memset(&hs, 0, sizeof hs);
    CK(cuIpcGetMemHandle(&hs.small, d));
    if (write(to_child, &hs, sizeof hs) != (ssize_t)sizeof hs)
        gt_fail("pipe write: %s", strerror(errno));
    mp_msg m;
    if (mp_recv(from_child, &m, 60000) < 0 || m.tag != 'O')
        gt_fail("the other process did not open the memory");
    CK(cuMemFree(d)); /* held open: it stays for the opener */
    gt_pass();
}

static void opener_holds(int from_owner, int to_owner)
{
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    struct handles hs;
    if (read(from_owner, &hs, sizeof hs) != (ssize_t)sizeof hs)
        gt_fail("no handles from the owner");
    CUdeviceptr d;
    CK(cuIpcOpenMemHandle(&d, hs.small, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    mp_send(to_owner, 'O', 0, 0, 0, 0);
    char c;
    while (read(from_owner, &c, 1) > 0) { /* until the owner has gone: its end of the pipe closes */
    }
    size_t bytes = (size_t)N * sizeof(float);
    float *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(h, d, bytes));
    for (int i = 0; i < N; i++)
        if (h[i] != 3.0f)
            gt_fail("after the owner freed and went: element %d = %g, expected 3", i, (double)h[i]);
    CK(cuMemsetD32(d, 0x40a00000u, N)); /* 5.0f */
    CK(cuMemcpyDtoH(h, d, bytes));
    for (int i = 0; i < N; i++)
        if (h[i] != 5.0f)
            gt_fail("element %d = %g after writing 5", i, (double)h[i]);
    free(h);
    gt_pass(); /* exits holding it open */
}

int main(int argc, char **argv)
{
    bool hold = argc > 1 && !strcmp(argv[1], "hold");
    gt_begin("ipc");
    gt_require_gpu_in_child(); /* skips here when there is no GPU; the parent stays CUDA-free */
    int down[2], up[2];
    if (pipe(down) < 0 || pipe(up) < 0)
        gt_fail("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t child = fork();
    if (child < 0)
        gt_fail("fork: %s", strerror(errno));
    if (child == 0) {
        close(down[1]);
        close(up[0]);
        gt_begin("ipc (opener)");
        const char *v = getenv("GT_IPC_OPENER_DEVICES");
        if (v)
            setenv("CUDA_VISIBLE_DEVICES", v, 1);
        if (hold)
            opener_holds(down[0], up[1]);
        opener(down[0], up[1]);
    }
    pid_t own = fork();
    if (own < 0)
        gt_fail("fork: %s", strerror(errno));
    if (own == 0) {
        close(down[0]);
        close(up[1]);
        gt_begin("ipc (owner)");
        const char *v = getenv("GT_IPC_OWNER_DEVICES");
        if (v)
            setenv("CUDA_VISIBLE_DEVICES", v, 1);
        if (hold)
            owner_frees(down[1], up[0]);
        owner(down[1], up[0]);
    }
    close(down[0]);
    close(down[1]);
    close(up[0]);
    close(up[1]);
    int so = 0, sc = 0;
    waitpid(own, &so, 0);
    waitpid(child, &sc, 0);
    if (!WIFEXITED(so) || WEXITSTATUS(so) != 0 || !WIFEXITED(sc) || WEXITSTATUS(sc) != 0)
        gt_fail("owner exited %#x, opener %#x", so, sc);
    gt_pass();
}
