"""PyTorch hand-off: a producer thread named "scan" makes CUDA tensors, a consumer thread named "pipe"
frees them. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own cudaMalloc/cudaFree.
Prints a checksum that must be identical with and without curesv, and "tensors=N bytes=B"."""
import ctypes
import queue
import threading

import torch

TENSORS, ELEMENTS = 64, 20 * 1024  # float32: 80 KiB each
libc = ctypes.CDLL(None)


def name_thread(name):
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def main():
    torch.cuda.init()
    handoff = queue.Queue()
    sums = []

    def producer():
        name_thread("scan")
        gen = torch.Generator(device="cuda").manual_seed(1234)
        for _ in range(TENSORS):
            handoff.put(torch.rand(ELEMENTS, device="cuda", generator=gen))
        handoff.put(None)

    def consumer():
        name_thread("pipe")
        while (t := handoff.get()) is not None:
            sums.append(t.double().sum().item())
            del t

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    print("checksum=%.6f tensors=%d bytes=%d" % (sum(sums), len(sums), ELEMENTS * 4))


if __name__ == "__main__":
    main()
