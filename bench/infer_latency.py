"""A latency-critical inference program (issue 12): torchvision's ResNet-18 (else a stand-in CNN), fp16,
batch 1, in eval mode; after 50 warm-up requests it serves INFER_RATE requests a second (default 100) for
INFER_DURATION seconds (default 20), each request an input copied in, a forward pass and a synchronize,
timed on the host. With INFER_READY set, that file is created once warm; with INFER_GO set, the timed
requests wait until that file exists. With INFER_SAMPLES set, every request's latency (ms) is appended to
that file, a line each (bench/latency_torch.sh pools rounds). Python's garbage collector is off while the
requests are timed (its pauses are the host's, in every mode alike). Prints one line:
INFER model=M requests=N p50_ms=X p99_ms=Y max_ms=Z"""
import gc
import os
import sys
import time

import torch

from bench_models import model_or_standin

if not torch.cuda.is_available():
    print("SKIP infer_latency: no CUDA device")
    sys.exit(77)
torch.backends.cudnn.benchmark = True
model, kind = model_or_standin("resnet18")
model = model.cuda().half().eval()
host = torch.randn(1, 3, 224, 224).half().pin_memory()
dev = torch.empty(1, 3, 224, 224, device="cuda", dtype=torch.half)


def request():
    dev.copy_(host, non_blocking=True)
    with torch.no_grad():
        out = model(dev)
    torch.cuda.synchronize()
    return out


for _ in range(50):
    ref = request()
ref = ref.float().cpu()
if os.environ.get("INFER_READY"):
    open(os.environ["INFER_READY"], "w").close()
go = os.environ.get("INFER_GO")
while go and not os.path.exists(go):
    time.sleep(0.01)
rate = float(os.environ.get("INFER_RATE", "100"))
duration = float(os.environ.get("INFER_DURATION", "20"))
lat = []
gc.collect()
gc.disable()
t0 = time.perf_counter()
n = 0
while True:
    due = t0 + n / rate
    now = time.perf_counter()
    if due - t0 >= duration:
        break
    if due > now:
        time.sleep(due - now)
    t = time.perf_counter()
    out = request()
    lat.append((time.perf_counter() - t) * 1e3)
    n += 1
gc.enable()
if os.environ.get("INFER_SAMPLES"):
    with open(os.environ["INFER_SAMPLES"], "a") as f:
        f.write("".join("%.4f\n" % x for x in lat))
# The same input must give the same answer throughout (within fp16's rounding).
if not torch.allclose(out.float().cpu(), ref, rtol=1e-2, atol=1e-2):
    print("FAIL infer_latency: the last answer differs from the first")
    sys.exit(1)
lat.sort()
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print("INFER model=%s requests=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f" % (kind, len(lat), p(0.5), p(0.99), lat[-1]))
