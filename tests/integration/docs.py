#!/usr/bin/env python3
"""Holds the documentation to what curesv does (make check-docs):

- README.md's code blocks, in order, in a scratch folder whose entries link to the checkout's (so
  nothing is written into the checkout), on the simulated stack:
    ```sh            run by `sh -e`; it must exit 0
    ```sh norun      shown, not run (only `make test`, which would run this test): `make -n`
                     must know the target
    ```c file=NAME   (any language) written to NAME before the blocks after it run
    ```text          output: each of its lines must be a line that the last `sh` block before it
                     printed (stdout or stderr), a pid read as any pid; a line `...` is skipped
  any other block is an error, so that none is left unchecked; `make install` runs with DESTDIR
  set to a stage in the scratch folder;
- README is a front page: at most 490 lines, and its tools table names every tool;
- every man page renders with `groff -man -Tutf8 -ww -z` and `man -l` without a warning;
- curesv(1) names every option `scripts/curesv --help` lists, each tool's page every option of
  the tool's --help, and curesv-report(5) every metric curesv-stat prints;
- what the pages say of other projects' tools: RMM's replay takes -f, trace_plot PyTorch 2.1.

    docs.py              (LD_LIBRARY_PATH need not be set: the README's commands set it)

Prints one line per check and "docs: N problems".
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAN = os.path.join(ROOT, "scripts", "man")
TOOLS = ("curesv-plot", "curesv-merge", "curesv-export", "curesv-stat", "curesv-top")
PAGES = ["curesv.1", "curesv.3", "curesv-report.5"] + ["%s.1" % t for t in TOOLS]
README_MAX_LINES = 490

failures = []


def check(what, ok, detail=""):
    print("%-72s %s" % (what[:72], "ok" if ok else "FAILED"))
    if not ok:
        failures.append(what)
        for line in str(detail).strip().splitlines()[-30:]:
            print("    " + line)


def blocks(path):
    """The fenced code blocks of a markdown file: (info string, text, line number)."""
    out, info, body, start = [], None, [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                if info is None:
                    info, body, start = line[3:].strip(), [], n
                else:
                    out.append((info, "".join(body), start))
                    info = None
            elif info is not None:
                body.append(line)
    return out


PID = re.compile(r"\bpid \d+")


def masked(line):
    return PID.sub("pid N", line.rstrip())


def scratch_folder():
    """A folder whose entries are links to the checkout's: commands run there as in the checkout,
    and what they write of their own (prog.c, prog) stays there."""
    work = tempfile.mkdtemp(prefix="curesv-docs-")
    for name in os.listdir(ROOT):
        if name != ".git":
            os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    return work


def readme_commands():
    readme = os.path.join(ROOT, "README.md")
    work = scratch_folder()
    # the live books and pools of the README's programs in a folder of their own (the scratch
    # folder, 0700): a reader lists none of the user's other programs, and a pool of the user's
    # with the README's name is left alone
    env = dict(os.environ, DESTDIR=os.path.join(work, "stage"), XDG_RUNTIME_DIR=work)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    # Debian's python3-pytest, for README's pytest example, where a python3 of its own (pyenv)
    # does not look
    if subprocess.run(["python3", "-c", "import pytest"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (env.get("PYTHONPATH"), "/usr/lib/python3/dist-packages") if p)
    last = None  # (stdout + stderr lines, where) of the last sh block
    try:
        for info, text, line in blocks(readme):
            words = info.split()
            where = "README.md:%d" % line
            if words == ["sh"]:
                r = subprocess.run(["sh", "-e", "-c", text], cwd=work, env=env, text=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=600)
                first = text.strip().splitlines()[0]
                check("%s runs: %s" % (where, first), r.returncode == 0,
                      "exit status %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
                last = (set(masked(l) for l in (r.stdout + "\n" + r.stderr).splitlines()), where)
            elif words == ["sh", "norun"]:
                for cmd in text.strip().splitlines():
                    m = re.match(r"make (\w[\w-]*)$", cmd.strip())
                    check("%s is not run; make knows it: %s" % (where, cmd.strip()),
                          m is not None and subprocess.run(
                              ["make", "-n", m.group(1)], cwd=work, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0,
                          "only `make TARGET` lines may be left unrun")
            elif words == ["text"]:
                if last is None:
                    check("%s: output with no command before it" % where, False)
                    continue
                missing = [l for l in text.splitlines()
                           if l.strip() not in ("", "...") and masked(l) not in last[0]]
                check("%s is what %s printed" % (where, last[1]), not missing,
                      "not printed:\n" + "\n".join(missing))
            elif len(words) == 2 and words[1].startswith("file="):
                name = words[1][len("file="):]
                ok = re.fullmatch(r"[\w.-]+", name) is not None and \
                    not os.path.lexists(os.path.join(work, name))
                check("%s is written to %s" % (where, name), ok, "a plain new file name")
                if ok:
                    with open(os.path.join(work, name), "w", encoding="utf-8") as f:
                        f.write(text)
            else:
                check("%s: a block marked %r is neither run nor checked" % (where, info), False,
                      "mark it sh, sh norun, text, or LANGUAGE file=NAME (HACKING.md)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def front_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = readme.count("\n")
    check("README.md is a front page: %d lines, at most %d" % (lines, README_MAX_LINES),
          lines <= README_MAX_LINES)
    for tool in ("curesv",) + TOOLS:
        check("README.md's tools table names %s and its page" % tool,
              "| `%s` |" % tool in readme and "`%s(1)`" % tool in readme)


def pages_render():
    for page in PAGES:
        path = os.path.join(MAN, page)
        g = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", path], text=True,
                           capture_output=True)
        check("groff -man -Tutf8 -ww renders %s without a warning" % page,
              g.returncode == 0 and not g.stderr, g.stderr)
        if shutil.which("man"):
            m = subprocess.run(["man", "-l", path], text=True, capture_output=True,
                               env=dict(os.environ, MANWIDTH="100", MAN_KEEP_STDERR="1"))
            check("man -l %s renders it, no warning" % page,
                  m.returncode == 0 and "SEE ALSO" in m.stdout and not m.stderr, m.stderr)


def read_page(page):
    with open(os.path.join(MAN, page), encoding="utf-8") as f:
        return re.sub(r"\\f[BIRP]", "", f.read()).replace("\\-", "-").replace("\\&", "")


def options_of(program):
    r = subprocess.run([program, "--help"], text=True, capture_output=True)
    # the options of its option list: lines that start with one (`  -o FILE, --output FILE`)
    return sorted(set(re.findall(r"^ +(?:-\w(?: \S+)?, )?(--[a-z][a-z-]*)", r.stdout, re.M))), r


def options_named():
    for program, page in [("curesv", "curesv.1")] + [(t, "%s.1" % t) for t in TOOLS]:
        opts, r = options_of(os.path.join(ROOT, "scripts", program))
        check("%s --help lists options" % program, r.returncode == 0 and len(opts) >= 2,
              r.stdout + r.stderr)
        text = read_page(page)
        for opt in opts:
            if opt == "--help" and program == "curesv":
                continue
            check("%s(%s) names %s" % (page[:-2], page[-1], opt),
                  re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), text) is not None)


def metrics_named():
    with open(os.path.join(ROOT, "scripts", "curesv-stat"), encoding="utf-8") as f:
        # each metric's name comes before its type or help text: ("allocs", "NAME", "help")
        names = sorted(set(re.findall(r'"(curesv_[a-z_]+)",\s', f.read())))
    check("curesv-stat prints metrics", len(names) >= 20, repr(names))
    text = read_page("curesv-report.5")
    for name in names:
        check("curesv-report(5) names %s" % name,
              re.search(r"(?<!\w)%s(?!\w)" % name, text) is not None)


def other_tools():
    """What the pages say of other projects' tools holds: RMM's replay benchmark takes its log with
    -f/--file (benchmarks/replay/replay.cpp), not --log_file; PyTorch's trace_plot needs 2.1."""
    docs = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "HACKING.md")] + \
        [os.path.join(MAN, p) for p in PAGES]
    for path in docs:
        with open(path, encoding="utf-8") as f:
            text = f.read().replace("\\-", "-")
        check("%s names no --log_file (RMM's replay takes -f FILE)" % os.path.basename(path),
              "log_file" not in text)
    check("curesv-report(5) gives RMM's replay its -f", "REPLAY_BENCHMARK -f" in
          read_page("curesv-report.5"))
    export = read_page("curesv-export.1")
    check("curesv-export(1) says trace_plot needs PyTorch 2.1, and what an older one reads",
          "PyTorch 2.1" in export and "An older PyTorch reads" in export)


def main():
    front_page()
    other_tools()
    pages_render()
    options_named()
    metrics_named()
    readme_commands()
    print("docs: %d problem%s" % (len(failures), "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
