#!/usr/bin/env python3
"""Shared pools (CURESV_POOL) across processes, on the simulated stack. Each process's driver is its
own, so the capacity is curesv's (CURESV_CAPACITY). The pool file is read here by the offsets
pool_layout prints (core/pool/pool.h's structures as this build lays them out).

  stress         16 processes x 4 threads allocate and free random sizes (cudaMalloc, cuMemAlloc)
                 in enforce mode against one reservation and one capacity for --seconds, while
                 random ones are SIGKILLed and started again: their own count of bytes, summed over
                 the processes alive in shared memory, never passes the capacity or the
                 reservation; after all exit, and one more member reclaimed the dead, the pool's
                 books read zero and the folder holds the pool file alone
  pid reuse      members in their own pid namespaces, all pid 1, two started at the same moment:
                 one killed, a new pid 1 reclaims it and only it; a pid of the root namespace
                 given to a new member after its holder was killed (ns_last_pid). Root only
  joining        256 processes joining at once, each declaring a reservation (time per join,
                 against the same start unpooled);
                 1,024 members, the 1,025th runs unpooled with one line and works; leaving frees
                 a slot another process then takes
  permissions    CURESV_POOL=/folder: world-writable, a symbolic link, another owner's: one line,
                 unpooled, exit status kept; 0770 of a group: the file is 0660 of that group and a
                 member of the group joins as another user; another user cannot join a private pool
  hostile file   torn, random, wrong magic, version, size, never finished, a valid header over
                 hostile books: one line and unpooled, or joined, never a crash
  meminfo        CURESV_MEMINFO=budget: cudaMemGetInfo and cuMemGetInfo give the pool's figures
                 in two processes, attached to a reservation and not
  observe        two processes past the capacity both succeed, the pool counts them over; a
                 member's exit gives its bytes back at once; a forked child's allocation is not
                 the pool's
  declare        a reservation declared with another size: one line, the pool's size enforced;
                 curesv_transfer between the pool's reservations keeps the books exact
  threads        16 threads of one member declare reservations at the same moment: each its own
                 slot of the pool, the books zero after
  release        a member releases a reservation another still declares, with bytes of it live:
                 the device never holds more than the capacity

    pool.py --lib build/plain/libcuresv.so --bin build/plain/it [--seconds 30] [CASE...]

Prints one table and "N passed, N failed, N SKIPPED".
"""
import argparse
import fcntl
import os
import random
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
F_OFD_GETLK = 36
FLOCK = struct.Struct("hhqqi4x")  # struct flock: l_type, l_whence, l_start, l_len, l_pid
NOBODY = 65534
CURESV_ERR_CAPACITY = 4
CUDA_ERROR_OOM = 2  # cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY


class Skipped(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def expect_true(what, cond):
    if not cond:
        raise AssertionError(what)


# ---- the pool file -------------------------------------------------------------------------------

class Layout:
    """pool_layout's output: constants, sizes and offsets."""

    def __init__(self, binary):
        out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
        self.v = {k: int(v) for k, v in (line.split() for line in out.splitlines())}

    def __getitem__(self, k):
        return self.v[k]


class Books:
    """One read of a pool file: its figures, and which member slots are locked by a process."""

    def __init__(self, lay, path):
        self.lay = lay
        self.path = path
        with open(path, "rb") as f:
            self.raw = f.read()
        expect("pool file size", len(self.raw), lay["sizeof.curesv_pool_file"])
        fd = os.open(path, os.O_RDWR)
        try:
            self.locked = [self._locked(fd, i) for i in range(self.member_high())]
        finally:
            os.close(fd)

    def _locked(self, fd, i):
        lk = FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, self.lay["CURESV_POOL_LOCK_MEMBER0"] + i, 1, 0)
        return FLOCK.unpack(fcntl.fcntl(fd, F_OFD_GETLK, lk))[0] != fcntl.F_UNLCK

    def _u(self, fmt, off):
        return struct.unpack_from(fmt, self.raw, off)[0]

    def header(self, field, fmt="Q"):
        return self._u(fmt, self.lay["curesv_pool_header." + field])

    def member_high(self):
        return min(self.header("member_high", "I"), self.lay["CURESV_POOL_MEMBERS"])

    def dev(self, d, field):
        off = self.lay["curesv_pool_file.dev"] + d * self.lay["sizeof.curesv_pool_device"]
        fmt = "q" if field in ("claimed", "peak") else "Q"
        return self._u(fmt, off + self.lay["curesv_pool_device." + field])

    def res(self, r, field):
        off = self.lay["curesv_pool_file.res"] + r * self.lay["sizeof.curesv_pool_reservation"]
        at = off + self.lay["curesv_pool_reservation." + field]
        if field == "name":
            return self.raw[at:at + self.lay["CURESV_NAME_MAX"]].split(b"\0")[0].decode(
                "utf-8", "replace")
        fmt = {"used": "q", "peak": "q", "state": "I", "members": "I", "device": "i"}.get(
            field, "Q")
        return self._u(fmt, at)

    def reservations(self):
        """{name: {size, used, members, peak, refusals, over, device}} of the active ones."""
        out = {}
        for r in range(self.lay["CURESV_POOL_RESERVATIONS"]):
            if self.res(r, "state") == 1:
                out[self.res(r, "name")] = {k: self.res(r, k) for k in (
                    "size", "used", "members", "peak", "refusals", "over", "device")}
                out[self.res(r, "name")]["index"] = r
        return out

    def member(self, i, field):
        off = self.lay["curesv_pool_file.member"] + i * self.lay["sizeof.curesv_pool_member"]
        at = off + self.lay["curesv_pool_member." + field]
        fmt = {"state": "I", "busy": "I", "uid": "I"}.get(field, "q")
        return self._u(fmt, at)

    def held(self, i, account):
        off = self.lay["curesv_pool_file.member"] + i * self.lay["sizeof.curesv_pool_member"]
        return self._u("q", off + self.lay["curesv_pool_member.held"] + 8 * account)

    def shared_account(self, d=0):
        return self.lay["CURESV_POOL_SHARED0"] + d

    def members(self):
        """[(slot, state, pid, uid, locked)] of the slots not free."""
        return [(i, self.member(i, "state"), self.member(i, "pid"), self.member(i, "uid"),
                 self.locked[i])
                for i in range(self.member_high()) if self.member(i, "state") != 0]

    def alive(self):
        return [m for m in self.members() if m[4]]

    def member_by_pid(self, pid):
        found = [m for m in self.alive() if m[2] == pid]
        expect("live members of pid %d" % pid, len(found), 1)
        return found[0][0]

    def held_sum(self, account):
        return sum(self.held(i, account) for i in range(self.member_high())
                   if self.member(i, "state") != 0)

    def expect_zero(self):
        """Every device, reservation and member slot empty: the books of a pool no one holds."""
        for d in range(self.lay["CURESV_MAX_DEVICES"]):
            expect("device %d claimed" % d, self.dev(d, "claimed"), 0)
        for name, r in self.reservations().items():
            expect("reservation %s used" % name, r["used"], 0)
        expect("member slots not free", self.members(), [])
        expect("frozen", self.header("frozen", "I"), 0)
        expect("stale", self.header("stale", "I"), 0)


# ---- programs ------------------------------------------------------------------------------------

class Member:
    """pool_proc under the shim, answering one line per command."""

    def __init__(self, ctx, env, prefix=(), pass_fds=(), user=None):
        self.ctx = ctx
        self.err_path = os.path.join(ctx.tmp, "member-%d.err" % len(ctx.programs))
        self.err = open(self.err_path, "w")
        argv = list(prefix) + [ctx.exe("pool_proc")]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, env=env, text=True, pass_fds=pass_fds,
                                  preexec_fn=user)
        ctx.programs.append(self)

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise AssertionError("pool_proc ended at %r (rc %r): %s" % (
                line, self.p.poll(), self.stderr()))
        return out.split()

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def alloc(self, nbytes, driver=False):
        out = self.cmd("%s %d" % ("d" if driver else "m", nbytes))
        expect("allocation of %d bytes" % nbytes, out[0], "ok")
        return int(out[1])

    def refused(self, nbytes, driver=False):
        out = self.cmd("%s %d" % ("d" if driver else "m", nbytes))
        expect("allocation of %d bytes refused" % nbytes, out, ["err", str(CUDA_ERROR_OOM)])

    def status(self, line):
        out = self.cmd(line)
        expect("answer to %r" % line, out[0], "status")
        return int(out[1])

    def info(self, driver=False):
        out = self.cmd("dinfo" if driver else "info")
        expect("meminfo answer", out[0], "info")
        return int(out[1]), int(out[2])

    def pid(self):
        return int(self.cmd("pid")[1])

    def exit(self, code=0):
        self.send("exit %d" % code)
        rc = self.p.wait(timeout=30)
        self.p.stdin.close()
        self.p.stdout.close()
        return rc

    def stderr(self):
        self.err.flush()
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def curesv_lines(self):
        return [line for line in self.stderr().splitlines() if line.startswith("curesv:")]

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        for s in (self.p.stdin, self.p.stdout):
            try:
                s.close()
            except OSError:
                pass
        self.err.close()


class Ctx:
    """A case's own XDG_RUNTIME_DIR in /dev/shm: its pools' files are its own."""

    def __init__(self, args, lay, tmp):
        self.args, self.lay, self.tmp = args, lay, tmp
        self.xdg = tempfile.mkdtemp(prefix="curesv-pool-test-",
                                    dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.folder = os.path.join(self.xdg, "curesv")
        self.programs = []
        self.extra = []

    def exe(self, name):
        return os.path.join(self.args.bin, name)

    def env(self, **more):
        pre = self.args.lib
        if self.args.sanitizer_runtime:
            pre = self.args.sanitizer_runtime + ":" + pre
        env = dict(os.environ, XDG_RUNTIME_DIR=self.xdg, LD_PRELOAD=pre, CURESV_REPORT="off")
        for k in [k for k in env if k.startswith("CURESV_") and k != "CURESV_REPORT"]:
            del env[k]
        env.update(more)
        return env

    def pool_path(self, name):
        return os.path.join(self.folder, name + ".pool")

    def books(self, name_or_path):
        path = name_or_path if name_or_path.startswith("/") else self.pool_path(name_or_path)
        return Books(self.lay, path)

    def member(self, env, **kw):
        return Member(self, env, **kw)

    def close(self):
        for p in self.programs:
            p.kill()
        shutil.rmtree(self.xdg, ignore_errors=True)
        for path in self.extra:
            shutil.rmtree(path, ignore_errors=True)


def one_line(lines, pattern, what):
    """Exactly one curesv line, matching `pattern`."""
    if len(lines) != 1 or not re.search(pattern, lines[0]):
        raise AssertionError("%s: want one line matching %r, got %r" % (what, pattern, lines))
    return lines[0]


# ---- stress --------------------------------------------------------------------------------------

SLOT_BYTES, SHARED_HEAD = 64, 256
STRESS_CAP, STRESS_RES = 64 * MiB, 16 * MiB


def stress(ctx):
    n, seconds = ctx.args.procs, ctx.args.seconds
    shared = os.path.join(ctx.tmp, "stress.shared")
    with open(shared, "wb") as f:
        f.write(bytes(SHARED_HEAD + 64 * SLOT_BYTES))
    with open(shared, "r+b") as f:
        f.seek(32)
        f.write(struct.pack("QQI", STRESS_CAP, STRESS_RES, n))
    env = ctx.env(CURESV_POOL="stress", CURESV_MODE="enforce", CURESV_CAPACITY="64M",
                  CURESV_RESERVATIONS="job=16M", CURESV_ATTACH="res*=job")
    rng = random.Random(ctx.args.seed)
    began = time.monotonic()
    deadline = began + seconds
    procs, errs, seeds = {}, [], iter(range(1, 1 << 30))

    def start(slot):
        err = open(os.path.join(ctx.tmp, "stress-%d-%d.err" % (slot, len(errs))), "w+")
        errs.append(err)
        left = max(0.5, deadline - time.monotonic())
        procs[slot] = subprocess.Popen(
            [ctx.exe("pool_stress"), shared, str(slot), str(next(seeds)), "%.2f" % left],
            stdout=subprocess.DEVNULL, stderr=err, env=env)

    for slot in range(n):
        start(slot)
    kills = 0
    # slot 0 is never killed: the reservation always has a live declarer
    while ctx.args.kill and time.monotonic() < began + seconds * 0.8:
        time.sleep(rng.uniform(0.02, 0.25))
        slot = rng.randrange(1, n)
        p = procs[slot]
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        start(slot)
    bad = []
    for slot, p in procs.items():
        try:
            rc = p.wait(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timed out"
        if rc != 0:
            bad.append("slot %d: %s" % (slot, rc))
    expect("members that did not end well", bad, [])
    for err in errs:
        err.seek(0)
        # refusals are all a member may say
        lines = [line for line in err.read().splitlines() if " refused " not in line]
        expect("a member's lines but refusals", lines, [])
        err.close()
    with open(shared, "rb") as f:
        raw = f.read()
    violations, checks, skipped, _ = struct.unpack_from("QQQQ", raw, 0)
    msg = raw[64:256].split(b"\0")[0].decode()
    slots = [struct.unpack_from("qqQQQq", raw, SHARED_HEAD + i * SLOT_BYTES) for i in range(n)]
    allocs = sum(s[2] for s in slots)
    refusals = sum(s[3] for s in slots)
    expect("violations (%s)" % msg, violations, 0)
    expect_true("only %d consistent checks (%d skipped)" % (checks, skipped), checks > 1000)
    expect_true("no refusal: the capacity was never reached", refusals > 100)
    expect_true("no process was killed", kills > 0 or not ctx.args.kill)
    path = ctx.pool_path("stress")
    # one more dies holding 8 MiB: the last member below must reclaim it
    victim = ctx.member(env)
    victim.alloc(8 * MiB)
    victim.kill()
    before = ctx.books("stress")
    dead = [m for m in before.members() if not m[4]]
    expect("members alive after all exited", before.alive(), [])
    expect_true("the killed member left on the books", len(dead) >= 1)
    # the next member that would be refused reclaims the dead first: 48 MiB is the shared pool's
    last = ctx.member(ctx.env(CURESV_POOL="stress", CURESV_MODE="enforce",
                              CURESV_CAPACITY="64M", CURESV_RESERVATIONS="job=16M"))
    last.alloc(STRESS_CAP - STRESS_RES)
    expect("last member's exit", last.exit(0), 0)
    after = ctx.books("stress")
    after.expect_zero()
    expect("files in the pool's folder", sorted(os.listdir(ctx.folder)), ["stress.pool"])
    expect_true("the pool file is 0600", stat.S_IMODE(os.stat(path).st_mode) == 0o600)
    return ("%d procs x 4 threads %.0fs: %d allocs, %d refused, %d checks (%d skipped), "
            "%d kills, %d dead left then reclaimed, reclaims %d recounts %d, peak %.1f MiB; books 0"
            % (n, seconds, allocs, refusals, checks, skipped, kills, len(dead),
               after.header("reclaims"), after.header("recounts"),
               after.dev(0, "peak") / MiB))


# ---- pid reuse and pid namespaces ----------------------------------------------------------------

def can_unshare():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "true"],
                          capture_output=True).returncode == 0


def pid_reuse(ctx):
    if not can_unshare():
        raise Skipped("not root, or unshare --pid cannot run here")
    env = ctx.env(CURESV_POOL="ns", CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    ns = ["unshare", "--pid", "--fork", "--kill-child"]
    gate_r, gate_w = os.pipe()
    x = ctx.member(env, prefix=ns, pass_fds=(gate_r,))
    y = ctx.member(env, prefix=ns, pass_fds=(gate_r,))
    os.close(gate_r)
    expect("pid of the first in its namespace", x.pid(), 1)
    expect("pid of the second in its namespace", y.pid(), 1)
    # both start curesv, and join, at the same moment
    for m in (x, y):
        m.send("gate")
    os.write(gate_w, b"xy")
    os.close(gate_w)
    for m in (x, y):
        out = m.p.stdout.readline().split()
        expect("first call", out[0], "first")
    b = ctx.books("ns")
    al = b.alive()
    expect("live members (pid 1 twice)", sorted(m[2] for m in al), [1, 1])
    joined = [b.member(m[0], "joined_ns") for m in al]
    apart_ms = abs(joined[0] - joined[1]) / 1e6
    x.alloc(24 * MiB)
    y.alloc(16 * MiB)
    b = ctx.books("ns")
    slots = {m[0]: b.held(m[0], b.shared_account()) for m in b.alive()}
    expect("held per member", sorted(slots.values()), [16 * MiB, 24 * MiB])
    x_slot = [s for s, h in slots.items() if h == 24 * MiB][0]
    y_slot = [s for s, h in slots.items() if h == 16 * MiB][0]
    x.kill()
    b = wait_unlocked(ctx, "ns", x_slot)
    expect("claimed with the dead unreclaimed", b.dev(0, "claimed"), 40 * MiB)
    expect_true("the dead member's slot is no longer locked", not b.locked[x_slot])
    # a new pid 1 (the dead one's pid) needs the dead's bytes: reclaimed before a refusal
    z = ctx.member(env, prefix=ns)
    expect("pid of the newcomer", z.pid(), 1)
    z.alloc(40 * MiB)
    b = ctx.books("ns")
    expect("claimed after the reclaim", b.dev(0, "claimed"), 56 * MiB)
    expect("the dead member's slot", b.member(x_slot, "state"), 0)
    expect("the live namesake's slot held", b.held(y_slot, b.shared_account()), 16 * MiB)
    expect("live members", sorted(m[2] for m in b.alive()), [1, 1])
    expect("reclaims", b.header("reclaims"), 1)
    # and the live one is never taken for dead: a refusal reclaims nothing of it
    z.refused(16 * MiB)
    b = ctx.books("ns")
    expect("claimed after a refusal", b.dev(0, "claimed"), 56 * MiB)
    expect("reclaims after a refusal", b.header("reclaims"), 1)
    root_ns = reuse_root_pid(ctx)
    for m in (y, z):
        expect("exit", m.exit(0), 0)
    ctx.books("ns").expect_zero()
    return ("3 members pid 1 in their own namespaces (2 joined %.1f ms apart): dead one reclaimed "
            "once, live kept; %s" % (apart_ms, root_ns))


def wait_unlocked(ctx, pool, slot):
    """The books once member slot `slot`'s lock is gone (a killed unshare's child dies after it)."""
    for _ in range(200):
        b = ctx.books(pool)
        if not b.locked[slot]:
            return b
        time.sleep(0.01)
    raise AssertionError("member slot %d still locked 2 s after its process was killed" % slot)


def reuse_root_pid(ctx):
    """A member killed, and its pid given to the next member through ns_last_pid."""
    knob = "/proc/sys/kernel/ns_last_pid"
    if not os.access(knob, os.W_OK):
        return "ns_last_pid not writable: root namespace reuse SKIPPED"
    env = ctx.env(CURESV_POOL="reuse", CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    for attempt in range(40):
        a = ctx.member(env)
        pid = a.pid()
        a.alloc(48 * MiB)
        a.kill()
        try:
            with open(knob, "w") as f:
                f.write(str(pid - 1))
        except OSError as err:
            return "ns_last_pid: %s: root namespace reuse SKIPPED" % err
        b = ctx.member(env)
        if b.pid() != pid:
            b.exit(0)
            ctx.books("reuse")  # readable
            reclaim_by_member(ctx, env)
            continue
        before = ctx.books("reuse")
        expect("the dead's bytes before", before.dev(0, "claimed"), 48 * MiB)
        expect("live members of pid %d" % pid, [m[2] for m in before.alive()], [])
        b.alloc(32 * MiB)  # needs the dead's 48 MiB back
        after = ctx.books("reuse")
        expect("claimed with pid %d reused" % pid, after.dev(0, "claimed"), 32 * MiB)
        expect("live members", [m[2] for m in after.alive()], [pid])
        expect("exit", b.exit(0), 0)
        ctx.books("reuse").expect_zero()
        return "pid %d reused in the root namespace (try %d): the new holder kept, the dead " \
               "reclaimed" % (pid, attempt + 1)
    raise AssertionError("pid never reused in 40 tries")


def reclaim_by_member(ctx, env):
    """A member that needs the whole capacity: the dead are reclaimed before it is answered."""
    m = ctx.member(env)
    m.alloc(64 * MiB)
    m.exit(0)


# ---- joining -------------------------------------------------------------------------------------

def start_gated(ctx, env, n):
    gate_r, gate_w = os.pipe()
    ms = [ctx.member(env, pass_fds=(gate_r,)) for _ in range(n)]
    os.close(gate_r)
    for m in ms:
        m.pid()  # running, its libraries loaded
    for m in ms:
        m.send("gate")
    began = time.monotonic()
    opened_ns = time.time_ns()
    os.write(gate_w, b"g" * n)
    os.close(gate_w)
    firsts = []
    for m in ms:
        out = m.p.stdout.readline().split()
        expect("first call", out[:1] + out[2:], ["first", "0"])
        firsts.append(int(out[1]))
    ctx.gate_opened_ns = opened_ns
    return ms, sorted(firsts), time.monotonic() - began


def joining(ctx):
    n = 256
    # each declares a reservation as it starts: joining and declaring at once
    unpooled = ctx.env(CURESV_RESERVATIONS="job=1M", CURESV_CAPACITY="1G")
    base, t_base, wall_base = start_gated(ctx, unpooled, n)
    for m in base:
        expect("exit", m.exit(0), 0)
    env = dict(unpooled, CURESV_POOL="many")
    ms, t_pool, wall_pool = start_gated(ctx, env, n)
    b = ctx.books("many")
    expect_unpooled(ms)
    expect("members", len(b.alive()), n)
    expect("members of the reservation", b.reservations()["job"]["members"], n)
    expect("distinct slots", len({m[0] for m in b.alive()}), n)
    expect("joins", b.header("joins"), n)
    joined = sorted(b.member(m[0], "joined_ns") - ctx.gate_opened_ns for m in b.alive())
    median = lambda v: v[len(v) // 2]  # noqa: E731
    # reported, not held to a bound: speed is the benchmarks' (make bench), and this machine's
    # load is not the test's
    per_join_ms = (sum(t_pool) - sum(t_base)) / n / 1e6
    for m in ms:
        expect("exit", m.exit(0), 0)
    b = ctx.books("many")
    b.expect_zero()
    expect("leaves", b.header("leaves"), n)
    ctx.timing = ("256 at once: joined %.1f ms (median) and %.1f ms (last) after the gate "
                  "opened; first call median %.2f ms p99 %.2f ms max %.2f ms pooled, "
                  "%.2f / %.2f / %.2f ms unpooled; %.2f ms a join (mean difference); all answered "
                  "in %.2f s pooled, %.2f s unpooled"
                  % (median(joined) / 1e6, joined[-1] / 1e6, median(t_pool) / 1e6,
                     t_pool[int(n * 0.99)] / 1e6, t_pool[-1] / 1e6,
                     median(t_base) / 1e6, t_base[int(n * 0.99)] / 1e6, t_base[-1] / 1e6,
                     per_join_ms, wall_pool, wall_base))
    print("joining: " + ctx.timing, flush=True)
    return ctx.timing


def expect_unpooled(ms):
    """None of members `ms` said a line (ran unpooled, say)."""
    said = [m.curesv_lines() for m in ms if m.curesv_lines()]
    if said:
        raise AssertionError("%d of %d members said a line, e.g. %r" % (
            len(said), len(ms), said[0][0]))


def bound(ctx):
    most = ctx.lay["CURESV_POOL_MEMBERS"]
    env = ctx.env(CURESV_POOL="full", CURESV_MODE="enforce", CURESV_CAPACITY="1G")
    ms = []
    for _ in range(most):
        ms.append(ctx.member(env))
        ms[-1].send("m 65536")
    for m in ms:
        expect("a member's allocation", m.p.stdout.readline().split()[0], "ok")
    b = ctx.books("full")
    expect_unpooled(ms)
    expect("members", len(b.alive()), most)
    expect("claimed", b.dev(0, "claimed"), most * 65536)
    extra = ctx.member(env)
    pid = extra.pid()
    extra.alloc(4 * MiB)
    extra.alloc(1 * MiB, driver=True)
    b = ctx.books("full")
    expect("claimed with one unpooled", b.dev(0, "claimed"), most * 65536)
    expect_true("the unpooled process is no member", pid not in [m[2] for m in b.alive()])
    expect("exit status of the unpooled", extra.exit(5), 5)
    line = one_line(extra.curesv_lines(), r"CURESV_POOL=full.*%d members.*unpooled" % most,
                    "the 1,025th")
    # one leaves: its slot is free for the next
    gone = ms.pop(100)
    expect("exit", gone.exit(0), 0)
    again = ctx.member(env)
    again.alloc(65536)
    b = ctx.books("full")
    expect("members", len(b.alive()), most)
    expect("claimed", b.dev(0, "claimed"), most * 65536)
    expect("lines of a member that took a freed slot", again.curesv_lines(), [])
    ms.append(again)
    for m in ms:
        m.send("exit 0")
    for m in ms:
        expect("exit", m.p.wait(timeout=60), 0)
    b = ctx.books("full")
    b.expect_zero()
    return "%d members, the next unpooled with one line (%s)" % (most, line.strip())


# ---- permissions ---------------------------------------------------------------------------------

def as_user(uid, gid, groups=()):
    def demote():
        os.setgroups(list(groups))
        os.setgid(gid)
        os.setuid(uid)
    return demote


def permissions(ctx):
    base = tempfile.mkdtemp(prefix="curesv-pool-dirs-")
    ctx.extra.append(base)
    os.chmod(base, 0o755)
    results = []

    def refused(folder, pattern, what):
        m = ctx.member(ctx.env(CURESV_POOL=folder, CURESV_MODE="enforce"))
        m.alloc(MiB)
        expect("%s: exit status" % what, m.exit(7), 7)
        one_line(m.curesv_lines(), r"CURESV_POOL=%s.*%s.*unpooled" % (re.escape(folder), pattern),
                 what)
        results.append(what)

    world = os.path.join(base, "world")
    os.mkdir(world)
    os.chmod(world, 0o777)
    refused(world, "every user", "0777 folder")
    expect("files in the 0777 folder", os.listdir(world), [])
    link = os.path.join(base, "link")
    good = os.path.join(base, "good")
    os.mkdir(good)
    os.chmod(good, 0o770)
    os.symlink(good, link)
    refused(link, "symbolic link", "symbolic link")
    expect("files behind the link", os.listdir(good), [])
    if os.geteuid() != 0:
        return ", ".join(results) + "; another owner, group, another user: SKIPPED (not root)"
    other = os.path.join(base, "other")
    os.mkdir(other)
    os.chmod(other, 0o770)
    os.chown(other, NOBODY, 0)
    refused(other, "owned by uid %d" % NOBODY, "another owner's folder")
    expect("files in the other owner's folder", os.listdir(other), [])
    # a group's folder: root's, 0770, group `group`; nobody joins as one of the group
    group = 4242
    os.chown(good, 0, group)
    env = ctx.env(CURESV_POOL=good, CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    a = ctx.member(env)
    a.alloc(8 * MiB)
    pool = os.path.join(good, "curesv.pool")
    st = os.stat(pool)
    expect("shared pool file mode", oct(stat.S_IMODE(st.st_mode)), oct(0o660))
    expect("shared pool file group", st.st_gid, group)
    expect("lines of the group's member", a.curesv_lines(), [])
    nb = ctx.member(dict(env, XDG_RUNTIME_DIR=nobody_dir(ctx)),
                    user=as_user(NOBODY, NOBODY, [group]))
    nb.alloc(4 * MiB)
    b = ctx.books(pool)
    expect("members' uids", sorted(m[3] for m in b.alive()), [0, NOBODY])
    expect("claimed by both users", b.dev(0, "claimed"), 12 * MiB)
    expect("lines of the group's other user", nb.curesv_lines(), [])
    # without the group, the folder is shut
    outsider = ctx.member(dict(env, XDG_RUNTIME_DIR=nobody_dir(ctx)),
                          user=as_user(NOBODY, NOBODY, []))
    outsider.alloc(MiB)
    expect("exit status of an outsider", outsider.exit(3), 3)
    one_line(outsider.curesv_lines(), r"CURESV_POOL=.*unpooled", "an outsider")
    expect("claimed after the outsider", ctx.books(pool).dev(0, "claimed"), 12 * MiB)
    for m in (a, nb):
        expect("exit", m.exit(0), 0)
    ctx.books(pool).expect_zero()
    results.append("0770 of a group: file 0660 of it, two users in one pool, an outsider refused")
    # a private pool: another user naming it gets its own
    priv = ctx.env(CURESV_POOL="priv", CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    r = ctx.member(priv)
    r.alloc(8 * MiB)
    theirs = nobody_dir(ctx)
    fallback = "/dev/shm/curesv-%d" % NOBODY  # where nobody's private pools go
    if not os.path.exists(fallback):
        ctx.extra.append(fallback)
    nb = ctx.member(dict(priv, XDG_RUNTIME_DIR=ctx.xdg), user=as_user(NOBODY, NOBODY, []))
    nb.alloc(8 * MiB)
    b = ctx.books("priv")
    expect("members of the private pool", [(m[2], m[3]) for m in b.alive()], [(r.pid(), 0)])
    expect("claimed in the private pool", b.dev(0, "claimed"), 8 * MiB)
    # and naming the private folder itself is refused
    intruder = ctx.member(dict(priv, CURESV_POOL=ctx.folder, XDG_RUNTIME_DIR=theirs),
                          user=as_user(NOBODY, NOBODY, []))
    intruder.alloc(MiB)
    expect("exit status of an intruder", intruder.exit(4), 4)
    one_line(intruder.curesv_lines(), r"CURESV_POOL=.*unpooled", "an intruder")
    expect("claimed in the private pool", ctx.books("priv").dev(0, "claimed"), 8 * MiB)
    for m in (r, nb):
        expect("exit", m.exit(0), 0)
    results.append("another user cannot join a private pool")
    return "; ".join(results)


def nobody_dir(ctx):
    d = getattr(ctx, "nobody_xdg", None)
    if d is None:
        d = tempfile.mkdtemp(prefix="curesv-pool-nobody-", dir="/dev/shm")
        os.chown(d, NOBODY, NOBODY)
        ctx.extra.append(d)
        ctx.nobody_xdg = d
    return d


def hostile(ctx):
    lay = ctx.lay
    size = lay["sizeof.curesv_pool_file"]
    env = ctx.env(CURESV_POOL="good", CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    m = ctx.member(env)
    m.alloc(MiB)
    expect("exit", m.exit(0), 0)
    with open(ctx.pool_path("good"), "rb") as f:
        good = bytearray(f.read())
    rng = random.Random(ctx.args.seed)

    def patched(fmt, off, v):
        raw = bytearray(good)
        struct.pack_into(fmt, raw, off, v)
        return bytes(raw)

    h = lambda f: lay["curesv_pool_header." + f]  # noqa: E731
    files = [
        ("torn", bytes(good[:size // 2]), "bytes, %d expected" % size),
        ("torn at 1 KiB", bytes(good[:1024]), "expected"),
        ("random", bytes(rng.getrandbits(8) for _ in range(4096)) * (size // 4096) +
         bytes(size % 4096), "not a curesv pool file"),
        ("wrong magic", patched("Q", h("magic"), 0x1122334455667788),
         "not a curesv pool file"),
        ("wrong version", patched("I", h("version"), 99), "version 99"),
        ("longer", bytes(good) + bytes(4096), "expected"),
        ("size that lies", patched("Q", h("total_bytes"), size * 2), "expected"),
        ("never finished", patched("I", h("ready"), 0), "never finished"),
        ("another build", patched("Q", h("total_bytes") - 8, 12345), "another build"),
    ]
    done = []
    for name, content, pattern in files:
        pool = "h%d" % len(done)
        with open(ctx.pool_path(pool), "wb") as f:
            f.write(content)
        os.chmod(ctx.pool_path(pool), 0o600)
        m = ctx.member(dict(env, CURESV_POOL=pool))
        m.alloc(MiB)
        m.alloc(MiB, driver=True)
        expect("%s: exit status" % name, m.exit(9), 9)
        one_line(m.curesv_lines(), r"CURESV_POOL=%s.*%s.*unpooled" % (pool, re.escape(pattern)),
                 name)
        with open(ctx.pool_path(pool), "rb") as f:
            expect("%s: the file is left as it was" % name, f.read() == content, True)
        done.append(name)
    # a valid header over hostile books: joined, never a crash, exit status kept
    mem = lay["curesv_pool_file.member"]
    res = lay["curesv_pool_file.res"]
    dev = lay["curesv_pool_file.dev"]
    books = bytearray(good)
    for off in range(dev, size, 4096):
        books[off:off + 64] = bytes(rng.getrandbits(8) for _ in range(64))
    struct.pack_into("I", books, h("member_high"), 0xffffffff)
    struct.pack_into("I", books, res + lay["curesv_pool_reservation.state"], 1)
    struct.pack_into("i", books, res + lay["curesv_pool_reservation.device"], -7)
    name_at = res + lay["curesv_pool_reservation.name"]
    books[name_at:name_at + lay["CURESV_NAME_MAX"]] = b"J" * lay["CURESV_NAME_MAX"]
    struct.pack_into("q", books, dev + lay["curesv_pool_device.claimed"], -(1 << 62))
    struct.pack_into("Q", books, dev + lay["curesv_pool_device.capacity"], 1)
    for i in range(0, lay["CURESV_POOL_MEMBERS"], 3):
        struct.pack_into("I", books, mem + i * lay["sizeof.curesv_pool_member"], 2)
    with open(ctx.pool_path("books"), "wb") as f:
        f.write(books)
    os.chmod(ctx.pool_path("books"), 0o600)
    m = ctx.member(dict(env, CURESV_POOL="books", CURESV_RESERVATIONS="J=1M"))
    m.send("attach J")
    m.p.stdout.readline()
    for i in range(4):
        m.send("m %d" % MiB)
        m.p.stdout.readline()
    m.send("exit 11")
    rc = m.p.wait(timeout=60)
    expect("hostile books: exit status (%s)" % m.stderr()[-300:], rc, 11)
    done.append("hostile books joined without a crash")
    return "; ".join(done)


# ---- CURESV_MEMINFO=budget -----------------------------------------------------------------------

def meminfo(ctx):
    common = dict(CURESV_POOL="mi", CURESV_MODE="enforce", CURESV_CAPACITY="64M",
                  CURESV_MEMINFO="budget")
    p1 = ctx.member(ctx.env(CURESV_RESERVATIONS="job=16M", **common))
    p2 = ctx.member(ctx.env(CURESV_RESERVATIONS="job=16M,side=8M", **common))
    for p in (p1, p2):
        expect("attach", p.status("attach job"), 0)
    p1.alloc(4 * MiB)
    p2.alloc(2 * MiB, driver=True)
    want = (10 * MiB, 16 * MiB)
    for p in (p1, p2):
        for driver in (False, True):
            expect("attached, %s %s" % ("driver" if driver else "runtime", p.pid()),
                   p.info(driver), want)
    for p in (p1, p2):
        expect("detach", p.status("attach -"), 0)
    p1.alloc(8 * MiB)
    p2.alloc(3 * MiB)
    # the shared pool: 64 MiB less job and side, less 11 MiB of both members' shared bytes
    want = (40 * MiB - 11 * MiB, 40 * MiB)
    for p in (p1, p2):
        for driver in (False, True):
            expect("not attached, %s" % ("driver" if driver else "runtime"), p.info(driver), want)
    b = ctx.books("mi")
    expect("claimed", b.dev(0, "claimed"), 24 * MiB + 11 * MiB)
    # side leaves the pool with its only declarer
    expect("exit", p2.exit(0), 0)
    want = (48 * MiB - 8 * MiB, 48 * MiB)
    expect("not attached, the other gone", p1.info(), want)
    expect("exit", p1.exit(0), 0)
    ctx.books("mi").expect_zero()
    return "attached: free = 16 MiB - both members' 6 MiB; not: 40 MiB - 11 MiB; runtime and " \
           "driver, two processes"


# ---- observe mode --------------------------------------------------------------------------------

def observe(ctx):
    env = ctx.env(CURESV_POOL="obs", CURESV_MODE="observe", CURESV_CAPACITY="64M")
    p1, p2 = ctx.member(env), ctx.member(env)
    p1.alloc(40 * MiB)
    p2.alloc(40 * MiB, driver=True)
    b = ctx.books("obs")
    expect("claimed past the capacity", b.dev(0, "claimed"), 80 * MiB)
    expect("capacity", b.dev(0, "capacity"), 64 * MiB)
    expect("allocations over", b.dev(0, "over"), 1)
    expect("refusals", b.dev(0, "refusals"), 0)
    s1 = b.member_by_pid(p1.pid())
    expect("exit", p1.exit(0), 0)
    b = ctx.books("obs")
    expect("claimed right after a member's exit", b.dev(0, "claimed"), 40 * MiB)
    expect("the member's slot", b.member(s1, "state"), 0)
    out = p2.cmd("fork %d" % (8 * MiB))
    expect("forked child's allocation", out[2], "ok")
    b = ctx.books("obs")
    expect("claimed with a forked child's 8 MiB", b.dev(0, "claimed"), 40 * MiB)
    expect("members with a forked child", [m[2] for m in b.alive()], [p2.pid()])
    expect("reap", p2.cmd("reap"), ["reaped"])
    expect("claimed after the child", ctx.books("obs").dev(0, "claimed"), 40 * MiB)
    expect("exit", p2.exit(0), 0)
    ctx.books("obs").expect_zero()
    return ("80 MiB in a 64 MiB pool, 1 over; 40 MiB back at exit; a forked child's 8 MiB not "
            "counted")


# ---- declarations and transfers ------------------------------------------------------------------

def declare(ctx):
    common = dict(CURESV_POOL="dec", CURESV_MODE="enforce", CURESV_CAPACITY="64M")
    p1 = ctx.member(ctx.env(CURESV_RESERVATIONS="job=16M,a=8M,b=8M", **common))
    p1.alloc(MiB)  # joined, reservations declared
    p2 = ctx.member(ctx.env(CURESV_RESERVATIONS="job=32M,a=8M,b=8M", **common))
    p2.alloc(MiB)
    one_line(p2.curesv_lines(), r"CURESV_POOL=dec: reservation 'job' is 16 MiB in the pool, not "
             r"32 MiB: the pool's size stands", "another size")
    expect("lines of the first", p1.curesv_lines(), [])
    b = ctx.books("dec")
    res = b.reservations()
    expect("job's size", res["job"]["size"], 16 * MiB)
    expect("job's members", res["job"]["members"], 2)
    expect("claimed", b.dev(0, "claimed"), 32 * MiB + 2 * MiB)
    for p in (p1, p2):
        expect("attach", p.status("attach job"), 0)
    p1.alloc(10 * MiB)
    p2.refused(8 * MiB)     # 18 MiB would pass the pool's 16 MiB
    p2.alloc(6 * MiB, driver=True)
    p1.refused(MiB)
    b = ctx.books("dec")
    expect("job's bytes", b.reservations()["job"]["used"], 16 * MiB)
    expect("job's refusals", b.reservations()["job"]["refusals"], 2)
    # transfers between the pool's reservations
    for p in (p1, p2):
        expect("detach", p.status("attach -"), 0)
    t = p1.alloc(4 * MiB)
    expect("transfer to a", p1.status("transfer %d a" % t), 0)
    expect("attach b", p2.status("attach b"), 0)
    u = p2.alloc(6 * MiB)
    expect("transfer past b's size", p1.status("transfer %d b" % t), CURESV_ERR_CAPACITY)

    def figures():
        b = ctx.books("dec")
        r = b.reservations()
        shared = b.dev(0, "claimed") - sum(x["size"] for x in r.values())
        for name in ("job", "a", "b"):
            expect("%s: the members' held" % name, b.held_sum(r[name]["index"]), r[name]["used"])
        expect("the shared pool: the members' held", b.held_sum(b.shared_account()), shared)
        return r["a"]["used"], r["b"]["used"], shared

    expect("a, b, shared after a refused transfer", figures(), (4 * MiB, 6 * MiB, 2 * MiB))
    expect("free", p2.cmd("f %d" % u), ["freed"])
    expect("transfer to b", p1.status("transfer %d b" % t), 0)
    expect("a, b, shared after a transfer", figures(), (0, 4 * MiB, 2 * MiB))
    expect("transfer back to the shared pool's... a", p1.status("transfer %d a" % t), 0)
    expect("a, b, shared", figures(), (4 * MiB, 0, 2 * MiB))
    expect("free", p1.cmd("f %d" % t), ["freed"])
    expect("a, b, shared after the free", figures(), (0, 0, 2 * MiB))
    for p in (p1, p2):
        expect("exit", p.exit(0), 0)
    ctx.books("dec").expect_zero()
    return "job 32 MiB declared in a pool of 16 MiB: one line, 16 MiB enforced across both; " \
           "transfers a->b refused past b's size, then a->b, b->a exact"


# ---- release ------------------------------------------------------------------------------------------

def release(ctx):
    """A member releases a reservation another member still declares, holding 3 MiB of it: those
    bytes stay on the device, so the reservation's room is not whole again for the other."""
    env = ctx.env(CURESV_POOL="rel", CURESV_MODE="enforce", CURESV_CAPACITY="64M",
                  CURESV_RESERVATIONS="tmp=4M")
    p1, p2 = ctx.member(env), ctx.member(env)
    p1.alloc(MiB)
    p2.alloc(MiB)
    expect("attach", p1.status("attach tmp"), 0)
    held = p1.alloc(3 * MiB)
    p2.alloc(56 * MiB)          # the shared pool full: 60 MiB beside tmp's 4
    live = (1 + 1 + 3 + 56) * MiB
    expect("release", p1.status("release tmp"), 0)
    b = ctx.books("rel")
    expect("tmp's members after the release", b.reservations()["tmp"]["members"], 1)
    expect("attach", p2.status("attach tmp"), 0)
    out = p2.cmd("m %d" % (4 * MiB))
    if out[0] == "ok":
        live += 4 * MiB
    expect_true("p2 got 4 MiB of tmp while p1's 3 MiB of it live: %d MiB live on a 64 MiB device "
                "(claimed %d MiB)" % (live // MiB, ctx.books("rel").dev(0, "claimed") // MiB),
                live <= 64 * MiB)
    expect_true("claimed past the capacity: %d MiB" % (ctx.books("rel").dev(0, "claimed") // MiB),
                ctx.books("rel").dev(0, "claimed") <= 64 * MiB)
    expect("free", p1.cmd("f %d" % held), ["freed"])
    p2.alloc(3 * MiB)           # tmp's room once p1's bytes are gone
    for p in (p1, p2):
        expect("exit", p.exit(0), 0)
    ctx.books("rel").expect_zero()
    return "tmp released by one member with 3 MiB live: the other gets its room back only as " \
        "they are freed"


# ---- threads of one member -----------------------------------------------------------------------

def threads(ctx):
    """16 threads of one member declare reservations at the same moment, again and again: each
    gets a reservation of its own in the pool, and the pool's books go back to zero at exit."""
    env = ctx.env(CURESV_POOL="threads", CURESV_CAPACITY="1G")
    rounds, began, n = 0, time.monotonic(), 16
    while rounds < 60 and time.monotonic() - began < 3:
        m = ctx.member(env)
        m.alloc(4096)
        tag = "r%d_" % rounds
        out = m.cmd("race %d %d %s" % (n, MiB, tag))
        expect("statuses", out, ["statuses"] + ["0"] * n)
        b = ctx.books("threads")
        res = {k: v for k, v in b.reservations().items() if k.startswith(tag)}
        expect("round %d: the pool's reservations" % rounds, sorted(res),
               sorted("%s%d" % (tag, k) for k in range(n)))
        expect("round %d: their slots" % rounds, len({r["index"] for r in res.values()}), n)
        expect("round %d: members of each" % rounds, {r["members"] for r in res.values()}, {1})
        expect("round %d: claimed" % rounds, b.dev(0, "claimed"), n * MiB + 4096)
        expect("exit", m.exit(0), 0)
        ctx.books("threads").expect_zero()
        rounds += 1
    return "%d rounds of %d threads declaring at once: %d reservations each, books 0 after each" \
        % (rounds, n, n)


CASES = [
    ("threads", threads),
    ("release", release),
    ("observe", observe),
    ("declare", declare),
    ("meminfo", meminfo),
    ("hostile file", hostile),
    ("permissions", permissions),
    ("pid reuse", pid_reuse),
    ("joining", joining),
    ("bound", bound),
    ("stress", stress),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--sanitizer-runtime", default="")
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("CURESV_POOL_STRESS_SECONDS", "30")))
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--no-kill", dest="kill", action="store_false",
                    help="the stress without SIGKILL")
    ap.add_argument("cases", nargs="*", help="substrings of the cases to run (default: all)")
    args = ap.parse_args()
    args.lib, args.bin = os.path.abspath(args.lib), os.path.abspath(args.bin)
    lay = Layout(os.path.join(args.bin, "pool_layout"))
    print("seed %d" % args.seed, flush=True)
    failed = skipped = 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for name, fn in CASES:
            if args.cases and not any(c in name or c == fn.__name__ for c in args.cases):
                continue
            sub = os.path.join(tmp, fn.__name__)
            os.makedirs(sub)
            ctx = Ctx(args, lay, sub)
            began = time.monotonic()
            try:
                rows.append((name, "pass", fn(ctx), time.monotonic() - began))
            except Skipped as why:
                skipped += 1
                rows.append((name, "SKIPPED", str(why), time.monotonic() - began))
            except (AssertionError, OSError, ValueError, KeyError, IndexError,
                    subprocess.SubprocessError) as err:
                failed += 1
                rows.append((name, "FAIL", "%s: %s" % (type(err).__name__, err),
                             time.monotonic() - began))
            finally:
                ctx.close()
            r = rows[-1]
            print("%-12s  %-4s %5.1fs  %s" % (r[0], r[1], r[3], r[2]), flush=True)
    print("%d passed, %d failed, %d SKIPPED" % (len(rows) - failed - skipped, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
