/* __device__ globals: cuModuleGetGlobal size and address, written by HtoD, modified by a kernel, read back.
 * Also the module's list of functions (cuModuleGetFunctionCount / EnumerateFunctions, and the library
 * forms), which cuFFT relies on through an export table: exactly kernels.cu's kernels, by name. */
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

/* The kernel and the global of 2.4 KiB names (gpu_shared.h), in mod or else in lib: found, named back in
 * full, and the kernel adds to the global's words. */
static void long_names(CUmodule mod, CUlibrary lib)
{
    const char *kname = GT_STR(GT_LONG_KERNEL), *gname = GT_STR(GT_LONG_GLOBAL);
    CUfunction fn;
    CUdeviceptr words;
    size_t size = 0;
    const char *back = NULL;
    if (mod) {
        CK(cuModuleGetFunction(&fn, mod, kname));
        CK(cuModuleGetGlobal(&words, &size, mod, gname));
        CK(cuFuncGetName(&back, fn));
    } else {
        CUkernel k;
        CK(cuLibraryGetKernel(&k, lib, kname));
        CK(cuLibraryGetGlobal(&words, &size, lib, gname));
        CK(cuKernelGetName(&back, k));
        CK(cuKernelGetFunction(&fn, k));
    }
    if (!back || strcmp(back, kname))
        gt_fail("the %zu-character kernel's name reads back as %.40s... (%zu characters)", strlen(kname),
                back ? back : "(null)", back ? strlen(back) : 0);
    if (size != GT_LONG_GLOBAL_WORDS * sizeof(unsigned))
        gt_fail("the %zu-character global's size is %zu, expected %zu", strlen(gname), size,
                GT_LONG_GLOBAL_WORDS * sizeof(unsigned));
    unsigned host[GT_LONG_GLOBAL_WORDS], got[GT_LONG_GLOBAL_WORDS];
    gt_fill_random(host, sizeof host, mod ? 7 : 8);
    CK(cuMemcpyHtoD(words, host, sizeof host));
    unsigned long long n = GT_LONG_GLOBAL_WORDS;
    unsigned add = 0x10001u;
    void *args[] = {&words, &n, &add};
    CK(cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(got, words, sizeof got));
    for (int i = 0; i < GT_LONG_GLOBAL_WORDS; i++)
        if (got[i] != host[i] + add)
            gt_fail("%s: word %d of the long-named global is 0x%08x after the long-named kernel, expected 0x%08x",
                    mod ? "module" : "library", i, got[i], host[i] + add);
}

int main(void)
{
    gt_begin("module_globals");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);

    CUmodule mod;
    CK(cuModuleLoad(&mod, GT_FATBIN));
    CUfunction fn = gt_function(mod, "table_modify");

    CUdeviceptr table, bias;
    size_t table_size = 0, bias_size = 0;
    CK(cuModuleGetGlobal(&table, &table_size, mod, "g_table"));
    CK(cuModuleGetGlobal(&bias, &bias_size, mod, "g_bias"));
    if (table_size != GT_TABLE_LEN * sizeof(unsigned))
        gt_fail("g_table size %zu, expected %zu", table_size, GT_TABLE_LEN * sizeof(unsigned));
    if (bias_size != sizeof(unsigned))
        gt_fail("g_bias size %zu, expected %zu", bias_size, sizeof(unsigned));
    if (table == 0 || bias == 0 || table == bias)
        gt_fail("bad global addresses 0x%llx 0x%llx", (unsigned long long)table, (unsigned long long)bias);
    /* Either out-parameter may be NULL. */
    CUdeviceptr again = 0;
    CK(cuModuleGetGlobal(&again, NULL, mod, "g_table"));
    if (again != table)
        gt_fail("second lookup of g_table gave another address");
    size_t only_size = 0;
    CK(cuModuleGetGlobal(NULL, &only_size, mod, "g_bias"));
    if (only_size != sizeof(unsigned))
        gt_fail("size-only lookup of g_bias gave %zu", only_size);
    CUdeviceptr none;
    size_t none_size;
    EXPECT_RC(cuModuleGetGlobal(&none, &none_size, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);

    unsigned host[GT_TABLE_LEN], back[GT_TABLE_LEN];
    gt_fill_random(host, sizeof host, 31337);
    unsigned b = 0x1234567u;
    CK(cuMemcpyHtoD(table, host, sizeof host));
    CK(cuMemcpyHtoD(bias, &b, sizeof b));

    unsigned add = 17;
    void *args[] = {&add};
    for (int rep = 0; rep < 3; rep++) {
        CK(cuLaunchKernel(fn, GT_TABLE_LEN / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        for (int i = 0; i < GT_TABLE_LEN; i++)
            host[i] = host[i] * 3u + add + b;
    }
    CK(cuCtxSynchronize());
    for (int i = 0; i < GT_TABLE_LEN; i++)
        back[i] = ~host[i];
    CK(cuMemcpyDtoH(back, table, sizeof back));
    for (int i = 0; i < GT_TABLE_LEN; i++)
        if (back[i] != host[i])
            gt_fail("g_table[%d] = 0x%08x, expected 0x%08x", i, back[i], host[i]);

    /* A second module instance has its own copy of the globals. */
    CUmodule mod2 = gt_module_from_file_data(GT_FATBIN);
    CUdeviceptr table2;
    size_t size2;
    CK(cuModuleGetGlobal(&table2, &size2, mod2, "g_table"));
    if (table2 == table || size2 != table_size)
        gt_fail("second module shares g_table (0x%llx) or has size %zu", (unsigned long long)table2, size2);
    CK(cuModuleUnload(mod2));
    long_names(mod, NULL);

    static const char *const kernels[] = {"vec_add",  "matmul_tiled", "spin_flag", "copy_flag",
                                          "write_value", "cond_count", "table_modify", "fill_pattern", "xform",
                                          "scale_add", "add_u32", "bounded256", "empty_kernel",
                                          "tex_fetch_2d", "surf_write_2d", "fault_store", "fault_assert", "fault_trap",
                                          "sm_ids", GT_STR(GT_LONG_KERNEL)};
    const unsigned nk = sizeof kernels / sizeof kernels[0];
    unsigned count = 0;
    CK(cuModuleGetFunctionCount(&count, mod));
    if (count != nk)
        gt_fail("cuModuleGetFunctionCount: %u, kernels.cu has %u", count, nk);
    CUfunction fns[32];
    memset(fns, 0, sizeof fns);
    CK(cuModuleEnumerateFunctions(fns, count < 32 ? count : 32, mod));
    unsigned seen[32] = {0};
    for (unsigned i = 0; i < count && i < 32; i++) {
        const char *name = NULL;
        CK(cuFuncGetName(&name, fns[i]));
        unsigned k = 0;
        while (k < nk && strcmp(name, kernels[k]))
            k++;
        if (k == nk)
            gt_fail("enumerated function %u is %s, not a kernel of kernels.cu", i, name);
        seen[k]++;
    }
    for (unsigned k = 0; k < nk; k++)
        if (seen[k] != 1)
            gt_fail("%s enumerated %u times", kernels[k], seen[k]);
    /* An enumerated function runs: table_modify through its handle from the list. */
    for (unsigned i = 0; i < count && i < 32; i++) {
        const char *name = NULL;
        CK(cuFuncGetName(&name, fns[i]));
        if (!strcmp(name, "table_modify")) {
            CK(cuLaunchKernel(fns[i], GT_TABLE_LEN / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
            for (int j = 0; j < GT_TABLE_LEN; j++)
                host[j] = host[j] * 3u + add + b;
        }
    }
    CK(cuMemcpyDtoH(back, table, sizeof back));
    for (int i = 0; i < GT_TABLE_LEN; i++)
        if (back[i] != host[i])
            gt_fail("after the enumerated launch g_table[%d] = 0x%08x, expected 0x%08x", i, back[i], host[i]);
    CK(cuModuleUnload(mod));

    CUlibrary lib;
    CK(cuLibraryLoadFromFile(&lib, GT_FATBIN, NULL, NULL, 0, NULL, NULL, 0));
    unsigned lcount = 0;
    CK(cuLibraryGetKernelCount(&lcount, lib));
    if (lcount != nk)
        gt_fail("cuLibraryGetKernelCount: %u, kernels.cu has %u", lcount, nk);
    CUkernel ks[32];
    CK(cuLibraryEnumerateKernels(ks, lcount < 32 ? lcount : 32, lib));
    for (unsigned i = 0; i < lcount && i < 32; i++) {
        const char *name = NULL;
        CK(cuKernelGetName(&name, ks[i]));
        unsigned k = 0;
        while (k < nk && strcmp(name, kernels[k]))
            k++;
        if (k == nk)
            gt_fail("enumerated kernel %u is %s", i, name);
    }
    long_names(NULL, lib);
    CK(cuLibraryUnload(lib));
    gt_pass();
}
