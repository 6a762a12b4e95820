"""torch.cuda.graph: capture matmuls on a side stream (as PyTorch's documentation does), replay with new
inputs copied into the static tensors, compare with eager results."""
from fwcheck import check, close, need, passed

torch = need("torch")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)

a = torch.randn(256, 256, device="cuda")
w1 = torch.randn(256, 256, device="cuda")
w2 = torch.randn(256, 256, device="cuda")
static_in = torch.randn(256, 256, device="cuda")

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):  # warm-up on the side stream, as the documentation asks
        static_out = torch.relu(static_in @ w1) @ w2 + a
torch.cuda.current_stream().wait_stream(s)

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_out = torch.relu(static_in @ w1) @ w2 + a

for k in range(3):
    x = torch.randn(256, 256, device="cuda")
    static_in.copy_(x)
    g.replay()
    torch.cuda.synchronize()
    want = torch.relu(x @ w1) @ w2 + a
    close(static_out.flatten()[::97].tolist(), want.flatten()[::97].tolist(), 1e-3, "replay %d" % k)
passed("3 replays agree with eager")
