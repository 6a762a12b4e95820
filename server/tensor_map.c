/* Tensor maps: the 128-byte descriptors of the tensor memory accelerator (Hopper and later), which the
 * driver encodes on the host. The server encodes them with the real driver and answers the bytes. The
 * address inside is not checked against the client's memory: a map is data that only the client's own
 * kernels read, and a kernel may name any address already. The ranks are checked here, since the driver
 * reads that many entries of the message's fixed arrays. */
#include <string.h>

#include "server/handlers.h"

static CUresult reply_map(const CUtensorMap *map, uint8_t *out, uint32_t *out_len)
{
    struct cumux_tensor_map rep;
    _Static_assert(sizeof rep.opaque == sizeof map->opaque, "a tensor map is 16 u64");
    memcpy(rep.opaque, map->opaque, sizeof rep.opaque);
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_tensor_map_encode_tiled(struct srv_client *c, const struct cumux_tensor_map_tiled *m, uint8_t *out,
                                    uint32_t *out_len)
{
    if (m->rank == 0 || m->rank > 5)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, 0);
    CUtensorMap map;
    CHECK(cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)m->data_type, m->rank,
                                 (void *)(uintptr_t)m->global_address, m->global_dim, m->global_strides, m->box_dim,
                                 m->element_strides, (CUtensorMapInterleave)m->interleave,
                                 (CUtensorMapSwizzle)m->swizzle, (CUtensorMapL2promotion)m->l2_promotion,
                                 (CUtensorMapFloatOOBfill)m->oob_fill));
    return reply_map(&map, out, out_len);
}

CUresult op_tensor_map_encode_im2col(struct srv_client *c, const struct cumux_tensor_map_im2col *m,
                                     uint8_t *out, uint32_t *out_len)
{
    /* im2col maps have 3 to 5 dimensions; the corners have rank - 2 entries */
    if (m->rank < 3 || m->rank > 5)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, 0);
    CUtensorMap map;
    CHECK(cuTensorMapEncodeIm2col(&map, (CUtensorMapDataType)m->data_type, m->rank,
                                  (void *)(uintptr_t)m->global_address, m->global_dim, m->global_strides,
                                  m->lower_corner, m->upper_corner, m->channels_per_pixel, m->pixels_per_column,
                                  m->element_strides, (CUtensorMapInterleave)m->interleave,
                                  (CUtensorMapSwizzle)m->swizzle, (CUtensorMapL2promotion)m->l2_promotion,
                                  (CUtensorMapFloatOOBfill)m->oob_fill));
    return reply_map(&map, out, out_len);
}

CUresult op_tensor_map_replace_address(struct srv_client *c, const struct cumux_tensor_map_replace *m,
                                       uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, 0);
    CUtensorMap map;
    memcpy(map.opaque, m->map, sizeof map.opaque);
    CHECK(cuTensorMapReplaceAddress(&map, (void *)(uintptr_t)m->global_address));
    return reply_map(&map, out, out_len);
}
