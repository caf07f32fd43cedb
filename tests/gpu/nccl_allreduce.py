"""A single-rank NCCL all-reduce through torch.distributed (world size 1, TCP rendezvous on a free
port of 127.0.0.1). With NCCL_CUMEM_ENABLE=1, NCCL 2.19 and later make their buffers with
cuMemCreate; destroy_process_group() gives them back.

stdout: a checksum, the same with and without curesv. stderr: "nccl_allreduce: nccl=VERSION" and,
when curesv is loaded, "nccl_allreduce: after_destroy_process_group device_allocated=N allocs=N
frees=N" (device 0's shared pool, through the curesv module, after destroy_process_group() and
torch.cuda.empty_cache())."""
import socket
import sys

import torch
import torch.distributed as dist

try:
    import curesv  # scripts/curesv.py, on PYTHONPATH
except ImportError:
    curesv = None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1,
                            init_method="tcp://127.0.0.1:%d" % free_port())
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    checksum = t.sum().item()
    dist.destroy_process_group()
    del t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    print("checksum=%.1f" % checksum)
    version = torch.cuda.nccl.version()
    print("nccl_allreduce: nccl=%s" % (".".join(map(str, version)) if isinstance(version, tuple)
                                       else version), file=sys.stderr)
    if curesv is not None and curesv.available():
        p = curesv.pool_stats(0)
        print("nccl_allreduce: after_destroy_process_group device_allocated=%d allocs=%d frees=%d "
              "reserved=%d" % (p["device_allocated"], p["allocs"], p["frees"],
                               torch.cuda.memory_reserved()), file=sys.stderr)


if __name__ == "__main__":
    main()
