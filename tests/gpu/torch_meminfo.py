"""torch.cuda.mem_get_info() under `curesv --meminfo budget --reserve model=2G --attach
'python*=model'`: the main thread (named after the program) is attached to reservation "model",
so PyTorch's own view of the device (cudaMemGetInfo, which the runtime reaches through
cuGetProcAddress) is the reservation: total 2 GiB, free what is left of it after each tensor, 0
once past it (observe mode lets the allocation through). A thread with no reservation sees the
device's shared pool: its memory less the reservation. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1
(each tensor its own cudaMalloc) and PYTHONPATH holding scripts/ (the curesv module reads what is
charged). Prints "torch_meminfo: ok", or what failed."""
import ctypes
import sys
import threading

import torch

import curesv

MiB, GiB = 1 << 20, 1 << 30
failures = []


def check(what, got, want):
    if got != want:
        failures.append("%s: got %r, want %r" % (what, got, want))


def main():
    if not curesv.available():
        print("torch_meminfo: libcuresv.so is not loaded")
        return 1
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    charged = curesv.stats("model")["allocated"]
    check("total, attached", total, 2 * GiB)
    check("free, attached", free, 2 * GiB - charged)

    a = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    free2, total2 = torch.cuda.mem_get_info()
    check("total after 256 MiB", total2, 2 * GiB)
    check("free after 256 MiB", free - free2, 256 * MiB)

    b = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")  # past the budget: observe mode
    check("free past the budget", torch.cuda.mem_get_info(), (0, 2 * GiB))

    seen = {}

    def unattached():
        # a new thread is named after the one that made it ("python3", which the rule
        # matches): named otherwise before its first CUDA call, no rule attaches it
        ctypes.CDLL(None).prctl(15, b"unattached", 0, 0, 0)  # PR_SET_NAME
        seen.update(info=torch.cuda.mem_get_info())

    t = threading.Thread(target=unattached)
    t.start()
    t.join()
    device_total = torch.cuda.get_device_properties(0).total_memory
    shared = curesv.pool_stats(0)
    check("unattached total: the shared pool", seen["info"][1], device_total - 2 * GiB)
    # free: the shared pool less what it holds, never past what the driver has free
    if not 0 <= seen["info"][0] <= min(seen["info"][1], shared["available"]):
        failures.append("unattached free %d not within 0..%d" % (seen["info"][0],
                                                                 shared["available"]))
    del a, b
    torch.cuda.synchronize()
    check("free once freed", torch.cuda.mem_get_info()[0],
          2 * GiB - curesv.stats("model")["allocated"])
    if failures:
        print("torch_meminfo: FAILED: " + "; ".join(failures))
        return 1
    print("torch_meminfo: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
