#!/usr/bin/env python3
"""Checks the source's shape that docs/hacking.md promises and no compiler sees:

- no hand-written .c or .h file in server/ or shim/ is longer than 1,000 lines (a file that big holds
  several concerns: split it by concern);
- struct srv_client (server/server.h) has at most 30 fields: what is not common to every concern lives
  in the concern's own part (server/client/*.h);
- every message helper generated for the shim (shim_op_* in shim/generated/calls.h) is used: an op the
  shim sends its own way has the spec's flag `hand` instead, so that no helper is left beside
  hand-built code.

    tools/check_structure.py [REPO]
Exits 1 with one line per violation, 0 with a summary."""
import os
import re
import sys

MAX_LINES = 1000
MAX_CLIENT_FIELDS = 30
FOLDERS = ("server", "shim")


def long_files(repo):
    bad = []
    for folder in FOLDERS:
        for root, dirs, files in os.walk(os.path.join(repo, folder)):
            dirs[:] = [d for d in dirs if d != "generated"]  # written by tools/gen, not by hand
            for name in files:
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    bad.append("%s: %d lines (at most %d)" % (os.path.relpath(path, repo), n, MAX_LINES))
    return bad


def strip_c(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)


def struct_fields(header, name):
    """The names of the fields of `struct NAME { ... };` in HEADER, nested struct bodies counted as one."""
    text = strip_c(open(header, encoding="utf-8").read())
    m = re.search(r"\bstruct\s+%s\s*\{" % re.escape(name), text)
    if not m:
        raise SystemExit("check_structure: struct %s not found in %s" % (name, header))
    i, depth, body = m.end(), 1, []
    while depth:
        ch = text[i]
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 1 or (depth == 2 and ch == "{"):
            body.append(ch if depth == 1 else " ")  # a nested body reads as one token
        i += 1
    fields = []
    for decl in "".join(body).split(";"):
        decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
        if not decl:
            continue
        # one declaration may declare several fields: `uint32_t n, cap;`
        for part in decl.split(","):
            words = re.findall(r"[A-Za-z_]\w*", part)
            if words:
                fields.append(words[-1])
    return fields


def unused_helpers(repo):
    calls = open(os.path.join(repo, "shim", "generated", "calls.h"), encoding="utf-8").read()
    helpers = set(re.findall(r"static inline CUresult (shim_op_\w+)\(", calls))
    text = ""
    for name in sorted(os.listdir(os.path.join(repo, "shim"))):
        if name.endswith((".c", ".h")):
            text += open(os.path.join(repo, "shim", name), encoding="utf-8", errors="replace").read()
    used = set(re.findall(r"\b(shim_op_\w+)\(", text))
    return sorted(helpers - used), len(helpers)


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = long_files(repo)
    fields = struct_fields(os.path.join(repo, "server", "server.h"), "srv_client")
    if len(fields) > MAX_CLIENT_FIELDS:
        bad.append("server/server.h: struct srv_client has %d fields (at most %d): %s"
                   % (len(fields), MAX_CLIENT_FIELDS, " ".join(fields)))
    unused, nhelpers = unused_helpers(repo)
    for h in unused:
        bad.append("shim/generated/calls.h: %s is not used by the shim (use it, or flag the op `hand`)" % h)
    for b in bad:
        print("check_structure: " + b)
    if bad:
        return 1
    print("check_structure: no hand-written file in %s over %d lines; struct srv_client has %d fields; "
          "the shim uses all %d generated message helpers" % ("/ ".join(FOLDERS) + "/", MAX_LINES, len(fields), nhelpers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
