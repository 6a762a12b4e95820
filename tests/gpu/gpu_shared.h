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

/* A kernel (add_u32's code) and a global whose names are 2,444 and 2,438 characters long: natively a
 * name has no limit, and the C++ names of cuDNN's CUTLASS kernels run past a kilobyte. GT_STR gives the
 * name as a string. */
#define GT_CAT_(a, b) a##b
#define GT_CAT(a, b) GT_CAT_(a, b)
#define GT_TWICE(x) GT_CAT(x, x)
#define GT_LONG_TAIL GT_TWICE(GT_TWICE(GT_TWICE(GT_TWICE(GT_TWICE(GT_TWICE(GT_TWICE(_a_name_of_20_chars)))))))
#define GT_LONG_KERNEL GT_CAT(long_add_u32, GT_LONG_TAIL)
#define GT_LONG_GLOBAL GT_CAT(g_long, GT_LONG_TAIL)
#define GT_LONG_GLOBAL_WORDS 64
#define GT_STR_(x) #x
#define GT_STR(x) GT_STR_(x)

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
