"""PyTorch with its books published while it runs (CURESV_LIVE, read by curesv-stat): a thread named
"scan" makes CUDA tensors, a thread named "pipe" frees half of them; the program says what it holds
and waits for a line on stdin, frees the rest from the main thread, says "freed", waits again and
exits. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that each tensor is a cudaMalloc of its own.

    torch_live.py run [--ctypes]
        the program; --ctypes: cudaMalloc and cudaFree through ctypes, no PyTorch (the same
        pattern on any CUDA runtime: the simulated one of tests/sim too)
    torch_live.py check --lib libcuresv.so --scripts DIR [--ctypes]
        runs it under DIR/curesv --live, reads it with DIR/curesv-stat while it holds its tensors
        and once it freed them, and checks the snapshots against what it says it did and against
        its final report (scripts/gpu-check; tests/integration/live.py runs it with --ctypes)
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading

TENSORS, ELEMENTS = 16, 20 * 1024  # float32: 80 KiB each
BYTES = ELEMENTS * 4
libc = ctypes.CDLL(None)


def name_thread(name):
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def memory(use_ctypes):
    """(make one buffer, free one) on the GPU."""
    if use_ctypes:
        cudart = ctypes.CDLL("libcudart.so.13")

        def make():
            ptr = ctypes.c_void_p()
            if cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(BYTES)) != 0:
                raise SystemExit("torch_live: cudaMalloc failed")
            return ptr

        def drop(ptr):
            if cudart.cudaFree(ptr) != 0:
                raise SystemExit("torch_live: cudaFree failed")
        return make, drop, lambda: None
    import torch
    torch.cuda.init()
    return (lambda: torch.ones(ELEMENTS, device="cuda"), lambda t: None,
            torch.cuda.synchronize)


def run(use_ctypes):
    make, drop, sync = memory(use_ctypes)
    held = []

    def scan():
        name_thread("scan")
        for _ in range(TENSORS):
            held.append(make())
        sync()

    def pipe():
        name_thread("pipe")
        for _ in range(TENSORS // 2):
            drop(held.pop())  # a tensor's last reference, dropped here: its cudaFree is this thread's
        sync()

    for fn in (scan, pipe):
        t = threading.Thread(target=fn)
        t.start()
        t.join()
    print("held tensors=%d bytes=%d allocs=%d frees=%d" % (len(held), BYTES, TENSORS,
                                                           TENSORS // 2), flush=True)
    sys.stdin.readline()
    while held:
        drop(held.pop())
    sync()
    print("freed", flush=True)
    sys.stdin.readline()


def reservation(report, name):
    rows = [r for r in report["reservations"] if r["name"] == name and not r["released"]]
    if len(rows) != 1:
        raise SystemExit("torch_live: no reservation %r: %r" % (name, report["reservations"]))
    return rows[0]


def snapshot(args, folder, pid):
    r = subprocess.run([os.path.join(args.scripts, "curesv-stat"), "--lib", args.lib, "--dir",
                        folder, "--json", str(pid)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit("torch_live: curesv-stat exit status %d: %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)


def expect(what, got, want):
    if got != want:
        raise SystemExit("torch_live: %s: got %r, want %r" % (what, got, want))


KEYS = ("allocated", "peak", "allocs", "frees", "cross_thread_frees", "caller_view", "denied")


def check(args):
    xdg = tempfile.mkdtemp(prefix="curesv-torch-live-")
    folder, report = os.path.join(xdg, "curesv"), os.path.join(xdg, "report.json")
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    cmd = [os.path.join(args.scripts, "curesv"), "--lib", args.lib, "--live", "--json",
           "--report-file", report, "--reserve", "scan=1G", "--reserve", "pipe=1G", "--attach",
           "scan=scan", "--attach", "pipe=pipe", "--", sys.executable, os.path.abspath(__file__),
           "run"] + (["--ctypes"] if args.ctypes else [])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        said = dict(w.split("=") for w in p.stdout.readline().split()[1:])
        tensors, size = int(said["tensors"]), int(said["bytes"])
        allocs, frees = int(said["allocs"]), int(said["frees"])
        held = snapshot(args, folder, p.pid)  # the launcher runs the program in its own process
        scan, pipe = reservation(held, "scan"), reservation(held, "pipe")
        expect("scan's live bytes while held", scan["allocated"], tensors * size)
        expect("scan's allocations", scan["allocs"], allocs)
        expect("scan's frees", (scan["frees"], scan["cross_thread_frees"]), (frees, frees))
        expect("pipe's caller_view", pipe["caller_view"], -frees * size)
        expect("cmdline", held["cmdline"].split()[-2:] if args.ctypes else
               held["cmdline"].split()[-1:], ["run", "--ctypes"] if args.ctypes else ["run"])
        p.stdin.write("\n")
        p.stdin.flush()
        expect("the program says", p.stdout.readline(), "freed\n")
        done = snapshot(args, folder, p.pid)
        p.stdin.write("\n")
        p.stdin.close()
        expect("exit status", p.wait(timeout=120), 0)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(report) as f:
        final = json.load(f)
    for name in ("scan", "pipe"):
        expect("%s, snapshot once freed against the final report" % name,
               {k: reservation(done, name)[k] for k in KEYS},
               {k: reservation(final, name)[k] for k in KEYS})
    expect("scan's live bytes once freed", reservation(done, "scan")["allocated"], 0)
    expect("files left", os.listdir(folder), [])
    print("torch_live: pass: while held, scan %d B live in %d allocations, %d freed by pipe; once "
          "freed, the snapshot's rows are the final report's" % (tensors * size, allocs, frees))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("run", "check"))
    ap.add_argument("--ctypes", action="store_true")
    ap.add_argument("--lib", default="build/plain/libcuresv.so")
    ap.add_argument("--scripts", default="scripts")
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    if args.role == "run":
        run(args.ctypes)
    else:
        check(args)


if __name__ == "__main__":
    main()
