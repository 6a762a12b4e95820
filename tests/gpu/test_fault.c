/* A program whose kernel stores where nothing is mapped (or, `gpu_fault assert`, fails a device-side
 * assert; `gpu_fault trap`, traps): its next synchronization must report a fatal error (natively
 * CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ASSERT, or CUDA_ERROR_LAUNCH_FAILED for a trap; under cumux the
 * same, from the worker that held the faulted context), and so must its later calls. Under cumux this is
 * the culprit of tests/test_fault_recover.sh, which checks that the server serves new programs right after.
 * With `library` among its arguments the code is loaded as the CUDA runtime loads it (cuLibraryLoadData,
 * launched through a CUkernel), whose module a GPU coredump names differently from cuModuleLoadData's.
 *   gpu_fault [assert|trap] [library] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_test.h"

static bool has_arg(int argc, char **argv, const char *word)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], word))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    bool assert_kind = has_arg(argc, argv, "assert"), trap_kind = has_arg(argc, argv, "trap");
    bool library = has_arg(argc, argv, "library");
    CUresult want = assert_kind ? CUDA_ERROR_ASSERT : trap_kind ? CUDA_ERROR_LAUNCH_FAILED : CUDA_ERROR_ILLEGAL_ADDRESS;
    const char *want_name = assert_kind ? "CUDA_ERROR_ASSERT"
                            : trap_kind ? "CUDA_ERROR_LAUNCH_FAILED"
                                        : "CUDA_ERROR_ILLEGAL_ADDRESS";
    gt_begin("fault");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    const char *name = assert_kind ? "fault_assert" : trap_kind ? "fault_trap" : "fault_store";
    CUfunction f;
    if (library) {
        CUkernel kern;
        CK(cuLibraryGetKernel(&kern, gt_library_from_file_data(GT_FATBIN), name));
        f = (CUfunction)kern; /* launches take a CUkernel in a CUfunction's place */
    } else {
        f = gt_function(gt_module_from_file_data(GT_FATBIN), name);
    }
    CUdeviceptr bad = 0x10; /* the first page is never mapped */
    void *args[] = {&bad};
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CUresult r = cuCtxSynchronize();
    /* With GPU coredumps on, the driver answers the faulting program's synchronize with success while it
     * begins the dump, and the context shows the error some 90 ms later (natively too:
     * tools/probe_fault_culprit.c); a call made meanwhile that the driver need not see (under cumux, an
     * allocation from the client's chunk) may succeed too. GT_FAULT_SYNC_MAY_PASS=1 says coredumps are on:
     * the error must then come within 10 s of synchronizing again, and stay. */
    const char *late = getenv("GT_FAULT_SYNC_MAY_PASS");
    bool sync_passed = r == CUDA_SUCCESS && late && !strcmp(late, "1");
    for (int i = 0; sync_passed && r == CUDA_SUCCESS && i < 1000; i++) {
        struct timespec ten_ms = {0, 10000000};
        nanosleep(&ten_ms, NULL);
        r = cuCtxSynchronize();
    }
    if (r != want)
        gt_fail("cuCtxSynchronize after the faulting kernel returned %d, not %s%s", (int)r, want_name,
                sync_passed ? " (within 10 s: coredumps on)" : "");
    CUdeviceptr p;
    r = cuMemAlloc(&p, 4096);
    if (r != want)
        gt_fail("cuMemAlloc after the fault returned %d, not the sticky %s", (int)r, want_name);
    printf("fault: the faulting kernel's error came back%s, and stayed\n",
           sync_passed ? " (at a later synchronize: coredumps on)" : "");
    gt_pass();
}
