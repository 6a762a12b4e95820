/* Tensor maps in the fake: the driver's documented checks (cuda.h), and an encoding of the fake's own
 * (the address in the first word, the rest packed after it), so that a test sees the same map for the
 * same arguments and the address replaced in place. */
#include <stdint.h>
#include <string.h>

#include "fake.h"

static unsigned elem_size(CUtensorMapDataType t)
{
    static const unsigned size[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 1, 1, 1};
    return (unsigned)t < sizeof size / sizeof size[0] ? size[t] : 0;
}

/* What both encodings share: type, rank, address, dimensions, strides, element strides, modes. */
static CUresult check_common(CUtensorMapDataType type, cuuint32_t rank, void *address, const cuuint64_t *dim,
                             const cuuint64_t *strides, const cuuint32_t *element_strides,
                             CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    uint64_t a = (uint64_t)(uintptr_t)address;
    if (!elem_size(type) || rank == 0 || rank > 5 || !dim || !element_strides || (rank > 1 && !strides) ||
        (unsigned)interleave > CU_TENSOR_MAP_INTERLEAVE_32B || (unsigned)swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
        (unsigned)l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B || (unsigned)oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ||
        a % (interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16) != 0 ||
        (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3))
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < rank; i++)
        if (dim[i] == 0 || dim[i] > (1ull << 32) || element_strides[i] == 0 || element_strides[i] > 8 ||
            (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40))))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static void encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address, const cuuint64_t *dim,
                   const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *element_strides,
                   unsigned modes)
{
    memset(map->opaque, 0, sizeof map->opaque);
    map->opaque[0] = (uint64_t)(uintptr_t)address;
    map->opaque[1] = (uint64_t)type | (uint64_t)rank << 8 | (uint64_t)modes << 16;
    for (cuuint32_t i = 0; i < rank; i++) {
        map->opaque[2 + i] = dim[i];
        map->opaque[11 + i / 2] |= (uint64_t)(box[i] | element_strides[i] << 16) << (32 * (i % 2));
        if (i + 1 < rank)
            map->opaque[7 + i] = strides[i];
    }
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                const cuuint64_t *dim, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CHECK_RET(fc_check_init());
    if (!map || !box)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(check_common(type, rank, address, dim, strides, element_strides, interleave, swizzle, l2, oob));
    for (cuuint32_t i = 0; i < rank; i++)
        if (box[i] == 0 || box[i] > 256)
            return CUDA_ERROR_INVALID_VALUE;
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && box[0] * elem_size(type) % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    encode(map, type, rank, address, dim, strides, box, element_strides,
           (unsigned)interleave | (unsigned)swizzle << 2 | (unsigned)l2 << 6 | (unsigned)oob << 9);
    return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                 const cuuint64_t *dim, const cuuint64_t *strides, const int *lower,
                                 const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                 const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CHECK_RET(fc_check_init());
    if (!map || !lower || !upper || rank < 3 || channels == 0 || channels > 256 || pixels == 0 || pixels > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(check_common(type, rank, address, dim, strides, element_strides, interleave, swizzle, l2, oob));
    cuuint32_t box[5] = {channels, pixels, 1, 1, 1};
    encode(map, type, rank, address, dim, strides, box, element_strides,
           (unsigned)interleave | (unsigned)swizzle << 2 | (unsigned)l2 << 6 | (unsigned)oob << 9 | 1u << 15);
    for (cuuint32_t i = 0; i + 2 < rank; i++)
        map->opaque[13 + i / 2] |= (uint64_t)((uint16_t)lower[i] | (uint32_t)(uint16_t)upper[i] << 16) << (32 * (i % 2));
    return CUDA_SUCCESS;
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *address)
{
    CHECK_RET(fc_check_init());
    if (!map || (uint64_t)(uintptr_t)address % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    map->opaque[0] = (uint64_t)(uintptr_t)address;
    return CUDA_SUCCESS;
}
