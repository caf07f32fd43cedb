#!/usr/bin/env python3
"""Fuzzes the readers of curesv-plot and curesv-merge with mutated traces and reports.

    scripts_fuzz.py [--runs N] [--seed S] [--out DIR]

Each input is a seed of tests/fuzz/seeds/plot or seeds/merge, mutated (bytes flipped, inserted,
deleted, slices repeated, the file cut, seeds spliced, hostile tokens inserted: numbers of 400
digits, nesting 100000 deep, NaN, invalid UTF-8, lone surrogates, control characters, quotes,
backquotes, gnuplot macros). Each script's main() runs on it in this process (curesv-plot with
gnuplot replaced by a check of the script it would have run); every 100th input also runs as a
process, with gnuplot. The oracles:

  - no traceback, and the exit status is one of those --help documents, never 70 (a bug);
  - a failure is one line on stderr naming the file, and every line out is one line: no control
    character in it, no lone surrogate;
  - curesv-plot's gnuplot script holds text from outside only inside single quotes, with none of
    ' " ` @ $ { } \\n or another control character, and its data files hold numbers only; gnuplot
    runs no command (a `pwned` file never appears);
  - curesv-merge --json prints valid JSON in UTF-8;
  - time is linear: a trace or report 8 times longer (whole, cut short, with a hole in the middle,
    bracket soup, a new account in each event) takes less than 20 times as long (quadratic would
    be 64).

The run is reproducible from --seed. A failing input is saved in --out with the reason; the exit
status is then 1. Python's standard library only.
"""
import argparse
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
SEEDS = os.path.join(HERE, "seeds")

HOSTILE = [b"9" * 400, b"-" + b"9" * 30, b"[" * 100000, b"{\"a\":" * 3000, b"NaN", b"Infinity",
           b"-Infinity", b"1e999", b"-1", b"true", b"null", b"1.5", b"\"\"", b"\"\\u0000\"",
           b"\"\\ud800\"", b"\"\\udc80x\"", b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\r", b"\n",
           b"\x00", b"\x1b[2J", b"\xc2\x9b", b"\xe2\x80\xa8", b",", b"}", b"]", b"{", b"[", b"\"",
           b"'", b"`touch pwned`", b"@GPVAL_PWD", b"$(touch pwned)",
           b"\"x\\nsystem('touch pwned')\\n#\"", b"\\", b"\"device 0\"", b"\"(total)\"",
           b"\"refused\"", b"\"reserve\"", b"\"release\"", b"\"capacity\"", b"\"process_name\"",
           b"allocate failure", b"free", b",,,,,", b"99:99:99.999999", b"00:00:00.000001"]
STATUS = {"plot": {0, 1, 2, 3, 4}, "merge": {0, 1, 2, 3, 4}}
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def load_script(name):
    path = os.path.join(SCRIPTS, "curesv-" + name)
    loader = importlib.machinery.SourceFileLoader("curesv_" + name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def seeds(kind):
    folder = os.path.join(SEEDS, kind)
    out = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out.append((name, f.read()))
    return out


# ---- mutation ------------------------------------------------------------------------------------

def mutate(rng, data, pool):
    data = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 5))):
        at = rng.randrange(len(data) + 1)
        how = rng.randrange(9)
        if how == 0 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif how == 1:
            data[at:at] = bytes([rng.randrange(256)])
        elif how == 2:
            del data[at:at + rng.randrange(1, 16)]
        elif how in (3, 4):
            data[at:at] = rng.choice(HOSTILE)
        elif how == 5:
            del data[at:]                               # cut short
        elif how == 6:
            end = min(len(data), at + rng.randrange(1, 400))
            data[at:at] = data[at:end] * rng.randrange(1, 4)
        elif how == 7:
            other = rng.choice(pool)[1]
            cut = rng.randrange(len(other) + 1)
            data = data[:at] + bytearray(other[cut:])   # spliced with another seed
        else:
            # a number replaced: the readers' range checks
            nums = [m.span() for m in re.finditer(rb"-?\d+(\.\d+)?", bytes(data))]
            if nums:
                a, b = rng.choice(nums)
                data[a:b] = rng.choice((b"-1", b"0", b"18446744073709551616", b"1e308",
                                        b"1" * 21, b"4294967296", b"0.5", b"-0"))
    return bytes(data)


DEEP = "@@deep@@"
VALUES = [10 ** 400, -10 ** 30, -1, 1 << 64, (1 << 64) - 1, 1 << 63, 1e308, 0.5, float("nan"),
          float("inf"), True, False, None, "", "x\ny", "\ud800", "\udc80", "\x1b[2J\u009b",
          "a\u2028b", "x\nsystem('touch pwned')\n#", "`touch pwned`", "@GPVAL_PWD", "9" * 400,
          [], {}, [1, 2], {"a": 1}, DEEP]
NAMES = [v for v in VALUES if isinstance(v, str) and v != DEEP]
# what the readers read: mutated more often than the rest
KEYS = {"name", "host", "rank", "pid", "peak", "allocated", "allocs", "frees", "denied", "device",
        "cross_thread_frees", "count", "bytes", "leaks", "reservations", "devices", "shared",
        "retired", "orphan", "host_bytes", "transfers_out", "unknown_frees", "traceEvents", "ph",
        "ts", "args", "size", "capacity", "account", "reservation", "scan", "pipe", "(total)",
        "(shared pool)", "(orphan tier)"}


def nodes(doc, path=()):
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from nodes(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from nodes(v, path + (i,))


def mutate_tree(rng, data):
    """A JSON seed with values replaced, keys renamed or dropped, elements repeated: input that
    is still JSON, to reach the readers' checks of what the JSON holds."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    for _ in range(rng.choice((1, 1, 2, 4))):
        paths = list(nodes(doc))[1:]
        named = [p for p in paths if p[-1] in KEYS]
        if named and rng.randrange(2):
            paths = named
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last, how = path[-1], rng.randrange(5)
        if how < 3:
            parent[last] = rng.choice(VALUES)
        elif how == 3 and isinstance(parent, dict):
            parent[rng.choice(NAMES) if rng.randrange(2) else last + "x"] = parent.pop(last)
        elif how == 3:
            del parent[last]
        elif isinstance(parent, list):
            parent.insert(last, parent[last])
    text = json.dumps(doc)
    return text.replace('"%s"' % DEEP, "[" * 5000 + "]" * 5000).encode("utf-8", "surrogatepass")


# ---- the oracles ---------------------------------------------------------------------------------

class Oops(Exception):
    pass


class Out(io.TextIOWrapper):
    """stdout or stderr as a script sees it; encoding errors are not hidden (no reconfigure)."""

    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8", errors="strict")

    def reconfigure(self, **kw):
        pass

    def text(self):
        self.flush()
        return self.buffer.getvalue().decode("utf-8")


def lines_ok(text, what):
    if text and not text.endswith("\n"):
        raise Oops("%s does not end in a newline: %r" % (what, text[-80:]))
    for line in text.split("\n"):
        if CONTROL.search(line):
            raise Oops("%s line with a control character: %r" % (what, line[:200]))


GNUPLOT_LINE = re.compile(r"(set |plot |xs\(t\) = |     |unset |)")
QUOTED = re.compile(r"'([^']*)'")
FORBIDDEN = re.compile(r"[\"`@${}\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
DATA_LINE = re.compile(r"(-?\d+(\.\d+)?(e[-+]?\d+)? -?\d+(\.\d+)?(e[-+]?\d+)?( .*)?)?\Z")


def check_gnuplot(script, folder):
    """What gnuplot would run: text from outside only in single quotes, nothing that escapes."""
    for line in script.split("\n"):
        outside = QUOTED.sub("_", line)
        if "'" in outside or '"' in outside or "`" in outside or "@" in outside:
            raise Oops("a quote, backquote or macro outside a label: %r" % line[:200])
        if "system" in outside or "load" in outside or "call" in outside:
            raise Oops("a command word outside a label: %r" % line[:200])
        for text in QUOTED.findall(line):
            bad = FORBIDDEN.search(text.replace("\\x", ""))
            if bad:
                raise Oops("label %r holds %r" % (text[:100], bad.group()))
    for name in os.listdir(folder):
        if name.endswith(".dat"):
            with open(os.path.join(folder, name), encoding="ascii") as f:
                for line in f:
                    if not DATA_LINE.match(line.rstrip("\n")):
                        raise Oops("data file line %r" % line[:100])


def run_main(module, argv):
    out, err = Out(), Out()
    old = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = module.main()
            except SystemExit as e:
                status = e.code
            except Oops:
                raise
            except Exception as e:
                raise Oops("main() raised %s: %s" % (type(e).__name__, e))
    finally:
        sys.argv = old
    try:
        return status, out.text(), err.text()
    except UnicodeDecodeError as e:
        raise Oops("output not UTF-8: %s" % e)


def check_run(kind, status, out, err, path):
    if status not in STATUS[kind]:
        raise Oops("exit status %r (stderr %r)" % (status, err[-300:]))
    if "Traceback" in err or "Traceback" in out:
        raise Oops("a traceback")
    lines_ok(out, "stdout")
    lines_ok(err, "stderr")
    errs = err.split("\n")[:-1]     # U+2028 is no line break to curesv, nor to a terminal
    if status == 0 and errs:
        raise Oops("status 0 with %r on stderr" % errs)
    if kind == "plot":
        if status != 0 and len(errs) != 1:
            raise Oops("want one line on stderr, got %r" % errs)
        if status == 0 and len(out.split("\n")) != 2:
            raise Oops("want one line on stdout, got %r" % out[:300])
    for line in errs:
        if not line.startswith("curesv-%s: " % kind):
            raise Oops("stderr line %r" % line[:200])


def plot_one(plot, path, tmp):
    def fake_render(p, out, gnuplot):
        with tempfile.TemporaryDirectory(dir=tmp) as folder:
            check_gnuplot(plot.gnuplot_script(p, out, folder), folder)
    real = plot.render
    plot.render = fake_render
    try:
        return run_main(plot, ["curesv-plot", path, "-o", os.path.join(tmp, "out.png")])
    finally:
        plot.render = real


def merge_one(merge, path, tmp):
    """Text and --json: the text has a line per account and process of the JSON, no more."""
    inputs = [os.path.join(SEEDS, "merge", "handoff.json"), path]
    status, out, err = run_main(merge, ["curesv-merge", "--json"] + inputs)
    if status not in (0, 1):
        return status, out, err
    try:
        merged = json.loads(out)
        want = 6 + len(merged["groups"]) + len(merged["processes"])
    except (ValueError, UnicodeEncodeError, TypeError, KeyError) as e:
        raise Oops("--json output: %s" % e)
    check_run("merge", status, "", err, path)
    status, out, err = run_main(merge, ["curesv-merge"] + inputs)
    if status in (0, 1) and out.count("\n") != want:
        raise Oops("%d lines of text for %d lines of accounts and processes: %r" % (
            out.count("\n"), want, out[:400]))
    return status, out, err


def as_process(kind, path, tmp):
    argv = [sys.executable, os.path.join(SCRIPTS, "curesv-" + kind), path]
    if kind == "plot":
        argv += ["-o", os.path.join(tmp, "out.png")]
    p = subprocess.run(argv, capture_output=True, cwd=tmp, timeout=120)
    try:
        out, err = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Oops("process output not UTF-8: %s" % e)
    check_run(kind, p.returncode, out, err, path)
    if os.path.exists(os.path.join(tmp, "pwned")):
        raise Oops("gnuplot ran a command from the input")


# ---- time ----------------------------------------------------------------------------------------

def shapes(kind, n):
    """Inputs of about n events: whole, cut short, a hole in the middle, bracket soup, each
    event naming another account (curesv-merge: one long name)."""
    if kind == "plot":
        events = [json.dumps({"ph": "C", "name": "device 0", "pid": 1, "ts": 1000 + i,
                              "args": {"scan": i * 64, "(total)": i * 64}}) for i in range(n)]
        whole = '{"traceEvents":[\n' + ",\n".join(events) + "\n]}\n"
    else:
        with open(os.path.join(SEEDS, "merge", "handoff.json")) as f:
            report = json.load(f)
        row = report["reservations"][0]
        report["reservations"] = [dict(row, name="r%d" % i) for i in range(n // 4)]
        whole = json.dumps(report)
    half = len(whole) // 2
    if kind == "plot":
        names = [json.dumps({"ph": "C", "name": "device 0", "pid": 1, "ts": 1000 + i,
                             "args": {"r%d" % i: 64}}) for i in range(n)]
        many = '{"traceEvents":[\n' + ",\n".join(names) + "\n]}\n"
    else:
        many = whole.replace('"r1"', '"r1' + "x" * n * 30 + '"')
    return {"whole": whole, "cut short": whole[:-7], "many names": many,
            "hole": whole[:half // 5] + "\x00" * 64 + whole[half // 5:],
            "brackets": '{"traceEvents":[' + '{"a":[1}},' * (n * 3)}


def time_linear(modules, tmp, failures):
    for kind, module in modules.items():
        small, large = shapes(kind, 800), shapes(kind, 6400)
        for shape in small:
            took = []
            for texts in (small, large):
                path = os.path.join(tmp, "time.in")
                with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write(texts[shape])
                best = None
                for _ in range(3):
                    start = time.perf_counter()
                    if kind == "plot":
                        plot_one(module, path, tmp)
                    else:
                        merge_one(module, path, tmp)
                    elapsed = time.perf_counter() - start
                    best = elapsed if best is None else min(best, elapsed)
                took.append(best)
            ratio = took[1] / max(took[0], 1e-4)
            line = "%s, %s: %.3f s at %d KB, %.3f s at %d KB (x%.1f)" % (
                kind, shape, took[0], len(small[shape]) >> 10, took[1],
                len(large[shape]) >> 10, ratio)
            print("scripts_fuzz: time: " + line)
            if ratio > 20 and took[1] > 0.05:
                failures.append("time not linear: " + line)


# ---- the run -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000, help="inputs per script (default 2000)")
    ap.add_argument("--seed", type=int, default=1, help="the random seed (default 1)")
    ap.add_argument("--out", default=os.path.join("build", "fuzz"),
                    help="where failing inputs go (default build/fuzz)")
    args = ap.parse_args()
    sys.setrecursionlimit(1000)     # as a script starts with
    rng = random.Random(args.seed)
    modules = {"plot": load_script("plot"), "merge": load_script("merge")}
    pools = {"plot": seeds("plot"), "merge": seeds("merge")}
    failures, counts = [], {"plot": {}, "merge": {}}
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, module in modules.items():
            pool = pools[kind]
            for i in range(args.runs):
                name, seed = pool[i % len(pool)]
                data = seed if i < len(pool) else \
                    (rng.randrange(2) and mutate_tree(rng, seed)) or mutate(rng, seed, pool)
                path = os.path.join(tmp, "input")
                with open(path, "wb") as f:
                    f.write(data)
                try:
                    if kind == "plot":
                        status, out, err = plot_one(module, path, tmp)
                    else:
                        status, out, err = merge_one(module, path, tmp)
                    check_run(kind, status, out, err, path)
                    counts[kind][status] = counts[kind].get(status, 0) + 1
                    if i % 100 == 0:
                        as_process(kind, path, tmp)
                except Oops as why:
                    saved = os.path.join(args.out, "scripts-%s-%d" % (kind, i))
                    with open(saved, "wb") as f:
                        f.write(data)
                    failures.append("%s input %d (from %s, saved as %s): %s" %
                                    (kind, i, name, saved, why))
                    if len(failures) > 20:
                        break
        time_linear(modules, tmp, failures)
    for kind in modules:
        print("scripts_fuzz: curesv-%s: %d inputs, exit statuses %s" % (
            kind, sum(counts[kind].values()),
            ", ".join("%s: %d" % kv for kv in sorted(counts[kind].items()))))
    for line in failures:
        print("scripts_fuzz: FAIL: " + line)
    print("scripts_fuzz: %d failure%s in %.0f s (seed %d)" % (
        len(failures), "" if len(failures) == 1 else "s", time.time() - start, args.seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
