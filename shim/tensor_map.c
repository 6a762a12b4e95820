/* Tensor maps (cuTensorMap*): the server encodes them with the driver (server/tensor_map.c). The shim
 * copies rank entries of each array into the message; the map comes back as the driver wrote it. */
#include <string.h>

#include "shim/client.h"

/* Maps encoded before come from the shim's table of answers (answers.c): encoding is a pure function of its
 * arguments, which the message holds whole (the server checks nothing else, server/tensor_map.c), and
 * cuDNN encodes the maps of its Hopper kernels' operands at every execution, also inside the spans its
 * benchmark mode times, where a round trip each would count against those kernels. The map for message m
 * of op: from the table, else from the server (and then kept). */
static CUresult encode(uint16_t op, const void *m, size_t len, CUtensorMap *map)
{
    _Static_assert(sizeof(((struct cumux_tensor_map *)0)->opaque) == sizeof map->opaque, "a tensor map is 16 u64");
    _Static_assert(sizeof(struct cumux_tensor_map_tiled) <= SHIM_ANSWER_KEY_MAX &&
                       sizeof(struct cumux_tensor_map_im2col) <= SHIM_ANSWER_KEY_MAX &&
                       sizeof(struct cumux_tensor_map_replace) <= SHIM_ANSWER_KEY_MAX,
                   "every encode's message fits the table of answers");
    if (shim_answer_lookup(op, m, len, map->opaque, sizeof map->opaque))
        return CUDA_SUCCESS;
    struct cumux_tensor_map rep;
    CUresult r = shim_call(op, m, (uint32_t)len, &rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS) {
        memcpy(map->opaque, rep.opaque, sizeof map->opaque);
        shim_answer_store(op, m, len, map->opaque, sizeof map->opaque);
    }
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
    struct cumux_tensor_map_tiled m;
    memset(&m, 0, sizeof m); /* every byte, padding too: the message is the table's key */
    m.data_type = (uint32_t)type;
    m.rank = rank;
    m.global_address = (uint64_t)(uintptr_t)address;
    m.interleave = (uint32_t)interleave;
    m.swizzle = (uint32_t)swizzle;
    m.l2_promotion = (uint32_t)l2;
    m.oob_fill = (uint32_t)oob;
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    if (rank > 1)
        memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.box_dim, box, rank * sizeof *box);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    return encode(CUMUX_OP_TENSOR_MAP_ENCODE_TILED, &m, sizeof m, map);
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
    struct cumux_tensor_map_im2col m;
    memset(&m, 0, sizeof m);
    m.data_type = (uint32_t)type;
    m.rank = rank;
    m.global_address = (uint64_t)(uintptr_t)address;
    m.channels_per_pixel = channels;
    m.pixels_per_column = pixels;
    m.interleave = (uint32_t)interleave;
    m.swizzle = (uint32_t)swizzle;
    m.l2_promotion = (uint32_t)l2;
    m.oob_fill = (uint32_t)oob;
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.lower_corner, lower, (rank - 2) * sizeof *lower);
    memcpy(m.upper_corner, upper, (rank - 2) * sizeof *upper);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    return encode(CUMUX_OP_TENSOR_MAP_ENCODE_IM2COL, &m, sizeof m, map);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *address)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_replace m;
    memset(&m, 0, sizeof m);
    m.global_address = (uint64_t)(uintptr_t)address;
    memcpy(m.map, map->opaque, sizeof m.map);
    return encode(CUMUX_OP_TENSOR_MAP_REPLACE_ADDRESS, &m, sizeof m, map);
}
