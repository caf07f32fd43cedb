#!/usr/bin/env python3
"""Checks scripts/curesv-export --memory-viz on traces made under the shim, with the standard
library alone (PyTorch is not needed; scripts/gpu-check runs PyTorch's own reader on a GPU host):

- the file is a pickle that the viewer's JavaScript unpickler reads (protocol 2 to 4, only the
  opcodes MemoryViz.js handles, no integer past 2^53) and that holds the snapshot schema of
  torch.cuda.memory._snapshot() as torch/cuda/_memory_viz.py and MemoryViz.js read it:
  device_traces[device] of entries with action, addr, size, stream, frames (and time_us), alloc
  entries with category and user_metadata where the format has them; segments with device,
  address, total_size, allocated_size, stream, segment_type and blocks whose sizes add up to the
  segment's (what `stats` asserts);
- replayed as the viewer replays it (allocations matched to frees by address, each within its
  segment), the entries end on exactly the segments, and agree with the run's JSON report;
- Chrome traces (reservations as categories, transfers, releases, two devices) and RMM logs (the
  trace's addresses and threads), a trace cut short, and hostile input: one line, no traceback.

    export.py --lib build/plain/libcuresv.so --bin build/plain/it

Prints one table and "N passed, N failed".
"""
import argparse
import json
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORT = os.path.join(HERE, "..", "..", "scripts", "curesv-export")
HANDOFF_ENV = {"CURESV_CAPACITY": "400K", "CURESV_RESERVATIONS": "scan=100K,pipe=200K",
               "CURESV_ATTACH": "scan=scan,pipe=pipe"}
JS_SAFE = 1 << 53
# The opcodes MemoryViz.js's unpickle() handles; anything else throws "UNKNOWN OPCODE".
JS_OPCODES = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
              "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "APPEND", "APPENDS", "SETITEM",
              "SETITEMS", "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BININT",
              "BININT1", "BININT2", "LONG1", "NONE", "NEWTRUE", "NEWFALSE", "SHORT_BINUNICODE",
              "BINUNICODE", "BINFLOAT", "STOP"}
ACTIONS = {"segment_alloc", "alloc", "free_requested", "free_completed", "segment_free",
           "snapshot"}


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def run_shim(args, argv, env, code=0):
    e = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib), **env)
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)
    expect("%s exit status (%s)" % (os.path.basename(argv[0]), p.stderr.strip()[-200:]),
           p.returncode, code)


def export(trace, out):
    return subprocess.run([EXPORT, "--memory-viz", trace, "-o", out], capture_output=True,
                          text=True, timeout=120)


# ---- what the viewer needs -----------------------------------------------------------------------

def check_pickle(data):
    """What MemoryViz.js's unpickler reads: protocol 2-4, its opcodes, integers it holds exactly."""
    for op, arg, _ in pickletools.genops(data):
        if op.name not in JS_OPCODES:
            raise AssertionError("pickle opcode %s, which MemoryViz.js cannot read" % op.name)
        if op.name == "PROTO" and not 2 <= arg <= 4:
            raise AssertionError("pickle protocol %d (the viewer reads 2 to 4)" % arg)
        if op.name == "LONG1" and not -JS_SAFE < arg < JS_SAFE:
            raise AssertionError("integer %d is past what JavaScript's numbers hold" % arg)


def is_count(v):
    return type(v) is int and 0 <= v < JS_SAFE


def check_entry(e, where):
    for key in ("action", "addr", "size", "stream", "frames"):
        if key not in e:
            raise AssertionError("%s: no %r in %r" % (where, key, e))
    if e["action"] not in ACTIONS:
        raise AssertionError("%s: action %r" % (where, e["action"]))
    for key in ("addr", "size", "stream") + (("time_us",) if "time_us" in e else ()):
        if not is_count(e[key]):
            raise AssertionError("%s: %s is %r" % (where, key, e[key]))
    # _memory_viz.py's _frame_fmt: filename:line:name, strings and an integer
    if not all(type(f.get("filename")) is str and type(f.get("line")) is int and
               type(f.get("name")) is str for f in e["frames"]):
        raise AssertionError("%s: frames %r" % (where, e["frames"]))
    for key in ("category", "user_metadata"):
        if key in e and type(e[key]) is not str:
            raise AssertionError("%s: %s is %r" % (where, key, e[key]))


def check_segment(seg, i):
    for key in ("device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "blocks"):
        if key not in seg or (key != "blocks" and not is_count(seg[key])):
            raise AssertionError("segment %d: %s is %r" % (i, key, seg.get(key)))
    expect("segment %d segment_type" % i, seg["segment_type"],
           "large" if seg["total_size"] > 1 << 20 else "small")
    addr = seg["address"]
    for b in seg["blocks"]:
        for key in ("size", "requested_size", "address", "state", "frames"):
            if key not in b:
                raise AssertionError("segment %d: a block has no %r" % (i, key))
        expect("segment %d: a block's address" % i, b["address"], addr)
        expect("segment %d: a block's state" % i, b["state"], "active_allocated")
        addr += b["size"]
    # what `python -m torch.cuda._memory_viz stats` asserts: the blocks fill the segment
    expect("segment %d: its blocks' sizes" % i, sum(b["size"] for b in seg["blocks"]),
           seg["total_size"])
    expect("segment %d allocated_size" % i,
           sum(b["requested_size"] for b in seg["blocks"]), seg["allocated_size"])


def replay(device, trace):
    """The entries as the viewer walks them: each allocation inside a segment made for it, freed
    once, by address. Returns the live {addr: size} at the end and the counts."""
    segments, live, allocs, frees = {}, {}, 0, 0
    for i, e in enumerate(trace):
        where = "device %d entry %d" % (device, i)
        check_entry(e, where)
        a, act = e["addr"], e["action"]
        if act == "segment_alloc":
            if a in segments:
                raise AssertionError("%s: segment at 0x%x made twice" % (where, a))
            segments[a] = e["size"]
        elif act == "alloc":
            if a in live or segments.get(a) != e["size"]:
                raise AssertionError("%s: alloc 0x%x outside its segment or live" % (where, a))
            live[a] = e["size"]
            allocs += 1
        elif act == "free_requested":
            if live.get(a) != e["size"] or trace[i + 1]["action"] != "free_completed" or \
                    trace[i + 1]["addr"] != a:
                raise AssertionError("%s: free_requested of 0x%x not live or not completed "
                                     "next" % (where, a))
        elif act == "free_completed":
            del live[a]
            frees += 1
        elif act == "segment_free":
            if a in live or segments.pop(a, None) != e["size"]:
                raise AssertionError("%s: segment 0x%x freed while in use or unknown" % (where, a))
    if set(segments) != set(live):
        raise AssertionError("device %d: segments and blocks differ at the end" % device)
    return live, allocs, frees


def validate(path):
    """The snapshot in `path`, checked; returns it."""
    with open(path, "rb") as f:
        data = f.read()
    check_pickle(data)
    snap = pickle.loads(data)
    expect("top-level keys", sorted(snap), ["device_traces", "segments"])
    if not isinstance(snap["device_traces"], list) or not snap["device_traces"]:
        raise AssertionError("device_traces is %r" % snap["device_traces"])
    cats = set()
    ends = {}
    for n, trace in enumerate(snap["device_traces"]):
        live, allocs, frees = replay(n, trace)
        ends[n] = live
        cats |= {e["category"] for e in trace if "category" in e}
        snap.setdefault("_counts", {})[n] = (allocs, frees)
    # MemoryViz.js throws on a snapshot whose categories lack 'unknown' (a typo in its code)
    if cats and "unknown" not in cats:
        raise AssertionError("categories %r without 'unknown'" % sorted(cats))
    at_end = {}
    for i, seg in enumerate(snap["segments"]):
        check_segment(seg, i)
        at_end.setdefault(seg["device"], {})[seg["address"]] = seg["total_size"]
    for n, live in ends.items():
        expect("device %d: the segments are what the entries leave live" % n,
               at_end.get(n, {}), live)
    return snap


def allocs(snap, device=0, key=None):
    return [e for e in snap["device_traces"][device] if e["action"] == "alloc" and
            (key is None or key(e))]


# ---- cases ---------------------------------------------------------------------------------------

def chrome_handoff(args, tmp):
    trace, out, report = (os.path.join(tmp, x) for x in ("h.json", "h.pickle", "h.report.json"))
    run_shim(args, [os.path.join(args.bin, "handoff")],
             dict(HANDOFF_ENV, CURESV_TRACE=trace, CURESV_TRACE_FORMAT="chrome",
                  CURESV_REPORT="json", CURESV_REPORT_FILE=report))
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    expect("summary", p.stdout.strip(), "curesv-export: wrote %s: PyTorch memory snapshot of the "
           "Chrome trace %s: 1 allocation, 1 free, 0 live at the end, on device 0; open it at "
           "https://pytorch.org/memory_viz, or (PyTorch 2.1 or later): python -m "
           "torch.cuda._memory_viz trace_plot %s -o %s.html" % (out, trace, out,
                                                               out[:-len(".pickle")]))
    snap = validate(out)
    a = allocs(snap)
    expect("allocations", [(e["size"], e["category"], e["user_metadata"]) for e in a],
           [(81920, "scan", "reservation scan")])
    expect("the time is the trace's (us since the epoch)", a[0]["time_us"] > 1.6e15, True)
    expect("segments", snap["segments"], [])
    return "1 alloc, category scan"


def rmm_leak(args, tmp):
    """An RMM log keeps the trace's addresses: the leak's segment is at the report's pointer."""
    trace, out, report = (os.path.join(tmp, x) for x in ("l.csv", "l.pickle", "l.report.json"))
    run_shim(args, [os.path.join(args.bin, "exit_status"), "leak", "0", "0"],
             {"CURESV_TRACE": trace, "CURESV_REPORT": "json", "CURESV_REPORT_FILE": report})
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    snap = validate(out)
    with open(report) as f:
        leak = json.load(f)["leaks"]["largest"][0]
    seg = snap["segments"][0]
    expect("the live segment", (seg["address"], seg["total_size"], len(snap["segments"])),
           (int(leak["ptr"], 16), leak["bytes"], 1))
    with open(trace) as f:
        tid = f.read().splitlines()[1].split(",")[0]
    a = allocs(snap)
    expect("alloc metadata, no category", (a[0]["user_metadata"], "category" in a[0]),
           ("thread " + tid, False))
    return "leak at 0x%x" % seg["address"]


def rmm_frames(args, tmp):
    """CURESV_BACKTRACE: each allocation of the RMM log carries its stack's frames, and the leak's
    segment the frames the report names: object and offset, innermost first."""
    trace, out, report = (os.path.join(tmp, x) for x in ("f.csv", "f.pickle", "f.report.json"))
    run_shim(args, [os.path.join(args.bin, "leak_sites")],
             {"CURESV_BACKTRACE": "8", "CURESV_TRACE": trace, "CURESV_REPORT": "json",
              "CURESV_REPORT_FILE": report})
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    snap = validate(out)
    with open(report) as f:
        largest = json.load(f)["leaks"]["largest"]
    a = allocs(snap)
    expect("allocations with frames", sum(1 for e in a if e["frames"]), len(a))
    by_addr = {seg["address"]: seg["blocks"][0]["frames"] for seg in snap["segments"]}
    for leak in largest:
        want = [{"filename": f["object"], "line": 0,
                 "name": "%s+0x%x" % (f["object"].rsplit("/", 1)[-1], f["object_offset"])}
                for f in leak["frames"]]
        expect("the frames of the leak at %s" % leak["ptr"], by_addr.get(int(leak["ptr"], 16)),
               want)
    return "%d allocations, frames of %d leaks as the report's" % (len(a), len(largest))


def chrome_transfer_and_release(args, tmp):
    """Timelines 3 (release while live: the orphan tier) and 4 (transfer): nothing lost."""
    got = []
    for n in ("3", "4"):
        trace, out = os.path.join(tmp, "t%s.json" % n), os.path.join(tmp, "t%s.pickle" % n)
        run_shim(args, [os.path.join(args.bin, "timelines"), n],
                 {"CURESV_CAPACITY": "400K", "CURESV_TRACE": trace,
                  "CURESV_TRACE_FORMAT": "chrome", "CURESV_REPORT": "off"})
        p = export(trace, out)
        expect("timeline %s exit status (%s)" % (n, p.stderr.strip()), p.returncode, 0)
        snap = validate(out)
        expect("timeline %s: allocs and frees" % n, snap["_counts"][0][0], snap["_counts"][0][1])
        # the category is the account an allocation was made in, moved or not
        expect("timeline %s: categories" % n, sorted({e["category"] for e in allocs(snap)}),
               ["(shared pool)", "scan"])
        got.append(snap["_counts"][0][0])
    return "allocs %s" % got


def stress_both_formats(args, tmp):
    """16000 allocations on 4 threads: every one and every free, matching the report."""
    got = []
    for fmt, ext in (("chrome", "json"), ("rmm", "csv")):
        trace, out, report = (os.path.join(tmp, "s." + x) for x in (ext, "pickle", "r.json"))
        run_shim(args, [os.path.join(args.bin, "stress"), "4", "4000"],
                 {"CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": fmt, "CURESV_REPORT": "json",
                  "CURESV_REPORT_FILE": report})
        p = export(trace, out)
        expect("%s exit status (%s)" % (fmt, p.stderr.strip()), p.returncode, 0)
        snap = validate(out)
        with open(report) as f:
            shared = json.load(f)["shared"]
        expect("%s allocs, frees" % fmt, snap["_counts"][0], (shared["allocs"], shared["frees"]))
        got.append(snap["_counts"][0][0])
    return "%d and %d allocs" % tuple(got)


def two_devices(args, tmp):
    trace, out = os.path.join(tmp, "d.json"), os.path.join(tmp, "d.pickle")
    run_shim(args, [os.path.join(args.bin, "streams"), "devices"],
             {"CUDA_SIM_DEVICES": "2", "CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": "chrome",
              "CURESV_REPORT": "off"})
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    snap = validate(out)
    expect("device traces", len(snap["device_traces"]), 2)
    if not allocs(snap, 1):
        raise AssertionError("nothing on device 1")
    return "%d + %d allocs" % (len(allocs(snap, 0)), len(allocs(snap, 1)))


def cut_short(args, tmp):
    trace, out = os.path.join(tmp, "c.json"), os.path.join(tmp, "c.pickle")
    run_shim(args, [os.path.join(args.bin, "stress"), "2", "500"],
             {"CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": "chrome", "CURESV_REPORT": "off"})
    with open(trace) as f:
        text = f.read()
    with open(trace, "w") as f:
        f.write(text[:len(text) // 2])      # killed mid-event: no closing lines
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    if "(cut short)" not in p.stdout:
        raise AssertionError("the summary does not say it was cut short: %r" % p.stdout)
    snap = validate(out)
    return "%d allocs read" % snap["_counts"][0][0]


def rmm_odd_addresses(args, tmp):
    """A cuMemCreate handle (bit 63) and an address written allocated again before its free (a
    writer that waited 100 ms for a free in flight): made-up addresses, nothing lost."""
    trace, out = os.path.join(tmp, "odd.csv"), os.path.join(tmp, "odd.pickle")
    with open(trace, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n"
                "7,23:59:59.999000,allocate,0x8000000000000001,2097152,0\n"
                "7,23:59:59.999500,allocate,0x7f0000200000,4096,0x5583a0\n"
                "8,00:00:00.000100,allocate,0x7f0000200000,4096,0\n"
                "7,00:00:00.000200,free,0x7f0000200000,4096,0x5583a0\n"
                "8,00:00:00.000300,free,0x7f0000200000,4096,0\n"
                "7,00:00:00.000400,allocate failure,(nil),4096,0\n")
    p = export(trace, out)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    snap = validate(out)
    a = allocs(snap)
    expect("allocations", [(e["size"], e["stream"], e["user_metadata"]) for e in a],
           [(2097152, 0, "thread 7"), (4096, 0x5583a0, "thread 7"), (4096, 0, "thread 8")])
    expect("the second life of 0x7f0000200000 has its own address", a[1]["addr"] != a[2]["addr"],
           True)
    expect("the first keeps the trace's", a[1]["addr"], 0x7f0000200000)
    expect("times cross midnight", [e["time_us"] for e in a],
           [86399999000, 86399999500, 86400000100])
    expect("the handle is live at the end", [s["total_size"] for s in snap["segments"]], [2097152])
    return "handle and reuse"


HOSTILE = [
    ("empty", b"", "neither a Chrome trace"),
    ("not UTF-8", b"\xff\xfe\x00", "byte 0 is not UTF-8"),
    ("a JSON array", b"[1, 2]", "neither a Chrome trace"),
    ("traceEvents not a list", b'{"traceEvents": 5}', "without a traceEvents array"),
    ("nested deeply", b'{"traceEvents":' + b"[" * 200000, "nested too deeply"),
    ("a negative counter", b'{"traceEvents":[{"ph":"C","name":"device 0","ts":1,'
     b'"args":{"x":-5,"(total)":-5}}]}', "is not a byte count"),
    ("a boolean counter", b'{"traceEvents":[{"ph":"C","name":"device 0","ts":1,'
     b'"args":{"x":true}}]}', "is not a byte count"),
    ("a NaN time", b'{"traceEvents":[{"ph":"C","name":"device 0","ts":NaN,"args":{"x":1,'
     b'"(total)":1}}]}', "is not a time"),
    ("a fall no allocation holds", b'{"traceEvents":[{"ph":"C","name":"device 0","ts":1,'
     b'"args":{"x":4,"(total)":4}},{"ph":"C","name":"device 0","ts":2,"args":{"x":1,'
     b'"(total)":1}}]}', "x on device 0 falls by 3 bytes, which no live allocation of it holds"),
    ("a counter of no device", b'{"traceEvents":[{"ph":"C","name":"dev\\nice 0","ts":2,'
     b'"args":{}}]}', "not a curesv device counter"),
    ("counters that do not add up", b'{"traceEvents":[{"ph":"C","name":"device 0","ts":1,'
     b'"args":{"x":5,"(total)":9}}]}', "not one allocation, free or transfer"),
    ("an RMM time", b"Thread,Time,Action,Pointer,Size,Stream\n1,25:00:00.000000,allocate,0x10,"
     b"4,0\n", "line 2: time 25:00:00.000000 is not HH:MM:SS.ffffff"),
    ("an RMM free of nothing", b"Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000000,free,"
     b"0x10,4,0\n", "line 2: free of 0x10, which no earlier row allocated"),
    ("an RMM row of 5 columns", b"Thread,Time,Action,Pointer,Size,Stream\n1,2,3,4,5\n",
     "line 2: 5 columns, not 6"),
    ("an RMM action with a newline", b"Thread,Time,Action,Pointer,Size,Stream\n"
     b"1,00:00:00.000000,alloc\x1bate,0x10,4,0\n", "action alloc\\x1bate is not"),
    ("RMM frames without their column", b"Thread,Time,Action,Pointer,Size,Stream\n"
     b"1,00:00:00.000000,allocate,0x10,4,0,/bin/x+0x10\n", "line 2: 7 columns, not 6"),
    ("RMM frames not OBJECT+0xOFFSET", b"Thread,Time,Action,Pointer,Size,Stream,Frames\n"
     b"1,00:00:00.000000,allocate,0x10,4,0,/bin/x+10;/lib/y+0x2\n",
     "line 2: frames /bin/x+10;/lib/y+0x2 are not OBJECT+0xOFFSET"),
    ("RMM frames with a raw space", b"Thread,Time,Action,Pointer,Size,Stream,Frames\n"
     b"1,00:00:00.000000,allocate,0x10,4,0,/my dir/x+0x10\n", "are not OBJECT+0xOFFSET"),
]


def hostile_input(args, tmp):
    out = os.path.join(tmp, "x.pickle")
    for name, data, line in HOSTILE:
        path = os.path.join(tmp, "bad")
        with open(path, "wb") as f:
            f.write(data)
        p = export(path, out)
        lines = p.stderr.strip().splitlines()
        if p.returncode != 1 or len(lines) != 1 or line not in lines[0] or "Traceback" in \
                p.stderr or not lines[0].startswith("curesv-export: %s: " % path):
            raise AssertionError("%s: exit %d, stderr %r" % (name, p.returncode, p.stderr[-400:]))
    for argv, code, line in (
            ([os.path.join(tmp, "none.json"), "-o", out], 1, "none.json: No such file"),
            ([os.path.join(tmp, "bad"), "-o", os.path.join(tmp, "no", "x.pickle")], 1, None),
            ([os.path.join(tmp, "bad")], 2, "say which format to write: --memory-viz"),
            (["--memory-viz"], 2, "the following arguments are required: trace")):
        if line is None:    # a good trace, an output in a missing folder
            with open(argv[0], "wb") as f:
                f.write(b"Thread,Time,Action,Pointer,Size,Stream\n")
            line = "cannot write %s: No such file or directory" % argv[2]
            argv = ["--memory-viz"] + argv
        elif code == 1:
            argv = ["--memory-viz"] + argv
        p = subprocess.run([EXPORT] + argv, capture_output=True, text=True, timeout=60)
        lines = p.stderr.strip().splitlines()
        if p.returncode != code or len(lines) != 1 or line not in lines[0] or \
                "Traceback" in p.stderr:
            raise AssertionError("%r: exit %d, stderr %r" % (argv, p.returncode, p.stderr))
    return "%d bad inputs, 4 bad uses: one line each" % len(HOSTILE)


CASES = [
    ("curesv-export: Chrome trace, reservations as categories", chrome_handoff),
    ("curesv-export: RMM log, the leak's segment at its address", rmm_leak),
    ("curesv-export: RMM log with CURESV_BACKTRACE, frames as the report's", rmm_frames),
    ("curesv-export: transfer and release (Chrome)", chrome_transfer_and_release),
    ("curesv-export: 16000 allocations, both formats, as the report", stress_both_formats),
    ("curesv-export: two devices", two_devices),
    ("curesv-export: RMM handles and addresses reused", rmm_odd_addresses),
    ("curesv-export: a trace cut short", cut_short),
    ("curesv-export: hostile input and bad use", hostile_input),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    failed, rows = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in CASES:
            sub = os.path.join(tmp, fn.__name__)
            os.makedirs(sub)
            try:
                rows.append((name, "pass", fn(args, sub)))
            except (AssertionError, OSError, ValueError, KeyError, IndexError,
                    subprocess.SubprocessError, pickle.UnpicklingError) as err:
                failed += 1
                rows.append((name, "FAIL", str(err)[-600:]))
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print("%-*s  %-6s %s" % (width, r[0], r[1], r[2]))
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
