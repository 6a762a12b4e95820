/* vector add of 1M floats; code loaded with cuLibraryLoadData and launched through a CUkernel. */
#include <math.h>
#include <stdio.h>
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

    /* Settings made after the kernel's first launch hold for its next ones: more dynamic shared memory than
     * the default 48 KiB needs the kernel's attribute, set on the kernel for the device and then on its
     * function in the context (cumuxd may launch the kernel through that function, CUMUX_LAUNCH_FUNCTIONS). */
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    int optin = 0;
    CK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    const unsigned big = 64 * 1024;
    if ((unsigned)optin >= big) {
        CUstream s;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUfunction fn;
        CK(cuKernelGetFunction(&fn, kern));
        for (int round = 0; round < 2; round++) {
            CK(cuMemsetD32Async(dc, 0x7fc00001u, N, s));
            if (round == 0) {
                CK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)big, kern, dev));
                CK(cuLaunchKernel((CUfunction)kern, (N + 255) / 256, 1, 1, 256, 1, 1, big, s, args, NULL));
            } else {
                CK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)big));
                CK(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, big, s, args, NULL));
            }
            CK(cuStreamSynchronize(s));
            CK(cuMemcpyDtoH(c, dc, bytes));
            for (int i = 0; i < N; i++)
                if (c[i] != a[i] + b[i])
                    gt_fail("with %u bytes of dynamic shared memory (round %d): c[%d] = %g, expected %g", big, round,
                            i, (double)c[i], (double)(a[i] + b[i]));
        }
        CK(cuStreamDestroy(s));
    } else {
        printf("vecadd: %d bytes of shared memory per block at most: the dynamic shared memory check is skipped\n",
               optin);
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
