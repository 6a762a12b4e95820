/* Issue 10, containment: can a standby worker take over the clients' device memory, at the same addresses,
 * when the serving worker faults? The design to test: every worker reserves one "arena" of virtual
 * addresses at the same place (the first worker picks it, the supervisor tells the others); client memory
 * is VMM chunks mapped in the arena and exported as descriptors, which the supervisor (no CUDA of its own)
 * holds; after a fault it hands them to the standby, which maps each at its old offset. Questions:
 *  1. the arena: does a second process (the standby, its context made first) get the same 512 GiB range at
 *     the address the first one got?
 *  2. a takeover at fault time: the standby imports and maps 32 chunks (2-64 MiB, 800 MiB) at their old
 *     places; how long from the fault to all mapped, checked, and a kernel run on them?
 *  3. contents: each chunk's pattern intact after the worker's fault and death; the kernel's result right
 *  4. releasing a chunk (cuMemUnmap + cuMemRelease) while another stream runs a 300 ms kernel: does it wait
 *     for the kernel (then frees belong on the reaper thread), and cuMemFree of a cuMemAlloc for comparison
 *  5. a pool made with descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): the standby imports it and
 *     three of its pointers: at the same addresses? (then the driver's pool could stay)
 *  6. what creating a chunk costs (create + map + access + export), per size
 * Run on a GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe_fault_contain.c -o /tmp/pco -lcuda && /tmp/pco */
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

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry fault_write(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
    " ld.param.u64 %rd1, [p];\n mov.u32 %r1, 1;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n"
    ".visible .entry spin(.param .u64 cycles)\n{\n .reg .b64 %rd<5>;\n .reg .pred %p<2>;\n"
    " ld.param.u64 %rd1, [cycles];\n mov.u64 %rd2, %clock64;\nL1:\n mov.u64 %rd3, %clock64;\n"
    " sub.s64 %rd4, %rd3, %rd2;\n setp.lt.s64 %p1, %rd4, %rd1;\n @%p1 bra L1;\n ret;\n}\n"
    ".visible .entry add_one(.param .u64 p, .param .u32 n)\n{\n .reg .b32 %r<8>;\n .reg .b64 %rd<4>;\n"
    " .reg .pred %p<2>;\n ld.param.u64 %rd1, [p];\n ld.param.u32 %r1, [n];\n mov.u32 %r2, %ctaid.x;\n"
    " mov.u32 %r3, %ntid.x;\n mov.u32 %r4, %tid.x;\n mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    " setp.ge.u32 %p1, %r5, %r1;\n @%p1 bra DONE;\n mul.wide.u32 %rd2, %r5, 4;\n add.s64 %rd3, %rd1, %rd2;\n"
    " ld.global.u32 %r6, [%rd3];\n add.s32 %r7, %r6, 1;\n st.global.u32 [%rd3], %r7;\nDONE:\n ret;\n}\n";

#define ARENA ((size_t)512 << 30)
#define NCHUNK 32
#define NPOOLPTR 3

struct chunk_msg {
    unsigned long long off, size;
    unsigned pattern;
    int kind; /* 0 chunk, 1 pool, 2 pool pointer, 3 end */
    unsigned long long va; /* the pool pointer's address in the worker */
    CUmemPoolPtrExportData data;
};

static void context(CUmodule *mod)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("SKIP: no CUDA context (no GPU?)\n");
        exit(3);
    }
    CK(cuModuleLoadData(mod, ptx));
}

static const CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

static CUresult map_chunk(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size)
{
    CUresult r = cuMemMap(va, size, 0, h, 0);
    return r ? r : cuMemSetAccess(va, size, &rw, 1);
}

static size_t chunk_size(int i)
{
    static const size_t mib[4] = {2, 4, 32, 64}; /* 8 of each: 816 MiB */
    return mib[i % 4] << 20;
}

/* The serving worker: arena, chunks sent to the launcher, question 4, the pool, then a fault. */
static void worker(int sock)
{
    CUmodule mod;
    context(&mod);
    CUdeviceptr arena = 0;
    CK(cuMemAddressReserve(&arena, ARENA, 0, 0, 0));
    unsigned long long a = arena;
    (void)!write(sock, &a, sizeof a);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t off = 0;
    double cost[4] = {0};
    for (int i = 0; i < NCHUNK; i++) {
        size_t size = chunk_size(i);
        double t = now_ms();
        CUmemGenericAllocationHandle h;
        int fd = -1;
        CK(cuMemCreate(&h, size, &prop, 0));
        CK(map_chunk(h, arena + off, size));
        CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        cost[i % 4] += now_ms() - t;
        CK(cuMemRelease(h)); /* the mapping and the descriptor keep it */
        CK(cuMemsetD32(arena + off, (unsigned)i + 1, size / 4));
        struct chunk_msg m = {.off = off, .size = size, .pattern = (unsigned)i + 1, .kind = 0};
        probe_send_fd(sock, fd, &m, sizeof m);
        close(fd);
        off += size;
    }
    CK(cuCtxSynchronize());
    printf("6. a chunk's create + map + access + export: 2 MiB %.3f ms, 4 MiB %.3f, 32 MiB %.3f, 64 MiB %.3f\n",
           cost[0] / (NCHUNK / 4), cost[1] / (NCHUNK / 4), cost[2] / (NCHUNK / 4), cost[3] / (NCHUNK / 4));
    /* 4: releases while a 300 ms kernel runs on another stream. */
    CUfunction spin;
    CK(cuModuleGetFunction(&spin, mod, "spin"));
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    int khz = 0;
    CK(cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    long long cycles = (long long)khz * 300;
    void *sargs[] = {&cycles};
    CUstream busy;
    CK(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
    CUmemGenericAllocationHandle hx;
    CK(cuMemCreate(&hx, 32 << 20, &prop, 0));
    CK(map_chunk(hx, arena + off, 32 << 20));
    CUdeviceptr plain;
    CK(cuMemAlloc(&plain, 32 << 20));
    CK(cuCtxSynchronize());
    CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, busy, sargs, NULL));
    double t = now_ms();
    CK(cuMemUnmap(arena + off, 32 << 20));
    CK(cuMemRelease(hx));
    double unmap_ms = now_ms() - t;
    t = now_ms();
    CK(cuMemFree(plain));
    double free_ms = now_ms() - t;
    CK(cuStreamSynchronize(busy));
    printf("4. beside a 300 ms kernel: cuMemUnmap + cuMemRelease of a chunk %.2f ms (%s); cuMemFree %.2f ms\n",
           unmap_ms, unmap_ms > 100 ? "waited for the kernel" : "did not wait", free_ms);
    /* 5: a pool with descriptors, three pointers. */
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    CUmemoryPool pool;
    int pfd = -1;
    CUresult pr = cuMemPoolCreate(&pool, &pp);
    if (pr == CUDA_SUCCESS)
        pr = cuMemPoolExportToShareableHandle(&pfd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    struct chunk_msg pm = {.kind = 1};
    if (pr == CUDA_SUCCESS) {
        probe_send_fd(sock, pfd, &pm, sizeof pm);
        for (int i = 0; i < NPOOLPTR; i++) {
            CUdeviceptr p;
            CK(cuMemAllocFromPoolAsync(&p, (size_t)(1 + i) << 20, pool, busy));
            CK(cuMemsetD32Async(p, 0x5000u + (unsigned)i, ((size_t)(1 + i) << 20) / 4, busy));
            struct chunk_msg m = {.kind = 2, .va = p, .size = (size_t)(1 + i) << 20, .pattern = 0x5000u + (unsigned)i};
            CK(cuMemPoolExportPointer(&m.data, p));
            probe_send_fd(sock, -1, &m, sizeof m);
        }
        CK(cuStreamSynchronize(busy));
    } else {
        printf("5. a pool with descriptors: %s\n", ename(pr));
    }
    struct chunk_msg end = {.kind = 3};
    probe_send_fd(sock, -1, &end, sizeof end);
    /* The fault. */
    char c;
    if (read(sock, &c, 1) != 1)
        exit(1);
    CUfunction fault;
    CK(cuModuleGetFunction(&fault, mod, "fault_write"));
    CUdeviceptr bad = 0x10;
    void *fargs[] = {&bad};
    CK(cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, NULL, fargs, NULL));
    CUresult fr = cuCtxSynchronize();
    double tf = now_ms();
    (void)!write(sock, &tf, sizeof tf);
    printf("   the worker's fault: %s\n", ename(fr));
    fflush(stdout);
    pause(); /* killed by the launcher */
}

/* The standby: context and module first, then the arena at the worker's address, then the takeover. */
static void standby(int sock)
{
    CUmodule mod;
    context(&mod);
    CUfunction add;
    CK(cuModuleGetFunction(&add, mod, "add_one"));
    unsigned long long want;
    if (read(sock, &want, sizeof want) != sizeof want)
        exit(1);
    CUdeviceptr arena = 0;
    CUresult r = cuMemAddressReserve(&arena, ARENA, 0, (CUdeviceptr)want, 0);
    printf("1. the arena in the standby: %s at 0x%llx (the worker's 0x%llx): %s\n", ename(r),
           (unsigned long long)arena, want, r == CUDA_SUCCESS && arena == want ? "same" : "NOT the same");
    fflush(stdout);
    unsigned long long got = r == CUDA_SUCCESS ? arena : 0;
    (void)!write(sock, &got, sizeof got);
    /* Takeover: descriptors arrive after the worker's fault. */
    int mapped = 0, intact = 0, pool_same = 0, pool_intact = 0, npool = 0;
    CUmemoryPool pool = NULL;
    CUdeviceptr first = 0;
    for (;;) {
        struct chunk_msg m;
        int fd = probe_recv_fd(sock, &m, sizeof m);
        if (fd == -2 || m.kind == 3)
            break;
        if (m.kind == 0) {
            CUmemGenericAllocationHandle h;
            CUresult e = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            if (e == CUDA_SUCCESS)
                e = map_chunk(h, arena + m.off, m.size);
            if (e == CUDA_SUCCESS)
                cuMemRelease(h);
            close(fd);
            if (e != CUDA_SUCCESS) {
                printf("2. chunk at +0x%llx: %s\n", m.off, ename(e));
                continue;
            }
            mapped++;
            unsigned w[2] = {0, 0};
            if (cuMemcpyDtoH(&w[0], arena + m.off, 4) == CUDA_SUCCESS &&
                cuMemcpyDtoH(&w[1], arena + m.off + m.size - 4, 4) == CUDA_SUCCESS)
                intact += w[0] == m.pattern && w[1] == m.pattern;
            if (!first)
                first = arena + m.off;
        } else if (m.kind == 1) {
            CUresult e = cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            close(fd);
            if (e != CUDA_SUCCESS)
                printf("5. pool import: %s\n", ename(e));
        } else if (m.kind == 2 && pool) {
            CUdeviceptr p = 0;
            CUresult e = cuMemPoolImportPointer(&p, pool, &m.data);
            npool++;
            pool_same += e == CUDA_SUCCESS && p == m.va;
            unsigned w = 0;
            if (e == CUDA_SUCCESS && cuMemcpyDtoH(&w, p, 4) == CUDA_SUCCESS)
                pool_intact += w == m.pattern;
            printf("5. pool pointer %d: %s at 0x%llx (the worker's 0x%llx)\n", npool, ename(e),
                   (unsigned long long)p, m.va);
        }
    }
    /* A kernel on the first chunk (2 MiB of pattern 1): every word 2 after it. */
    unsigned n = (2u << 20) / 4;
    void *args[] = {&first, &n};
    CUresult kr = first ? cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL)
                        : CUDA_ERROR_INVALID_VALUE;
    if (kr == CUDA_SUCCESS)
        kr = cuCtxSynchronize();
    unsigned *host = malloc((size_t)n * 4);
    int right = kr == CUDA_SUCCESS && host && cuMemcpyDtoH(host, first, (size_t)n * 4) == CUDA_SUCCESS;
    for (unsigned i = 0; right && i < n; i++)
        right = host[i] == 2;
    double t = now_ms();
    struct {
        double t;
        int mapped, intact, kernel_right, pool_same, pool_intact, npool;
    } rep = {t, mapped, intact, right, pool_same, pool_intact, npool};
    (void)!write(sock, &rep, sizeof rep);
    exit(0);
}

int main(void)
{
    int ws[2], ss[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ws) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, ss) < 0)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid_t sp = fork();
    if (sp == 0) {
        close(ss[0]);
        standby(ss[1]);
    }
    close(ss[1]);
    pid_t wp = fork();
    if (wp == 0) {
        close(ws[0]);
        worker(ws[1]);
    }
    close(ws[1]);
    unsigned long long arena = 0, sarena = 0;
    if (read(ws[0], &arena, sizeof arena) != sizeof arena) {
        printf("SKIP or FAIL: the worker made no arena\n");
        kill(sp, SIGKILL);
        return 0;
    }
    (void)!write(ss[0], &arena, sizeof arena);
    if (read(ss[0], &sarena, sizeof sarena) != sizeof sarena || sarena != arena) {
        printf("SUMMARY: the standby could not have the arena at 0x%llx\n", arena);
        kill(sp, SIGKILL);
        kill(wp, SIGKILL);
        return 0;
    }
    /* Hold every descriptor the worker sends, as the supervisor would. */
    static struct chunk_msg held[NCHUNK + NPOOLPTR + 2];
    static int fds[NCHUNK + NPOOLPTR + 2];
    int nheld = 0;
    for (;;) {
        struct chunk_msg m;
        int fd = probe_recv_fd(ws[0], &m, sizeof m);
        if (fd == -2) {
            printf("FAIL: the worker died early\n");
            return 1;
        }
        held[nheld] = m;
        fds[nheld++] = fd;
        if (m.kind == 3 || nheld == NCHUNK + NPOOLPTR + 2)
            break;
    }
    (void)!write(ws[0], "f", 1);
    double t_fault = 0;
    if (read(ws[0], &t_fault, sizeof t_fault) != sizeof t_fault)
        return 1;
    double t_handed = now_ms();
    for (int i = 0; i < nheld; i++) {
        probe_send_fd(ss[0], fds[i], &held[i], sizeof held[i]);
        if (fds[i] >= 0)
            close(fds[i]);
    }
    struct {
        double t;
        int mapped, intact, kernel_right, pool_same, pool_intact, npool;
    } rep;
    int got = read(ss[0], &rep, sizeof rep) == (ssize_t)sizeof rep;
    kill(wp, SIGKILL);
    waitpid(wp, NULL, 0);
    waitpid(sp, NULL, 0);
    if (!got) {
        printf("FAIL: the standby died in the takeover\n");
        return 1;
    }
    printf("2/3. takeover: %d of %d chunks mapped, %d intact, a kernel on them %s; fault to done %.1f ms "
           "(handed over %.1f ms after the fault)\n",
           rep.mapped, NCHUNK, rep.intact, rep.kernel_right ? "right" : "WRONG", rep.t - t_fault, t_handed - t_fault);
    printf("SUMMARY arena same; chunks %d/%d mapped, %d intact, kernel %s, %.1f ms; pool pointers same address "
           "%d/%d, intact %d\n",
           rep.mapped, NCHUNK, rep.intact, rep.kernel_right ? "right" : "WRONG", rep.t - t_fault, rep.pool_same,
           rep.npool, rep.pool_intact);
    return 0;
}
