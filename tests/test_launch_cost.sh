#!/bin/sh
# bench/launch_cost.sh on the fake driver: the probe builds, and each of the three queue settings gives a
# row for 1, 2 and 4 launchers with both handles' times in one context, their ratio, and the kernel's time from own green contexts and own processes. A probe that fails fails the script.
# usage: test_launch_cost.sh BUILD_DIR
set -eu
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
PROBE_BATCHES=20 LD_LIBRARY_PATH="$build/tests/fakecuda/driver" OUT="$tmp" "$here/../bench/launch_cost.sh" --build "$build" >"$tmp/table" 2>&1 ||
    rc=$?
cat "$tmp/table"
[ $rc = 0 ] || { echo "FAIL: bench/launch_cost.sh exited $rc"; exit 1; }
for conn in unset 8 32; do
    grep -q "CUDA_DEVICE_MAX_CONNECTIONS=$conn\$" "$tmp/table" || { echo "FAIL: no run with $conn"; exit 1; }
done
for t in 1 2 4; do
    n=$(grep -cE "^$t +[0-9]+ +[0-9]+ +[0-9]+\.[0-9]{3} +[0-9]+ +[0-9]+\$" "$tmp/table")
    [ "$n" = 3 ] || { echo "FAIL: $n rows for $t threads, 3 wanted"; exit 1; }
done
cmp -s "$tmp/table" "$tmp/summary.txt" || { echo "FAIL: summary.txt is not the table"; exit 1; }
# An image the driver cannot load: the probe fails, and so does the script.
mkdir -p "$tmp/bad/bench" && echo "not a fatbin" >"$tmp/bad/bench/bench_kernels.fatbin"
if LD_LIBRARY_PATH="$build/tests/fakecuda/driver" OUT="$tmp/badout" "$here/../bench/launch_cost.sh" --build "$tmp/bad" \
    >"$tmp/badtable" 2>&1; then
    echo "FAIL: a probe that cannot run passed"; exit 1
fi
echo "PASS test_launch_cost"
