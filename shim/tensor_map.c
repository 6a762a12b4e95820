/* Tensor maps (cuTensorMap*): the server encodes them with the driver (server/tensor_map.c). The shim
 * copies rank entries of each array into the message; the map comes back as the driver wrote it. */
#include <string.h>

#include "shim/client.h"

static CUresult take_map(CUresult r, const struct cumux_tensor_map *rep, CUtensorMap *map)
{
    if (r == CUDA_SUCCESS)
        memcpy(map->opaque, rep->opaque, sizeof map->opaque);
    return r;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                const cuuint64_t *dim, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map || rank == 0 || rank > 5 || !dim || (rank > 1 && !strides) || !box || !element_strides)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_tiled m = {.data_type = (uint32_t)type, .rank = rank,
                                       .global_address = (uint64_t)(uintptr_t)address,
                                       .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle,
                                       .l2_promotion = (uint32_t)l2, .oob_fill = (uint32_t)oob};
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    if (rank > 1)
        memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.box_dim, box, rank * sizeof *box);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    struct cumux_tensor_map rep;
    return take_map(shim_call(CUMUX_OP_TENSOR_MAP_ENCODE_TILED, &m, sizeof m, &rep, sizeof rep, NULL), &rep, map);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                 const cuuint64_t *dim, const cuuint64_t *strides, const int *lower,
                                 const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                 const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map || rank < 3 || rank > 5 || !dim || !strides || !lower || !upper || !element_strides)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_im2col m = {.data_type = (uint32_t)type, .rank = rank,
                                        .global_address = (uint64_t)(uintptr_t)address,
                                        .channels_per_pixel = channels, .pixels_per_column = pixels,
                                        .interleave = (uint32_t)interleave, .swizzle = (uint32_t)swizzle,
                                        .l2_promotion = (uint32_t)l2, .oob_fill = (uint32_t)oob};
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.lower_corner, lower, (rank - 2) * sizeof *lower);
    memcpy(m.upper_corner, upper, (rank - 2) * sizeof *upper);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    struct cumux_tensor_map rep;
    return take_map(shim_call(CUMUX_OP_TENSOR_MAP_ENCODE_IM2COL, &m, sizeof m, &rep, sizeof rep, NULL), &rep, map);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *address)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_replace m = {.global_address = (uint64_t)(uintptr_t)address};
    memcpy(m.map, map->opaque, sizeof m.map);
    struct cumux_tensor_map rep;
    return take_map(shim_call(CUMUX_OP_TENSOR_MAP_REPLACE_ADDRESS, &m, sizeof m, &rep, sizeof rep, NULL), &rep, map);
}
