"""The pytest plugin (`pytest -p curesv`) on a GPU, with PyTorch's caching allocator on: a test
under its limit passes and one over it fails with the figures, a tensor kept past a test is a leak caught
after torch.cuda.empty_cache() (--gpu-memory-free-cache), and a tensor freed into the cache is one
only without it. pytest is started from a plain shell: the plugin starts it again under the
launcher (its relaunch) on the real driver.

    torch_pytest.py --scripts DIR --lib libcuresv.so
        (scripts/gpu-check; needs PyTorch with CUDA and pytest; exit status 0 when every
        expectation held, 77 when PyTorch, CUDA or pytest is missing)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

CONFTEST = r'''
import pytest
import torch

# CUDA's context and the allocator's first segment before any test: no test pays for them
torch.empty(1, device="cuda")
torch.cuda.synchronize()


@pytest.fixture(autouse=True)
def empty_cache_first():
    # a leak test's new tensors must come from new segments, not from what an earlier test cached
    torch.cuda.empty_cache()
'''

SUITE = r'''
import pytest
import torch

MiB = 1 << 20
kept = []


def tensor(mib):
    return torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")


@pytest.mark.gpu_memory_limit("64M")
def test_under_the_limit():
    x = tensor(32)
    x.fill_(1)
    torch.cuda.synchronize()
    del x


@pytest.mark.gpu_memory_limit("64M")
def test_over_the_limit():
    x = tensor(128)
    x.fill_(1)
    torch.cuda.synchronize()
    del x


@pytest.mark.gpu_memory_leaks
def test_freed_into_the_cache():
    x = tensor(16)
    del x


@pytest.mark.gpu_memory_leaks(warmups=1)
def test_kept():
    kept.append(tensor(24))
'''


def run(tmp, env, *args):
    cmd = [sys.executable, "-m", "pytest", "-p", "curesv", "-p", "no:cacheprovider", "-rA",
           "test_torch.py"] + list(args)
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    return r.stdout + r.stderr


def outcome(text, test):
    m = re.search(r"^(PASSED|FAILED|ERROR) test_torch\.py::%s\b" % test, text, re.M)
    return m.group(1) if m else "missing"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scripts", required=True)
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    probe = subprocess.run([sys.executable, "-c", "import pytest, torch, sys; "
                            "sys.exit(not torch.cuda.is_available())"], capture_output=True)
    if probe.returncode != 0:
        print("torch_pytest: skipped: no pytest, or no PyTorch with CUDA")
        return 77
    scripts = os.path.abspath(args.scripts)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",
                                                             "CURESV_PYTEST_RELAUNCH")}
    env["PYTHONPATH"] = scripts + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CURESV_LIB"] = os.path.abspath(args.lib)
    env["CURESV_REPORT"] = "off"
    env["CURESV_BACKTRACE"] = "8"
    env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)     # the caching allocator on
    failures = []

    def expect(what, ok, text):
        print("%-70s %s" % (what, "ok" if ok else "FAILED"))
        if not ok:
            failures.append(what)
            print("    " + text.strip()[-3000:].replace("\n", "\n    "))

    with tempfile.TemporaryDirectory(prefix="curesv-pytest-") as tmp:
        with open(os.path.join(tmp, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        with open(os.path.join(tmp, "test_torch.py"), "w") as f:
            f.write(SUITE)
        text = run(tmp, env, "--gpu-memory-free-cache", "torch.cuda:empty_cache",
                   "--gpu-memory-report")
        expect("a plain pytest starts again under the launcher",
               "curesv: libcuresv.so is not loaded: running pytest again under" in text, text)
        expect("a 32 MiB tensor passes a 64 MiB limit",
               outcome(text, "test_under_the_limit") == "PASSED", text)
        expect("a 128 MiB tensor fails it, with the figures",
               outcome(text, "test_over_the_limit") == "FAILED" and
               re.search(r"GPU memory limit: device \d+ peaked 128\.0 MiB above the .* over the "
                         r"limit of 64\.0 MiB", text) is not None, text)
        expect("  and names the buffer and where it was made",
               re.search(r"0x[0-9a-f]+  128\.0 MiB on device \d+, thread #\d+.*\n\s+#0 ", text)
               is not None, text)
        expect("a tensor freed into the cache is no leak after empty_cache()",
               outcome(text, "test_freed_into_the_cache") == "PASSED", text)
        expect("a tensor kept is a leak after empty_cache()",
               outcome(text, "test_kept") == "FAILED" and
               "GPU memory leak: 1 buffer, 24.0 MiB" in text, text)
        expect("the report lists the four tests",
               "GPU memory (curesv)" in text and "4 tests measured" in text, text)
        text = run(tmp, env, "-k", "cache")
        expect("without --gpu-memory-free-cache the cached tensor is live at the end",
               outcome(text, "test_freed_into_the_cache") == "FAILED" and
               "GPU memory leak: 1 buffer, 16.0 MiB" in text, text)
    print("torch_pytest: %d problem%s" % (len(failures), "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
