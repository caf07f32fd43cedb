"""PyTorch through the curesv Python module (scripts/curesv.py), under the shim: the program reserves
"scan" and "pipe" itself, names its threads and attaches them with the module, a producer makes CUDA
tensors under "scan" and a consumer frees them under "pipe"; then a tensor made on the main thread
is transferred to "pipe" by its data_ptr(). Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so every
tensor is its own cudaMalloc/cudaFree, and PYTHONPATH holding scripts/.
Prints "torch_module: ok tensors=N bytes=B", or what failed."""
import queue
import sys
import threading

import torch

import curesv

TENSORS, ELEMENTS = 64, 20 * 1024  # float32: 80 KiB each
GiB = 1 << 30
failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


def main():
    if not curesv.available():
        print("torch_module: libcuresv.so is not loaded")
        return 1
    torch.cuda.init()
    curesv.reserve("scan", GiB)
    curesv.reserve("pipe", GiB)
    handoff = queue.Queue()
    sums = []

    def producer():
        curesv.name_thread("scan")
        with curesv.attached("scan"):
            gen = torch.Generator(device="cuda").manual_seed(1234)
            for _ in range(TENSORS):
                handoff.put(torch.rand(ELEMENTS, device="cuda", generator=gen))
            torch.cuda.synchronize()
        handoff.put(None)

    def consumer():
        curesv.name_thread("pipe")
        curesv.attach("pipe")
        # Held until the producer is done: a tensor taken off the queue while the producer's put()
        # still holds its argument could otherwise be freed by the producer, whichever ref is last.
        held = []
        while (t := handoff.get()) is not None:
            held.append(t)
        del t
        for t in held:
            sums.append(t.double().sum().item())
        del t
        held.clear()
        torch.cuda.synchronize()

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()

    scan, pipe = curesv.stats("scan"), curesv.stats("pipe")
    check("scan allocs %d >= %d" % (scan["allocs"], TENSORS), scan["allocs"] >= TENSORS)
    check("scan cross_thread_frees %d >= %d" % (scan["cross_thread_frees"], TENSORS),
          scan["cross_thread_frees"] >= TENSORS)
    check("scan allocated %d == 0" % scan["allocated"], scan["allocated"] == 0)
    check("scan peak %d >= one tensor" % scan["peak"], scan["peak"] >= ELEMENTS * 4)
    check("pipe caller_view %d <= %d" % (pipe["caller_view"], -TENSORS * ELEMENTS * 4),
          pipe["caller_view"] <= -TENSORS * ELEMENTS * 4)

    # A tensor of the main thread (shared pool) handed to "pipe" by its address.
    x = torch.ones(ELEMENTS, device="cuda")
    before = curesv.stats("pipe")
    curesv.transfer(x, "pipe")
    after = curesv.stats("pipe")
    check("transfer: transfers_in %d -> %d" % (before["transfers_in"], after["transfers_in"]),
          after["transfers_in"] == before["transfers_in"] + 1)
    check("transfer: allocated grew by %d" % (after["allocated"] - before["allocated"]),
          after["allocated"] - before["allocated"] >= ELEMENTS * 4)
    del x
    torch.cuda.synchronize()
    check("pipe allocated %d == 0 after the free" % curesv.stats("pipe")["allocated"],
          curesv.stats("pipe")["allocated"] == 0)

    pool = curesv.pool_stats(torch.cuda.current_device())
    check("capacity %d is the device's memory" % pool["capacity"],
          pool["capacity"] == torch.cuda.get_device_properties(0).total_memory)
    check("reserved %d == 2 GiB" % pool["reserved"], pool["reserved"] == 2 * GiB)

    try:
        curesv.attach_stream(torch.cuda.Stream(), "pipe")
    except curesv.Unavailable:
        pass  # a libcuresv.so without curesv_attach_stream
    try:
        curesv.stats("nosuch")
        failures.append("stats('nosuch') did not raise")
    except curesv.CuresvError as err:
        check("error name %s" % err.name, err.name == "CURESV_ERR_UNKNOWN_NAME")

    if failures:
        print("torch_module: FAILED: " + "; ".join(failures))
        return 1
    print("torch_module: ok tensors=%d bytes=%d checksum=%.6f" % (len(sums), ELEMENTS * 4,
                                                                 sum(sums)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
