// Kernels of the GPU test suite, built to a fatbin and loaded through the driver API only.
#include <assert.h>

#include "gpu_shared.h"

extern "C" {

__global__ void vec_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// C[MxN] = A[MxK] * B[KxN], row-major, shared-memory tiles; edges handled for any size.
__global__ void matmul_tiled(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float as[GT_TILE][GT_TILE];
    __shared__ float bs[GT_TILE][GT_TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * GT_TILE + ty, col = blockIdx.x * GT_TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += GT_TILE) {
        as[ty][tx] = (row < M && t + tx < K) ? A[(size_t)row * K + t + tx] : 0.0f;
        bs[ty][tx] = (t + ty < K && col < N) ? B[(size_t)(t + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < GT_TILE; k++)
            acc += as[ty][k] * bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[(size_t)row * N + col] = acc;
}

// Busy-waits `cycles` SM clocks, then thread 0 of block 0 stores `value` into *flag (if non-null).
__global__ void spin_flag(long long cycles, int *flag, int value)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (flag && threadIdx.x == 0 && blockIdx.x == 0)
        *(volatile int *)flag = value;
}

// Which SMs a grid ran on: each block busy-waits `cycles` (so that the grid spreads over every SM it may
// use), then sets the bit of its SM in bitmap (8 words: SMs 0-255).
__global__ void sm_ids(unsigned *bitmap, long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0) {
        unsigned id;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        if (id < 256)
            atomicOr(&bitmap[id / 32], 1u << (id % 32));
    }
}

__global__ void copy_flag(const int *flag, int *out)
{
    *out = *(const volatile int *)flag;
}

__global__ void write_value(int *out, int value)
{
    *out = value;
}

// Conditional nodes: counts its runs, and keeps the condition set while there were fewer than limit.
__global__ void cond_count(cudaGraphConditionalHandle h, unsigned *counter, unsigned limit)
{
    unsigned v = ++*counter;
    cudaGraphSetConditional(h, v < limit ? 1u : 0u);
}

__device__ unsigned g_table[GT_TABLE_LEN];
__device__ unsigned g_bias;

__global__ void table_modify(unsigned add)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < GT_TABLE_LEN)
        g_table[i] = g_table[i] * 3u + add + g_bias;
}

// Producer: optional delay (so a consumer that ignores the dependency reads stale data), then pattern.
__global__ void fill_pattern(unsigned *out, unsigned seed, int n, long long delay)
{
    if (delay > 0) {
        long long t0 = clock64();
        while (clock64() - t0 < delay) {
        }
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = gt_mix((unsigned)i, seed);
}

__global__ void xform(const unsigned *in, unsigned *out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = gt_xform(in[i]);
}

__global__ void scale_add(const float *in, float *out, float a, float b, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * a + b;
}

// Grid-stride in-place add over a large buffer (keeps the killed client busy).
__global__ void add_u32(unsigned *buf, unsigned long long n, unsigned add)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        buf[i] += add;
}

// add_u32 under a name of 2.5 KiB (gpu_shared.h), and a global of such a name: test_globals.
__global__ void GT_LONG_KERNEL(unsigned *buf, unsigned long long n, unsigned add)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        buf[i] += add;
}
__device__ unsigned GT_LONG_GLOBAL[GT_LONG_GLOBAL_WORDS];

// Launch bounds let the test check cuFuncGetAttribute(MAX_THREADS_PER_BLOCK) == 256.
__global__ void __launch_bounds__(256) bounded256(float *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1.0f;
}

__global__ void empty_kernel(int x)
{
    (void)x;
}

/* out[y][x] = 2 * the texel (x, y) of a float texture, point sampled */
__global__ void tex_fetch_2d(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        out[y * w + x] = 2.0f * tex2D<float>(t, x + 0.5f, y + 0.5f);
}

/* element (x, y) of a float surface = base + x + 1000 y */
__global__ void surf_write_2d(cudaSurfaceObject_t s, int w, int h, float base)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        surf2Dwrite(base + x + 1000.0f * y, s, x * (int)sizeof(float), y);
}

/* A store where nothing is mapped: a fatal fault of the context (tests/gpu/test_fault.c). */
__global__ void fault_store(unsigned *p)
{
    *p = 1u;
}

/* A device-side assert that fails: CUDA_ERROR_ASSERT, as fatal to the context (gpu_fault assert). */
__global__ void fault_assert(unsigned *p)
{
    assert(p == nullptr);
}

/* A trap (__trap(), PTX `trap`): the kernel is aborted, CUDA_ERROR_LAUNCH_FAILED, fatal to the context
 * (gpu_fault trap). */
__global__ void fault_trap(unsigned *p)
{
    if (p)
        __trap();
}

} // extern "C"
