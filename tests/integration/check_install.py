#!/usr/bin/env python3
"""make install into a staging folder (DESTDIR) and use what it installed, as a user would:

- every file lands where it should, with its mode;
- pkg-config finds curesv.pc; a program built with its --cflags and --libs links and runs;
- the installed launcher finds the installed library (--version, --check, a program under it) and
  lets the program import the installed Python module;
- the man pages (curesv(1), one per tool, curesv(3), curesv-report(5)) render without a warning
  (groff -ww; mandoc -Tlint when it is there), man finds each by its name, and curesv(1) lists
  every variable of core/config/config.c's table;
- the tools that read curesv's output (curesv-plot, curesv-merge, curesv-export, curesv-stat,
  curesv-top) are installed beside the launcher, run from there, and curesv(1) names them;
  curesv-stat names the installed library, and it and curesv-top (which loads curesv-stat from
  its own folder) read the live books of a program the installed launcher runs with --live;
- each man3 name is a symbolic link to curesv.3 that man -l and groff render from any folder;
- make uninstall removes every file.

    check_install.py --bin build/plain/it --sim build/sim
"""
import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREFIX = "/usr/local"
TOOLS = ("curesv-plot", "curesv-merge", "curesv-export", "curesv-stat", "curesv-top")
FILES = {  # path under PREFIX: mode
    "bin/curesv": 0o755,
    "bin/curesv-plot": 0o755,
    "bin/curesv-merge": 0o755,
    "bin/curesv-export": 0o755,
    "bin/curesv-stat": 0o755,
    "bin/curesv-top": 0o755,
    "lib/libcuresv.so": 0o755,
    "include/curesv.h": 0o644,
    "lib/pkgconfig/curesv.pc": 0o644,
    "share/man/man1/curesv.1": 0o644,
    "share/man/man1/curesv-plot.1": 0o644,
    "share/man/man1/curesv-merge.1": 0o644,
    "share/man/man1/curesv-export.1": 0o644,
    "share/man/man1/curesv-stat.1": 0o644,
    "share/man/man1/curesv-top.1": 0o644,
    "share/man/man5/curesv-report.5": 0o644,
    "share/man/man3/curesv.3": 0o644,
    "share/man/man3/curesv_reserve.3": 0o644,
    "share/man/man3/curesv_attach_stream.3": 0o644,
    "share/man/man3/curesv_stream_stats.3": 0o644,
    "share/man/man3/curesv_strerror.3": 0o644,
    "lib/python3/dist-packages/curesv.py": 0o644,
    "lib/python3/dist-packages/curesv_pytest.py": 0o644,
}
failures = []


def check(what, ok, detail=""):
    print("%-72s %s" % (what, "ok" if ok else "FAILED"))
    if not ok:
        failures.append(what)
        if detail:
            print("    " + detail.strip().replace("\n", "\n    ")[-1500:])


def run(argv, env=None, **kw):
    return subprocess.run(argv, capture_output=True, text=True, env=env, **kw)


def make(*targets, destdir, prefix=PREFIX):
    return run(["make", "-s", "-C", ROOT, "PREFIX=" + prefix, "DESTDIR=" + destdir] + list(targets))


def another_prefix():
    """A second install under another PREFIX names that one (nothing is kept from the first)."""
    stage = tempfile.mkdtemp(prefix="curesv-stage2-")
    try:
        r = make("install", destdir=stage, prefix="/opt/curesv")
        pc = os.path.join(stage, "opt", "curesv", "lib", "pkgconfig")
        env = dict(os.environ, PKG_CONFIG_PATH=pc)
        v = run(["pkg-config", "--variable=prefix", "curesv"], env)
        with open(os.path.join(stage, "opt", "curesv", "bin", "curesv")) as f:
            names = "\ninstalled_lib=/opt/curesv/lib/libcuresv.so\n" in f.read()
        check("a second install under PREFIX=/opt/curesv names it (pkg-config, launcher)",
              r.returncode == 0 and v.stdout.strip() == "/opt/curesv" and names,
              r.stderr + v.stdout + v.stderr)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def header_version():
    with open(os.path.join(ROOT, "core", "curesv.h")) as f:
        return re.search(r'#define CURESV_VERSION "([^"]+)"', f.read()).group(1)


def config_variables():
    """The CURESV_* names of core/config/config.c's descriptor table."""
    with open(os.path.join(ROOT, "core", "config", "config.c")) as f:
        text = f.read()
    table = text[text.index("options[] = {"):]
    table = table[:table.index("};")]
    return re.findall(r'\{ "(CURESV_[A-Z_]+)"', table)


def files_land(stage):
    for rel, mode in FILES.items():
        path = os.path.join(stage, PREFIX.lstrip("/"), rel)
        ok = os.path.isfile(path)
        check("installed %s" % rel, ok)
        if ok:
            got = stat.S_IMODE(os.stat(path).st_mode)
            check("  mode %o" % mode, got == mode, "mode %o" % got)


def pkg_config(stage, args):
    tmp = os.path.join(stage, "build-test")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(stage, PREFIX.lstrip("/"), "lib",
                                                        "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=stage)
    env.pop("PKG_CONFIG_LIBDIR", None)
    mod = run(["pkg-config", "--modversion", "curesv"], env)
    check("pkg-config --modversion is the header's", mod.stdout.strip() == header_version(),
          mod.stdout + mod.stderr)
    cflags = run(["pkg-config", "--cflags", "curesv"], env)
    libs = run(["pkg-config", "--libs", "curesv"], env)
    inc = os.path.join(stage, PREFIX.lstrip("/"), "include")
    lib = os.path.join(stage, PREFIX.lstrip("/"), "lib")
    check("pkg-config --cflags", cflags.stdout.split() == ["-I" + inc], cflags.stdout + cflags.stderr)
    check("pkg-config --libs", libs.stdout.split() == ["-L" + lib, "-lcuresv"],
          libs.stdout + libs.stderr)
    # a cooperating program, linked the way curesv(3) says: -lcuresv after -lcudart
    prog = os.path.join(tmp, "linked")
    cuda_inc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
    cc = run(["cc", "-std=c11", "-Wl,--as-needed", "-I" + cuda_inc] + cflags.stdout.split() +
             [os.path.join(ROOT, "tests", "integration", "linked.c"), "-L" + args.sim, "-lcudart"] +
             libs.stdout.split() + ["-Wl,-rpath," + lib, "-o", prog])
    check("a program builds with pkg-config's flags", cc.returncode == 0, cc.stderr)
    if cc.returncode == 0:
        env = dict(os.environ, CURESV_REPORT="off")
        r = run([prog], env)
        check("  and runs against the installed library", r.returncode == 0 and
              "linked: bytes=98304 ok" in r.stdout, r.stdout + r.stderr)


def launcher(stage, args):
    bindir = os.path.join(stage, PREFIX.lstrip("/"), "bin")
    curesv = os.path.join(bindir, "curesv")
    staged_lib = os.path.join(stage, PREFIX.lstrip("/"), "lib", "libcuresv.so")
    with open(curesv) as f:
        text = f.read()
    check("the launcher names the installed library",
          "\ninstalled_lib=%s/lib/libcuresv.so\n" % PREFIX in text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CURESV_")}
    v = run([curesv, "--version"], env)
    check("installed curesv --version", v.stdout.strip() == "curesv " + header_version(),
          v.stdout + v.stderr)
    c = run([curesv, "--check", "--reserve", "x=10MB"], env)
    check("installed curesv --check finds a problem", c.returncode == 2 and
          "curesv: --reserve: 'x=10MB': unknown suffix 'MB'" in c.stderr, c.stdout + c.stderr)
    report = os.path.join(stage, "report.json")
    r = run([curesv, "--json", "--report-file", report, "--capacity", "400K", "--reserve",
             "scan=100K", "--reserve", "pipe=200K", "--attach", "scan=scan", "--attach", "pipe=pipe",
             "--", os.path.join(args.bin, "handoff")], env)
    ok = r.returncode == 0 and os.path.exists(report)
    if ok:
        with open(report) as f:
            scan = [x for x in json.load(f)["reservations"] if x["name"] == "scan"]
        ok = bool(scan) and scan[0]["cross_thread_frees"] == 1 and scan[0]["allocated"] == 0
    check("a program runs under the installed launcher and library", ok, r.stdout + r.stderr)
    # which library: the staged one (the installed path does not exist outside the stage)
    probe = "import os; print(os.environ['LD_PRELOAD'].split()[0])"
    p = run([curesv, "--", sys.executable, "-c", probe], env)
    check("  the library preloaded is the installed one",
          os.path.realpath(p.stdout.strip()) == os.path.realpath(staged_lib), p.stdout + p.stderr)
    m = run([curesv, "--", sys.executable, "-c",
             "import curesv; print(curesv.__file__, curesv.available(), curesv.__version__)"], env)
    pydir = os.path.join(stage, PREFIX.lstrip("/"), "lib", "python3", "dist-packages")
    words = m.stdout.split()
    check("  a Python program under it imports the installed module",
          len(words) == 3 and os.path.dirname(words[0]) == pydir and words[1] == "True" and
          words[2] == header_version(), m.stdout + m.stderr)
    with open(os.path.join(pydir, "curesv_pytest.py")) as f:
        check("  the pytest plugin names the installed launcher (its relaunch)",
              '\nINSTALLED_LAUNCHER = "%s/bin/curesv"\n' % PREFIX in f.read())


def tools(stage):
    """The installed tools run from the installed folder, and curesv(1) names each."""
    bindir = os.path.join(stage, PREFIX.lstrip("/"), "bin")
    with open(os.path.join(stage, PREFIX.lstrip("/"), "share", "man", "man1", "curesv.1")) as f:
        page = f.read()
    for tool in TOOLS:
        r = run([os.path.join(bindir, tool), "--help"], cwd=stage)
        check("installed %s --help" % tool, r.returncode == 0 and tool in r.stdout,
              r.stdout + r.stderr)
        name = tool.replace("-", "\\-")
        check("  curesv(1) names it in a section and in SEE ALSO",
              page.count(name) >= 2 and name in page[page.index('.SH "SEE ALSO"'):])


def live_tools(stage, args):
    """The installed curesv-stat and curesv-top read a program run by the installed launcher with
    --live, from the installed folder (curesv-top loads curesv-stat beside it)."""
    bindir = os.path.join(stage, PREFIX.lstrip("/"), "bin")
    with open(os.path.join(bindir, "curesv-stat")) as f:
        check("curesv-stat names the installed library",
              '\nINSTALLED_LIB = "%s/lib/libcuresv.so"\n' % PREFIX in f.read())
    xdg = tempfile.mkdtemp(prefix="curesv-live-", dir=stage)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CURESV_")}
    env.update(XDG_RUNTIME_DIR=xdg, CURESV_RESERVATIONS="scan=1M,pipe=2M",
               CURESV_ATTACH="scan=scan,pipe=pipe")
    p = subprocess.Popen([os.path.join(bindir, "curesv"), "--live", "--",
                          os.path.join(args.bin, "live_hold")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        held = p.stdout.readline() == b"held 4\n"
        folder = os.path.join(xdg, "curesv")
        s = run([os.path.join(bindir, "curesv-stat"), "--json", "--dir", folder, str(p.pid)], env,
                cwd=stage)
        ok = held and s.returncode == 0
        if ok:
            scan = [r for r in json.loads(s.stdout)["reservations"] if r["name"] == "scan"]
            ok = bool(scan) and scan[0]["allocated"] == 256 << 10
        check("installed curesv-stat reads a program run with the installed curesv --live", ok,
              s.stdout[-500:] + s.stderr)
        t = run([os.path.join(bindir, "curesv-top"), "--once", "--dir", folder], env, cwd=stage)
        check("installed curesv-top shows it", t.returncode == 0 and "pid %d" % p.pid in t.stdout
              and " scan " in t.stdout, t.stdout[-500:] + t.stderr)
        p.stdin.write(b"\n\n")
        p.stdin.close()
        check("  the program ends, its live file removed", p.wait(timeout=60) == 0 and
              not os.listdir(folder))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def man_links(man):
    """Each function's name is a link to curesv(3), read whole from another folder."""
    elsewhere = tempfile.mkdtemp(prefix="curesv-elsewhere-")
    try:
        for name in ("curesv_attach", "curesv_reserve", "curesv_strerror"):
            link = os.path.join(man, "man3", name + ".3")
            check("man3/%s.3 is a link to curesv.3" % name,
                  os.path.islink(link) and os.readlink(link) == "curesv.3")
            g = run(["groff", "-man", "-ww", "-Tutf8", link], cwd=elsewhere)
            text = re.sub(r".\x08", "", g.stdout)  # grotty's overstrike for bold
            check("  groff renders it from another folder", g.returncode == 0 and not g.stderr
                  and "RETURN VALUE" in text, g.stderr)
            if shutil.which("man"):
                m = run(["man", "-l", link], dict(os.environ, MANWIDTH="100", MAN_KEEP_STDERR="1"),
                        cwd=elsewhere)
                check("  man -l renders it from another folder", m.returncode == 0 and
                      not m.stderr and "RETURN VALUE" in m.stdout, m.stderr)
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def man_pages(stage):
    man = os.path.join(stage, PREFIX.lstrip("/"), "share", "man")
    man_links(man)
    pages = [os.path.join(man, "man1", "curesv.1"), os.path.join(man, "man3", "curesv.3"),
             os.path.join(man, "man5", "curesv-report.5")] + \
        [os.path.join(man, "man1", "%s.1" % tool) for tool in TOOLS]
    for page in pages:
        g = run(["groff", "-man", "-Tutf8", "-ww", "-z", page])
        check("groff -man -ww renders %s without a warning" % os.path.basename(page),
              g.returncode == 0 and not g.stderr, g.stderr)
        if shutil.which("mandoc"):
            m = run(["mandoc", "-Tlint", "-Wwarning", page])
            check("mandoc -Tlint %s" % os.path.basename(page), not m.stdout and not m.stderr,
                  m.stdout + m.stderr)
        if shutil.which("man"):
            m = run(["man", "-l", page], dict(os.environ, MANWIDTH="100", MAN_KEEP_STDERR="1"))
            check("man -l %s renders it, no warning" % os.path.basename(page),
                  m.returncode == 0 and "SEE ALSO" in m.stdout and not m.stderr, m.stderr)
        with open(page) as f:
            first = f.readline()
        check("  its header names version %s" % header_version(),
              '"curesv %s"' % header_version() in first, first)
    if shutil.which("man"):
        env = dict(os.environ, MANWIDTH="100", MANPATH=man)
        for name, section in [("curesv-report", "5")] + [(tool, "1") for tool in TOOLS]:
            r = run(["man", section, name], env)
            check("man %s %s opens %s(%s)" % (section, name, name, section),
                  r.returncode == 0 and "SEE ALSO" in r.stdout, r.stderr)
        r = run(["man", "curesv_attach"], env)
        check("man curesv_attach opens curesv(3)", r.returncode == 0 and "curesv_attach" in r.stdout
              and "RETURN VALUE" in r.stdout, r.stderr)
    with open(pages[0]) as f:
        page1 = f.read()
    names = config_variables()
    check("core/config/config.c's table has the variables", len(names) >= 13, repr(names))
    for name in names:
        check("curesv(1) documents %s" % name, re.search(r"^\.BR %s " % name, page1, re.M) is not None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--sim", required=True)
    args = ap.parse_args()
    args.bin, args.sim = os.path.abspath(args.bin), os.path.abspath(args.sim)
    stage = tempfile.mkdtemp(prefix="curesv-stage-")
    try:
        r = make("install", destdir=stage)
        check("make install PREFIX=%s DESTDIR=<stage>" % PREFIX, r.returncode == 0, r.stderr)
        files_land(stage)
        pkg_config(stage, args)
        launcher(stage, args)
        tools(stage)
        live_tools(stage, args)
        man_pages(stage)
        r = make("uninstall", destdir=stage)
        left = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(stage, PREFIX.lstrip("/")))
                for f in fs]
        check("make uninstall removes every file", r.returncode == 0 and not left,
              r.stderr + "\n".join(left))
        another_prefix()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    print("install: %d problem%s" % (len(failures), "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
