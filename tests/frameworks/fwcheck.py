"""Shared by the framework tests: skip when a framework is missing, report one line, exit with a code
run.sh understands (0 pass, 1 fail, 77 skip)."""
import importlib
import sys


def need(*modules):
    """Import the modules, or skip the test (exit 77) naming the first one missing."""
    got = []
    for m in modules:
        try:
            got.append(importlib.import_module(m))
        except Exception as e:  # ImportError, or a broken install
            print("SKIP %s: %s not importable (%s)" % (sys.argv[0], m, e))
            sys.exit(77)
    return got[0] if len(got) == 1 else got


def check(ok, what):
    if not ok:
        print("FAIL %s: %s" % (sys.argv[0], what))
        sys.exit(1)


def close(a, b, rtol, what):
    """a and b (floats or sequences of floats) agree to a relative tolerance."""
    a = list(a) if hasattr(a, "__len__") else [a]
    b = list(b) if hasattr(b, "__len__") else [b]
    check(len(a) == len(b), "%s: %d values against %d" % (what, len(a), len(b)))
    for i, (x, y) in enumerate(zip(a, b)):
        if abs(float(x) - float(y)) > rtol * max(1.0, abs(float(y))):
            check(False, "%s: element %d is %r, expected %r (rtol %g)" % (what, i, x, y, rtol))


def passed(detail=""):
    print("PASS %s%s" % (sys.argv[0], ": " + detail if detail else ""))
    sys.exit(0)
