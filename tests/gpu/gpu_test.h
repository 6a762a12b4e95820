/* Small harness for the GPU tests: result reporting, checked driver calls, data helpers. */
#ifndef CUMUX_GPU_TEST_H
#define CUMUX_GPU_TEST_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_shared.h"

#define GT_SKIP_CODE 77

/* Name printed in PASS/FAIL/SKIP lines; set once by gt_begin(). */
extern const char *gt_name;

void gt_begin(const char *name);
/* cuInit(0) and a device count in this process; prints SKIP and exits 77 when there is no GPU. */
void gt_require_gpu(void);
/* The same probe, in a forked child, so that a multi-process test's parent stays CUDA-free. */
void gt_require_gpu_in_child(void);
_Noreturn void gt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void gt_pass(void);

void gt_check(CUresult r, const char *what, const char *file, int line);
#define CK(call) gt_check((call), #call, __FILE__, __LINE__)
/* Checks that a call returns a specific code (e.g. CUDA_ERROR_NOT_READY). */
void gt_expect(CUresult got, CUresult want, const char *what, const char *file, int line);
#define EXPECT_RC(call, want) gt_expect((call), (want), #call, __FILE__, __LINE__)
const char *gt_err_name(CUresult r);

/* Retains the primary context of device `ordinal`, makes it current, returns it. */
CUcontext gt_primary_ctx(int ordinal, CUdevice *dev_out);
void *gt_read_file(const char *path, size_t *size_out);
/* cuModuleLoadData on the bytes of `path` (the usual way a framework hands code to the driver). */
CUmodule gt_module_from_file_data(const char *path);
/* The same loaded as the CUDA runtime loads code: a library (cuLibraryLoadData). */
CUlibrary gt_library_from_file_data(const char *path);
CUfunction gt_function(CUmodule mod, const char *name);

uint64_t gt_now_ns(void);
void gt_sleep_ms(unsigned ms);
void gt_sleep_us(unsigned us);
/* SM clock cycles for roughly `ms` milliseconds at the device's rated clock. */
long long gt_cycles_for_ms(CUdevice dev, double ms);

typedef struct {
    uint64_t s;
} gt_rng;
void gt_rng_seed(gt_rng *r, uint64_t seed);
uint64_t gt_rng_next(gt_rng *r);
float gt_rng_float(gt_rng *r); /* uniform in [-1, 1) */
void gt_fill_random(void *p, size_t n, uint64_t seed);

#endif
