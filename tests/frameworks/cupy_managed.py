"""CuPy with managed memory (cuMemAllocManaged): the GPU writes, the CPU reads the same pointer."""
from fwcheck import close, need, passed

cp, np = need("cupy", "numpy")
cp.cuda.set_allocator(cp.cuda.MemoryPool(cp.cuda.malloc_managed).malloc)
a = cp.arange(1 << 20, dtype=cp.float32)
b = a * 3
cp.cuda.Device().synchronize()
close(cp.asnumpy(b)[::1001].tolist(), (np.arange(1 << 20, dtype=np.float32) * 3)[::1001].tolist(), 1e-6,
      "managed memory")
passed("4 MiB of managed memory")
