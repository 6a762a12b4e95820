#!/bin/sh
# bench/kernel_trace.py (issue 9's kernel traces) on two made-up traces: the same kernels, the second with
# 2 us more between kernels and one kernel built with more registers. The comparison must put the
# difference between the kernels, not in them, and name the kernel that runs differently.
# --window (two programs' traces merged) is checked after.
# usage: test_kernel_trace.sh PYTHON
set -eu
py=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/a" "$tmp/b"
"$py" - "$tmp" <<'PYEOF'
import sys
d = sys.argv[1]
hdr = ("start\tend\tstream\tchannel\tchannel_type\tregs\tstatic_shared\tdynamic_shared\tshared_executed\t"
       "cache_requested\tcache_executed\tlocal_per_thread\tgrid\tblock\tcluster\tlaunch_type\tgraph\tname\n")
for side, extra, regs in (("a", 0, 32), ("b", 2000, 40)):
    t = 1000
    with open("%s/%s/kernels.1.tsv" % (d, side), "w") as f:
        f.write(hdr)
        for i in range(30000):
            dur = 10000 + (i % 7) * 1000
            r = regs if i % 7 == 3 else 32
            f.write("%d\t%d\t7\t3\t1\t%d\t0\t0\t0\t0\t0\t0\t1,1,1\t128,1,1\t0,0,0\t0\t0\tk%d\n"
                    % (t, t + dur, r, i % 7))
            t += dur + 500 + extra
open("%s/b/kernels.2.tsv" % d, "w").write(hdr)  # a standby's trace: the larger file must be taken
PYEOF
"$py" "$here/../bench/kernel_trace.py" "$tmp/a" "$tmp/b" --last 20000 >"$tmp/out" || { cat "$tmp/out"; exit 1; }
fail() { echo "FAIL kernel_trace: $1"; cat "$tmp/out"; exit 1; }
grep -q '^kernel time summed, ms  *260.001  *260.001  *1.0000$' "$tmp/out" || fail "kernel time not equal on both sides"
grep -q '^GPU running none, ms  *9.999  *49.998  *5.0000$' "$tmp/out" || fail "the idle time between kernels"
grep -q '^gaps 2-5 us: count, time  *0  *0.000ms  *19999  *49.998ms$' "$tmp/out" || fail "the 2.5 us gaps not counted"
grep -q '^kernels run differently .*: 1 of 7$' "$tmp/out" || fail "not one kernel run differently"
grep -q '^  k3$' "$tmp/out" || fail "k3 not named"
grep -q 'cumux  x2857  .*regs=40' "$tmp/out" || fail "k3's registers under cumux not shown"
grep -q '^ *0.50 *2.50 *2857 *5.714  k[0-6]$' "$tmp/out" || fail "the gap before each kernel"

# --window: two programs at once, one trace each (as under MPS) against one trace holding both (as cumux's
# worker), each cut to the same stretch before its end; a trace of a few kernels (a standby's) left out;
# a kernel that only one side runs is named with its time.
mkdir "$tmp/c" "$tmp/d"
"$py" - "$tmp" <<'PYEOF'
import sys
d = sys.argv[1]
hdr = ("start\tend\tstream\tchannel\tchannel_type\tregs\tstatic_shared\tdynamic_shared\tshared_executed\t"
       "cache_requested\tcache_executed\tlocal_per_thread\tgrid\tblock\tcluster\tlaunch_type\tgraph\tname\n")
def row(t, stream, name):
    return "%d\t%d\t%d\t3\t1\t32\t0\t0\t0\t0\t0\t0\t1,1,1\t128,1,1\t0,0,0\t0\t0\t%s\n" % (t, t + 10000, stream, name)
both = open("%s/d/kernels.9.tsv" % d, "w")
both.write(hdr)
for prog in (1, 2):
    with open("%s/c/kernels.%d.tsv" % (d, prog), "w") as f:
        f.write(hdr)
        for i in range(10000):  # 10 us kernels every 10.5 us: 105 ms
            t = 1000 + i * 10500
            f.write(row(t, prog, "k%d" % prog))
            both.write(row(t, 10 + prog, "k9" if prog == 2 and i % 10 == 0 else "k%d" % prog))
both.close()
with open("%s/c/kernels.3.tsv" % d, "w") as f:  # a standby's few kernels, inside the window
    f.write(hdr + "".join(row(i * 20000000, 5, "kS") for i in range(10)))
PYEOF
"$py" "$here/../bench/kernel_trace.py" "$tmp/c" "$tmp/d" --window 0.1,0.01 --labels MPS,cumux >"$tmp/out" ||
    { cat "$tmp/out"; exit 1; }
# each trace ends at 105.0005 ms: 5.0005-95.0005 ms holds the kernels 477-9046 of each program
grep -q '^kernels  *17140  *17140$' "$tmp/out" || fail "the window's kernels (two programs, one trace each and one for both)"
grep -q 'only cumux .* in *857  k9$' "$tmp/out" || fail "the kernel that only cumux ran, with its count"
grep -q 'kS' "$tmp/out" && fail "the standby's trace was taken"
grep -q '^kernel time summed, ms  *171.400  *171.400  *1.0000$' "$tmp/out" || fail "kernel time in the window"
echo "PASS kernel_trace"
