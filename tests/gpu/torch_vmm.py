"""PyTorch's caching allocator under curesv, as it runs by default (cudaMalloc segments) or with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grown with cuMemCreate and cuMemMap,
handed back with cuMemUnmap and cuMemRelease). Makes and frees tensors of several sizes, then
empties the cache.

stdout: a checksum, the same with and without curesv. stderr: "torch_vmm: reserved max=N"
(torch.cuda.max_memory_reserved()) and, when curesv is loaded, "torch_vmm: after_empty_cache
device_allocated=N allocs=N frees=N" (device 0's shared pool, read through the curesv module right
after torch.cuda.empty_cache())."""
import sys

import torch

try:
    import curesv  # scripts/curesv.py, on PYTHONPATH
except ImportError:
    curesv = None

MIB = 1 << 20
SIZES_MIB = (1, 3, 8, 30, 2, 64, 5, 17)


def tensor(mib, value):
    return torch.full((mib * MIB // 4,), float(value), dtype=torch.float32, device="cuda")


def main():
    torch.cuda.init()
    total = 0.0
    kept = []
    for i, mib in enumerate(SIZES_MIB):
        kept.append(tensor(mib, i + 1))
        total += kept[-1].sum().item()
    del kept[::2]  # holes in the segments, reused by what follows
    for i, mib in enumerate((16, 40, 2)):
        kept.append(tensor(mib, 0.5 * (i + 1)))
        total += kept[-1].sum().item()
    torch.cuda.synchronize()
    kept.clear()
    reserved = torch.cuda.max_memory_reserved()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    print("checksum=%.1f tensors=%d" % (total, len(SIZES_MIB) + 3))
    print("torch_vmm: reserved max=%d" % reserved, file=sys.stderr)
    if curesv is not None and curesv.available():
        p = curesv.pool_stats(0)
        print("torch_vmm: after_empty_cache device_allocated=%d allocs=%d frees=%d reserved=%d"
              % (p["device_allocated"], p["allocs"], p["frees"], torch.cuda.memory_reserved()),
              file=sys.stderr)


if __name__ == "__main__":
    main()
