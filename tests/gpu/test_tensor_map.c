/* Tensor maps (the descriptors of Hopper's tensor memory accelerator, which XLA, Triton and cuDNN encode
 * on the host): a tiled map of a 256x256 float matrix and an im2col map of a 4-D tensor are encoded;
 * the same arguments give the same bytes, other arguments (an address, a box) other bytes; replacing the
 * address changes the map and replacing it back restores it exactly; what the driver documents as
 * invalid (rank 0, an address off 16 bytes, a stride that is not a multiple of 16, a box of 0) is refused. */
#include <string.h>

#include "gpu_test.h"

static CUresult tiled(CUtensorMap *map, cuuint32_t rank, CUdeviceptr p, cuuint64_t stride, cuuint32_t box0)
{
    cuuint64_t dim[2] = {256, 256}, strides[1] = {stride};
    cuuint32_t box[2] = {box0, 32}, es[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, (void *)(uintptr_t)p, dim, strides, box,
                                  es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(void)
{
    gt_begin("tensor_map");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, 1 << 20));

    CUtensorMap a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0xff, sizeof b);
    CK(tiled(&a, 2, buf, 256 * sizeof(float), 32));
    CK(tiled(&b, 2, buf, 256 * sizeof(float), 32));
    if (memcmp(&a, &b, sizeof a) != 0)
        gt_fail("the same arguments gave two different maps");
    static const CUtensorMap zero;
    if (memcmp(&a, &zero, sizeof a) == 0)
        gt_fail("the map is all zeros");

    CK(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)(buf + 4096)));
    if (memcmp(&a, &b, sizeof a) == 0)
        gt_fail("replacing the address left the map as it was");
    CUtensorMap moved = b;
    CK(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)buf));
    if (memcmp(&a, &b, sizeof a) != 0)
        gt_fail("replacing the address back did not restore the map");
    /* Encoded again at the other address: the map the replacement gave, not one remembered for the first
     * address (cumux answers a repeated encode itself); and at the first again, the first map. */
    CUtensorMap d;
    for (int round = 0; round < 2; round++) {
        CK(tiled(&d, 2, buf + 4096, 256 * sizeof(float), 32));
        if (memcmp(&d, &moved, sizeof d) != 0)
            gt_fail("a map encoded at buf + 4096 differs from the map moved there (round %d)", round);
        CK(tiled(&d, 2, buf, 256 * sizeof(float), 32));
        if (memcmp(&d, &a, sizeof d) != 0)
            gt_fail("a map encoded again at buf differs from the first (round %d)", round);
        CK(tiled(&d, 2, buf, 256 * sizeof(float), 16)); /* another box: another map */
        if (memcmp(&d, &a, sizeof d) == 0)
            gt_fail("a box of 16 gave the map of a box of 32 (round %d)", round);
    }

    /* A 4-D NHWC tensor of 8 x 16 x 16 x 64 halves, im2col with a 3x3 window. */
    cuuint64_t dim4[4] = {64, 16, 16, 8};
    cuuint64_t str4[3] = {64 * 2, 64 * 2 * 16, 64 * 2 * 16 * 16};
    int lower[2] = {-1, -1}, upper[2] = {-1, -1};
    cuuint32_t es4[4] = {1, 1, 1, 1};
    CUtensorMap c;
    CK(cuTensorMapEncodeIm2col(&c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)(uintptr_t)buf, dim4, str4, lower, upper,
                               64, 128, es4, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));

    CUtensorMap c2;
    memset(&c2, 0xff, sizeof c2);
    CK(cuTensorMapEncodeIm2col(&c2, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)(uintptr_t)buf, dim4, str4, lower, upper,
                               64, 128, es4, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    if (memcmp(&c, &c2, sizeof c) != 0)
        gt_fail("the same im2col arguments gave two different maps");

    EXPECT_RC(tiled(&b, 0, buf, 1024, 32), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(tiled(&b, 2, buf + 4, 1024, 32), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(tiled(&b, 2, buf, 1000, 32), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(tiled(&b, 2, buf, 1024, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)(buf + 8)), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(buf));
    gt_pass();
}
