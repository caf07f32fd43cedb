#!/usr/bin/env python3
"""The readers of shared pools (CURESV_POOL): curesv-stat --pool and curesv-top, over pools whose
members are pool_member processes (the pool's own code, driven line by line):

  figures        two members, a reservation both declared, shared-pool bytes: text and JSON
                 hold the pool's figures, each member's pid, bytes and command line
  death          a member SIGKILLed while it holds bytes: the next read reclaims it (reclaimed
                 1) and its bytes are off the books; the read takes well under a second
  prometheus     the exposition format (the strict parser of live.py, and Prometheus's Python
                 client where installed), every series with its pool label, a hostile
                 reservation name escaped; --textfile writes it; a capacity not known left out
  no such pool   one line and status 2; with --prometheus status 0 and no sample; the reader
                 never makes the file
  refused        a file of mode 0644, a symbolic link, a file that is not a pool: one line,
                 status 1; bad usage (--pool with a PID or --dir, a bad name): status 3
  shared folder  a pool of a 0770 folder read by the folder's path; a 0777 folder refused
  curesv-top     --once lists the per-user folder's pools and one named by --pool; the live
                 books' scan passes over pool files

    pool_read.py --lib build/plain/libcuresv.so --bin build/plain/it

Prints one table and "N passed, N failed".
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.normpath(os.path.join(HERE, "..", "..", "scripts"))
STAT = os.path.join(SCRIPTS, "curesv-stat")
TOP = os.path.join(SCRIPTS, "curesv-top")
MiB = 1 << 20


def load(name, path):
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


live = load("curesv_live_test", os.path.join(HERE, "live.py"))  # its exposition parsers


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


class Member:
    """A pool_member process: a member of pool `name` (file `path`) while it runs."""

    def __init__(self, ctx, path, name, enforce=True, argv0=None):
        exe = os.path.join(ctx.args.bin, "pool_member")
        self.p = subprocess.Popen([argv0 or exe, path, name] + (["enforce"] if enforce else []),
                                  executable=exe, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ctx.env())
        ctx.members.append(self)
        line = self.p.stdout.readline()
        if not line.startswith("joined "):
            raise AssertionError("pool_member did not join: %r %r" % (line, self.p.stderr.read()))
        self.slot = int(line.split()[1])
        self.pid = self.p.pid

    def do(self, command):
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
        self.p.wait()


class Ctx:
    """A case's own XDG_RUNTIME_DIR: its pools by name are in its curesv/ folder."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.xdg = tempfile.mkdtemp(prefix="curesv-pool-test-", dir=base)
        self.folder = os.path.join(self.xdg, "curesv")
        os.mkdir(self.folder, 0o700)
        self.members = []

    def env(self, **more):
        e = {k: v for k, v in os.environ.items() if not k.startswith("CURESV_")}
        return dict(e, XDG_RUNTIME_DIR=self.xdg, **more)

    def path(self, name):
        return os.path.join(self.folder, name + ".pool")

    def close(self):
        for m in self.members:
            m.kill()
        shutil.rmtree(self.xdg, ignore_errors=True)

    def stat(self, *argv):
        return subprocess.run([STAT, "--lib", self.args.lib] + list(argv), capture_output=True,
                              text=True, timeout=120, env=self.env())

    def stat_json(self, *argv):
        r = self.stat("--json", *argv)
        expect("curesv-stat --json %s (%s)" % (" ".join(argv), r.stderr), r.returncode, 0)
        return json.loads(r.stdout)


def busy_pool(ctx, name="books", enforce=True):
    """Two members of pool `name`: 16 MiB on device 0, 'scan' of 1 MiB declared by both (256 KiB
    and 512 KiB in it), 2 MiB and 1 MiB in device 0's shared pool."""
    a = Member(ctx, ctx.path(name), name, enforce)
    b = Member(ctx, ctx.path(name), name, enforce)
    expect("capacity", a.do("cap 0 %d" % (16 * MiB)), "cap %d" % (16 * MiB))
    expect("declare", a.do("declare scan 0 %d" % MiB), "declared 0 %d" % MiB)
    expect("declare", b.do("declare scan 0 %d" % MiB), "declared 0 %d" % MiB)
    for m, cmd in ((a, "charge 0 262144"), (b, "charge 0 524288"), (a, "charge s0 2097152"),
                   (b, "charge s0 1048576")):
        expect(cmd, m.do(cmd), "charged")
    return a, b


def figures(ctx):
    a, b = busy_pool(ctx)
    expect("refused past the reservation", a.do("charge 0 524288"), "refused")
    d = ctx.stat_json("--pool", "books")
    expect("pool, path", (d["pool"], d["path"]), ("books", ctx.path("books")))
    expect("members", (d["members_listed"], d["members_alive"], d["reclaimed"]), (2, 2, 0))
    expect("devices", [(x["device"], x["capacity"], x["claimed"], x["shared"], x["live"])
                       for x in d["devices"]], [(0, 16 * MiB, 4 * MiB, 3 * MiB, 3 * MiB + 786432)])
    r = d["reservations"]
    expect("reservation", [(x["name"], x["size"], x["used"], x["peak"], x["members"],
                            x["refusals"]) for x in r], [("scan", MiB, 786432, 786432, 2, 1)])
    expect("by member", sorted((x["pid"], x["bytes"]) for x in r[0]["by_member"]),
           sorted([(a.pid, 262144), (b.pid, 524288)]))
    expect("member bytes", sorted((m["pid"], m["alive"], m["bytes"]) for m in d["members"]),
           sorted([(a.pid, True, [{"device": 0, "bytes": 2 * MiB + 262144}]),
                   (b.pid, True, [{"device": 0, "bytes": MiB + 524288}])]))
    expect("cmdline", all(m["cmdline"].endswith("pool_member %s books enforce" % ctx.path("books"))
                          for m in d["members"]), True)
    expect("time added", isinstance(d.get("time"), str) and d["time"].endswith("Z"), True)
    t = ctx.stat("--pool", "books")
    expect("text status (%s)" % t.stderr, (t.returncode, t.stderr), (0, ""))
    want = ["curesv: ======== pool books (%s): 2 members of 1024, 2 alive ========" %
            ctx.path("books"),
            "curesv: device 0: capacity 16 MiB, claimed 4 MiB, shared pool 3 MiB, live 3.8 MiB, "
            "peak 4 MiB, refused 0, over 0"]
    expect("text's first lines", t.stdout.splitlines()[:2], want)
    expect("every line curesv's", all(x.startswith("curesv: ") for x in t.stdout.splitlines()),
           True)
    return "2 members, reservation and shared pool figures in text and JSON"


def death(ctx):
    a, b = busy_pool(ctx)
    b.kill()
    began = time.monotonic()
    d = ctx.stat_json("--pool", "books")
    took = time.monotonic() - began
    expect("reclaimed by the read", (d["reclaimed"], d["reclaims"], d["members_listed"]), (1, 1, 1))
    expect("its bytes off the books", [(x["used"], x["members"]) for x in d["reservations"]],
           [(262144, 1)])
    expect("device", [(x["claimed"], x["shared"], x["live"]) for x in d["devices"]],
           [(3 * MiB, 2 * MiB, 2 * MiB + 262144)])
    if took > 1.0:
        raise AssertionError("the read that reclaimed took %.2f s" % took)
    # the last one leaves at its own exit: the books read zero, the reservation gone
    expect("leave", a.do("leave"), "left")
    d = ctx.stat_json("--pool", "books")
    expect("after all left", (d["members"], d["reservations"], [x["claimed"] for x in d["devices"]],
                              d["joins"], d["leaves"], d["reclaims"]), ([], [], [0], 2, 1, 1))
    return "a SIGKILLed member's bytes given back by the next read (%.0f ms)" % (took * 1000)


def prometheus(ctx):
    a, b = busy_pool(ctx)
    hostile = 'a"b\\c'
    expect("hostile name", a.do("declare %s 1 4096" % hostile), "declared 1 4096")
    r = ctx.stat("--pool", "books", "--prometheus")
    expect("status (%s)" % r.stderr, (r.returncode, r.stderr), (0, ""))
    fams = live.parse_exposition(r.stdout)
    expect("every series has its pool label",
           all(("pool", "books") in k for f in fams.values() for k in f["samples"]), True)
    expect("reservation bytes", live.sample(fams, "curesv_pool_reservation_allocated_bytes",
                                            reservation="scan"), 786432.0)
    expect("hostile name's series", live.sample(fams, "curesv_pool_reservation_size_bytes",
                                                reservation=hostile), 4096.0)
    expect("device live", live.sample(fams, "curesv_pool_device_live_bytes", device=0),
           float(3 * MiB + 786432))
    expect("capacity of device 1 left out (not known)",
           [dict(k)["device"] for k in fams["curesv_pool_device_capacity_bytes"]["samples"]],
           ["0"])
    expect("members", live.sample(fams, "curesv_pool_members_alive"), 2.0)
    expect("member bytes", live.sample(fams, "curesv_pool_member_live_bytes", pid=b.pid, device=0),
           float(MiB + 524288))
    expect("counter", fams["curesv_pool_joins_total"]["type"], "counter")
    # a member whose command line holds a newline, a quote, a backslash and an escape sequence
    odd = Member(ctx, ctx.path("books"), "books", argv0='run\n"me\\\x1b[31m')
    expect("charge", odd.do("charge s0 4096"), "charged")
    r = ctx.stat("--pool", "books", "--prometheus")
    fams = live.parse_exposition(r.stdout)
    cmd = 'run\n"me\\\x1b[31m %s books enforce' % ctx.path("books")
    expect("the odd member's labels", live.sample(fams, "curesv_pool_member_info", pid=odd.pid,
                                                  cmdline=cmd), 1.0)
    t = ctx.stat("--pool", "books")
    expect("its text line", [x.split("  ")[-1] for x in t.stdout.splitlines()
                             if " %d " % odd.pid in x and "run" in x],
           ['run\\n"me\\\\x1b[31m %s books enforce' % ctx.path("books")])
    expect("its JSON", [m["cmdline"] for m in ctx.stat_json("--pool", "books")["members"]
                        if m["pid"] == odd.pid], [cmd])
    client = live.client_parse(r.stdout)
    if client is not None:
        key = ("curesv_pool_reservation_size_bytes",
               frozenset({"pool": "books", "device": "1", "reservation": hostile}.items()))
        expect("Prometheus's client reads the hostile name", client.get(key), 4096.0)
    out = os.path.join(ctx.tmp, "pool.prom")
    t = ctx.stat("--pool", "books", "--textfile", out)
    expect("--textfile (%s)" % t.stderr, t.returncode, 0)
    with open(out) as f:
        expect("--textfile's text", live.parse_exposition(f.read()).keys(), fams.keys())
    return "%d families, pool label on each%s" % (
        len(fams), "" if client is not None else " (prometheus_client not installed)")


def one_line(r, code, want):
    expect("status (%s)" % r.stderr, r.returncode, code)
    expect("one line", r.stderr, want + "\n")


def no_such_pool(ctx):
    one_line(ctx.stat("--pool", "nosuch"), 2, "curesv-stat: pool nosuch: no such pool: no file "
             "'%s' (its first member makes it)" % ctx.path("nosuch"))
    r = ctx.stat("--pool", "nosuch", "--prometheus")
    expect("--prometheus", (r.returncode, r.stdout), (0, ""))
    expect("never made", os.path.exists(ctx.path("nosuch")), False)
    one_line(ctx.stat("--pool", "/nonexistent-curesv-folder", "--json"), 2,
             "curesv-stat: pool /nonexistent-curesv-folder: no such pool: no folder "
             "'/nonexistent-curesv-folder'")
    return "one line, status 2 (0 and no sample with --prometheus); no file made"


def refused(ctx):
    a, _ = busy_pool(ctx, "real")
    os.chmod(ctx.path("real"), 0o644)
    one_line(ctx.stat("--pool", "real"), 1, "curesv-stat: pool real: '%s': mode 644, not 0600"
             % ctx.path("real"))
    os.chmod(ctx.path("real"), 0o600)
    os.symlink(ctx.path("real"), ctx.path("link"))
    one_line(ctx.stat("--pool", "link"), 1, "curesv-stat: pool link: '%s': a symbolic link (not "
             "followed)" % ctx.path("link"))
    with open(ctx.path("junk"), "w") as f:
        f.write("not a pool\n")
    os.chmod(ctx.path("junk"), 0o600)
    one_line(ctx.stat("--pool", "junk", "--prometheus"), 1, "curesv-stat: pool junk: '%s': not a "
             "curesv pool file" % ctx.path("junk"))
    for argv in (["--pool", "real", "123"], ["--pool", "real", "--dir", ctx.folder],
                 ["--pool", "a b"], ["--pool", ".."]):
        r = ctx.stat(*argv)
        expect("usage %r (%s)" % (argv, r.stderr), (r.returncode, len(r.stderr.splitlines())),
               (3, 1))
    expect("the pool still reads", ctx.stat("--pool", "real").returncode, 0)
    return "mode, link, not a pool: one line, status 1; bad usage: status 3"


def shared_folder(ctx):
    team = os.path.join(ctx.tmp, "team")
    os.mkdir(team)
    os.chmod(team, 0o770)
    path = os.path.join(team, "curesv.pool")
    m = Member(ctx, path, team)
    expect("charge", m.do("charge s2 4096"), "charged")
    d = ctx.stat_json("--pool", team)
    expect("read by the folder", (d["pool"], d["path"], [(x["device"], x["live"])
                                                         for x in d["devices"]]),
           (team, path, [(2, 4096)]))
    expect("the file's mode", oct(os.stat(path).st_mode & 0o777), "0o660")
    r = ctx.stat("--pool", team, "--prometheus")
    fams = live.parse_exposition(r.stdout)
    expect("pool label", live.sample(fams, "curesv_pool_device_live_bytes", pool=team), 4096.0)
    os.chmod(team, 0o777)
    one_line(ctx.stat("--pool", team), 1, "curesv-stat: pool %s: mode 0777 lets every user in "
             "(0770 or 02770 expected)" % team)
    return "read by its folder's path; a 0777 folder refused"


def top(ctx):
    busy_pool(ctx, "books")
    team = os.path.join(ctx.tmp, "team")
    os.mkdir(team, 0o770)
    Member(ctx, os.path.join(team, "curesv.pool"), team)
    r = subprocess.run([TOP, "--once", "--lib", ctx.args.lib, "--pool", team],
                       capture_output=True, text=True, timeout=120, env=ctx.env())
    expect("status (%s)" % r.stderr, (r.returncode, r.stderr), (0, ""))
    lines = r.stdout.splitlines()
    expect("title", "0 processes, 2 pools of uid %d" % os.geteuid() in lines[0], True)
    expect("pools", [x.split("  ")[0] for x in lines if x.startswith("pool ")],
           ["pool books", "pool %s" % team])
    expect("device line", any(x.startswith("  device 0  capacity 16 MiB  claimed 4 MiB  shared "
                                           "pool 3 MiB  live 3.8 MiB") for x in lines), True)
    expect("reservation row", any(x.startswith("    scan ") and "768 KiB" in x for x in lines),
           True)
    expect("member rows", sum(x.startswith("  slot ") for x in lines), 3)
    s = subprocess.run([STAT, "--lib", ctx.args.lib], capture_output=True, text=True,
                       timeout=120, env=ctx.env())
    expect("curesv-stat's live scan (%s)" % s.stderr, s.returncode, 2)
    expect("pool files are not named as bad live files", ".pool" in s.stderr, False)
    return "two pools listed, their devices, reservations and members"


CASES = [
    ("figures: text and JSON", figures),
    ("a member killed: reclaimed by the read", death),
    ("prometheus, --textfile", prometheus),
    ("no such pool", no_such_pool),
    ("refused files, bad usage", refused),
    ("a shared folder", shared_folder),
    ("curesv-top --once", top),
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
