#!/bin/sh
# bench/server_cost.py on a made-up callgrind output whose figures are known: the launches are op_launch's
# calls, the driver's share every call from another object into libcuda (whole), cumuxd's own the rest,
# each cumuxd function charged with the libc it calls. Then, where valgrind is installed, bench/server_cost.sh
# on the fake driver must find every launch bench_launch made.
# usage: test_server_cost.sh PYTHON [BUILD_DIR]
set -eu
py=$1 build=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# srv_dispatch (self 10) calls the driver (100, twice) and op_launch (twice, 246 in all: self 40, the
# driver 200, libc's clock_gettime 6); the driver's and libc's own lines count in the total.
cat >"$tmp/out.1" <<'CG'
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir

ob=(1) /x/server/cumuxd
fl=(1) ???
fn=(1) srv_dispatch
0 10
cob=(2) /x/driver/libcuda.so.1
cfi=(1)
cfn=(2) cuLaunchKernel
calls=2 0
0 100
cfn=(3) op_launch
calls=2 0
0 246

fn=(3)
0 40
cob=(2)
cfi=(1)
cfn=(2)
calls=2 0
0 200
cob=(3) /lib/libc.so.6
cfi=(1)
cfn=(4) clock_gettime
calls=2 0
0 6

ob=(2)
fl=(1)
fn=(2)
0 300

ob=(3)
fl=(1)
fn=(4)
0 6
CG
"$py" "$here/../bench/server_cost.py" "$tmp/out.1" >"$tmp/table"
cat "$tmp/table"
# Per launch (2): in all 356 / 2 = 178, the driver 300 / 2 = 150, own 56 / 2 = 28: op_launch 23, srv_dispatch 5.
grep -q '2 launches' "$tmp/table" || { echo "FAIL: launch count"; exit 1; }
grep -q '^the worker, in all  *178$' "$tmp/table" || { echo "FAIL: total"; exit 1; }
grep -q '^  in the driver (calls into libcuda, whole)  *150$' "$tmp/table" || { echo "FAIL: driver share"; exit 1; }
grep -q '^    cuLaunchKernel  *150$' "$tmp/table" || { echo "FAIL: driver by function"; exit 1; }
grep -q '^  cumuxd own (with the libc it calls)  *28$' "$tmp/table" || { echo "FAIL: own share"; exit 1; }
grep -q '^    op_launch  *23$' "$tmp/table" || { echo "FAIL: op_launch with its libc"; exit 1; }
grep -q '^    srv_dispatch  *5$' "$tmp/table" || { echo "FAIL: srv_dispatch"; exit 1; }
if "$py" "$here/../bench/server_cost.py" /dev/null >/dev/null 2>&1; then echo "FAIL: no launches must fail"; exit 1; fi

if [ -n "$build" ] && command -v valgrind >/dev/null 2>&1; then
    OUT="$tmp/run" "$here/../bench/server_cost.sh" --build "$build" --launches 500 >"$tmp/real"
    cat "$tmp/real"
    # bench_launch 500 1 10: 1,000 warm-up, 500 timed, 400 batches of 256, 10 launch-and-sync: 103,910.
    grep -q '103,910 launches' "$tmp/real" || { echo "FAIL: the real run's launch count"; exit 1; }
    own=$(awk '/cumuxd own/ {print $NF}' "$tmp/real")
    [ "${own:-0}" -gt 0 ] || { echo "FAIL: no own cost in the real run"; exit 1; }
else
    echo "(the run on the fake driver skipped: no valgrind, or no build directory given)"
fi
echo "PASS test_server_cost"
