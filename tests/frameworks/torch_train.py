"""PyTorch training steps on the GPU against the same steps on the CPU: an MLP and a small convolutional
network (conv, batch norm, ReLU, pooling), SGD with momentum, 20 steps from the same initial weights; the
losses must agree."""
import copy

from fwcheck import check, close, need, passed

torch = need("torch")
check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
torch.backends.cuda.matmul.allow_tf32 = False  # the CPU reference computes in full float32
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)


def train(model, x, y, device, steps=20):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
x = torch.randn(512, 64)
y = torch.randint(0, 10, (512,))
cpu = train(copy.deepcopy(mlp), x, y, "cpu")
gpu = train(copy.deepcopy(mlp), x, y, "cuda")
close(gpu, cpu, 1e-3, "MLP losses, GPU against CPU")
check(gpu[-1] < gpu[0], "MLP loss did not go down: %r" % gpu)

cnn = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
    torch.nn.Linear(32, 10))
xi = torch.randn(64, 3, 32, 32)
yi = torch.randint(0, 10, (64,))
cpu = train(copy.deepcopy(cnn), xi, yi, "cpu", steps=10)
gpu = train(copy.deepcopy(cnn), xi, yi, "cuda", steps=10)
close(gpu, cpu, 2e-3, "CNN losses, GPU against CPU")
passed("MLP %.4f -> %.4f, CNN %.4f -> %.4f" % (cpu[0], cpu[-1], gpu[0], gpu[-1]))
