"""Two PyTorch processes sharing one pool on a GPU (`CURESV_POOL`, `CURESV_MODE=enforce`,
`CURESV_CAPACITY`): this process starts a second one under the same environment, which takes
4 GiB and waits. Then:
  - this process asks for 4 GiB more than the pool's capacity leaves: the pool refuses it (PyTorch's
    out-of-memory error), although the device itself has room;
  - the second process is killed with SIGKILL: the driver frees its memory (its own view,
    torch.cuda.mem_get_info() without CURESV_MEMINFO, shows the 4 GiB back), and the pool gives
    its bytes back before answering the next allocation, which now succeeds.
The exit report's `pool` key holds the refusal, one member, and nothing live once the tensors are
freed (torch_pool's check in tests/integration/run.py). Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (each tensor its own
cudaMalloc) and CURESV_CAPACITY a little over 6 GiB. Prints "torch_pool: ok", or what failed."""
import os
import signal
import subprocess
import sys

import torch

GiB = 1 << 30
failures = []


def check(what, ok, detail=""):
    if not ok:
        failures.append("%s%s" % (what, ": " + detail if detail else ""))


def victim():
    torch.cuda.init()
    t = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
    t.fill_(1)
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()  # until killed
    return 0


def try_4g():
    try:
        t = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
        t.fill_(2)
        torch.cuda.synchronize()
        return t
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        # without the caching allocator, a refused cudaMalloc is a RuntimeError
        if "out of memory" not in str(e):
            raise
        return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "victim":
        return victim()
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    v = subprocess.Popen([sys.executable, os.path.abspath(__file__), "victim"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = v.stdout.readline().strip()
    check("the second process took its 4 GiB", line == "ready", repr(line))
    free1, _ = torch.cuda.mem_get_info()
    check("the driver shows the second process's 4 GiB", free0 - free1 >= 4 * GiB,
          "free %d -> %d" % (free0, free1))
    check("the device itself has room for 4 GiB more", free1 > 5 * GiB, "free %d" % free1)
    t = try_4g()
    check("the pool refuses 4 GiB past its capacity while the other holds its 4 GiB", t is None)
    del t
    v.send_signal(signal.SIGKILL)
    v.wait()
    free2, _ = torch.cuda.mem_get_info()
    check("the driver gave the killed process's memory back", free2 - free1 >= 4 * GiB,
          "free %d -> %d" % (free1, free2))
    kept = try_4g()
    check("after the kill, the pool admits the 4 GiB", kept is not None)
    free3, _ = torch.cuda.mem_get_info()
    check("the driver's view agrees: 4 GiB more in use", free2 - free3 >= 4 * GiB,
          "free %d -> %d" % (free2, free3))
    if failures:
        print("torch_pool: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("torch_pool: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
