#!/usr/bin/env python3
"""Checks a curesv JSON report against expected values, with a real JSON parser.

    check_report.py REPORT.json EXPECTED.json

EXPECTED.json holds the values the report must carry, for the keys DESIGN.md lets scripts rely on:

    {"reservations": [{"name": ..., "device": ..., "size": ..., "allocated": ..., "peak": ...,
                       "allocs": ..., "frees": ..., "cross_thread_frees": ..., "caller_view": ...,
                       "denied": ...}, ...],          # every reservation, in report order
     "shared": {"allocated": ..., "peak": ...},
     "orphan_bytes": ..., "unknown_frees": ...,
     "table": {"slots": ..., "live": ..., "high_water": ..., "full_events": ...},
     "leaks": {"count": ..., "bytes": ...,
               "largest": [{"reservation": ..., "thread": ..., "bytes": ...}, ...]}}

Every contract key must be present with exactly the expected value and type (integers are JSON
integers, not floats or booleans).

    check_report.py --rows REPORT.json...

Each report, written while nothing ran, adds up (curesv-report(5), "HOW THE ROWS ADD UP"): on each device the rows
(its reservations listed, its retired reservations, its orphan tier, its shared pool) hold every
allocation and free, so allocations less frees over all rows is what is live (leaks.count);
transfers in equal transfers out on each device; under origin attribution, the live bytes of the
live reservations, the shared pool and the orphan tier are the device's; the top-level orphan
figures are the devices' summed.

    check_report.py --keys scripts/man/curesv-report.5 REPORT.json...

Every key each report has, at any depth, is named in the key table of curesv-report(5) (section
JSON REPORT): an item's tag names top-level keys; the bold lists of its text name their keys, `name{...}` an object's own and `name[]{...}` those of an array's objects.

Exit status 0 when all match; otherwise 1, one line per mismatch on stderr.
"""
import json
import os
import re
import sys

RESERVATION_KEYS = ("name", "device", "size", "allocated", "peak", "allocs", "frees",
                    "cross_thread_frees", "caller_view", "denied")
SHARED_KEYS = ("allocated", "peak")
TABLE_KEYS = ("slots", "live", "high_water", "full_events")
LEAK_KEYS = ("count", "bytes")
LARGEST_KEYS = ("reservation", "thread", "bytes")

errors = []


def same(where, got, want):
    if type(want) is int:
        ok = type(got) is int and got == want
    else:
        ok = type(got) is type(want) and got == want
    if not ok:
        errors.append(f"{where}: got {got!r}, expected {want!r}")


def obj(where, parent, key, kind):
    if not isinstance(parent, dict) or key not in parent:
        errors.append(f"{where}: missing key '{key}'")
        return None
    value = parent[key]
    if not isinstance(value, kind):
        errors.append(f"{where}.{key}: {type(value).__name__}, expected {kind.__name__}")
        return None
    return value


def fields(where, got, want, keys):
    for k in keys:
        if k not in got:
            errors.append(f"{where}: missing key '{k}'")
        else:
            same(f"{where}.{k}", got[k], want[k])


# ---- the rows add up -----------------------------------------------------------------------------

def device_rows(report, device):
    """Every row of device d's table: its reservations listed (live and released), its retired
    reservations, its orphan tier and its shared pool."""
    return [r for r in report["reservations"] if r["device"] == device["device"]] + \
        [device["retired"], device["orphan"], device["shared"]]


def rows_problems(report):
    """What does not add up in a report written while nothing ran: one line each."""
    out, live = [], 0
    for d in report["devices"]:
        rows, where = device_rows(report, d), "device %d" % d["device"]
        allocs, frees = sum(r["allocs"] for r in rows), sum(r["frees"] for r in rows)
        if frees > allocs:
            out.append("%s: %d frees over its rows, more than its %d allocations" %
                       (where, frees, allocs))
        live += allocs - frees
        t_in, t_out = (sum(r[k] for r in rows) for k in ("transfers_in", "transfers_out"))
        if t_in != t_out:
            out.append("%s: %d transfers in, %d out" % (where, t_in, t_out))
        if d["orphan"]["allocs"] or d["orphan"]["transfers_in"]:
            out.append("%s: allocations or transfers into the orphan tier" % where)
        if report["attribution"] == "origin":
            held = sum(r["allocated"] for r in report["reservations"]
                       if r["device"] == d["device"] and not r["released"])
            held += d["shared"]["allocated"] + d["orphan"]["bytes"]
            if held != d["allocated"]:
                out.append("%s: live reservations, shared pool and orphan tier hold %d bytes, "
                           "the device %d" % (where, held, d["allocated"]))
        if d["orphan"]["bytes"] != d["orphan_bytes"]:
            out.append("%s: orphan.bytes %d, orphan_bytes %d" % (where, d["orphan"]["bytes"],
                                                                 d["orphan_bytes"]))
    if live != report["leaks"]["count"]:
        out.append("allocations less frees over every row: %d, live allocations (leaks.count) %d"
                   % (live, report["leaks"]["count"]))
    for top, key in (("orphan_bytes", "bytes"), ("orphan_host_bytes", "host_bytes"),
                     ("orphan_frees", "frees")):
        summed = sum(d["orphan"][key] for d in report["devices"])
        if report[top] != summed:
            out.append("%s %d, the devices' orphan.%s %d" % (top, report[top], key, summed))
    return out


# ---- curesv-report(5)'s key table names every key -------------------------------------------------------------

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_keys(span, pos=0, depth=0):
    """`a, b[]{c, d{e}}` as {"a": {}, "b": {"c": {}, "d": {"e": {}}}}, and where it stopped; None
    when the span is no such list (a value, a function name with a call, prose)."""
    keys = {}
    while True:
        m = NAME.match(span, pos)
        if not m:
            return None
        name, pos = m.group(), m.end()
        if span.startswith("[]", pos):
            pos += 2
        keys.setdefault(name, {})
        if span.startswith("{", pos):
            inner = parse_keys(span, pos + 1, depth + 1)
            if inner is None or not span.startswith("}", inner[1]):
                return None
            keys[name].update(inner[0])
            pos = inner[1] + 1
        if span.startswith(", ", pos):
            pos += 2
            continue
        if depth == 0 and pos != len(span):
            return None
        return keys, pos


def roff_text(text):
    """A man page's line as plain text, bold spans as `...` (as the key table's markdown was)."""
    text = re.sub(r"\\fB[^\\]*\\fR\(\d\)", "", text)  # a page named, curesv(1): no key
    text = re.sub(r"\\f[BI]", "`", text)
    text = re.sub(r"\\f[RP]", "`", text)
    text = text.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
    return text.replace("``", "")


def page_keys(path):
    """The key table of curesv-report(5)'s section JSON REPORT, as a tree of names: each item's tag
    names keys, and the key lists in bold in its text (`a, b[]{c, d}`) are the keys below them."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section = text.split('\n.SH "JSON REPORT"\n', 1)[1].split("\n.SH ", 1)[0]
    tree = {}
    for item in section.split("\n.TP\n")[1:]:
        lines = item.split("\n")
        tag, body = roff_text(lines[0]), []
        for line in lines[1:]:
            if line.startswith("."):
                break
            body.append(line)
        children = {}
        for span in re.findall(r"`([^`]*)`", roff_text(" ".join(body))):
            parsed = parse_keys(span)
            if parsed:
                merge_tree(children, parsed[0])
        for span in re.findall(r"`([^`]*)`", tag):
            for name in (parse_keys(span) or ({}, 0))[0]:
                merge_tree(tree.setdefault(name, {}), children)
    return tree


def merge_tree(into, more):
    for k, v in more.items():
        merge_tree(into.setdefault(k, {}), v)


def unnamed_keys(value, tree, path=""):
    """The paths of the keys of `value` that `tree` does not name."""
    if isinstance(value, list):
        return sorted({p for v in value for p in unnamed_keys(v, tree, path + "[]")})
    if not isinstance(value, dict):
        return []
    out = []
    for k, v in value.items():
        here = "%s.%s" % (path, k) if path else k
        if k not in tree:
            out.append(here)
        else:
            out.extend(unnamed_keys(v, tree[k], here))
    return out


def load_report(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_many(args):
    """--rows REPORT... or --keys PAGE REPORT...: one line per problem."""
    if args[0] == "--keys":
        tree = page_keys(args[1])
        problems = ["%s: key %s is not in curesv-report(5)'s key table" % (p, k)
                    for p in args[2:] for k in unnamed_keys(load_report(p), tree)]
    else:
        problems = ["%s: %s" % (p, line) for p in args[1:] for line in rows_problems(load_report(p))]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] in ("--rows", "--keys"):
        return check_many(sys.argv[1:])
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")  # strict: JSON text is UTF-8 (RFC 8259)
    except UnicodeDecodeError as e:
        print(f"not UTF-8: {e}\n{raw!r}", file=sys.stderr)
        return 1
    try:
        report = json.loads(text)
    except json.JSONDecodeError as e:
        print(f"not JSON: {e}\n{text}", file=sys.stderr)
        return 1
    with open(sys.argv[2]) as f:
        want = json.load(f)
    if not isinstance(report, dict):
        print("the report is not a JSON object", file=sys.stderr)
        return 1

    rows = obj("report", report, "reservations", list)
    if rows is not None:
        names = [r.get("name") if isinstance(r, dict) else None for r in rows]
        same("reservations[].name", names, [r["name"] for r in want["reservations"]])
        for i, (got, exp) in enumerate(zip(rows, want["reservations"])):
            if isinstance(got, dict):
                fields(f"reservations[{i}]({exp['name']})", got, exp, RESERVATION_KEYS)
            else:
                errors.append(f"reservations[{i}]: not an object")

    shared = obj("report", report, "shared", dict)
    if shared is not None:
        fields("shared", shared, want["shared"], SHARED_KEYS)

    for key in ("orphan_bytes", "unknown_frees"):
        if key not in report:
            errors.append(f"report: missing key '{key}'")
        else:
            same(key, report[key], want[key])

    table = obj("report", report, "table", dict)
    if table is not None:
        fields("table", table, want["table"], TABLE_KEYS)

    leaks = obj("report", report, "leaks", dict)
    if leaks is not None:
        fields("leaks", leaks, want["leaks"], LEAK_KEYS)
        if "largest" in want["leaks"]:
            largest = obj("leaks", leaks, "largest", list)
            if largest is not None:
                same("len(leaks.largest)", len(largest), len(want["leaks"]["largest"]))
                for i, (got, exp) in enumerate(zip(largest, want["leaks"]["largest"])):
                    fields(f"leaks.largest[{i}]", got, exp, LARGEST_KEYS)

    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
