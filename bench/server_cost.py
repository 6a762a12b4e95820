#!/usr/bin/env python3
"""cumuxd's own instructions per launch, from callgrind outputs of the server (bench/server_cost.sh).

Callgrind collected only while the worker took a message from the ring and handled it. Of that, what the
driver's calls cost (calls from any other object into libcuda, each with its whole cost) is the driver's;
the rest is cumuxd's own, with the libc it calls. Launches: the calls of op_launch.
usage: server_cost.py CALLGRIND_OUT... [--top N]
"""
import re
import sys
from collections import defaultdict


def parse(path, acc):
    names = {"ob": {}, "fn": {}}
    ob = fn = cob = cfn = None
    pending_call = None  # (callee object, callee function, count) until its cost line
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = raw.rstrip("\n")
        m = re.match(r"^(ob|cob|fn|cfn)=(.*)$", line)
        if m:
            kind, val = m.group(1), m.group(2)
            table = names["ob" if kind in ("ob", "cob") else "fn"]
            c = re.match(r"^\((\d+)\)(?: (.*))?$", val)
            if c:
                if c.group(2) is not None:
                    table[c.group(1)] = c.group(2)
                val = table.get(c.group(1), "?")
            if kind == "ob":
                ob, cob = val, None
            elif kind == "cob":
                cob = val
            elif kind == "fn":
                fn, cob = val, None
            else:
                cfn = val
            continue
        m = re.match(r"^calls=(\d+)", line)
        if m:
            pending_call = (cob or ob, cfn, int(m.group(1)))
            cob = None
            continue
        if not line or not (line[0].isdigit() or line[0] in "+-*"):
            continue
        fields = line.split()
        if len(fields) < 2:
            continue
        cost = int(fields[-1])
        if pending_call:
            callee_ob, callee, count = pending_call
            pending_call = None
            if callee == "op_launch":
                acc["launches"] += count
            if is_driver(callee_ob) and not is_driver(ob):
                acc["driver"] += cost
                acc["driver_by"][callee] += cost
            elif not is_driver(callee_ob) and not is_driver(ob) and not is_cumuxd(callee_ob) and is_cumuxd(ob):
                acc["own_by"][fn] += cost  # libc and the like, charged to the cumuxd function calling it
            continue
        acc["total"] += cost
        if is_cumuxd(ob):
            acc["own_by"][fn] += cost


def is_driver(ob):
    return bool(ob) and re.search(r"/libcuda\.so", ob) is not None


def is_cumuxd(ob):
    return bool(ob) and ob.endswith("/cumuxd")


def main(argv):
    top = 12
    files = []
    it = iter(argv)
    for a in it:
        if a == "--top":
            top = int(next(it))
        else:
            files.append(a)
    if not files:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    acc = {"launches": 0, "total": 0, "driver": 0, "driver_by": defaultdict(int), "own_by": defaultdict(int)}
    for f in files:
        parse(f, acc)
    n = acc["launches"]
    if n == 0 or acc["total"] == 0:
        print("server_cost: no launch was collected (is the server's worker in these files?)", file=sys.stderr)
        return 1
    own = acc["total"] - acc["driver"]
    print(f"== cumuxd's instructions per launch (callgrind, {n:,} launches, the worker's ring take and dispatch) ==")
    print(f"{'part':<52} {'per launch':>12}")
    print(f"{'the worker, in all':<52} {acc['total'] / n:>12.0f}")
    print(f"{'  in the driver (calls into libcuda, whole)':<52} {acc['driver'] / n:>12.0f}")
    for name, cost in sorted(acc["driver_by"].items(), key=lambda kv: -kv[1])[:4]:
        print(f"{'    ' + name:<52} {cost / n:>12.0f}")
    print(f"{'  cumuxd own (with the libc it calls)':<52} {own / n:>12.0f}")
    for name, cost in sorted(acc["own_by"].items(), key=lambda kv: -kv[1])[:top]:
        print(f"{'    ' + name:<52} {cost / n:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
