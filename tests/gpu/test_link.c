/* JIT linking as numba does it: the test kernels as PTX text go through cuLinkCreate (with log buffers
 * and an optimization level), cuLinkAddData and cuLinkComplete; the image that comes out is loaded and
 * its vec_add computes a sum checked against the CPU. The same from a file with cuLinkAddFile, and the
 * PTX loaded by cuModuleLoadDataEx with JIT options. Input that is not PTX is refused and the error log
 * says something. */
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

enum { N = 1 << 16 };

static void run_vec_add(CUmodule mod)
{
    CUfunction f = gt_function(mod, "vec_add");
    CUdeviceptr a, b, c;
    CK(cuMemAlloc(&a, N * sizeof(float)));
    CK(cuMemAlloc(&b, N * sizeof(float)));
    CK(cuMemAlloc(&c, N * sizeof(float)));
    float *ha = malloc(N * sizeof(float)), *hb = malloc(N * sizeof(float)), *hc = malloc(N * sizeof(float));
    if (!ha || !hb || !hc)
        gt_fail("out of host memory");
    for (int i = 0; i < N; i++)
        ha[i] = (float)i, hb[i] = 0.5f * (float)(i % 1000);
    CK(cuMemcpyHtoD(a, ha, N * sizeof(float)));
    CK(cuMemcpyHtoD(b, hb, N * sizeof(float)));
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    CK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(hc, c, N * sizeof(float)));
    for (int i = 0; i < N; i++)
        if (hc[i] != ha[i] + hb[i])
            gt_fail("linked vec_add: element %d is %g, expected %g", i, (double)hc[i], (double)(ha[i] + hb[i]));
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    free(ha);
    free(hb);
    free(hc);
}

/* The option arrays outlive the state: the driver writes the log sizes it filled back into them. */
static CUjit_option link_opt[6];
static void *link_val[6];

static CUlinkState new_link(char *info, char *error, size_t cap)
{
    CUjit_option opt[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                          CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_LOG_VERBOSE};
    void *val[] = {info, (void *)(uintptr_t)cap, error, (void *)(uintptr_t)cap, (void *)(uintptr_t)3,
                   (void *)(uintptr_t)1};
    memcpy(link_opt, opt, sizeof opt);
    memcpy(link_val, val, sizeof val);
    CUlinkState s;
    CK(cuLinkCreate(6, link_opt, link_val, &s));
    return s;
}

/* The size the driver reported for the error log: within the buffer, and not zero when it holds text. */
static void check_error_size(const char *error, size_t cap)
{
    size_t used = (size_t)(uintptr_t)link_val[3];
    if (used > cap || (error[0] && used == 0))
        gt_fail("the error log holds %zu bytes of text but its size option reports %zu", strlen(error), used);
}

int main(void)
{
    gt_begin("link");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    size_t ptx_len;
    char *ptx = gt_read_file(GT_PTX, &ptx_len);
    static char info[4096], error[4096];

    /* PTX from memory. */
    CUlinkState s = new_link(info, error, sizeof info);
    CK(cuLinkAddData(s, CU_JIT_INPUT_PTX, ptx, ptx_len + 1, "kernels.ptx", 0, NULL, NULL)); /* with its NUL */
    void *image = NULL;
    size_t size = 0;
    CK(cuLinkComplete(s, &image, &size));
    if (!image || size < 16)
        gt_fail("cuLinkComplete gave %zu bytes at %p", size, image);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, image));
    run_vec_add(mod);
    CK(cuModuleUnload(mod));
    CK(cuLinkDestroy(s));

    /* PTX from a file. */
    s = new_link(info, error, sizeof info);
    CK(cuLinkAddFile(s, CU_JIT_INPUT_PTX, GT_PTX, 0, NULL, NULL));
    CK(cuLinkComplete(s, &image, &size));
    CK(cuModuleLoadData(&mod, image));
    run_vec_add(mod);
    CK(cuModuleUnload(mod));
    CK(cuLinkDestroy(s));

    /* The PTX loaded directly with JIT options (a register limit, a log buffer), as numba loads it. */
    CUjit_option jo[] = {CU_JIT_MAX_REGISTERS, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *jv[] = {(void *)(uintptr_t)32, info, (void *)(uintptr_t)sizeof info};
    CK(cuModuleLoadDataEx(&mod, ptx, 3, jo, jv));
    run_vec_add(mod);
    CK(cuModuleUnload(mod));

    /* Not PTX: refused, with a word in the error log. */
    memset(error, 0, sizeof error);
    s = new_link(info, error, sizeof info);
    static const char junk[] = "this is not PTX at all";
    CUresult r = cuLinkAddData(s, CU_JIT_INPUT_PTX, (void *)junk, sizeof junk, "junk.ptx", 0, NULL, NULL);
    if (r == CUDA_SUCCESS)
        r = cuLinkComplete(s, &image, &size);
    if (r == CUDA_SUCCESS)
        gt_fail("text that is not PTX linked");
    if (!error[0])
        gt_fail("a failed link left the error log empty (%s)", gt_err_name(r));
    check_error_size(error, sizeof error);
    CK(cuLinkDestroy(s));
    free(ptx);
    gt_pass();
}
