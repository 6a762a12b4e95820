"""Triton: a vector-add kernel against PyTorch."""
from fwcheck import check, close, need, passed

torch, triton = need("torch", "triton")
tl = need("triton.language")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


n = 98432
x = torch.rand(n, device="cuda")
y = torch.rand(n, device="cuda")
out = torch.empty_like(x)
add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
torch.cuda.synchronize()
close(out[::97].tolist(), (x + y)[::97].tolist(), 1e-6, "triton add")
passed("%d elements" % n)
