#!/usr/bin/env python3
"""Runs the integration programs under libcuresv.so and checks their JSON reports.

The same cases run in CI on the simulated CUDA stack (tests/sim) and on a GPU machine against the
real driver (scripts/gpu-check); both print one table and the line "N passed, N failed".

    run.py --lib build/plain/libcuresv.so --bin build/plain/it [--stack sim|gpu] [--only SUBSTR]
           [--sanitizer-runtime /path/to/libasan.so]   (preloaded first, for a sanitized shim)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

KiB = 1024
HANDOFF_ENV = {
    "CURESV_CAPACITY": "400K",
    "CURESV_RESERVATIONS": "scan=100K,pipe=200K",
    "CURESV_ATTACH": "scan=scan,pipe=pipe",
}


class Case:
    """One program run under the shim. `same_output`: stdout must match a run without the shim.
    `report`: True (check it), False (ignore it) or "absent" (none may be written); "text" checks
    the text report (a str) instead of the JSON one. `report_file(tmp)`, when given, makes what
    CURESV_REPORT_FILE names and returns its path and a function that checks it afterwards."""
    def __init__(self, name, argv, check, env=None, exit_code=0, stacks=("sim", "gpu"),
                 report=True, timeout=300, same_output=False, sanitized=True, preload=(),
                 report_file=None):
        self.sanitized = sanitized  # False: only with the plain shim (its own LD_PRELOAD order)
        self.preload = preload      # libraries preloaded before libcuresv.so
        self.name, self.argv, self.check = name, argv, check
        self.env, self.exit_code, self.stacks = env or {}, exit_code, stacks
        self.report, self.timeout, self.same_output = report, timeout, same_output
        self.report_file = report_file


def res(report, name):
    for r in report["reservations"]:
        if r["name"] == name:
            return r
    raise AssertionError("no reservation %r in the report" % name)


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def program_bytes(out):
    """The size the program says it allocated (pitched allocations know it only afterwards)."""
    for word in out.split():
        if word.startswith("bytes="):
            return int(word[6:])
    raise AssertionError("program printed no bytes=")


def check_handoff(kind):
    """scan allocated, pipe freed: the origin (scan) is debited, pipe's caller_view shows the bug."""
    def check(report, out):
        n = program_bytes(out)
        scan, pipe = res(report, "scan"), res(report, "pipe")
        device = kind != "host"
        for key, want in (("allocs", 1), ("frees", 1), ("cross_thread_frees", 1),
                          ("allocated", 0), ("host_allocated", 0), ("denied", 0),
                          ("peak", n if device else 0), ("caller_view", n if device else 0)):
            expect("scan " + key, scan[key], want)
        for key, want in (("allocs", 0), ("frees", 0), ("allocated", 0),
                          ("caller_view", -n if device else 0)):
            expect("pipe " + key, pipe[key], want)
        expect("table live", report["table"]["live"], 0)
        expect("unknown frees", report["unknown_frees"], 0)
        return scan["allocs"], scan["frees"], scan["cross_thread_frees"]
    return check


def check_enforce_denied(report, out):
    scan = res(report, "scan")
    expect("scan denied", scan["denied"], 1)
    for key in ("allocs", "frees", "allocated", "peak"):
        expect("scan " + key, scan[key], 0)
    expect("program saw", "cudaErrorMemoryAllocation" in out, True)
    return 0, 0, 0


def check_stress(threads, rounds):
    def check(report, out):
        total = threads * rounds
        shared = report["shared"]
        expect("allocs", shared["allocs"], total)
        expect("frees", shared["frees"], total)
        expect("allocated", shared["allocated"], 0)
        expect("table live", report["table"]["live"], 0)
        expect("leaks", report["leaks"]["count"], 0)
        expect("unknown frees", report["unknown_frees"], 0)
        expect("stale entries", report["stale_entries"], 0)
        if shared["cross_thread_frees"] == 0:
            raise AssertionError("no free crossed threads")
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_badfree(report, out):
    shared = report["shared"]
    expect("allocs", shared["allocs"], 1)
    expect("frees", shared["frees"], 1)
    expect("unknown frees (double + bogus)", report["unknown_frees"], 2)
    expect("table live", report["table"]["live"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_untouched(report, out):
    shared = report["shared"]
    for key in ("allocs", "frees", "allocated", "peak", "denied"):
        expect("shared " + key, shared[key], 0)
    expect("table live", report["table"]["live"], 0)
    return 0, 0, 0


def check_pool_denial(report, out):
    """A refusal by the shared pool of a device with no reservations still shows, with figures."""
    expect("shared denied", report["shared"]["denied"], 1)
    expect("devices reported", [d["device"] for d in report["devices"]], [0])
    expect("device 0 capacity", report["devices"][0]["capacity"], 1 << 20)
    line = ("curesv: CURESV_MODE=enforce refused 2 MiB (2097152 bytes) on device 0: the shared "
            "pool has 0 B of its 1 MiB budget in use; further refusals are counted in the report")
    if line not in out.splitlines():
        raise AssertionError("no warning line %r in %r" % (line, out[-400:]))
    return 0, 0, 0


def check_wrapped(wrapper_calls):
    def check(report, out):
        expect("wrapper calls", program_count(out, "calls"), wrapper_calls)
        shared = report["shared"]
        expect("allocs (counted once)", shared["allocs"], 1)
        expect("frees", shared["frees"], 1)
        expect("unknown frees", report["unknown_frees"], 0)
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_untouched_scan(report, out):
    scan = res(report, "scan")
    for key in ("allocs", "frees", "allocated", "peak", "denied", "caller_view"):
        expect("scan " + key, scan[key], 0)
    expect("table live", report["table"]["live"], 0)
    return 0, 0, 0


def check_nothing(report, out):
    return "-", "-", "-"


def program_count(out, key):
    for word in out.split():
        if word.startswith(key + "="):
            return int(word[len(key) + 1:])
    raise AssertionError("program printed no %s=" % key)


def check_rename(report, out):
    n = program_bytes(out)
    scan, pipe, shared = res(report, "scan"), res(report, "pipe"), report["shared"]
    for who, r in (("scan", scan), ("pipe", pipe), ("shared", shared)):
        expect(who + " allocs", r["allocs"], 1)
        expect(who + " frees", r["frees"], 1)
        expect(who + " peak", r["peak"], n)
        expect(who + " cross_thread_frees", r["cross_thread_frees"], 0)
    return 3, 3, 0


def check_busy_exit(report, out):
    leaks = report["leaks"]
    if leaks["count"] < 1 or leaks["bytes"] < (1 << 20):
        raise AssertionError("the 1 MiB left live is not in the leak list: %r" % leaks)
    if not any(x["bytes"] == 1 << 20 for x in leaks["largest"]):
        raise AssertionError("largest leaks lack the 1 MiB buffer")
    return report["shared"]["allocs"], report["shared"]["frees"], "-"


def check_control(report, out):
    if "shim=yes" not in out:
        raise AssertionError("the control API was not found")
    stage = res(report, "stage")
    for key, want in (("allocs", 1), ("frees", 1), ("allocated", 0), ("peak", 256 * KiB),
                      ("size", 1 << 20)):
        expect("stage " + key, stage[key], want)
    return 1, 1, 0


def check_table_full_passthrough(threads, rounds):
    def check(report, out):
        shared, untracked = report["shared"], report["untracked"]["count"]
        if report["table"]["full_events"] == 0 or untracked == 0:
            raise AssertionError("the 8-slot table never filled")
        expect("tracked + untracked", shared["allocs"] + untracked, threads * rounds)
        expect("allocs == frees", shared["allocs"], shared["frees"])
        expect("untracked frees are unknown frees", report["unknown_frees"], untracked)
        expect("table live", report["table"]["live"], 0)
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_table_full_fail(report, out):
    shared = report["shared"]
    if report["table_full_failures"] == 0:
        raise AssertionError("no allocation was failed")
    expect("untracked", report["untracked"]["count"], 0)
    expect("allocs == frees", shared["allocs"], shared["frees"])
    expect("unknown frees", report["unknown_frees"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_failed_free(report, out):
    scan = res(report, "scan")
    expect("scan allocated", scan["allocated"], 80 * KiB)
    expect("scan frees", scan["frees"], 0)
    expect("leaks", report["leaks"]["count"], 1)
    expect("leak owner", report["leaks"]["largest"][0]["reservation"], "scan")
    expect("leak thread", report["leaks"]["largest"][0]["thread"], "scan")
    return scan["allocs"], scan["frees"], scan["cross_thread_frees"]


def check_stderr(line):
    def check(report, out):
        if line not in out.splitlines():
            raise AssertionError("stderr lacks %r: %r" % (line, out[-300:]))
        return "-", "-", "-"
    return check


BADNAMES_JSON = ["x\ncuresv: FAKE", "\rcuresv: CR", "\x1b[2K\x1b[1Gesc", "\x01\x02\x7f",
                 "a\ufffd\ufffd\ufffdz", "c\ufffd\ufffd\ufffd\ufffdz"]
BADNAMES_TEXT = ["x\\ncuresv: FAKE", "\\x0dcuresv: CR", "\\x1b[2K\\x1b[1Gesc", "\\x01\\x02\\x7f",
                 "a\\xed\\xa0\\x80z", "c\\xf4\\x90\\x80\\x80z"]


def curesv_lines_only(text, where, program=None):
    """Each line of `text` is curesv's ("curesv: ...", no control character) or, when `program`
    is given, one the program printed ("program: ...")."""
    for line in text.split("\n")[:-1]:
        if program and line.startswith(program + ": "):
            continue
        if not line.startswith("curesv: ") or any(ord(c) < 32 or ord(c) == 127 for c in line):
            raise AssertionError("%s: a line not curesv's: %r" % (where, line))
        if line.startswith(("curesv: FAKE", "curesv: CR")):
            raise AssertionError("%s: a forged line: %r" % (where, line))
    if not text.endswith("\n"):
        raise AssertionError("%s: does not end with a newline: %r" % (where, text[-80:]))


def check_badnames_json(report, out):
    """Strict UTF-8 JSON (run_case decodes it so); names with U+FFFD where bytes were not UTF-8."""
    expect("leaked threads", [x["thread"] for x in report["leaks"]["largest"]], BADNAMES_JSON)
    curesv_lines_only(out, "stderr", "badnames")
    warning = ("curesv: thread 'x\\ncuresv: FAKE' was attached to reservation 'r', which was "
               "released; its allocations now draw from the shared pool")
    expect("released warning", warning in out.splitlines(), True)
    return report["shared"]["allocs"], report["shared"]["frees"], "-"


def check_badnames_text(text, out):
    curesv_lines_only(text, "text report")
    curesv_lines_only(out, "stderr", "badnames")
    for name in BADNAMES_TEXT:
        if "thread '%s' (#" % name not in text:
            raise AssertionError("the text report lacks thread %r" % name)
    leaks = [l for l in text.splitlines() if l.startswith("curesv: leaks:")]
    expect("leaks lines", len(leaks), 1)
    return "-", "-", "-"


def check_odd_config_text(text, out):
    """A CURESV_ATTACH pattern and an unknown variable name holding a newline stay on their line."""
    curesv_lines_only(text, "text report")
    curesv_lines_only(out, "stderr", "badnames")
    leaks = [l for l in text.splitlines() if l.startswith("curesv: leaks:")]
    expect("leaks lines", len(leaks), 1)
    for line in ("curesv: CURESV_X\\ncuresv: FAKE: unknown variable, ignored",):
        expect("stderr has %r" % line, line in out.splitlines(), True)
    rule = ("curesv: CURESV_ATTACH rule 'a\\ncuresv: leaks: none=r' matched no thread (name threads "
            "with pthread_setname_np or prctl(PR_SET_NAME))")
    expect("idle rule line", rule in text.splitlines(), True)
    return "-", "-", "-"


def refused_report_file(kind):
    """CURESV_REPORT_FILE names something curesv must not write to: one error line, then the
    (text) report on stderr; the thing itself untouched; and no wait for a FIFO's reader."""
    def make(tmp):
        path = os.path.join(tmp, "report.txt")
        target = os.path.join(tmp, "target")
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            with open(target, "w") as f:
                f.write("keep\n")
            os.symlink(target, path)
        elif kind == "dangling symlink":
            os.symlink(target, path)
        elif kind == "directory":
            os.mkdir(path)
        elif kind == "/dev/null":
            path = "/dev/null"
        elif kind == "newline":
            path = os.path.join(tmp, "no\ncuresv: FAKE", "r")
        reason = {"fifo": "not a regular file (a FIFO)",
                  "symlink": "a symbolic link (not followed)",
                  "dangling symlink": "a symbolic link (not followed)",
                  "directory": "not a regular file (a directory)",
                  "/dev/null": "not a regular file (a character device)",
                  "newline": "No such file or directory"}[kind]
        shown = path.replace("\n", "\\n")

        def check(out):
            want = "curesv: CURESV_REPORT_FILE: '%s': %s; the report goes to stderr instead" % (
                shown, reason)
            expect("error lines", [l for l in out.splitlines() if "CURESV_REPORT_FILE" in l], [want])
            curesv_lines_only(out, "stderr", "handoff")
            if not any(l.startswith("curesv:   scan ") for l in out.splitlines()):
                raise AssertionError("no report on stderr: %r" % out[-300:])
            if kind == "symlink":
                with open(target) as f:
                    expect("link target", f.read(), "keep\n")
            if kind == "dangling symlink":
                expect("link target created", os.path.lexists(target), False)
            if kind == "fifo":
                import stat
                expect("still a FIFO", stat.S_ISFIFO(os.lstat(path).st_mode), True)
            if kind == "directory":
                expect("directory contents", os.listdir(path), [])
        return path, check
    return make


def check_only_output(text):
    def check(report, out):
        expect("all the output", out, text)
        return "-", "-", "-"
    return check


def check_timeline(n):
    def check(report, out):
        if "timelines: %d ok" % n not in out:
            raise AssertionError("the program's own checks failed: " + out.strip()[-400:])
        expect("table live", report["table"]["live"], 0)
        expect("unknown frees", report["unknown_frees"], 0)
        expect("orphan bytes", report["orphan_bytes"], 0)
        shared = report["shared"]
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_torch(report, out):
    """Every tensor made on "scan" and freed on "pipe" debits scan; pipe's caller_view shows it."""
    n, size = program_count(out, "tensors"), program_count(out, "bytes")
    scan, pipe = res(report, "scan"), res(report, "pipe")
    if scan["cross_thread_frees"] < n:
        raise AssertionError("scan cross_thread_frees %d < %d tensors" % (scan["cross_thread_frees"], n))
    expect("scan allocated", scan["allocated"], 0)
    expect("scan allocs == frees", scan["allocs"], scan["frees"])
    if pipe["caller_view"] > -n * size:
        raise AssertionError("pipe caller_view %d, want <= %d" % (pipe["caller_view"], -n * size))
    expect("unknown frees", report["unknown_frees"], 0)
    return scan["allocs"], scan["frees"], scan["cross_thread_frees"]


def check_cupy(report, out):
    n = program_count(out, "arrays")
    shared = report["shared"]
    if shared["allocs"] < n:
        raise AssertionError("allocs %d < %d arrays" % (shared["allocs"], n))
    expect("allocs == frees + leaks", shared["allocs"], shared["frees"] + report["leaks"]["count"])
    expect("unknown frees", report["unknown_frees"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def cases(stack, bindir):
    b = lambda name: os.path.join(bindir, name)
    out = []
    families = ["runtime", "pitch", "managed", "host", "hostalloc", "async", "pool", "driver",
                "driver_pitch", "driver_managed", "driver_host", "driver_allochost", "driver_async",
                "driver_pool"]
    kinds = {"managed": "managed", "driver_managed": "managed", "host": "host",
             "hostalloc": "host", "driver_host": "host", "driver_allochost": "host"}
    for build in ("families", "families_ptds", "families_static"):
        for fam in families:
            out.append(Case("%s %s" % (build, fam), [b(build), fam],
                            check_handoff(kinds.get(fam, "device")), env=HANDOFF_ENV))
    for build in ("handoff", "handoff_static"):
        out.append(Case(build, [b(build)], check_handoff("device"), env=HANDOFF_ENV))
    out.append(Case("enforce denies past budget", [b("handoff")], check_enforce_denied,
                    env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K",
                             CURESV_MODE="enforce"), exit_code=1))
    threads, rounds = (16, 100000) if stack == "sim" else (16, 2000)
    out.append(Case("stress %dx%d" % (threads, rounds),
                    [b("stress"), str(threads), str(rounds)], check_stress(threads, rounds)))
    out.append(Case("unknown and double free", [b("badfree")], check_badfree))
    out.append(Case("driver OOM changes nothing", [b("oom")], check_untouched))
    out.append(Case("enforce: shared pool refuses, report shows it", [b("oom"), "2097152"],
                    check_pool_denial, env={"CURESV_MODE": "enforce", "CURESV_CAPACITY": "1M"}))
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                            "curesv")
    out.append(Case("launcher sets the environment",
                    [launcher, "--capacity", "400K", "--reserve=scan=100K", "--reserve", "pipe=200K",
                     "--attach", "scan=scan", "--attach=pipe=pipe", "--", b("handoff")],
                    check_handoff("device"), sanitized=False))
    out.append(Case("launcher: an option holding a newline stays on its line",
                    [launcher, "--x\ncuresv: FAKE\x1b[1m", "--", b("handoff")],
                    check_only_output("curesv: unknown option '--x\\ncuresv: FAKE\\x1b[1m' (see "
                                      "curesv --help)\n"),
                    exit_code=2, report="absent", sanitized=False))
    out.append(Case("reservation on a device the driver lacks", [b("handoff")],
                    check_stderr("curesv: CURESV_RESERVATIONS: 'far' is on device 3, but the driver "
                                 "reports 1 device: nothing can be charged to it"),
                    env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=100K,pipe=200K,far=1K@3",
                             CURESV_CAPACITY="0=400K"), stacks=("sim",)))
    out.append(Case("a cuMem wrapper linked after curesv", [b("wrapped_driver")], check_wrapped(0)))
    out.append(Case("a cuMem wrapper preloaded before curesv", [b("wrapped_driver")],
                    check_wrapped(2), preload=["libwrapmem.so"]))
    out.append(Case("fork while another thread is inside curesv", [b("fork_child"), "50"],
                    check_nothing, report=False, timeout=120, stacks=("sim",)))
    out.append(Case("exit() from a signal handler inside curesv", [b("exit_in_handler")],
                    check_nothing, report=False, timeout=60))
    out.append(Case("RTLD_NEXT from another library", [b("rtld_next")], check_nothing,
                    report=False))
    out.append(Case("rename follows prctl and pthread_setname_np", [b("rename")], check_rename,
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="1M")))
    out.append(Case("exit while threads allocate", [b("busy_exit")], check_busy_exit,
                    stacks=("sim",)))
    out.append(Case("exit while threads are alive", [b("busy_exit"), "quiesce"], check_busy_exit))
    out.append(Case("control API through dlsym", [b("control")], check_control))
    out.append(Case("CURESV_ENABLE=0 passes through", [b("handoff")], check_nothing,
                    env=dict(HANDOFF_ENV, CURESV_ENABLE="0"), report="absent"))
    out.append(Case("invalid configuration passes through", [b("handoff")],
                    check_stderr("curesv: CURESV_CAPACITY: '12Q': unknown suffix"),
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="12Q"), report="absent"))
    out.append(Case("CURESV_STRICT=1 aborts on it", [b("handoff")],
                    check_stderr("curesv: CURESV_CAPACITY: '12Q': unknown suffix"),
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="12Q", CURESV_STRICT="1"),
                    exit_code=-6, report="absent"))
    out.append(Case("table full: passthrough", [b("stress"), "4", "500"],
                    check_table_full_passthrough(4, 500), env={"CURESV_TABLE_SLOTS": "8"}))
    out.append(Case("table full: fail", [b("stress"), "4", "500"], check_table_full_fail,
                    env={"CURESV_TABLE_SLOTS": "8", "CURESV_TABLE_FULL": "fail"}, exit_code=1))
    out.append(Case("injected driver OOM, enforce mode", [b("handoff")], check_untouched_scan,
                    env=dict(HANDOFF_ENV, CURESV_MODE="enforce", CUDA_SIM_FAIL_ALLOC="1"),
                    exit_code=1, stacks=("sim",)))
    out.append(Case("failed free keeps the entry", [b("handoff")], check_failed_free,
                    env=dict(HANDOFF_ENV, CUDA_SIM_FAIL_FREE="1"), exit_code=1, stacks=("sim",)))
    for n, attribution in ((1, "caller"), (2, "origin"), (3, "origin"), (4, "origin")):
        out.append(Case("timeline %d (%s)" % (n, attribution), [b("timelines"), str(n)],
                        check_timeline(n), env={"CURESV_CAPACITY": "400K",
                                                "CURESV_ATTRIBUTION": attribution}))
    for attribution in ("origin", "caller"):
        out.append(Case("timeline 5 (enforce, %s)" % attribution,
                        [b("timelines"), "5", attribution], check_timeline(5),
                        env={"CURESV_CAPACITY": "96K", "CURESV_MODE": "enforce",
                             "CURESV_ATTRIBUTION": attribution}))
    out.append(Case("timeline 6 (32 freers racing release)", [b("timelines"), "6", "origin", "500"],
                    check_timeline(6), env={"CURESV_CAPACITY": "400K"}))
    badnames_env = {"CURESV_RESERVATIONS": "r=1M", "CURESV_ATTACH": "x*=r"}
    out.append(Case("odd thread names: JSON strings are UTF-8", [b("badnames")],
                    check_badnames_json, env=badnames_env))
    out.append(Case("odd thread names: text report lines stay lines", [b("badnames")],
                    check_badnames_text, env=badnames_env, report="text"))
    out.append(Case("odd pattern and variable name: lines stay lines", [b("badnames")],
                    check_odd_config_text, report="text",
                    env={"CURESV_RESERVATIONS": "r=1M", "CURESV_ATTACH": "a\ncuresv: leaks: none=r",
                         "CURESV_X\ncuresv: FAKE": "1"}))
    for kind in ("fifo", "symlink", "dangling symlink", "directory", "/dev/null", "newline"):
        out.append(Case("report file: %s refused" % kind, [b("handoff")], check_nothing,
                        env=HANDOFF_ENV, report=False, timeout=60,
                        report_file=refused_report_file(kind)))
    here = os.path.dirname(os.path.abspath(__file__))
    gpu_py = lambda script: ["python3", os.path.join(here, "..", "gpu", script)]
    out.append(Case("pytorch producer/consumer", gpu_py("torch_handoff.py"), check_torch,
                    env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                         "CURESV_RESERVATIONS": "scan=1G,pipe=1G",
                         "CURESV_ATTACH": "scan=scan,pipe=pipe"},
                    stacks=("gpu",), same_output=True))
    out.append(Case("cupy allocation loop", gpu_py("cupy_loop.py"), check_cupy, stacks=("gpu",),
                    same_output=True))
    return [c for c in out if stack in c.stacks]


def run_case(case, lib, stack, first=""):
    with tempfile.TemporaryDirectory() as tmp:
        path, after = os.path.join(tmp, "report.json"), None
        if case.report_file:
            path, after = case.report_file(tmp)
        env = dict(os.environ)
        env.update(case.env)
        before = " ".join(os.path.join(os.path.dirname(case.argv[0]), p) for p in case.preload)
        env.update({"LD_PRELOAD": " ".join(x for x in (first, before, lib) if x),
                    "CURESV_REPORT": "text" if case.report == "text" or after else "json",
                    "CURESV_REPORT_FILE": path})
        try:
            p = subprocess.run(case.argv, env=env, capture_output=True, text=True,
                               timeout=case.timeout)
        except subprocess.TimeoutExpired:
            return False, ("-", "-", "-"), "timed out", "-"
        out = p.stdout + p.stderr
        if p.returncode != case.exit_code:
            return False, ("-", "-", "-"), "exit %d: %s" % (p.returncode, out.strip()[-300:]), "-"
        if case.same_output:
            plain_env = {k: v for k, v in env.items() if not k.startswith(("CURESV_", "LD_PRELOAD"))}
            plain = subprocess.run(case.argv, env=plain_env, capture_output=True, text=True,
                                   timeout=case.timeout)
            if plain.stdout != p.stdout:
                return False, ("-", "-", "-"), "output differs without the shim: %r vs %r" % (
                    plain.stdout.strip()[-200:], p.stdout.strip()[-200:]), "-"
        if case.report == "absent":
            if os.path.exists(path):
                return False, ("-", "-", "-"), "a report was written", "-"
            case.report = False
        if after:
            try:
                after(out)
            except AssertionError as err:
                return False, ("-", "-", "-"), str(err), "-"
        if not case.report:
            try:
                return True, case.check(None, out), "", "-"
            except AssertionError as err:
                return False, ("-", "-", "-"), str(err), "-"
        if case.report == "text":
            try:
                with open(path, encoding="utf-8") as f:
                    return True, case.check(f.read(), out), "", "-"
            except (OSError, ValueError, AssertionError) as err:
                return False, ("-", "-", "-"), str(err), "-"
        try:
            with open(path, encoding="utf-8") as f:  # strict: JSON text is UTF-8
                report = json.load(f)
        except (OSError, ValueError) as err:
            return False, ("-", "-", "-"), "no JSON report: %s; %s" % (err, out.strip()[-300:]), "-"
        try:
            counts = case.check(report, out)
        except AssertionError as err:
            return False, ("-", "-", "-"), str(err), report["leaks"]["count"]
        return True, counts, "", report["leaks"]["count"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stack", default="sim", choices=("sim", "gpu"))
    ap.add_argument("--only", default="")
    ap.add_argument("--sanitizer-runtime", default="")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    rows, failed = [], 0
    for case in cases(args.stack, args.bin):
        if args.only not in case.name or (args.sanitizer_runtime and not case.sanitized):
            continue
        ok, (allocs, frees, crossed), why, leaks = run_case(case, lib, args.stack,
                                                            args.sanitizer_runtime)
        failed += not ok
        rows.append((case.name, "pass" if ok else "FAIL", allocs, frees, crossed, leaks, why))
    width = max(len(r[0]) for r in rows) if rows else 10
    print("%-*s  %-6s %9s %9s %9s %6s" % (width, "case", "result", "allocs", "frees", "x-thread",
                                          "leaks"))
    for r in rows:
        print("%-*s  %-6s %9s %9s %9s %6s" % ((width,) + r[:6]))
        if r[6]:
            print("    " + r[6])
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
