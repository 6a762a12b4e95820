"""The models of the PyTorch benchmarks (startup_train.py, infer_latency.py): torchvision's, else a stand-in
CNN of the same shape of work where torchvision is missing."""
import torch


def model_or_standin(name):
    """torchvision.models.NAME() and NAME, or the stand-in and "cnn"."""
    try:
        import torchvision

        return getattr(torchvision.models, name)(), name
    except ImportError:
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                              *[nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU())
                                for _ in range(8)],
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1000))
        return model, "cnn"
