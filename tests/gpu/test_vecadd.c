/* vector add of 1M floats; code loaded with cuLibraryLoadData and launched through a CUkernel. */
#include <math.h>
#include <stdlib.h>

#include "gpu_test.h"

#define N (1 << 20)

int main(void)
{
    gt_begin("vecadd");
    gt_require_gpu();
    CUcontext ctx = gt_primary_ctx(0, NULL);
    (void)ctx;

    CUlibrary lib = gt_library_from_file_data(GT_FATBIN);
    CUkernel kern;
    CK(cuLibraryGetKernel(&kern, lib, "vec_add"));
    CUlibrary owner = NULL;
    CK(cuKernelGetLibrary(&owner, kern));
    if (owner != lib)
        gt_fail("cuKernelGetLibrary gave %p, not the library %p", (void *)owner, (void *)lib);

    size_t bytes = (size_t)N * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c)
        gt_fail("out of host memory");
    gt_rng r;
    gt_rng_seed(&r, 12345);
    for (int i = 0; i < N; i++) {
        a[i] = gt_rng_float(&r) * 1000.0f;
        b[i] = gt_rng_float(&r) * 1000.0f;
    }
    for (int i = 0; i < N; i++)
        c[i] = NAN;

    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, bytes));
    CK(cuMemAlloc(&db, bytes));
    CK(cuMemAlloc(&dc, bytes));
    CK(cuMemcpyHtoD(da, a, bytes));
    CK(cuMemcpyHtoD(db, b, bytes));
    CK(cuMemsetD32(dc, 0x7fc00001u, N)); /* poison: a NaN the kernel must overwrite */

    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel((CUfunction)kern, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(c, dc, bytes));

    for (int i = 0; i < N; i++) {
        float want = a[i] + b[i];
        if (c[i] != want)
            gt_fail("c[%d] = %g, expected %g", i, (double)c[i], (double)want);
    }

    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuLibraryUnload(lib));
    free(a);
    free(b);
    free(c);
    gt_pass();
}
