"""The pytest plugin (`pytest -p curesv`, scripts/curesv_pytest.py), through pytest's pytester:
small suites run through the plugin in this process, which runs under the launcher with libcuresv.so
preloaded on the simulated CUDA stack (tests/sim); their tests allocate with cudaMalloc through
ctypes. The relaunch from a plain `pytest -p curesv` runs in a child without LD_PRELOAD.

    make check-pytest     (curesv -- python3 -m pytest -p pytester tests/pytest)
"""
import json
import os
import re
import subprocess
import sys

import pytest

import curesv

SCRIPTS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

# What every small suite's tests use: cudaMalloc and cudaFree as a program calls them (the global
# ones: curesv's, preloaded), and a thread that names itself.
CONFTEST = r'''
import ctypes
import threading

import pytest

import curesv

for _name in ("libcudart.so.13", "libcudart.so"):
    try:
        ctypes.CDLL(_name, mode=ctypes.RTLD_GLOBAL)
        break
    except OSError:
        pass
_scope = ctypes.CDLL(None)
_malloc, _free = _scope.cudaMalloc, _scope.cudaFree
_malloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
_free.argtypes = (ctypes.c_void_p,)
_malloc.restype = _free.restype = ctypes.c_int
MiB = 1 << 20


class Cuda:
    def malloc(self, n):
        p = ctypes.c_void_p()
        assert _malloc(ctypes.byref(p), n) == 0
        return p.value

    def free(self, p):
        assert _free(p) == 0

    def set_device(self, device):
        """The calling thread's current device (the simulated stack has CUDA_SIM_DEVICES)."""
        assert _scope.cudaSetDevice(device) == 0

    def in_thread(self, name, fn):
        """Runs fn(self) in a thread named `name`, and waits for it."""
        def body():
            curesv.name_thread(name)
            fn(self)
        t = threading.Thread(target=body)
        t.start()
        t.join()


@pytest.fixture
def cuda():
    return Cuda()
'''


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    return pytester


def run(pytester, *args):
    # this process imported curesv before: pytest cannot rewrite its asserts (it has none)
    return pytester.runpytest("-p", "curesv", "-p", "no:cacheprovider",
                              "-W", "ignore::pytest.PytestAssertRewriteWarning", *args)


def output(result):
    return "\n".join(result.outlines + result.errlines)


def test_the_module_has_the_calls():
    assert curesv.available(), "run under the launcher (make check-pytest)"
    for name in ("curesv_window_reset", "curesv_window_stats", "curesv_mark", "curesv_live_since"):
        assert curesv._function(name) is not None, name


def test_under_the_limit_passes(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20

        @pytest.mark.gpu_memory_limit("8M")
        def test_small(cuda):
            a = cuda.malloc(3 * MiB)
            b = cuda.malloc(4 * MiB)
            cuda.free(a)
            cuda.free(b)

        @pytest.mark.gpu_memory_limit(8 << 20)
        def test_exactly_the_limit(cuda):
            cuda.free(cuda.malloc(8 * MiB))
    ''')
    result = run(suite)
    result.assert_outcomes(passed=2)


def test_over_the_limit_fails_with_the_figures(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20

        @pytest.mark.gpu_memory_limit("4M")
        def test_big(cuda):
            a = cuda.malloc(3 * MiB)
            b = cuda.malloc(3 * MiB)
            cuda.free(a)
            cuda.free(b)
    ''')
    result = run(suite)
    result.assert_outcomes(failed=1)
    text = output(result)
    assert re.search(r"GPU memory limit: device 0 peaked 6\.0 MiB above the .* live when the "
                     r"test started \(.* at the peak\), over the limit of 4\.0 MiB, "
                     r"\d+\.\d{3} s into the test", text), text
    # who held it: taken at the first high 4 MiB above the start, the 6 MiB one
    assert re.search(r"held at 6\.0 MiB above the start \(6\.0 MiB live\): shared pool "
                     r"6\.0 MiB; threads #\d+ \S+ 6\.0 MiB", text), text
    assert re.search(r"0x[0-9a-f]+  3\.0 MiB on device 0, thread #\d+", text), text
    # short: the figures, not the plugin's traceback
    assert "curesv_pytest.py" not in text


def test_a_thread_the_test_starts_is_counted(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20

        @pytest.mark.gpu_memory_limit("4M")
        def test_worker(cuda):
            def work(c):
                p = c.malloc(6 * MiB)
                c.free(p)
            cuda.in_thread("loader", work)
    ''')
    result = run(suite)
    result.assert_outcomes(failed=1)
    text = output(result)
    assert "device 0 peaked 6.0 MiB above the" in text, text
    assert re.search(r"threads #\d+ loader 6\.0 MiB", text), text


def test_each_device_apart(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20

        @pytest.mark.gpu_memory_limit("2M")
        def test_two_devices(cuda):
            def on_one(c):
                c.set_device(1)
                c.free(c.malloc(3 * MiB))
            cuda.in_thread("dev1", on_one)
            cuda.free(cuda.malloc(MiB + MiB // 2))
    ''')
    result = run(suite, "--gpu-memory-report")
    result.assert_outcomes(failed=1)
    text = output(result)
    assert "GPU memory limit: device 1 peaked 3.0 MiB above the" in text, text
    assert "device 0 peaked" not in text, "device 0's 1.5 MiB is within its limit"
    assert re.search(r"threads #\d+ dev1 3\.0 MiB", text), text
    assert re.search(r"\s+3\.0 MiB\s+1\s+-\s+test_each_device_apart\.py::test_two_devices$",
                     text, re.M), text


def test_a_reservation_at_the_peak_is_named(suite):
    suite.makepyfile(r'''
        import pytest
        import curesv
        MiB = 1 << 20

        @pytest.mark.gpu_memory_limit("2M")
        def test_stage(cuda):
            curesv.reserve("stage_a", 64 * MiB)
            try:
                with curesv.attached("stage_a"):
                    p = cuda.malloc(5 * MiB)
                q = cuda.malloc(1 * MiB)
                cuda.free(p)
                cuda.free(q)
            finally:
                curesv.release("stage_a")
    ''')
    result = run(suite)
    result.assert_outcomes(failed=1)
    text = output(result)
    assert "reservation stage_a 5.0 MiB" in text, text


def test_a_leak_is_caught_and_a_freed_buffer_is_not(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20
        kept = []

        @pytest.fixture(scope="module")
        def held_before():
            from conftest import Cuda
            return Cuda().malloc(1 * MiB)    # allocated outside the test: not its leak

        @pytest.mark.gpu_memory_leaks
        def test_leaks(cuda, held_before):
            kept.append(cuda.malloc(2 * MiB))
            cuda.free(cuda.malloc(5 * MiB))

        @pytest.mark.gpu_memory_leaks()
        def test_frees(cuda, held_before):
            cuda.free(cuda.malloc(2 * MiB))

        def test_leaks_unmarked(cuda):
            kept.append(cuda.malloc(1 * MiB))
    ''')
    result = run(suite)
    result.assert_outcomes(passed=2, failed=1)
    text = output(result)
    assert re.search(r"GPU memory leak: 1 buffer, 2\.0 MiB allocated while the test ran still "
                     r"live at its end", text), text
    assert re.search(r"0x[0-9a-f]+  2\.0 MiB on device 0, thread #\d+ \S+, shared pool", text), text
    assert "FAILED test_a_leak_is_caught_and_a_freed_buffer_is_not.py::test_leaks" in text


def test_warmups(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20
        cache = {}
        calls = []

        def cached(cuda, key):
            # what a caching allocator or a lazily built workspace does: the first call keeps it
            if key not in cache:
                cache[key] = cuda.malloc(1 * MiB)
            return cache[key]

        @pytest.mark.gpu_memory_leaks(warmups=2)
        def test_warmed(cuda):
            calls.append(1)
            cached(cuda, "warmed")

        @pytest.mark.gpu_memory_leaks(warmups=0)
        def test_cold(cuda):
            cached(cuda, "cold")

        def test_count():
            assert len(calls) == 3, calls

        @pytest.mark.gpu_memory_leaks(warmups=1)
        def test_fails_in_a_warmup():
            assert not calls.append(2) and calls.count(2) > 1, "the first run"
    ''')
    result = run(suite)
    result.assert_outcomes(passed=2, failed=2)
    text = output(result)
    assert "FAILED test_warmups.py::test_cold" in text, text
    assert "AssertionError: the first run" in text, text


def test_a_limit_of_zero(suite):
    suite.makepyfile(r'''
        import pytest

        @pytest.mark.gpu_memory_limit(0)
        def test_any(cuda):
            cuda.free(cuda.malloc(4096))

        @pytest.mark.gpu_memory_limit("0")
        def test_none():
            pass
    ''')
    result = run(suite, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    assert "peaked 4.0 KiB above the" in text and "over the limit of 0 B" in text, text
    assert re.search(r"held at 4\.0 KiB above the start", text), text


def test_no_figures_kept_without_the_report_or_baseline(suite):
    suite.makepyfile(r'''
        def test_plain(cuda, record_property):
            cuda.free(cuda.malloc(4096))
    ''')
    result = run(suite, "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    assert "curesv_gpu_memory" not in (suite.path / "out.xml").read_text()
    run(suite, "--junitxml=out.xml", "--gpu-memory-report").assert_outcomes(passed=1)
    assert "curesv_gpu_memory" in (suite.path / "out.xml").read_text()


def test_the_default_limit_option_and_ini(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20

        def test_unmarked(cuda):
            cuda.free(cuda.malloc(2 * MiB))

        @pytest.mark.gpu_memory_limit("4M")
        def test_marked(cuda):
            cuda.free(cuda.malloc(2 * MiB))
    ''')
    result = run(suite, "--gpu-memory-limit", "1M")
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    assert "over the limit of 1.0 MiB (--gpu-memory-limit)" in text, text
    assert "test_unmarked" in text
    suite.makeini("[pytest]\ngpu_memory_limit = 1536K\n")
    result = run(suite)
    result.assert_outcomes(passed=1, failed=1)
    assert "over the limit of 1.5 MiB (ini option gpu_memory_limit)" in output(result)
    # the command line wins over the ini file
    run(suite, "--gpu-memory-limit=3M").assert_outcomes(passed=2)
    result = run(suite, "--gpu-memory-limit", "lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpu-memory-limit: 'lots' is no size" in output(result)


def test_the_report(suite):
    suite.makepyfile(r'''
        import pytest
        MiB = 1 << 20
        kept = []

        def test_light(cuda):
            cuda.free(cuda.malloc(1 * MiB))

        def test_heavy(cuda):
            cuda.free(cuda.malloc(7 * MiB))

        @pytest.mark.gpu_memory_leaks
        def test_leaky(cuda):
            kept.append(cuda.malloc(3 * MiB))

        def test_none():
            pass
    ''')
    result = run(suite, "--gpu-memory-report", "--gpu-memory-report-top", "3")
    result.assert_outcomes(passed=3, failed=1)
    lines = result.outlines
    start = [i for i, l in enumerate(lines) if "GPU memory (curesv)" in l]
    assert start, output(result)
    table = lines[start[0] + 1:start[0] + 6]
    assert re.match(r"\s+peak\s+device\s+leaked\s+test$", table[0]), table
    assert re.match(r"\s+7\.0 MiB\s+0\s+-\s+test_the_report\.py::test_heavy$", table[1]), table
    assert re.match(r"\s+3\.0 MiB\s+0\s+3\.0 MiB\s+test_the_report\.py::test_leaky$",
                    table[2]), table
    assert re.match(r"\s+1\.0 MiB\s+0\s+-\s+test_the_report\.py::test_light$", table[3]), table
    assert table[4].startswith("4 tests measured"), table


def test_the_baseline(suite, monkeypatch):
    suite.makepyfile(test_steps=r'''
        import os
        MiB = 1 << 20

        def test_step(cuda):
            cuda.free(cuda.malloc(int(os.environ["STEP_KIB"]) << 10))

        def test_fixed(cuda):
            cuda.free(cuda.malloc(2 * MiB))
    ''')
    # in the project: a path outside the rootdir given as its own argument moves the rootdir
    baseline = str(suite.path / "gpu-baseline.json")
    monkeypatch.setenv("STEP_KIB", "4096")
    result = run(suite, "--gpu-memory-baseline", baseline)
    result.assert_outcomes(passed=2)
    assert "curesv: wrote the GPU memory baseline of 2 tests to " + baseline in output(result)
    with open(baseline) as f:
        data = json.load(f)
    assert data["tests"] == {"test_steps.py::test_step": {"0": 4 << 20},
                             "test_steps.py::test_fixed": {"0": 2 << 20}}, data
    monkeypatch.setenv("STEP_KIB", "4400")        # 7% more: within the 10% default
    run(suite, "--gpu-memory-baseline", baseline).assert_outcomes(passed=2)
    monkeypatch.setenv("STEP_KIB", "6144")        # 50% more
    result = run(suite, "--gpu-memory-baseline", baseline)
    result.assert_outcomes(passed=1, failed=1)
    assert ("GPU memory baseline: device 0 peaked 6.0 MiB above the start, 50% more than the "
            "baseline's 4.0 MiB (" + baseline + " allows 10%)") in output(result), output(result)
    run(suite, "--gpu-memory-baseline", baseline,
        "--gpu-memory-baseline-tolerance", "60").assert_outcomes(passed=2)
    with open(baseline) as f:
        assert json.load(f) == data, "a comparison leaves the file as it was"
    run(suite, "--gpu-memory-baseline", baseline,
        "--gpu-memory-baseline-update").assert_outcomes(passed=2)
    with open(baseline) as f:
        assert json.load(f)["tests"]["test_steps.py::test_step"] == {"0": 6 << 20}
    with open(baseline, "w") as f:
        f.write("{not json")
    result = run(suite, "--gpu-memory-baseline", baseline)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not a baseline curesv wrote" in output(result)


@pytest.mark.parametrize("text", [
    '{"curesv_baseline": 1, "tests": {"test_steps.py::test_step": {"gpu0": 5}}}',
    '{"curesv_baseline": 1, "tests": {"test_steps.py::test_step": {"0": true}}}',
    "[" * 100000 + "]" * 100000,
], ids=["device-not-a-number", "bytes-a-bool", "nested-deep"])
def test_a_hostile_baseline_is_a_usage_error(suite, text):
    suite.makepyfile(test_steps='''
        def test_step(cuda):
            cuda.free(cuda.malloc(1 << 20))
    ''')
    baseline = str(suite.path / "gpu-baseline.json")
    with open(baseline, "w") as f:
        f.write(text)
    result = run(suite, "--gpu-memory-baseline", baseline)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output(result)
    assert "not a baseline curesv wrote" in output(result)
    assert "Traceback" not in output(result) and "INTERNALERROR" not in output(result)


def test_the_largest_limit_passes(suite):
    suite.makepyfile(test_max='''
        import pytest

        @pytest.mark.gpu_memory_limit(2**64 - 1)
        def test_int(cuda):
            cuda.free(cuda.malloc(1 << 20))

        @pytest.mark.gpu_memory_limit("18446744073709551615")
        def test_text(cuda):
            cuda.free(cuda.malloc(1 << 20))
    ''')
    run(suite).assert_outcomes(passed=2)


@pytest.mark.parametrize("marker, why", [
    ('gpu_memory_limit("12Q")', "'12Q' is no size"),
    ("gpu_memory_limit()", "takes one limit"),
    ('gpu_memory_limit("1M", "2M")', "takes one limit"),
    ("gpu_memory_limit(-5)", "cannot be negative"),
    ("gpu_memory_limit(1.5)", "not float"),
    ("gpu_memory_limit(10**30)", "is too large"),
    ('gpu_memory_limit("18446744073709551616")', "is too large"),
    ("gpu_memory_leaks(warmups=-1)", "warmups must be a whole number, 0 or more, not -1"),
    ('gpu_memory_leaks(warmups="2")', "warmups must be a whole number"),
    ("gpu_memory_leaks(repeat=3)", "takes warmups=N only"),
])
def test_a_marker_with_bad_arguments(suite, marker, why):
    suite.makepyfile(test_bad=r'''
        import pytest

        @pytest.mark.%s
        def test_marked():
            pass

        def test_other():
            pass
    ''' % marker)
    result = run(suite, "-rE")
    result.assert_outcomes(passed=1, errors=1)
    text = output(result)
    lines = [l for l in result.outlines if l.startswith("test_bad.py::test_marked: @pytest.mark.")]
    assert len(lines) == 1, text
    assert why in lines[0], lines[0]
    assert "Traceback" not in text


def test_a_free_cache_function(suite):
    suite.makepyfile(fakecache=r'''
        held = []

        def empty_cache():
            import conftest
            while held:
                conftest.Cuda().free(held.pop())
    ''', test_cached=r'''
        import pytest
        import fakecache
        MiB = 1 << 20

        @pytest.mark.gpu_memory_leaks
        def test_cached(cuda):
            fakecache.held.append(cuda.malloc(2 * MiB))
    ''')
    run(suite).assert_outcomes(failed=1)
    run(suite, "--gpu-memory-free-cache", "fakecache:empty_cache").assert_outcomes(passed=1)
    suite.makeini("[pytest]\ngpu_memory_free_cache = fakecache:empty_cache\n")
    run(suite).assert_outcomes(passed=1)
    # a cache filled by an earlier test serves a later one unseen, unless emptied first
    suite.makepyfile(test_cached=r'''
        import pytest
        import fakecache
        MiB = 1 << 20

        def cached_malloc(cuda):
            return fakecache.held.pop() if fakecache.held else cuda.malloc(4 * MiB)

        def test_fills(cuda):
            fakecache.held.append(cached_malloc(cuda))

        @pytest.mark.gpu_memory_limit("2M")
        def test_served(cuda):
            fakecache.held.append(cached_malloc(cuda))
    ''')
    suite.makeini("[pytest]\n")
    run(suite).assert_outcomes(passed=2)
    result = run(suite, "--gpu-memory-free-cache=fakecache:empty_cache")
    result.assert_outcomes(passed=1, failed=1)
    assert "device 0 peaked 4.0 MiB above the" in output(result), output(result)
    result = run(suite, "--gpu-memory-free-cache", "fakecache:no_such")
    result.assert_outcomes(passed=1, failed=1)
    assert "--gpu-memory-free-cache fakecache:no_such: module 'fakecache' has no attribute " \
           "'no_such'" in output(result)


def plain_env(**extra):
    """The environment of a plain shell: no libcuresv.so preloaded, the module on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "CURESV_PYTEST_RELAUNCH") and
           not k.startswith("PYTEST_")}
    path = [SCRIPTS] + [p for p in sys.path if p.endswith("dist-packages") and
                        os.path.exists(os.path.join(p, "pytest"))]
    env["PYTHONPATH"] = os.pathsep.join(path)
    env.update(extra)
    return env


RELAUNCH_SUITE = r'''
import pytest
MiB = 1 << 20

@pytest.mark.gpu_memory_limit("1M")
def test_big(cuda):
    cuda.free(cuda.malloc(3 * MiB))
'''


def test_a_plain_pytest_starts_again_under_the_launcher(suite):
    suite.makepyfile(test_plain=RELAUNCH_SUITE)
    cmd = [sys.executable, "-m", "pytest", "-p", "curesv", "-p", "no:cacheprovider", "-q"]
    # CURESV_BACKTRACE reaches the relaunched pytest: the buffers' frames are listed
    r = subprocess.run(cmd, cwd=str(suite.path), env=plain_env(CURESV_BACKTRACE="4"),
                       capture_output=True, text=True, timeout=120)
    lines = [l for l in r.stderr.splitlines() if l.startswith("curesv: libcuresv.so is not")]
    assert lines == ["curesv: libcuresv.so is not loaded: running pytest again under %s "
                     "(CURESV_PYTEST_RELAUNCH=0 or --gpu-memory-no-relaunch: not)"
                     % os.path.join(SCRIPTS, "curesv")], r.stderr
    assert r.returncode == 1, r.stdout + r.stderr
    assert "device 0 peaked 3.0 MiB above the" in r.stdout, r.stdout + r.stderr
    assert re.search(r"^    0x[0-9a-f]+  3\.0 MiB on device 0.*\n        #0 \S", r.stdout, re.M), \
        r.stdout
    assert "1 failed" in r.stdout


def test_pytest_xdist_workers_measure_and_the_controller_reports(suite):
    """With pytest-xdist each worker is a process under curesv (the relaunched controller's
    LD_PRELOAD reaches them); the figures travel in the reports' user_properties, so the report
    and the baseline are the controller's."""
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (optional)")
    suite.makepyfile(test_par=r'''
        import pytest
        MiB = 1 << 20
        kept = []

        @pytest.mark.parametrize("n", [1, 2, 3, 4])
        def test_sizes(cuda, n):
            cuda.free(cuda.malloc(n * MiB))

        @pytest.mark.gpu_memory_leaks
        def test_leak(cuda):
            kept.append(cuda.malloc(5 * MiB))
    ''')
    cmd = [sys.executable, "-m", "pytest", "-p", "curesv", "-p", "no:cacheprovider", "-n", "2",
           "--gpu-memory-report", "--gpu-memory-baseline=base.json"]
    r = subprocess.run(cmd, cwd=str(suite.path), env=plain_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "4 passed, 1 failed" in r.stdout.replace("1 failed, 4 passed", "4 passed, 1 failed")
    assert "GPU memory leak: 1 buffer, 5.0 MiB" in r.stdout, r.stdout
    assert re.search(r"5\.0 MiB\s+0\s+5\.0 MiB\s+test_par\.py::test_leak", r.stdout), r.stdout
    assert "5 tests measured" in r.stdout, r.stdout
    with open(os.path.join(str(suite.path), "base.json")) as f:
        tests = json.load(f)["tests"]
    assert tests["test_par.py::test_sizes[3]"] == {"0": 3 << 20}, tests
    assert len(tests) == 5


@pytest.mark.parametrize("how", ["variable", "option"])
def test_the_relaunch_turned_off(suite, how):
    suite.makepyfile(test_plain=RELAUNCH_SUITE)
    cmd = [sys.executable, "-m", "pytest", "-p", "curesv", "-p", "no:cacheprovider", "-q"]
    env = plain_env()
    if how == "variable":
        env["CURESV_PYTEST_RELAUNCH"] = "0"
    else:
        cmd.append("--gpu-memory-no-relaunch")
    r = subprocess.run(cmd, cwd=str(suite.path), env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "running pytest again" not in r.stderr
    assert "curesv: libcuresv.so is not loaded: GPU memory limits and leak checks were not " \
           "applied" in r.stdout, r.stdout
