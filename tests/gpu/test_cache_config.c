/* Cache preferences (cuCtxSetCacheConfig, cuFuncSetCacheConfig, cuKernelSetCacheConfig): read back as set,
 * bad values refused, and kernels run right under each. A preference changes how the SMs split L1 and
 * shared memory for the kernel, so a program that sets one (cuDNN's and PyTorch's kernels may) must get
 * it. Under cumux each change in effect reaches the server's copy of the function before its next launch:
 * this sequence makes 4 (tests/test_cache_config.sh counts them in the server's profile). */
#include <stdlib.h>

#include "gpu_test.h"

#define N 4096

static void run_checked(CUfunction f, CUdeviceptr da, CUdeviceptr db, CUdeviceptr dc, const float *a, const float *b,
                        float *c)
{
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuMemsetD32(dc, 0x7fc00001u, N)); /* poison: a NaN the kernel must overwrite */
    CK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
    for (int i = 0; i < N; i++)
        if (c[i] != a[i] + b[i])
            gt_fail("c[%d] = %g, expected %g", i, (double)c[i], (double)(a[i] + b[i]));
}

int main(void)
{
    gt_begin("cache_config");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    CUlibrary lib = gt_library_from_file_data(GT_FATBIN);
    CUkernel kern;
    CK(cuLibraryGetKernel(&kern, lib, "vec_add"));
    CUfunction f;
    CK(cuKernelGetFunction(&f, kern)); /* the context's function of the kernel: one preference for both */

    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *c = malloc(N * sizeof(float));
    if (!a || !b || !c)
        gt_fail("out of host memory");
    gt_rng r;
    gt_rng_seed(&r, 77);
    for (int i = 0; i < N; i++) {
        a[i] = gt_rng_float(&r) * 100.0f;
        b[i] = gt_rng_float(&r) * 100.0f;
    }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, N * sizeof(float)));
    CK(cuMemAlloc(&db, N * sizeof(float)));
    CK(cuMemAlloc(&dc, N * sizeof(float)));
    CK(cuMemcpyHtoD(da, a, N * sizeof(float)));
    CK(cuMemcpyHtoD(db, b, N * sizeof(float)));

    CUfunc_cache got = (CUfunc_cache)-1;
    CK(cuCtxGetCacheConfig(&got));
    if (got != CU_FUNC_CACHE_PREFER_NONE)
        gt_fail("a fresh context's cache preference is %d, not PREFER_NONE", (int)got);
    CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
    CK(cuCtxGetCacheConfig(&got));
    if (got != CU_FUNC_CACHE_PREFER_L1)
        gt_fail("the context's cache preference reads %d after setting PREFER_L1", (int)got);
    run_checked(f, da, db, dc, a, b, c); /* the context's L1: change 1 */
    run_checked(f, da, db, dc, a, b, c); /* no change */
    CK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
    run_checked(f, da, db, dc, a, b, c); /* the function's own: change 2 */
    CK(cuKernelSetCacheConfig(kern, CU_FUNC_CACHE_PREFER_NONE, 0));
    run_checked(f, da, db, dc, a, b, c); /* none of its own: the context's L1 again, change 3 */
    EXPECT_RC(cuFuncSetCacheConfig(f, (CUfunc_cache)99), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuCtxSetCacheConfig((CUfunc_cache)99), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuFuncSetCacheConfig(NULL, CU_FUNC_CACHE_PREFER_L1), CUDA_ERROR_INVALID_HANDLE);
    CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
    run_checked(f, da, db, dc, a, b, c); /* change 4 */

    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuLibraryUnload(lib));
    free(a);
    free(b);
    free(c);
    gt_pass();
}
