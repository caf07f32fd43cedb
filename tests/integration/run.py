#!/usr/bin/env python3
"""Runs the integration programs under libcuresv.so and checks their JSON reports.

The same cases run in CI on the simulated CUDA stack (tests/sim) and on a GPU machine against the
real driver (scripts/gpu-check); both print one table and the line "N passed, N failed".

    run.py --lib build/plain/libcuresv.so --bin build/plain/it [--stack sim|gpu] [--only SUBSTR]
           [--sanitizer-runtime /path/to/libasan.so]   (preloaded first, for a sanitized shim)
"""
import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
import check_trace  # noqa: E402  (tests/unit/check_trace.py)
import check_report  # noqa: E402  (tests/unit/check_report.py)

# The key table of curesv-report(5), which names every key of a JSON report.
PAGE_KEYS = check_report.page_keys(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                "..", "..", "scripts", "man", "curesv-report.5"))

KiB = 1024
HANDOFF_ENV = {
    "CURESV_CAPACITY": "400K",
    "CURESV_RESERVATIONS": "scan=100K,pipe=200K",
    "CURESV_ATTACH": "scan=scan,pipe=pipe",
}


class Case:
    """One program run under the shim. `same_output`: stdout must match a run without the shim.
    `report`: True (check the JSON one), "text" (check the text one: the check gets it, and the
    program's output followed by it), False (ignore it) or "absent" (none may be written). `shim`:
    False runs the program without libcuresv.so. `setup`: called before the run, returns more
    environment. `trace`: "rmm" or "chrome": the run writes a CURESV_TRACE too, checked against the
    report (its final values too when `quiescent`: nothing ran on after the report).
    Every JSON report is checked besides: curesv-report(5)'s key table names each of its keys, and, when
    `quiescent`, its rows add up (check_report.py --rows).
    `report_file(tmp)`, when given, makes what CURESV_REPORT_FILE names and returns its path and a
    function that checks it afterwards. `per_process`: every process writes its own JSON report
    (CURESV_REPORT_FILE with %p); the check gets them all, {pid: report}, instead of one."""
    def __init__(self, name, argv, check, env=None, exit_code=0, stacks=("sim", "gpu"),
                 report=True, timeout=300, same_output=False, sanitized=True, preload=(),
                 shim=True, setup=None, trace=None, quiescent=True, report_file=None,
                 per_process=False, needs=None):
        self.needs = needs          # (path, why): skipped, saying why, when path does not exist
        self.per_process = per_process
        self.trace, self.quiescent = trace, quiescent
        self.sanitized = sanitized  # False: only with the plain shim (its own LD_PRELOAD order)
        self.preload = preload      # libraries preloaded before libcuresv.so
        self.name, self.argv, self.check = name, argv, check
        self.env, self.exit_code, self.stacks = env or {}, exit_code, stacks
        self.report, self.timeout, self.same_output = report, timeout, same_output
        self.shim, self.setup = shim, setup
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


def check_family_denied(report, out):
    """scan's one allocation refused by its budget: counted as refused, nothing booked or freed."""
    scan = res(report, "scan")
    expect("scan denied", scan["denied"], 1)
    for key in ("allocs", "frees", "allocated", "peak"):
        expect("scan " + key, scan[key], 0)
    expect("shared allocs", report["shared"]["allocs"], 0)
    expect("untracked", report["untracked"]["count"], 0)
    expect("table live", report["table"]["live"], 0)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("program saw the refusal", " FAILED" in out, True)
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


def reservation(report, name):
    for r in report["reservations"]:
        if r["name"] == name and not r["released"]:
            return r
    raise AssertionError("no live reservation %r in the report" % name)


def printed(out, key):
    """The integer `key=N` the program printed."""
    m = re.search(r"\b%s=(\d+)\b" % re.escape(key), out)
    if not m:
        raise AssertionError("the program printed no %s=" % key)
    return int(m.group(1))


def check_streams_creator(report, out):
    """Streams made by threads attached to scan carry scan, whoever allocates on them."""
    scan = reservation(report, "scan")
    n = printed(out, "scan_allocs")
    expect("scan allocs", scan["allocs"], n)
    expect("scan frees", scan["frees"], n)
    expect("scan allocated", scan["allocated"], 0)
    expect("scan peak", scan["peak"], n * 64 * 1024)
    expect("scan cross-stream frees", scan["cross_stream_frees"], n)
    expect("scan streams attached at exit", scan["streams_attached"], 0)
    expect("shared allocs", report["shared"]["allocs"], 1)
    expect("leaks", report["leaks"]["count"], 0)
    return scan["allocs"], scan["frees"], scan["cross_thread_frees"]


def check_streams_destroyed(report, out):
    """A destroyed stream's live allocations keep their origin; the stream's attachment goes."""
    scan = reservation(report, "scan")
    expect("scan allocs", scan["allocs"], printed(out, "scan_allocs"))
    expect("scan peak", scan["peak"], printed(out, "scan_bytes"))
    expect("scan frees", scan["frees"], 4)
    expect("scan allocated", scan["allocated"], 0)
    expect("scan cross-stream frees (freed on the legacy stream)", scan["cross_stream_frees"], 4)
    expect("scan streams attached", scan["streams_attached"], 0)
    expect("the new stream carries nothing: shared allocs", report["shared"]["allocs"], 1)
    expect("leaks", report["leaks"]["count"], 0)
    return scan["allocs"], scan["frees"], scan["cross_thread_frees"]


def check_streams_pool(report, out):
    """16 threads, 8 streams on r0..r3, frees on random other streams: exact counters."""
    crossed = 0
    for k in range(4):
        r = reservation(report, "r%d" % k)
        n = printed(out, "r%d" % k)
        expect("r%d allocs" % k, r["allocs"], n)
        expect("r%d frees" % k, r["frees"], n)
        expect("r%d allocated" % k, r["allocated"], 0)
        expect("r%d caller_view" % k, r["caller_view"] <= r["size"], True)
        crossed += r["cross_stream_frees"]
    expect("cross-stream frees", crossed, printed(out, "crossed"))
    expect("shared allocs", report["shared"]["allocs"], 0)
    expect("table live", report["table"]["live"], 0)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    total = sum(reservation(report, "r%d" % k)["allocs"] for k in range(4))
    return total, total, sum(reservation(report, "r%d" % k)["cross_thread_frees"] for k in range(4))


def check_streams_devices(report, out):
    """A stream-ordered allocation is its stream's device's; a from-pool one its pool's location's."""
    dev = {d["device"]: d for d in report["devices"]}
    expect("devices reported", sorted(dev), [0, 1])
    expect("device 1 peak: the stream's 1 MiB, the pools' 2 + 4 MiB", dev[1]["peak"], 7 << 20)
    expect("device 1 allocated", dev[1]["allocated"], 0)
    expect("device 1 allocs", dev[1]["shared"]["allocs"], 3)
    expect("device 0 peak (host tier apart)", dev[0]["peak"], 0)
    expect("host-located pool: device 0's host tier", dev[0]["shared"]["host_allocated"], 3 << 20)
    expect("leaks", report["leaks"]["count"], 1)
    expect("leak kind", report["leaks"]["largest"][0]["kind"], "host")
    allocs = sum(d["shared"]["allocs"] for d in dev.values())
    frees = sum(d["shared"]["frees"] for d in dev.values())
    return allocs, frees, sum(d["shared"]["cross_thread_frees"] for d in dev.values())


def check_pool_race(report, out):
    """Both allocations came from a host-located pool: none may reach device 0's books."""
    expect("the host pool got the destroyed device pool's handle", printed(out, "reused"), 1)
    shared, dev = report["shared"], report["devices"][0]
    expect("shared allocs", shared["allocs"], 2)
    expect("shared frees", shared["frees"], 2)
    expect("device 0 peak (host-pool allocations charged to the device)", dev["peak"], 0)
    expect("device 0 allocated", dev["allocated"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_graphs(report, out):
    """Graph allocations are neither charged nor unknown frees; the relaxed-mode cudaMalloc is."""
    launches = printed(out, "launches")
    graphs = report["graph_allocations"]
    expect("graph allocations recorded", graphs["recorded"], printed(out, "captured"))
    expect("frees of them outside the graph (cudaFree after each launch)", graphs["frees"],
           launches)
    shared = report["shared"]
    expect("real allocations: warm-up, bystander, relaxed-mode cudaMalloc", shared["allocs"], 3)
    expect("their frees", shared["frees"], 3)
    expect("allocated", shared["allocated"], 0)
    expect("peak: no graph allocation is charged", shared["peak"], 1 << 20)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("stale entries", report["stale_entries"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    dev = report["devices"][0]
    if dev["graph"] is None or dev["graph"]["used_high"] < (4 << 20):
        raise AssertionError("no graph memory read from the driver: %r" % dev["graph"])
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_graph_wrong_thread(report, out):
    """The capture a refused EndCapture left running still records: its allocation is the graph's."""
    graphs = report["graph_allocations"]
    expect("graph allocations recorded", graphs["recorded"], printed(out, "captured"))
    expect("frees of them outside the graph", graphs["frees"], printed(out, "launches"))
    shared = report["shared"]
    expect("real allocations: the warm-up", shared["allocs"], 1)
    expect("their frees", shared["frees"], 1)
    expect("peak: the graph allocation is not charged", shared["peak"], 4096)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_graph_ptds(report, out):
    """Two threads' captures of their per-thread streams: neither captured allocation is charged."""
    graphs = report["graph_allocations"]
    expect("graph allocations recorded", graphs["recorded"], printed(out, "captured"))
    shared = report["shared"]
    expect("real allocations: the warm-up and the 1 MiB after the captures", shared["allocs"], 2)
    expect("their frees", shared["frees"], 2)
    expect("allocated", shared["allocated"], 0)
    expect("peak: no captured allocation is charged", shared["peak"], 1 << 20)
    expect("denied", shared["denied"], 0)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    expect("graph allocations in the table once their graphs are destroyed", graphs["in_table"], 0)
    expect("table live", report["table"]["live"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_graph_churn(report, out):
    """Destroyed graphs' allocations leave the table; those freed after their graph are no unknown
    frees; the real allocations that follow fit a table the graphs' would have filled."""
    graphs = report["graph_allocations"]
    expect("graph allocations recorded", graphs["recorded"], printed(out, "graphs"))
    expect("frees of them outside the graphs", graphs["frees"], printed(out, "frees"))
    expect("graph allocations in the table", graphs["in_table"], 0)
    expect("table live", report["table"]["live"], 0)
    expect("table full failures", report["table_full_failures"], 0)
    expect("unknown frees", report["unknown_frees"], 0)
    expect("stale entries", report["stale_entries"], 0)
    shared = report["shared"]
    expect("real allocations: the warm-up and those after the graphs", shared["allocs"],
           1 + printed(out, "real"))
    expect("their frees", shared["frees"], shared["allocs"])
    expect("leaks", report["leaks"]["count"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_graph_outlive(report, out):
    """The executable graph keeps its graph's allocation in the table (cudaFree after each launch
    is a graph allocation's free), until it is destroyed too."""
    graphs = report["graph_allocations"]
    expect("graph allocations recorded", graphs["recorded"], printed(out, "captured"))
    expect("frees of them after the graph was destroyed", graphs["frees"],
           printed(out, "launches"))
    expect("unknown frees", report["unknown_frees"], 0)
    expect("graph allocations in the table once the executable graph is gone", graphs["in_table"],
           0)
    expect("table live", report["table"]["live"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    shared = report["shared"]
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_streams_ptds(report, out):
    """Each thread's per-thread stream is a stream of its own; the legacy stream has two names."""
    shared = report["devices"][0]["shared"]
    expect("allocs", shared["allocs"], printed(out, "allocs"))
    expect("frees", shared["frees"], printed(out, "allocs"))
    expect("cross-stream frees: those freed on another thread's per-thread stream",
           shared["cross_stream_frees"], printed(out, "crossed"))
    expect("allocated", shared["allocated"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


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


def check_pitch_denial(report, out):
    """256 bytes asked, 256 rows of the simulated driver's 512-byte pitch made: past 64 KiB, so the
    allocation is given back and refused, counted once, with nothing left behind."""
    shared = report["shared"]
    expect("shared denied", shared["denied"], 1)
    expect("shared allocs", shared["allocs"], 0)
    expect("shared allocated", shared["allocated"], 0)
    expect("unknown frees (the give-back is not one)", report["unknown_frees"], 0)
    expect("device 0 peak", report["devices"][0]["peak"], 0)
    expect("leaks", report["leaks"]["count"], 0)
    line = ("curesv: CURESV_MODE=enforce refused 128 KiB (131072 bytes) on device 0: the shared "
            "pool has 0 B of its 64 KiB budget in use; further refusals are counted in the report")
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


def check_reload(report, out):
    """Two rounds of cudaMalloc + cudaFree, one before the runtime's dlclose, one after."""
    expect("second round", "again: cudaMalloc 0 cudaFree 0" in out.splitlines(), True)
    shared = report["shared"]
    expect("allocs", shared["allocs"], 2)
    expect("frees", shared["frees"], 2)
    expect("unknown frees", report["unknown_frees"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


TWO_RUNTIMES = re.compile(
    r"curesv: two CUDA runtimes are loaded \((\S+/libcudart\.so\.13), (\S+/libcudart\.so\.12)\): "
    r"curesv's cudaMalloc & co\. forward every call to \1, also those of code built for \2; run "
    r"that code without curesv if it misbehaves")


def check_two_runtimes(report, out):
    """One warning names both runtimes; the plugin's allocation reached .13 through curesv; the
    report names both, .13 as the one curesv forwards to."""
    warned = [line for line in out.splitlines() if "two CUDA runtimes" in line]
    expect("warnings", len(warned), 1)
    m = TWO_RUNTIMES.fullmatch(warned[0])
    if not m:
        raise AssertionError("unexpected warning: %r" % warned[0])
    expect("report's runtimes", report["runtimes"],
           [{"path": m.group(1), "target": True}, {"path": m.group(2), "target": False}])
    shared = report["shared"]
    expect("allocs", shared["allocs"], 2)
    expect("frees", shared["frees"], 2)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_one_runtime(report, out):
    """A program with one runtime: the report names it as the one curesv forwards to, no warning."""
    expect("warnings", [line for line in out.splitlines() if "CUDA runtimes" in line], [])
    runtimes = report["runtimes"]
    expect("runtimes", len(runtimes), 1)
    expect("target", runtimes[0]["target"], True)
    if not runtimes[0]["path"].endswith("/libcudart.so.13"):
        raise AssertionError("runtime: %r" % runtimes[0]["path"])
    return check_handoff("device")(report, out)


def check_table_high_water(report, out):
    """Ten allocations live at once, made by four threads one after another: high water 10."""
    expect("program", out.strip(), "table_hw: ok")
    expect("table high water", report["table"]["high_water"], 10)
    expect("table live", report["table"]["live"], 0)
    shared = report["shared"]
    expect("shared allocs", shared["allocs"], 10)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_held(kept, size, over):
    """hold 4 524288 under big=2M on a 1 MiB device: `kept` allocations pass, big's size reads
    `size`, and the report marks the device over its capacity exactly when `over`."""
    def check(report, out):
        expect("program", printed_line(out, "hold:"), "hold: %d of 4 allocated" % kept)
        big = res(report, "big")
        expect("big size", big["size"], size)
        expect("big allocs", big["allocs"], kept)
        expect("big denied", big["denied"], 4 - kept)
        dev = report["devices"][0]
        expect("device capacity", dev["capacity"], 1 << 20)
        expect("device peak", dev["peak"], kept * 512 * KiB)
        expect("over_capacity", dev.get("over_capacity"), over)
        return big["allocs"], big["frees"], big["cross_thread_frees"]
    return check


def printed_line(out, prefix):
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    if len(lines) != 1:
        raise AssertionError("%r lines: %r" % (prefix, lines))
    return lines[0]


def check_slow_free(pairs):
    """The pairs were made while the slow free was in flight; every call is in the books."""
    def check(report, out):
        want = "slow_free: %d pairs while another thread's free was in flight: ok" % pairs
        expect("the program's line", want in out.splitlines(), True)
        shared = report["shared"]
        expect("allocs", shared["allocs"], pairs + 1)
        expect("frees", shared["frees"], pairs + 1)
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_churn(threads):
    """Every buffer freed; resident memory grew by less than 512 KiB from the 5000th thread on
    (a shard index per thread ever seen, not per thread at once, took 1.1 to 4 MiB)."""
    def check(report, out):
        m = re.search(r"churn: threads=(\d+) rss_warm_kib=(\d+) rss_end_kib=(\d+) allocs=(\d+) "
                      r"frees=(\d+)", out)
        if not m:
            raise AssertionError("the program printed no churn line: %r" % out[-300:])
        n, warm, end, allocs, frees = (int(x) for x in m.groups())
        expect("threads", n, threads)
        if end - warm >= 512:
            raise AssertionError("resident memory grew from %d to %d KiB" % (warm, end))
        shared = report["shared"]
        expect("allocs", shared["allocs"], allocs)
        expect("frees", shared["frees"], frees)
        expect("allocated", shared["allocated"], 0)
        return shared["allocs"], shared["frees"], shared["cross_thread_frees"]
    return check


def check_forks_in_handler(report, out):
    m = re.search(r"fork_in_handler: (\d+) forks ok", out)
    if not m or int(m.group(1)) == 0:
        raise AssertionError("no fork was made: " + out.strip()[-300:])
    shared = report["shared"]
    expect("leaks", report["leaks"]["count"], 0)
    expect("shared frees", shared["frees"], shared["allocs"])
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_fork_free(reports, out):
    """fork() during another thread's slow cudaFree(p): in the child the free never finishes, so p
    is still live there and the child's own free of it is an ordinary one; both books balance."""
    parent, child = printed(out, "parent"), printed(out, "child")
    expect("reports, by pid", sorted(reports), sorted([parent, child]))
    # (allocs, frees, cross_thread_frees): the child inherits p's allocation, frees it itself and
    # allocates and frees the same address once more; the parent's thread freed p.
    for who, pid, want in (("parent", parent, (1, 1, 1)), ("child", child, (2, 2, 0))):
        r = reports[pid]
        expect(who + " pid", r["pid"], pid)
        shared = r["shared"]
        expect(who + " unknown frees", r["unknown_frees"], 0)
        expect(who + " allocated", shared["allocated"], 0)
        expect(who + " allocs, frees, cross-thread frees",
               (shared["allocs"], shared["frees"], shared["cross_thread_frees"]), want)
        expect(who + " peak: one 64 KiB buffer at a time", shared["peak"], 64 * KiB)
        expect(who + " device 0 allocated", r["devices"][0]["allocated"], 0)
        expect(who + " device 0 peak", r["devices"][0]["peak"], 64 * KiB)
        expect(who + " denied", shared["denied"], 0)
        expect(who + " stale entries", r["stale_entries"], 0)
        expect(who + " table live", r["table"]["live"], 0)
        expect(who + " leaks", (r["leaks"]["count"], r["leaks"]["bytes"]), (0, 0))
    return "1+2", "1+2", "1+0"


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


MiB = 1024 * KiB
MEMINFO_ENV = {"CUDA_SIM_TOTAL_MEM": "64M", "CURESV_RESERVATIONS": "scan=8M"}
# meminfo.c's steps: device bytes in use (all charged through curesv), the budget (scan's 8 MiB
# while attached, else the shared pool: 64 MiB less scan) and what is charged to it.
MEMINFO_STEPS = (("start", 0, 56, 0), ("shared", 4, 56, 4), ("attached", 4, 8, 0),
                 ("scan", 7, 8, 3), ("over", 13, 8, 9), ("detached", 13, 56, 4),
                 ("stream", 13, 56, 4), ("end", 0, 56, 0))


def check_meminfo(budget, stack_total=64 * MiB, proc=None):
    """Each step's free and total: the driver's own (budget False), or the caller's budget: total
    the budget, free the budget less what is charged to it, never below 0, never past the driver's
    free (the detached step: the shared pool has 52 MiB left, the device 51 MiB). `proc`: the
    object whose function cuGetProcAddress handed out (the lookup and legacy forms)."""
    def check(report, out):
        if proc:
            expect("cuGetProcAddress(\"cuMemGetInfo\") from",
                   [x[5:] for x in out.splitlines() if x.startswith("proc=")], [proc])
        seen = {}
        for line in out.splitlines():
            words = line.split()
            if len(words) == 3 and words[1].startswith("free=") and words[2].startswith("total="):
                seen[words[0]] = (int(words[1][5:]), int(words[2][6:]))
        if "meminfo: ok" not in out.splitlines():
            raise AssertionError("the program failed: %r" % out[-300:])
        for step, used, size, charged in MEMINFO_STEPS:
            driver_free = stack_total - used * MiB
            if budget:
                total = min(size * MiB, stack_total)
                want = (min(max(size - charged, 0) * MiB, driver_free, total), total)
            else:
                want = (driver_free, stack_total)
            expect("%s (free, total)" % step, seen.get(step), want)
        return "-", "-", "-"
    return check


def check_stderr(line):
    def check(report, out):
        if line not in out.splitlines():
            raise AssertionError("stderr lacks %r: %r" % (line, out[-300:]))
        return "-", "-", "-"
    return check


def check_meminfo_bad(report, out):
    """One line names the variable and the value, then the one every invalid configuration gets:
    curesv is off, so the driver answers."""
    lines = ["curesv: CURESV_MEMINFO: 'bugdet': expected driver (the driver's answer) or budget "
             "(the calling thread's budget)",
             "curesv: invalid configuration: curesv is off, the program runs unchanged "
             "(CURESV_STRICT=1 makes this fatal; curesv --check lists every problem)"]
    curesv = [x for x in out.splitlines() if x.startswith("curesv: ")]
    expect("curesv's lines", curesv, lines)
    return check_meminfo(False)(report, out)


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
    rule = ("curesv: CURESV_ATTACH rule 'a\\ncuresv: leaks: none=r' attached nothing: no thread "
            "with a matching name allocated (rules are matched at a thread's allocations; name it "
            "with pthread_setname_np or prctl(PR_SET_NAME) before its first one)")
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


def check_trace_child(report, out):
    """The parent's trace is whole (run.py checks it against the parent's report, written last);
    the child, finding the file in use, wrote no trace and said so in one line."""
    want = re.compile(r"curesv: CURESV_TRACE: '.*/trace': another process is writing to it \(put "
                      r"%p in the name to give each process its own\); no trace is written")
    lines = [l for l in out.splitlines() if "CURESV_TRACE" in l]
    if len(lines) != 1 or not want.fullmatch(lines[0]):
        raise AssertionError("lines naming CURESV_TRACE: %r" % lines)
    expect("program", "trace_child: parent pairs=6000 child exit=0" in out, True)
    shared = report["shared"]
    expect("parent's allocs and frees", (shared["allocs"], shared["frees"]), (6000, 6000))
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def report_file_on_trace(tmp):
    """CURESV_REPORT_FILE names the trace by another spelling: one line, the report on stderr, the
    trace (an RMM CSV of the hand-off's two rows) left as it is."""
    trace = os.path.join(tmp, "trace")
    path = os.path.join(tmp, ".", "trace")

    def check(out):
        want = ("curesv: CURESV_REPORT_FILE: '%s': the file CURESV_TRACE writes to, left as it "
                "is; the report goes to stderr instead" % path)
        expect("lines naming the report file",
               [l for l in out.splitlines() if "CURESV_REPORT_FILE" in l], [want])
        if not any(l.startswith("curesv:   scan ") for l in out.splitlines()):
            raise AssertionError("no report on stderr: %r" % out[-300:])
        with open(trace) as f:
            rows = f.read().splitlines()
        expect("trace header", rows[0], "Thread,Time,Action,Pointer,Size,Stream")
        expect("trace actions", [r.split(",")[2] for r in rows[1:]], ["allocate", "free"])
    return path, check


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


def check_torch_meminfo(report, out):
    """torch_meminfo.py's own checks passed, and the report holds its reservation's tensors."""
    if "torch_meminfo: ok" not in out:
        raise AssertionError("torch_meminfo.py: %r" % out[-400:])
    model = res(report, "model")
    expect("model allocated at exit", model["allocated"], 0)
    if model["allocs"] < 2 or model["over_budget"] < 1:
        raise AssertionError("model: %d allocations, %d past the budget; want at least 2 and 1"
                             % (model["allocs"], model["over_budget"]))
    return model["allocs"], model["frees"], model["cross_thread_frees"]


def check_torch_pool(report, out):
    """torch_pool.py's own checks passed; the exit report names the pool, its refusal, one member
    left, and nothing live (the killed member's bytes reclaimed, the survivor's freed)."""
    if "torch_pool: ok" not in out:
        raise AssertionError("torch_pool.py: %r" % out[-600:])
    pool = report["pool"]
    if pool is None:
        raise AssertionError("the report names no pool")
    expect("pool refusals", pool["refusals"], 1)
    expect("pool members at exit", pool["members"], 1)
    for d in pool["devices"]:
        expect("pool device %d live at exit" % d["device"], d["live"], 0)
    return report["shared"]["allocs"], report["shared"]["frees"], 0


def check_torch_module(report, out):
    """The module names the threads, reserves and attaches; tensors cross threads; stats agree."""
    if "torch_module: ok" not in out:
        raise AssertionError("the program's own checks failed: " + out.strip()[-600:])
    n, size = program_count(out, "tensors"), program_count(out, "bytes")
    scan, pipe = res(report, "scan"), res(report, "pipe")
    if scan["cross_thread_frees"] < n:
        raise AssertionError("scan cross_thread_frees %d < %d" % (scan["cross_thread_frees"], n))
    expect("scan allocated", scan["allocated"], 0)
    expect("scan size", scan["size"], 1 << 30)
    # pipe freed the n tensors; then the main thread's tensor, transferred to pipe (its caller_view
    # takes it), was freed by the main thread (whose view is debited)
    if pipe["caller_view"] > -(n - 1) * size:
        raise AssertionError("pipe caller_view %d, want <= %d" % (pipe["caller_view"],
                                                                  -(n - 1) * size))
    return scan["allocs"], scan["frees"], scan["cross_thread_frees"]


def check_cupy(report, out):
    n = program_count(out, "arrays")
    shared = report["shared"]
    if shared["allocs"] < n:
        raise AssertionError("allocs %d < %d arrays" % (shared["allocs"], n))
    expect("allocs == frees + leaks", shared["allocs"], shared["frees"] + report["leaks"]["count"])
    expect("unknown frees", report["unknown_frees"], 0)
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def curesv_lines(out):
    return [l for l in out.splitlines() if l.startswith("curesv: ")]


def check_lines(*lines):
    """Exactly these curesv lines, in this order, and no other (the program's own may be there)."""
    def check(report, out):
        expect("curesv lines", curesv_lines(out), list(lines))
        return "-", "-", "-"
    return check


def check_has(*lines, then=None):
    """These lines among the output (a compiled pattern: a line it matches whole), then `then` on
    the report."""
    def check(report, out):
        for line in lines:
            if not (any(line.fullmatch(l) for l in out.splitlines()) if hasattr(line, "fullmatch")
                    else line in out.splitlines()):
                raise AssertionError("no line %r in %r" % (getattr(line, "pattern", line),
                                                           out[-600:]))
        return then(report, out) if then else ("-", "-", "-")
    return check


def check_exit_status(lines, leaked, line=None):
    """The program's stdout is whole (every line, and the unterminated tail) whatever the status."""
    def check(report, out):
        got = [l for l in out.splitlines() if l.startswith("line ")]
        expect("stdout lines", len(got), lines)
        if "end" not in out:
            raise AssertionError("the unterminated last write was lost")
        if line is not None:
            expect("CURESV_ERROR_EXITCODE lines",
                   [l for l in curesv_lines(out) if "CURESV_ERROR_EXITCODE" in l],
                   [line] if line else [])
        if report is not None:
            expect("leaks", report["leaks"]["count"], 1 if leaked else 0)
        return "-", "-", "-"
    return check


def header_version():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "core", "curesv.h")) as f:
        for line in f:
            if line.startswith("#define CURESV_VERSION "):
                return line.split('"')[1]
    raise AssertionError("no CURESV_VERSION in curesv.h")


def check_version(report, out):
    expect("version output", out.strip(), "curesv " + header_version())
    return "-", "-", "-"


def check_linked(report, out):
    if "linked: bytes=98304 ok" not in out:
        raise AssertionError("the program failed: " + out.strip()[-300:])
    linked = res(report, "linked")
    for key, want in (("allocs", 1), ("frees", 1), ("peak", 96 * KiB), ("allocated", 0)):
        expect("linked " + key, linked[key], want)
    return linked["allocs"], linked["frees"], linked["cross_thread_frees"]


def check_module(report, out):
    """The unittest run passed; the exit report agrees with what the tests left behind."""
    if "module tests:" not in out or "FAILED" in out:
        raise AssertionError("unittest failed: " + out.strip()[-1500:])
    if report is None:
        return "-", "-", "-"
    rule = res(report, "py_rule")
    for key, want in (("allocs", 1), ("frees", 1), ("cross_thread_frees", 1), ("allocated", 0)):
        expect("py_rule " + key, rule[key], want)
    released = sorted(r["name"] for r in report["reservations"] if r["released"])
    expect("released by the tests", released, ["py_a", "py_b", "py_c", "py_d", "py_e", "py_f",
                                            "py_g", "py_h", "py_h", "py_st"])
    expect("table live", report["table"]["live"], 0)
    expect("orphan bytes", report["orphan_bytes"], 0)
    return report["shared"]["allocs"], report["shared"]["frees"], "-"


VMM_ENV = {"CURESV_RESERVATIONS": "vm=64M", "CURESV_ATTACH": "vmm=vm"}
VMM_ZERO = {"handles": 0, "bytes": 0, "host_bytes": 0, "mappings": 0, "mapped_bytes": 0,
            "host_mapped_bytes": 0, "imports": 0, "retains": 0, "unknown_releases": 0,
            "untracked": 0, "devices": [], "imported": {"handles": 0, "mappings": 0,
                                                       "mapped_bytes": 0}}


def check_vmm(allocs, frees, peak, vm=None, vmm=None, leaks=0, out_has=()):
    """vmm.c's report: reservation vm's counters (peak: in multiples of the program's bytes=),
    the vmm section (keys not given are expected at VMM_ZERO), the leaks; nothing unknown."""
    def check(report, out):
        if "FAILED" in out or " ok" not in out:
            raise AssertionError("the program's own checks failed: " + out.strip()[-600:])
        for text in out_has:
            if text not in out:
                raise AssertionError("output lacks %r: %r" % (text, out.strip()[-300:]))
        n = program_bytes(out)
        r = res(report, "vm")
        want = {"allocs": allocs, "frees": frees, "peak": peak * n, "allocated": 0,
                "host_allocated": 0, "denied": 0, "cross_thread_frees": 0}
        want.update(vm or {})
        for key, value in want.items():
            expect("vm " + key, r[key], value(n) if callable(value) else value)
        got = report["vmm"]
        for key, value in dict(VMM_ZERO, **(vmm or {})).items():
            expect("vmm " + key, got[key], value(n) if callable(value) else value)
        expect("leaks", report["leaks"]["count"], leaks)
        expect("table live", report["table"]["live"], leaks)
        expect("unknown frees", report["unknown_frees"], 0)
        expect("shared allocs", report["shared"]["allocs"], 0)
        return r["allocs"], r["frees"], r["cross_thread_frees"]
    return check


def check_vmm_leak(report, out):
    check_vmm(1, 0, 1, vm={"allocated": lambda n: n}, leaks=1,
              vmm={"handles": 1, "bytes": lambda n: n, "creates": 1})(report, out)
    leak = report["leaks"]["largest"][0]
    for key, want in (("kind", "vmm"), ("bytes", program_bytes(out)), ("reservation", "vm"),
                      ("thread", "vmm")):
        expect("leak " + key, leak[key], want)
    if not int(leak["ptr"], 16) >> 63:
        raise AssertionError("a VMM leak's key is its handle with bit 63 set: %s" % leak["ptr"])
    return 1, 0, 0


def check_vmm_host(report, out):
    if "unsupported=" in out:  # this driver or device has no host-located VMM: nothing charged
        return check_vmm(0, 0, 0)(report, out)
    check_vmm(1, 1, 0, vmm={"creates": 1, "releases": 1})(report, out)
    expect("device 0 peak (host memory is not the device's)", report["devices"][0]["peak"], 0)
    return 1, 1, 0


def check_vmm_many(report, out):
    made = program_count(out, "created")
    if not 0 < made < 16:
        raise AssertionError("created=%d: the 8-slot table should refuse some of 16" % made)
    expect("table full failures", report["table_full_failures"], 16 - made)
    return check_vmm(made, made, made, vmm={"creates": made, "releases": made})(report, out)


def vmm_cases(b, stack):
    """Virtual memory management (tests/integration/vmm.c), through each way to the driver; on
    the GPU also PyTorch's caching allocator with and without expandable segments, and NCCL."""
    out = []
    vmm = lambda scenario, via: [b("vmm"), scenario, via]
    basic = {"creates": 1, "retains": 1, "releases": 2}
    for via in ("driver", "dlsym", "proc", "entry", "entry_default"):
        out.append(Case("vmm basic via %s" % via, vmm("basic", via), check_vmm(1, 1, 1, vmm=basic),
                        env=VMM_ENV, same_output=True))
    for via in ("driver", "entry"):
        out += [
            Case("vmm release ends it via %s" % via, vmm("release", via),
                 check_vmm(1, 1, 1, vmm={"creates": 1, "releases": 1}), env=VMM_ENV,
                 same_output=True),
            Case("vmm retained handle counted once via %s" % via, vmm("retained", via),
                 check_vmm(1, 1, 1, vmm=basic), env=VMM_ENV, same_output=True),
            Case("vmm one unmap over 3 released handles via %s" % via, vmm("range", via),
                 check_vmm(3, 3, 1, vmm={"creates": 3, "releases": 3}), env=VMM_ENV,
                 same_output=True),
            Case("vmm failed release restores via %s" % via, vmm("failrelease", via),
                 check_vmm(1, 1, 1, vmm={"creates": 1, "releases": 1}), env=VMM_ENV,
                 same_output=True),
            Case("vmm failed unmap restores via %s" % via, vmm("failunmap", via),
                 check_vmm(1, 1, 1, vmm={"creates": 1, "releases": 1}), env=VMM_ENV,
                 same_output=True),
            Case("vmm import shown apart via %s" % via, vmm("import", via),
                 check_vmm(0, 0, 0, vmm={"imports": 1, "imported": lambda n: {
                     "handles": 1, "mappings": 1, "mapped_bytes": n}, "devices": lambda n: [
                         {"device": 0, "mapped_bytes": 0, "imported_mapped_bytes": n}]}),
                 env=VMM_ENV, same_output=True),
            Case("vmm host-located in the host tier via %s" % via, vmm("host", via),
                 check_vmm_host, env=VMM_ENV, same_output=True),
            Case("vmm enforce refuses past budget via %s" % via, vmm("enforce", via),
                 check_vmm(1, 1, 1, vm={"denied": 1}, vmm={"creates": 1, "releases": 1},
                           out_has=("second=CUDA_ERROR_OUT_OF_MEMORY",)),
                 env=dict(VMM_ENV, CURESV_RESERVATIONS="vm=3M", CURESV_MODE="enforce")),
        ]
    out += [
        Case("vmm leak: kind vmm in the leak list", vmm("leak", "entry"), check_vmm_leak,
             env=VMM_ENV, same_output=True),
        Case("vmm table full: refused creates go back", vmm("many", "entry"), check_vmm_many,
             env=dict(VMM_ENV, CURESV_TABLE_SLOTS="8", CURESV_TABLE_FULL="fail")),
        Case("vmm trace: one unmap over 3 handles in Chrome JSON", vmm("range", "entry"),
             check_vmm(3, 3, 1, vmm={"creates": 3, "releases": 3}), env=VMM_ENV,
             trace="chrome"),
        Case("vmm trace: host-located in RMM CSV", vmm("host", "entry"), check_vmm_host,
             env=VMM_ENV, trace="rmm"),
    ]
    here = os.path.dirname(os.path.abspath(__file__))
    scripts_dir = os.path.abspath(os.path.join(here, "..", "..", "scripts"))
    gpu_py = lambda script: ["python3", os.path.join(here, "..", "gpu", script)]
    for expandable in (True, False):
        env = {"PYTHONPATH": scripts_dir}
        if expandable:
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        out.append(Case("pytorch caching allocator, expandable segments %s" %
                        ("on" if expandable else "off"), gpu_py("torch_vmm.py"),
                        check_torch_vmm(expandable), env=env, stacks=("gpu",), same_output=True))
    for allocator in ("platform", "cuda_async"):
        out.append(Case("jax, XLA_PYTHON_CLIENT_ALLOCATOR=%s" % allocator, gpu_py("jax_alloc.py"),
                        check_jax, env={"PYTHONPATH": scripts_dir, "XLA_PYTHON_CLIENT_PREALLOCATE":
                                        "false", "XLA_PYTHON_CLIENT_ALLOCATOR": allocator},
                        stacks=("gpu",), same_output=True))
    out.append(Case("nccl single-rank all-reduce", gpu_py("nccl_allreduce.py"), check_nccl,
                    env={"PYTHONPATH": scripts_dir, "NCCL_CUMEM_ENABLE": "1"}, stacks=("gpu",),
                    same_output=True, timeout=600))
    return [c for c in out if stack in c.stacks]


def stderr_counts(out, tag):
    """The key=value words of the line starting with `tag` (the GPU scripts' own findings)."""
    for line in out.splitlines():
        if line.startswith(tag + " "):
            words = [w for w in line[len(tag):].split() if "=" in w]
            return {k: int(v) for k, v in (w.split("=", 1) for w in words)}
    raise AssertionError("no line %r in %r" % (tag, out.strip()[-600:]))


def host_only_leaks(report):
    """What is live at exit is pinned host memory alone: PyTorch's host allocator keeps its blocks
    (the one that stages .item()'s copies among them) until the process ends."""
    leaks = report["leaks"]
    kinds = sorted({x["kind"] for x in leaks["largest"]})
    if kinds not in ([], ["host"]) or len(leaks["largest"]) < min(leaks["count"], 10):
        raise AssertionError("device memory live at exit: %r" % leaks)


def check_torch_vmm(expandable):
    """The device's peak covers what PyTorch reserved at most; empty_cache() gives everything
    back; expandable segments come through cuMemCreate, the others through cudaMalloc."""
    def check(report, out):
        reserved = stderr_counts(out, "torch_vmm: reserved")["max"]
        after = stderr_counts(out, "torch_vmm: after_empty_cache")
        if reserved <= 0:
            raise AssertionError("PyTorch reserved nothing")
        dev = [d for d in report["devices"] if d["device"] == 0][0]
        if dev["peak"] < reserved:
            raise AssertionError("device 0 peak %d < max_memory_reserved %d" % (dev["peak"], reserved))
        expect("device bytes live after empty_cache: what PyTorch still reserves",
               after["device_allocated"], after["reserved"])
        host_only_leaks(report)
        vmm = report["vmm"]
        if expandable and vmm["creates"] == 0:
            raise AssertionError("expandable segments made no cuMemCreate that curesv saw")
        if not expandable:
            expect("cuMemCreate without expandable segments", vmm["creates"], 0)
        expect("vmm handles live at exit", vmm["handles"], 0)
        expect("vmm mapped bytes at exit", vmm["mapped_bytes"], 0)
        shared = report["shared"]
        expect("unknown frees", report["unknown_frees"], 0)
        expect("unknown releases", vmm["unknown_releases"], 0)
        return shared["allocs"], shared["frees"], vmm["creates"]
    return check


def check_jax(report, out):
    """Every array XLA made is seen on device 0 while it lives and gone once deleted."""
    arrays = 16 * (4 << 20)
    live = stderr_counts(out, "jax_alloc: live")["delta"]
    deleted = stderr_counts(out, "jax_alloc: deleted")
    if live < arrays:
        raise AssertionError("device bytes counted while the arrays lived: %d < %d" % (live, arrays))
    if deleted["delta"] > live - arrays:
        raise AssertionError("after the deletes %d bytes more than before (%d while live)"
                             % (deleted["delta"], live))
    expect("unknown frees", report["unknown_frees"], 0)
    shared = report["shared"]
    return shared["allocs"], shared["frees"], shared["cross_thread_frees"]


def check_nccl(report, out):
    """After destroy_process_group() (and empty_cache()) NCCL and PyTorch have given back all
    they allocated, its cuMem buffers included."""
    after = stderr_counts(out, "nccl_allreduce: after_destroy_process_group")
    expect("device bytes live after destroy_process_group: what PyTorch still reserves",
           after["device_allocated"], after["reserved"])
    host_only_leaks(report)
    vmm = report["vmm"]
    if vmm["creates"] == 0:
        raise AssertionError("NCCL made no cuMemCreate that curesv saw (NCCL_CUMEM_ENABLE=1; "
                             "%s)" % [l for l in out.splitlines() if "nccl=" in l])
    expect("vmm handles live at exit", vmm["handles"], 0)
    shared = report["shared"]
    expect("unknown frees", report["unknown_frees"], 0)
    return shared["allocs"], shared["frees"], vmm["creates"]


def check_peak_handoff(mode):
    """The consumer's 12,345 bytes were live while every producer allocation was made: the device's
    peak counts them beside what the producer was granted, in every round."""
    def check(report, out):
        m = re.search(r"granted=(\d+) producer_bytes=(\d+) held=(\d+) rounds=(\d+)", out)
        if not m:
            raise AssertionError("program printed no granted=")
        granted, produced, held, rounds = (int(x) for x in m.groups())
        expect("granted", granted, 11 if mode == "enforce" else 16)
        expect("producer bytes", produced, 983645 if mode == "enforce" else 1466984)
        dev = report["devices"][0]
        if dev["peak"] < produced + held:
            raise AssertionError("device peak %d misses bytes live throughout: at least %d "
                                 "(%d granted + %d held)" % (dev["peak"], produced + held,
                                                            produced, held))
        if mode == "enforce" and dev["peak"] > dev["capacity"]:
            raise AssertionError("device peak %d past the capacity %d" % (dev["peak"],
                                                                         dev["capacity"]))
        producer, consumer = res(report, "producer"), res(report, "consumer")
        expect("producer peak", producer["peak"], produced)
        expect("consumer peak", consumer["peak"], held)
        expect("producer denied", producer["denied"], (16 - granted) * rounds)
        for r in (producer, consumer):
            expect(r["name"] + " allocated", r["allocated"], 0)
            expect(r["name"] + " allocs", r["allocs"], r["frees"])
        expect("device allocated", dev["allocated"], 0)
        return producer["allocs"], producer["frees"], producer["cross_thread_frees"]
    return check


def runtime_only_dir():
    """A folder holding the simulated runtime and no driver (libcuda.so.1): what a machine with the
    CUDA toolkit but no GPU driver offers."""
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        rt = os.path.join(d, "libcudart.so.13")
        if d and os.path.exists(rt) and os.path.exists(os.path.join(d, "libcuda.so.1")):
            tmp = tempfile.mkdtemp(prefix="curesv-nodriver-")
            atexit.register(shutil.rmtree, tmp, True)
            os.symlink(os.path.abspath(rt), os.path.join(tmp, "libcudart.so.13"))
            return {"LD_LIBRARY_PATH": tmp}
    raise AssertionError("no simulated runtime in LD_LIBRARY_PATH")


def cases(stack, bindir, sanitized=False):
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
    # enforce mode: every family's hook of that mode (runtime, per-thread and driver ones) books
    # the hand-off as observe mode does, and refuses a device-tier allocation past scan's budget
    for build in ("families", "families_ptds", "families_static"):
        for fam in families:
            kind = kinds.get(fam, "device")
            out.append(Case("%s %s, enforce" % (build, fam), [b(build), fam], check_handoff(kind),
                            env=dict(HANDOFF_ENV, CURESV_MODE="enforce")))
            if kind != "host":  # the host tier is held to no device budget
                out.append(Case("%s %s, enforce refuses past the budget" % (build, fam),
                                [b(build), fam], check_family_denied, exit_code=1,
                                env=dict(HANDOFF_ENV, CURESV_MODE="enforce",
                                         CURESV_RESERVATIONS="scan=16K,pipe=200K")))
    for build in ("handoff", "handoff_static"):
        out.append(Case(build, [b(build)], check_handoff("device"), env=HANDOFF_ENV))
    out.append(Case("enforce denies past budget", [b("handoff")], check_enforce_denied,
                    env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K",
                             CURESV_MODE="enforce"), exit_code=1))
    for mode, producer in (("enforce", "1M"), ("observe", "2M")):
        out.append(Case("peaks: a buffer live throughout counts in the device peak, %s" % mode,
                        [b("peak_handoff"), "50"], check_peak_handoff(mode),
                        env={"CURESV_MODE": mode, "CURESV_CAPACITY": "4M",
                             "CURESV_RESERVATIONS": "producer=%s,consumer=64K" % producer,
                             "CURESV_ATTACH": "producer=producer,consumer=consumer"}))
    threads, rounds = (16, 100000) if stack == "sim" else (16, 2000)
    out.append(Case("stress %dx%d" % (threads, rounds),
                    [b("stress"), str(threads), str(rounds)], check_stress(threads, rounds)))
    out.append(Case("unknown and double free", [b("badfree")], check_badfree))
    out.append(Case("graph memory: capture, launches, cudaFree of a graph allocation",
                    [b("graphs"), "3"], check_graphs, same_output=True))
    # The simulated driver only: on an H200 (CUDA 13.0, driver 580.159) the capturing thread's own
    # cudaStreamEndCapture then fails too (cudaErrorStreamCaptureWrongThread, with and without
    # curesv), so the program has no graph to launch.
    out.append(Case("graph memory: EndCapture refused on another thread, the capture goes on",
                    [b("graphs"), "wrongthread"], check_graph_wrong_thread, same_output=True,
                    stacks=("sim",)))
    out.append(Case("graph memory: the text report's line",
                    [b("graphs"), "wrongthread"],
                    check_has("curesv: graph allocations: 1 recorded (made during stream capture or "
                              "by memory nodes: the graphs' memory, not charged), 0 addresses (0 B) "
                              "held, 2 frees of them"), report="text", stacks=("sim",)))
    out.append(Case("graph memory: a capture on a stream past the stream table's capacity",
                    [b("graphs"), "tablefull"],
                    check_has("curesv: stream table full (16384 streams and pools): further "
                              "streams' devices are asked of the driver and they cannot be "
                              "attached", then=check_graph_wrong_thread),
                    same_output=True, stacks=("sim",)))
    for mode in ("observe", "enforce"):
        out.append(Case("graph memory: two threads capture their per-thread streams at once, %s"
                        % mode, [b("graphs"), "ptds"], check_graph_ptds, same_output=True,
                        env={"CURESV_MODE": mode, "CURESV_CAPACITY": "1536K"}))
    out.append(Case("graph memory: 2000 graphs built and destroyed, then real allocations in a "
                    "1024-slot table", [b("graphs"), "churn", "2000"], check_graph_churn,
                    env={"CURESV_TABLE_SLOTS": "1024", "CURESV_TABLE_FULL": "fail"},
                    same_output=True))
    out.append(Case("graph memory: an executable graph outlives its graph",
                    [b("graphs"), "outlive"], check_graph_outlive, same_output=True))
    out.append(Case("streams: per-thread streams are each thread's, the legacy one has two names",
                    [b("streams"), "ptds"], check_streams_ptds, same_output=True))
    out.append(Case("streams: the creator rule across threads", [b("streams"), "creator"],
                    check_streams_creator,
                    env={"CURESV_RESERVATIONS": "scan=1M", "CURESV_ATTACH": "scan-*=scan",
                         "CURESV_STREAM_ATTACH": "creator"}, same_output=True))
    out.append(Case("streams: destroyed with live allocations", [b("streams"), "destroyed"],
                    check_streams_destroyed, env={"CURESV_RESERVATIONS": "scan=1M"},
                    same_output=True))
    out.append(Case("streams: devices of streams and of memory pools", [b("streams"), "devices"],
                    check_streams_devices, env={"CUDA_SIM_DEVICES": "2"}, stacks=("sim",),
                    same_output=True))
    # enforce mode decides the charge before the allocation: a host-located pool's 3 MiB are the
    # host tier's there too, not refused by device 0's 1 MiB
    out.append(Case("streams: devices of streams and of memory pools, enforce",
                    [b("streams"), "devices"], check_streams_devices,
                    env={"CUDA_SIM_DEVICES": "2", "CURESV_MODE": "enforce",
                         "CURESV_CAPACITY": "0=1M,1=64M"}, stacks=("sim",), same_output=True))
    out.append(Case("streams: a host pool given the handle of a pool being destroyed",
                    [b("streams"), "poolrace"], check_pool_race,
                    env={"CUDA_SIM_POOL_DESTROY_DELAY_US": "300000"}, stacks=("sim",),
                    same_output=True))
    rounds = 2000 if stack == "sim" else 500
    out.append(Case("streams: 16 threads on 8 attached streams, frees on others",
                    [b("streams"), "pool", "16", str(rounds)], check_streams_pool,
                    env={"CURESV_RESERVATIONS": "r0=256M,r1=256M,r2=256M,r3=256M"}))
    # enforce mode books the entry after a charge it took before the call: the same exact counts
    out.append(Case("streams: 16 threads on 8 attached streams, frees on others, enforce",
                    [b("streams"), "pool", "16", str(rounds)], check_streams_pool,
                    env={"CURESV_RESERVATIONS": "r0=256M,r1=256M,r2=256M,r3=256M",
                         "CURESV_MODE": "enforce"}))
    out.append(Case("driver OOM changes nothing", [b("oom")], check_untouched))
    out.append(Case("enforce: shared pool refuses, report shows it", [b("oom"), "2097152"],
                    check_pool_denial, env={"CURESV_MODE": "enforce", "CURESV_CAPACITY": "1M"}))
    out.append(Case("enforce: a pitched allocation whose padding passes the budget is refused",
                    [b("oom"), "pitch", "1", "256"], check_pitch_denial,
                    env={"CURESV_MODE": "enforce", "CURESV_CAPACITY": "64K"}, stacks=("sim",)))
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                            "curesv")
    out.append(Case("launcher sets the environment",
                    [launcher, "--capacity", "400K", "--reserve=scan=100K", "--reserve", "pipe=200K",
                     "--attach", "scan=scan", "--attach=pipe=pipe", "--", b("handoff")],
                    check_handoff("device"), sanitized=False))
    out.append(Case("launcher --meminfo budget",
                    [launcher, "--reserve", "scan=8M", "--meminfo", "budget", "--", b("meminfo"),
                     "runtime"], check_meminfo(True), sanitized=False, stacks=("sim",),
                    env={"CUDA_SIM_TOTAL_MEM": "64M"}))
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
    for how in ("runtime", "driver", "lookup", "legacy"):
        looked_up = how in ("lookup", "legacy")
        # under CURESV_MEMINFO=driver the lookup hands out the driver's own function: no hook
        out.append(Case("CURESV_MEMINFO=budget via %s: the reservation, the shared pool" % how,
                        [b("meminfo"), how],
                        check_meminfo(True, proc="libcuresv.so" if looked_up else None),
                        stacks=("sim",), env=dict(MEMINFO_ENV, CURESV_MEMINFO="budget")))
        out.append(Case("CURESV_MEMINFO unset via %s: the driver's answer" % how,
                        [b("meminfo"), how],
                        check_meminfo(False, proc="libcuda.so.1" if looked_up else None),
                        stacks=("sim",), env=MEMINFO_ENV))
    out.append(Case("CURESV_MEMINFO=budget via the static runtime", [b("meminfo_static"), "runtime"],
                    check_meminfo(True), stacks=("sim",),
                    env=dict(MEMINFO_ENV, CURESV_MEMINFO="budget")))
    out.append(Case("CURESV_MEMINFO=driver via the runtime", [b("meminfo"), "runtime"],
                    check_meminfo(False), stacks=("sim",),
                    env=dict(MEMINFO_ENV, CURESV_MEMINFO="driver")))
    out.append(Case("CURESV_MEMINFO=budget, CURESV_ENABLE=0: the driver's answer",
                    [b("meminfo"), "driver"], check_meminfo(False), stacks=("sim",),
                    env=dict(MEMINFO_ENV, CURESV_MEMINFO="budget", CURESV_ENABLE="0"),
                    report="absent"))
    out.append(Case("CURESV_MEMINFO: a bad value is one line, then the driver's answer",
                    [b("meminfo"), "runtime"], check_meminfo_bad, stacks=("sim",),
                    env=dict(MEMINFO_ENV, CURESV_MEMINFO="bugdet"), report="absent"))
    out.append(Case("a cuMem wrapper linked after curesv", [b("wrapped_driver")], check_wrapped(0)))
    out.append(Case("a cuMem wrapper preloaded before curesv", [b("wrapped_driver")],
                    check_wrapped(2), preload=["libwrapmem.so"]))
    # 50 children, each a process start under a sanitizer's runtime: 51 s under TSan on a loaded
    # 2-core machine
    out.append(Case("fork while another thread is inside curesv", [b("fork_child"), "50"],
                    check_nothing, report=False, stacks=("sim",)))
    out.append(Case("fork during another thread's slow free", [b("fork_free")], check_fork_free,
                    env={"CUDA_SIM_FREE_DELAY_US": "800000"}, per_process=True, timeout=60,
                    stacks=("sim",)))
    # The buffer fills the device's capacity: the child's second allocation fits only if the free
    # of p was debited.
    out.append(Case("fork during another thread's slow free, enforce mode", [b("fork_free")],
                    check_fork_free, env={"CUDA_SIM_FREE_DELAY_US": "800000",
                                          "CURESV_MODE": "enforce", "CURESV_CAPACITY": "64K"},
                    per_process=True, timeout=60, stacks=("sim",)))
    out.append(Case("exit() from a signal handler inside curesv", [b("exit_in_handler")],
                    check_nothing, report=False, timeout=60))
    out.append(Case("SIGTERM while the exit report is written (20 runs)", [b("signal_in_exit")],
                    check_nothing, report=False, timeout=120, stacks=("sim",)))
    # TSan reports glibc's own fork() in a handler (the child's thread-local storage is calloc'ed):
    # the Makefile's options, less that report
    fork_env = {"TSAN_OPTIONS": ":".join(o for o in (os.environ.get("TSAN_OPTIONS"),
                                                     "report_signal_unsafe=0") if o)}
    for trace in (None, "rmm"):
        out.append(Case("fork() from a signal handler inside curesv%s" % (
                            ", trace on" if trace else ""), [b("fork_in_handler")],
                        check_forks_in_handler, env=fork_env, trace=trace, timeout=120,
                        stacks=("sim",)))
    for scope in ("global", "local"):
        out.append(Case("runtime dlclosed and dlopened again (%s)" % scope, [b("reload"), scope],
                        check_reload, same_output=True, stacks=("sim",)))
    # enforce mode: a device never holds more than its capacity, whatever the reservations say
    held_env = {"CURESV_MODE": "enforce", "CURESV_CAPACITY": "1M", "CURESV_RESERVATIONS": "big=2M",
                "CURESV_ATTACH": "hold=big"}
    out.append(Case("enforce: a reservation past the capacity is held to it",
                    [b("hold"), "4", "524288"], check_held(2, 1 << 20, False), env=held_env))
    out.append(Case("enforce: a reservation past the capacity is held to it (driver API)",
                    [b("hold"), "4", "524288", "driver"], check_held(2, 1 << 20, False),
                    env=held_env))
    out.append(Case("enforce: a reservation past the driver's total is held to it",
                    [b("hold"), "4", "524288"], check_held(2, 1 << 20, False), stacks=("sim",),
                    env=dict({k: v for k, v in held_env.items() if k != "CURESV_CAPACITY"},
                             CUDA_SIM_TOTAL_MEM="1M")))
    out.append(Case("observe: the report marks a device that held more than its capacity",
                    [b("hold"), "4", "524288"], check_held(4, 2 << 20, True),
                    env=dict(held_env, CURESV_MODE="observe")))
    out.append(Case("observe: the text report says the device held more than its capacity",
                    [b("hold"), "4", "524288"],
                    check_has("curesv: device 0 held more than its capacity: peak 2 MiB on 1 MiB "
                              "(CURESV_MODE=observe lets allocations pass it; enforce mode refuses "
                              "them)"),
                    env=dict(held_env, CURESV_MODE="observe"), report="text"))
    out.append(Case("table high water: ten live at once from four threads", [b("table_hw")],
                    check_table_high_water))
    out.append(Case("two runtimes: a plugin linked with libcudart.so.12 beside .13",
                    [b("two_runtimes")], check_two_runtimes, same_output=True, stacks=("sim",)))
    # the plugin only allocates and frees, after the program's first cudaMalloc and cudaFree: its
    # own runtime never starts, its calls bind to curesv's, which forwards them to .13; lazily
    # bound (first call) and bound at load
    for bind in ("lazy", "now"):
        out.append(Case("two runtimes: the .12 plugin's first calls come late (%s binding)" % bind,
                        [b("two_runtimes"), "allocs"], check_two_runtimes, same_output=True,
                        stacks=("sim",), env={"LD_BIND_NOW": "1"} if bind == "now" else {}))
    out.append(Case("one runtime: the report names it", [b("families"), "runtime"],
                    check_one_runtime, env=HANDOFF_ENV, stacks=("sim",)))
    # Resident memory under a sanitizer's runtime is the runtime's: the plain shim only
    out.append(Case("thread churn: 100000 threads, 8 at a time, memory flat",
                    [b("churn"), "100000", "8", "5000"], check_churn(100000), sanitized=False,
                    stacks=("sim",)))
    out.append(Case("RTLD_NEXT from another library", [b("rtld_next")], check_nothing,
                    report=False))
    out.append(Case("rename follows prctl and pthread_setname_np", [b("rename")], check_rename,
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="1M")))
    out.append(Case("exit while threads allocate", [b("busy_exit")], check_busy_exit,
                    stacks=("sim",), quiescent=False))
    out.append(Case("exit while threads are alive", [b("busy_exit"), "quiesce"], check_busy_exit))
    out.append(Case("control API through dlsym", [b("control")], check_control))
    out.append(Case("CURESV_ENABLE=0 passes through", [b("handoff")], check_nothing,
                    env=dict(HANDOFF_ENV, CURESV_ENABLE="0"), report="absent"))
    out.append(Case("invalid configuration passes through", [b("handoff")],
                    check_stderr("curesv: CURESV_CAPACITY: '12Q': unknown suffix 'Q' (suffixes: K, "
                                 "M, G, T, KiB, MiB, GiB, TiB)"),
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="12Q"), report="absent"))
    out.append(Case("CURESV_STRICT=1 aborts on it", [b("handoff")],
                    check_stderr("curesv: CURESV_CAPACITY: '12Q': unknown suffix 'Q' (suffixes: K, "
                                 "M, G, T, KiB, MiB, GiB, TiB)"),
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="12Q", CURESV_STRICT="1"),
                    exit_code=-6, report="absent"))
    out.append(Case("table full: passthrough", [b("stress"), "4", "500"],
                    check_table_full_passthrough(4, 500), env={"CURESV_TABLE_SLOTS": "8"}))
    out.append(Case("table full: fail", [b("stress"), "4", "500"], check_table_full_fail,
                    env={"CURESV_TABLE_SLOTS": "8", "CURESV_TABLE_FULL": "fail"}, exit_code=1))
    # enforce mode charges before the call: a full table undoes that charge, then passes the
    # allocation through untracked or fails it
    out.append(Case("table full: passthrough, enforce", [b("stress"), "4", "500"],
                    check_table_full_passthrough(4, 500),
                    env={"CURESV_TABLE_SLOTS": "8", "CURESV_MODE": "enforce"}))
    out.append(Case("table full: fail, enforce", [b("stress"), "4", "500"], check_table_full_fail,
                    env={"CURESV_TABLE_SLOTS": "8", "CURESV_TABLE_FULL": "fail",
                         "CURESV_MODE": "enforce"}, exit_code=1))
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
    # 32 fresh threads a round: TSan's cost per thread created grows with the threads it has seen
    # (200 rounds take 3 times as long as 100), so a sanitized shim runs fewer rounds.
    rounds = 100 if sanitized else 500
    out.append(Case("timeline 6 (32 freers racing release, %d rounds)" % rounds,
                    [b("timelines"), "6", "origin", str(rounds)],
                    check_timeline(6), env={"CURESV_CAPACITY": "400K"}))
    out.append(Case("trace: hand-off in Chrome JSON", [b("handoff")], check_handoff("device"),
                    env=HANDOFF_ENV, trace="chrome"))
    out.append(Case("trace: hand-off in RMM CSV", [b("handoff")], check_handoff("device"),
                    env=HANDOFF_ENV, trace="rmm"))
    out.append(backtrace_case(b))
    lines = leak_lines()
    out.append(Case("CURESV_BACKTRACE: the text report's leak frames",
                    [b("leak_sites")], check_has(
                        "curesv: stacks (CURESV_BACKTRACE=2): 3 distinct recorded, at most 16384",
                        re.compile(r"curesv:       #0 leak_site_for_backtrace\+0x[0-9a-f]+ at "
                                   r"\S*leak_sites\.c:%d \(/\S+/leak_sites\+0x[0-9a-f]+\)" %
                                   lines["runtime"]),
                        re.compile(r"curesv:       #1 main\+0x[0-9a-f]+ at \S*leak_sites\.c:\d+ \(.*\)"),
                        re.compile(r"curesv:       #0 driver_leak_site_for_backtrace\+0x.*")),
                    env={"CURESV_BACKTRACE": "2"}, report="text"))
    out.append(Case("CURESV_BACKTRACE: a bad value is a warning, and no stacks",
                    [b("leak_sites")], check_has(
                        "curesv: CURESV_BACKTRACE: '65': expected a number of frames 0..64 (0 = "
                        "off); using the default (0: no stacks)",
                        then=check_no_frames),
                    env={"CURESV_BACKTRACE": "65"}))
    threads, rounds = (8, 20000) if stack == "sim" else (8, 1000)
    out.append(Case("trace: stress %dx%d in RMM CSV" % (threads, rounds),
                    [b("stress"), str(threads), str(rounds)], check_stress(threads, rounds),
                    trace="rmm"))
    out.append(Case("trace: stress %dx%d in Chrome JSON" % (threads, rounds),
                    [b("stress"), str(threads), str(rounds)], check_stress(threads, rounds),
                    trace="chrome"))
    out.append(Case("trace: timeline 3 (release with a live buffer)", [b("timelines"), "3"],
                    check_timeline(3), env={"CURESV_CAPACITY": "400K"}, trace="chrome"))
    out.append(Case("trace: timeline 4 (transfer)", [b("timelines"), "4"], check_timeline(4),
                    env={"CURESV_CAPACITY": "400K"}, trace="chrome"))
    out.append(Case("trace: refusals", [b("handoff")], check_enforce_denied,
                    env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K",
                             CURESV_MODE="enforce"), exit_code=1, trace="rmm"))
    out.append(Case("trace: exit while threads allocate", [b("busy_exit")], check_busy_exit,
                    stacks=("sim",), trace="chrome", quiescent=False))
    # A sanitized shim makes each pair slower: the slow free is longer there (it is ended as soon
    # as the pairs are done, so the case takes as long as they do)
    out.append(Case("trace: another thread's slow free holds up no pair",
                    [b("slow_free"), "40000", "60000" if sanitized else "4000"],
                    check_slow_free(40000), trace="rmm", stacks=("sim",)))
    out.append(Case("trace: a path that cannot be opened", [b("handoff")],
                    check_stderr("curesv: CURESV_TRACE: '/nonexistent/dir/trace': No such file or "
                                 "directory; no trace is written"),
                    env=dict(HANDOFF_ENV, CURESV_TRACE="/nonexistent/dir/trace")))
    for fmt in ("rmm", "chrome"):
        out.append(Case("trace: an exec'd child with the same CURESV_TRACE leaves it whole (%s)" % fmt,
                        [b("trace_child"), "3000", "100"], check_trace_child, trace=fmt,
                        stacks=("sim",)))
    out.append(Case("trace: CURESV_REPORT_FILE naming the trace keeps the trace", [b("handoff")],
                    check_nothing, env=HANDOFF_ENV, report=False, trace="rmm",
                    report_file=report_file_on_trace))
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
    scripts_dir = os.path.abspath(os.path.join(here, "..", "..", "scripts"))
    gpu_py = lambda script: ["python3", os.path.join(here, "..", "gpu", script)]
    out.append(Case("pytorch producer/consumer", gpu_py("torch_handoff.py"), check_torch,
                    env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                         "CURESV_RESERVATIONS": "scan=1G,pipe=1G",
                         "CURESV_ATTACH": "scan=scan,pipe=pipe"},
                    stacks=("gpu",), same_output=True))
    out.append(Case("cupy allocation loop", gpu_py("cupy_loop.py"), check_cupy, stacks=("gpu",),
                    same_output=True))
    out.append(Case("pytorch through the curesv module", gpu_py("torch_module.py"),
                    check_torch_module, env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                                             "PYTHONPATH": scripts_dir},
                    stacks=("gpu",)))
    # PyTorch sizes by torch.cuda.mem_get_info(): under --meminfo budget, the main thread's reservation
    out.append(Case("pytorch's mem_get_info under --meminfo budget",
                    [launcher, "--meminfo", "budget", "--reserve", "model=2G", "--attach",
                     "python*=model", "--"] + gpu_py("torch_meminfo.py"),
                    check_torch_meminfo, env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                                              "PYTHONPATH": scripts_dir},
                    stacks=("gpu",), sanitized=False))
    # two processes in one pool, one SIGKILLed: the survivor gets its memory back
    out.append(Case("pytorch: two processes share a pool, one killed",
                    gpu_py("torch_pool.py"), check_torch_pool,
                    env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "CURESV_MODE": "enforce",
                         "CURESV_CAPACITY": "6500M", "CURESV_POOL": "gpu-check-%d" % os.getpid()},
                    stacks=("gpu",), sanitized=False))
    # scripts/gpu-check exports its PyTorch trace and runs torch.cuda._memory_viz on it first
    viz = b("memory_viz.result")
    out.append(Case("pytorch's memory viewer reads curesv-export's snapshot",
                    [sys.executable, "-c", "import sys; print(open(sys.argv[1]).read(), end='')",
                     viz], check_memory_viz, shim=False, report=False, stacks=("gpu",),
                    needs=(viz, "skipped: gpu-check made no PyTorch trace (no PyTorch with "
                                "CUDA), so nothing was exported")))
    out.extend(launcher_cases(launcher, b))
    out.extend(exit_status_cases(b))
    out.extend(handoff_audit_cases(b, launcher))
    out.extend(configuration_cases(b))
    out.extend(vmm_cases(b, stack))
    module = ["python3", os.path.join(here, "test_module.py"), "--layout", b("layout")]
    # on the GPU machine the module meets PyTorch instead (torch_module.py above)
    out.append(Case("python module with the library", module + ["--shim"], check_module,
                    env={"CURESV_CAPACITY": "64M", "CURESV_RESERVATIONS": "py_rule=1M",
                         "CURESV_ATTACH": "pyrule*=py_rule"}, stacks=("sim",)))
    out.append(Case("python module without the library", module + ["--no-shim"], check_module,
                    shim=False, report="absent", stacks=("sim",)))
    # A Python thread allocates without naming its OS thread: the advice is the module's.
    unnamed = ("import ctypes, threading\n"
               "rt = ctypes.CDLL('libcudart.so.13')\n"
               "def scan():\n"
               "    p = ctypes.c_void_p()\n"
               "    assert rt.cudaMalloc(ctypes.byref(p), 4096) == 0 and rt.cudaFree(p) == 0\n"
               "t = threading.Thread(target=scan, name='scan'); t.start(); t.join()\n")
    out.append(Case("python: a rule that attached nothing points at curesv.name_thread()",
                    ["python3", "-c", unnamed],
                    check_has("curesv: CURESV_ATTACH rule 'scan*=scan' attached nothing: no thread "
                              "with a matching name allocated (rules are matched at a thread's "
                              "allocations; in Python, call curesv.name_thread() at the start of "
                              "the thread, before its first one: Python gives OS threads no "
                              "names)"),
                    env={"CURESV_RESERVATIONS": "scan=1M", "CURESV_ATTACH": "scan*=scan"},
                    report="text", stacks=("sim",)))
    out.append(Case("linked with -lcuresv after -lcudart", [b("linked")], check_linked,
                    stacks=("sim",)))
    out.append(Case("linked with -lcuresv before -lcudart (--as-needed)", [b("linked_badorder")],
                    check_has("linked: cudaMalloc returned 3", "curesv: cudaMalloc: cannot find the "
                              "CUDA runtime's own cudaMalloc: libcudart is not loaded (linked with "
                              "-lcuresv before -lcudart, the linker's --as-needed drops libcudart: "
                              "put -lcuresv after it, or resolve curesv_* with dlsym)"),
                    exit_code=1, stacks=("sim",)))
    out.extend(nvcc_cases(b))
    out.append(Case("no CUDA driver: the report says so", [b("handoff_rt")],
                    check_has("handoff: cudaMalloc on scan: cudaErrorInsufficientDriver",
                              "curesv: no CUDA driver answered (cuDeviceGetCount never succeeded): "
                              "no capacity is known; if CUDA calls failed with "
                              "cudaErrorInsufficientDriver (35) or cudaErrorNoDevice (100), this "
                              "machine has no usable driver or GPU (README.md: run your own "
                              "program on the simulated stack)"),
                    env=dict(HANDOFF_ENV, CURESV_CAPACITY="0=400K"), exit_code=1, report="text",
                    setup=runtime_only_dir, stacks=("sim",)))
    no_driver = ("curesv: no CUDA driver answered (cuDeviceGetCount never succeeded): no capacity "
                 "is known; if CUDA calls failed with cudaErrorInsufficientDriver (35) or "
                 "cudaErrorNoDevice (100), this machine has no usable driver or GPU (README.md: "
                 "run your own program on the simulated stack)")
    out.append(Case("no CUDA driver, failed before any allocation: the report still says so",
                    [b("no_alloc")], check_has("no_alloc: cudaErrorInsufficientDriver", no_driver),
                    exit_code=1, report="text", setup=runtime_only_dir, stacks=("sim",)))
    for cycles in (600, 40):
        out.append(Case("orphan tier: %d release cycles, the rows add up" % cycles,
                        [b("orphans"), str(cycles)], check_orphans(cycles),
                        env={"CURESV_CAPACITY": "64M"}))
    out.append(Case("curesv-report(5)'s key table names every key of a report with every section",
                    [b("orphans"), "300", "all"], check_every_section,
                    env={"CURESV_CAPACITY": "64M"}, stacks=("sim",)))
    out.append(Case("orphan tier: the text report's rows add up", [b("orphans"), "600"],
                    check_orphans_text(600), env={"CURESV_CAPACITY": "64M"}, report="text"))
    out.append(Case("a program that never allocates: a report, and the driver answered",
                    [b("no_alloc")], check_lacks(no_driver, then=check_has("no_alloc: ok",
                                                                            "curesv: leaks: none")),
                    report="text"))
    return [c for c in out if stack in c.stacks]


def orphan_counts(cycles):
    """What orphans.c CYCLES does: its allocations, and what drains the orphan tier."""
    every = lambda k: len(range(0, cycles, k))
    return {"allocs": 3 * cycles + every(4) + every(5),
            "orphan_frees": cycles - every(3) + every(4) + every(5),
            "orphan_transfers": every(3),
            "crossed": sum(1 for i in range(cycles) if i % 3 and i % 2),
            "cross_stream": every(5)}


def device_of(report, device):
    for d in report["devices"]:
        if d["device"] == device:
            return d
    raise AssertionError("no device %d in the report" % device)


def json_rows(report, device):
    """Every row of `device` in a JSON report: its reservations (listed: live and released), its
    retired reservations, its orphan tier and its shared pool."""
    d = device_of(report, device)
    return [r for r in report["reservations"] if r["device"] == device] + \
        [d["retired"], d.get("orphan", {}), d["shared"]]


def check_orphans(cycles):
    """orphans.c: the rows add up (allocations = frees, transfers in = out), the orphan tier's
    own row counts what drained it, and nothing is live."""
    want = orphan_counts(cycles)

    def check(report, out):
        expect("program", "orphans: %d cycles ok" % cycles in out, True)
        rows = json_rows(report, 0)
        allocs = sum(r.get("allocs", 0) for r in rows)
        frees = sum(r.get("frees", 0) for r in rows)
        expect("allocations over every row", allocs, want["allocs"])
        expect("frees over every row (allocations %d)" % allocs, frees, want["allocs"])
        expect("transfers in over every row", sum(r.get("transfers_in", 0) for r in rows),
               want["orphan_transfers"])
        expect("transfers out over every row", sum(r.get("transfers_out", 0) for r in rows),
               want["orphan_transfers"])
        d = device_of(report, 0)
        if "orphan" not in d:
            raise AssertionError("no devices[0].orphan")
        for key, value in (("bytes", 0), ("host_bytes", 0), ("allocs", 0),
                           ("frees", want["orphan_frees"]),
                           ("cross_thread_frees", want["crossed"]),
                           ("cross_stream_frees", want["cross_stream"]),
                           ("transfers_out", want["orphan_transfers"])):
            expect("devices[0].orphan." + key, d["orphan"][key], value)
        expect("orphan_frees (all devices)", report["orphan_frees"], want["orphan_frees"])
        expect("orphan_bytes", [report["orphan_bytes"], d["orphan_bytes"]], [0, 0])
        expect("device live", d["allocated"], 0)
        cyc = [r for r in report["reservations"] if r["name"] == "cyc"]
        expect("cyc reservations listed + retired", len(cyc) + d["retired"]["reservations"],
               cycles)
        expect("slots reused", d["retired"]["reservations"] > 0, cycles > 255)
        expect("leaks", report["leaks"]["count"], 0)
        expect("unknown frees", report["unknown_frees"], 0)
        crossed = sum(r.get("cross_thread_frees", 0) for r in rows)
        expect("cross-thread frees over every row", crossed, want["crossed"])
        return allocs, frees, crossed
    return check


def text_rows(text, device):
    """The rows of `device`'s table in a text report: [(label, (allocs, frees, x-thread))]."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("curesv: device "):
            inside = line.startswith("curesv: device %d:" % device)
            continue
        if not inside or not line.startswith("curesv:   ") or \
                line.startswith("curesv:   reservation "):
            inside = inside and line.startswith("curesv:   ")
            continue
        words = line.split()
        view = 1 if words[-2] == "-" else 2     # caller_view: "-" or "80 KiB"
        counts = words[-2 - view - 2:-1 - view]
        label = line[len("curesv:   "):len("curesv:   ") + 22].rstrip()
        rows.append((label, tuple(int(x) for x in counts)))
        inside = label != "(shared pool)"
    return rows


def check_every_section(report, out):
    """orphans.c 300 all: a report with something in every section, each key of which
    curesv-report(5)'s key table names (run_case checks the keys of every report; this one has them all)."""
    expect("program", "orphans: 300 cycles ok all" in out, True)
    d, keep = device_of(report, 0), reservation(report, "keep")
    have = {"retired reservations": d["retired"]["reservations"] > 0,
            "orphan bytes": (d["orphan"]["bytes"], d["orphan"]["host_bytes"]) == (131072, 16384),
            "transfers out of the orphan tier": d["orphan"]["transfers_out"] == 100,
            "graph memory": d["graph"] is not None,
            "graph allocations": report["graph_allocations"]["recorded"] == 1,
            "memory mapped": [v["device"] for v in report["vmm"]["devices"]] == [0],
            "leaks": [(x["kind"], x["reservation"]) for x in report["leaks"]["largest"]] ==
            [("vmm", None), ("device", "gone"), ("device", "keep"), ("host", "gone")],
            "a stream attached": (keep["streams_attached"], keep["cross_stream_frees"]) == (1, 1)}
    missing = [k for k, v in have.items() if not v]
    if missing:
        raise AssertionError("the report lacks: " + ", ".join(missing))
    rows = json_rows(report, 0)
    return (sum(r["allocs"] for r in rows), sum(r["frees"] for r in rows),
            sum(r["cross_thread_frees"] for r in rows))


def check_orphans_text(cycles):
    """orphans.c's text report: its table's rows add up, the orphan tier's among them."""
    want = orphan_counts(cycles)

    def check(text, out):
        rows = text_rows(text, 0)
        allocs = sum(r[0] for _, r in rows)
        frees = sum(r[1] for _, r in rows)
        crossed = sum(r[2] for _, r in rows)
        expect("allocations over every row", allocs, want["allocs"])
        expect("frees over every row (allocations %d)" % allocs, frees, want["allocs"])
        expect("the orphan tier's row", [r for k, r in rows if k == "(orphan tier)"],
               [(0, want["orphan_frees"], want["crossed"])])
        retired = [k for k, _ in rows if re.fullmatch(r"\(\d+ retired\)", k)]
        expect("a retired row", len(retired), 1)
        expect("the line of cross-thread frees",
               "curesv: %d frees were made by a thread other than the allocating one" %
               want["crossed"] in text.splitlines(), True)
        return allocs, frees, crossed
    return check


def leak_lines():
    """The source lines of leak_sites.c's leaking calls, by their LEAK_LINE comments."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "leak_sites.c")
    with open(path) as f:
        return {l.split("LEAK_LINE ")[1].split()[0]: n for n, l in enumerate(f, 1)
                if "/* LEAK_LINE " in l}


def expect_frame(what, frames, function, line):
    """The innermost frame is in `function`, at the leaking call's `line` of leak_sites.c where
    this build names lines (backtrace.lines), and lies in the program."""
    if not frames:
        raise AssertionError("%s: no frames" % what)
    f = frames[0]
    if not f["object"] or not f["object"].endswith("/leak_sites"):
        raise AssertionError("%s: the innermost frame is not the program's: %r" % (what, f))
    expect("%s: its symbol" % what, f["symbol"], function)
    expect("%s: its place" % what, (f["file"].rsplit("/", 1)[-1], f["line"]),
           ("leak_sites.c", line))


def check_no_frames(report, out):
    expect("frames", [l.get("frames") for l in report["leaks"]["largest"]], [[], []])
    expect("the stack table's depth", report.get("backtrace", {}).get("depth"), 0)
    return "-", "-", "-"


def backtrace_case(b):
    """CURESV_BACKTRACE=8: each leak's frames name the function and line that allocated it
    (runtime and driver, two threads), 102 allocations make 3 stacks, and the RMM trace's Frames
    column carries the same frames as object and offset."""
    where = {}

    def setup():
        where["dir"] = tempfile.mkdtemp(prefix="curesv-frames-")
        atexit.register(shutil.rmtree, where["dir"], True)
        where["trace"] = os.path.join(where["dir"], "trace.csv")
        return {"CURESV_TRACE": where["trace"], "CURESV_TRACE_FORMAT": "rmm"}

    def check(report, out):
        bt = report.get("backtrace")
        if not isinstance(bt, dict):
            raise AssertionError("no backtrace object in the report")
        expect("the stack table", {k: bt[k] for k in ("depth", "stacks", "capacity", "unrecorded")},
               {"depth": 8, "stacks": 3, "capacity": 16384, "unrecorded": 0})
        if not bt["lines"]:
            raise AssertionError("built without libbacktrace: no symbols of the program's own "
                                 "symbol table, no lines (the Makefile finds it with gcc)")
        lines = leak_lines()
        largest = report["leaks"]["largest"]
        expect("leaks", [l["bytes"] for l in largest], [1 << 20, 512 << 10])
        expect_frame("the runtime's leak", largest[0]["frames"], "leak_site_for_backtrace",
                     lines["runtime"])
        expect("the runtime's leak: its caller", largest[0]["frames"][1]["symbol"], "main")
        expect_frame("the driver's leak", largest[1]["frames"], "driver_leak_site_for_backtrace",
                     lines["driver"])
        problems = check_trace.check(where["trace"], report)
        if problems:
            raise AssertionError("trace: " + "; ".join(problems[:3]))
        with open(where["trace"]) as f:
            rows = [r.split(",") for r in f.read().splitlines()]
        expect("the trace's header", rows[0][-1], "Frames")
        for leak in largest:
            # the leak is the last allocation at its address: a real driver hands the address
            # of a freed buffer out again
            row = [r for r in rows[1:] if r[2] == "allocate" and r[3] == leak["ptr"]][-1:]
            want = ";".join("%s+0x%x" % (f["object"], f["object_offset"]) for f in leak["frames"])
            expect("the trace's frames of %s" % leak["ptr"], [r[6] for r in row], [want])
        return report["shared"]["allocs"], report["shared"]["frees"], "-"
    return Case("CURESV_BACKTRACE: each leak's frames name where it was made", [b("leak_sites")],
                check, env={"CURESV_BACKTRACE": "8"}, setup=setup)


def check_memory_viz(report, out):
    if not out.startswith("pass: "):
        raise AssertionError(out.strip()[-300:])
    return "-", "-", "-"


def check_lacks(line, then):
    def check(report, out):
        if line in out.splitlines():
            raise AssertionError("a line %r in %r" % (line, out[-600:]))
        return then(report, out)
    return check


def check_nvcc_host(report, out):
    """nvcc's registration was accepted, the launch refused in one line, the buffer counted."""
    for line in ("nvcc_host: launch: cudaErrorNotSupported", "nvcc_host: bytes=65536: ok",
                 "cudart_sim: kernel '_Z4fillPii' not launched: the simulated CUDA stack has no "
                 "GPU to run device code (host code runs; kernels need a real device); this and "
                 "every later launch fail with cudaErrorNotSupported"):
        if line not in out.splitlines():
            raise AssertionError("no line %r in %r" % (line, out[-600:]))
    producer = res(report, "producer")
    for key, want in (("allocs", 1), ("frees", 1), ("peak", 65536), ("allocated", 0)):
        expect("producer " + key, producer[key], want)
    return producer["allocs"], producer["frees"], producer["cross_thread_frees"]


def nvcc_cases(b):
    """A .cu program built with nvcc (the Makefile builds them where nvcc is)."""
    why = "skipped: nvcc was not found (CUDA_HOME/bin/nvcc), so the .cu program was not built"
    env = {"CURESV_RESERVATIONS": "producer=1M", "CURESV_ATTACH": "producer=producer"}
    static_line = ("cuda_sim: a real CUDA runtime asked for the driver's private tables "
                   "(cuGetExportTable), which the simulated driver does not have: build .cu "
                   "programs with nvcc -cudart shared (or -cudart none and libcudart_sim_static.a) "
                   "and run them with the simulated libcudart.so.13 first in LD_LIBRARY_PATH")
    return [
        Case("nvcc -cudart shared: host code runs, a kernel launch is refused", [b("nvcc_shared")],
             check_nvcc_host, env=env, stacks=("sim",), needs=(b("nvcc_shared"), why)),
        Case("nvcc -cudart none with libcudart_sim_static.a: the same", [b("nvcc_none")],
             check_nvcc_host, env=env, stacks=("sim",), needs=(b("nvcc_none"), why)),
        Case("nvcc's default static runtime: the simulated driver says what to do",
             [b("nvcc_static")], check_has(static_line, "nvcc_host: cudaMalloc: "
                                                         "cudaErrorNotSupported"),
             env=env, exit_code=1, report=False, stacks=("sim",), needs=(b("nvcc_static"), why)),
    ]


def launcher_cases(launcher, b):
    """--version, --check, and the check before a program starts."""
    bad = ["--reserve", "producer=10MB", "--reserve", "consumer=16M", "--attach",
           "producer=producer", "--attach", "consumer=consumer"]
    one_file = ("curesv: CURESV_REPORT_FILE and CURESV_TRACE: '%s' and '%s' are one file: the "
                "report would replace the trace (at run time the trace is kept and the report goes "
                "to stderr); give them different names")
    clash = one_file % ("./t-%r.csv", "t-%p.csv")  # no rank: %r is the pid
    clash_abs = one_file % (os.path.join(os.getcwd(), "t.csv"), "t.csv")
    return [
        Case("launcher --version", [launcher, "--version"], check_version, report="absent",
             sanitized=False),
        Case("launcher --check: clean", [launcher, "--check", "--reserve", "scan=1M", "--attach",
                                         "s*=scan"],
             check_lines("curesv: configuration ok: CURESV_MODE=observe, 1 reservation, 1 attach "
                         "rule"), report="absent", sanitized=False),
        Case("launcher --check: every problem, exit 2",
             [launcher, "--check", "--log", "verbose", "--capacity", "16M", "--reserve",
              "producer=10M", "--reserve", "consumer=16M", "--reserve", "x=1Q", "--reserve",
              "y=2@99", "--error-exitcode", "300"],
             # the summary is on stdout, which comes first here; then stderr in the table's order
             check_lines("curesv: configuration: 3 errors, 3 warnings: curesv would be off and the "
                         "program run unchanged",
                         "curesv: --reserve: 'x=1Q': unknown suffix 'Q' (suffixes: K, M, G, T, "
                         "KiB, MiB, GiB, TiB)",
                         "curesv: --reserve: 'y=2@99': device out of range (0..63)",
                         "curesv: --log: 'verbose': expected error, warn, info or debug; "
                         "using the default (warn)",
                         "curesv: --error-exitcode: '300': expected an exit status 0..255 "
                         "(0 = none)",
                         "curesv: --reserve: device 0: reservations total 26 MiB "
                         "(27262976 bytes), more than its capacity of 16M (16777216 bytes, "
                         "CURESV_CAPACITY): 'consumer=16M' does not fit; all are kept, the shared "
                         "pool is empty",
                         "curesv: CURESV_MOD: unknown variable, ignored (did you mean "
                         "CURESV_MODE?)"),
             env={"CURESV_MOD": "observe"}, exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: enforce mode with reservations past the capacity, exit 2",
             [launcher, "--check", "--mode", "enforce", "--capacity", "1M", "--reserve", "big=2M",
              "--attach", "hold=big"],
             check_lines("curesv: configuration: 1 error, 1 warning",
                         "curesv: --reserve: device 0: reservations total 2 MiB (2097152 bytes), "
                         "more than its capacity of 1M (1048576 bytes, CURESV_CAPACITY): 'big=2M' "
                         "does not fit; enforce mode holds them to it: 'big' gets 1 MiB, the "
                         "shared pool nothing",
                         "curesv: CURESV_MODE=enforce: device 0: the reservations (2 MiB) do not "
                         "fit its capacity (1 MiB), which enforce mode never lets the device pass: "
                         "make them fit (at run time they would be held to it)"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher: enforce mode with reservations past the capacity starts nothing",
             [launcher, "--mode", "enforce", "--capacity", "1M", "--reserve", "big=2M", "--attach",
              "hold=big", "--", b("hold"), "4", "524288"],
             check_has("curesv: invalid configuration: the program was not started (curesv "
                       "--check [options] lists the same)"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: what a new user writes, and what to write instead",
             [launcher, "--check", "--reserve", "producer=1.5G", "--reserve", "a=100 MB",
              "--reserve", "b=1GB", "--reserve", "producer=1M;consumer=64K", "--reserve",
              "producer=1M, consumer=64K", "--capacity", "16M", "--attach", "p*=producer"],
             check_lines("curesv: configuration: 5 errors, 0 warnings: curesv would be off and the "
                         "program run unchanged",
                         "curesv: --reserve: 'producer=1.5G': not a whole number of bytes: write "
                         "1536M",
                         "curesv: --reserve: 'a=100 MB': unknown suffix ' MB' (suffixes: K, M, G, "
                         "T, KiB, MiB, GiB, TiB; no space before one)",
                         "curesv: --reserve: 'b=1GB': unknown suffix 'GB' (suffixes: K, M, G, T, "
                         "KiB, MiB, GiB, TiB)",
                         "curesv: --reserve: 'producer=1M;consumer=64K': entries are separated by "
                         "',', not ';'",
                         "curesv: --reserve: ' consumer=64K': a space around the entry: entries "
                         "are separated by ',' alone, with no spaces"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: a list the environment had too is named both ways",
             [launcher, "--check", "--reserve", "b=2Q"],
             check_lines("curesv: configuration: 1 error, 0 warnings: curesv would be off and the "
                         "program run unchanged",
                         "curesv: --reserve/CURESV_RESERVATIONS: 'b=2Q': unknown suffix 'Q' "
                         "(suffixes: K, M, G, T, KiB, MiB, GiB, TiB)"),
             env={"CURESV_RESERVATIONS": "a=1M"}, exit_code=2, report="absent", sanitized=False),
        Case("launcher: --lib naming another library starts nothing",
             [launcher, "--lib", b("libwrapopen.so"), "--", b("handoff")],
             check_only_output("curesv: --lib: '%s' is not libcuresv.so (no curesv_reserve in it): "
                               "the program was not started\n" % b("libwrapopen.so")),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher: --trace-format json is an error, not CSV in a .json file",
             [launcher, "--trace", "t.json", "--trace-format", "json", "--", b("handoff")],
             check_lines("curesv: --trace-format: 'json': expected rmm (RMM's CSV) or chrome "
                         "(Chrome trace-event JSON)",
                         "curesv: invalid configuration: the program was not started (curesv "
                         "--check [options] lists the same)"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: --trace-format without --trace",
             [launcher, "--check", "--trace-format", "chrome"],
             check_lines("curesv: configuration: 0 errors, 1 warning",
                         "curesv: --trace-format: 'chrome': no trace is written, since "
                         "CURESV_TRACE (the launcher's --trace) names no file"),
             exit_code=2, report="absent", sanitized=False),
        Case("a variable in the wrong case is warned of", [b("handoff")],
             check_has("curesv: curesv_mode: not a curesv variable, ignored: names are "
                       "case-sensitive (did you mean CURESV_MODE?)", then=check_handoff("device")),
             env=dict(HANDOFF_ENV, curesv_mode="enforce")),
        Case("launcher --check: a warning is a problem too",
             [launcher, "--check", "--attach", "w*=nosuch"],
             check_lines("curesv: configuration: 0 errors, 1 warning",
                         "curesv: --attach: 'w*=nosuch': no reservation 'nosuch' in "
                         "CURESV_RESERVATIONS; matching threads use the shared pool until it is "
                         "created"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: the report file and the trace are one file",
             [launcher, "--check", "--trace", "t-%p.csv", "--report-file", "./t-%r.csv"],
             check_lines("curesv: configuration: 1 error, 0 warnings", clash), exit_code=2,
             report="absent", sanitized=False),
        Case("launcher: the report file and the trace as one file start nothing",
             [launcher, "--trace", "t.csv", "--report-file", os.path.join(os.getcwd(), "t.csv"),
              "--", b("handoff")],
             check_lines(clash_abs, "curesv: invalid configuration: the program was not started "
                         "(curesv --check [options] lists the same)"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher: an invalid configuration starts nothing", [launcher] + bad + ["--", b("handoff")],
             check_lines("curesv: --reserve: 'producer=10MB': unknown suffix 'MB' (suffixes: K, "
                         "M, G, T, KiB, MiB, GiB, TiB)",
                         "curesv: invalid configuration: the program was not started (curesv "
                         "--check [options] lists the same)"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher: warnings do not stop it", [launcher, "--capacity", "400K", "--reserve",
                                                   "scan=100K", "--reserve", "pipe=200K",
                                                   "--attach", "scan=scan", "--attach", "pipe=pipe",
                                                   "--attach", "other=nosuch", "--",
                                                   b("handoff")],
             # at start-up the library names the option the user typed, as --check does
             check_has("curesv: --attach: 'other=nosuch': no reservation 'nosuch' in "
                       "CURESV_RESERVATIONS; matching threads use the shared pool until it is "
                       "created", then=check_handoff("device")), sanitized=False),
        Case("launcher: a warning names the variable when the environment set it",
             [launcher, "--", b("handoff")],
             check_has("curesv: CURESV_ATTACH: 'other=nosuch': no reservation 'nosuch' in "
                       "CURESV_RESERVATIONS; matching threads use the shared pool until it is "
                       "created", then=check_handoff("device")),
             env=dict(HANDOFF_ENV, CURESV_ATTACH="scan=scan,pipe=pipe,other=nosuch"),
             sanitized=False),
        Case("launcher: a list the environment had too is named both ways at start-up",
             [launcher, "--reserve", "big=1M", "--", b("handoff")],
             check_has("curesv: --reserve/CURESV_RESERVATIONS: device 0: reservations total "
                       "1.3 MiB (1355776 bytes), more than its capacity of 400K (409600 bytes, "
                       "CURESV_CAPACITY): 'big=1M' does not fit; all are kept, the shared pool "
                       "is empty", then=check_handoff("device")), env=HANDOFF_ENV, sanitized=False),
        Case("launcher --check: a capacity of 0 is refused, as a reservation of 0 bytes is",
             [launcher, "--check", "--capacity", "0", "--reserve", "a=0"],
             check_lines("curesv: configuration: 2 errors, 0 warnings: curesv would be off and the "
                         "program run unchanged",
                         "curesv: --capacity: '0': zero size: a device of capacity 0 could hand "
                         "out nothing",
                         "curesv: --reserve: 'a=0': zero size"),
             exit_code=2, report="absent", sanitized=False),
        Case("launcher --check: a device's capacity of 0 too",
             [launcher, "--check"],
             check_lines("curesv: configuration: 1 error, 0 warnings: curesv would be off and the "
                         "program run unchanged",
                         "curesv: CURESV_CAPACITY: '1=0K': zero size: a device of capacity 0 could "
                         "hand out nothing"),
             env={"CURESV_CAPACITY": "0=1G,1=0K"}, exit_code=2, report="absent", sanitized=False),
        # a program that cannot be run: one curesv line and the shell's status, 126
        Case("launcher: a file that is not executable",
             [launcher, "--", "/etc/passwd"],
             check_only_output("curesv: '/etc/passwd': not executable, not a program to run "
                               "(Permission denied)\n"),
             exit_code=126, report="absent", sanitized=False),
        Case("launcher: a folder",
             [launcher, "--", "/"],
             check_only_output("curesv: '/': a folder, not a program to run (Permission "
                               "denied)\n"),
             exit_code=126, report="absent", sanitized=False),
        # A flag given a value ran the value as the program (--json=echo ran echo), and an empty
        # value set a variable to nothing.
        ] + [Case("launcher: %s" % " ".join(a or "''" for a in argv),
                  [launcher] + argv + ["--", b("handoff")], check_only_output(line + "\n"),
                  exit_code=2, report="absent", sanitized=False) for argv, line in [
            (["--json=echo"], "curesv: --json takes no value ('--json=echo'; see curesv --help)"),
            (["--strict=1"], "curesv: --strict takes no value ('--strict=1'; see curesv --help)"),
            (["--no-report=", "--check=x"],
             "curesv: --no-report takes no value ('--no-report='; see curesv --help)"),
            (["--bogus=1"], "curesv: unknown option '--bogus' (see curesv --help)"),
            # the natural guess from CURESV_REPORT, and typos: the nearest options, as git does
            (["--report", "json"], "curesv: unknown option '--report' (did you mean --json, "
             "--no-report or --report-file? see curesv --help)"),
            (["--report=json"], "curesv: unknown option '--report' (did you mean --json, "
             "--no-report or --report-file? see curesv --help)"),
            (["--jsno"], "curesv: unknown option '--jsno' (did you mean --json? see curesv "
             "--help)"),
            (["--reservations", "a=1M"], "curesv: unknown option '--reservations' (did you mean "
             "--reserve? see curesv --help)"),
            (["--trace-fmt", "chrome"], "curesv: unknown option '--trace-fmt' (did you mean "
             "--trace or --trace-format? see curesv --help)"),
            (["--reserve", ""], "curesv: --reserve: empty value (see curesv --help)"),
            (["--reserve="], "curesv: --reserve: empty value (see curesv --help)"),
            (["--capacity=400K", "--attach", ""],
             "curesv: --attach: empty value (see curesv --help)"),
            (["--report-file", ""], "curesv: --report-file: empty value (see curesv --help)"),
            (["--lib="], "curesv: --lib: empty value (see curesv --help)"),
        ]] + [
        # every option that takes a value, in its --option=VALUE form
        Case("launcher: --option=VALUE for every option with a value",
             [launcher, "--capacity=400K", "--reserve=scan=100K", "--reserve=pipe=200K",
              "--attach=scan=scan", "--attach=pipe=pipe", "--mode=enforce", "--attribution=origin",
              "--stream-attach=off", "--meminfo=driver", "--log=warn", "--error-exitcode=0",
              "--backtrace=2", "--trace-format=rmm", "--json", "--", b("handoff")],
             check_handoff("device"), sanitized=False),
        Case("launcher --error-exitcode", [launcher, "--error-exitcode", "9", "--", b("exit_status"),
                                           "leak", "0", "3000"],
             check_exit_status(3000, True), exit_code=9, same_output=True, sanitized=False),
        Case("launcher --error-exitcode with --no-report", [launcher, "--no-report",
                                                            "--error-exitcode", "9", "--",
                                                            b("exit_status"), "leak", "0", "10"],
             check_exit_status(10, True, "curesv: CURESV_ERROR_EXITCODE=9: the report found 1 "
                               "leaked allocation, 0 refusals and 0 allocations past a budget: "
                               "exit status 9 instead of 0"),
             exit_code=9, report="absent", sanitized=False),
    ]


AUDIT_ENV = dict(HANDOFF_ENV, CURESV_ATTACH="scan*=scan,pipe=pipe", CURESV_REQUIRE_TRANSFER="1")


def site_lines():
    """The source lines of handoff_sites.c's allocating and freeing calls (SITE_LINE comments)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "handoff_sites.c")
    with open(path) as f:
        return {l.split("SITE_LINE ")[1].split()[0]: n for n, l in enumerate(f, 1)
                if "/* SITE_LINE " in l}


def site_frame(what, frames, function, line):
    """The innermost frame is the program's `function`, at `line` of handoff_sites.c."""
    if not frames:
        raise AssertionError("%s: no frames" % what)
    f = frames[0]
    if not f["object"] or not f["object"].endswith("/handoff_sites"):
        raise AssertionError("%s: the innermost frame is not the program's: %r" % (what, f))
    expect("%s: its symbol" % what, f["symbol"], function)
    expect("%s: its place" % what, (f["file"].rsplit("/", 1)[-1], f["line"]),
           ("handoff_sites.c", line))


def audit_of(report):
    audit = report.get("handoff_audit")
    if not isinstance(audit, dict) or not isinstance(report.get("handoffs"), list):
        raise AssertionError("no handoff_audit or handoffs in the report")
    return audit, report["handoffs"]


def check_audit(count, suppressed=0, origin="scan", payer="pipe", stream=False, released=0,
                frames=False, kind="device", nbytes=80 * KiB):
    """The report's audit: `count` hand-offs not suppressed at one site (none when 0), `suppressed`
    more; the site's fields, and with `frames` both stacks naming handoff_sites.c's lines."""
    def check(report, out):
        audit, sites = audit_of(report)
        expect("hand-offs", (audit["count"], audit["suppressed"], audit["unrecorded"]),
               (count, suppressed, 0))
        expect("sites", len(sites), 1 if count or suppressed else 0)
        if sites:
            site = sites[0]
            expect("the site", {k: site[k] for k in ("origin", "payer", "device", "kind", "count",
                                                     "bytes", "origin_released")},
                   {"origin": origin, "payer": payer, "device": 0, "kind": kind,
                    "count": count + suppressed, "bytes": (count + suppressed) * nbytes,
                    "origin_released": released})
            expect("its stream", site["stream"] is not None, stream)
            # stream-ordered: the main thread, named as the program, does both
            expect("its threads", (site["alloc_thread"], site["free_thread"]),
                   ("handoff_sites",) * 2 if stream else ("scan", "pipe"))
            expect("suppressed by", site["suppressed_by"], "known site" if suppressed else None)
            if frames:
                lines = site_lines()
                site_frame("allocated", site["alloc_frames"], "make_batch_for_audit",
                           lines["alloc"])
                site_frame("freed", site["free_frames"], "consume_batch_for_audit",
                           lines["free"])
            else:
                expect("frames", (site["alloc_frames"], site["free_frames"]), ([], []))
        return report["shared"]["allocs"], report["shared"]["frees"], "-"
    return check


def suppressions_file(text):
    """A setup writing a suppressions file: CURESV_SUPPRESSIONS names it."""
    def setup():
        d = tempfile.mkdtemp(prefix="curesv-supp-")
        atexit.register(shutil.rmtree, d, True)
        path = os.path.join(d, "known.supp")
        with open(path, "w") as f:
            f.write(text)
        return {"CURESV_SUPPRESSIONS": path}
    return setup


def handoff_audit_cases(b, launcher):
    """CURESV_REQUIRE_TRANSFER: hand-offs found with both stacks, transfers and same-reservation
    frees not, stream-attached payers, a released origin, suppressions, the exit status."""
    prog = b("handoff_sites")
    bt = dict(AUDIT_ENV, CURESV_BACKTRACE="8")
    found_line = ("curesv: CURESV_ERROR_EXITCODE=7: the report found 0 leaked allocations, 0 "
                  "refusals, 0 allocations past a budget and %s: exit status 7 instead of 0")
    return [
        Case("hand-off audit: found, both stacks name the program's lines", [prog, "handoff"],
             check_audit(1, frames=True), env=bt, trace="chrome"),
        Case("hand-off audit: the text report shows both stacks", [prog, "handoff"],
             check_has("curesv: hand-offs without transfer (CURESV_REQUIRE_TRANSFER=reservations): "
                       "1 free, 80 KiB, at 1 site; largest:",
                       "curesv:   scan -> pipe, device 0: 1 free, 80 KiB (device); first allocated "
                       "by thread 'scan' (#1), freed by thread 'pipe' (#2)",
                       "curesv:     allocated at:", "curesv:     freed at:",
                       re.compile(r"curesv:       #0 make_batch_for_audit\+0x[0-9a-f]+ at "
                                  r"\S*handoff_sites\.c:%d \(/\S+/handoff_sites\+0x[0-9a-f]+\)"
                                  % site_lines()["alloc"]),
                       re.compile(r"curesv:       #0 consume_batch_for_audit\+0x[0-9a-f]+ at "
                                  r"\S*handoff_sites\.c:%d \(.*\)" % site_lines()["free"])),
             env=bt, report="text"),
        Case("hand-off audit: off, no keys and no finding", [prog, "handoff"],
             check_lacks_keys(("handoff_audit", "handoffs")),
             env=dict(HANDOFF_ENV, CURESV_ERROR_EXITCODE="7")),
        Case("hand-off audit: a transferred buffer and a same-reservation free are none",
             [prog, "transfer"], check_audit(0), env=dict(AUDIT_ENV, CURESV_REQUIRE_TRANSFER="all",
                                                         CURESV_ERROR_EXITCODE="7")),
        Case("hand-off audit: stream-attached payers", [prog, "stream"],
             check_audit(1, stream=True, kind="async", nbytes=64 * KiB), env=AUDIT_ENV),
        Case("hand-off audit: a released origin (the orphan tier)", [prog, "released"],
             check_audit(1, released=1), env=AUDIT_ENV),
        Case("hand-off audit: a suppression that matches", [prog, "handoff"],
             check_audit(0, suppressed=1, frames=True),
             env=dict(bt, CURESV_ERROR_EXITCODE="7"),
             setup=suppressions_file("# known today\n{\n  known site\n  alloc: make_batch_*\n"
                                     "  free: consume_batch_for_audit\n  origin: scan\n}\n")),
        Case("hand-off audit: a suppression that does not match", [prog, "handoff"],
             check_has(found_line % "1 hand-off without transfer",
                       then=check_audit(1, frames=True)),
             env=dict(bt, CURESV_ERROR_EXITCODE="7"), exit_code=7,
             setup=suppressions_file("{\n  another site\n  free: consume_batch_for_audit\n"
                                     "  payer: other\n}\n")),
        Case("hand-off audit: --error-exitcode counts them", [prog, "handoff"],
             check_has(found_line % "1 hand-off without transfer"),
             env=dict(AUDIT_ENV, CURESV_ERROR_EXITCODE="7"), exit_code=7),
        Case("launcher --require-transfer --suppressions --error-exitcode",
             [launcher, "--reserve", "scan=100K", "--reserve", "pipe=200K", "--attach",
              "scan*=scan", "--attach", "pipe=pipe", "--require-transfer=all", "--error-exitcode",
              "7", "--", prog, "handoff"],
             check_has(found_line % "1 hand-off without transfer"), exit_code=7, report=False,
             sanitized=False),
        Case("launcher --require-transfer: a bad --suppressions file starts nothing",
             [launcher, "--reserve", "scan=100K", "--reserve", "pipe=200K", "--attach",
              "scan*=scan", "--attach", "pipe=pipe", "--require-transfer", "--error-exitcode",
              "7", "--suppressions", "/nonexistent.supp", "--json", "--", prog, "handoff"],
             check_has("curesv: --suppressions: '/nonexistent.supp': cannot be read: No such file "
                       "or directory",
                       "curesv: invalid configuration: the program was not started (curesv "
                       "--check [options] lists the same)"),
             report="absent", exit_code=2, sanitized=False),
    ]


def check_lacks_keys(keys):
    def check(report, out):
        expect("audit keys", [k for k in keys if k in report], [])
        return "-", "-", "-"
    return check


def exit_status_cases(b):
    """CURESV_ERROR_EXITCODE: which findings change the status, and that output survives."""
    code = {"CURESV_ERROR_EXITCODE": "3"}
    leak_line = ("curesv: CURESV_ERROR_EXITCODE=3: the report found 1 leaked allocation, 0 "
                 "refusals and 0 allocations past a budget: exit status 3 instead of %d")
    fake_torch = b("libc10_cuda.so")
    return [
        Case("error exitcode: a leak", [b("exit_status"), "leak", "0", "5000"],
             check_exit_status(5000, True, leak_line % 0), env=code, exit_code=3,
             same_output=True),
        Case("error exitcode: a leak, the program's own status 5", [b("exit_status"), "leak", "5",
                                                                     "100"],
             check_exit_status(100, True, leak_line % 5), env=code, exit_code=3),
        Case("error exitcode: no finding keeps the program's status",
             [b("exit_status"), "clean", "5", "100"], check_exit_status(100, False, ""),
             env=code, exit_code=5, same_output=True),
        Case("error exitcode: no finding, status 0", [b("exit_status"), "clean", "0", "100"],
             check_exit_status(100, False, ""), env=code, exit_code=0),
        Case("error exitcode: unset changes nothing", [b("exit_status"), "leak", "0", "100"],
             check_exit_status(100, True, ""), exit_code=0),
        Case("error exitcode: over budget (observe)", [b("handoff")],
             check_has("curesv: CURESV_ERROR_EXITCODE=4: the report found 0 leaked allocations, 0 "
                       "refusals and 1 allocation past a budget: exit status 4 instead of 0"),
             env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K",
                      CURESV_ERROR_EXITCODE="4"), exit_code=4),
        Case("error exitcode: a refusal (enforce)", [b("handoff")],
             check_has("curesv: CURESV_ERROR_EXITCODE=5: the report found 0 leaked allocations, 1 "
                       "refusal and 0 allocations past a budget: exit status 5 instead of 1"),
             env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K",
                      CURESV_MODE="enforce", CURESV_ERROR_EXITCODE="5"), exit_code=5),
        Case("caching allocator loaded: live at exit, not leaks",
             [b("exit_status"), "leak", "0", "10", fake_torch],
             check_has("curesv: live at exit: 1 allocation, 64 KiB, held by PyTorch's caching "
                       "allocator (libc10_cuda.so) or leaked: a caching allocator keeps its "
                       "segments until exit, so curesv cannot tell them apart "
                       "(CURESV_ERROR_EXITCODE does not count them as leaks); run with "
                       "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (or call torch.cuda.empty_cache() before "
                       "exit) to see leaks alone; largest:"),
             env=code, exit_code=0, report="text", stacks=("sim",)),
        Case("caching allocator switched off: leaks again",
             [b("exit_status"), "leak", "0", "10", fake_torch],
             check_has("curesv: leaks: 1 allocation, 64 KiB still live; largest:", leak_line % 0),
             env=dict(code, PYTORCH_NO_CUDA_MEMORY_CACHING="1"), exit_code=3, report="text",
             stacks=("sim",)),
    ]


def check_main_thread_charged(report, out):
    producer = res(report, "producer")
    expect("producer allocs", producer["allocs"], 1)
    expect("leaks", report["leaks"]["count"], 1)
    return producer["allocs"], producer["frees"], producer["cross_thread_frees"]


def configuration_cases(b):
    """What a bad or over-full configuration does to a real run."""
    over = ("curesv: CURESV_RESERVATIONS: device 0: reservations total 1.2 MiB (1228800 bytes), "
            "more than its capacity of %s: 'pipe=600K' does not fit; all are kept, the shared pool "
            "is empty")
    return [
        Case("an attach pattern that catches the main thread: said once",
             [b("exit_status"), "leak", "0", "1"],
             check_has("curesv: CURESV_ATTACH rule 'exit*=producer' matches the main thread, "
                       "which is named after the program ('exit_status'): its allocations are "
                       "charged to 'producer'; narrow the pattern if it was meant for other "
                       "threads", then=check_main_thread_charged),
             env={"CURESV_RESERVATIONS": "producer=1M", "CURESV_ATTACH": "exit*=producer"}),
        Case("one bad entry: one line, no cascade", [b("handoff")],
             check_lines("curesv: CURESV_RESERVATIONS: 'scan=10MB': unknown suffix 'MB' "
                         "(suffixes: K, M, G, T, KiB, MiB, GiB, TiB)",
                         "curesv: invalid configuration: curesv is off, the program runs unchanged "
                         "(CURESV_STRICT=1 makes this fatal; curesv --check lists every problem)"),
             env=dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=10MB,pipe=200K"), report="absent"),
        Case("a bad cosmetic setting keeps tracking on", [b("handoff")],
             check_has("curesv: CURESV_LOG: 'verbose': expected error, warn, info or debug; using "
                       "the default (warn)", then=check_handoff("device")),
             env=dict(HANDOFF_ENV, CURESV_LOG="verbose")),
        Case("reservations past CURESV_CAPACITY: warned, all kept", [b("handoff")],
             check_has(over % "1M (1048576 bytes, CURESV_CAPACITY)",
                       then=check_handoff("device")),
             env=dict(HANDOFF_ENV, CURESV_CAPACITY="1M", CURESV_RESERVATIONS="scan=600K,pipe=600K")),
        Case("reservations past the driver's memory: the same", [b("handoff")],
             check_has(over % "1 MiB (1048576 bytes, the device's memory)",
                       then=check_handoff("device")),
             env={"CUDA_SIM_TOTAL_MEM": "1M", "CURESV_RESERVATIONS": "scan=600K,pipe=600K",
                  "CURESV_ATTACH": "scan=scan,pipe=pipe"}, stacks=("sim",)),
    ]


def report_problems(report, quiescent):
    """What every JSON report must meet: its keys named in curesv-report(5), its rows adding up."""
    problems = ["key %s is not in curesv-report(5)'s key table" % k
                for k in check_report.unnamed_keys(report, PAGE_KEYS)]
    if quiescent:
        problems += check_report.rows_problems(report)
    if problems:
        raise AssertionError("; ".join(problems[:4]))


def per_process_check(case, tmp, out):
    """The reports of a per_process case: report-PID.json in `tmp`, one per process."""
    reports = {}
    try:
        for name in sorted(os.listdir(tmp)):
            m = re.fullmatch(r"report-(\d+)\.json", name)
            if m:
                with open(os.path.join(tmp, name), encoding="utf-8") as f:
                    reports[int(m.group(1))] = json.load(f)
                report_problems(reports[int(m.group(1))], case.quiescent)
        return True, case.check(reports, out), "", "-"
    except (OSError, ValueError) as err:
        return False, ("-", "-", "-"), "no JSON report: %s; %s" % (err, out.strip()[-300:]), "-"
    except AssertionError as err:
        return False, ("-", "-", "-"), str(err), "-"


def run_case(case, lib, stack, first=""):
    if case.needs and not os.path.exists(case.needs[0]):
        return None, ("-", "-", "-"), case.needs[1], "-"
    with tempfile.TemporaryDirectory() as tmp:
        path, after = os.path.join(tmp, "report.json"), None
        if case.report_file:
            path, after = case.report_file(tmp)
        if case.per_process:
            path = os.path.join(tmp, "report-%p.json")
        env = dict(os.environ)
        env.update(case.env)
        if case.setup:
            env.update(case.setup())
        before = " ".join(os.path.join(os.path.dirname(case.argv[0]), p) for p in case.preload)
        env.update({"LD_PRELOAD": " ".join(x for x in (first, before, lib) if x),
                    "CURESV_REPORT": "text" if case.report == "text" or after else "json",
                    "CURESV_REPORT_FILE": path})
        if not case.shim:
            del env["LD_PRELOAD"]
        trace = os.path.join(tmp, "trace")
        if case.trace:
            env.update({"CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": case.trace})
        try:
            p = subprocess.run(case.argv, env=env, capture_output=True, text=True,
                               timeout=case.timeout)
        except subprocess.TimeoutExpired:
            return False, ("-", "-", "-"), "timed out", "-"
        except FileNotFoundError:
            return False, ("-", "-", "-"), "%s was not built" % case.argv[0], "-"
        # stdout's last line may be unterminated: stderr's first line starts on a line of its own
        out = p.stdout + ("\n" if p.stdout and not p.stdout.endswith("\n") else "") + p.stderr
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
                    text = f.read()
                return True, case.check(text, out + text), "", "-"
            except (OSError, ValueError, AssertionError) as err:
                return False, ("-", "-", "-"), str(err), "-"
        if case.per_process:
            return per_process_check(case, tmp, out)
        try:
            with open(path, encoding="utf-8") as f:  # strict: JSON text is UTF-8
                report = json.load(f)
        except (OSError, ValueError) as err:
            return False, ("-", "-", "-"), "no JSON report: %s; %s" % (err, out.strip()[-300:]), "-"
        leaks = report["leaks"]["count"] if report else "-"
        try:
            report_problems(report, case.quiescent)
            counts = case.check(report, out)
        except AssertionError as err:
            return False, ("-", "-", "-"), str(err), leaks
        if case.trace:
            problems = check_trace.check(trace, report, final=case.quiescent)
            if problems:
                return False, ("-", "-", "-"), "trace: " + "; ".join(problems[:3]), "-"
        return True, counts, "", leaks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stack", default="sim", choices=("sim", "gpu"))
    ap.add_argument("--only", default="")
    ap.add_argument("--sanitizer-runtime", default="")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    rows, failed, skipped = [], 0, 0
    for case in cases(args.stack, args.bin, sanitized=bool(args.sanitizer_runtime)):
        if args.only not in case.name or (args.sanitizer_runtime and not case.sanitized):
            continue
        ok, (allocs, frees, crossed), why, leaks = run_case(case, lib, args.stack,
                                                            args.sanitizer_runtime)
        if ok is None:
            skipped += 1
            rows.append((case.name, "skip", allocs, frees, crossed, leaks, why))
            continue
        failed += not ok
        rows.append((case.name, "pass" if ok else "FAIL", allocs, frees, crossed, leaks, why))
    width = max(len(r[0]) for r in rows) if rows else 10
    print("%-*s  %-6s %9s %9s %9s %6s" % (width, "case", "result", "allocs", "frees", "x-thread",
                                          "leaks"))
    for r in rows:
        print("%-*s  %-6s %9s %9s %9s %6s" % ((width,) + r[:6]))
        if r[6]:
            print("    " + r[6])
    print("%d passed, %d failed%s" % (len(rows) - failed - skipped, failed,
                                      ", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
