"""PyTorch's caching allocator with expandable segments (virtual memory management: cuMemCreate,
cuMemAddressReserve, cuMemMap, cuMemSetAccess): tensors of growing sizes, computed on and freed."""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
from fwcheck import check, close, need, passed  # noqa: E402

torch = need("torch")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
keep = []
total = 0
for i in range(12):
    n = (1 << 16) * (i + 1)
    t = torch.arange(n, device="cuda", dtype=torch.float32)
    s = (t * 2).sum().item()
    close(s, float(n) * (n - 1), 1e-4, "sum of 2*arange(%d)" % n)
    keep.append(t)
    total += n * 4
del keep[::2]
torch.cuda.empty_cache()
big = torch.ones(1 << 24, device="cuda")
close(big.sum().item(), float(1 << 24), 1e-6, "sum of 2^24 ones after freeing half")
check(torch.cuda.memory_reserved() > 0, "nothing reserved")
passed("%d MiB in growing tensors" % (total >> 20))
