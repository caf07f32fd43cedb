"""GPU memory budgets for a pytest suite: `pytest -p curesv` (curesv's module loads this one).

    @pytest.mark.gpu_memory_limit("512M")   # fails when device memory allocated while the test
    def test_step(): ...                      # runs peaks more than 512 MiB above the start

    @pytest.mark.gpu_memory_leaks(warmups=1)  # fails when device memory allocated during the
    def test_no_leak(): ...                   # (last) run is still live at its end

Every thread of the process counts (the test's own and those it starts), on every device; the
figures are per device. Options: --gpu-memory-limit SIZE (ini gpu_memory_limit) for every test
without a marker, --gpu-memory-report, --gpu-memory-baseline FILE, --gpu-memory-free-cache
MODULE:FUNCTION, --gpu-memory-no-relaunch. Documented in curesv(3), "PYTEST PLUGIN".

It needs libcuresv.so preloaded: under the launcher (`curesv -- pytest -p curesv`) it works at once;
from a plain shell it starts pytest again under the launcher with the same arguments, saying so in
one line (CURESV_PYTEST_RELAUNCH=0 or --gpu-memory-no-relaunch: it does not, and measures nothing).
"""
import importlib
import json
import os
import shutil
import sys

import pytest

import curesv

# Set by `make install` to the launcher it installed.
INSTALLED_LAUNCHER = ""

RELAUNCH_VARIABLE = "CURESV_PYTEST_RELAUNCH"
# Device memory (curesv_allocation_t.kind): device, managed, stream-ordered, cuMemCreate on a
# device. Pinned host memory is no device's.
DEVICE_KINDS = {0, 1, 3, 4}
PROPERTY = "curesv_gpu_memory"
DEVICES = 64
BUFFERS_LISTED = 10
FRAMES_LISTED = 8


def addoption(parser):
    group = parser.getgroup("curesv", "GPU memory budgets (curesv; see curesv(3))")
    group.addoption("--gpu-memory-limit", metavar="SIZE", default=None,
                    help="fail each test without a gpu_memory_limit marker whose device memory "
                         "peaks more than SIZE above what was live when it started (bytes, or "
                         "512M, 2G ...; ini: gpu_memory_limit)")
    group.addoption("--gpu-memory-report", action="store_true", default=False,
                    help="print a table of the tests' GPU memory peaks and leaks at the end")
    group.addoption("--gpu-memory-report-top", metavar="N", type=int, default=10,
                    help="tests the report lists, heaviest first (default 10)")
    group.addoption("--gpu-memory-baseline", metavar="FILE", default=None,
                    help="write each test's peak per device to FILE when it does not exist; "
                         "when it does, fail a test whose peak rose more than "
                         "--gpu-memory-baseline-tolerance percent over it")
    group.addoption("--gpu-memory-baseline-tolerance", metavar="PERCENT", type=float,
                    default=10.0, help="the rise over the baseline a test may have (default 10)")
    group.addoption("--gpu-memory-baseline-update", action="store_true", default=False,
                    help="write the baseline file again from this run's peaks")
    group.addoption("--gpu-memory-free-cache", metavar="MODULE:FUNCTION", default=None,
                    help="call this before each measured test and before looking for leaks, "
                         "e.g. torch.cuda:empty_cache (a caching allocator's cache neither "
                         "serves a test unseen nor counts as a leak; ini: gpu_memory_free_cache)")
    group.addoption("--gpu-memory-no-relaunch", action="store_true", default=False,
                    help="without libcuresv.so loaded, do not start pytest again under the "
                         "curesv launcher (also %s=0): nothing is measured" % RELAUNCH_VARIABLE)
    parser.addini("gpu_memory_limit", "default GPU memory limit of every test (SIZE)",
                  default="")
    parser.addini("gpu_memory_free_cache", "MODULE:FUNCTION called before each measured test "
                  "and before looking for leaks", default="")


def configure(config):
    config.addinivalue_line(
        "markers", "gpu_memory_limit(limit): fail when the device memory allocated while the "
        "test runs (every thread, each device) peaks more than limit (bytes, or '512M') above "
        "what was live when it started (curesv)")
    config.addinivalue_line(
        "markers", "gpu_memory_leaks(warmups=0): run the test warmups more times first, then "
        "fail when device memory allocated during the measured run is still live at its end "
        "(curesv)")
    # --help and --version run no test: nothing to measure
    if not measuring_available() and not config.getoption("gpu_memory_no_relaunch") and \
            os.environ.get(RELAUNCH_VARIABLE, "1") not in ("0", "") and \
            not config.getoption("help", False) and not config.getoption("version", False):
        relaunch()
    config.pluginmanager.register(Plugin(config), "curesv-gpu-memory")


def measuring_available():
    return curesv.available() and curesv._function("curesv_window_reset") is not None


def find_launcher():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "curesv")
    for candidate in (INSTALLED_LAUNCHER, here):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("curesv")


def relaunch():
    """Runs this pytest again under the launcher, with the same interpreter and arguments."""
    if os.environ.get(RELAUNCH_VARIABLE) == "relaunched":
        raise pytest.UsageError(
            "curesv: pytest was started again under the curesv launcher, yet libcuresv.so is "
            "not loaded (was LD_PRELOAD dropped?); %s=0 runs the tests without it"
            % RELAUNCH_VARIABLE)
    launcher = find_launcher()
    if launcher is None:
        raise pytest.UsageError(
            "curesv: libcuresv.so is not loaded and no curesv launcher was found: run "
            "'curesv -- pytest -p curesv ...', or set %s=0 to run without measuring"
            % RELAUNCH_VARIABLE)
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable] + sys.argv
    argv[0] = sys.executable
    sys.stderr.write("curesv: libcuresv.so is not loaded: running pytest again under %s "
                     "(%s=0 or --gpu-memory-no-relaunch: not)\n"
                     % (launcher, RELAUNCH_VARIABLE))
    sys.stderr.flush()
    sys.stdout.flush()
    env = dict(os.environ, **{RELAUNCH_VARIABLE: "relaunched"})
    os.execve(launcher, [launcher, "--"] + argv, env)


def human(n):
    """Bytes as the report writes them: 512 B, 1.5 KiB, 12.0 MiB."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    if n < 1024:
        return "%s%d B" % (sign, n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return "%s%.1f %s" % (sign, n, unit)


def one_line(text):
    """Text from the program (names, frames) on one line of the output."""
    return str(text).encode("unicode_escape", "backslashreplace").decode("ascii")


def marker_text(mark):
    parts = [repr(a) for a in mark.args] + ["%s=%r" % kv for kv in mark.kwargs.items()]
    return "@pytest.mark.%s(%s)" % (mark.name, ", ".join(parts))


class MarkerError(Exception):
    pass


def parse_limit(mark):
    args, kwargs = list(mark.args), dict(mark.kwargs)
    if "limit" in kwargs:
        args.append(kwargs.pop("limit"))
    if kwargs or len(args) != 1:
        raise MarkerError("takes one limit: bytes, or a size such as '512M'")
    try:
        return curesv.parse_size(args[0])
    except ValueError as err:
        raise MarkerError(str(err)) from None


def parse_leaks(mark):
    args, kwargs = list(mark.args), dict(mark.kwargs)
    if "warmups" in kwargs:
        args.append(kwargs.pop("warmups"))
    if kwargs or len(args) > 1:
        raise MarkerError("takes warmups=N only")
    warmups = args[0] if args else 0
    if isinstance(warmups, bool) or not isinstance(warmups, int) or warmups < 0:
        raise MarkerError("warmups must be a whole number, 0 or more, not %r" % (warmups,))
    return warmups


class Spec:
    """What a test is held to: a limit (bytes or None), leak checking (warm-ups or None)."""

    def __init__(self, limit, warmups, limit_from):
        self.limit, self.warmups, self.limit_from = limit, warmups, limit_from


class Plugin:
    def __init__(self, config):
        self.config = config
        self.available = measuring_available()
        self.results = {}               # nodeid -> the figures recorded for it
        self.default_limit, self.default_from = self.option_size("gpu_memory_limit")
        self.free_cache_spec = (config.getoption("gpu_memory_free_cache") or
                                config.getini("gpu_memory_free_cache") or None)
        self.free_cache = None
        self.baseline_path = config.getoption("gpu_memory_baseline")
        self.tolerance = config.getoption("gpu_memory_baseline_tolerance")
        if self.tolerance < 0:
            raise pytest.UsageError("--gpu-memory-baseline-tolerance: %r is negative"
                                    % self.tolerance)
        self.baseline = None
        # every test's figures are kept (and travel in its report's user_properties, which a
        # JUnit XML file shows) only for the report and the baseline
        self.recording = bool(config.getoption("gpu_memory_report") or self.baseline_path)
        if self.baseline_path and os.path.exists(self.baseline_path) and \
                not config.getoption("gpu_memory_baseline_update"):
            self.baseline = self.read_baseline(self.baseline_path)

    def option_size(self, name):
        value = self.config.getoption(name)
        where = "--" + name.replace("_", "-")
        if value is None:
            value, where = self.config.getini(name), "ini option " + name
        if value in (None, ""):
            return None, None
        try:
            return curesv.parse_size(value), where
        except ValueError as err:
            raise pytest.UsageError("%s: %s" % (where, err)) from None

    @staticmethod
    def read_baseline(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            tests = data["tests"]
            if not isinstance(tests, dict) or not all(
                    isinstance(v, dict) and all(
                        isinstance(d, str) and d.isascii() and d.isdigit() and
                        isinstance(b, int) and not isinstance(b, bool) for d, b in v.items())
                    for v in tests.values()):
                raise ValueError("'tests' must map test ids to {device: bytes}")
            return tests
        # RecursionError: json's decoder on arrays nested thousands deep
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
            raise pytest.UsageError("--gpu-memory-baseline: %s: not a baseline curesv wrote "
                                    "(%s)" % (path, one_line(err))) from None

    # ---- the markers ----------------------------------------------------------------------------

    def spec_of(self, item):
        limit_mark = item.get_closest_marker("gpu_memory_limit")
        leaks_mark = item.get_closest_marker("gpu_memory_leaks")
        limit, limit_from, warmups = self.default_limit, self.default_from, None
        for mark, parse in ((limit_mark, parse_limit), (leaks_mark, parse_leaks)):
            if mark is None:
                continue
            try:
                value = parse(mark)
            except MarkerError as err:
                raise MarkerError("%s: %s: %s" % (item.nodeid, marker_text(mark), err)) from None
            if mark is limit_mark:
                limit, limit_from = value, "marker"
            else:
                warmups = value
        return Spec(limit, warmups, limit_from)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        item._curesv_spec, problem = None, None
        try:
            item._curesv_spec = self.spec_of(item)
        except MarkerError as err:
            problem = str(err)
        if problem:
            pytest.fail(problem, pytrace=False)

    # ---- measuring ------------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        spec = getattr(item, "_curesv_spec", None)
        if spec is None or not self.available or (
                spec.limit is None and spec.warmups is None and not self.recording):
            yield
            return
        if spec.warmups:
            for _ in range(spec.warmups):
                item.runtest()
        # what an earlier test left in a cache would serve this one unseen: emptied first
        if self.free_cache_spec:
            self.call_free_cache()
        mark = curesv.mark() if spec.warmups is not None else 0
        try:
            # the holders are taken at the first high past the limit, then a 16th higher
            # (a limit of 2^64 - 1 bytes watches nothing it could ever pass)
            watch = spec.limit + 1 if spec.limit is not None and spec.limit < 2**64 - 1 else 0
            curesv.window_reset(-1, watch)
            outcome = yield
            leaked = self.leaks_since(mark) if mark else None
        finally:
            if mark:
                curesv.mark_drop(mark)
        windows = self.windows(spec.limit)
        figures = {"peaks": {str(d): w["peak"] - w["start"] for d, w in windows.items()},
                   "leaked": sum(a["bytes"] for a in leaked) if leaked is not None else None,
                   "leaks": len(leaked) if leaked is not None else None}
        if self.recording:
            item.user_properties.append((PROPERTY, figures))
        problems = self.limit_problems(spec, windows) + self.leak_problems(leaked) + \
            self.baseline_problems(item.nodeid, figures["peaks"])
        if problems and outcome.excinfo is None:
            pytest.fail("\n".join(problems), pytrace=False)
        elif problems:
            item.add_report_section("call", "curesv", "\n".join(problems))

    def windows(self, limit):
        """{device: window} of the devices whose memory moved while the test ran; the holders
        are read only where the peak passed `limit`."""
        out = {}
        for d in range(DEVICES):
            w = curesv.window_stats(d, holders=False)
            if w["open"] and (w["peak"] != w["start"] or w["allocated"] != w["start"]):
                over = limit is not None and w["peak"] - w["start"] > limit
                out[d] = curesv.window_stats(d) if over else w
        return out

    def call_free_cache(self):
        if self.free_cache is None:
            spec = self.free_cache_spec
            module, _, name = spec.partition(":")
            try:
                fn = importlib.import_module(module)
                for part in name.split(".") if name else ():
                    fn = getattr(fn, part)
            except (ImportError, AttributeError) as err:
                pytest.fail("--gpu-memory-free-cache %s: %s" % (one_line(spec), one_line(err)),
                            pytrace=False)
            if not name or not callable(fn):
                pytest.fail("--gpu-memory-free-cache %s: not MODULE:FUNCTION naming a function"
                            % one_line(spec), pytrace=False)
            self.free_cache = fn
        self.free_cache()

    def leaks_since(self, mark):
        if self.free_cache_spec:
            self.call_free_cache()
        found = [a for a in curesv.live_since(mark, -1) if a["kind"] in DEVICE_KINDS]
        return sorted(found, key=lambda a: -a["bytes"])

    # ---- what fails a test, in a few lines ------------------------------------------------------

    @staticmethod
    def thread_text(serial, name):
        return "#%d%s" % (serial, " " + one_line(name) if name else "")

    @staticmethod
    def origin_text(name):
        return "shared pool" if not name else "reservation " + one_line(name)

    def buffer_lines(self, a, indent="    "):
        lines = ["%s0x%x  %s on device %d, thread %s, %s%s" % (
            indent, a["ptr"], human(a["bytes"]), a["device"],
            self.thread_text(a["thread"], a["thread_name"]), self.origin_text(a["origin"]),
            ", stream tag %d" % a["stream"] if a["stream"] else "")]
        for i, pc in enumerate(a["frames"][:FRAMES_LISTED]):
            lines.append("%s    #%d %s" % (indent, i, one_line(curesv.frame_name(pc))))
        return lines

    def limit_problems(self, spec, windows):
        if spec.limit is None:
            return []
        out = []
        for d, w in sorted(windows.items()):
            rise = w["peak"] - w["start"]
            if rise <= spec.limit:
                continue
            when = (w["peak_ns"] - w["opened_ns"]) / 1e9
            via = "" if spec.limit_from == "marker" else " (%s)" % spec.limit_from
            out.append("GPU memory limit: device %d peaked %s above the %s live when the test "
                       "started (%s at the peak), over the limit of %s%s, %.3f s into the test"
                       % (d, human(rise), human(w["start"]), human(w["peak"]),
                          human(spec.limit), via, when))
            if w["holders_at"] < 0:
                continue
            held = ", ".join("%s %s" % (self.origin_text(h["name"]) if h["name"] != "(others)"
                                         else "others", human(h["bytes"]))
                             for h in w["reservations"])
            threads = ", ".join("%s %s" % (self.thread_text(h["thread"], h["name"]),
                                           human(h["bytes"])) for h in w["threads"])
            out.append("  held at %s above the start (%s live): %s; threads %s"
                       % (human(w["holders_at"] - w["start"]), human(w["holders_at"]), held,
                          threads))
            if w["buffers"]:
                out.append("  largest buffers then:")
                for a in w["buffers"][:3]:
                    out.extend(self.buffer_lines(a))
        return out

    def leak_problems(self, leaked):
        if not leaked:
            return []
        out = ["GPU memory leak: %d buffer%s, %s allocated while the test ran still live at its "
               "end%s" % (len(leaked), "" if len(leaked) == 1 else "s",
                          human(sum(a["bytes"] for a in leaked)),
                          " (after %s)" % self.free_cache_spec if self.free_cache_spec else "")]
        for a in leaked[:BUFFERS_LISTED]:
            out.extend(self.buffer_lines(a, "  "))
        if len(leaked) > BUFFERS_LISTED:
            out.append("  ... and %d more" % (len(leaked) - BUFFERS_LISTED))
        return out

    def baseline_problems(self, nodeid, peaks):
        if self.baseline is None or nodeid not in self.baseline:
            return []
        out = []
        before = self.baseline[nodeid]
        for d in sorted(set(peaks) | set(before), key=int):
            now, then = peaks.get(d, 0), before.get(d, 0)
            if now <= then * (1 + self.tolerance / 100.0):
                continue
            rise = "%.0f%% more than" % ((now - then) * 100.0 / then) if then else "up from"
            out.append("GPU memory baseline: device %s peaked %s above the start, %s the "
                       "baseline's %s (%s allows %g%%)"
                       % (d, human(now), rise, human(then), self.baseline_path, self.tolerance))
        return out

    # ---- gathering, the report and the baseline ------------------------------------------------

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        for key, value in getattr(report, "user_properties", ()):
            if key == PROPERTY:
                self.results[report.nodeid] = value

    def pytest_sessionfinish(self, session):
        if not self.baseline_path or hasattr(self.config, "workerinput") or not self.results:
            return
        if self.baseline is not None:
            return
        tests = {nodeid: r["peaks"] for nodeid, r in sorted(self.results.items())}
        tmp = self.baseline_path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"curesv_baseline": 1, "tests": tests}, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.baseline_path)
            self.baseline_written = len(tests)
        except OSError as err:
            self.baseline_written = err

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        if not self.available and not hasattr(self.config, "workerinput"):
            tr.write_line("curesv: libcuresv.so is not loaded: GPU memory limits and leak "
                          "checks were not applied")
        written = getattr(self, "baseline_written", None)
        if isinstance(written, int):
            tr.write_line("curesv: wrote the GPU memory baseline of %d tests to %s"
                          % (written, self.baseline_path))
        elif written is not None:
            tr.write_line("curesv: cannot write the GPU memory baseline %s: %s"
                          % (self.baseline_path, one_line(written)))
        if self.baseline is not None:
            missing = [n for n in self.results if n not in self.baseline]
            if missing:
                tr.write_line("curesv: %d tests are not in the baseline %s "
                              "(--gpu-memory-baseline-update writes it again)"
                              % (len(missing), self.baseline_path))
        if not self.config.getoption("gpu_memory_report") or not self.available:
            return
        tr.write_sep("=", "GPU memory (curesv)")
        rows = []
        for nodeid, r in self.results.items():
            peaks = {int(d): b for d, b in r["peaks"].items()}
            device, peak = max(peaks.items(), key=lambda kv: kv[1]) if peaks else (None, 0)
            rows.append((peak, r["leaked"] or 0, device, nodeid, r["leaks"]))
        rows.sort(key=lambda row: (-row[0], -row[1], row[3]))
        top = max(self.config.getoption("gpu_memory_report_top"), 0)
        tr.write_line("%12s  %6s  %12s  %s" % ("peak", "device", "leaked", "test"))
        for peak, leaked, device, nodeid, leaks in rows[:top]:
            tr.write_line("%12s  %6s  %12s  %s" % (
                human(peak), "-" if device is None else device,
                "-" if leaks is None else human(leaked), nodeid))
        tr.write_line("%d tests measured; peaks above what was live at each test's start, "
                      "leaks of tests marked gpu_memory_leaks" % len(rows))
