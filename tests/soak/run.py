#!/usr/bin/env python3
"""Runs the drift soak (tests/soak/soak.c) under libcuresv.so on the simulated stack, once per
configuration (observe: large budgets; enforce: small ones, so that refusals happen), and checks
the JSON reports it leaves against the books it kept:

  - each quiescent report (between phases, at exit) exactly: every counter of device 0's
    reservations and shared pool, device 1's sums over its rows (its reservations of every
    generation, listed or retired, its orphan tier and its shared pool: allocations, frees,
    cross-thread and cross-stream frees, denials, transfers in and out), live bytes, the origin
    table, the VMM section, the leaks; and that its rows add up (check_report.py --rows);
  - every report, the racing ones too: nothing unknown, untracked or stale, counters that never go
    back from one report to the next, in enforce mode no peak past its budget or capacity, and
    every key named in curesv-report(5)'s key table (check_report.py --keys).

    run.py --lib build/plain/libcuresv.so --bin build/plain/soak/soak [--ops N] [--threads T]
           [--config observe|enforce] [--sanitizer-runtime /path/libtsan.so] [--keep DIR]

Prints one line per configuration and exits 1 when any check failed.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "unit"))
import check_report  # noqa: E402  (tests/unit/check_report.py)

PAGE_KEYS = check_report.page_keys(os.path.join(HERE, "..", "..", "scripts", "man", "curesv-report.5"))
STABLE = ["s0", "s1", "s2", "s3", "s4"]
CHURN = ["c0", "c1", "c2", "c3"]
ATTACH = "g-s0-*=s0,g-s1-*=s1,g-c0-*=c0,g-c1-*=c1"


def reservations(stable, churn):
    return ",".join(["%s=%s@0" % (n, stable) for n in STABLE[:4]] +
                    ["%s=%s@1" % (n, churn) for n in CHURN])


CONFIGS = {
    "observe": {"CURESV_MODE": "observe", "CURESV_CAPACITY": "0=1G,1=1G",
                "CURESV_RESERVATIONS": reservations("4M", "4M")},
    "enforce": {"CURESV_MODE": "enforce", "CURESV_CAPACITY": "0=24M,1=24M",
                "CURESV_RESERVATIONS": reservations("2M", "2M")},
}

# Account fields the soak's books hold exactly, as the report names them.
EXACT = ["allocs", "frees", "cross_thread_frees", "denied", "transfers_in", "transfers_out",
         "cross_stream_frees", "allocated", "host_allocated", "caller_view"]
# Counters that never go back while the program runs (device 0's accounts are never released).
MONOTONIC = ["allocs", "frees", "cross_thread_frees", "denied", "transfers_in", "transfers_out",
             "cross_stream_frees", "peak"]


class Problems:
    def __init__(self):
        self.lines = []

    def eq(self, where, what, got, want):
        if got != want:
            self.lines.append("%s: %s is %r, want %r" % (where, what, got, want))

    def true(self, where, cond, what):
        if not cond:
            self.lines.append("%s: %s" % (where, what))


def slack(budget):
    return min(1 << 20, budget // 64)


def live_rows(report, device):
    return [r for r in report["reservations"] if r["device"] == device and not r["released"]]


def device_of(report, d):
    for dev in report["devices"]:
        if dev["device"] == d:
            return dev
    raise KeyError("device %d missing" % d)


def check_always(p, where, report, mode, previous):
    """What holds in any report, also one written while threads allocate."""
    p.eq(where, "unknown_frees", report["unknown_frees"], 0)
    p.eq(where, "stale_entries", report["stale_entries"], 0)
    p.eq(where, "table_full_failures", report["table_full_failures"], 0)
    p.eq(where, "untracked allocations", report["untracked"]["count"], 0)
    p.eq(where, "graph allocations", report["graph_allocations"]["recorded"], 0)
    p.eq(where, "table full events", report["table"]["full_events"], 0)
    p.eq(where, "vmm unknown_releases", report["vmm"]["unknown_releases"], 0)
    p.eq(where, "vmm untracked", report["vmm"]["untracked"], 0)
    p.eq(where, "mode", report["mode"], mode)
    for key in check_report.unnamed_keys(report, PAGE_KEYS):
        p.lines.append("%s: key %s is not in curesv-report(5)'s key table" % (where, key))
    p.true(where, len(report["reservations"]) <= 255, "more than 255 reservations listed")
    names = sorted(r["name"] for r in report["reservations"] if r["device"] == 0)
    p.eq(where, "device 0's reservations", names, STABLE)
    if mode == "enforce":
        for dev in report["devices"]:
            p.true(where, dev["peak"] <= dev["capacity"], "device %d peak %d past its capacity %d"
                   % (dev["device"], dev["peak"], dev["capacity"]))
            p.true(where, dev["shared"]["peak"] <= dev["capacity"], "device %d shared pool peak "
                   "%d past its capacity" % (dev["device"], dev["shared"]["peak"]))
        for r in report["reservations"]:
            p.true(where, r["peak"] <= r["size"], "%s (device %d) peak %d past its size %d"
                   % (r["name"], r["device"], r["peak"], r["size"]))
            p.true(where, r["released"] or r["allocated"] <= r["size"], "%s allocated %d past its "
                   "size %d" % (r["name"], r["allocated"], r["size"]))
            if r["device"] == 0:
                p.eq(where, "%s over_budget" % r["name"], r["over_budget"], 0)
        d0 = device_of(report, 0)
        room = d0["capacity"] - d0["reserved"]
        p.true(where, d0["shared"]["allocated"] <= room and d0["shared"]["peak"] <= room,
               "device 0's shared pool past the %d bytes its capacity leaves" % room)
    # from one report to the next (each written after the one before)
    now = {r["name"]: r for r in live_rows(report, 0)}
    for d in (0, 1):
        now["shared%d" % d] = device_of(report, d)["shared"]
        now["device%d" % d] = {"peak": device_of(report, d)["peak"]}
    for name, was in previous.items():
        for key in MONOTONIC:
            if key in was and key in now.get(name, {}):
                p.true(where, now[name][key] >= was[key], "%s %s went back from %d to %d"
                       % (name, key, was[key], now[name][key]))
    for key in ("creates", "releases"):
        p.true(where, report["vmm"][key] >= previous.get("vmm", {}).get(key, 0),
               "vmm %s went back" % key)
    now["vmm"] = report["vmm"]
    return now


def check_books(p, where, report, books):
    """A report written while nothing ran, against the program's books of that moment."""
    acc = books["accounts"]
    rows = {r["name"]: r for r in live_rows(report, 0)}
    for name in STABLE:
        r = rows.get(name)
        if r is None:
            p.lines.append("%s: no live reservation %s" % (where, name))
            continue
        p.eq(where, name + " size", r["size"], acc[name]["size"])
        p.eq(where, name + " streams_attached", r["streams_attached"],
             1 if name in ("s0", "s3") else 0)
        for key in EXACT:
            p.eq(where, "%s %s" % (name, key), r[key], acc[name][key])
    d0, d1 = device_of(report, 0), device_of(report, 1)
    for key in EXACT:
        p.eq(where, "device 0 shared pool " + key, d0["shared"][key], acc["shared0"][key])
    p.eq(where, "device 0 allocated", d0["allocated"],
         sum(acc[n]["allocated"] for n in STABLE + ["shared0"]))
    p.eq(where, "device 0 reserved", d0["reserved"], sum(acc[n]["size"] for n in STABLE))
    p.eq(where, "device 0 orphan_bytes", d0["orphan_bytes"], 0)
    # A peak is what a thread saw when it allocated: short of the truth by at most what every
    # other thread's share holds, min(1 MiB, budget / 64) each (core/ledger.h); after the last
    # allocation or transfer only frees came, so it is no further below what is live now.
    shards = books["threads"] + 1
    for name in STABLE:
        if name in rows:
            r = rows[name]
            short = shards * slack(r["size"])
            p.true(where, r["peak"] >= r["allocated"] - short, "%s peak %d below its %d live "
                   "bytes by more than %d" % (name, r["peak"], r["allocated"], short))
    for dev in (d0, d1):
        short = shards * slack(dev["capacity"])
        p.true(where, dev["peak"] >= dev["allocated"] - short, "device %d peak %d below its %d "
               "live bytes by more than %d" % (dev["device"], dev["peak"], dev["allocated"], short))
    p.eq(where, "device capacities", [d0["capacity"], d1["capacity"]], books["capacity"])
    # device 1: its rows, which hold every allocation and free: every generation of every churn
    # reservation (listed, or retired once its slot was reused), its orphan tier (the frees after
    # a release, and transfers out of it), its shared pool
    rows1 = check_report.device_rows(report, d1)
    b1 = acc["device1"]
    for key in ("allocs", "frees", "cross_thread_frees", "cross_stream_frees", "denied"):
        p.eq(where, "device 1 %s over its rows" % key, sum(r[key] for r in rows1), b1[key])
    p.eq(where, "device 1 transfers in and out over its rows",
         sum(r["transfers_in"] for r in rows1), sum(r["transfers_out"] for r in rows1))
    p.eq(where, "device 1 orphan tier's allocations", d1["orphan"]["allocs"], 0)
    p.eq(where, "device 1 allocated", d1["allocated"], b1["allocated"])
    live1 = live_rows(report, 1)
    p.eq(where, "device 1: live reservations + shared pool + orphan tier",
         sum(r["allocated"] for r in live1) + d1["shared"]["allocated"] + d1["orphan"]["bytes"],
         d1["allocated"])
    p.eq(where, "device 1 host bytes: live reservations + shared pool + orphan tier",
         sum(r["host_allocated"] for r in live1) + d1["shared"]["host_allocated"] +
         d1["orphan"]["host_bytes"], b1["host_allocated"])
    for line in check_report.rows_problems(report):
        p.lines.append("%s: %s" % (where, line))
    p.eq(where, "device 1 reserved", d1["reserved"], len(live1) * books["churn_size"])
    p.eq(where, "churn reservations listed + retired",
         sum(1 for r in report["reservations"] if r["device"] == 1) +
         d1["retired"]["reservations"], books["churn"]["created"] - 5)
    p.eq(where, "live churn reservations", sorted(r["name"] for r in live1),
         sorted(books["churn"]["live"]))
    live = books["live"]
    p.eq(where, "table live", report["table"]["live"], live["entries"])
    p.eq(where, "leaks count", report["leaks"]["count"], live["entries"])
    p.eq(where, "leaks bytes", report["leaks"]["bytes"], live["bytes"])
    vmm = report["vmm"]
    p.eq(where, "vmm handles", vmm["handles"], live["vmm_handles"])
    p.eq(where, "vmm bytes", vmm["bytes"], live["vmm_bytes"])
    p.eq(where, "vmm mappings", vmm["mappings"], live["vmm_mappings"])
    p.eq(where, "vmm creates", vmm["creates"], books["vmm_creates"])
    p.eq(where, "vmm imported handles", vmm["imported"]["handles"], 0)


def check_run(out, mode):
    p = Problems()
    books = {}
    for path in glob.glob(os.path.join(out, "books-*.json")):
        with open(path) as f:
            b = json.load(f)
        books[b["report"]] = b
    reports = sorted(os.path.basename(x) for x in glob.glob(os.path.join(out, "report-*.json")))
    reports.append("report.json")  # the exit report, written last
    p.true("books", len(books) >= 2, "the soak wrote %d books files" % len(books))
    previous = {}
    for name in reports:
        try:
            with open(os.path.join(out, name)) as f:
                report = json.load(f)
        except (OSError, ValueError) as err:
            p.lines.append("%s: %s" % (name, err))
            continue
        previous = check_always(p, name, report, mode, previous)
        if name in books:
            check_books(p, "%s (%s)" % (name, books[name]["label"]), report, books[name])
    p.true("books", "report.json" in books, "no books for the exit report")
    final = books.get("report.json")
    if final:
        p.eq("report.json", "live entries at exit", final["live"]["entries"], 0)
    return p, len(reports), len(books)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--ops", type=int, default=1000000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--phases", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="0: from the clock (printed)")
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS))
    ap.add_argument("--sanitizer-runtime", default="")
    ap.add_argument("--keep", default="", help="leave the reports and books in this folder")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    failed = 0
    for config in args.config or ["observe", "enforce"]:
        seed = args.seed or int(time.time() * 1000) % 1000000007
        out = tempfile.mkdtemp(prefix="soak-%s-" % config)
        # curesv logs at its default level (warn): a fallback's line is part of its timing
        env = dict(os.environ, CUDA_SIM_DEVICES="2", CURESV_ATTACH=ATTACH, CURESV_REPORT="json",
                   CURESV_REPORT_FILE=os.path.join(out, "report.json"),
                   LD_PRELOAD=" ".join(x for x in (args.sanitizer_runtime,
                                                   os.path.abspath(args.lib)) if x))
        env.update(CONFIGS[config])
        argv = [args.bin, "--ops", str(args.ops), "--threads", str(args.threads), "--phases",
                str(args.phases), "--seed", str(seed), "--out", out]
        start = time.monotonic()
        try:
            run = subprocess.run(argv, env=env, capture_output=True, text=True,
                                 timeout=args.timeout)
            code, text = run.returncode, run.stdout + run.stderr
        except subprocess.TimeoutExpired:
            code, text = "timeout", ""
        took = time.monotonic() - start
        # the reports are checked also when the soak's own checks failed: each says its part
        problems, nreports, nbooks = check_run(out, CONFIGS[config]["CURESV_MODE"]) \
            if code != "timeout" else (None, 0, 0)
        ok = code == 0 and not problems.lines
        summary = run.stdout.strip().splitlines()[-1] if code != "timeout" and \
            run.stdout.strip() else ""
        print("soak %-7s seed=%d %s (%d reports, %d checked exactly) %.1fs: %s" % (
            config, seed, "ok" if ok else "FAILED", nreports, nbooks, took, summary))
        if not ok:
            failed += 1
            if code != 0:
                lines = text.strip().splitlines()
                own = [x for x in lines if not x.startswith("curesv: ")]
                print("  exit %s; the soak's lines (and %d of curesv's, not shown):"
                      % (code, len(lines) - len(own)))
                for line in own[-40:]:
                    print("  " + line)
            for line in (problems.lines if problems else [])[:40]:
                print("  " + line)
            if problems and len(problems.lines) > 40:
                print("  ... %d more" % (len(problems.lines) - 40))
        if args.keep:
            dest = os.path.join(args.keep, config)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(out, dest)
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
