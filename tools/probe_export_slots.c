/* What do the export-table slots cuBLAS needs answer? Calls the real driver's TOOLS_TLS slot 2 the ways
 * cuBLAS was seen calling it (data/traces/cublas-native-export-tables.txt), on buffers filled with a
 * marker, and prints the return value and every byte the driver wrote. Also prints the words of the
 * tables 21318c60... and 1734dc26... that cuFFT and cuBLAS ask for.
 * Run on a GPU: gcc -O2 -I/usr/local/cuda/include tools/probe_export_slots.c -o /tmp/pe -ldl && /tmp/pe */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void uuid_of(const char *hex, CUuuid *id)
{
    for (int k = 0; k < 16; k++)
        sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id->bytes[k]);
}

static void show_writes(const char *what, const uint8_t *buf, size_t n)
{
    int any = 0;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w;
        memcpy(&w, buf + i, 8);
        if (w != 0xababababababababULL) {
            printf("  %s +%zu: %016llx\n", what, i, (unsigned long long)w);
            any = 1;
        }
    }
    if (!any)
        printf("  %s: untouched\n", what);
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*get)(const void **, const CUuuid *) = (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable");
    if (!init || !get || init(0))
        return 1;
    const char *names[] = {"42d85a8123f6cb478298f6e78a3aecdc", "21318c60971432488ca641ff7324c8f2",
                           "1734dc26800d47458726c0f1e7dd8bca"};
    const void **t[3] = {0};
    for (int i = 0; i < 3; i++) {
        CUuuid id;
        uuid_of(names[i], &id);
        CUresult r = get((const void **)&t[i], &id);
        printf("table %s: r=%d", names[i], (int)r);
        for (int k = 0; r == 0 && k < 20; k++) {
            Dl_info di;
            const void *p = t[i][k];
            printf("%s[%d]=%p", k ? " " : " ", k, p);
            if (p && dladdr(p, &di) && di.dli_sname)
                printf("(%s)", di.dli_sname);
            if (!p && k > 0)
                break;
        }
        printf("\n");
    }
    if (!t[0])
        return 1;
    typedef uint64_t (*slot_fn)(void *, void *, void *, void *, void *, void *);
    slot_fn s2 = (slot_fn)(uintptr_t)t[0][2];
    static uint8_t a[4096], b[4096];
    /* The three shapes seen: (stack, stack, driver address), (stack, 0x37, stack), (stack, 0x37, 1). */
    for (int shape = 0; shape < 3; shape++) {
        memset(a, 0xab, sizeof a);
        memset(b, 0xab, sizeof b);
        uint64_t r;
        if (shape == 0)
            r = s2(a, b, (void *)&t[0][0], 0, 0, 0);
        else if (shape == 1)
            r = s2(a, (void *)0x37, b, 0, 0, 0);
        else
            r = s2(a, (void *)0x37, (void *)1, 0, 0, 0);
        printf("TOOLS_TLS slot 2, shape %d: returned %llu (0x%llx)\n", shape, (unsigned long long)r, (unsigned long long)r);
        show_writes("arg0", a, 256);
        show_writes("arg1/2", b, 256);
    }
    return 0;
}
