"""torch.cuda.graph with PyTorch's cudaMallocAsync allocator: tensors made during the capture are graph
memory (captured cudaMallocAsync/cudaFreeAsync, memory allocation and free nodes); replays with new inputs
compared with eager results, then empty_cache (cudaDeviceGraphMemTrim)."""
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
from fwcheck import check, close, need, passed  # noqa: E402

torch = need("torch")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
check(torch.cuda.get_allocator_backend() == "cudaMallocAsync",
      "allocator backend is %s" % torch.cuda.get_allocator_backend())
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)

w1 = torch.randn(256, 256, device="cuda")
w2 = torch.randn(256, 256, device="cuda")
static_in = torch.randn(256, 256, device="cuda")

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):  # warm-up on the side stream, as the documentation asks
        static_out = torch.tanh(static_in @ w1) @ w2
torch.cuda.current_stream().wait_stream(s)

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    # Temporaries (the product, the tanh) are allocated and freed inside the graph.
    static_out = torch.tanh(static_in @ w1) @ w2

for k in range(3):
    x = torch.randn(256, 256, device="cuda")
    static_in.copy_(x)
    g.replay()
    torch.cuda.synchronize()
    want = torch.tanh(x @ w1) @ w2
    close(static_out.flatten()[::97].tolist(), want.flatten()[::97].tolist(), 1e-3, "replay %d" % k)
out = static_out.clone()
del g, static_out
torch.cuda.synchronize()
torch.cuda.empty_cache()
check(torch.isfinite(out).all().item(), "the last replay's output is not finite after the graph went")
passed("3 replays of a graph with graph memory agree with eager; empty_cache after it")
