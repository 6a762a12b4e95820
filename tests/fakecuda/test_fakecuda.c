/* The fake driver itself (linked in, fakecuda_static): memory accounting, the oracle's verdicts on bad
 * ranges (each in a child that must abort with the oracle's line), guard pages, asynchronous streams
 * and events, a kernel found by name in an image, and the live counts. */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#include "fake_check.h"

static CUstream stream;
static CUdeviceptr buf; /* 4096 bytes */

/* Runs fn in a child with stderr captured; the signal it died of, its stderr in out. */
static int in_child(void (*fn)(void), char *out, size_t cap)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        fn();
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void past_end(void)
{
    cuMemsetD8Async(buf, 0, 4097, stream);
}

static void span_wraps(void)
{
    cuMemsetD2D32Async(buf, (size_t)1 << 62, 0, 1, 5, stream);
}

static void host_unregistered(void)
{
    static char plain[64];
    cuMemcpyDtoHAsync(plain, buf, sizeof plain, stream);
}

static void guard_page(void)
{
    ((volatile char *)(uintptr_t)buf)[4096] = 1;
}

static void after_free(void)
{
    /* A stream of the child's own: the parent's executor threads are not in it. */
    CUstream s;
    CUdeviceptr p;
    CUmemoryPool pool;
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    cuDeviceGetDefaultMemPool(&pool, 0);
    cuMemAllocFromPoolAsync(&p, 256, pool, s);
    cuMemFreeAsync(p, s);
    cuStreamSynchronize(s);
    cuMemsetD8Async(p, 0, 1, s);
}

/* A mapping unmapped while a stream's memset writes it: on a GPU a fault at the next synchronization,
 * never the death of the process (the fuzzer's server died of it once, before VMM address space was the
 * device's). Several rounds, so that some unmaps land during the writes. */
static void unmap_under_work(void)
{
    const size_t size = 16u << 20;
    CUstream s;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemAccessDesc acc = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS || cuMemCreate(&h, size, &prop, 0) != CUDA_SUCCESS)
        return;
    int faults = 0, rounds = 0;
    for (; rounds < 40; rounds++) {
        if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cuMemMap(va, size, 0, h, 0) != CUDA_SUCCESS ||
            cuMemSetAccess(va, size, &acc, 1) != CUDA_SUCCESS || cuMemsetD8Async(va, 1, size, s) != CUDA_SUCCESS)
            return;
        usleep((useconds_t)(rounds % 8) * 100);
        if (cuMemUnmap(va, size) != CUDA_SUCCESS)
            return;
        CUresult r = cuStreamSynchronize(s);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_ILLEGAL_ADDRESS)
            return;
        faults += r != CUDA_SUCCESS;
        cuStreamDestroy(s);
    }
    fprintf(stderr, "unmap-under-work: %d rounds, %d faulted\n", rounds, faults);
}

static void expect_oracle(void (*fn)(void), const char *what, const char *call)
{
    char err[4096];
    int sig = in_child(fn, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "FAKECUDA ORACLE: %s: access [0x", call);
    CHECK(sig == SIGABRT && strstr(err, want) && strstr(err, "outside any allocation"),
          "%s: expected an abort with the oracle's line for %s, got signal %d and: %s", what, call, sig, err);
}

static long stat_of(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char k[64];
    long v, found = -1;
    while (f && fscanf(f, "%63s %ld", k, &v) == 2)
        if (!strcmp(k, key))
            found = v;
    if (f)
        fclose(f);
    return found;
}

int main(void)
{
    char stats[] = "/tmp/fakecuda-stats-XXXXXX";
    int fd = mkstemp(stats);
    if (fd < 0)
        return 2;
    close(fd);
    setenv("CUMUX_FAKE_STATS", stats, 1);
    setenv("CUMUX_FAKE_MEMORY_MB", "64", 1);
    CK(cuInit(0));
    size_t fr0, total;
    CK(cuMemGetInfo(&fr0, &total));
    CHECK(total == 64u << 20 && fr0 == total, "memory %zu of %zu", fr0, total);
    char name[64];
    CK(cuDeviceGetName(name, sizeof name, 0));
    CHECK(!strcmp(name, "cumux fake GPU"), "name %s", name);

    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, 0));
    CK(cuMemAllocFromPoolAsync(&buf, 4096, pool, stream));
    size_t fr1;
    CK(cuMemGetInfo(&fr1, &total));
    CHECK(fr1 == fr0 - 4096, "free %zu after 4096 bytes, was %zu", fr1, fr0);
    CUdeviceptr big;
    CHECK(cuMemAllocFromPoolAsync(&big, 65u << 20, pool, stream) == CUDA_ERROR_OUT_OF_MEMORY, "65 MiB of 64");

    /* In range: fine. */
    CK(cuMemsetD32Async(buf, 0x01020304u, 1024, stream));
    CK(cuMemsetD2D8Async(buf, 64, 7, 64, 64, stream));
    CK(cuStreamSynchronize(stream));
    CHECK(((unsigned char *)(uintptr_t)buf)[4095] == 7, "2-D memset did not reach the last row");

    expect_oracle(past_end, "one byte past an allocation", "cuMemsetD8Async");
    expect_oracle(span_wraps, "a 2-D span that overflows", "cuMemsetD2D32Async");
    expect_oracle(host_unregistered, "unregistered host memory", "cuMemcpyDtoHAsync");
    expect_oracle(after_free, "a freed allocation", "cuMemsetD8Async");
    char err[4096];
    int sig = in_child(guard_page, err, sizeof err);
    /* The fake's handler names the signal and aborts; under AddressSanitizer the fault is its report. */
    CHECK((sig == SIGABRT && strstr(err, "fakecuda: signal 11")) || strstr(err, "SEGV"),
          "the page after an allocation is accessible");

    static char errs[65536]; /* a line per fault */
    sig = in_child(unmap_under_work, errs, sizeof errs);
    CHECK(sig == 0 && strstr(errs, "unmap-under-work: 40 rounds"), "a mapping unmapped under a memset: signal %d, %s",
          sig, errs);

    /* Registered host memory may be copied to. */
    static char host[4096] __attribute__((aligned(4096)));
    CK(cuMemHostRegister(host, sizeof host, 0));
    CHECK(cuMemHostRegister(host + 8, 8, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "overlapping register");
    CK(cuMemcpyDtoHAsync(host, buf, sizeof host, stream));
    CK(cuStreamSynchronize(stream));
    CHECK(host[100] == 7, "copy to registered memory: %d", host[100]);

    /* A kernel named in an image, asynchronous: a 50 ms spin then the flag. */
    static const char image[] = ".version 8.0\n.target sm_90\n.visible .entry spin_flag(\n)\n{\n}\n";
    CUmodule mod;
    CUfunction spin;
    CK(cuModuleLoadData(&mod, image));
    CK(cuModuleGetFunction(&spin, mod, "spin_flag"));
    CUfunction none;
    CHECK(cuModuleGetFunction(&none, mod, "vec_add") == CUDA_ERROR_NOT_FOUND, "vec_add is not in the image");
    size_t off, size;
    CK(cuFuncGetParamInfo(spin, 2, &off, &size));
    CHECK(off == 16 && size == 4, "spin_flag's value at %zu size %zu", off, size);
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    long long cycles = 99000000; /* 50 ms at 1.98 GHz */
    int value = 42;
    void *args[] = {&cycles, &buf, &value};
    CK(cuEventRecord(e0, stream));
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL));
    CK(cuEventRecord(e1, stream));
    CHECK(cuStreamQuery(stream) == CUDA_ERROR_NOT_READY, "stream idle during a 50 ms kernel");
    CHECK(cuEventQuery(e1) == CUDA_ERROR_NOT_READY, "event done during a 50 ms kernel");
    CK(cuEventSynchronize(e1));
    float ms = 0;
    CK(cuEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 45 && ms < 1000, "50 ms kernel took %g ms", (double)ms);
    CHECK(*(int *)(uintptr_t)buf == 42, "flag %d", *(int *)(uintptr_t)buf);

    /* Counts while things are alive, and back to zero after. */
    usleep(300000);
    CHECK(stat_of(stats, "allocations") == 1 && stat_of(stats, "streams") == 1 && stat_of(stats, "events") == 2 &&
              stat_of(stats, "modules") == 1 && stat_of(stats, "host_registered") == 1,
          "live counts wrong (allocations %ld streams %ld events %ld modules %ld host %ld)",
          stat_of(stats, "allocations"), stat_of(stats, "streams"), stat_of(stats, "events"),
          stat_of(stats, "modules"), stat_of(stats, "host_registered"));
    CK(cuMemFreeAsync(buf, stream));
    CHECK(cuMemFreeAsync(buf, stream) == CUDA_ERROR_INVALID_VALUE, "double free accepted");
    CK(cuStreamSynchronize(stream));
    CK(cuMemHostUnregister(host));
    CK(cuModuleUnload(mod));
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy(e1));
    CK(cuStreamDestroy(stream));
    CK(cuMemGetInfo(&fr1, &total));
    CHECK(fr1 == fr0, "free %zu after everything is freed, %zu before", fr1, fr0);
    usleep(300000);
    static const char *const keys[] = {"allocations", "alloc_bytes", "streams", "events", "modules",
                                       "libraries", "graphs", "graph_execs", "host_registered", "pools"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(stat_of(stats, keys[i]) == 0, "%s is %ld after everything is freed", keys[i], stat_of(stats, keys[i]));
    unlink(stats);
    if (failures) {
        printf("FAIL fakecuda: %d checks failed\n", failures);
        return 1;
    }
    printf("PASS fakecuda\n");
    return 0;
}
