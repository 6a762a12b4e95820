"""torch.multiprocessing: a CUDA tensor shared with a child process (CUDA IPC), which adds 1 in place; the
parent sees the change."""
from fwcheck import check, need, passed

torch = need("torch")
mp = need("torch.multiprocessing")


def child(q, done):
    t = q.get()
    t.add_(1)
    torch.cuda.synchronize()
    done.put(float(t.sum().item()))


if __name__ == "__main__":
    check(torch.cuda.is_available(), "torch.cuda.is_available() is False")
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Queue()
    t = torch.zeros(1 << 20, device="cuda")
    p = ctx.Process(target=child, args=(q, done))
    p.start()
    q.put(t)
    s = done.get(timeout=60)
    p.join(60)
    check(p.exitcode == 0, "the child exited %r" % p.exitcode)
    check(s == float(1 << 20), "the child saw sum %r" % s)
    torch.cuda.synchronize()
    check(float(t.sum().item()) == float(1 << 20), "the parent sees sum %r after the child added 1" % t.sum().item())
    passed("a 4 MiB tensor shared both ways")
