/* CUDA arrays, textures and surfaces, as CuPy and the CUDA runtime's texture API use them: a 2-D float
 * array filled from pageable host memory and read back; a sub-region copied from device memory into it
 * at an offset and back out; an array-to-array copy; a 3-D array filled from a pitched host buffer and a
 * slab of it copied to device memory; a kernel sampling the array through a texture object, and another
 * a pitched device buffer; a kernel writing a surface; every result against the CPU. Also what must be
 * refused: a region past the array's end, a texture over memory the program does not own. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

enum { W = 96, H = 64, W3 = 16, H3 = 8, D3 = 4 };

static void expect_equal(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            gt_fail("%s: element %zu is %g, expected %g", what, i, (double)got[i], (double)want[i]);
}

static CUarray array_2d(unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = W, .Height = H, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1,
                                 .Flags = flags};
    CUarray a;
    CK(cuArray3DCreate(&a, &d));
    return a;
}

/* Host <-> array, whole, with cuMemcpy2D. */
static void host_array(CUarray a, float *host, bool to_array)
{
    CUDA_MEMCPY2D m;
    memset(&m, 0, sizeof m);
    if (to_array) {
        m.srcMemoryType = CU_MEMORYTYPE_HOST, m.srcHost = host, m.srcPitch = W * sizeof(float);
        m.dstMemoryType = CU_MEMORYTYPE_ARRAY, m.dstArray = a;
    } else {
        m.srcMemoryType = CU_MEMORYTYPE_ARRAY, m.srcArray = a;
        m.dstMemoryType = CU_MEMORYTYPE_HOST, m.dstHost = host, m.dstPitch = W * sizeof(float);
    }
    m.WidthInBytes = W * sizeof(float);
    m.Height = H;
    CK(cuMemcpy2D(&m));
}

int main(void)
{
    gt_begin("array");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction fetch = gt_function(mod, "tex_fetch_2d"), write = gt_function(mod, "surf_write_2d");
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    float *host = malloc(W * H * sizeof(float)), *back = malloc(W * H * sizeof(float)),
          *want = malloc(W * H * sizeof(float));
    if (!host || !back || !want)
        gt_fail("out of host memory");
    for (int i = 0; i < W * H; i++)
        host[i] = (float)(i % 977) * 0.25f - 7.0f;

    /* Whole array from and to pageable memory; the descriptor as created. */
    CUarray a = array_2d(0);
    CUDA_ARRAY_DESCRIPTOR got;
    CK(cuArrayGetDescriptor(&got, a));
    if (got.Width != W || got.Height != H || got.Format != CU_AD_FORMAT_FLOAT || got.NumChannels != 1)
        gt_fail("descriptor %zux%zu format %d channels %u", got.Width, got.Height, (int)got.Format, got.NumChannels);
    host_array(a, host, true);
    memset(back, 0, W * H * sizeof(float));
    host_array(a, back, false);
    expect_equal(back, host, W * H, "array round trip");

    /* A 10-row, 10-element region from device memory into the array at (16, 3), on a stream, and back. */
    CUdeviceptr dev;
    size_t dpitch;
    CK(cuMemAllocPitch(&dev, &dpitch, W * sizeof(float), H, 16));
    float patch[10 * 10];
    for (int i = 0; i < 100; i++)
        patch[i] = 1000.0f + (float)i;
    CK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = patch, .srcPitch = 40,
                                   .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dev, .dstPitch = dpitch,
                                   .WidthInBytes = 40, .Height = 10}));
    CK(cuMemcpy2DAsync(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev, .srcPitch = dpitch,
                                        .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .dstXInBytes = 64,
                                        .dstY = 3, .WidthInBytes = 40, .Height = 10},
                       s));
    CK(cuStreamSynchronize(s));
    memcpy(want, host, W * H * sizeof(float));
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 10; x++)
            want[(3 + y) * W + 16 + x] = patch[y * 10 + x];
    host_array(a, back, false);
    expect_equal(back, want, W * H, "a region copied into the array");

    /* Array to array, then the copy read back. */
    CUarray b = array_2d(0);
    CUDA_MEMCPY3D aa;
    memset(&aa, 0, sizeof aa);
    aa.srcMemoryType = CU_MEMORYTYPE_ARRAY, aa.srcArray = a;
    aa.dstMemoryType = CU_MEMORYTYPE_ARRAY, aa.dstArray = b;
    aa.WidthInBytes = W * sizeof(float), aa.Height = H, aa.Depth = 1;
    CK(cuMemcpy3D(&aa));
    host_array(b, back, false);
    expect_equal(back, want, W * H, "array to array");

    /* Refused: a region that runs past the array's last row. */
    EXPECT_RC(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dev, .srcPitch = dpitch,
                                          .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = a, .dstY = H - 5,
                                          .WidthInBytes = 40, .Height = 10}),
              CUDA_ERROR_INVALID_VALUE);

    /* A 3-D array from a pitched host buffer (pitch 80 bytes for 64-byte rows), then slices 1-2, rows 2-5
     * of it to device memory and back to the host. */
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = W3, .Height = H3, .Depth = D3, .Format = CU_AD_FORMAT_FLOAT,
                                  .NumChannels = 1};
    CUarray c3;
    CK(cuArray3DCreate(&c3, &d3));
    static float vol[D3][H3][20], slab[2][4][W3];
    for (int z = 0; z < D3; z++)
        for (int y = 0; y < H3; y++)
            for (int x = 0; x < 20; x++)
                vol[z][y][x] = (float)(z * 10000 + y * 100 + x);
    CUDA_MEMCPY3D up;
    memset(&up, 0, sizeof up);
    up.srcMemoryType = CU_MEMORYTYPE_HOST, up.srcHost = vol, up.srcPitch = 20 * sizeof(float), up.srcHeight = H3;
    up.dstMemoryType = CU_MEMORYTYPE_ARRAY, up.dstArray = c3;
    up.WidthInBytes = W3 * sizeof(float), up.Height = H3, up.Depth = D3;
    CK(cuMemcpy3D(&up));
    CUdeviceptr dslab;
    CK(cuMemAlloc(&dslab, sizeof slab));
    CUDA_MEMCPY3D down;
    memset(&down, 0, sizeof down);
    down.srcMemoryType = CU_MEMORYTYPE_ARRAY, down.srcArray = c3, down.srcY = 2, down.srcZ = 1;
    down.dstMemoryType = CU_MEMORYTYPE_DEVICE, down.dstDevice = dslab, down.dstPitch = W3 * sizeof(float),
    down.dstHeight = 4;
    down.WidthInBytes = W3 * sizeof(float), down.Height = 4, down.Depth = 2;
    CK(cuMemcpy3DAsync(&down, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(slab, dslab, sizeof slab));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < W3; x++)
                if (slab[z][y][x] != vol[1 + z][2 + y][x])
                    gt_fail("3-D slab (%d,%d,%d): %g, expected %g", x, y, z, (double)slab[z][y][x],
                            (double)vol[1 + z][2 + y][x]);

    /* A texture over the array: a kernel reads every texel. */
    CUDA_RESOURCE_DESC res;
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = a;
    CUDA_TEXTURE_DESC tex;
    memset(&tex, 0, sizeof tex);
    tex.addressMode[0] = tex.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
    tex.filterMode = CU_TR_FILTER_MODE_POINT;
    CUtexObject t;
    CK(cuTexObjectCreate(&t, &res, &tex, NULL));
    CUDA_RESOURCE_DESC res_back;
    CK(cuTexObjectGetResourceDesc(&res_back, t));
    if (res_back.resType != CU_RESOURCE_TYPE_ARRAY || res_back.res.array.hArray != a)
        gt_fail("cuTexObjectGetResourceDesc gave another resource");
    CUdeviceptr out;
    CK(cuMemAlloc(&out, W * H * sizeof(float)));
    int w = W, h = H;
    void *fargs[] = {&t, &out, &w, &h};
    CK(cuLaunchKernel(fetch, W / 16, H / 16, 1, 16, 16, 1, 0, s, fargs, NULL));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(back, out, W * H * sizeof(float)));
    for (int i = 0; i < W * H; i++)
        want[i] *= 2.0f;
    expect_equal(back, want, W * H, "texture fetch from the array");

    /* A texture over pitched device memory holding the original data. */
    CK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = W * sizeof(float),
                                   .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dev, .dstPitch = dpitch,
                                   .WidthInBytes = W * sizeof(float), .Height = H}));
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_PITCH2D;
    res.res.pitch2D.devPtr = dev, res.res.pitch2D.format = CU_AD_FORMAT_FLOAT, res.res.pitch2D.numChannels = 1;
    res.res.pitch2D.width = W, res.res.pitch2D.height = H, res.res.pitch2D.pitchInBytes = dpitch;
    CUtexObject tp;
    CK(cuTexObjectCreate(&tp, &res, &tex, NULL));
    fargs[0] = &tp;
    CK(cuLaunchKernel(fetch, W / 16, H / 16, 1, 16, 16, 1, 0, s, fargs, NULL));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(back, out, W * H * sizeof(float)));
    for (int i = 0; i < W * H; i++)
        want[i] = 2.0f * host[i];
    expect_equal(back, want, W * H, "texture fetch from pitched memory");

    /* A surface: a kernel writes every element, read back through a copy. */
    CUarray sa = array_2d(CUDA_ARRAY3D_SURFACE_LDST);
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = sa;
    CUsurfObject so;
    CK(cuSurfObjectCreate(&so, &res));
    float base = 0.5f;
    void *sargs[] = {&so, &w, &h, &base};
    CK(cuLaunchKernel(write, W / 16, H / 16, 1, 16, 16, 1, 0, s, sargs, NULL));
    CK(cuStreamSynchronize(s));
    host_array(sa, back, false);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            want[y * W + x] = base + (float)x + 1000.0f * (float)y;
    expect_equal(back, want, W * H, "surface writes");

    CK(cuSurfObjectDestroy(so));
    CK(cuTexObjectDestroy(tp));
    /* The array outlives its handle while a texture uses it (destroyed here first on purpose). */
    CK(cuArrayDestroy(a));
    CK(cuTexObjectDestroy(t));
    CK(cuArrayDestroy(b));
    CK(cuArrayDestroy(c3));
    CK(cuArrayDestroy(sa));
    CK(cuMemFree(dev));
    CK(cuMemFree(dslab));
    CK(cuMemFree(out));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    free(host);
    free(back);
    free(want);
    gt_pass();
}
