"""CuPy's texture objects: a 2-D CUDA array filled from the host, read through a texture object with
point sampling by a raw kernel, checked against NumPy (cuArrayCreate, cuMemcpy2D to an array,
cuTexObjectCreate)."""
from fwcheck import check, need, passed

cp, np = need("cupy", "numpy")
from cupy.cuda import runtime, texture  # noqa: E402

h, w = 64, 96
host = np.random.default_rng(0).random((h, w), dtype=np.float32)
desc = texture.ChannelFormatDescriptor(32, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
arr = texture.CUDAarray(desc, w, h)
arr.copy_from(host)
res = texture.ResourceDescriptor(runtime.cudaResourceTypeArray, cuArr=arr)
tex = texture.TextureDescriptor((runtime.cudaAddressModeClamp, runtime.cudaAddressModeClamp),
                                runtime.cudaFilterModePoint, runtime.cudaReadModeElementType)
obj = texture.TextureObject(res, tex)
kernel = cp.RawKernel(r"""
extern "C" __global__ void fetch(cudaTextureObject_t t, float *out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = 2.0f * tex2D<float>(t, x + 0.5f, y + 0.5f);
}""", "fetch")
out = cp.zeros((h, w), dtype=cp.float32)
kernel(((w + 15) // 16, (h + 15) // 16), (16, 16), (obj, out, np.int32(w), np.int32(h)))
got = cp.asnumpy(out)
check(np.array_equal(got, 2 * host), "texture fetch: %d of %d values differ" % (int((got != 2 * host).sum()), h * w))
passed("a %dx%d float texture read by a kernel" % (h, w))
