/* The tracing libcuda.so.1 against a stand-in driver (trace_fake_driver.c): export-table slots called
 * through the trampolines get every argument (six integers and a double, stack arguments, nine doubles,
 * varargs, a struct returned in memory) and return the right results, also from several threads at
 * once; tables keep their address; data slots, size words and INTEGRITY_CHECK slot 1 stay as they were;
 * cuGetProcAddress hands out the wrapper for an exported entry point and the pointer itself for another;
 * an entry point the traced library lacks fails with CUDA_ERROR_NOT_SUPPORTED. Then the trace file:
 * one line per slot call with its registers, and the summary's counts.
 * usage: test_trace_tables TRACE_LIB FAKE_DRIVER */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "test_util.h"

#define THREADS 4
#define PER_THREAD 500

struct big {
    uint64_t v[4];
};
typedef uint64_t (*f6d_t)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, double);
typedef uint64_t (*f8_t)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
typedef double (*f9d_t)(double, double, double, double, double, double, double, double, double);
typedef double (*fvar_t)(int, ...);
typedef struct big (*fbig_t)(uint64_t);

/* The stand-in's functions, computed here independently. */
static uint64_t mix(uint64_t h, uint64_t x)
{
    return (h ^ x) * 0x100000001b3ull;
}

static uint64_t want_f6d(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f, double x)
{
    return mix(mix(mix(mix(mix(mix(mix(1, a), b), c), d), e), f), (uint64_t)(x * 1024.0));
}

static const void **table_a;

static void *hammer(void *arg)
{
    uint64_t base = ((uint64_t)(uintptr_t)arg + 1) * 1000, bad = 0;
    for (uint64_t k = 0; k < PER_THREAD; k++) {
        uint64_t a = base + k;
        if (((f6d_t)(uintptr_t)table_a[1])(a, a + 1, a + 2, a + 3, a + 4, a + 5, 0.25) !=
            want_f6d(a, a + 1, a + 2, a + 3, a + 4, a + 5, 0.25))
            bad++;
    }
    return (void *)(uintptr_t)bad;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    REQUIRE(p != NULL, "dlsym %s: %s", name, dlerror());
    return p;
}

/* Everything that calls through the tracing library; runs in a child so that its exit writes the summary. */
static int traced(const char *trace_lib, const char *fake_lib)
{
    void *tr = dlopen(trace_lib, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(tr != NULL, "dlopen %s: %s", trace_lib, dlerror());
    void *fake = dlopen(fake_lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    REQUIRE(fake != NULL, "the tracing library did not load %s", fake_lib);
    const void *(*info)(int) = (const void *(*)(int))(uintptr_t)sym(fake, "trace_fake_info");
    CUresult (*get_table)(const void **, const CUuuid *) =
        (CUresult(*)(const void **, const CUuuid *))(uintptr_t)sym(tr, "cuGetExportTable");

    CUuuid ua, ub, ui, unknown;
    memset(ua.bytes, 0x11, 16);
    memset(ub.bytes, 0x22, 16);
    memset(unknown.bytes, 0x33, 16);
    static const unsigned char integrity[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                                0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
    memcpy(ui.bytes, integrity, 16);

    /* Table A: size word, five functions, a data slot; read-only memory. */
    const void *t = NULL;
    REQUIRE(get_table(&t, &ua) == CUDA_SUCCESS, "cuGetExportTable A");
    REQUIRE(t == info(0), "table A handed out at %p, the driver's is at %p", t, info(0));
    table_a = (const void **)t;
    CHECK((uintptr_t)table_a[0] == 7 * sizeof(void *), "size word changed: %#lx", (unsigned long)(uintptr_t)table_a[0]);
    CHECK(table_a[6] == info(3), "data slot changed");
    for (int s = 1; s <= 5; s++)
        CHECK(table_a[s] != info(5 + s), "slot %d not redirected", s);
    CHECK(((f6d_t)(uintptr_t)table_a[1])(1, 2, 3, 4, 5, 6, 0.5) == want_f6d(1, 2, 3, 4, 5, 6, 0.5), "slot 1");
    CHECK(((f8_t)(uintptr_t)table_a[2])(11, 12, 13, 14, 15, 16, 17, 18) ==
              mix(mix(want_f6d(11, 12, 13, 14, 15, 16, 0), 17), 18),
          "slot 2 (stack arguments)");
    double d = ((f9d_t)(uintptr_t)table_a[3])(1, 2, 3, 4, 5, 6, 7, 8, 9);
    CHECK(d == 1 + 4 + 12 + 32 + 80 + 192 + 448 + 1024 + 2304, "slot 3 (doubles): %g", d);
    d = ((fvar_t)(uintptr_t)table_a[4])(3, 1.5, 2.5, 3.5);
    CHECK(d == 1.5 + 5 + 10.5, "slot 4 (varargs): %g", d);
    struct big b = ((fbig_t)(uintptr_t)table_a[5])(7);
    CHECK(b.v[0] == 7 && b.v[1] == 14 && b.v[2] == 21 && b.v[3] == 28, "slot 5 (struct in memory)");

    /* Asked again: the same table, its slots not wrapped twice. */
    const void *slot1 = table_a[1];
    REQUIRE(get_table(&t, &ua) == CUDA_SUCCESS && t == info(0), "cuGetExportTable A again");
    CHECK(table_a[1] == slot1, "slot 1 wrapped again");

    /* From several threads at once. */
    pthread_t th[THREADS];
    for (uintptr_t k = 0; k < THREADS; k++)
        REQUIRE(pthread_create(&th[k], NULL, hammer, (void *)k) == 0, "pthread_create");
    for (int k = 0; k < THREADS; k++) {
        void *bad;
        REQUIRE(pthread_join(th[k], &bad) == 0, "pthread_join");
        CHECK(bad == NULL, "thread %d: %lu wrong results", k, (unsigned long)(uintptr_t)bad);
    }

    /* Table B: writable, NULL-terminated, a function first. */
    REQUIRE(get_table(&t, &ub) == CUDA_SUCCESS && t == info(1), "cuGetExportTable B");
    const void **tb = (const void **)t;
    CHECK(tb[3] == NULL, "end of table B changed");
    /* One buffer, the two pointers far apart: the tracer looks at 64 bytes behind each, and two variables
     * side by side on the stack would show one's writes behind the other's pointer too. */
    uint64_t mem[32] = {0}; /* 256 bytes: 128 between the two */
    uint64_t *wbuf = mem, *w2 = &mem[16];
    *w2 = 5;
    static const char kname[] = "my_kernel_name";
    CHECK(((uint64_t(*)(uint64_t *, uint64_t *, uint64_t, const char *))(uintptr_t)tb[2])(wbuf, w2, 0x77, kname) == 0x2a &&
              wbuf[1] == 0x77 && wbuf[3] == 0x78 && *w2 == 0,
          "B slot 2 (writes through its pointers)");
    CHECK(((f6d_t)(uintptr_t)tb[0])(6, 5, 4, 3, 2, 1, 2.0) == (want_f6d(6, 5, 4, 3, 2, 1, 2.0) ^ 0xb), "B slot 0");

    /* The integrity table: slot 1 untouched, slot 2 traced. */
    REQUIRE(get_table(&t, &ui) == CUDA_SUCCESS && t == info(2), "cuGetExportTable INTEGRITY_CHECK");
    const void **ti = (const void **)t;
    CHECK(ti[1] == info(5), "INTEGRITY_CHECK slot 1 was redirected");
    CHECK(ti[2] != info(6), "INTEGRITY_CHECK slot 2 not redirected");
    CHECK(((f6d_t)(uintptr_t)ti[2])(9, 9, 9, 9, 9, 9, 9) == want_f6d(9, 9, 9, 9, 9, 9, 9), "INTEGRITY_CHECK slot 2");

    CHECK(get_table(&t, &unknown) == CUDA_ERROR_NOT_FOUND, "unknown table");

    /* cuGetProcAddress: the wrapper for an entry point, the pointer itself for anything else. */
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))(uintptr_t)sym(
            tr, "cuGetProcAddress_v2");
    void *pfn = NULL;
    REQUIRE(gpa("cuDriverGetVersion", &pfn, 12000, 0, NULL) == CUDA_SUCCESS, "cuGetProcAddress_v2");
    CHECK(pfn == sym(tr, "cuDriverGetVersion"), "cuDriverGetVersion not handed out as the wrapper");
    int v = 0;
    CHECK(pfn && ((CUresult(*)(int *))(uintptr_t)pfn)(&v) == CUDA_SUCCESS && v == 12345, "through the pointer: %d", v);
    REQUIRE(gpa("cuFakeHidden", &pfn, 12000, 0, NULL) == CUDA_SUCCESS, "cuGetProcAddress_v2 hidden");
    CHECK(pfn == info(4), "a non-exported function was changed");

    /* An entry point the stand-in lacks. */
    CUresult (*sync)(void) = (CUresult(*)(void))(uintptr_t)sym(tr, "cuCtxSynchronize");
    CHECK(sync() == CUDA_ERROR_NOT_SUPPORTED, "missing entry point");
    return test_failures ? 1 : 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL, "open %s", path);
    static char text[1 << 22];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return text;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The calls column of the summary row of function `row`. */
static long long summary_count(const char *text, const char *row)
{
    const char *s = strstr(text, "cumux trace: summary");
    if (!s)
        return -1;
    char key[128];
    snprintf(key, sizeof key, "\n  %s ", row);
    const char *p = strstr(s, key);
    if (!p)
        return -1;
    return strtoll(p + strlen(key), NULL, 10);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TRACE_LIB FAKE_DRIVER\n", argv[0]);
        return 2;
    }
    char path[] = "/tmp/cumux-trace-test.XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    setenv("CUMUX_TRACE_TARGET", argv[2], 1);
    setenv("CUMUX_TRACE_FILE", path, 1);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        exit(traced(argv[1], argv[2]));
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the traced part failed (status %#x)", st);

    const char *text = slurp(path);
    const char *A = "11111111111111111111111111111111", *B = "22222222222222222222222222222222";
    char needle[256];
    snprintf(needle, sizeof needle, "export table %s slot 1 (0x1, 0x2, 0x3, 0x4, 0x5, 0x6)\n", A);
    CHECK(count(text, needle) == 1, "no line with slot 1's arguments");
    snprintf(needle, sizeof needle, "export table %s slot 2 (0xb, 0xc, 0xd, 0xe, 0xf, 0x10)\n", A);
    CHECK(count(text, needle) == 1, "no line with slot 2's arguments");
    snprintf(needle, sizeof needle, "export table %s slot 1 (", A);
    CHECK(count(text, needle) == 1 + THREADS * PER_THREAD, "slot 1 lines: %d", count(text, needle));
    for (int s = 3; s <= 5; s++) {
        snprintf(needle, sizeof needle, "export table %s slot %d (", A, s);
        CHECK(count(text, needle) == 1, "slot %d lines: %d", s, count(text, needle));
    }
    snprintf(needle, sizeof needle, "export table %s slot 6 (", A);
    CHECK(count(text, needle) == 0, "the data slot was logged");
    snprintf(needle, sizeof needle, "export table %s slot 0 (0x6, 0x5, 0x4, 0x3, 0x2, 0x1)\n", B);
    CHECK(count(text, needle) == 1, "table B slot 0");
    CHECK(count(text, "export table INTEGRITY_CHECK slot 2 (0x9, ") == 1, "INTEGRITY_CHECK slot 2");
    CHECK(count(text, "export table INTEGRITY_CHECK slot 1 ") == 0, "INTEGRITY_CHECK slot 1 logged");
    snprintf(needle, sizeof needle, "[%s: 5 of 7 words traced through trampolines]", A);
    CHECK(count(text, needle) == 1, "table A's note");
    snprintf(needle, sizeof needle, "[%s: slots traced since an earlier call]", A);
    CHECK(count(text, needle) == 1, "table A asked again");
    snprintf(needle, sizeof needle, "export table %s slot 2 returned 0x2a (", B);
    CHECK(count(text, needle) == 1, "table B slot 2's result");
    CHECK(count(text, " us) wrote arg0+8=0x77, arg0+24=0x78, arg1+0=0\n") == 1, "table B slot 2's writes");
    CHECK(count(text, ") arg3=\"my_kernel_name\"\n") == 1, "table B slot 2's text argument");
    snprintf(needle, sizeof needle, "export table %s slot 0 returned ", B);
    CHECK(count(text, needle) == 1, "table B slot 0's result");
    snprintf(needle, sizeof needle, "[%s: 3 of 3 words traced through trampolines]", B);
    CHECK(count(text, needle) == 1, "table B's note");
    CHECK(count(text, "[INTEGRITY_CHECK: 1 of 3 words traced through trampolines; slot 1 left alone]") == 1,
          "integrity note");
    CHECK(count(text, "{33333333333333333333333333333333}) = 500 CUDA_ERROR_NOT_FOUND (") == 1, "unknown table");
    CHECK(count(text, "cuGetProcAddress_v2(symbol=\"cuDriverGetVersion\", ") == 1, "cuGetProcAddress_v2 line");
    CHECK(count(text, "[pfn: cuDriverGetVersion, traced]") == 1, "cuGetProcAddress_v2 note");
    CHECK(count(text, "[pfn: hidden, not traced: not an exported entry point]") +
              count(text, "[pfn: an unnamed function, not traced: not an exported entry point]") == 1,
          "hidden pointer note");
    CHECK(count(text, "cuDriverGetVersion(driverVersion=0x") == 1 && count(text, "->12345) = 0 CUDA_SUCCESS (") == 1,
          "the call through the pointer");
    CHECK(count(text, "cuCtxSynchronize() = 801 CUDA_ERROR_NOT_SUPPORTED (") == 1 &&
              count(text, "[not in the traced library]") == 1,
          "missing entry point");

    CHECK(summary_count(text, "cuGetExportTable") == 5, "cuGetExportTable calls: %lld",
          summary_count(text, "cuGetExportTable"));
    CHECK(summary_count(text, "cuGetProcAddress_v2") == 2, "cuGetProcAddress_v2 calls");
    CHECK(summary_count(text, "cuCtxSynchronize") == 1, "cuCtxSynchronize calls");
    snprintf(needle, sizeof needle, "\n  %-36s slot %2u %10d\n", A, 1, 1 + THREADS * PER_THREAD);
    CHECK(count(text, needle) == 1, "summary row of table A slot 1");
    snprintf(needle, sizeof needle, "\n  %-36s slot %2u %10d\n", "INTEGRITY_CHECK", 2, 1);
    CHECK(count(text, needle) == 1, "summary row of INTEGRITY_CHECK slot 2");
    if (test_failures) {
        fprintf(stderr, "---- trace (%s) ----\n", path);
        fwrite(text, 1, strlen(text) < 6000 ? strlen(text) : 6000, stderr);
    }
    unlink(path);
    printf("%s: %lu checks, %lu failed\n", argv[0], test_checks, test_failures);
    return test_failures ? 1 : 0;
}
