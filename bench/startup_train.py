"""Start-up of a PyTorch training program, as a user meets it: from the interpreter's start (the caller
passes its clock in STARTUP_T0) to the end of 15 warm-up steps of a ResNet-50 (torchvision's, else a
stand-in CNN of the same shape of work) with cuDNN's benchmark mode on, batch 32 of 224x224 images.
Then timed steps: 20, or for STARTUP_DURATION seconds. STARTUP_BATCH: another batch size (bench/latency_torch.sh
trains with 64). With STARTUP_READY set, that file is created once
warm; with STARTUP_GO set, the timed steps wait until that file exists (bench/startup.sh starts two
programs' timed steps together this way). STARTUP_CUDNN_BENCHMARK=0: cuDNN's heuristics instead of its
timed search (whose picks, timed while another program shares the GPU, may differ run to run).
STARTUP_PINNED=N: the batch comes from N pinned host buffers in turn (as a DataLoader with pin_memory=True
gives them), copied to the GPU without blocking before each step (bench/remote.sh: what pinned memory costs
a program across the network). Prints one line:
STARTUP model=M import=S model_ready=S first_step=S warm=S steps_per_s=N images_per_s=N"""
import os
import sys
import time

t0 = float(os.environ.get("STARTUP_T0", time.time()))
import torch  # noqa: E402
from bench_models import model_or_standin  # noqa: E402

t_import = time.time()
if not torch.cuda.is_available():
    print("SKIP startup_train: no CUDA device")
    sys.exit(77)
torch.backends.cudnn.benchmark = os.environ.get("STARTUP_CUDNN_BENCHMARK", "1") != "0"
model, kind = model_or_standin("resnet50")
model = model.cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
batch = int(os.environ.get("STARTUP_BATCH", "32"))
x = torch.randn(batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (batch,), device="cuda")
lossf = torch.nn.CrossEntropyLoss()
torch.cuda.synchronize()
t_model = time.time()


pinned = [torch.randn(batch, 3, 224, 224).pin_memory() for _ in range(int(os.environ.get("STARTUP_PINNED", "0")))]
steps_done = 0


def step():
    global steps_done
    if pinned:
        x.copy_(pinned[steps_done % len(pinned)], non_blocking=True)
    steps_done += 1
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y)
    loss.backward()
    opt.step()
    return loss


step()
torch.cuda.synchronize()
t_step1 = time.time()
for _ in range(14):
    step()
torch.cuda.synchronize()
t_warm = time.time()
if os.environ.get("STARTUP_READY"):
    open(os.environ["STARTUP_READY"], "w").close()
print("WARM %.2f" % (t_warm - t0), flush=True)
go = os.environ.get("STARTUP_GO")
while go and not os.path.exists(go):
    time.sleep(0.01)
duration = float(os.environ.get("STARTUP_DURATION", "0"))
t_timed = time.time()
steps = 0
while (steps < 20) if duration <= 0 else (time.time() - t_timed < duration):
    loss = step()
    steps += 1
    if duration > 0 and steps % 5 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
t_end = time.time()
if not torch.isfinite(loss).item():
    print("FAIL startup_train: the loss is not finite")
    sys.exit(1)
rate = steps / (t_end - t_timed)
print("STARTUP model=%s import=%.2f model_ready=%.2f first_step=%.2f warm=%.2f steps_per_s=%.2f images_per_s=%.1f"
      % (kind, t_import - t0, t_model - t0, t_step1 - t0, t_warm - t0, rate, rate * x.shape[0]))
