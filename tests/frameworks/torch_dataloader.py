"""A DataLoader with worker processes and pinned memory feeding the GPU; the sums match the CPU's."""
from fwcheck import check, close, need, passed

torch = need("torch")


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(1024, generator=g)


if __name__ == "__main__":
    check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
    loader = torch.utils.data.DataLoader(Data(), batch_size=32, num_workers=2, pin_memory=True)
    gpu_total, cpu_total = 0.0, 0.0
    for batch in loader:
        check(batch.is_pinned(), "a batch is not in pinned memory")
        gpu_total += batch.cuda(non_blocking=True).double().sum().item()
        cpu_total += batch.double().sum().item()
    close(gpu_total, cpu_total, 1e-9, "sum over all batches")
    passed("8 batches through 2 workers, pinned")
