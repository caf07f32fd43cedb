#!/usr/bin/env python3
"""The core's layering (HACKING.md, "How curesv is built"): no #include cycle between core modules, and
nothing under core/ includes a file under shim/.

A module is x.c with x.h (and x_inline.h, its inline half) in one folder of core/; a file includes
another with #include "..." (system headers, <...>, are not looked at). Prints the include graph's
levels, bottom up, and exits 1 naming each cycle (every module on it) and each include into shim/.

    check_layers.py [--root DIR] [--levels]
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    """core/books/ledger.c -> books/ledger; x_inline.h belongs to x."""
    base, _ = os.path.splitext(path)
    if base.endswith("_inline"):
        base = base[: -len("_inline")]
    return base


def scan(root):
    core = os.path.join(root, "core")
    files = {}
    for folder, _, names in os.walk(core):
        for name in names:
            if name.endswith((".c", ".h")):
                full = os.path.join(folder, name)
                files[os.path.relpath(full, core)] = full
    edges, into_shim = {}, []
    for rel, full in sorted(files.items()):
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        mod = module_of(rel)
        edges.setdefault(mod, set())
        for inc in INCLUDE.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            target = inc if inc in files else here if here in files else None
            if target is None:
                resolved = os.path.normpath(os.path.join(os.path.dirname(full), inc))
                if os.path.commonpath([resolved, os.path.join(root, "shim")]) == \
                        os.path.join(root, "shim") or inc.startswith("shim/"):
                    into_shim.append((rel, inc))
                elif os.path.exists(os.path.join(root, "shim", inc)):
                    into_shim.append((rel, inc))
                continue
            dep = module_of(target)
            if dep != mod:
                edges[mod].add(dep)
    return edges, into_shim


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def levels(edges):
    level = {}

    def of(v, seen=()):
        if v in level:
            return level[v]
        if v in seen:
            return 0
        level[v] = 1 + max((of(w, seen + (v,)) for w in edges.get(v, ())), default=-1)
        return level[v]

    for v in edges:
        of(v)
    return level


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", ".."))
    ap.add_argument("--levels", action="store_true", help="print every module's level")
    args = ap.parse_args()
    edges, into_shim = scan(os.path.abspath(args.root))
    bad = 0
    for comp in cycles(edges):
        print("check_layers: include cycle between core modules: %s" % " <-> ".join(comp))
        bad += 1
    for rel, inc in into_shim:
        print("check_layers: core/%s includes \"%s\", a file of shim/" % (rel, inc))
        bad += 1
    if args.levels or not bad:
        lv = levels(edges)
        for n in range(max(lv.values(), default=-1) + 1):
            mods = sorted(m for m, x in lv.items() if x == n)
            print("level %d: %s" % (n, ", ".join(mods)))
    if bad:
        print("check_layers: %d problem%s" % (bad, "" if bad == 1 else "s"))
        return 1
    print("check_layers: %d modules, no cycle, nothing from shim/" % len(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
