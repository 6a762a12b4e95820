"""PyTorch under a device memory limit (tests/test_mem_limit.sh runs it as `cumux run --memory 4G -- python3
torch_mem_limit.py 4`; not part of the suite, which also runs natively): torch.cuda.mem_get_info shows the
limit, tensors up to it compute right, one past it raises torch.OutOfMemoryError, and after that the
program goes on. With the expandable-segments allocator (VMM) as well, when its second argument is
"expandable"."""
import os
import sys

if len(sys.argv) > 2 and sys.argv[2] == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
from fwcheck import check, close, need, passed  # noqa: E402

torch = need("torch")
check(len(sys.argv) > 1, "usage: torch_mem_limit.py GIB [expandable]")
gib = int(sys.argv[1])
limit = gib << 30
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
free, total = torch.cuda.mem_get_info()
check(total == limit, "mem_get_info total %d, want the limit %d" % (total, limit))
check(free <= limit, "mem_get_info free %d is more than the limit %d" % (free, limit))
props = torch.cuda.get_device_properties(0)
check(props.total_memory == limit, "total_memory %d, want the limit %d" % (props.total_memory, limit))
# Three quarters of the limit in 256 MiB tensors, each computed on.
n = (256 << 20) // 4
keep = []
for i in range(gib * 3):
    t = torch.full((n,), float(i + 1), device="cuda")
    close(t.sum().item(), float(i + 1) * n, 1e-5, "sum of tensor %d" % i)
    keep.append(t)
held = torch.cuda.memory_allocated()
free, _ = torch.cuda.mem_get_info()
check(free <= limit - held, "free %d with %d held under a %d limit" % (free, held, limit))
# Past the limit: out of memory, and the program goes on.
try:
    torch.empty(limit // 2, dtype=torch.uint8, device="cuda")
    check(False, "a tensor of half the limit more was allocated")
except torch.OutOfMemoryError:
    pass
del keep[: gib * 2]
torch.cuda.empty_cache()
t = torch.ones(limit // 4 // 4, device="cuda")
close(t.sum().item(), float(limit // 16), 1e-5, "sum of ones after the out-of-memory error")
passed("limit %d GiB seen, %d MiB held, out of memory past it" % (gib, held >> 20))
