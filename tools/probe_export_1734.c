/* What does table 1734dc26800d47458726c0f1e7dd8bca (cuBLASLt asks for it before loading its nvjet
 * kernels, and crashes when it is not found) hand out? Prints its words as offsets in libcuda, calls
 * slot 4 twice and dumps the objects it returns, then slot 13 in a child with the arguments cuBLASLt
 * was seen passing (minus its last structure).
 * Run on a GPU: gcc -O2 -I/usr/local/cuda/include tools/probe_export_1734.c -o /tmp/p1734 -ldl -lcuda */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef uint64_t (*fn)(void *, void *, void *, void *, void *, void *);

static void dump(const char *what, const void *p, size_t n)
{
    printf("  %s %p (usable %zu):", what, p, malloc_usable_size((void *)p));
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w;
        memcpy(&w, (const char *)p + i, 8);
        printf("%s%016llx", i % 64 ? " " : "\n    ", (unsigned long long)w);
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    int init = argc > 1;
    if (init) {
        CUcontext ctx;
        if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx))
            return 1;
    }
    CUuuid id;
    const char *hex = "1734dc26800d47458726c0f1e7dd8bca";
    for (int k = 0; k < 16; k++)
        sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id.bytes[k]);
    const void **t = NULL;
    CUresult r = cuGetExportTable((const void **)&t, &id);
    printf("cuInit %s; table r=%d\n", init ? "done" : "not called", (int)r);
    if (r)
        return 1;
    Dl_info di;
    for (int k = 0; k < 17; k++) {
        if (k && dladdr(t[k], &di))
            printf("  [%d] %s+%#lx\n", k, di.dli_fname, (unsigned long)((const char *)t[k] - (const char *)di.dli_fbase));
        else
            printf("  [%d] %p\n", k, t[k]);
    }
    void *a[4] = {0};
    uint64_t x = ((fn)(uintptr_t)t[4])(&a[0], &a[1], 0, 0, 0, 0);
    printf("slot 4 -> %llu a0=%p a1=%p\n", (unsigned long long)x, a[0], a[1]);
    if (a[0])
        dump("a0", a[0], 256);
    if (a[1])
        dump("a1", a[1], 256);
    void *b[2] = {0};
    x = ((fn)(uintptr_t)t[4])(&b[0], &b[1], 0, 0, 0, 0);
    printf("slot 4 again -> %llu b0=%p b1=%p\n", (unsigned long long)x, b[0], b[1]);
    if (b[0])
        dump("b0", b[0], 256);
    fflush(stdout);
    for (int trial = 0; trial < 2; trial++) {
        pid_t pid = fork();
        if (pid == 0) {
            uint64_t s[16] = {1, 0, 0, 0, 0x403, 0x31, 1, 0};
            x = ((fn)(uintptr_t)t[13])(b[0], b[1], (void *)8, (void *)7, trial ? (void *)s : NULL, 0);
            printf("slot 13 (%s) -> %llu\n", trial ? "struct" : "NULL", (unsigned long long)x);
            dump("b0 after", b[0], 128);
            dump("b1 after", b[1], 128);
            fflush(stdout);
            _exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        printf("child %d status %#x\n", trial, st);
    }
    return 0;
}
