#!/usr/bin/env python3
"""The catalogue of hazards: every feature of curesv that touches files, descriptors or signals, run
through each hazard a preloaded library meets (DESIGN.md, "Hazards"; the table is tests/HAZARDS.md).

    hazards.py --lib build/plain/libcuresv.so --bin build/plain/it [--only SUBSTR] [--list]

Each row runs a program twice, without curesv and with it, and asks of the run with curesv:
  - the program behaves as without: the same stdout, the same stderr of its own, the same exit
    status (or wait status: a program ended by a signal still ends by it), the same data files;
  - curesv says at most one line (its report aside, where the report goes to stderr);
  - what the feature writes is whole where the hazard leaves room for it (the report's JSON, the
    trace checked against the report by tests/unit/check_trace.py), and absent where it must be.
Features: trace (rmm and chrome), report file, exit status (CURESV_ERROR_EXITCODE), signal report
(the program ends by SIGTERM at its end: the report and the trace are still written), the live
books (CURESV_LIVE=1) and a shared pool (CURESV_POOL, a name of its own per run: once the program
ended, the pool's books read zero when its dead are counted out, read from the pool file with the
offsets of core/pool/pool.h's structures that a small C program prints; where the hazard leaves no
room for the file, the program runs unpooled after one line). Rows that need root (mounts,
namespaces) print SKIPPED without it; a skipped row never reads as a pass. Exit status 1 when a row
failed.
"""
import argparse
import atexit
import fcntl
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
import check_trace  # noqa: E402  (tests/unit/check_trace.py)

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "scripts", "curesv")
EXIT_CODE = 9   # CURESV_ERROR_EXITCODE: the program keeps one allocation, a leak


class Skip(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def default_signals():
    """In the child: the signals the tests send at their default action, as a terminal leaves them
    (a suite run with SIGINT ignored, by nohup or `make test &`, would hand the ignoring down)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# ---- features ---------------------------------------------------------------------------------------

class Feature:
    """What a feature sets in the environment: `env(trace_dir, report_dir, lost)` -> env, where
    `lost` says the hazard leaves no room for files (a report then goes to stderr, or is off where
    the trace is the feature, so that each feature has its one line)."""
    def __init__(self, name, env, signal_end=False):
        self.name, self.env, self.signal_end = name, env, signal_end


def trace_env(fmt, report_on_stderr=False):
    def env(trace_dir, report_dir, lost):
        e = {"CURESV_TRACE": os.path.join(trace_dir, "trace"), "CURESV_TRACE_FORMAT": fmt,
             "CURESV_REPORT": "off" if lost and not report_on_stderr else "json"}
        if not lost:
            e["CURESV_REPORT_FILE"] = os.path.join(report_dir, "report.json")
        return e
    return env


def report_env(trace_dir, report_dir, lost):
    return {"CURESV_REPORT": "json", "CURESV_REPORT_FILE": os.path.join(trace_dir, "report.json")}


FEATURES = {
    "trace-rmm": Feature("trace (rmm)", trace_env("rmm")),
    "trace-chrome": Feature("trace (chrome)", trace_env("chrome")),
    "report": Feature("report file", report_env),
    "exitcode": Feature("exit status", lambda t, r, lost: {
        "CURESV_REPORT": "off", "CURESV_ERROR_EXITCODE": str(EXIT_CODE)}),
    # the program ends by SIGTERM where it would have returned: report and trace all the same
    "signal": Feature("signal report", trace_env("rmm", report_on_stderr=True), signal_end=True),
    "live": Feature("live books", lambda t, r, lost: dict({
        "CURESV_LIVE": "1", "XDG_RUNTIME_DIR": t, "CURESV_REPORT": "json"},
        **({} if lost else {"CURESV_REPORT_FILE": os.path.join(r, "report.json")}))),
    "pool": Feature("shared pool", lambda t, r, lost: pool_env(t, r, lost)),
}
ALL = ("trace-rmm", "trace-chrome", "report", "exitcode", "signal", "live", "pool")


def pool_name(report_dir):
    """The run's own pool: named after its temporary folder (report_dir is TMP/out)."""
    tail = os.path.basename(os.path.dirname(report_dir)).replace("curesv-hazard-", "")
    return "hazard-%d-%s" % (os.getpid(), re.sub(r"[^A-Za-z0-9._-]", "-", tail))


def pool_env(folder, report_dir, lost):
    """Pooled in enforce mode (admission in the pool before each allocation, refunds, frees through
    the trace's events) with one reservation declared (joined, then left at the end), the pool file
    in FOLDER/curesv (the per-user folder under XDG_RUNTIME_DIR)."""
    env = {"CURESV_POOL": pool_name(report_dir), "XDG_RUNTIME_DIR": folder,
           "CURESV_MODE": "enforce", "CURESV_RESERVATIONS": "hazard=64M",
           "CURESV_REPORT": "json"}
    if not lost:
        env["CURESV_REPORT_FILE"] = os.path.join(report_dir, "report.json")
    return env


# ---- hazards ----------------------------------------------------------------------------------------

class Hazard:
    """One row. `argv(ctx)`: the program's command line (wrappers included). `send`: a signal sent
    once the program printed "hazard: ready". `files`: "whole" (the feature's files are complete),
    "lost" (they cannot be written: one line says so, a report goes to stderr), "none" (the
    program never uses CUDA: curesv writes nothing at all), "kept-out" (written inside a private
    mount that is gone afterwards: not examined). `data`: the program writes ctx.data, which must
    read the same with curesv. `features`: the columns run. `pool`: what the hazard leaves the
    pool column, where it differs from `files` ("lost": the pool file cannot be made or used, the
    program runs unpooled; "whole": it can, where the other features' files cannot).
    `not_under_tsan`: columns left out under the thread sanitizer. `dead_at_exit`: the pool
    members a program that exits leaves behind, to be counted out (an image that exec'd)."""
    def __init__(self, name, argv, features=ALL, send=None, files="whole", root=False,
                 data=False, out_in_mount=False, launcher=False, needs=None, repeat=1,
                 sanitized=True, leaks=1, twin=False, pool=None, not_under_tsan=(),
                 dead_at_exit=0):
        self.repeat, self.sanitized, self.leaks, self.twin = repeat, sanitized, leaks, twin
        self.pool, self.not_under_tsan, self.dead_at_exit = pool, not_under_tsan, dead_at_exit
        self.name, self.argv, self.features, self.send = name, argv, features, send
        self.files, self.root, self.data = files, root, data
        self.out_in_mount, self.launcher, self.needs = out_in_mount, launcher, needs

    def files_for(self, fkey):
        return self.pool if fkey == "pool" and self.pool else self.files


class Ctx:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.prog = os.path.join(args.bin, "hazard")
        self.seccomp = os.path.join(args.bin, "seccomp_run")
        self.out = os.path.join(tmp, "out")
        self.mnt = os.path.join(tmp, "mnt")
        self.data = os.path.join(tmp, "data")
        os.mkdir(self.out, 0o700)
        os.mkdir(self.mnt, 0o700)


def in_mount(options, fill=False):
    """The program in a private mount namespace with a tmpfs mounted on ctx.mnt (`options`),
    filled up first with `fill`; its files there vanish with the namespace. With HAZARD_KEEP set
    (the pool column), the program is not exec'd but waited for, and the tmpfs's curesv folder
    copied to HAZARD_KEEP once it ended: the pool's books are read there; the shell then ends as
    the program did."""
    script = 'mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; chmod 700 "$2"; '
    if fill:
        script += 'cat /dev/zero > "$2/filler" 2>/dev/null; '
    script += ('m="$2"; shift 2; [ -n "$HAZARD_KEEP" ] || exec "$@"; "$@"; s=$?; '
               'cp -R "$m/curesv" "$HAZARD_KEEP" 2>/dev/null; '
               '[ $s -gt 128 ] && kill -$((s - 128)) $$; exit $s')
    return lambda ctx, argv: ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                              "sh", options, ctx.mnt] + argv


def no_proc(ctx, argv):
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'umount -l /proc || exit 99; exec "$@"', "sh"] + argv


def pid_ns(ctx, argv):
    return ["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "private"] + argv


def seccomp(rules):
    return lambda ctx, argv: [ctx.seccomp, rules] + argv


def prog(*words, wrap=None):
    def argv(ctx):
        a = [ctx.prog] + [ctx.data if w == "DATA" else ctx.mnt if w == "MNT" else w
                          for w in words]
        return wrap(ctx, a) if wrap else a
    return argv


PY_ALLOC = r'''
import ctypes, os, signal, sys, time
rt = ctypes.CDLL("libcudart.so", mode=ctypes.RTLD_GLOBAL)
p = ctypes.c_void_p()
if rt.cudaMalloc(ctypes.byref(p), 1 << 20) != 0:
    sys.exit("cudaMalloc failed")
print("hazard: ready", flush=True)
if sys.argv[1] == "raise":
    raise KeyboardInterrupt
while True:
    time.sleep(0.05)
'''


def python(mode):
    return lambda ctx: [sys.executable, "-c", PY_ALLOC, mode]


SIGNALS = ("trace-rmm", "trace-chrome", "report", "exitcode", "live", "pool")
NO_SIGNAL_END = ("trace-rmm", "trace-chrome", "report", "exitcode", "live", "pool")

HAZARDS = [
    Hazard("baseline: no hazard", prog("plain")),
    # descriptors closed or replaced under curesv
    Hazard("close_range(3, ~0U), then a data file on the freed numbers, also written by a child",
           prog("closeall", "DATA"), data=True),
    Hazard("close_range, and the trace's file removed: it cannot be reopened",
           prog("closeall", "DATA", "gone"), features=("trace-rmm", "trace-chrome"), data=True,
           files="lost"),
    # signals at their default action (item: report on SIGINT, SIGTERM, SIGHUP)
    Hazard("SIGINT sent (Ctrl-C)", prog("wait"), features=SIGNALS, send=signal.SIGINT),
    Hazard("SIGTERM sent", prog("wait"), features=SIGNALS, send=signal.SIGTERM),
    Hazard("SIGHUP sent", prog("wait"), features=SIGNALS, send=signal.SIGHUP),
    Hazard("raise(SIGINT) by the program", prog("raise", "INT"), features=SIGNALS),
    # (the pool column not under TSan: curesv's handler, set past TSan's interceptor, runs at
    # once, and can land inside TSan's own atomic on a table slot, then wait for that atomic's
    # lock in its table walk: the program hangs, inside TSan; seen there 2 runs in 30)
    Hazard("SIGTERM lands on a thread inside malloc, free or curesv (10 runs)", prog("busy"),
           features=("trace-rmm", "report", "pool"), send=signal.SIGTERM, files="either",
           repeat=10, not_under_tsan=("pool",)),
    Hazard("its own SIGINT handler, set before the first CUDA call", prog("own", "INT", "before"),
           features=NO_SIGNAL_END, send=signal.SIGINT),
    Hazard("its own SIGTERM handler, set after the first CUDA call", prog("own", "TERM", "after"),
           features=NO_SIGNAL_END, send=signal.SIGTERM),
    Hazard("actions read, a handler set, the default set back, then SIGTERM", prog("query"),
           features=SIGNALS),
    Hazard("Python under the launcher: an uncaught KeyboardInterrupt", python("raise"),
           features=SIGNALS, launcher=True),
    Hazard("Python under the launcher: SIGINT sent", python("wait"), features=SIGNALS,
           send=signal.SIGINT, launcher=True),
    # processes
    Hazard("fork() x20 while 4 threads allocate; the children exit()", prog("fork-threads")),
    Hazard("vfork + exec and posix_spawn of sh -c true", prog("spawn")),
    # (the image before the exec ends without its exit: its member is left to be counted out)
    Hazard("exec of itself after its allocations", prog("exec"), dead_at_exit=1),
    Hazard("SIGKILL while allocating (10 runs)", prog("spin"),
           features=("trace-rmm", "report", "exitcode", "pool"), send=signal.SIGKILL,
           files="killed", repeat=10),
    Hazard("SIGKILL while a forked child lives on", prog("orphan"),
           features=("trace-rmm", "report", "exitcode", "pool"), send=signal.SIGKILL,
           files="killed"),
    Hazard("LD_PRELOAD inherited by sh -c true (never uses CUDA)",
           lambda ctx: ["sh", "-c", "true"], files="none"),
    Hazard("LD_PRELOAD inherited by a shell that only forks",
           lambda ctx: ["sh", "-c", "(true); true & wait; echo forked"], files="none"),
    # resources
    Hazard("RLIMIT_NOFILE used up before the first CUDA call", prog("nofile"),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), files="lost"),
    Hazard("EINTR: a 100 us interval timer with a handler", prog("eintr")),
    Hazard("a PTHREAD_STACK_MIN thread makes every CUDA call", prog("tinystack")),
    # filesystems (root: a private mount namespace)
    Hazard("a tiny tmpfs (8 KiB) holds the files", prog("plain", wrap=in_mount("size=8k")),
           features=("trace-rmm", "trace-chrome", "report", "exitcode", "live", "pool"),
           root=True, out_in_mount=True, files="kept-out", pool="lost"),
    Hazard("a full tmpfs holds the files", prog("plain", wrap=in_mount("size=64k", fill=True)),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), root=True,
           out_in_mount=True, files="lost"),
    Hazard("a tmpfs filled up after the program started holds the files",
           prog("fill", "MNT", wrap=in_mount("size=16m")), features=("live", "pool"), root=True,
           out_in_mount=True, files="kept-out"),
    Hazard("a read-only tmpfs holds the files", prog("plain", wrap=in_mount("ro,size=64k")),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), root=True,
           out_in_mount=True, files="lost"),
    # pid 1 is not ended by a signal at its default action: the program goes on, frees what it
    # kept, and the report is written at its exit, not at the signal
    Hazard("pid 1 of a new pid namespace (a container's entry point), raise(SIGTERM): ignored",
           prog("raise", "TERM", wrap=pid_ns),
           features=("trace-rmm", "report", "exitcode", "live", "pool"), root=True, leaks=0),
    Hazard("pid 1 of a new pid namespace", prog("plain", wrap=pid_ns),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), root=True),
    Hazard("two pid 1s of new pid namespaces at once, one folder", prog("stdin", wrap=pid_ns),
           features=("live", "pool"), root=True, twin=True),
    # (not under a sanitizer: its runtime reads /proc/self/maps to start)
    Hazard("no /proc (unmounted in a private mount namespace)", prog("plain", wrap=no_proc),
           features=("trace-rmm", "trace-chrome", "report", "exitcode", "signal", "live", "pool"),
           root=True, sanitized=False),
    # seccomp
    Hazard("seccomp: flock denied", prog("plain", wrap=seccomp("flock")),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool")),
    Hazard("seccomp: statx denied, and close_range then a data file on the freed numbers",
           prog("closeall", "DATA", wrap=seccomp("statx")), data=True),
    Hazard("seccomp: files with O_CREAT denied", prog("plain", wrap=seccomp("open-creat")),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), files="lost"),
    Hazard("seccomp: memfd_create, ftruncate and shared mmap denied",
           prog("plain", wrap=seccomp("memfd_create,ftruncate,mmap-shared")),
           features=("trace-rmm", "report", "exitcode", "signal", "live", "pool"), pool="lost"),
    # what the live books alone call: file locks, a thread of their own, futex waits
    Hazard("seccomp: fcntl file locks denied", prog("plain", wrap=seccomp("fcntl-lock")),
           features=("live", "pool"), files="lost"),
    Hazard("seccomp: new threads denied (clone with CLONE_THREAD, clone3)",
           prog("plain", wrap=seccomp("clone-thread")), features=("live", "pool"), files="lost",
           pool="whole"),
    Hazard("seccomp: futex waits denied", prog("plain", wrap=seccomp("futex-wait")),
           features=("live", "pool")),
    Hazard("seccomp: futex waits denied, SIGTERM sent", prog("wait", wrap=seccomp("futex-wait")),
           features=("live", "pool"), send=signal.SIGTERM),
]


# ---- the pool's books -------------------------------------------------------------------------------

# Prints the pool file's layout as this build lays it out (and struct flock's, for F_OFD_GETLK):
# offsets and sizes from the compiler, so that the reader below follows pool.h as it changes.
POOL_LAYOUT_C = r"""
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include "pool/pool.h"
#define S(t) printf("sizeof.%s %zu\n", #t, sizeof(struct t))
#define O(t, m) printf("%s.%s %zu\n", #t, #m, offsetof(struct t, m))
#define K(k) printf("%s %llu\n", #k, (unsigned long long)(k))
int main(void)
{
	S(curesv_pool_file); S(curesv_pool_device); S(curesv_pool_reservation);
	S(curesv_pool_member); S(flock);
	O(curesv_pool_file, dev); O(curesv_pool_file, res); O(curesv_pool_file, member);
	O(curesv_pool_header, magic); O(curesv_pool_header, version);
	O(curesv_pool_header, total_bytes); O(curesv_pool_header, ready);
	O(curesv_pool_header, frozen); O(curesv_pool_header, stale);
	O(curesv_pool_header, member_high); O(curesv_pool_header, joins);
	O(curesv_pool_header, leaves);
	O(curesv_pool_device, capacity); O(curesv_pool_device, claimed);
	O(curesv_pool_reservation, used); O(curesv_pool_reservation, size);
	O(curesv_pool_reservation, state); O(curesv_pool_reservation, members);
	O(curesv_pool_reservation, device); O(curesv_pool_reservation, name);
	O(curesv_pool_member, state); O(curesv_pool_member, busy); O(curesv_pool_member, pid);
	O(curesv_pool_member, declared); O(curesv_pool_member, held);
	O(flock, l_type); O(flock, l_whence); O(flock, l_start); O(flock, l_len);
	K(CURESV_POOL_MAGIC); K(CURESV_POOL_VERSION); K(CURESV_POOL_MEMBERS);
	K(CURESV_POOL_RESERVATIONS); K(CURESV_POOL_SHARED0); K(CURESV_POOL_ACCOUNTS);
	K(CURESV_MAX_DEVICES); K(CURESV_NAME_MAX); K(CURESV_POOL_LOCK_MEMBER0);
	K(CURESV_POOL_FREE); K(CURESV_POOL_RECLAIMING); K(CURESV_POOL_RES_ACTIVE);
	K(F_WRLCK); K(F_UNLCK); K(SEEK_SET);
	return 0;
}
"""
_pool_layout = {}


def pool_layout():
    """pool.h's layout, compiled and run once."""
    if not _pool_layout:
        tmp = tempfile.mkdtemp(prefix="curesv-hazard-layout-")
        atexit.register(shutil.rmtree, tmp, True)
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write(POOL_LAYOUT_C)
        subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", "-I",
                        os.path.join(HERE, "..", "..", "core"), src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        _pool_layout.update((k, int(v)) for k, v in (line.split() for line in out.splitlines()))
    return _pool_layout


class PoolFile:
    """A pool file read whole, and its member locks asked of the kernel (F_OFD_GETLK from a
    descriptor of our own, which holds none)."""
    def __init__(self, path):
        self.L = L = pool_layout()
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with os.fdopen(os.dup(self.fd), "rb") as f:
            self.b = f.read()
        self.ok = (len(self.b) == L["sizeof.curesv_pool_file"] and
                   self.u64(L["curesv_pool_header.magic"]) == L["CURESV_POOL_MAGIC"] and
                   self.u32(L["curesv_pool_header.version"]) == L["CURESV_POOL_VERSION"] and
                   self.u64(L["curesv_pool_header.total_bytes"]) == len(self.b) and
                   self.u32(L["curesv_pool_header.ready"]) == 1)

    def close(self):
        os.close(self.fd)

    def u32(self, at):
        return struct.unpack_from("<I", self.b, at)[0]

    def u64(self, at):
        return struct.unpack_from("<Q", self.b, at)[0]

    def i64(self, at):
        return struct.unpack_from("<q", self.b, at)[0]

    def header(self, field):
        return self.u32(self.L["curesv_pool_header." + field])

    def locked(self, byte):
        """Whether another open file holds a write lock on `byte`."""
        L = self.L
        fl = bytearray(L["sizeof.flock"])
        struct.pack_into("<h", fl, L["flock.l_type"], L["F_WRLCK"])
        struct.pack_into("<h", fl, L["flock.l_whence"], L["SEEK_SET"])
        struct.pack_into("<q", fl, L["flock.l_start"], byte)
        struct.pack_into("<q", fl, L["flock.l_len"], 1)
        got = fcntl.fcntl(self.fd, fcntl.F_OFD_GETLK, bytes(fl))
        return struct.unpack_from("<h", got, L["flock.l_type"])[0] != L["F_UNLCK"]

    def devices(self):
        L = self.L
        at = [L["curesv_pool_file.dev"] + d * L["sizeof.curesv_pool_device"]
              for d in range(L["CURESV_MAX_DEVICES"])]
        return [{"capacity": self.u64(a + L["curesv_pool_device.capacity"]),
                 "claimed": self.i64(a + L["curesv_pool_device.claimed"])} for a in at]

    def reservations(self):
        L = self.L
        out = {}
        for r in range(L["CURESV_POOL_RESERVATIONS"]):
            a = L["curesv_pool_file.res"] + r * L["sizeof.curesv_pool_reservation"]
            if self.u32(a + L["curesv_pool_reservation.state"]) != L["CURESV_POOL_RES_ACTIVE"]:
                continue
            n = a + L["curesv_pool_reservation.name"]
            out[r] = {"name": self.b[n:n + L["CURESV_NAME_MAX"]].split(b"\0")[0].decode(
                          "utf-8", "replace"),
                      "used": self.i64(a + L["curesv_pool_reservation.used"]),
                      "size": self.u64(a + L["curesv_pool_reservation.size"]),
                      "members": self.u32(a + L["curesv_pool_reservation.members"]),
                      "device": struct.unpack_from(
                          "<i", self.b, a + L["curesv_pool_reservation.device"])[0]}
        return out

    def members(self):
        """The slots in use (up to the high water), with their lock's holder asked now."""
        L = self.L
        out = []
        for i in range(min(self.header("member_high"), L["CURESV_POOL_MEMBERS"])):
            a = L["curesv_pool_file.member"] + i * L["sizeof.curesv_pool_member"]
            state = self.u32(a + L["curesv_pool_member.state"])
            if state == L["CURESV_POOL_FREE"]:
                continue
            h = a + L["curesv_pool_member.held"]
            held = {k: v for k, v in enumerate(struct.unpack_from(
                "<%dq" % L["CURESV_POOL_ACCOUNTS"], self.b, h)) if v}
            d = a + L["curesv_pool_member.declared"]
            words = struct.unpack_from("<%dQ" % ((L["CURESV_POOL_RESERVATIONS"] + 63) // 64),
                                       self.b, d)
            declared = {r for r in range(L["CURESV_POOL_RESERVATIONS"])
                        if words[r // 64] >> (r % 64) & 1}
            out.append({"slot": i, "state": state, "held": held, "declared": declared,
                        "busy": self.u32(a + L["curesv_pool_member.busy"]),
                        "pid": self.i64(a + L["curesv_pool_member.pid"]),
                        "alive": self.locked(L["CURESV_POOL_LOCK_MEMBER0"] + i)})
        return out


def pool_alive(path):
    """The pids of the members that hold their lock now."""
    pf = PoolFile(path)
    try:
        return [m["pid"] for m in pf.members() if m["alive"]]
    finally:
        pf.close()


def pool_books(path):
    """What is wrong with the books of the pool at `path` once its dead are counted out, as a
    member or a reader that reclaims them would count them (curesv_pool_reclaim): their held bytes
    taken off each account, their reservations left (one with no member and no byte leaves the
    pool, its size going back to its device), or, where one died in the middle of an update or
    a recount is owed, every word recounted from the live members. Before that, each account's
    word must be what the members hold (the books add up). Afterwards, with no member alive:
    every device's claimed less its active reservations' sizes is 0, and no reservation holds a
    byte. Returns (problems, the dead counted out, whether the books were recounted)."""
    pf = PoolFile(path)
    try:
        if not pf.ok:
            return ["the pool file is not whole (%d bytes, magic, version or ready wrong)"
                    % len(pf.b)], 0, False
        L = pf.L
        shared0, ndev = L["CURESV_POOL_SHARED0"], L["CURESV_MAX_DEVICES"]
        devs, res, members = pf.devices(), pf.reservations(), pf.members()
        problems = ["member %d (pid %d) is alive after the program ended" % (m["slot"], m["pid"])
                    for m in members if m["alive"]]
        dead = [m for m in members if not m["alive"]]
        recount = (pf.header("frozen") or pf.header("stale") or
                   any(m["busy"] or m["state"] == L["CURESV_POOL_RECLAIMING"] for m in dead))
        claimed = [dv["claimed"] for dv in devs]
        if not recount:
            # no member died in the middle of an update: each word is what the members hold
            sizes = [sum(r["size"] for r in res.values() if r["device"] == d)
                     for d in range(ndev)]
            for d in range(ndev):
                held = sum(m["held"].get(shared0 + d, 0) for m in members)
                if claimed[d] != sizes[d] + held:
                    problems.append("device %d: claimed %d, but its reservations' sizes are %d "
                                    "and the members hold %d in its shared pool" %
                                    (d, claimed[d], sizes[d], held))
            for r, rv in res.items():
                held = sum(m["held"].get(r, 0) for m in members)
                declared = sum(r in m["declared"] for m in members)
                if rv["used"] != held or rv["members"] != declared:
                    problems.append("reservation '%s': used %d by %d members, but the members "
                                    "hold %d and %d declare it" %
                                    (rv["name"], rv["used"], rv["members"], held, declared))
            for r in sorted(set().union(*(m["declared"] for m in members)) - set(res)):
                problems.append("members declare reservation %d, which is not in the pool" % r)
        if recount:
            live = [m for m in members if m["alive"]]
            for r in list(res):
                res[r]["used"] = sum(m["held"].get(r, 0) for m in live)
                res[r]["members"] = sum(r in m["declared"] for m in live)
            claimed = [sum(m["held"].get(shared0 + d, 0) for m in live) for d in range(ndev)]
            for r in list(res):
                if res[r]["members"] == 0 and res[r]["used"] == 0:
                    del res[r]
                elif 0 <= res[r]["device"] < ndev:
                    claimed[res[r]["device"]] += res[r]["size"]
        else:
            for m in dead:
                for a, v in m["held"].items():
                    if a < shared0 and a in res:
                        res[a]["used"] -= v
                    elif shared0 <= a < shared0 + ndev:
                        claimed[a - shared0] -= v
                for r in m["declared"] & set(res):
                    res[r]["members"] = max(0, res[r]["members"] - 1)
                    if res[r]["members"] == 0 and res[r]["used"] == 0:
                        if 0 <= res[r]["device"] < ndev:
                            claimed[res[r]["device"]] -= res[r]["size"]
                        del res[r]
        for d in range(ndev):
            shared = claimed[d] - sum(r["size"] for r in res.values() if r["device"] == d)
            if shared != 0:
                problems.append("device %d: %d bytes in its shared pool once the dead were "
                                "counted out" % (d, shared))
        for rv in res.values():
            problems.append("reservation '%s' still in the pool once the dead were counted out "
                            "(used %d, %d members)" % (rv["name"], rv["used"], rv["members"]))
        return problems, len(dead), bool(recount)
    finally:
        pf.close()


# ---- one cell ---------------------------------------------------------------------------------------

def run(argv, env, send, on_ready=None):
    """Runs argv; with `send`, sends it once the program is ready, after on_ready(pid) looked at
    it (its AssertionError raised once the program ended)."""
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    first, seen = "", None
    if send:
        first = p.stdout.readline()
        if first.strip() == "hazard: ready":
            if on_ready:
                try:
                    on_ready(p.pid)
                except (AssertionError, OSError) as err:
                    seen = err
            p.send_signal(send)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("%s timed out" % argv[0])
    if seen:
        raise seen
    return p.returncode, first + out, err


def split_err(err):
    """stderr's curesv lines apart from the rest (a JSON report that went to stderr is curesv's)."""
    ours = [line for line in err.splitlines() if line.startswith("curesv: ")]
    # where a KeyboardInterrupt met Python's loop is timing: the traceback's line number is not
    rest = [re.sub(r'^  File "<string>", line \d+', '  File "<string>", line N', line)
            for line in err.splitlines() if not line.startswith("curesv: ")]
    text = "\n".join(rest)
    start = text.find('{"curesv"') if '{"curesv"' in text else text.find("{\n")
    report = None
    if start >= 0:
        try:
            report = json.loads(text[start:])
            rest = text[:start].splitlines()
        except ValueError:
            pass
    return ours, rest, report


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURESV_", "LD_PRELOAD"))}
    return env


def cell(args, hazard, fkey):
    feature = FEATURES[fkey]
    with tempfile.TemporaryDirectory(prefix="curesv-hazard-") as tmp:
        ctx = Ctx(args, tmp)
        argv = hazard.argv(ctx)
        env = base_env()
        if feature.signal_end:
            env["HAZARD_END"] = "TERM"
        # without curesv: the same program, its data file elsewhere
        plain_ctx_data = ctx.data + ".plain"
        plain_argv = [plain_ctx_data if a == ctx.data else a for a in argv]
        want_status, want_out, want_err = run(plain_argv, env, hazard.send)
        if want_status == 99 or (want_status in (126, 127) and hazard.root is False and
                                 "seccomp" in " ".join(argv)):
            raise Skip("the hazard could not be set up (%s)" % want_err.strip()[-120:])
        out_dir = ctx.mnt if hazard.out_in_mount else ctx.out
        files = hazard.files_for(fkey)
        env.update(feature.env(out_dir, ctx.out, files == "lost"))
        on_ready = None
        if fkey == "pool":
            if hazard.out_in_mount:
                env["HAZARD_KEEP"] = os.path.join(ctx.out, "kept")
            on_ready = lambda pid: pool_running(ctx, out_dir, [pid])  # noqa: E731
        if hazard.launcher:
            argv = [LAUNCHER, "--lib", args.lib, "--"] + argv
        else:
            env["LD_PRELOAD"] = " ".join(x for x in (args.sanitizer_runtime, args.lib) if x)
            if "tsan" in os.path.basename(args.sanitizer_runtime):
                # a child forked from threads and ending by exit() is a thread leak to TSan
                env["TSAN_OPTIONS"] = ":".join(o for o in (os.environ.get("TSAN_OPTIONS"),
                                                           "report_thread_leaks=0") if o)
        if hazard.twin:
            twin_results = twins(ctx, argv, env, fkey)
            for status, out, err in twin_results[1:]:
                expect("the twin's stdout", out, twin_results[0][1])
                expect("the twin's exit status", status, twin_results[0][0])
                if len(split_err(err)[0]) > 1:
                    raise AssertionError("curesv said %r" % (split_err(err)[0][:3],))
            status, out, err = twin_results[0]
        else:
            status, out, err = run(argv, env, hazard.send, on_ready)
        ours, rest, err_report = split_err(err)
        want_ours, want_rest, _ = split_err(want_err)
        expect("stdout", out, want_out)
        expect("the program's own stderr", rest, want_rest)
        if fkey == "exitcode" and want_status == 0 and files != "none" and hazard.leaks:
            expect("exit status (CURESV_ERROR_EXITCODE=%d, one leak)" % EXIT_CODE, status,
                   EXIT_CODE)
            expect("curesv's lines", len(ours), 1)
        else:
            expect("exit status", status, want_status)
            if len(ours) > 1:
                raise AssertionError("curesv said %d lines: %r" % (len(ours), ours[:3]))
        if hazard.data:
            with open(ctx.data, "rb") as f, open(plain_ctx_data, "rb") as g:
                expect("the program's data file", f.read(), g.read())
        if fkey == "pool":
            return check_pool(args, ctx, hazard, files, out_dir, ours, err_report, status)
        check_files(hazard, fkey, out_dir, ctx.out, ours, err_report)
        return "; ".join(ours)[:110]


def live_files(folder):
    d = os.path.join(folder, "curesv")
    return sorted(n for n in os.listdir(d) if n.endswith(".live")) if os.path.isdir(d) else []


def twins(ctx, argv, env, fkey):
    """Two programs at once, their live files in one folder: each has its own (pid 1 both, in
    namespaces of their own), neither removed by the other's start-up sweep while it runs, and
    none left once both ended; or one pool: each its own member, both alive while both run. Each
    must print what it prints alone."""
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
             for _ in range(2)]
    firsts = [p.stdout.readline() for p in procs]
    both = live_files(ctx.out) if fkey == "live" else None
    seen = None
    if fkey == "pool":
        try:
            pool_running(ctx, ctx.out, [1, 1])  # pid 1 in each namespace
        except (AssertionError, OSError) as err:
            seen = err
    results = []
    for p, first in zip(procs, firsts):
        try:
            out, err = p.communicate(input="", timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError("%s timed out" % argv[0])
        results.append((p.returncode, first + out, err))
    if seen:
        raise seen
    if fkey == "live":
        expect("live files while both ran", len(both), 2)
    return results


def pool_path(folder, ctx):
    return os.path.join(folder, "curesv", pool_name(ctx.out) + ".pool")


def pool_running(ctx, folder, pids):
    """While the program runs: its pool has one member a process, each holding its lock."""
    path = pool_path(folder, ctx)
    if not os.path.exists(path):
        raise AssertionError("no pool file while the program ran (%s)" % path)
    expect("the pids of the pool's members alive while the program ran", sorted(pool_alive(path)),
           sorted(pids))


def check_pool(args, ctx, hazard, files, out_dir, ours, err_report, status):
    """The pool column: pooled where the hazard leaves room for the pool file (the report names
    the pool, no line about it, the books zero once the program's dead are counted out, and the
    next member joins), unpooled after one line where it does not."""
    name, path = pool_name(ctx.out), pool_path(out_dir, ctx)
    said = [line for line in ours if "CURESV_POOL" in line]
    report_path = os.path.join(ctx.out, "report.json")
    if files == "none":
        expect("curesv's lines", ours, [])
        expect("files written by a program that never used CUDA", os.listdir(ctx.out), [])
        return ""
    if files == "lost":
        expect("curesv's lines (running unpooled)", len(ours), 1)
        if not said:
            raise AssertionError("the one line does not name CURESV_POOL: %r" % ours)
        if err_report is None:
            raise AssertionError("no report on stderr after %r" % ours)
        expect("the report's pool (running unpooled)", err_report.get("pool", "no key"), None)
        if out_dir == ctx.out:
            next_member(args, ctx, out_dir, name, path)
        return re.sub(r"'/[^']*/", "'", ours[0])[:110]  # the reason, not the folder
    if said:
        raise AssertionError("pooled, yet curesv said %r" % said)
    if files == "killed":
        expect("curesv's lines", ours, [])
    elif files == "either" and not os.path.exists(report_path):
        if len(ours) != 1:
            raise AssertionError("no report, and %d lines: %r" % (len(ours), ours))
    else:
        if not os.path.exists(report_path):
            raise AssertionError("no report file (files: %s; curesv said %r)" %
                                 (sorted(os.listdir(ctx.out)), ours))
        pool = load_report(report_path).get("pool", "no key")
        if not isinstance(pool, dict) or pool.get("name") != name or pool.get("path") != path:
            raise AssertionError("the report's pool: %r, want name %r, path %r" %
                                 (pool, name, path))
    kept = files == "kept-out"
    books_at = os.path.join(ctx.out, "kept", name + ".pool") if kept else path
    if not os.path.exists(books_at):
        raise AssertionError("no pool file at %s once the program ended" % books_at)
    problems, dead, recounted = pool_books(books_at)
    if status >= 0 and dead != hazard.dead_at_exit:
        # an exit gives the member's bytes back at once (curesv_pool_leave): none is left for
        # another member to find dead
        problems.insert(0, "the program exited, yet %d of its members never left the pool "
                           "(want %d)" % (dead, hazard.dead_at_exit))
    if problems:
        raise AssertionError("the pool's books: " + "; ".join(problems[:4]))
    if not kept:
        next_member(args, ctx, out_dir, name, path)
    return "pooled: %d dead counted out%s" % (dead, ", recounted" if recounted else "")


def next_member(args, ctx, folder, name, path):
    """The pool as the hazard left it takes the next member: the program run plainly in it joins
    without a line, its report names the pool, and once it left the books read zero again."""
    env = base_env()
    env.update(pool_env(folder, ctx.out, False))
    env["CURESV_REPORT_FILE"] = report = os.path.join(ctx.out, "next.json")
    env["LD_PRELOAD"] = " ".join(x for x in (args.sanitizer_runtime, args.lib) if x)
    status, _, err = run([ctx.prog, "plain"], env, None)
    expect("the next member's exit status", status, 0)
    expect("the next member's curesv lines", split_err(err)[0], [])
    pool = load_report(report).get("pool") if os.path.exists(report) else "no report"
    if not isinstance(pool, dict) or pool.get("name") != name:
        raise AssertionError("the next member's report's pool: %r, want %r" % (pool, name))
    problems = pool_books(path)[0]
    if problems:
        raise AssertionError("the pool's books after the next member: " + "; ".join(problems[:4]))


def load_report(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_files(hazard, fkey, out_dir, report_dir, ours, err_report):
    written = sorted(os.listdir(report_dir))
    if hazard.files == "none":
        expect("files written by a program that never used CUDA",
               [w for w in written if w != "curesv"], [])
        expect("curesv's lines", ours, [])
        return
    if hazard.files == "either":
        # written whole, or not at all after one line saying why (the signal interrupted what the
        # report would need); the process ended by the signal all the same, in time
        path = os.path.join(report_dir, "report.json")
        if os.path.exists(path):
            load_report(path)
            expect("curesv's lines beside a report", ours, [])
        elif len(ours) != 1:
            raise AssertionError("no report, and %d lines: %r" % (len(ours), ours))
        return
    if fkey == "live":
        # the live file goes with its process, whatever ended it (and none of a child's, nor of
        # an image that exec'd, is left behind)
        expect("live files left once the process ended", live_files(out_dir), [])
        if hazard.files == "lost":
            # the live books given up: one line says so, the program runs on
            expect("curesv's lines (the live books given up)", len(ours), 1)
        return
    if hazard.files in ("kept-out", "killed") or fkey == "exitcode":
        if hazard.files == "killed":
            expect("curesv's lines", ours, [])
        return
    if hazard.files == "lost":
        if len(ours) != 1:
            raise AssertionError("a file that cannot be written: one line, got %r" % (ours,))
        if fkey in ("report", "signal"):
            if err_report is None:
                raise AssertionError("no report on stderr after %r" % ours)
            expect("leaks in the report on stderr", err_report["leaks"]["count"], 1)
        return
    report_path = os.path.join(report_dir, "report.json")
    report = load_report(report_path) if os.path.exists(report_path) else None
    if report is None:
        raise AssertionError("no report file (files: %s; curesv said %r)" % (written, ours))
    expect("leaks in the report", report["leaks"]["count"], hazard.leaks)
    if fkey.startswith("trace") or fkey == "signal":
        problems = check_trace.check(os.path.join(out_dir, "trace"), report)
        if problems:
            raise AssertionError("trace: " + "; ".join(problems[:3]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true", help="print the table of rows and columns")
    ap.add_argument("--sanitizer-runtime", default="",
                    help="preloaded before a sanitized libcuresv.so (rows under the launcher, "
                         "which puts libcuresv.so first, are left out)")
    args = ap.parse_args()
    args.lib, args.bin = os.path.abspath(args.lib), os.path.abspath(args.bin)
    if args.list:
        for h in HAZARDS:
            print("%s: %s" % (h.name, ", ".join(FEATURES[f].name for f in h.features)))
        return 0
    rows, failed, skipped = [], 0, 0
    for hazard in HAZARDS:
        for fkey in hazard.features:
            name = "%s | %s" % (hazard.name, FEATURES[fkey].name)
            if args.only and args.only not in name:
                continue
            try:
                if (hazard.launcher or not hazard.sanitized) and args.sanitizer_runtime:
                    continue
                if fkey in hazard.not_under_tsan and "tsan" in os.path.basename(
                        args.sanitizer_runtime):
                    continue
                if hazard.root and os.geteuid() != 0:
                    raise Skip("not root (mounts and namespaces need it)")
                if hazard.root and not shutil.which("unshare"):
                    raise Skip("unshare (util-linux) is missing")
                said = ""
                for _ in range(hazard.repeat):
                    said = cell(args, hazard, fkey) or said
                rows.append((name, "pass", said))
            except Skip as why:
                skipped += 1
                rows.append((name, "SKIPPED", str(why)))
            except (AssertionError, OSError, ValueError, KeyError,
                    subprocess.SubprocessError) as err:
                failed += 1
                rows.append((name, "FAIL", "%s: %s" % (type(err).__name__, str(err)[:400])))
    width = max((len(r[0]) for r in rows), default=10)
    for name, result, why in rows:
        print("%-*s  %-7s %s" % (width, name, result, why))
    print("%d passed, %d failed, %d SKIPPED" % (len(rows) - failed - skipped, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
