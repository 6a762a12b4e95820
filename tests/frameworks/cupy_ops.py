"""CuPy: a raw CUDA kernel, an FFT and reductions against NumPy."""
from fwcheck import close, need, passed

cp, np = need("cupy", "numpy")
add = cp.RawKernel(r'''
extern "C" __global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + 2.0f * b[i];
}''', "add")
n = 1 << 20
a = cp.random.rand(n, dtype=cp.float32)
b = cp.random.rand(n, dtype=cp.float32)
c = cp.empty_like(a)
add(((n + 255) // 256,), (256,), (a, b, c, cp.int32(n)))
ha, hb = cp.asnumpy(a), cp.asnumpy(b)
close(cp.asnumpy(c)[::4099].tolist(), (ha + 2 * hb)[::4099].tolist(), 1e-6, "raw kernel")
x = np.random.default_rng(1).standard_normal(4096)
close(np.abs(cp.asnumpy(cp.fft.fft(cp.asarray(x))))[::37].tolist(), np.abs(np.fft.fft(x))[::37].tolist(), 1e-9,
      "FFT")
close(float(cp.asarray(x).sum()), float(x.sum()), 1e-9, "sum")
passed("raw kernel, FFT, sum")
