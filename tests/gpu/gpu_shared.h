/* Helpers shared by the test kernels (nvcc) and the host programs (C11): one definition of the
 * pattern so the CPU reference computes exactly what the GPU writes. */
#ifndef CUMUX_GPU_SHARED_H
#define CUMUX_GPU_SHARED_H

#ifdef __CUDACC__
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD static inline
#endif

#define GT_TILE 16           /* matmul tile edge */
#define GT_TABLE_LEN 4096    /* elements of the __device__ g_table */

/* Integer mixer: cheap, well spread, identical on host and device. */
GT_HD unsigned gt_mix(unsigned x, unsigned seed)
{
    x ^= seed * 0x9e3779b9u;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Transform applied by the consumer stream in the event test. */
GT_HD unsigned gt_xform(unsigned v) { return v * 2654435761u + 12345u; }

#endif
