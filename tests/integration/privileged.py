#!/usr/bin/env python3
"""Integration cases that need root: a real set-user-ID program, a real full filesystem, pid
namespaces.

    privileged.py --lib build/plain/libcuresv.so --sim build/sim --bin build/plain/it
                  --src tests/integration --cc "cc -std=c11 -O1 -g -pthread -I/usr/local/cuda/include"
                  [--only SUBSTR]

Each case prints pass, FAIL (with why) or SKIPPED (with why: not root, a nosuid mount, a tool
missing); a skipped case never reads as a pass. Exit status 1 when a case failed.
"""
import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

NOBODY = 65534


class Skip(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def curesv_lines_only(err):
    for line in err.splitlines():
        if not line.startswith("curesv: "):
            raise AssertionError("a stderr line not curesv's: %r" % line)


def need_root():
    if os.geteuid() != 0:
        raise Skip("not root (run make test as root, as CI does)")


def private_dir(tmp, name, mode):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    os.chmod(d, mode)
    return d


# ---- secure execution: a set-user-ID program linked with -lcuresv ------------------------------------

def reachable_by_all(path):
    """Every folder from / down to `path` lets other users through (o+x)."""
    path = os.path.abspath(path)
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def setuid_base(args):
    """A folder where a set-user-ID program can run and any user reach it: the temporary folder,
    /var/tmp or the build folder, the first not mounted nosuid; None when none is."""
    for base in (tempfile.gettempdir(), "/var/tmp", os.path.dirname(args.lib)):
        if (os.path.isdir(base) and not os.statvfs(base).f_flag & os.ST_NOSUID and
                reachable_by_all(base)):
            return base
    return None


def build_setuid(args, tmp):
    """linked.c, linked with -lcuresv as curesv(3) says, in a root-owned folder every user can read,
    beside the libraries it loads; set-user-ID root. The loader ignores LD_LIBRARY_PATH for it and
    expands no $ORIGIN outside the system's folders, so it finds them by an absolute rpath
    (DT_RPATH: libcudart's dlopen of libcuda.so.1 searches it too)."""
    need_root()
    if os.statvfs(tmp).f_flag & os.ST_NOSUID or not reachable_by_all(tmp):
        raise Skip("no folder where a set-user-ID program can run (%s, /var/tmp and %s are "
                   "mounted nosuid or closed to other users)" % (tempfile.gettempdir(),
                                                                os.path.dirname(args.lib)))
    if not shutil.which("setpriv"):
        raise Skip("setpriv (util-linux) is missing")
    bindir = private_dir(tmp, "bin", 0o755)
    prog = os.path.join(bindir, "linked")
    cmd = args.cc.split() + ["-I" + os.path.join(args.src, "..", "..", "shim"), os.path.join(args.src, "linked.c"),
                             "-L" + args.sim, "-lcudart", "-L" + os.path.dirname(args.lib),
                             "-Wl,--disable-new-dtags", "-Wl,-rpath," + bindir, "-lcuresv",
                             "-o", prog]
    subprocess.run(cmd, check=True, capture_output=True)
    for lib in (os.path.join(args.sim, "libcudart.so.13"), os.path.join(args.sim, "libcuda.so.1"),
                args.lib):
        shutil.copy(lib, bindir)
    for f in os.listdir(bindir):
        os.chown(os.path.join(bindir, f), 0, 0)
        os.chmod(os.path.join(bindir, f), 0o755)
    os.chmod(prog, 0o4755)
    return prog


def run_as(prog, env, uid):
    """`prog` run by user `uid` (with no other groups), in an environment of `env` alone."""
    argv = [prog]
    if uid is not None:
        argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"] + argv
    base = {"PATH": "/usr/bin:/bin"}
    base.update(env)
    return subprocess.run(argv, env=base, capture_output=True, text=True, timeout=60, cwd="/")


def secure_files(args, tmp):
    """Run by an unprivileged user, the set-user-ID program ignores CURESV_REPORT_FILE (a root-owned
    0600 file) and CURESV_TRACE (a path in a root-only folder): the file keeps its bytes, its mode
    and its time, nothing is created, the report is on stderr after one line saying why."""
    prog = build_setuid(args, tmp)
    vault = private_dir(tmp, "vault", 0o700)
    owned = os.path.join(vault, "owned")
    with open(owned, "w") as f:
        f.write("precious\n")
    os.chmod(owned, 0o600)
    before = os.stat(owned)
    p = run_as(prog, {"CURESV_REPORT_FILE": owned, "CURESV_TRACE": os.path.join(vault, "t-%p.csv"),
                      "CURESV_TRACE_FORMAT": "chrome"}, NOBODY)
    with open(owned) as f:
        expect("the root-owned file", f.read(), "precious\n")
    after = os.stat(owned)
    expect("its mode, owner and time", (after.st_mode, after.st_uid, after.st_mtime_ns),
           (before.st_mode, before.st_uid, before.st_mtime_ns))
    expect("the root-only folder", sorted(os.listdir(vault)), ["owned"])
    expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, 0)
    expect("output", p.stdout, "linked: bytes=98304 ok\n")
    want = ("curesv: secure execution (a setuid, setgid or file-capability program): "
            "CURESV_REPORT_FILE and CURESV_TRACE ignored, curesv writes no file that the "
            "environment names; the report goes to stderr, no trace is written")
    expect("lines naming secure execution",
           [l for l in p.stderr.splitlines() if "secure execution" in l], [want])
    curesv_lines_only(p.stderr)
    if not any(l.startswith("curesv:   linked ") for l in p.stderr.splitlines()):
        raise AssertionError("no report on stderr: %r" % p.stderr[-300:])


def secure_control(args, tmp):
    """The same program run by its owner (no secure execution) writes both files: what the case
    above does not write, it could have."""
    prog = build_setuid(args, tmp)
    out = private_dir(tmp, "out", 0o700)
    report = os.path.join(out, "report.txt")
    p = run_as(prog, {"CURESV_REPORT_FILE": report, "CURESV_TRACE": os.path.join(out, "t.csv")},
               None)
    expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, 0)
    expect("stderr", p.stderr, "")
    with open(report) as f:
        if "curesv:   linked " not in f.read():
            raise AssertionError("no report in %s" % report)
    expect("files written", sorted(os.listdir(out)), ["report.txt", "t.csv"])


def secure_launcher(args, tmp):
    """The launcher started by that user on the set-user-ID program says what secure execution
    means for it; the program runs, and the copy of curesv linked into it says its own line."""
    prog = build_setuid(args, tmp)
    launcher = os.path.join(os.path.dirname(prog), "curesv")
    shutil.copy(os.path.join(args.src, "..", "..", "scripts", "curesv"), launcher)
    os.chmod(launcher, 0o755)
    lib = os.path.join(os.path.dirname(prog), "libcuresv.so")
    vault = private_dir(tmp, "vault", 0o700)
    argv = [launcher, "--lib", lib, "--report-file", os.path.join(vault, "r"), "--", prog]
    p = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                        "--clear-groups"] + argv, env={"PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=60, cwd="/")
    expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, 0)
    expect("output", p.stdout, "linked: bytes=98304 ok\n")
    lines = p.stderr.splitlines()
    expect("the launcher's line", lines[0],
           "curesv: '%s' is set-user-ID or set-group-ID: it runs in secure-execution mode, where "
           "the dynamic loader ignores LD_PRELOAD; curesv sees it only if it is linked with "
           "-lcuresv, and then writes no file that CURESV_REPORT_FILE or CURESV_TRACE names" % prog)
    expect("the library's line", lines[1],
           "curesv: secure execution (a setuid, setgid or file-capability program): "
           "CURESV_REPORT_FILE ignored, curesv writes no file that the environment names; the "
           "report goes to stderr")
    curesv_lines_only(p.stderr)
    expect("the root-only folder", os.listdir(vault), [])


# ---- a full filesystem: a small tmpfs -------------------------------------------------------------------

class Tmpfs:
    """A tmpfs of `size` bytes at a new folder under `tmp`, `filled` with a file as large as it
    holds; unmounted on leaving."""
    def __init__(self, tmp, size, filled):
        need_root()
        self.dir = private_dir(tmp, "small", 0o755)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", self.dir],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise Skip("cannot mount a tmpfs: %s" % p.stderr.strip())
        self.filled = filled

    def __enter__(self):
        if self.filled:
            try:
                fd = os.open(os.path.join(self.dir, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
            except OSError:
                self.__exit__()
                raise
            try:
                while os.write(fd, b"\0" * 4096) > 0:
                    pass
            except OSError:
                pass
            os.close(fd)
        return self.dir

    def __exit__(self, *exc):
        subprocess.run(["umount", self.dir], check=True)


def shim_run(args, argv, env):
    full = dict(os.environ)
    full.update(env)
    full.update({"LD_PRELOAD": args.lib, "LD_LIBRARY_PATH": args.sim})
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=120)


def full_report(args, tmp):
    """The report file is on a full filesystem: the report goes to stderr after one line that
    names the file and the reason, as when the file cannot be opened."""
    with Tmpfs(tmp, 64 * 1024, filled=True) as full:
        path = os.path.join(full, "r.txt")
        p = shim_run(args, [os.path.join(args.bin, "handoff")],
                     {"CURESV_CAPACITY": "400K", "CURESV_RESERVATIONS": "scan=100K,pipe=200K",
                      "CURESV_ATTACH": "scan=scan,pipe=pipe", "CURESV_REPORT_FILE": path})
        expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, 0)
        want = ("curesv: CURESV_REPORT_FILE: '%s': could not write the report: No space left on "
                "device; the report goes to stderr instead" % path)
        expect("lines naming the file", [l for l in p.stderr.splitlines() if path in l], [want])
        expect("first line", p.stderr.splitlines()[0], want)
        curesv_lines_only(p.stderr)
        if not any(l.startswith("curesv:   scan ") for l in p.stderr.splitlines()):
            raise AssertionError("no report on stderr: %r" % p.stderr[-300:])


def full_trace(args, tmp):
    """The trace fills its filesystem (64 KiB) while 4 threads make 16,000 allocations: one line
    names the file, the trace keeps what was written, the program and the report go on whole."""
    with Tmpfs(tmp, 64 * 1024, filled=False) as small:
        trace = os.path.join(small, "t.csv")
        report = os.path.join(tmp, "report.json")
        p = shim_run(args, [os.path.join(args.bin, "stress"), "4", "4000"],
                     {"CURESV_TRACE": trace, "CURESV_REPORT": "json",
                      "CURESV_REPORT_FILE": report})
        expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, 0)
        expect("stderr", p.stderr, "curesv: CURESV_TRACE: '%s': No space left on device; the trace "
               "stops here, the program runs on\n" % trace)
        size = os.path.getsize(trace)
        if not 60 * 1024 <= size <= 64 * 1024:
            raise AssertionError("the trace holds %d bytes, not what fit in 64 KiB" % size)
        with open(report) as f:
            shared = json.load(f)["shared"]
        expect("allocs and frees", (shared["allocs"], shared["frees"]), (16000, 16000))


# ---- the installer: another apt holds the dpkg lock -------------------------------------------------

def up_to_date_package():
    """A Debian package installed at its candidate version: apt-get install of it changes nothing
    and needs no download. None when there is none (no package lists yet)."""
    for pkg in ("make", "coreutils", "dpkg"):
        r = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True)
        got = dict(line.strip().split(": ", 1) for line in r.stdout.splitlines()[1:3]
                   if ": " in line)
        if r.returncode == 0 and got.get("Installed") not in (None, "(none)") and \
                got.get("Installed") == got.get("Candidate"):
            return pkg
    return None


def dpkg_lock_wait(args, tmp):
    """scripts/install-deps waits for the dpkg lock that another apt holds (an fcntl lock on
    /var/lib/dpkg/lock-frontend, as apt and dpkg take it), saying so in one line, and then does its
    work; apt-get alone fails at once ("Could not get lock")."""
    import fcntl
    import time
    need_root()
    lock = "/var/lib/dpkg/lock-frontend"
    if not shutil.which("apt-get") or not os.path.exists(lock):
        raise Skip("not a Debian system (no apt-get or no %s)" % lock)
    pkg = up_to_date_package()
    if not pkg:
        raise Skip("no package installed at its candidate version (no apt lists yet)")
    script = os.path.join(args.src, "..", "..", "scripts", "install-deps")
    with open(lock, "r+") as held:
        try:
            fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise Skip("another apt or dpkg holds the lock now")
        p = subprocess.Popen([script, "packages", pkg], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, DPKG_LOCK_WAIT="120"))
        try:
            waiting = p.stderr.readline() + p.stderr.readline()
            time.sleep(2)
            still = p.poll()
        finally:
            fcntl.lockf(held, fcntl.LOCK_UN)
        out, err = p.communicate(timeout=120)
    expect("install-deps while the lock was held: first lines", waiting,
           "curesv: installing %s\ncuresv: another apt or dpkg holds the dpkg lock: waiting for "
           "it (at most 120s, DPKG_LOCK_WAIT)\n" % pkg)
    expect("install-deps 2 s later (still waiting)", still, None)
    expect("install-deps once the lock was let go", (p.returncode, out, err), (0, "", ""))


# ---- the live books (CURESV_LIVE) on a tiny or full tmpfs, and across pid namespaces -------------

def live_env(args, xdg, **more):
    env = {"XDG_RUNTIME_DIR": xdg, "CURESV_LIVE": "1", "CURESV_REPORT": "off"}
    env.update(more)
    return env


def live_folder_files(xdg):
    folder = os.path.join(xdg, "curesv")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def one_live_line(err, *contains):
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("curesv: CURESV_LIVE: ") or \
            not all(c in lines[0] for c in contains):
        raise AssertionError("want one curesv line with %r, got %r" % (contains, err))


def live_tiny_tmpfs(args, tmp):
    """A 64 KiB tmpfs as the live folder: the program runs as without --live (exit status and
    output the same), curesv says one line, no file is left."""
    with Tmpfs(tmp, 64 * 1024, filled=False) as small:
        argv = [os.path.join(args.bin, "stress"), "4", "4000"]
        without = shim_run(args, argv, {"XDG_RUNTIME_DIR": small, "CURESV_REPORT": "off"})
        p = shim_run(args, argv, live_env(args, small))
        expect("exit status (%s)" % p.stderr.strip()[-300:], p.returncode, without.returncode)
        expect("output", p.stdout, without.stdout)
        expect("stderr without --live", without.stderr, "")
        one_live_line(p.stderr, "No space left on device")
        expect("files left", live_folder_files(small), [])


def live_filled_tmpfs(args, tmp):
    """A 4 MiB tmpfs that another program fills after the start: the program makes 60,000 more
    allocations and runs on to its normal end; one line, no file left."""
    with Tmpfs(tmp, 4 << 20, filled=False) as small:
        full = dict(os.environ)
        full.update(live_env(args, small))
        full.update({"LD_PRELOAD": args.lib, "LD_LIBRARY_PATH": args.sim})
        p = subprocess.Popen([os.path.join(args.bin, "live_fork"), "60000", "1", "exit", "wait"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=full, text=True)
        try:
            expect("live_fork says", p.stdout.readline(), "ready\n")
            if len(live_folder_files(small)) != 1:
                raise AssertionError("no live file at the start: %r" % live_folder_files(small))
            fd = os.open(os.path.join(small, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while os.write(fd, b"\0" * 65536) > 0:
                    pass
            except OSError:
                pass
            os.close(fd)
            p.stdin.write("\n")
            p.stdin.flush()
            line = p.stdout.readline()
            if not line.startswith("forked 1: "):
                raise AssertionError("live_fork says %r" % line)
            time.sleep(1.5)  # a publication or more, into the full filesystem
            out, err = p.communicate("\n", timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        expect("exit status (%s)" % err.strip()[-300:], p.returncode, 0)
        one_live_line(err, "No space left on device")
        expect("files left", live_folder_files(small), [])


def pid_namespaces(args):
    need_root()
    if not shutil.which("unshare"):
        raise Skip("unshare (util-linux) is missing")
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip("no pid namespace here: %s" % r.stderr.strip())


def held_in_namespace(args, xdg):
    """live_hold as pid 1 of a pid namespace of its own, at its "held" point."""
    full = dict(os.environ)
    full.update(live_env(args, xdg, CURESV_RESERVATIONS="scan=1M,pipe=2M",
                         CURESV_ATTACH="scan=scan,pipe=pipe"))
    full.update({"LD_PRELOAD": args.lib, "LD_LIBRARY_PATH": args.sim})
    return subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc",
                             os.path.join(args.bin, "live_hold")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full, text=True)


def finish(procs):
    """Each process let go to its end: its stderr."""
    errs = []
    for p in procs:
        try:
            errs.append(p.communicate("\n\n", timeout=60)[1])
        except (subprocess.TimeoutExpired, ValueError, OSError):
            p.kill()
            p.wait()
            errs.append("(killed)")
    return errs


def stat_json(args, xdg):
    stat_tool = os.path.join(args.src, "..", "..", "scripts", "curesv-stat")
    r = subprocess.run([stat_tool, "--lib", args.lib, "--dir", os.path.join(xdg, "curesv"),
                        "--json", "--verbose"], capture_output=True, text=True, timeout=120)
    expect("curesv-stat (%s)" % r.stderr, (r.returncode, r.stderr), (0, ""))
    return json.loads(r.stdout)


def live_pidns_reader(args, tmp):
    """A reader outside a pid namespace never removes the file of the process that runs as pid 1
    inside it: it reads its books."""
    pid_namespaces(args)
    xdg = private_dir(tmp, "xdg", 0o700)
    p = held_in_namespace(args, xdg)
    try:
        expect("live_hold says", p.stdout.readline(), "held 4\n")
        before = live_folder_files(xdg)
        expect("its file, named for pid 1", [f.split("-")[0] for f in before], ["1"])
        reports = stat_json(args, xdg)
        expect("processes read", [r["pid"] for r in reports], [1])
        expect("its live bytes", reports[0]["devices"][0]["allocated"], 256 * 1024)
        expect("files after the read", live_folder_files(xdg), before)
    finally:
        errs = finish([p])
    expect("exit status (%s)" % errs[0][-300:], p.returncode, 0)
    expect("files after exit", live_folder_files(xdg), [])


def live_pidns_two(args, tmp):
    """Two processes started together, each pid 1 of its own pid namespace: two files, both
    read."""
    pid_namespaces(args)
    xdg = private_dir(tmp, "xdg", 0o700)
    procs = [held_in_namespace(args, xdg) for _ in range(2)]
    try:
        for p in procs:
            expect("live_hold says", p.stdout.readline(), "held 4\n")
        files = live_folder_files(xdg)
        expect("files", [f.split("-")[0] for f in files], ["1", "1"])
        expect("processes read", [r["pid"] for r in stat_json(args, xdg)], [1, 1])
    finally:
        finish(procs)
    expect("exit statuses", [p.returncode for p in procs], [0, 0])
    expect("files after exit", live_folder_files(xdg), [])


CASES = [
    ("secure execution: a set-user-ID program run by uid %d writes no file the environment "
     "names" % NOBODY, secure_files),
    ("secure execution: the same program run by its owner writes both", secure_control),
    ("secure execution: the launcher on a set-user-ID program", secure_launcher),
    ("full filesystem: the report goes to stderr after a line naming the file", full_report),
    ("full filesystem: the trace stops after one line naming the file", full_trace),
    ("install-deps waits for the dpkg lock another apt holds, saying so", dpkg_lock_wait),


    ("live books on a 64 KiB tmpfs: the program runs as without, one line", live_tiny_tmpfs),
    ("live books on a 4 MiB tmpfs filled after the start: one line", live_filled_tmpfs),
    ("live books: a reader outside a pid namespace keeps its pid 1's file", live_pidns_reader),
    ("live books: two pid 1s of two namespaces started together, two files", live_pidns_two),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--sim", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    args.lib, args.sim, args.src, args.bin = (os.path.abspath(x) for x in (args.lib, args.sim,
                                                                         args.src, args.bin))
    rows, failed = [], 0
    for name, case in CASES:
        if args.only not in name:
            continue
        tmp = tempfile.mkdtemp(prefix="curesv-priv-", dir=setuid_base(args))
        os.chmod(tmp, 0o755)
        try:
            case(args, tmp)
            rows.append((name, "pass", ""))
        except Skip as why:
            rows.append((name, "SKIPPED", str(why)))
        except (AssertionError, OSError, subprocess.SubprocessError) as err:
            failed += 1
            detail = getattr(err, "stderr", None)
            rows.append((name, "FAIL", str(err) + (": " + str(detail)[-300:] if detail else "")))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    width = max((len(r[0]) for r in rows), default=10)
    for name, result, why in rows:
        print("%-*s  %s" % (width, name, result))
        if why:
            print("    " + why)
    skipped = sum(r[1] == "SKIPPED" for r in rows)
    print("%d passed, %d failed, %d SKIPPED" % (len(rows) - failed - skipped, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
