#!/usr/bin/env python3
"""Checks the two scripts that read curesv's output, on output made under the shim:

  scripts/curesv-plot    renders Chrome and RMM traces to SVG and PNG (valid files, the panels
                         and marks expected), reads a trace cut short, names a bad input in one
                         line, says in one line that gnuplot is missing, runs nothing that
                         names in a trace hold (newlines, quotes, backquotes, macros), and draws
                         pipeline.c's trace to be read at a glance (a panel per account, budget
                         and capacity styles apart, refusals counted, time from the first
                         allocation, the program in the title);
  scripts/curesv-merge   joins the reports of two processes started as torchrun starts them
                         (RANK=0 and 1, report-%r.json, trace-%r.json), as text and --json, and
                         names a malformed and a truncated report in one line each;
  both                   give hostile input (numbers of 400 digits, deep nesting, invalid UTF-8,
                         names holding newlines, a missing output folder, bad options) one line
                         and the exit status --help lists, and print every name escaped.

    tools.py --lib build/plain/libcuresv.so --bin build/plain/it

Prints one table and "N passed, N failed".
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
PLOT = os.path.join(SCRIPTS, "curesv-plot")
MERGE = os.path.join(SCRIPTS, "curesv-merge")
LAUNCHER = os.path.join(SCRIPTS, "curesv")
HANDOFF_ENV = {"CURESV_CAPACITY": "400K", "CURESV_RESERVATIONS": "scan=100K,pipe=200K",
               "CURESV_ATTACH": "scan=scan,pipe=pipe"}


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def run_shim(args, argv, env, code=0, executable=None):
    e = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib), **env)
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120,
                       executable=executable)
    expect("%s exit status (%s)" % (os.path.basename(argv[0]), p.stderr.strip()[-200:]),
           p.returncode, code)
    return p


def run_script(argv, env=None, cwd=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=dict(os.environ, **(env or {})))


def one_line(p, want_code, contains):
    """A script that failed as it should: the exit status, one line on stderr, no traceback."""
    expect("exit status", p.returncode, want_code)
    lines = p.stderr.strip().splitlines()
    if len(lines) != 1 or contains not in lines[0] or "Traceback" in p.stderr:
        raise AssertionError("want one line with %r, got %r" % (contains, p.stderr))


# ---- curesv-plot -----------------------------------------------------------------------------------

def svg_texts(path):
    root = ET.parse(path).getroot()
    expect("SVG root", root.tag, "{http://www.w3.org/2000/svg}svg")
    return {"".join(t.itertext()).strip() for t in root.iter("{http://www.w3.org/2000/svg}text")}


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    expect("PNG signature", head[:8], b"\x89PNG\r\n\x1a\n")
    expect("PNG first chunk", head[12:16], b"IHDR")
    return struct.unpack(">II", head[16:24])


def panel_height(panels):
    """The height curesv-plot gives an image of this many panels (its TOP, BOTTOM, KEY_ROW)."""
    return 58 + 52 + panels * (max(150, 560 // panels) + 24)


def plot_chrome(args, tmp):
    trace = os.path.join(tmp, "tl4.json")
    run_shim(args, [os.path.join(args.bin, "timelines"), "4"],
             {"CURESV_CAPACITY": "400K", "CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": "chrome",
              "CURESV_REPORT": "off"})
    svg = os.path.join(tmp, "tl4.svg")
    p = run_script([PLOT, trace, "-o", svg])
    expect("curesv-plot exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    panels = ["device 0 total", "scan", "pipe", "(shared pool)"]
    expect("summary", p.stdout.strip(), "curesv-plot: wrote %s: 4 panels (%s), 0 refusals" %
           (svg, ", ".join(panels)))
    texts = svg_texts(svg)
    for want in ["device 0 total: live, peak 80 KiB", "capacity 400 KiB", "scan: live, peak 80 KiB",
                 "pipe: live, peak 80 KiB", "budget 100 KiB", "budget 200 KiB",
                 "(shared pool): live, peak 1 B", "budget up to 400 KiB, off the scale", "KiB",
                 "time since the first allocation (ms)"]:
        if want not in texts:
            raise AssertionError("the SVG has no %r (has %r)" % (want, sorted(texts)))
    if not any(t.startswith("timelines (pid ") for t in texts):
        raise AssertionError("no title naming the program: %r" % sorted(texts))
    png = os.path.join(tmp, "tl4.png")
    p = run_script([PLOT, trace, "-o", png])
    expect("curesv-plot exit status", p.returncode, 0)
    expect("PNG size", png_size(png), (1200, panel_height(4)))
    return "4 panels"


def plot_refusals_and_rmm(args, tmp):
    env = dict(HANDOFF_ENV, CURESV_RESERVATIONS="scan=64K,pipe=200K", CURESV_MODE="enforce",
               CURESV_REPORT="off")
    chrome, csv = os.path.join(tmp, "deny.json"), os.path.join(tmp, "deny.csv")
    run_shim(args, [os.path.join(args.bin, "handoff")],
             dict(env, CURESV_TRACE=chrome, CURESV_TRACE_FORMAT="chrome"), code=1)
    run_shim(args, [os.path.join(args.bin, "handoff")], dict(env, CURESV_TRACE=csv), code=1)
    p = run_script([PLOT, chrome, "-o", os.path.join(tmp, "deny.svg")])
    expect("exit status", p.returncode, 0)
    if not p.stdout.rstrip().endswith(", 1 refusal"):
        raise AssertionError("the refusal is not marked: %r" % p.stdout)
    if "1 refused (at live + asked)" not in svg_texts(os.path.join(tmp, "deny.svg")):
        raise AssertionError("no refusal in the SVG's keys")
    # an RMM log: the total and the "allocate failure" row
    stress = os.path.join(tmp, "stress.csv")
    run_shim(args, [os.path.join(args.bin, "stress"), "4", "2000"],
             {"CURESV_TRACE": stress, "CURESV_REPORT": "off"})
    with open(csv) as f:
        failure = f.read().splitlines()[1].split(",")
    expect("the refusal's row", failure[2:5], ["allocate failure", "(nil)", str(80 * 1024)])
    with open(stress) as f:
        last = f.read().splitlines()[-1].split(",")
    with open(stress, "a") as f:  # the refusal once more, at the end of the stress run
        f.write(",".join(last[:2] + failure[2:]) + "\n")
    out = os.path.join(tmp, "stress.png")
    p = run_script([PLOT, stress, "-o", out])
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    expect("summary", p.stdout.strip(), "curesv-plot: wrote %s: 1 panel (all devices), 1 refusal"
           % out)
    expect("PNG size", png_size(out), (1200, panel_height(1)))
    return "marks in both formats"


def load_plot_module():
    loader = importlib.machinery.SourceFileLoader("curesv_plot", PLOT)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


PIPELINE = ["--mode", "enforce", "--capacity", "16M", "--reserve", "loader=12K", "--reserve",
            "producer=1M", "--reserve", "consumer=4M", "--attach", "loader=loader", "--attach",
            "producer=producer", "--attach", "consumer=consumer"]


def plot_at_a_glance(args, tmp):
    """Three budgets from 12 KiB to 4 MiB, refusals bunched in time, reservations made 5 ms
    before the first allocation: each account in a panel of its own scale, budgets and the
    capacity told apart, refusals counted, time from the first allocation, the program named."""
    trace = os.path.join(tmp, "pipeline.json")
    p = subprocess.run([LAUNCHER, "--lib", args.lib] + PIPELINE +
                       ["--trace", trace, "--trace-format", "chrome", "--no-report", "--",
                        os.path.join(args.bin, "pipeline")],
                       capture_output=True, text=True, timeout=120)
    expect("pipeline exit status (%s)" % p.stderr, p.returncode, 0)
    refused = int(p.stdout.split()[3])          # "pipeline: N granted, M failed"
    svg = os.path.join(tmp, "pipeline.svg")
    p = run_script([PLOT, trace, "-o", svg])
    expect("exit status (%s)" % p.stderr, p.returncode, 0)
    expect("summary", p.stdout.strip(), "curesv-plot: wrote %s: 5 panels (device 0 total, loader, "
           "producer, consumer, (shared pool)), %d refusals" % (svg, refused))
    texts = svg_texts(svg)
    for want in ("loader: live, peak 12 KiB", "budget 12 KiB", "budget 1 MiB", "budget 4 MiB",
                 "capacity 16 MiB", "5 refused (at live + asked)", "\u00d75",
                 "(shared pool): live, peak 256 KiB", "time since the first allocation (ms)"):
        if want not in texts:
            raise AssertionError("the SVG has no %r (has %r)" % (want, sorted(texts)))
    if not any(t.startswith("pipeline (pid ") for t in texts):
        raise AssertionError("no title naming the program: %r" % sorted(texts))
    # the script gnuplot runs: styles, and where time starts
    plot = load_plot_module()
    data = plot.Plot()
    with open(trace) as f:
        plot.read_chrome(f.read(), data)
    folder = os.path.join(tmp, "script")
    os.makedirs(folder)
    script = plot.gnuplot_script(data, "x.svg", folder)
    for line in script.split("\n"):
        for entry in line.split(", \\"):
            if "title 'budget " in entry and plot.BUDGET not in entry or \
                    "title 'capacity " in entry and plot.CAPACITY not in entry:
                raise AssertionError("a budget or capacity drawn in the other's style: %r" % entry)
    if plot.BUDGET == plot.CAPACITY:
        raise AssertionError("budgets and capacity share a style")
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    stamps = [e["ts"] for e in events if "ts" in e]
    first_alloc = min(e["ts"] for e in events if e.get("ph") == "C" and any(e["args"].values()))
    if first_alloc - min(stamps) < 4000:
        raise AssertionError("the reservations were made only %.1f ms before the first allocation"
                             % ((first_alloc - min(stamps)) / 1000))
    starts = []
    for name in os.listdir(folder):
        if name.startswith("live"):
            with open(os.path.join(folder, name)) as f:
                rows = [tuple(map(float, r.split())) for r in f if r.strip()]
            starts += [t for t, v in rows if v != 0][:1]
    expect("where the first allocation is drawn (ms)", min(starts), 0.0)
    png = os.path.join(tmp, "pipeline.png")
    p = run_script([PLOT, trace, "-o", png])
    expect("PNG size", png_size(png), (1200, panel_height(5)))
    return "5 panels, %d refusals" % refused


def plot_cut_short_and_bad_input(args, tmp):
    trace = os.path.join(tmp, "cut.json")
    run_shim(args, [os.path.join(args.bin, "timelines"), "3"],
             {"CURESV_CAPACITY": "400K", "CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": "chrome",
              "CURESV_REPORT": "off"})
    with open(trace) as f:
        text = f.read()
    with open(trace, "w") as f:
        f.write(text[:text.rindex("]") - 40])  # killed mid-event: no closing lines
    p = run_script([PLOT, trace, "-o", os.path.join(tmp, "cut.svg")])
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    junk = os.path.join(tmp, "junk.txt")
    with open(junk, "w") as f:
        f.write("not a trace\n")
    one_line(run_script([PLOT, junk, "-o", os.path.join(tmp, "junk.svg")]), 1,
             "junk.txt: neither a Chrome trace nor an RMM log")
    one_line(run_script([PLOT, os.path.join(tmp, "none.json")]), 1, "none.json: No such file")
    one_line(run_script([PLOT, trace, "-o", os.path.join(tmp, "x.jpg")]), 2,
             "the output must end in .png or .svg")
    return "3 bad inputs named"


def plot_without_gnuplot(args, tmp):
    bare = os.path.join(tmp, "bin")
    os.makedirs(bare, exist_ok=True)
    os.symlink(sys.executable, os.path.join(bare, "python3"))
    p = run_script([sys.executable, PLOT, os.path.join(tmp, "tl4.json")], {"PATH": bare})
    one_line(p, 3, "curesv-plot: gnuplot not found; install it (Debian/Ubuntu: apt-get install "
             "gnuplot-nox)")
    return "one line"


# Each would run `touch pwned-...` (in gnuplot's folder or the caller's) if it reached gnuplot's
# command language, as it did when labels were only quoted: a newline or carriage return ends
# the string's line, a backquote or a shell's $( ) runs a command, '@' expands a macro.
HOSTILE = ["\nsystem('touch pwned-nl')\n#", "\rsystem('touch pwned-cr')\r#",
           "\"\nsystem('touch pwned-dq')\n#", "'\nsystem('touch pwned-sq')\n#",
           "\\\nsystem('touch pwned-bs')\n#", "`touch pwned-bq`", "$(touch pwned-sh)",
           "@GPVAL_PWD", "x\u2028system('touch pwned-ls')", "\x1b[2J\u009b"]


def hostile_trace(path, payload):
    """A Chrome trace whose every name holds payload: the program's name, a device counter's
    group and key, a reservation, a refusal's account."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "p" + payload}},
          {"ph": "i", "name": "capacity", "ts": 1000, "args": {"device": 0, "capacity": 4096}},
          {"ph": "i", "name": "reserve", "ts": 1000,
           "args": {"reservation": "r" + payload, "device": 0, "size": 2048}},
          {"ph": "C", "name": "device 0", "ts": 1001,
           "args": {"r" + payload: 1024, "(total)": 1024}},
          {"ph": "C", "name": "device 1" + payload, "ts": 1002, "args": {"k" + payload: 8}},
          {"ph": "i", "name": "refused", "ts": 1003,
           "args": {"account": "r" + payload, "device": 0, "bytes": 4096}}]
    with open(path, "w") as f:
        json.dump({"traceEvents": ev}, f)


def gnuplot_label(text):
    """text as curesv-plot writes it into a label: characters off its list as \\xNN."""
    ok = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.,:;-+=()[]<>/|!?#*")
    return "".join(c if c in ok else "".join("\\x%02x" % b for b in c.encode()) for c in text)


def plot_hostile_names(args, tmp):
    # the traced program's own name (argv[0], as `exec -a` sets it), through the shim
    argv0 = "handoff" + HOSTILE[0]
    trace = os.path.join(tmp, "argv0.json")
    run_shim(args, [argv0], {"CURESV_TRACE": trace, "CURESV_TRACE_FORMAT": "chrome",
                             "CURESV_REPORT": "off", **HANDOFF_ENV},
             executable=os.path.join(args.bin, "handoff"))
    cases = [(trace, [argv0], ["-o", "argv0.svg"])]
    for k, payload in enumerate(HOSTILE):
        path = os.path.join(tmp, "hostile%d.json" % k)
        hostile_trace(path, payload)
        cases.append((path, ["r" + payload, "t" + payload],
                      ["-o", "hostile%d.svg" % k, "--title", "t" + payload]))
    runs = [run_script([PLOT, path] + opts, cwd=tmp) for path, _, opts in cases]
    ran = [f for f in os.listdir(tmp) if f.startswith("pwned")]
    if ran:
        raise AssertionError("a name ran a command: %r" % ran)
    for p, (path, names, opts) in zip(runs, cases):
        expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
        if p.stdout.count("\n") != 1 or p.stderr:  # U+2028 is printed as it is, as curesv does
            raise AssertionError("want one line, got %r %r" % (p.stdout, p.stderr))
        texts = " ".join(svg_texts(os.path.join(tmp, opts[1])))
        for name in names:
            if gnuplot_label(name) not in texts:
                raise AssertionError("no %r in the SVG's texts %r" % (gnuplot_label(name), texts))
    return "%d traces, nothing ran" % len(cases)


def plot_hostile_input(args, tmp):
    """Input no curesv wrote: one line each, the status --help gives it, no traceback."""
    with open(os.path.join(tmp, "..", "plot_chrome", "tl4.json")) as f:
        good = f.read()
    event = '{"ph":"C","name":"device 0","pid":1,"ts":%d,"args":{"scan":%d,"(total)":%d}}'
    many = ",\n".join(event % (1000 + i, i, i) for i in range(6000))
    cases = [
        ("big.json", good.replace('"size":102400', '"size":' + "9" * 400), 1,
         "big.json: a number of 400 digits (curesv writes at most 20)"),
        ("deep.json", '{"traceEvents":[' + "[" * 100000 + "]" * 100000 + "]}", 1,
         "deep.json: JSON nested too deeply"),
        ("nan.json", good.replace('"size":102400', '"size":NaN'), 1,
         "nan.json: NaN is not a number curesv writes"),
        ("bool.json", good.replace('"size":102400', '"size":true'), 1,
         "bool.json: event 7: 'size' is not a number of bytes"),
        ("row.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,2\n1,00:00:00.000001,free,0x1,1,0\n",
         1, "row.csv: line 2: 2 columns, not the 6 of 'Thread,Time,Action,Pointer,Size,Stream'"),
    ]
    for name, text, code, line in cases:
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
        one_line(run_script([PLOT, os.path.join(tmp, name), "-o", os.path.join(tmp, "x.png")]),
                 code, line)
    one_line(run_script([PLOT, os.path.join(tmp, "big.json"), "-o", "/nonexistent/dir/x.png"]),
             4, "-o /nonexistent/dir/x.png: no folder '/nonexistent/dir' to write it in")
    one_line(run_script([PLOT, "--bogus", "t.json"]), 2, "unrecognized arguments: --bogus")
    # past its size limit (1 GiB; 1000 bytes here) a trace is refused before it is read whole
    plot = load_plot_module()
    plot.MAX_TRACE = 1000
    try:
        plot.read_trace("/dev/zero")
        raise AssertionError("/dev/zero was read")
    except plot.Failed as err:
        expect("status", err.status, 1)
        expect("line", str(err), "/dev/zero: longer than 0 MiB; plot a part of it (head -c 0M "
               "/dev/zero > part: a trace cut short is read up to its last complete event)")
    # bytes that are not UTF-8 in a name, and a trace damaged in the middle: read up to the hole
    before = ('{"traceEvents":[\n' + many[:len(many) // 10]).replace('"scan"', '"sc\xff\xfean"', 1)
    with open(os.path.join(tmp, "hole.json"), "wb") as f:
        f.write((before + "\x00" * 64 + many[len(many) // 10:]).encode("latin-1"))
    p = run_script([PLOT, os.path.join(tmp, "hole.json"), "-o", os.path.join(tmp, "hole.svg")])
    expect("exit status (%s)" % p.stderr, p.returncode, 0)
    complete = before[:before.rindex(",\n") + 2]     # the events before the hole, whole
    if not p.stdout.endswith("; the trace was cut short after event %d (byte %d)\n" % (
            complete.count(",\n"), len(complete.encode("latin-1")))):
        raise AssertionError("where the trace stopped: %r" % p.stdout)
    if "sc\\xff\\xfean" not in p.stdout or "sc\\xff\\xfean: " not in " ".join(svg_texts(
            os.path.join(tmp, "hole.svg"))):
        raise AssertionError("the name's bytes are not escaped: %r" % p.stdout)
    return "%d bad inputs, one line each" % (len(cases) + 3)


def skipped_alone(p, contains):
    """curesv-merge given one bad report: it is named, then nothing could be read (status 2)."""
    expect("exit status", p.returncode, 2)
    lines = p.stderr.split("\n")
    if len(lines) != 3 or contains not in lines[0] or "Traceback" in p.stderr or \
            lines[1] != "curesv-merge: no report could be read":
        raise AssertionError("want a line with %r, then 'no report', got %r" % (contains, p.stderr))


def merge_hostile_input(args, tmp):
    good = torchrun_pair(args, tmp)[0]
    with open(good) as f:
        report = json.load(f)
    forged = json.loads(json.dumps(report))
    forged["host"] = "n1\nforged line"
    forged["reservations"][0]["name"] = "scan\nnode07 0 pipe 9 9 9 9 9\x1b[2J\ud800"
    cases = [("big.json", json.dumps(report).replace('"peak": 81920', '"peak": ' + "9" * 400, 1),
              "big.json: a number of 400 digits (curesv writes at most 20); skipped"),
             ("deep.json", '{"curesv":' + "[" * 100000 + "]" * 100000 + "}",
              "deep.json: JSON nested too deeply: not a curesv report; skipped"),
             ("neg.json", json.dumps(dict(report, pid=-5)),
              "neg.json: 'pid' is -5, not from 1 to 9223372036854775807; skipped")]
    paths = []
    for name, text, line in cases:
        paths.append(os.path.join(tmp, name))
        with open(paths[-1], "w") as f:
            f.write(text)
        skipped_alone(run_script([MERGE, paths[-1]]), line)
    with open(os.path.join(tmp, "huge.json"), "wb") as f:
        f.truncate(65 << 20)                    # sparse: 65 MiB of NUL bytes, written at once
    skipped_alone(run_script([MERGE, os.path.join(tmp, "huge.json")]),
                  "huge.json: longer than 64 MiB: not a curesv report; skipped")
    skipped_alone(run_script([MERGE, "/dev/zero"]),
                  "/dev/zero: longer than 64 MiB: not a curesv report; skipped")
    with open(os.path.join(tmp, "bad8.json"), "wb") as f:
        f.write(json.dumps(report).replace('"curesv"', '"cur\xffesv"').encode("latin-1"))
    skipped_alone(run_script([MERGE, os.path.join(tmp, "bad8.json")]), "not UTF-8 text (byte ")
    p = run_script([MERGE, good] + paths)
    expect("exit status with some skipped", p.returncode, 1)
    expect("stderr lines", len(p.stderr.splitlines()), 3)
    one_line(run_script([MERGE, "--bogus", good]), 3, "unrecognized arguments: --bogus")
    with open(os.path.join(tmp, "forged.json"), "w") as f:
        json.dump(forged, f)
    p = run_script([MERGE, os.path.join(tmp, "forged.json")])
    expect("exit status (%s)" % p.stderr, p.returncode, 0)
    lines = p.stdout.split("\n")
    expect("lines", len(lines), 6 + 4 + 1 + 1)    # 4 accounts, 1 process, the last newline
    if "scan\\nnode07 0 pipe 9 9 9 9 9\\x1b[2J\\xed\\xa0\\x80" not in p.stdout or \
            "n1\\nforged line" not in lines[0]:
        raise AssertionError("names not escaped: %r" % p.stdout)
    p = run_script([MERGE, "--json", os.path.join(tmp, "forged.json")])
    names = {g["account"] for g in json.loads(p.stdout)["groups"]}
    if "scan\nnode07 0 pipe 9 9 9 9 9\x1b[2J\ufffd" not in names:
        raise AssertionError("--json names: %r" % names)
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([MERGE, good], stdout=full, stderr=subprocess.PIPE, text=True)
        one_line(p, 4, "cannot write the output: No space left on device")
    return "%d bad inputs, names escaped" % (len(cases) + 4)


# ---- curesv-merge -----------------------------------------------------------------------------------

def torchrun_pair(args, tmp):
    """Two processes started as torchrun starts its workers (RANK, LOCAL_RANK, WORLD_SIZE)."""
    for rank in (0, 1):
        env = dict(HANDOFF_ENV, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", CURESV_REPORT="json",
                   CURESV_REPORT_FILE=os.path.join(tmp, "report-%r.json"),
                   CURESV_TRACE=os.path.join(tmp, "trace-%r-%h.json"),
                   CURESV_TRACE_FORMAT="chrome")
        run_shim(args, [os.path.join(args.bin, "handoff"), str(80 * 1024 + rank * 4096)], env)
    return [os.path.join(tmp, "report-%d.json" % r) for r in (0, 1)]


def merge_two_ranks(args, tmp):
    reports = torchrun_pair(args, tmp)
    host = None
    for rank, path in enumerate(reports):
        with open(path) as f:
            report = json.load(f)
        expect("rank", report["rank"], rank)
        host = report["host"]
        if not os.path.exists(os.path.join(tmp, "trace-%d-%s.json" % (rank, host))):
            raise AssertionError("no trace-%d-%s.json" % (rank, host))
    p = run_script([MERGE, "--json"] + reports)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    merged = json.loads(p.stdout)
    groups = {(g["host"], g["device"], g["account"]): g for g in merged["groups"]}
    expect("groups", sorted(groups), sorted((host, 0, a) for a in
                                            ("scan", "pipe", "(shared pool)", "(device total)")))
    scan = groups[(host, 0, "scan")]
    for key, want in (("processes", 2), ("allocs", 2), ("frees", 2), ("cross_thread_frees", 2),
                      ("denied", 0), ("live_at_exit", 0), ("peak_max", 86016),
                      ("reservation", "scan")):
        expect("scan " + key, scan[key], want)
    expect("scan peaks", [(x["rank"], x["peak"]) for x in scan["peaks"]], [(0, 81920), (1, 86016)])
    expect("shared reservation", groups[(host, 0, "(shared pool)")]["reservation"], None)
    expect("device total peak", groups[(host, 0, "(device total)")]["peak_max"], 86016)
    expect("ranks", [x["rank"] for x in merged["processes"]], [0, 1])
    p = run_script([MERGE] + reports)
    expect("exit status", p.returncode, 0)
    lines = p.stdout.splitlines()
    expect("first line", lines[0], "curesv-merge: 2 reports (ranks 0, 1) from 1 host (%s)" % host)
    row = [x for x in lines if x.split()[2:3] == ["scan"]]
    if len(row) != 1 or row[0].split()[3:8] != ["2", "2", "2", "2", "0"] or \
            not row[0].endswith("r0:80 KiB r1:84 KiB"):
        raise AssertionError("scan row: %r" % row)
    expect("last line", lines[-1], "curesv-merge: 0 leaks (0 B), 2 cross-thread frees, 0 refusals "
           "in all")
    return "2 ranks"


def orphan_allocs(cycles):
    """The allocations orphans.c CYCLES makes (tests/integration/run.py: orphan_counts)."""
    return 3 * cycles + len(range(0, cycles, 4)) + len(range(0, cycles, 5))


def merge_orphan_tier(args, tmp):
    """Two ranks that release reservations with buffers live, in more cycles than there are
    slots: the orphan tier is a row, and each device total's allocations equal its frees at 0 B
    live, in --json and in the text."""
    reports, cycles = [], (300, 40)
    for rank, n in enumerate(cycles):
        reports.append(os.path.join(tmp, "report-%d.json" % rank))
        run_shim(args, [os.path.join(args.bin, "orphans"), str(n)],
                 {"RANK": str(rank), "CURESV_CAPACITY": "64M", "CURESV_REPORT": "json",
                  "CURESV_REPORT_FILE": reports[-1]})
    orphan_frees = 0
    for path in reports:
        with open(path) as f:
            orphan_frees += json.load(f)["devices"][0]["orphan"]["frees"]
    p = run_script([MERGE, "--json"] + reports)
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    groups = {g["account"]: g for g in json.loads(p.stdout)["groups"] if g["device"] == 0}
    allocs = sum(orphan_allocs(n) for n in cycles)
    total = groups["(device total)"]
    for key, want in (("allocs", allocs), ("frees", allocs), ("live_at_exit", 0)):
        expect("device total " + key, total[key], want)
    orphan = groups["(orphan tier)"]
    for key, want in (("allocs", 0), ("frees", orphan_frees), ("processes", 2),
                      ("reservation", None), ("live_at_exit", 0)):
        expect("orphan tier " + key, orphan[key], want)
    expect("rows summed", sum(g["frees"] for a, g in groups.items() if a != "(device total)"),
           allocs)
    p = run_script([MERGE] + reports)
    rows = {}
    for line in p.stdout.splitlines()[2:]:
        if line[13:19].strip() == "0":  # host (12), device (6), account (20), then the counts
            rows[line[21:41].rstrip()] = line[41:].split()
    text_total, text_orphan = rows.get("(device total)"), rows.get("(orphan tier)")
    if not text_total or text_total[1:3] != [str(allocs)] * 2:
        raise AssertionError("device total row (procs, allocs, frees...): %r" % text_total)
    if not text_orphan or text_orphan[:3] != ["2", "0", str(orphan_frees)] or \
            text_orphan[-2:] != ["-", "-"]:
        raise AssertionError("orphan tier row (procs, allocs, frees... peaks): %r" % text_orphan)
    return "%d allocations, %d frees" % (allocs, total["frees"])


def merge_caller_attribution(args, tmp):
    """Under CURESV_ATTRIBUTION=caller the freeing reservation reads below 0 (the bug curesv
    shows): such a report is merged, not skipped."""
    path = os.path.join(tmp, "caller.json")
    run_shim(args, [os.path.join(args.bin, "handoff")],
             dict(HANDOFF_ENV, CURESV_ATTRIBUTION="caller", CURESV_REPORT="json",
                  CURESV_REPORT_FILE=path))
    p = run_script([MERGE, "--json", path])
    expect("exit status (%s)" % p.stderr.strip(), p.returncode, 0)
    groups = {g["account"]: g for g in json.loads(p.stdout)["groups"]}
    expect("pipe live at exit", groups["pipe"]["live_at_exit"], -80 * 1024)
    expect("scan live at exit", groups["scan"]["live_at_exit"], 80 * 1024)
    return "pipe at -80 KiB"


def merge_skips_bad_inputs(args, tmp):
    good = torchrun_pair(args, os.path.join(tmp))
    cut = os.path.join(tmp, "cut.json")
    with open(good[1]) as f:
        text = f.read()
    with open(cut, "w") as f:
        f.write(text[:len(text) // 2])
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump({"curesv": "0.1.0", "pid": 7, "reservations": "none"}, f)
    p = run_script([MERGE, good[0], cut, bad])
    expect("exit status", p.returncode, 1)
    lines = p.stderr.strip().splitlines()
    if len(lines) != 2 or "Traceback" in p.stderr:
        raise AssertionError("want one line per bad input: %r" % p.stderr)
    if not (lines[0].startswith("curesv-merge: %s: not JSON (cut short?): " % cut) and
            lines[0].endswith("; skipped")):
        raise AssertionError(lines[0])
    expect("bad line", lines[1], "curesv-merge: %s: no 'leaks'; skipped" % bad)
    if not p.stdout.startswith("curesv-merge: 1 report (ranks 0) from 1 host"):
        raise AssertionError("the good report is not merged: %r" % p.stdout[:200])
    p = run_script([MERGE, cut])
    expect("exit status with nothing merged", p.returncode, 2)
    if "Traceback" in p.stderr or len(p.stderr.strip().splitlines()) != 2:
        raise AssertionError(p.stderr)
    return "2 named"


CASES = [
    ("curesv-plot: Chrome trace to SVG and PNG", plot_chrome),
    ("curesv-plot: refusals; an RMM CSV", plot_refusals_and_rmm),
    ("curesv-plot: a trace cut short; bad input", plot_cut_short_and_bad_input),
    ("curesv-plot: a plot read at a glance", plot_at_a_glance),
    ("curesv-plot: gnuplot missing", plot_without_gnuplot),
    ("curesv-plot: names that would run commands", plot_hostile_names),
    ("curesv-merge: two ranks, as torchrun starts them", merge_two_ranks),
    ("curesv-merge: malformed and truncated reports", merge_skips_bad_inputs),
    ("curesv-merge: the orphan tier's row; device totals add up", merge_orphan_tier),
    ("curesv-merge: a report under caller attribution", merge_caller_attribution),
    ("curesv-plot: hostile input, exit statuses", plot_hostile_input),
    ("curesv-merge: hostile input, exit statuses", merge_hostile_input),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    if not shutil.which("gnuplot"):
        print("tools.py: gnuplot not found (scripts/install-deps test installs it)",
              file=sys.stderr)
        return 1
    failed, rows = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in CASES:
            sub = os.path.join(tmp, fn.__name__)
            os.makedirs(sub)
            try:
                rows.append((name, "pass", fn(args, sub)))
            except (AssertionError, OSError, ValueError, subprocess.SubprocessError) as err:
                failed += 1
                rows.append((name, "FAIL", str(err)))
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print("%-*s  %-6s %s" % (width, r[0], r[1], r[2]))
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
