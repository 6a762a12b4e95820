"""Where a GPU-bound PyTorch training loses time under cumux against natively (issue 9): one program alone.
Run it natively and under `cumux run` and compare the lines (bench/efficiency.sh does both, alternating).
Parts (EFF_PARTS, default "attrs mm bw tiny eager graph profile"):
  attrs    the driver version and every device attribute the driver answers, and cuMemGetInfo: heuristics in
           cuBLAS and cuDNN choose kernels from these, so any difference picks other kernels
  mm       a bf16 8192^3 matrix product in a loop (few launches, all GPU): TFLOP/s
  eager    ResNet-50 training, batch EFF_BATCH (128), EFF_SECONDS (8) after warm-up: images/s
  graph    the same step captured in a CUDA graph and replayed: one launch per step, so what is left of a
           gap is in the kernels themselves (the memory they touch, the kernels chosen), not in launching
  bw       an in-place add over 1 GiB of floats: TB/s (memory-bound kernels: the pages under them)
  tiny     a CUDA graph of 2,000 kernels on 1,024 floats each, replayed: microseconds per kernel (what the
           GPU spends between kernels)
  profile  torch.profiler over 3 eager steps: kernels' summed GPU time per step against the step's time,
           the kernels taking the most (where the profiler works)
Prints lines "EFF part key=value ..."."""
import ctypes
import os
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
parts = os.environ.get("EFF_PARTS", "attrs mm bw tiny eager graph profile").split()
seconds = float(os.environ.get("EFF_SECONDS", "8"))
batch = int(os.environ.get("EFF_BATCH", "128"))
if not torch.cuda.is_available():
    print("SKIP efficiency: no CUDA device")
    sys.exit(77)
torch.cuda.init()


def attrs():
    cu = ctypes.CDLL("libcuda.so.1")
    v = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(v))
    out = ["driver=%d" % v.value]
    for a in range(1, 256):
        x = ctypes.c_int()
        if cu.cuDeviceGetAttribute(ctypes.byref(x), a, 0) == 0:
            out.append("%d=%d" % (a, x.value))
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    print("EFF attrs", " ".join(out))
    print("EFF meminfo free=%d total=%d" % (free.value, total.value))


def timed(fn, secs, name=None):
    """Calls fn until secs have passed (synchronizing every EFF_SYNC_EVERY calls, default 5, as
    bench/startup_train.py); calls/s. With a name, also the GPU's idle time across each synchronize: an
    event after the last call before it to one before the first call after it (what the synchronize's
    return and the next call's arrival cost on the GPU's clock)."""
    every = int(os.environ.get("EFF_SYNC_EVERY", "5"))
    torch.cuda.synchronize()
    gaps = []
    last = None
    t0 = time.time()
    n = 0
    while time.time() - t0 < secs:
        if name and n % every == 0:
            first = torch.cuda.Event(enable_timing=True)
            first.record()
            if last is not None:
                gaps.append((last, first))
        fn()
        n += 1
        if n % every == 0:
            if name:
                last = torch.cuda.Event(enable_timing=True)
                last.record()
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    rate = n / (time.time() - t0)
    if name and gaps:
        us = sorted(a.elapsed_time(b) * 1e3 for a, b in gaps)
        print("EFF gaps part=%s syncs=%d every=%d us_median=%.1f us_mean=%.1f us_max=%.1f" %
              (name, len(us), every, us[len(us) // 2], sum(us) / len(us), us[-1]))
    return rate


def mm():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = a @ b
    ref = (a[:64].float() @ b[:, :64].float())
    if not torch.allclose(c[:64, :64].float(), ref, rtol=2e-2, atol=1.0):
        print("FAIL efficiency mm: wrong product")
        sys.exit(1)
    rate = timed(lambda: torch.mm(a, b, out=c), min(seconds, 4))
    print("EFF mm tflops=%.1f" % (rate * 2 * 8192**3 / 1e12))


def bw():
    a = torch.ones(256 << 20, device="cuda")
    rate = timed(lambda: a.add_(1.0), min(seconds, 3))
    if a[-1].item() < 2:
        print("FAIL efficiency bw: nothing added")
        sys.exit(1)
    print("EFF bw tbps=%.3f" % (rate * 2 * a.numel() * 4 / 1e12))


def tiny():
    a = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        a.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(2000):
            a.add_(1.0)
    torch.cuda.synchronize()
    a.zero_()
    rate = timed(g.replay, min(seconds, 3))
    torch.cuda.synchronize()
    if a[0].item() < 2000:
        print("FAIL efficiency tiny: %g, not a multiple of 2000" % a[0].item())
        sys.exit(1)
    print("EFF tiny us_per_kernel=%.3f" % (1e6 / rate / 2000))


def model_parts():
    from bench_models import model_or_standin
    torch.backends.cudnn.benchmark = os.environ.get("EFF_CUDNN_BENCHMARK", "1") != "0"
    model, kind = model_or_standin("resnet50")
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return model, opt, x, y, torch.nn.CrossEntropyLoss()


def eager_step(model, opt, x, y, lossf):
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
    return loss


def eager():
    m = model_parts()
    for _ in range(15):
        loss = eager_step(*m)
    rate = timed(lambda: eager_step(*m), seconds, "eager")
    if not torch.isfinite(loss).item():
        print("FAIL efficiency eager: loss not finite")
        sys.exit(1)
    print("EFF eager images_per_s=%.1f" % (rate * batch))


def graph():
    model, opt, x, y, lossf = model_parts()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(15):
            eager_step(model, opt, x, y, lossf)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
    rate = timed(g.replay, seconds, "graph")
    if not torch.isfinite(loss).item():
        print("FAIL efficiency graph: loss not finite")
        sys.exit(1)
    print("EFF graph images_per_s=%.1f" % (rate * batch))


def profile():
    m = model_parts()
    for _ in range(15):
        eager_step(*m)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile as prof
    try:
        with prof(activities=[ProfilerActivity.CUDA]) as p:
            t0 = time.time()
            for _ in range(3):
                eager_step(*m)
            torch.cuda.synchronize()
            wall = (time.time() - t0) / 3
    except Exception as e:  # the profiler's own failure is a finding, not this script's
        print("EFF profile failed=%s" % type(e).__name__)
        return
    ev = [e for e in p.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.device_time_total for e in ev) / 3
    n = sum(e.count for e in ev) / 3
    print("EFF profile step_ms=%.2f kernels_ms=%.2f kernels_per_step=%d" % (wall * 1e3, total_us / 1e3, n))
    for e in sorted(ev, key=lambda e: -e.device_time_total)[:int(os.environ.get("EFF_TOP", "12"))]:
        print("EFF kernel us_per_step=%.0f count=%d us_each=%.2f name=%s" % (
            e.device_time_total / 3, e.count // 3, e.device_time_total / max(e.count, 1),
            e.key[:90].replace(" ", "_")))


# EFF_STREAM=side: every part on a stream of its own (non-blocking, as a PyTorch stream is) instead of the
# legacy default stream; under cumux a client's legacy stream is a non-blocking stream of the server's, so
# run natively this tells whether the kind of stream alone changes the GPU's speed. EFF_STREAM=high: the
# same at priority -1, where a normal-class cumux client's streams run (common/priority.c).
side = os.environ.get("EFF_STREAM", "")
stream = torch.cuda.Stream(priority=-1 if side == "high" else 0) if side else torch.cuda.current_stream()
with torch.cuda.stream(stream):
    for part in parts:
        globals()[part]()
        torch.cuda.empty_cache()
