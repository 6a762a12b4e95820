"""numba-cuda: a @cuda.jit kernel (PTX compiled by numba, linked and loaded through the driver API) with
a device array and a reduction, checked against NumPy."""
from fwcheck import check, close, need, passed

np = need("numpy")
if not hasattr(np, "row_stack"):
    # NumPy 2.4 removed row_stack, which numba-cuda's array typing still names when it loads: the same
    # function under its other name lets that numba run here (nothing of this test uses it).
    np.row_stack = np.vstack
numba_cuda = need("numba.cuda")
check(numba_cuda.is_available(), "numba.cuda.is_available() is False")


@numba_cuda.jit
def saxpy(a, x, y, out):
    i = numba_cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


n = 1 << 20
rng = np.random.default_rng(0)
x = rng.random(n, dtype=np.float32)
y = rng.random(n, dtype=np.float32)
dx, dy = numba_cuda.to_device(x), numba_cuda.to_device(y)
dout = numba_cuda.device_array_like(x)
saxpy[(n + 255) // 256, 256](np.float32(2.5), dx, dy, dout)
got = dout.copy_to_host()
check(np.allclose(got, 2.5 * x + y, rtol=1e-6), "saxpy differs from NumPy")


@numba_cuda.reduce
def total(a, b):
    return a + b


close(total(dx), float(x.astype(np.float64).sum()), 1e-4, "reduction")
passed("saxpy of %d elements and a reduction" % n)
