/* What does the real driver answer for export tables cumux does not know (issue 9: every PyTorch program
 * under cumux logs "unknown table 69a28e9f24498b47b030c5da330ea4e9", and its profiler 2c8e0ad80710ab4e90dd54719fe5f74b)?
 * For each UUID on the command line (default: those two): cuGetExportTable's result and, for a table, its
 * first word (a size, for most tables) and how many slots that size holds, each slot's address and the
 * shared object it lies in (dladdr), to tell functions from data.
 * Run on a GPU: gcc -O2 -I/usr/local/cuda/include tools/probe_export_unknown.c -o /tmp/pu -ldl && /tmp/pu [UUID...] */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int uuid_of(const char *hex, CUuuid *id)
{
    if (strlen(hex) != 32)
        return -1;
    for (int k = 0; k < 16; k++)
        if (sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id->bytes[k]) != 1)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *defaults[] = {"69a28e9f24498b47b030c5da330ea4e9", "2c8e0ad80710ab4e90dd54719fe5f74b"};
    const char **uuids = argc > 1 ? (const char **)argv + 1 : defaults;
    int n = argc > 1 ? argc - 1 : 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("SKIP probe_export_unknown: no libcuda.so.1\n");
        return 77;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*get)(const void **, const CUuuid *) =
        (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable");
    if (!init || !get || init(0) != CUDA_SUCCESS) {
        printf("SKIP probe_export_unknown: cuInit failed\n");
        return 77;
    }
    for (int i = 0; i < n; i++) {
        CUuuid id;
        if (uuid_of(uuids[i], &id) < 0) {
            printf("table %s: not a UUID of 32 hex digits\n", uuids[i]);
            continue;
        }
        const uintptr_t *t = NULL;
        CUresult r = get((const void **)&t, &id);
        printf("table %s: result %d, table %p\n", uuids[i], (int)r, (const void *)t);
        if (r != CUDA_SUCCESS || !t)
            continue;
        uintptr_t size = t[0];
        size_t slots = size >= 8 && size < 4096 && size % 8 == 0 ? size / 8 : 16;
        printf("  word 0: %#lx (%s)\n", (unsigned long)size, slots == size / 8 ? "a size" : "not a size: 16 words shown");
        for (size_t s = 1; s < slots; s++) {
            Dl_info info;
            const char *where = dladdr((const void *)t[s], &info) && info.dli_fname ? info.dli_fname : "-";
            printf("  [%zu] %#lx %s\n", s, (unsigned long)t[s], where);
        }
    }
    return 0;
}
