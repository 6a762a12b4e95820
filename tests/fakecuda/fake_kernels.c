/* fakecuda's kernels: CPU versions of tests/gpu/kernels.cu, with the parameter layouts nvcc gives them
 * (each parameter at its natural alignment) and the globals of that file. Each checks, through the
 * oracle, every range it touches before touching it. A launch runs the whole grid at once; only the
 * threads the real kernel would have (grid x block in x) do work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"
#include "gpu_shared.h" /* gt_mix, gt_xform, GT_TILE, GT_TABLE_LEN: the same code the GPU runs */

/* Parameter i of the launch read as type T (at its offset in the nvcc layout), one reader a type. */
#define ARG_READER(name, T)                                                                            \
    static T name(const struct fc_launch *l, unsigned i)                                               \
    {                                                                                                  \
        T v;                                                                                           \
        memcpy(&v, l->args + l->fn->def->off[i], sizeof v);                                            \
        return v;                                                                                      \
    }
ARG_READER(a_ptr, uint64_t)
ARG_READER(a_i32, int32_t)
ARG_READER(a_u32, uint32_t)
ARG_READER(a_i64, int64_t)
ARG_READER(a_f32, float)
#undef ARG_READER

static uint64_t threads_x(const struct fc_launch *l)
{
    return (uint64_t)l->grid[0] * l->block[0];
}

/* How many of n elements the kernel's "if (i < n)" threads touch. */
static uint64_t covered(const struct fc_launch *l, int64_t n)
{
    if (n <= 0)
        return 0;
    uint64_t t = threads_x(l);
    return (uint64_t)n < t ? (uint64_t)n : t;
}

/* Busy for `cycles` SM clocks, at the clock rate the device reports: really that long, but asleep. */
static void spin_cycles(int64_t cycles)
{
    if (cycles <= 0)
        return;
    fc_order_release();
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (double)cycles * 1e6 / (double)FC_CLOCK_KHZ;
    uint64_t t = (uint64_t)end.tv_nsec + (uint64_t)ns;
    end.tv_sec += (time_t)(t / 1000000000ull);
    end.tv_nsec = (long)(t % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) != 0) {
    }
}

#define PTR(T, p) ((T *)(uintptr_t)(p))

/* Kernels touch only fake device memory and registered host memory, whose ranges the oracle has just
 * checked and which AddressSanitizer does not track; instrumenting their loops only makes a 1 GiB
 * kernel take seconds instead of a tenth of one (and the client-kill test wait for them). */
#define KERNEL __attribute__((no_sanitize_address)) static void

KERNEL k_vec_add(const struct fc_launch *l)
{
    uint64_t a = a_ptr(l, 0), b = a_ptr(l, 1), c = a_ptr(l, 2), n = covered(l, a_i32(l, 3));
    if (!n)
        return;
    fc_oracle_any(l->call, a, n * 4);
    fc_oracle_any(l->call, b, n * 4);
    fc_oracle_any(l->call, c, n * 4);
    for (uint64_t i = 0; i < n; i++)
        PTR(float, c)[i] = PTR(const float, a)[i] + PTR(const float, b)[i];
}

KERNEL k_matmul_tiled(const struct fc_launch *l)
{
    uint64_t A = a_ptr(l, 0), B = a_ptr(l, 1), C = a_ptr(l, 2);
    int M = a_i32(l, 3), N = a_i32(l, 4), K = a_i32(l, 5);
    /* Rows and columns the grid reaches (tiles of GT_TILE, as the kernel indexes them). */
    int64_t rows = (int64_t)l->grid[1] * GT_TILE, cols = (int64_t)l->grid[0] * GT_TILE;
    if (rows > M)
        rows = M;
    if (cols > N)
        cols = N;
    if (rows <= 0 || cols <= 0)
        return;
    if (K > 0) {
        fc_oracle_any(l->call, A, (uint64_t)rows * (uint64_t)K * 4);
        fc_oracle_any(l->call, B, ((uint64_t)(K - 1) * (uint64_t)N + (uint64_t)cols) * 4);
    }
    fc_oracle_any(l->call, C, ((uint64_t)(rows - 1) * (uint64_t)N + (uint64_t)cols) * 4);
    const float *a = PTR(const float, A), *b = PTR(const float, B);
    float *c = PTR(float, C);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t col = 0; col < cols; col++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc = fmaf(a[r * K + k], b[k * N + col], acc); /* nvcc contracts the GPU's a*b+acc */
            c[r * N + col] = acc;
        }
}

KERNEL k_spin_flag(const struct fc_launch *l)
{
    spin_cycles(a_i64(l, 0));
    uint64_t flag = a_ptr(l, 1);
    if (flag) {
        fc_oracle_any(l->call, flag, 4);
        *PTR(volatile int32_t, flag) = a_i32(l, 2);
    }
}

/* The SMs its stream's green context holds (all of the device's outside one), as many as it has blocks:
 * a GPU spreads a grid of long blocks over every SM it may use. */
KERNEL k_sm_ids(const struct fc_launch *l)
{
    uint64_t bitmap = a_ptr(l, 0);
    spin_cycles(a_i64(l, 1));
    fc_oracle_any(l->call, bitmap, 32);
    uint64_t blocks = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
    for (unsigned sm = 0; sm < FC_SM_COUNT && blocks; sm++) {
        if (fc_running_sms && !(fc_running_sms->bits[sm / 64] >> (sm % 64) & 1))
            continue;
        PTR(uint32_t, bitmap)[sm / 32] |= 1u << (sm % 32);
        blocks--;
    }
}

KERNEL k_copy_flag(const struct fc_launch *l)
{
    uint64_t flag = a_ptr(l, 0), out = a_ptr(l, 1);
    fc_oracle_any(l->call, flag, 4);
    fc_oracle_any(l->call, out, 4);
    *PTR(int32_t, out) = *PTR(volatile const int32_t, flag);
}

KERNEL k_write_value(const struct fc_launch *l)
{
    uint64_t out = a_ptr(l, 0);
    fc_oracle_any(l->call, out, 4);
    *PTR(int32_t, out) = a_i32(l, 1);
}

/* A store to an address no allocation holds: on a GPU a fatal fault of the whole context. The fake
 * touches nothing and makes the fault sticky (the oracle is for the server's mistakes, not this). With GPU
 * coredumps on, as on the H200: the dump is begun, the faulting stream goes on (a synchronize of it
 * returns CUDA_SUCCESS) and the error shows only some 30 ms later. */
KERNEL k_fault_store(const struct fc_launch *l)
{
    if (fc_coredump_fault(l, 1 /* lane illegal address */)) {
        fc_fault_sticky_later(CUDA_ERROR_ILLEGAL_ADDRESS, 30);
        return;
    }
    fc_fault_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
}

/* A device-side assert: CUDA_ERROR_ASSERT; with dumps on, as on the H200, the error shows as
 * CUDA_ERROR_LAUNCH_FAILED, and the dump says "warp assert". */
KERNEL k_fault_assert(const struct fc_launch *l)
{
    if (fc_coredump_fault(l, 12 /* warp assert */)) {
        fc_fault_sticky_later(CUDA_ERROR_LAUNCH_FAILED, 30);
        return;
    }
    fc_fault_sticky(CUDA_ERROR_ASSERT);
}

/* A trap: CUDA_ERROR_LAUNCH_FAILED; with dumps on, the dump shows the SM's exception (taken here to be
 * "warp illegal instruction", which cumuxd does not let change the error: the driver's stands).
 * CUMUX_FAKE_TRAP_DUMP_UNNAMED=1: as a trap once was on the H200 (12-04), a dump that names no one, the
 * error showing at the program's synchronize (no success meanwhile); =late: the same dump, the stream
 * going on (a synchronize passes) and the error showing 30 ms later, as an illegal address's does. */
KERNEL k_fault_trap(const struct fc_launch *l)
{
    const char *unnamed = getenv("CUMUX_FAKE_TRAP_DUMP_UNNAMED");
    bool late = unnamed && !strcmp(unnamed, "late");
    if (unnamed && (late || !strcmp(unnamed, "1")) && fc_coredump_fault(l, 0 /* no exception recorded */)) {
        if (late)
            fc_fault_sticky_later(CUDA_ERROR_LAUNCH_FAILED, 30);
        else
            fc_fault_sticky(CUDA_ERROR_LAUNCH_FAILED);
        return;
    }
    if (fc_coredump_fault(l, 4 /* warp illegal instruction */)) {
        fc_fault_sticky_later(CUDA_ERROR_LAUNCH_FAILED, 30);
        return;
    }
    fc_fault_sticky(CUDA_ERROR_LAUNCH_FAILED);
}

/* cumuxd's own kernels for stream memory operations on pool memory (server/memop_kernels.c): a release
 * store; a wait polled as the fake's cuStreamWaitValue is, CUMUX_FAKE_WAIT_LIMIT_MS included. */
KERNEL k_cumux_mem_write(const struct fc_launch *l)
{
    uint64_t a = a_ptr(l, 0);
    bool wide = a_u32(l, 2) == 8;
    fc_oracle_any(l->call, a, wide ? 8 : 4);
    fc_write_value(a, a_ptr(l, 1), wide);
}

KERNEL k_cumux_mem_wait(const struct fc_launch *l)
{
    uint64_t a = a_ptr(l, 0);
    bool wide = a_u32(l, 2) == 8;
    fc_oracle_any(l->call, a, wide ? 8 : 4);
    fc_wait_value(a, a_ptr(l, 1), wide, a_u32(l, 3));
}

KERNEL k_cond_count(const struct fc_launch *l)
{
    uint64_t counter = a_ptr(l, 1);
    fc_oracle_any(l->call, counter, 4);
    uint32_t v = ++*PTR(uint32_t, counter);
    if (!fc_cond_set(a_ptr(l, 0), v < (uint32_t)a_i32(l, 2) ? 1u : 0u))
        fc_oracle_any(l->call, 0, 1); /* no such handle: a fault on a GPU */
}

KERNEL k_table_modify(const struct fc_launch *l)
{
    uint64_t table = fc_module_global(l->fn->mod, "g_table", NULL);
    uint64_t bias = fc_module_global(l->fn->mod, "g_bias", NULL);
    uint64_t n = covered(l, GT_TABLE_LEN);
    if (!n)
        return;
    fc_oracle_any(l->call, table, n * 4);
    fc_oracle_any(l->call, bias, 4);
    unsigned add = a_u32(l, 0), b = *PTR(unsigned, bias);
    for (uint64_t i = 0; i < n; i++)
        PTR(unsigned, table)[i] = PTR(unsigned, table)[i] * 3u + add + b;
}

KERNEL k_fill_pattern(const struct fc_launch *l)
{
    spin_cycles(a_i64(l, 3));
    uint64_t out = a_ptr(l, 0);
    unsigned seed = a_u32(l, 1);
    int n = a_i32(l, 2);
    if (n <= 0)
        return;
    fc_oracle_any(l->call, out, (uint64_t)n * 4);
    for (int i = 0; i < n; i++)
        PTR(unsigned, out)[i] = gt_mix((unsigned)i, seed);
}

KERNEL k_xform(const struct fc_launch *l)
{
    uint64_t in = a_ptr(l, 0), out = a_ptr(l, 1);
    int n = a_i32(l, 2);
    if (n <= 0)
        return;
    fc_oracle_any(l->call, in, (uint64_t)n * 4);
    fc_oracle_any(l->call, out, (uint64_t)n * 4);
    for (int i = 0; i < n; i++)
        PTR(unsigned, out)[i] = gt_xform(PTR(const unsigned, in)[i]);
}

KERNEL k_scale_add(const struct fc_launch *l)
{
    uint64_t in = a_ptr(l, 0), out = a_ptr(l, 1);
    float a = a_f32(l, 2), b = a_f32(l, 3);
    int n = a_i32(l, 4);
    if (n <= 0)
        return;
    fc_oracle_any(l->call, in, (uint64_t)n * 4);
    fc_oracle_any(l->call, out, (uint64_t)n * 4);
    for (int i = 0; i < n; i++)
        PTR(float, out)[i] = fmaf(PTR(const float, in)[i], a, b);
}

KERNEL k_add_u32(const struct fc_launch *l)
{
    uint64_t buf = a_ptr(l, 0), n = (uint64_t)a_i64(l, 1);
    unsigned add = a_u32(l, 2);
    if (!n)
        return;
    fc_oracle_any(l->call, buf, fc_mul_sat(n, 4));
    for (uint64_t i = 0; i < n; i++)
        PTR(unsigned, buf)[i] += add;
}

KERNEL k_bounded256(const struct fc_launch *l)
{
    uint64_t p = a_ptr(l, 0), n = covered(l, a_i32(l, 1));
    if (!n)
        return;
    fc_oracle_any(l->call, p, n * 4);
    for (uint64_t i = 0; i < n; i++)
        PTR(float, p)[i] += 1.0f;
}

KERNEL k_empty_kernel(const struct fc_launch *l)
{
    (void)l;
}

/* The threads the launch has in y, as covered() counts them in x. */
static uint64_t covered_y(const struct fc_launch *l, int64_t n)
{
    uint64_t t = (uint64_t)l->grid[1] * l->block[1];
    return n <= 0 ? 0 : (uint64_t)n < t ? (uint64_t)n : t;
}

/* Clamp addressing (and border reads as 0 when out of range): the texel's byte address, or 0. */
static uint64_t texel(const struct fc_texref *t, int64_t x, int64_t y)
{
    if (x < 0 || y < 0 || (uint64_t)x >= t->width || (uint64_t)y >= t->height) {
        if (t->mode[0] == CU_TR_ADDRESS_MODE_BORDER || t->mode[1] == CU_TR_ADDRESS_MODE_BORDER)
            return 0;
        x = x < 0 ? 0 : (uint64_t)x >= t->width ? (int64_t)t->width - 1 : x;
        y = y < 0 ? 0 : (uint64_t)y >= t->height ? (int64_t)t->height - 1 : y;
    }
    return t->base + (uint64_t)y * t->pitch + (uint64_t)x * t->elem;
}

KERNEL k_tex_fetch_2d(const struct fc_launch *l)
{
    struct fc_texref t;
    uint64_t out = a_ptr(l, 1);
    int32_t w = a_i32(l, 2), h = a_i32(l, 3);
    uint64_t nx = covered(l, w), ny = covered_y(l, h);
    if (!nx || !ny)
        return;
    if (!fc_texture(a_ptr(l, 0), false, &t)) /* a bad texture object: the GPU faults */
        fc_oracle_any(l->call, 0, 1);
    fc_oracle_any(l->call, out, ((ny - 1) * (uint64_t)w + nx) * 4);
    for (uint64_t y = 0; y < ny; y++)
        for (uint64_t x = 0; x < nx; x++) {
            uint64_t a = texel(&t, (int64_t)x, (int64_t)y);
            float v = 0;
            if (a) {
                fc_oracle_any(l->call, a, 4);
                memcpy(&v, PTR(void, a), 4);
            }
            PTR(float, out)[y * (uint64_t)w + x] = 2.0f * v;
        }
}

KERNEL k_surf_write_2d(const struct fc_launch *l)
{
    struct fc_texref s;
    int32_t w = a_i32(l, 1), h = a_i32(l, 2);
    float base = a_f32(l, 3);
    uint64_t nx = covered(l, w), ny = covered_y(l, h);
    if (!nx || !ny)
        return;
    if (!fc_texture(a_ptr(l, 0), true, &s))
        fc_oracle_any(l->call, 0, 1);
    for (uint64_t y = 0; y < ny; y++)
        for (uint64_t x = 0; x < nx; x++) {
            if (x >= s.width || y >= s.height) /* surfaces trap out of range by default */
                fc_oracle_any(l->call, 0, 1);
            uint64_t a = s.base + y * s.pitch + x * s.elem;
            fc_oracle_any(l->call, a, 4);
            float v = base + (float)x + 1000.0f * (float)y;
            memcpy(PTR(void, a), &v, 4);
        }
}

const struct fc_kernel_def fc_kernels[] = {
    {"vec_add", "kernel vec_add", 4, {0, 8, 16, 24}, {8, 8, 8, 4}, 1024, 16, 0, k_vec_add},
    {"matmul_tiled", "kernel matmul_tiled", 6, {0, 8, 16, 24, 28, 32}, {8, 8, 8, 4, 4, 4}, 1024, 32, 2 * GT_TILE * GT_TILE * 4, k_matmul_tiled},
    {"spin_flag", "kernel spin_flag", 3, {0, 8, 16}, {8, 8, 4}, 1024, 16, 0, k_spin_flag},
    {"sm_ids", "kernel sm_ids", 2, {0, 8}, {8, 8}, 1024, 16, 0, k_sm_ids},
    {"copy_flag", "kernel copy_flag", 2, {0, 8}, {8, 8}, 1024, 8, 0, k_copy_flag},
    {"write_value", "kernel write_value", 2, {0, 8}, {8, 4}, 1024, 8, 0, k_write_value},
    {"fault_store", "kernel fault_store", 1, {0}, {8}, 1024, 8, 0, k_fault_store},
    {"fault_assert", "kernel fault_assert", 1, {0}, {8}, 1024, 8, 0, k_fault_assert},
    {"fault_trap", "kernel fault_trap", 1, {0}, {8}, 1024, 8, 0, k_fault_trap},
    {"cumux_mem_write", "kernel cumux_mem_write", 3, {0, 8, 16}, {8, 8, 4}, 1, 16, 0, k_cumux_mem_write},
    {"cumux_mem_wait", "kernel cumux_mem_wait", 4, {0, 8, 16, 20}, {8, 8, 4, 4}, 1, 20, 0, k_cumux_mem_wait},
    {"cond_count", "kernel cond_count", 3, {0, 8, 16}, {8, 8, 4}, 1024, 12, 0, k_cond_count},
    {"table_modify", "kernel table_modify", 1, {0}, {4}, 1024, 12, 0, k_table_modify},
    {"fill_pattern", "kernel fill_pattern", 4, {0, 8, 12, 16}, {8, 4, 4, 8}, 1024, 20, 0, k_fill_pattern},
    {"xform", "kernel xform", 3, {0, 8, 16}, {8, 8, 4}, 1024, 14, 0, k_xform},
    {"scale_add", "kernel scale_add", 5, {0, 8, 16, 20, 24}, {8, 8, 4, 4, 4}, 1024, 14, 0, k_scale_add},
    {"add_u32", "kernel add_u32", 3, {0, 8, 16}, {8, 8, 4}, 1024, 14, 0, k_add_u32},
    {GT_STR(GT_LONG_KERNEL), "kernel long_add_u32...", 3, {0, 8, 16}, {8, 8, 4}, 1024, 14, 0, k_add_u32},
    {"bounded256", "kernel bounded256", 2, {0, 8}, {8, 4}, 256, 12, 0, k_bounded256},
    {"empty_kernel", "kernel empty_kernel", 1, {0}, {4}, 1024, 4, 0, k_empty_kernel},
    {"tex_fetch_2d", "kernel tex_fetch_2d", 4, {0, 8, 16, 20}, {8, 8, 4, 4}, 1024, 16, 0, k_tex_fetch_2d},
    {"surf_write_2d", "kernel surf_write_2d", 4, {0, 8, 12, 16}, {8, 4, 4, 4}, 1024, 16, 0, k_surf_write_2d},
};
const size_t fc_nkernels = sizeof fc_kernels / sizeof fc_kernels[0];

const struct fc_global_def fc_globals[] = {
    {"g_table", GT_TABLE_LEN * sizeof(unsigned)},
    {"g_bias", sizeof(unsigned)},
    {GT_STR(GT_LONG_GLOBAL), GT_LONG_GLOBAL_WORDS * sizeof(unsigned)},
};
const size_t fc_nglobals = sizeof fc_globals / sizeof fc_globals[0];
