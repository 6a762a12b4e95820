#!/usr/bin/env bash
# With GPU coredumps on, a fault whose dump names no one must never be blamed on a bystander. The culprit
# (`gpu_fault trap`) is answered with success at its synchronize while the dump is written, which ends its
# launches in the server's count and leaves a bystander with long kernels queued (gpu_busy) the only client
# with kernels in flight; the server must see that the culprit's launches ended lately and name no one
# (docs/faults.md). On the fake driver in CI
# (CUMUX_FAKE_TRAP_DUMP_UNNAMED=late: a trap's dump that names no one, the error showing 30 ms after a
# synchronize passed).
# usage: test_fault_unnamed.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log" ASAN_OPTIONS=detect_leaks=0
export CUMUX_FAULT_COREDUMP=1 GT_FAULT_SYNC_MAY_PASS=1
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
by=""
cleanup() {
    exec 9>&- 2>/dev/null
    [ -n "$by" ] && kill "$by" 2>/dev/null
    stop_ours
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "---- cumuxd log ----"
    cat "$tmp/log/cumuxd.log" 2>/dev/null
    exit 1
}

start_ours
wait_standby_ready 1 || true # without a standby (CUMUX_STANDBY=0) the test is the same
mkfifo "$tmp/by.in" || fail "mkfifo"
"$cli" run -- "$gdir/gpu_busy" 300 60 <"$tmp/by.in" >"$tmp/by.out" 2>&1 & # 18 s of kernels, queued at once
by=$!
exec 9>"$tmp/by.in"
for ((i = 0; i < 100; i++)); do "$cli" status | grep -q " pid $by " && break; sleep 0.1; done
sleep 1 # its kernels queued
# The culprit: whether it gets its error depends on being named, which it cannot be here.
"$cli" run -- "$gdir/gpu_fault" trap >"$tmp/fault.out" 2>&1 &
culprit=$!
for ((i = 0; i < 100; i++)); do "$cli" status | grep -q "^fault 1:" && break; sleep 0.1; done
rec=$("$cli" status | grep "^fault 1:") || fail "no fault recorded: $("$cli" status)"
wait $culprit
echo "the culprit's run: $(tail -1 "$tmp/fault.out")"
echo "$rec" | grep -q "culprit: [0-9]* pid $by " && fail "the bystander (pid $by) was named the culprit: $rec"
echo "$rec" | grep -q "culprit: not known" || fail "someone was named the culprit of a fault no one could be: $rec"
echo "fault_unnamed: $rec"
echo "PASS fault_unnamed"
