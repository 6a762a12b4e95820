"""torch.compile, default mode and mode="reduce-overhead" (CUDA graphs), against eager execution."""
from fwcheck import check, close, need, passed

torch = need("torch")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 512)
        self.b = torch.nn.Linear(512, 256)

    def forward(self, x):
        return torch.nn.functional.layer_norm(x + self.b(torch.nn.functional.gelu(self.a(x))), (256,))


model = Block().cuda().eval()
x = torch.randn(64, 256, device="cuda")
with torch.no_grad():
    want = model(x)
    for mode in ("default", "reduce-overhead"):
        f = torch.compile(model, mode=mode)
        for _ in range(3):  # compile, then warm up (reduce-overhead records its graph on a later call)
            got = f(x)
        torch.cuda.synchronize()
        close(got.flatten()[:4096].tolist(), want.flatten()[:4096].tolist(), 1e-3, "torch.compile mode=%s" % mode)
        x2 = torch.randn(64, 256, device="cuda")
        close(f(x2).flatten()[:4096].tolist(), model(x2).flatten()[:4096].tolist(), 1e-3,
              "torch.compile mode=%s, new input" % mode)
passed("default and reduce-overhead agree with eager")
