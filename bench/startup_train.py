"""Start-up of a PyTorch training program, as a user meets it: from the interpreter's start (the caller
passes its clock in STARTUP_T0) to the end of 15 warm-up steps of a ResNet-50 (torchvision's, else a
stand-in CNN of the same shape of work) with cuDNN's benchmark mode on, batch 32 of 224x224 images.
Then 20 timed steps. Prints one line: STARTUP import=S model=S first_step=S warm=S steps_per_s=N."""
import os
import sys
import time

t0 = float(os.environ.get("STARTUP_T0", time.time()))
import torch  # noqa: E402

t_import = time.time()
if not torch.cuda.is_available():
    print("SKIP startup_train: no CUDA device")
    sys.exit(77)
torch.backends.cudnn.benchmark = True
try:
    import torchvision

    model = torchvision.models.resnet50()
    kind = "resnet50"
except ImportError:
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          *[nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU()) for _ in range(8)],
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1000))
    kind = "cnn"
model = model.cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(32, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (32,), device="cuda")
lossf = torch.nn.CrossEntropyLoss()
torch.cuda.synchronize()
t_model = time.time()


def step():
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
for _ in range(20):
    loss = step()
torch.cuda.synchronize()
t_end = time.time()
if not torch.isfinite(loss).item():
    print("FAIL startup_train: the loss is not finite")
    sys.exit(1)
print("STARTUP model=%s import=%.2f model_ready=%.2f first_step=%.2f warm=%.2f steps_per_s=%.1f"
      % (kind, t_import - t0, t_model - t0, t_step1 - t0, t_warm - t0, 20 / (t_end - t_warm)))
