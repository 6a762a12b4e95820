/* The export-table slots cuBLAS, cuBLASLt and cuFFT use answer what the public API says, against the real
 * driver and under cumux alike (docs/export-tables.md):
 *   TOOLS_TLS [2]       the calling thread's current context (NULL with none);
 *   TOOLS_CONTEXT [4]   a context's id = cuCtxGetId (0 for NULL); [51] then [39] a stream's id =
 *                       cuStreamGetId, for the NULL, legacy, per-thread and created streams;
 *   TOOLS_MODULE [7]    calls back once for each function of a module and returns how many
 *                       (cuModuleGetFunctionCount);
 *   ARCH_DATA [4]/[13]  two fresh buffers with the same contents each time; freed by [13]. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

typedef uint64_t (*slot_fn)(void *, void *, void *, void *, void *, void *);

static const void **table(const char *hex)
{
    CUuuid id;
    for (int k = 0; k < 16; k++)
        sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&id.bytes[k]);
    const void **t = NULL;
    CK(cuGetExportTable((const void **)&t, &id));
    if (!t)
        gt_fail("table %s is NULL", hex);
    return t;
}

#define SLOT(t, i) ((slot_fn)(uintptr_t)(t)[i])

static CUfunction seen_fns[64];
static unsigned seen_n;

static void on_function(void *arg, CUfunction f, uint64_t unused)
{
    (void)unused;
    if (arg != (void *)&seen_n)
        gt_fail("TOOLS_MODULE [7] passed %p to the callback, not its argument", arg);
    if (seen_n < 64)
        seen_fns[seen_n] = f;
    seen_n++;
}

int main(void)
{
    gt_begin("export_tables");
    gt_require_gpu();
    CUdevice dev;
    CUcontext primary = gt_primary_ctx(0, &dev);
    const void **tls = table("42d85a8123f6cb478298f6e78a3aecdc");
    const void **tctx = table("21318c60971432488ca641ff7324c8f2");
    const void **tmod = table("6e163fbeb958444d835ce182aff1991e");
    const void **arch = table("1734dc26800d47458726c0f1e7dd8bca");

    /* TOOLS_TLS [2] */
    void *cur = (void *)1;
    if (SLOT(tls, 2)(&cur, 0, 0, 0, 0, 0) != 0 || cur != (void *)primary)
        gt_fail("TOOLS_TLS [2]: %p, the current context is %p", cur, (void *)primary);
    CK(cuCtxSetCurrent(NULL));
    cur = (void *)1;
    if (SLOT(tls, 2)(&cur, 0, 0, 0, 0, 0) != 0 || cur != NULL)
        gt_fail("TOOLS_TLS [2] with no current context: %p", cur);
    CK(cuCtxSetCurrent(primary));

    /* TOOLS_CONTEXT [4] */
    unsigned long long want = 0, got = 99;
    CK(cuCtxGetId(primary, &want));
    if (SLOT(tctx, 4)(primary, &got, 0, 0, 0, 0) != 0 || got != want)
        gt_fail("TOOLS_CONTEXT [4] of the primary context: %llu, cuCtxGetId %llu", got, want);
    got = 99;
    if (SLOT(tctx, 4)(NULL, &got, 0, 0, 0, 0) != 0 || got != 0)
        gt_fail("TOOLS_CONTEXT [4] of NULL: %llu", got);
    CUcontext created;
    CUctxCreateParams params;
    memset(&params, 0, sizeof params);
    CK(cuCtxCreate(&created, &params, 0, dev));
    unsigned long long created_id = 0;
    CK(cuCtxGetId(created, &created_id));
    got = 99;
    if (SLOT(tctx, 4)(created, &got, 0, 0, 0, 0) != 0 || got != created_id || got == want)
        gt_fail("TOOLS_CONTEXT [4] of a created context: %llu, cuCtxGetId %llu (primary %llu)", got, created_id,
                want);
    CK(cuCtxDestroy(created));
    CK(cuCtxSetCurrent(primary));

    /* TOOLS_CONTEXT [51] and [39] */
    CUstream s[5] = {NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, NULL, NULL};
    CK(cuStreamCreate(&s[3], CU_STREAM_DEFAULT));
    CK(cuStreamCreate(&s[4], CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 5; i++) {
        void *obj = NULL;
        unsigned long long sid = 0, id = 99;
        CK(cuStreamGetId(s[i], &sid));
        if (SLOT(tctx, 51)(primary, s[i], &obj, 0, 0, 0) != 0 || !obj)
            gt_fail("TOOLS_CONTEXT [51] of stream %d gave no object", i);
        if (SLOT(tctx, 39)(primary, obj, &id, 0, 0, 0) != 0 || id != sid)
            gt_fail("TOOLS_CONTEXT [39] of stream %d: %llu, cuStreamGetId %llu", i, id, sid);
    }
    CK(cuStreamDestroy(s[3]));
    CK(cuStreamDestroy(s[4]));

    /* TOOLS_MODULE [7] */
    CUmodule mod;
    CK(cuModuleLoad(&mod, GT_FATBIN));
    unsigned count = 0;
    CK(cuModuleGetFunctionCount(&count, mod));
    uint64_t ret = SLOT(tmod, 7)(primary, mod, (void *)(uintptr_t)on_function, &seen_n, 0, 0);
    if (ret != count || seen_n != count)
        gt_fail("TOOLS_MODULE [7]: returned %llu after %u callbacks; the module has %u functions",
                (unsigned long long)ret, seen_n, count);
    for (unsigned i = 0; i < seen_n && i < 64; i++) {
        const char *name = NULL;
        CK(cuFuncGetName(&name, seen_fns[i]));
        for (unsigned j = 0; j < i; j++)
            if (seen_fns[j] == seen_fns[i])
                gt_fail("TOOLS_MODULE [7] gave %s twice", name);
    }
    CK(cuModuleUnload(mod));

    /* ARCH_DATA [4] and [13] */
    void *a1 = NULL, *b1 = NULL, *a2 = NULL, *b2 = NULL;
    if (SLOT(arch, 4)(&a1, &b1, 0, 0, 0, 0) != 0 || SLOT(arch, 4)(&a2, &b2, 0, 0, 0, 0) != 0)
        gt_fail("ARCH_DATA [4] failed");
    if (!a1 || !b1 || a1 == b1 || a1 == a2 || b1 == b2)
        gt_fail("ARCH_DATA [4]: buffers %p %p, then %p %p", a1, b1, a2, b2);
    if (memcmp(a1, a2, 64) || memcmp(b1, b2, 64))
        gt_fail("ARCH_DATA [4]: the tables differ between two calls");
    uint64_t sum = 0;
    for (int i = 0; i < 64; i++)
        sum = sum * 131 + ((unsigned char *)a1)[i] * 7 + ((unsigned char *)b1)[i];
    printf("info arch_data first 64 bytes checksum %016llx\n", (unsigned long long)sum);
    if (SLOT(arch, 13)(a1, b1, 0, 0, 0, 0) != 0 || SLOT(arch, 13)(a2, b2, 0, 0, 0, 0) != 0)
        gt_fail("ARCH_DATA [13] failed");
    gt_pass();
}
