#!/usr/bin/env python3
"""Checks a curesv event trace (CURESV_TRACE) against the JSON report of the same run.

    check_trace.py TRACE REPORT.json        (the format is told by the trace's first bytes)

Chrome traces: the file parses as JSON; every event has the fields Perfetto reads (ph, pid, ts in
microseconds since the epoch, tid for instants, name, args); timestamps never go backwards;
no counter ever goes negative; each counter's last value equals the report's figure (each
reservation's `allocated`, each device's shared pool, orphan tier and total, pinned host bytes)
and no counter is left unexplained; a counter series is "<event name> <arg>", as Perfetto names
its tracks. RMM CSV: RMM's exact header and column formats (and, with CURESV_BACKTRACE, the Frames
column: OBJECT+0xOFFSET or 0xADDRESS frames separated by ';', on allocate rows only); times never
go backwards (but by half an hour or more: the local time at midnight or the end of summer time);
every free matches a live allocation of its size; the bytes left live equal the report's device
totals.

Exit status 0 when all holds; else 1, one line per problem on stderr. Importable: check(path,
report) returns the list of problems.
"""
import json
import re
import sys
import time

RMM_HEADER = "Thread,Time,Action,Pointer,Size,Stream"
FRAMES_HEADER = RMM_HEADER + ",Frames"
# a frame: its object's path (printable ASCII but , ; " \ and space, which read \xNN) and offset
FRAME = r"(?:(?:[!#-+\--:<-\[\]-~]|\\x[0-9a-f]{2})+\+0x[0-9a-f]+|0x[0-9a-f]+)"
FRAMES = re.compile(r"(?:%s(?:;%s)*)?" % (FRAME, FRAME))
INSTANTS = {"refused", "allocation failed", "free failed", "transfer", "reserve", "release",
            "hand-off without transfer",
            "capacity"}


def expected_counters(report):
    """Counter series ("<event name> <arg>", as Perfetto names its tracks) -> the value it must
    end on, from the report (origin attribution)."""
    want = {}
    for r in report["reservations"]:
        key = "device %d %s" % (r["device"], r["name"])
        want[key] = want.get(key, 0) + r["allocated"]
    host = report.get("orphan_host_bytes", 0)
    for r in report["reservations"]:
        host += r["host_allocated"]
    for d in report["devices"]:
        n = d["device"]
        want["device %d (total)" % n] = d["allocated"]
        want["device %d (shared pool)" % n] = d["shared"]["allocated"]
        want["device %d (orphan tier)" % n] = d["orphan_bytes"]
        host += d["shared"]["host_allocated"]
    want["pinned host (total)"] = host
    return want


def is_int(v):
    return type(v) is int


def check_event(i, ev, pid, errors):
    where = "traceEvents[%d]" % i
    if not isinstance(ev, dict):
        errors.append("%s: not an object" % where)
        return False
    ph = ev.get("ph")
    if ph not in ("M", "C", "i"):
        errors.append("%s: ph %r" % (where, ph))
        return False
    if ev.get("pid") != pid:
        errors.append("%s: pid %r, report's %r" % (where, ev.get("pid"), pid))
    if not isinstance(ev.get("name"), str) or not isinstance(ev.get("args"), dict):
        errors.append("%s: name and args are required" % where)
        return False
    if ph == "M":
        if ev["name"] not in ("process_name", "thread_name") or not is_int(ev.get("tid")) or \
                not isinstance(ev["args"].get("name"), str):
            errors.append("%s: bad metadata event %r" % (where, ev))
        return False
    if not isinstance(ev.get("ts"), (int, float)):
        errors.append("%s: no ts" % where)
        return False
    if ph == "C" and (not 1 <= len(ev["args"]) <= 2 or
                      not all(is_int(v) for v in ev["args"].values())):
        errors.append("%s: counter args %r" % (where, ev["args"]))
        return False
    if ph == "i" and (ev.get("s") != "t" or not is_int(ev.get("tid")) or
                      ev["name"] not in INSTANTS or ev.get("cat") != "curesv"):
        errors.append("%s: bad instant event %r" % (where, ev))
    return True


def check_chrome(text, report, errors, final):
    try:
        trace = json.loads(text)
    except ValueError as err:
        errors.append("not JSON: %s" % err)
        return
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        errors.append("no traceEvents array")
        return
    pid = report["pid"]
    final_values, last_ts, final = final, None, {}
    now_us = time.time() * 1e6
    for i, ev in enumerate(trace["traceEvents"]):
        if not check_event(i, ev, pid, errors):
            continue
        ts = ev["ts"]
        if not now_us - 86400e6 < ts < now_us + 60e6:
            errors.append("traceEvents[%d]: ts %r is not microseconds since the epoch" % (i, ts))
        if last_ts is not None and ts < last_ts:
            errors.append("traceEvents[%d]: ts %r before %r" % (i, ts, last_ts))
        last_ts = ts
        if ev["ph"] == "C":
            for key, v in ev["args"].items():
                series = ev["name"] + " " + key
                if v < 0:
                    errors.append("traceEvents[%d]: %r went negative (%d)" % (i, series, v))
                final[series] = v
    other = trace.get("otherData", {})
    if other.get("pid") != pid or other.get("rank") != report.get("rank") or \
            other.get("host") != report.get("host"):
        errors.append("otherData %r disagrees with the report" % other)
    if not final_values:
        return
    want = expected_counters(report)
    for name, v in final.items():
        if name not in want:
            errors.append("counter %r is not in the report" % name)
        elif v != want[name]:
            errors.append("counter %r ends at %d, the report says %d" % (name, v, want[name]))
    for name, v in want.items():
        if name not in final and v != 0:
            errors.append("no counter %r, the report says %d" % (name, v))


RMM_ROW = re.compile(r"^(\d+),(\d\d:\d\d:\d\d\.\d{6}),(allocate|free|allocate failure),"
                     r"(0x[0-9a-f]+|\(nil\)),(\d+),(0|0x[0-9a-f]+)$")


def check_rmm(text, report, errors, final):
    lines = text.split("\n")
    frames = lines[0] == FRAMES_HEADER
    if lines[0] != RMM_HEADER and not frames:
        errors.append("header %r, RMM's is %r" % (lines[0], RMM_HEADER))
    if lines[-1] != "":
        errors.append("the last line is not terminated")
    live, last_us = {}, None
    for n, line in enumerate(lines[1:-1], 2):
        if frames:
            line, _, stack = line.rpartition(",")
            if not FRAMES.fullmatch(stack) or (stack and not line.split(",")[2] == "allocate"):
                errors.append("line %d: Frames %r" % (n, stack))
        m = RMM_ROW.match(line)
        if not m:
            errors.append("line %d: %r is not an RMM row" % (n, line))
            continue
        action, ptr, size = m.group(3), m.group(4), int(m.group(5))
        hms, frac = m.group(2).split(".")
        h, mi, s = (int(x) for x in hms.split(":"))
        us = ((h * 60 + mi) * 60 + s) * 1000000 + int(frac)
        # local time of day: it goes back at midnight and when summer time ends, by far more
        if last_us is not None and 0 < last_us - us < 1800 * 1000000:
            errors.append("line %d: time %s before the row above" % (n, m.group(2)))
        last_us = us
        if action == "allocate failure":
            if ptr != "(nil)":
                errors.append("line %d: a failure names pointer %s" % (n, ptr))
        elif ptr == "(nil)":
            errors.append("line %d: %s of (nil)" % (n, action))
        elif action == "allocate":
            if ptr in live:
                errors.append("line %d: %s allocated while live" % (n, ptr))
            live[ptr] = size
        elif live.pop(ptr, None) != size:
            errors.append("line %d: free of %s (%d bytes) matches no live allocation" %
                          (n, ptr, size))
    device_live = sum(d["allocated"] for d in report["devices"])
    if final and sum(live.values()) != device_live:
        errors.append("the CSV leaves %d bytes live, the report's devices %d" %
                      (sum(live.values()), device_live))


def check(path, report, final=True):
    """The problems found; `final`: also compare the values the trace ends on with the report
    (only meaningful when nothing ran on after the report: a quiescent exit)."""
    errors = []
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        return ["cannot read the trace: %s" % err]
    if text.startswith("{"):
        check_chrome(text, report, errors, final)
    else:
        check_rmm(text, report, errors, final)
    return errors


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2]) as f:
        report = json.load(f)
    errors = check(sys.argv[1], report)
    for e in errors[:40]:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
