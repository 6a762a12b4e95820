#!/usr/bin/env python3
"""Fails when source files of one component call each other in a circle.

Reads the object files of a target (one per source file) with nm: a file depends on another when it uses a
symbol the other defines. Prints the dependencies and any cycle (a strongly connected set of two or more
files), and exits 1 if there is one. docs/hacking.md says which way the dependencies go. Generated files
(under generated/) are left out: they are tables, like cuGetProcAddress's table of every entry point,
cuGetProcAddress included.

usage: check_cycles.py NAME OBJECT...      (NAME: what to call the component in the output)
Environment: NM (default nm)."""
import os
import subprocess
import sys


def symbols(obj):
    nm = os.environ.get("NM", "nm")
    out = subprocess.run([nm, obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRC":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return defined, used


def cycles(edges, nodes):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

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
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    name, objs = sys.argv[1], [o for o in sys.argv[2:] if "/generated/" not in o]
    files = {}
    for o in objs:
        files[os.path.basename(o).split(".")[0]] = symbols(o)
    owner = {s: f for f, (defined, _) in files.items() for s in defined}
    edges = {f: {owner[s] for s in used if s in owner and owner[s] != f} for f, (_, used) in files.items()}
    for f in sorted(edges):
        if edges[f]:
            print("%s: %s -> %s" % (name, f, " ".join(sorted(edges[f]))))
    found = cycles(edges, files)
    if found:
        for c in found:
            print("%s: FAIL: these files call each other in a circle: %s" % (name, " ".join(c)))
        return 1
    print("%s: %d files, no circle" % (name, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
