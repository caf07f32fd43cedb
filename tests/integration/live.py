#!/usr/bin/env python3
"""The live books (CURESV_LIVE=1) read from outside while the program runs, on the simulated stack:

  publish        the file appears, 0600, named PID-NONCE, locked by its process, in a 0700 folder;
                 its header names the process; a read leaves its holes holes; removed at exit
  stat           curesv-stat's text and JSON hold the numbers the held program has (live_hold:
                 8 buffers of 64 KiB made by 'scan', 4 freed by 'pipe'), with time and cmdline
  quiescent      a snapshot where nothing runs equals the exit report, key by key, but for the
                 two keys a snapshot adds (time, cmdline)
  SIGKILL        the file a killed process leaves is removed by the next reader, not listed
  lock, not pid  a file no process holds is removed whatever process has its pid now
  fork, exec     a forked child publishes its own books under its own pid, the parent's stay; a
                 process that runs another program (exec) publishes the new one's; a reader
                 that examined the old file while the new program made its own removes only the
                 old one
  forks          20 children that _exit or exec leave no file; 60,000 live allocations in 16M
                 slots are not copied at fork; a child's books are exact with a 0.2 ms timer
                 signal in the parent, and with 64M slots and 200,000 allocations
  descriptors    close_range(3, ~0U), then the program's own files on the numbers: untouched
  refused        symbolic links, other users' files, modes other than 0600, FIFOs, folders, bad
                 names, sizes, magic numbers and versions, bad folders: one line each, left alone
  hostile        a command line with newline, quote, backslash and invalid UTF-8 reads as one
                 escaped line, as JSON and as a Prometheus label; mutated headers give one line
  prometheus     the exposition format, checked by a strict parser written to its specification
                 and by Prometheus's Python client; --textfile writes it whole (temporary file and
                 rename), again and again with --every
  curesv-top     in a tmux terminal: the processes, devices and reservations, over-budget marked,
                 s cycles the sort, q quits; plain text when stdout is not a terminal
  launcher       curesv --live publishes; --live=1 is refused
  gpu driver     tests/gpu/torch_live.py, which gpu-check runs on a PyTorch job, on a job that
                 allocates through ctypes

    live.py --lib build/plain/libcuresv.so --bin build/plain/it

Prints one table and "N passed, N failed".
"""
import argparse
import fcntl
import importlib.machinery
import importlib.util
import json
import math
import mmap
import os
import random
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.normpath(os.path.join(HERE, "..", "..", "scripts"))
STAT = os.path.join(SCRIPTS, "curesv-stat")
TOP = os.path.join(SCRIPTS, "curesv-top")
LAUNCHER = os.path.join(SCRIPTS, "curesv")
KIB = 1024
HELD = {"CURESV_RESERVATIONS": "scan=1M,pipe=2M", "CURESV_ATTACH": "scan=scan,pipe=pipe"}


def load_stat():
    loader = importlib.machinery.SourceFileLoader("curesv_stat", STAT)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


cs = load_stat()


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


LIVE_NAME = re.compile(r"([0-9]+)-([0-9a-f]{16})\.live\Z")


def hold_lock(path):
    """An open descriptor of `path` holding its writer's lock, as a running process holds its
    own live file's: readers take it for alive."""
    fd = os.open(path, os.O_RDWR)
    fcntl.fcntl(fd, cs.F_OFD_SETLK, cs.FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    return fd


def is_locked(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, cs.F_OFD_SETLK, cs.FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


class Ctx:
    """A case's own XDG_RUNTIME_DIR (on tmpfs where there is one, as /dev/shm is): the live files
    of its programs go to its curesv/ folder, which the readers are pointed at."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.xdg = tempfile.mkdtemp(prefix="curesv-live-test-", dir=base)
        self.folder = os.path.join(self.xdg, "curesv")
        self.programs = []

    def env(self, **more):
        return dict(os.environ, XDG_RUNTIME_DIR=self.xdg, **more)

    def close(self):
        for p in self.programs:
            p.kill()
        shutil.rmtree(self.xdg, ignore_errors=True)

    def files(self):
        return sorted(os.listdir(self.folder)) if os.path.isdir(self.folder) else []

    def file_of(self, pid):
        """The one live file of process `pid`."""
        mine = [f for f in self.files() if f.startswith("%d-" % pid)]
        expect("files of pid %d" % pid, len(mine), 1)
        return os.path.join(self.folder, mine[0])

    def pids(self):
        """The pids the folder's files are named for (a name not PID-...: -1)."""
        return sorted(int(f.split("-", 1)[0]) if f.split("-", 1)[0].isdigit() else -1
                      for f in self.files())

    def stat(self, *argv, env=None, folder=True):
        """curesv-stat with --lib (and --dir this case's folder)."""
        cmd = [STAT, "--lib", self.args.lib] + (["--dir", self.folder] if folder else []) + \
            list(argv)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              env=env or self.env())

    def stat_json(self, *argv):
        p = self.stat("--json", *argv)
        if p.returncode != 0 or p.stderr:
            raise AssertionError("curesv-stat --json %s: exit %d, %r" % (" ".join(argv),
                                                                         p.returncode, p.stderr))
        return json.loads(p.stdout)


class Program:
    """live_hold under the shim with CURESV_LIVE=1, driven line by line."""

    def __init__(self, ctx, *argv, env=None, argv0=None, executable=None):
        self.ctx = ctx
        e = ctx.env(LD_PRELOAD=os.path.abspath(ctx.args.lib), CURESV_LIVE="1", **HELD)
        e.update(env or {})
        self.err = tempfile.TemporaryFile(dir=ctx.tmp)
        path = os.path.join(ctx.args.bin, "live_hold")
        self.p = subprocess.Popen([argv0 or path] + list(argv), executable=executable or path,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  env=e)
        self.pid = self.p.pid
        self.buf = b""
        ctx.programs.append(self)

    def line(self, timeout=30):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            ready = select.select([self.p.stdout], [], [], max(0, left))[0] if left > 0 else []
            if not ready:
                raise AssertionError("live_hold said nothing for %d s" % timeout)
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError("live_hold ended (%s): %s" % (self.p.wait(), self.stderr()))
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def expect(self, want):
        expect("live_hold says", self.line(), want)

    def step(self):
        self.p.stdin.write(b"\n")
        self.p.stdin.flush()

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")

    def wait(self, code=0):
        expect("live_hold exit status (%s)" % self.stderr()[-300:], self.p.wait(timeout=60), code)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def path(self, pid=None):
        return self.ctx.file_of(pid or self.pid)


def one_line(p, code, *contains):
    """A command that failed as it should: its status, one line on stderr naming what it must."""
    expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, code)
    lines = p.stderr.strip().splitlines()
    if len(lines) != 1 or "Traceback" in p.stderr or not all(c in lines[0] for c in contains):
        raise AssertionError("want one line with %r, got %r" % (contains, p.stderr))
    return lines[0]


def reservation(report, name):
    for r in report["reservations"]:
        if r["name"] == name and not r["released"]:
            return r
    raise AssertionError("no reservation %r in %r" % (name, report["reservations"]))


def check_held(report, pid):
    """The books of live_hold at "held": 8 allocations of 64 KiB by 'scan', 4 freed by 'pipe'."""
    expect("pid", report["pid"], pid)
    scan = reservation(report, "scan")
    for key, want in (("allocated", 256 * KIB), ("peak", 512 * KIB), ("allocs", 8), ("frees", 4),
                      ("cross_thread_frees", 4), ("caller_view", 512 * KIB)):
        expect("scan " + key, scan[key], want)
    expect("pipe caller_view", reservation(report, "pipe")["caller_view"], -256 * KIB)
    expect("device 0 live", report["devices"][0]["allocated"], 256 * KIB)
    expect("live allocations", (report["leaks"]["count"], report["leaks"]["bytes"]), (4, 256 * KIB))


def sparse_copy(src, dst, pid, nonce):
    """A copy of live file `src` (its data; holes stay holes) whose name and header say pid and
    nonce, as of one whole publication (generation even) and dated a day ahead (a reader takes it
    at once)."""
    fd = os.open(src, os.O_RDONLY)
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        size = os.fstat(fd).st_size
        at = 0
        while at < size:
            try:
                data = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            while data < hole:
                chunk = os.pread(fd, min(1 << 20, hole - data), data)
                os.pwrite(out, chunk, data)
                data += len(chunk)
            at = hole
        os.ftruncate(out, size)
        os.pwrite(out, struct.pack("<qQ", pid, nonce), 32)  # the header's pid and nonce
        os.pwrite(out, struct.pack("<Qq", 2, time.time_ns() + 86400 * 10**9), 104)
    finally:
        os.close(fd)
        os.close(out)


# ---- the cases -----------------------------------------------------------------------------------

def publish(ctx):
    p = Program(ctx)
    p.expect("held 4")
    st = os.lstat(ctx.folder)
    expect("folder is a folder", stat.S_ISDIR(st.st_mode), True)
    expect("folder mode", stat.S_IMODE(st.st_mode), 0o700)
    expect("folder owner", st.st_uid, os.geteuid())
    path = ctx.file_of(p.pid)
    name = os.path.basename(path)
    nonce = int(LIVE_NAME.match(name).group(2), 16)
    expect("files", ctx.files(), [name])
    expect("held by its process's lock", is_locked(path), True)
    st = os.lstat(path)
    expect("a regular file", stat.S_ISREG(st.st_mode), True)
    expect("file mode", stat.S_IMODE(st.st_mode), 0o600)
    expect("file owner", st.st_uid, os.geteuid())
    with open(path, "rb") as f:
        h = cs.HEADER.unpack(f.read(cs.HEADER.size))
    expect("magic, version, header bytes", h[:3], (cs.MAGIC, cs.VERSION, cs.HEADER_BYTES))
    expect("total bytes", h[4], st.st_size)
    expect("pid, nonce, uid, state", h[5:9], (p.pid, nonce, os.geteuid(), cs.RUNNING))
    if abs(h[9] / 1e9 - time.time()) > 120:
        raise AssertionError("created_ns %d is not now" % h[9])
    expect("cmdline", h[18].split(b"\0")[0], os.path.join(ctx.args.bin, "live_hold").encode())
    r = ctx.stat()
    with open(path, "rb") as f:
        h = cs.HEADER.unpack(f.read(cs.HEADER.size))
    if h[15] % 2 or h[16] < time.time_ns() - 60 * 10**9 or not 10**8 <= h[17] <= 10**10:
        raise AssertionError("generation %d, published %d, period %d" % h[15:18])
    expect("curesv-stat (%s)" % r.stderr, r.returncode, 0)
    stored = os.stat(path).st_blocks * 512
    if stored > 8 << 20:  # the reader must not fill the holes of a tmpfs file with pages
        raise AssertionError("%d MiB of the %d MiB file stored after a read" %
                             (stored >> 20, st.st_size >> 20))
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    expect("files after exit", ctx.files(), [])
    return "0600 in 0700, %d KiB of %d MiB stored after a read, removed at exit" % (
        stored >> 10, st.st_size >> 20)


def folder_rule(ctx):
    """The folder: $XDG_RUNTIME_DIR/curesv when that is an absolute path to a folder of the
    user's, else /dev/shm/curesv-UID (read both); a reader without --dir finds the program."""
    fallback = "/dev/shm/curesv-%d" % os.geteuid()
    expect("rule, XDG set", cs.live_dirs({"XDG_RUNTIME_DIR": ctx.xdg}),
           [ctx.folder, fallback])
    for bad in ("", "relative/dir", "/nonexistent-curesv-dir", "/etc/passwd"):
        expect("rule, XDG_RUNTIME_DIR=%r" % bad, cs.live_dirs({"XDG_RUNTIME_DIR": bad}), [fallback])
    if os.geteuid() == 0:
        other = tempfile.mkdtemp(dir=ctx.tmp)
        os.chown(other, 65534, 65534)
        expect("rule, XDG another user's", cs.live_dirs({"XDG_RUNTIME_DIR": other}), [fallback])
    p = Program(ctx)
    p.expect("held 4")
    r = ctx.stat("--json", folder=False)
    if r.returncode not in (0, 1) or "Traceback" in r.stderr:
        raise AssertionError("curesv-stat without --dir: %d %r" % (r.returncode, r.stderr))
    mine = [x for x in json.loads(r.stdout) if x["pid"] == p.pid]
    expect("the program among those listed", len(mine), 1)
    check_held(mine[0], p.pid)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    return "found without --dir"


def stat_text_json(ctx):
    p = Program(ctx)
    p.expect("held 4")
    r = ctx.stat()
    expect("exit status (%s)" % r.stderr, r.returncode, 0)
    lines = r.stdout.splitlines()
    head = re.fullmatch(r"curesv: live snapshot at (\S+) of pid (\d+): (.*)", lines[0])
    if not head or int(head.group(2)) != p.pid or not head.group(3).endswith("/live_hold"):
        raise AssertionError("first line: %r" % lines[0])
    want = ["curesv: ======== report for pid %d (CURESV_MODE=observe, CURESV_ATTRIBUTION=origin) "
            "========" % p.pid]
    expect("report header", lines[1:2], want)
    rows = {line.split()[1]: line.split()[2:] for line in lines if re.match(r"curesv:   \w", line)}
    expect("scan's row", rows.get("scan"),
           ["1", "MiB", "256", "KiB", "512", "KiB", "8", "4", "4", "512", "KiB", "0"])
    expect("pipe's row", rows.get("pipe"),
           ["2", "MiB", "0", "B", "0", "B", "0", "0", "0", "-256", "KiB", "0"])
    if not all(line.startswith("curesv: ") for line in lines):
        raise AssertionError("a line that is not curesv's: %r" % r.stdout)
    one = ctx.stat_json(str(p.pid))
    check_held(one, p.pid)
    when = time.mktime(time.strptime(one["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    if not one["time"].endswith("Z") or abs(when - time.time()) > 120:
        raise AssertionError("time %r is not now in UTC" % one["time"])
    expect("cmdline", one["cmdline"], os.path.join(ctx.args.bin, "live_hold"))
    every = ctx.stat_json()
    expect("without a PID: an array of one", [type(every), len(every)], [list, 1])
    check_held(every[0], p.pid)
    none = ctx.stat("--json", "1")
    one_line(none, 2, "no live books of pid 1")
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    gone = ctx.stat()
    one_line(gone, 2, "no process of uid %d publishes its books" % os.geteuid())
    return "text rows and JSON numbers"


def quiescent(ctx):
    exit_report = os.path.join(ctx.tmp, "exit.json")
    p = Program(ctx, env={"CURESV_REPORT": "json", "CURESV_REPORT_FILE": exit_report})
    p.expect("held 4")
    p.step()
    p.expect("freed")
    snap = ctx.stat_json(str(p.pid))
    p.step()
    p.wait()
    with open(exit_report) as f:
        final = json.load(f)
    added = sorted(set(snap) - set(final))
    expect("keys a snapshot adds", added, ["cmdline", "time"])
    differ = []

    def walk(a, b, at):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if k not in a or k not in b:
                    differ.append(at + "." + k)
                else:
                    walk(a[k], b[k], at + "." + k)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, "%s[%d]" % (at, i))
        elif a != b or type(a) is not type(b):
            differ.append("%s: %r != %r" % (at, a, b))
    walk({k: v for k, v in snap.items() if k not in added}, final, "")
    expect("keys that differ from the exit report", differ, [])
    def count(v):
        if isinstance(v, dict):
            return sum(count(x) for x in v.values())
        if isinstance(v, list):
            return sum(count(x) for x in v)
        return 1
    fields = count(final)
    return "%d fields equal" % fields


def sigkill(ctx):
    for verbose in (False, True):
        p = Program(ctx)
        p.expect("held 4")
        path = p.path()
        p.p.send_signal(signal.SIGKILL)
        p.p.wait()
        expect("the file a killed process leaves", ctx.files(), [os.path.basename(path)])
        r = ctx.stat(*(["--verbose"] if verbose else []))
        expect("exit status (%s)" % r.stderr, r.returncode, 2)
        lines = r.stderr.splitlines()
        want = ["curesv-stat: removed %s: no process holds it (its process ended without "
                "removing it)" % path] if verbose else []
        want.append("curesv-stat: no process of uid %d publishes its books (run one with "
                    "CURESV_LIVE=1, or curesv --live); looked in %s (--dir DIR looks elsewhere)"
                    % (os.geteuid(), ctx.folder))
        expect("stderr", lines, want)
        expect("files after the read", ctx.files(), [])
    return "removed, quietly and with --verbose"


def lock_not_pid(ctx):
    """Copies of the program's file named for a running process's pid: no process holds them, so
    they are removed, whatever runs under that pid; one the test holds is read."""
    p = Program(ctx)
    p.expect("held 4")
    sleeper = subprocess.Popen(["sleep", "60"])
    ctx.programs.append(type("P", (), {"kill": lambda self: (sleeper.kill(), sleeper.wait())})())
    unheld = os.path.join(ctx.folder, "%d-%016x.live" % (sleeper.pid, 1))
    held = os.path.join(ctx.folder, "%d-%016x.live" % (os.getpid(), 2))
    sparse_copy(p.path(), unheld, sleeper.pid, 1)
    sparse_copy(p.path(), held, os.getpid(), 2)
    fd = hold_lock(held)
    try:
        r = ctx.stat("--json", "--verbose")
        expect("exit status (%s)" % r.stderr, r.returncode, 0)
        listed = sorted(x["pid"] for x in json.loads(r.stdout))
        expect("processes listed", listed, sorted([p.pid, os.getpid()]))
        expect("stderr", r.stderr.splitlines(), [
            "curesv-stat: removed %s: no process holds it (its process ended without removing "
            "it)" % unheld])
        expect("files left", ctx.files(), sorted([os.path.basename(p.path()),
                                                  os.path.basename(held)]))
    finally:
        os.close(fd)
    os.unlink(held)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    return "the lock, not the pid, tells"


def fork(ctx):
    p = Program(ctx, "fork")
    p.expect("held 4")
    p.step()
    p.expect("child freed")
    both = ctx.stat_json()
    expect("processes", len(both), 2)
    parent = [x for x in both if x["pid"] == p.pid]
    child = [x for x in both if x["pid"] != p.pid]
    expect("the parent's", len(parent), 1)
    check_held(parent[0], p.pid)
    child = child[0]
    scan = reservation(child, "scan")
    for key, want in (("allocated", 0), ("peak", 512 * KIB), ("allocs", 8), ("frees", 8),
                      ("cross_thread_frees", 8)):
        expect("child's scan " + key, scan[key], want)
    expect("child's live allocations", child["leaks"]["count"], 0)
    with open("/proc/%d/stat" % child["pid"], "rb") as f:
        ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    expect("the child's parent", ppid, p.pid)
    expect("files' pids", ctx.pids(), sorted([p.pid, child["pid"]]))
    p.step()  # the child reads it and ends with _exit: its file stays
    p.expect("freed")
    after = ctx.stat_json()
    expect("after the child's _exit", [x["pid"] for x in after], [p.pid])
    expect("the parent's after", reservation(after[0], "scan")["allocated"], 0)
    p.step()
    p.wait()
    expect("files after exit", ctx.files(), [])
    return "child %d: 0 B live, 8 frees; parent: 256 KiB, 4 frees" % child["pid"]


def exec_again(ctx):
    p = Program(ctx, "exec")
    p.expect("held 4")
    before = ctx.stat_json(str(p.pid))
    expect("cmdline before the exec", before["cmdline"].endswith("live_hold exec"), True)
    p.step()
    p.expect("held 4")  # the program it exec'd, in the same process
    after = ctx.stat_json(str(p.pid))
    check_held(after, p.pid)
    expect("cmdline after the exec", after["cmdline"], os.path.join(ctx.args.bin, "live_hold"))
    expect("files' pids", ctx.pids(), [p.pid])
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    if "File exists" in p.stderr() or "no live books" in p.stderr():
        raise AssertionError("the exec'd program has no live books: %r" % p.stderr())
    expect("files after exit", ctx.files(), [])
    return "the new program's books"


def exec_while_read(ctx):
    """A program runs itself again (exec) while a reader examines its old file: the reader
    removes the old file, the one the new program makes stays and is read."""
    p = Program(ctx, "exec-wait")
    p.expect("held 4")
    old = p.path()
    p.step()
    p.expect("waiting")  # the new program, before its first CUDA call
    real_unlink = os.unlink
    made = []

    def unlink_late(name, *a, **kw):
        """The reader has judged the old file: the new program makes its own now, before the
        reader's unlink."""
        if not made:
            p.step()
            p.expect("held 4")
            made.extend(f for f in ctx.files() if f != os.path.basename(old))
        return real_unlink(name, *a, **kw)
    os.unlink = unlink_late
    try:
        scan = cs.scan_dirs([ctx.folder])
    finally:
        os.unlink = real_unlink
    expect("the new program made a file", len(made), 1)
    expect("files after the read", ctx.files(), made)
    # the reader removed the old file, or the new program's start-up sweep did just before it
    if [l.split(":")[0] for l in scan.removed] not in ([], ["removed %s" % old]):
        raise AssertionError("the reader's lines: %r" % scan.removed)
    check_held(ctx.stat_json(str(p.pid)), p.pid)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    expect("files after exit", ctx.files(), [])
    return "the old file removed, the new one read"


def live_fork(ctx, *argv, env=None, wait=True):
    e = ctx.env(**dict({"LD_PRELOAD": os.path.abspath(ctx.args.lib), "CURESV_LIVE": "1",
                        "CURESV_REPORT": "off"}, **(env or {})))
    return subprocess.Popen([os.path.join(ctx.args.bin, "live_fork")] + list(argv),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=e, text=True)


def forked_until(ctx, proc):
    """The parent's line after its forks; the files then."""
    line = proc.stdout.readline()
    if not line.startswith("forked "):
        proc.kill()
        raise AssertionError("live_fork: %r %r" % (line, proc.communicate()))
    return line.strip(), ctx.pids()


def forks_leave_nothing(ctx):
    """20 children that _exit (multiprocessing workers) or exec another program leave no file;
    with 60,000 live allocations in 16M slots, children cost no file and no copy either."""
    said = []
    for argv, env in ((["100", "10", "exit"], {}), (["100", "10", "exec"], {}),
                      (["60000", "3", "exit"], {"CURESV_TABLE_SLOTS": "16M"})):
        proc = live_fork(ctx, *argv, env=env)
        line, pids = forked_until(ctx, proc)
        expect("files while the parent lives (%s)" % " ".join(argv), pids, [proc.pid])
        out, err = proc.communicate("\n", timeout=120)
        expect("exit status, stderr", (proc.returncode, err), (0, ""))
        expect("files after exit", ctx.files(), [])
        said.append(line.split(": ", 1)[1])
    return "no files; 16M slots: " + said[-1]


def fork_child_exact(ctx):
    """A forked child's books are exact: with a 0.2 ms timer signal in the parent, and with 64M
    slots and 200,000 live allocations (its exit report: frees == allocations, nothing unknown,
    nothing live)."""
    out = []
    for argv, env in ((["50000", "3", "free", "itimer"], {}),
                      (["200000", "1", "free"], {"CURESV_TABLE_SLOTS": "64M"})):
        reports = os.path.join(ctx.tmp, "r-%d" % len(out))
        os.mkdir(reports)
        env = dict(env, CURESV_REPORT="json", CURESV_REPORT_FILE=os.path.join(reports, "%p.json"))
        proc = live_fork(ctx, *argv, env=env)
        line, _ = forked_until(ctx, proc)
        _, err = proc.communicate("\n", timeout=300)
        expect("exit status, stderr", (proc.returncode, err), (0, ""))
        children = [f for f in os.listdir(reports) if f != "%d.json" % proc.pid]
        expect("children's reports", len(children), int(argv[1]))
        for name in children:
            with open(os.path.join(reports, name)) as f:
                r = json.load(f)
            # the child's books are the parent's at the fork (its allocations, and the frees
            # and allocations of its churn after earlier forks), then its own frees of them all
            expect("child %s: frees == allocs" % name, r["shared"]["frees"],
                   r["shared"]["allocs"])
            if r["shared"]["allocs"] < int(argv[0]):
                raise AssertionError("child %s: %d allocations" % (name, r["shared"]["allocs"]))
            expect("child %s: unknown frees, leaks" % name, (r["unknown_frees"],
                                                             r["leaks"]["count"]), (0, 0))
        out.append(line.split(": ", 1)[1])
    return "; ".join(out)


def descriptors(ctx):
    """close_range(3, ~0U), then the program's own files get curesv's numbers: they keep exactly
    what the program wrote, the program and its forked child run on; curesv says one line."""
    files = os.path.join(ctx.tmp, "files")
    os.mkdir(files)
    e = ctx.env(LD_PRELOAD=os.path.abspath(ctx.args.lib), CURESV_LIVE="1", CURESV_REPORT="off")
    r = subprocess.run([os.path.join(ctx.args.bin, "live_fds"), files], capture_output=True,
                       text=True, timeout=120, env=e)
    expect("exit status, stdout (%s)" % r.stderr, (r.returncode, r.stdout), (0, "files ok\n"))
    lines = r.stderr.splitlines()
    if len(lines) > 1 or not all(l.startswith("curesv: CURESV_LIVE: descriptor ") and
                                 "was closed by the program" in l for l in lines):
        raise AssertionError("stderr: %r" % r.stderr)
    for i in range(8):
        with open(os.path.join(files, "f%d" % i)) as f:
            if not f.read().startswith("data %d of fd " % i):
                raise AssertionError("f%d changed" % i)
    return "files untouched; %s" % ("one line" if lines else "nothing said")


def bad_header(path, **fields):
    """A header-sized file whose fields are those of a live file but `fields`."""
    values = dict(magic=cs.MAGIC, version=cs.VERSION, header_bytes=cs.HEADER_BYTES, layout=0,
                  total=cs.HEADER_BYTES, pid=0, nonce=0, uid=os.geteuid(), state=cs.RUNNING,
                  created=0, cmdline=b"x")
    values.update(fields)
    raw = cs.HEADER.pack(values["magic"], values["version"], values["header_bytes"],
                         values["layout"], values["total"], values["pid"], values["nonce"],
                         values["uid"], values["state"], values["created"], 0, 0, 0, 0, 0, 2,
                         time.time_ns(), 10**8, values["cmdline"])
    with open(path, "wb") as f:
        f.write(raw.ljust(cs.HEADER_BYTES, b"\0"))
    os.chmod(path, 0o600)


def refused(ctx):
    p = Program(ctx)
    p.expect("held 4")
    d = ctx.folder
    want = {}
    me = os.getpid()

    def named(nonce, pid=None):
        return os.path.join(d, "%d-%016x.live" % (pid or me, nonce))
    os.symlink(p.path(), named(1, 1))
    want[os.path.basename(named(1, 1))] = "a symbolic link (not followed)"
    bad_header(named(2, 2))
    os.chmod(named(2, 2), 0o644)
    want[os.path.basename(named(2, 2))] = "mode 644, not 0600"
    os.mkfifo(named(4, 4), 0o600)
    want[os.path.basename(named(4, 4))] = "not a regular file"
    os.mkdir(named(5, 5), 0o700)
    want[os.path.basename(named(5, 5))] = "not a regular file"
    with open(os.path.join(d, "junk.live"), "w") as f:
        f.write("junk")
    want["junk.live"] = "not a live file's name (PID-NONCE.live)"
    with open(os.path.join(d, "12-34.live"), "w") as f:
        f.write("junk")
    want["12-34.live"] = "not a live file's name (PID-NONCE.live)"
    bad_header(named(10), magic=0x1234)
    want[os.path.basename(named(10))] = "not a curesv live file (magic 0x0000000000001234)"
    bad_header(named(11), version=9)
    want[os.path.basename(named(11))] = "format version 9: written by another version"
    bad_header(named(12), total=1 << 30, pid=me, nonce=12)
    want[os.path.basename(named(12))] = "4096 bytes, not the 1073741824 its header says"
    bad_header(named(13), pid=me + 1, nonce=13)
    want[os.path.basename(named(13))] = "its header says pid %d, nonce %016x" % (me + 1, 13)
    with open(named(14), "wb") as f:
        f.write(b"\0" * 100)
    os.chmod(named(14), 0o600)
    want[os.path.basename(named(14))] = "100 bytes: shorter than a live file's header"
    held = [hold_lock(named(k)) for k in range(10, 15)]  # as if their processes ran
    ctx.programs.append(type("P", (), {"kill": lambda self: [os.close(fd) for fd in held]})())
    if os.geteuid() == 0:
        bad_header(named(3, 3))
        os.chown(named(3, 3), 65534, 65534)
        want[os.path.basename(named(3, 3))] = "owned by uid 65534, not 0"
    before = ctx.files()
    r = ctx.stat("--json")
    expect("exit status", r.returncode, 1)
    expect("the program is read", [x["pid"] for x in json.loads(r.stdout)], [p.pid])
    lines = r.stderr.splitlines()
    if "Traceback" in r.stderr or len(lines) != len(want):
        raise AssertionError("want %d lines, got %r" % (len(want), r.stderr))
    for name, why in want.items():
        mine = [line for line in lines if line.startswith("curesv-stat: %s: " %
                                                           os.path.join(d, name))]
        if len(mine) != 1 or why not in mine[0]:
            raise AssertionError("%s: want one line with %r, got %r" % (name, why, lines))
    expect("files left alone", ctx.files(), before)
    # the folder itself
    link = os.path.join(ctx.tmp, "link")
    os.symlink(d, link)
    one_line(ctx.stat("--dir", link, folder=False), 1, link, "a symbolic link (not followed)")
    open_dir = os.path.join(ctx.tmp, "open")
    os.mkdir(open_dir, 0o755)
    os.chmod(open_dir, 0o755)
    one_line(ctx.stat("--dir", open_dir, folder=False), 1, "mode 755 lets others in")
    if os.geteuid() == 0:
        theirs = os.path.join(ctx.tmp, "theirs")
        os.mkdir(theirs, 0o700)
        os.chown(theirs, 65534, 65534)
        one_line(ctx.stat("--dir", theirs, folder=False), 1, "owned by uid 65534, not 0")
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    return "%d files, 3 folders: one line each" % len(want)


def hostile(ctx):
    """A command line no line may be forged from; then headers mutated at random, read through
    the library, each giving a report or one line."""
    argv0 = b'live\n"hold\\\xff\x1b[31m'
    p = Program(ctx, argv0=argv0, executable=os.path.join(ctx.args.bin, "live_hold"))
    p.expect("held 4")
    want = 'live\n"hold\\\ufffd\x1b[31m'
    snap = ctx.stat_json(str(p.pid))
    expect("cmdline in JSON", snap["cmdline"], want)
    r = ctx.stat(str(p.pid))
    expect("text exit status", r.returncode, 0)
    expect("the text's first line", r.stdout.splitlines()[0].split(" of pid %d: " % p.pid, 1)[-1],
           'live\\n"hold\\\ufffd\\x1b[31m')
    prom = ctx.stat("--prometheus")
    families = parse_exposition(prom.stdout)
    info = families["curesv_info"]["samples"]
    expect("cmdline label", [dict(k)["cmdline"] for k in info], [want])
    client = client_parse(prom.stdout)
    if client is not None:
        expect("cmdline label (prometheus_client)", [dict(k)["cmdline"] for n, k in client
                                                     if n == "curesv_info"], [want])
    # mutated headers of a copy that this process maps, named after this process: read by the
    # library unless curesv-stat refuses it first
    folder = os.path.join(ctx.tmp, "mutants")
    os.mkdir(folder, 0o700)
    me = os.getpid()
    path = os.path.join(folder, "%d-%016x.live" % (me, 7))
    sparse_copy(p.path(), path, me, 7)
    fd = hold_lock(path)
    size = os.fstat(fd).st_size
    mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    original = os.pread(fd, cs.HEADER.size, 0)
    rnd = random.Random(20261202)
    fields = [(0, 8), (8, 4), (12, 4), (16, 8), (24, 8), (52, 4), (64, 8), (72, 8), (80, 8),
              (88, 8), (96, 8)]  # not pid, nonce, uid: those are checked against the name
    outcomes = {}
    try:
        for i in range(24):
            mutant = bytearray(original)
            for _ in range(rnd.randint(1, 3)):
                at, n = rnd.choice(fields)
                value = rnd.choice([0, 1, (1 << (8 * n)) - 1, 1 << (8 * n - 1), 4096, 64,
                                    size, size - 64, rnd.getrandbits(8 * n)])
                mutant[at:at + n] = value.to_bytes(n, "little")
            cut = rnd.randint(0, 1024)
            mutant[128 + cut:128 + cut + 8] = bytes(rnd.getrandbits(8) for _ in range(8))[:len(
                mutant[128 + cut:128 + cut + 8])]
            os.pwrite(fd, bytes(mutant), 0)
            r = subprocess.run([STAT, "--lib", ctx.args.lib, "--dir", folder, "--json"],
                               capture_output=True, text=True, timeout=60)
            if "Traceback" in r.stderr or r.returncode not in (0, 1, 2):
                raise AssertionError("mutant %d: %d %r" % (i, r.returncode, r.stderr))
            if r.returncode == 1:
                one_line(r, 1, path)
            if r.returncode == 0:
                json.loads(r.stdout)
            outcomes[r.returncode] = outcomes.get(r.returncode, 0) + 1
    finally:
        mapped.close()
        os.close(fd)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    return "escaped; 24 mutated headers: %s" % ", ".join(
        "%d exit %d" % (n, rc) for rc, n in sorted(outcomes.items()))


# ---- Prometheus ----------------------------------------------------------------------------------

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_value(text, where):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf"))
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise AssertionError("%s: value %r is not a float" % (where, text))
    return float(text)


def parse_labels(text, at, where):
    """Labels from text[at] == '{' to their '}': ([(name, value)], index past the '}')."""
    labels = []
    at += 1
    while True:
        if text[at] == "}":
            return labels, at + 1
        m = LABEL.match(text, at)
        if not m or text.startswith("__", at):
            raise AssertionError("%s: bad label name at %r" % (where, text[at:at + 20]))
        at = m.end()
        if text[at:at + 2] != '="':
            raise AssertionError("%s: no =\" after label %s" % (where, m.group()))
        at += 2
        value = []
        while text[at] != '"':
            if text[at] == "\\":
                esc = text[at + 1]
                if esc not in '\\"n':
                    raise AssertionError("%s: bad escape \\%s in a label value" % (where, esc))
                value.append("\n" if esc == "n" else esc)
                at += 2
            elif text[at] == "\n":
                raise AssertionError("%s: a raw newline in a label value" % where)
            else:
                value.append(text[at])
                at += 1
        labels.append((m.group(), "".join(value)))
        at += 1
        if text[at] == ",":
            at += 1
        elif text[at] != "}":
            raise AssertionError("%s: %r after a label value" % (where, text[at]))


def parse_exposition(text):
    """Prometheus's text exposition format (0.0.4), read strictly: every sample's family has its
    HELP and TYPE before it, a family's samples are together, names and label names are valid,
    label values escaped, values floats, no series twice, counters named *_total, no timestamps
    (node_exporter's textfile collector refuses them). {name: {type, help, samples}}."""
    if not text.endswith("\n"):
        raise AssertionError("the text does not end with a newline")
    families, current, done = {}, None, set()
    for n, line in enumerate(text[:-1].split("\n"), 1):
        where = "line %d" % n
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4 or not NAME.fullmatch(parts[2]):
                raise AssertionError("%s: %r" % (where, line))
            name = parts[2]
            if name in done:
                raise AssertionError("%s: family %s again after others" % (where, name))
            if current and current != name:
                done.add(current)
            current = name
            fam = families.setdefault(name, {"type": None, "help": None, "samples": {}})
            key = "help" if parts[1] == "HELP" else "type"
            if fam[key] is not None or fam["samples"]:
                raise AssertionError("%s: %s of %s twice, or after its samples" % (where, key, name))
            if key == "type" and parts[3] not in ("counter", "gauge", "histogram", "summary",
                                                  "untyped"):
                raise AssertionError("%s: type %r" % (where, parts[3]))
            if key == "help" and re.search(r"\\[^\\n]", parts[3]):
                raise AssertionError("%s: a bad escape in HELP" % where)
            fam[key] = parts[3]
            continue
        if line.startswith("#") or not line:
            raise AssertionError("%s: a comment or blank line curesv-stat does not write" % where)
        m = NAME.match(line)
        if not m:
            raise AssertionError("%s: bad metric name in %r" % (where, line))
        name, at = m.group(), m.end()
        if name != current or families[name]["help"] is None or families[name]["type"] is None:
            raise AssertionError("%s: sample of %s without its HELP and TYPE just before" %
                                 (where, name))
        labels = []
        if line[at:at + 1] == "{":
            labels, at = parse_labels(line + "\n", at, where)
        rest = line[at:]
        if not rest.startswith(" ") or len(rest.split()) != 1:
            raise AssertionError("%s: %r after the labels (one value, no timestamp)" % (where, rest))
        value = parse_value(rest.strip(), where)
        key = frozenset(labels)
        if len(key) != len(labels):
            raise AssertionError("%s: a label twice" % where)
        fam = families[name]
        if key in fam["samples"]:
            raise AssertionError("%s: series %s%r twice" % (where, name, sorted(labels)))
        fam["samples"][key] = value
        if fam["type"] == "counter" and (not name.endswith("_total") or value < 0 or
                                         math.isnan(value)):
            raise AssertionError("%s: counter %s = %r" % (where, name, value))
    return families


BAD_EXPOSITIONS = [  # each breaks one rule parse_exposition holds the text to
    "x 1\n",
    "# TYPE x gauge\nx 1\n",
    "# HELP x h\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",
    "# HELP x h\n# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",
    "# HELP x h\n# TYPE x counter\nx 1\n",
    "# HELP x h\n# TYPE x gauge\nx 1 1700000000000\n",
    "# HELP x h\n# TYPE x gauge\nx one\n",
    "# HELP 1x h\n# TYPE 1x gauge\n1x 1\n",
    "# HELP x h\n# TYPE x gauge\nx{__a=\"1\"} 1\n",
    "# HELP x h\n# TYPE x gauge\n# HELP y h\n# TYPE y gauge\ny 1\nx 1\n",
    "# HELP x h\n# TYPE x gauge\nx 1",
]


def client_parse(text):
    """The same text through Prometheus's Python client (prometheus_client.parser): {(sample
    name, labels): value}, or None when it is not installed."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        debian = "/usr/lib/python3/dist-packages"  # where apt puts it, for a python3 of its own
        if debian in sys.path:
            return None
        sys.path.append(debian)
        return client_parse(text)
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(families, name, **labels):
    fam = families[name]["samples"]
    got = [v for k, v in fam.items() if all((a, str(b)) in k for a, b in labels.items())]
    if len(got) != 1:
        raise AssertionError("%s%r: %d samples" % (name, labels, len(got)))
    return got[0]


def prometheus(ctx):
    p = Program(ctx, "fork")
    p.expect("held 4")
    p.step()
    p.expect("child freed")  # two processes: the parent, and its child
    for bad in BAD_EXPOSITIONS:  # the parser is as strict as it says
        try:
            parse_exposition(bad)
        except AssertionError:
            continue
        raise AssertionError("the strict parser took %r" % bad)
    r = ctx.stat("--prometheus")
    expect("exit status (%s)" % r.stderr, (r.returncode, r.stderr), (0, ""))
    families = parse_exposition(r.stdout)
    child = [dict(k)["pid"] for k in families["curesv_info"]["samples"] if
             dict(k)["pid"] != str(p.pid)]
    expect("processes", len(families["curesv_info"]["samples"]), 2)
    expect("families' types", {n: f["type"] for n, f in families.items() if n.endswith("_total")},
           {n: "counter" for n in families if n.endswith("_total")})
    for pid, live, frees in ((p.pid, 256 * KIB, 4), (child[0], 0, 8)):
        who = dict(pid=pid, reservation="scan")
        expect("allocated", sample(families, "curesv_reservation_allocated_bytes", **who), live)
        expect("size", sample(families, "curesv_reservation_size_bytes", **who), 1 << 20)
        expect("peak", sample(families, "curesv_reservation_peak_bytes", **who), 512 * KIB)
        expect("allocs", sample(families, "curesv_reservation_allocs_total", **who), 8)
        expect("frees", sample(families, "curesv_reservation_frees_total", **who), frees)
        expect("cross-thread", sample(families, "curesv_reservation_cross_thread_frees_total",
                                      **who), frees)
        expect("denied", sample(families, "curesv_reservation_denied_total", **who), 0)
        expect("device live", sample(families, "curesv_device_live_bytes", pid=pid, device=0),
               live)
        expect("capacity", sample(families, "curesv_device_capacity_bytes", pid=pid), 16 << 30)
        expect("shared", sample(families, "curesv_reservation_allocated_bytes", pid=pid,
                                reservation="(shared pool)"), 0)
        expect("caller view", sample(families, "curesv_reservation_caller_view_bytes", pid=pid,
                                     reservation="pipe"), -256 * KIB)
    client = client_parse(r.stdout)
    checked = "strict parser"
    if client is not None:
        ours = {(n, k): v for n, f in families.items() for k, v in f["samples"].items()}
        expect("prometheus_client reads the same samples", client, ours)
        checked += " and prometheus_client (%d samples)" % len(client)
    # --textfile: whole, readable as the umask allows, no temporary file left
    out_dir = os.path.join(ctx.tmp, "textfile")
    os.mkdir(out_dir)
    target = os.path.join(out_dir, "curesv.prom")
    t = subprocess.run([STAT, "--lib", ctx.args.lib, "--dir", ctx.folder, "--textfile", target],
                       capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.umask(0o022))
    expect("--textfile (%s)" % t.stderr, (t.returncode, t.stdout, t.stderr), (0, "", ""))
    expect("textfile mode", stat.S_IMODE(os.stat(target).st_mode), 0o644)
    expect("files in its folder", os.listdir(out_dir), ["curesv.prom"])
    with open(target) as f:
        expect("the textfile's samples", {n: f["samples"] for n, f in
                                          parse_exposition(f.read()).items()},
               {n: f["samples"] for n, f in families.items()})
    bad = ctx.stat("--textfile", os.path.join(ctx.tmp, "missing", "x.prom"))
    one_line(bad, 4, "cannot write", "missing")
    # --every: the file replaced again and again until interrupted
    # SIGINT as Ctrl-C sends it, set back to its default action in the child: a test run with
    # SIGINT ignored (nohup, `make test &`) hands the ignoring down, and the loop would not stop
    loop = subprocess.Popen([STAT, "--lib", ctx.args.lib, "--dir", ctx.folder, "--textfile",
                             target, "--every", "0.2"], stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    inodes = {os.stat(target).st_ino}
    deadline = time.monotonic() + 20
    while len(inodes) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            inodes.add(os.stat(target).st_ino)
        except FileNotFoundError:
            raise AssertionError("the textfile was missing while it was replaced")
    loop.send_signal(signal.SIGINT)
    _, err = loop.communicate(timeout=30)
    expect("--every after SIGINT (%s)" % err, (loop.returncode, err), (0, ""))
    if len(inodes) < 3:
        raise AssertionError("--every 0.2 replaced the file %d times in 20 s" % (len(inodes) - 1))
    # no process: the families' HELP and TYPE alone
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    empty = ctx.stat("--prometheus")
    expect("no process (%s)" % empty.stderr, empty.returncode, 0)
    if any(f["samples"] for f in parse_exposition(empty.stdout).values()):
        raise AssertionError("samples with no process: %r" % empty.stdout)
    return checked


# ---- curesv-top ----------------------------------------------------------------------------------

def tmux(sock, *argv, check=True):
    r = subprocess.run(["tmux", "-S", sock] + list(argv), capture_output=True, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("tmux %s: %s" % (argv[0], r.stderr.strip()))
    return r


def screen_until(sock, want, timeout=20):
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = tmux(sock, "capture-pane", "-p", "-t", "top").stdout
        if all(w in text for w in want):
            return text
        time.sleep(0.1)
    raise AssertionError("the screen never showed %r:\n%s" % (want, text))


def top_tmux(ctx):
    if not shutil.which("tmux"):
        raise AssertionError("tmux not found (scripts/install-deps test installs it)")
    p = Program(ctx, env={"CURESV_RESERVATIONS": "scan=200K,pipe=2M"})
    p.expect("held 4")
    sock = os.path.join(ctx.tmp, "tmux.sock")
    err = os.path.join(ctx.tmp, "top.err")
    cmd = "%s --lib %s --dir %s -d 0.3 2>%s; echo exit $? >>%s; sleep 30" % (
        TOP, ctx.args.lib, ctx.folder, err, err)
    tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "130", "-y", "30",
         "env", "TERM=screen", "XDG_RUNTIME_DIR=" + ctx.xdg, "sh", "-c", cmd)
    try:
        text = screen_until(sock, ["pid %d" % p.pid, "scan", "(shared pool)", "sorted by live"])
        for want in ("device 0  capacity 16 GiB  reserved 2.2 MiB  live 256 KiB  peak 512 KiB  "
                     "orphan 0 B", "curesv-top: 1 process of uid %d" % os.geteuid()):
            if want not in text:
                raise AssertionError("no %r on the screen:\n%s" % (want, text))
        rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("    ")}
        scan = rows.get("scan", "")
        if not re.search(r"200 KiB +256 KiB +\[#+!\] +128% +512 KiB! +4 +0 +OVER", scan):
            raise AssertionError("scan's row: %r" % scan)
        if not re.search(r"2 MiB +0 B +\[\.+\] +0% +0 B +0 +0$", rows.get("pipe", "").rstrip()):
            raise AssertionError("pipe's row: %r" % rows.get("pipe"))
        tmux(sock, "send-keys", "-t", "top", "s")
        screen_until(sock, ["sorted by peak"])
        tmux(sock, "send-keys", "-t", "top", "s")
        order = screen_until(sock, ["sorted by name"])
        names = [re.split(r" {2,}", line.strip())[0] for line in order.splitlines()
                 if line.startswith("    ") and not line.split()[0] == "reservation"]
        expect("reservations sorted by name, the shared pool last", names,
               ["pipe", "scan", "(shared pool)"])
        tmux(sock, "send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(err) as f:
                said = f.read()
            if "exit " in said:
                break
            time.sleep(0.1)
        expect("curesv-top after q (exit status, stderr)", said, "exit 0\n")
    finally:
        tmux(sock, "kill-server", check=False)
    # stdout not a terminal: one snapshot, plain text
    r = subprocess.run([TOP, "--lib", ctx.args.lib, "--dir", ctx.folder], capture_output=True,
                       text=True, timeout=60)
    expect("plain curesv-top (%s)" % r.stderr, (r.returncode, r.stderr), (0, ""))
    if not re.search(r"\n    scan +200 KiB +256 KiB +\[#+!\] +128% +512 KiB! +4 +0 +OVER\n",
                     r.stdout) or "\x1b" in r.stdout:
        raise AssertionError("plain text: %r" % r.stdout)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    return "rows, OVER, sort, q; plain text"


def launcher(ctx):
    env = ctx.env(**HELD)
    env.pop("CURESV_LIVE", None)
    p = subprocess.Popen([LAUNCHER, "--lib", ctx.args.lib, "--live", "--",
                          os.path.join(ctx.args.bin, "live_hold")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        expect("live_hold says", p.stdout.readline(), b"held 4\n")
        expect("files' pids", ctx.pids(), [p.pid])
        check_held(ctx.stat_json(str(p.pid)), p.pid)
        p.stdin.write(b"\n\n")
        p.stdin.close()
        expect("exit status", p.wait(timeout=60), 0)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r = subprocess.run([LAUNCHER, "--lib", ctx.args.lib, "--live=1", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    one_line(r, 2, "--live takes no value")
    return "--live publishes"


def usage(ctx):
    one_line(ctx.stat("abc"), 3, "'abc' is not a process id")
    one_line(ctx.stat("--every", "1"), 3, "--every needs --textfile")
    one_line(ctx.stat("--json", "--prometheus"), 3, "not allowed with")
    one_line(ctx.stat("--textfile", "x", "--every", "0"), 3, "from 0.1 to 86400")
    r = subprocess.run([STAT, "--dir", ctx.folder], capture_output=True, text=True, timeout=60,
                       env=ctx.env(CURESV_LIB="/nonexistent/libcuresv.so"))
    one_line(r, 5, "CURESV_LIB: '/nonexistent/libcuresv.so': no such file")
    one_line(ctx.stat("--lib", "/bin/true"), 5, "is not libcuresv.so")
    r = subprocess.run([TOP, "--lib", "/bin/true", "--once"], capture_output=True, text=True,
                       timeout=60)
    one_line(r, 5, "curesv-top: --lib: '/bin/true' is not libcuresv.so")
    for tool in (STAT, TOP):
        h = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=60)
        expect("%s --help" % os.path.basename(tool), (h.returncode, "exit status:" in h.stdout),
               (0, True))
    return "one line each"


def gpu_driver(ctx):
    """scripts/gpu-check reads a PyTorch job with tests/gpu/torch_live.py; the same driver, its
    job's allocations made through ctypes, on the simulated stack."""
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "gpu", "torch_live.py"), "check",
                        "--ctypes", "--lib", ctx.args.lib, "--scripts", SCRIPTS],
                       capture_output=True, text=True, timeout=120, env=ctx.env())
    if r.returncode != 0 or "torch_live: pass" not in r.stdout:
        raise AssertionError("torch_live.py --ctypes: %d %s %s" % (r.returncode, r.stdout,
                                                                  r.stderr[-500:]))
    return "held and freed snapshots agree"


def not_found(ctx):
    """Where a reader finds no books, it says why: the process's owner, its environment, where it
    looked and how to look elsewhere."""
    p = Program(ctx)
    p.expect("held 4")
    # a reader with another XDG_RUNTIME_DIR than the program's looks elsewhere, and says where
    other = tempfile.mkdtemp(prefix="curesv-live-other-", dir=os.path.dirname(ctx.xdg))
    try:
        env = dict(os.environ, XDG_RUNTIME_DIR=other)
        theirs = ctx.stat(str(p.pid), env=env, folder=False)
        one_line(theirs, 2, "curesv-stat: no live books of pid %d: it publishes them in %s, under "
                 "its own XDG_RUNTIME_DIR: curesv-stat --dir %s reads them"
                 % (p.pid, ctx.folder, ctx.folder))
        every = ctx.stat(env=env, folder=False)
        if every.returncode == 0:
            pass  # another program of this user publishes in the reader's folders: not this case's
        else:
            one_line(every, 2, "curesv-stat: no process of uid %d publishes its books (run one "
                     "with CURESV_LIVE=1, or curesv --live); looked in %s and /dev/shm/curesv-%d "
                     "(--dir DIR looks elsewhere)" % (os.geteuid(), os.path.join(other, "curesv"),
                                                      os.geteuid()))
    finally:
        shutil.rmtree(other, ignore_errors=True)
    p.step()
    p.expect("freed")
    p.step()
    p.wait()
    one_line(ctx.stat(str(p.pid)), 2, "curesv-stat: no live books of pid %d: no process %d is "
             "running" % (p.pid, p.pid))
    # a process of this user that was not asked to publish
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        one_line(ctx.stat(str(sleeper.pid)), 2, "curesv-stat: no live books of pid %d: it was "
                 "started without CURESV_LIVE=1 (run it with curesv --live)" % sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    # another user's process: its owner is the reason (as root: a process of uid 65534)
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0:
        owner, theirs = 0, None
        pid = 1
    elif setpriv:
        owner = 65534
        theirs = subprocess.Popen([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                                   "sleep", "60"])
        pid = theirs.pid
        for _ in range(100):  # until setpriv has changed its uid
            if os.stat("/proc/%d" % pid).st_uid == owner:
                break
            time.sleep(0.05)
    else:
        return "XDG_RUNTIME_DIR, gone, not publishing; another user's: SKIPPED (no setpriv)"
    try:
        one_line(ctx.stat(str(pid)), 2, "curesv-stat: no live books of pid %d: it is a process "
                 "of uid %d; curesv-stat reads the books of its own user's processes (uid %d) "
                 "alone" % (pid, owner, os.geteuid()))
    finally:
        if theirs:
            theirs.kill()
            theirs.wait()
    return "XDG_RUNTIME_DIR, gone, not publishing, another user's"


CASES = [
    ("publish: 0600 file in a 0700 folder, removed at exit", publish),
    ("folder: $XDG_RUNTIME_DIR/curesv, else /dev/shm/curesv-UID", folder_rule),
    ("curesv-stat text and JSON: the held program's numbers", stat_text_json),
    ("a quiescent snapshot equals the exit report", quiescent),
    ("SIGKILL: the file left is removed, not listed", sigkill),
    ("no books found: the reason, where it looked, where to look", not_found),
    ("a file no process holds is removed, whatever has its pid", lock_not_pid),
    ("fork: the child's books under its pid, the parent's stay", fork),
    ("exec: the new program's books under the same pid", exec_again),
    ("exec while a reader examines the old file: the new file stays", exec_while_read),
    ("fork: 20 children that _exit or exec leave no file, 16M slots copied by none",
     forks_leave_nothing),
    ("fork: a child's books exact with a 0.2 ms timer, and with 64M slots", fork_child_exact),
    ("close_range, then the program's files on curesv's numbers: untouched", descriptors),
    ("links, owners, modes, sizes, formats, folders refused", refused),
    ("hostile command line; mutated headers", hostile),
    ("Prometheus text format, --textfile, --every", prometheus),
    ("curesv-top in tmux, and as plain text", top_tmux),
    ("launcher --live", launcher),
    ("usage and library errors", usage),
    ("gpu-check's PyTorch driver, through ctypes", gpu_driver),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("cases", nargs="*", help="substrings of the cases to run (default: all)")
    args = ap.parse_args()
    args.lib, args.bin = os.path.abspath(args.lib), os.path.abspath(args.bin)
    failed, rows = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in CASES:
            if args.cases and not any(c in name or c == fn.__name__ for c in args.cases):
                continue
            sub = os.path.join(tmp, fn.__name__)
            os.makedirs(sub)
            ctx = Ctx(args, sub)
            began = time.monotonic()
            try:
                rows.append((name, "pass", fn(ctx), time.monotonic() - began))
            except (AssertionError, OSError, ValueError, KeyError, IndexError,
                    subprocess.SubprocessError) as err:
                failed += 1
                rows.append((name, "FAIL", "%s: %s" % (type(err).__name__, err),
                             time.monotonic() - began))
            finally:
                ctx.close()
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print("%-*s  %-4s %5.1fs  %s" % (width, r[0], r[1], r[3], r[2]))
    print("%d passed, %d failed" % (len(rows) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
