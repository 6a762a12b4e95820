#!/usr/bin/env bash
# Launch pacing (CUMUX_PACE, server/pacing.c): with it forced on for every client (thresholds at their
# least), programs whose kernels wait for their stream's earlier work still give their results, a stream
# waiting on a value that work sent after it writes still goes on (the wait is bounded), and the server
# says how many launches waited; below its thresholds (as by default with few clients), nothing waits.
# On the fake driver in CI; on a GPU the same script.
# usage: test_pacing.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0
log="$tmp/log/cumuxd.log"
fail_show="$tmp/run.out"
start() {
    rm -f "$log"
    LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start ($*)"
}
programs="gpu_stream_memops gpu_vecadd gpu_matmul gpu_legacy_stream gpu_events gpu_graph gpu_multithread"
# Forced on: every launch on a busy stream waits for it.
CUMUX_PACE=1 CUMUX_PACE_CLIENTS=1 CUMUX_PACE_MIN_US=0 start forced
for p in $programs; do
    timeout 120 "$cli" run -- "$gdir/$p" >"$tmp/run.out" 2>&1 || fail "$p with pacing forced on"
done
# Two at once, each paced.
timeout 120 "$cli" run -- "$gdir/gpu_stream_memops" >"$tmp/a.out" 2>&1 &
a=$!
timeout 120 "$cli" run -- "$gdir/gpu_matmul" >"$tmp/run.out" 2>&1 || fail "gpu_matmul beside another, paced"
wait "$a" || { cp "$tmp/a.out" "$tmp/run.out"; fail "gpu_stream_memops beside another, paced"; }
# Many at once, each paced: all give their results.
pids=()
for ((i = 1; i <= 24; i++)); do
    timeout 120 "$cli" run -- "$gdir/gpu_matmul" >"$tmp/m.$i.out" 2>&1 &
    pids+=($!)
done
for ((i = 1; i <= 24; i++)); do
    wait "${pids[$((i - 1))]}" || { cp "$tmp/m.$i.out" "$tmp/run.out"; fail "client $i of 24, paced"; }
done
"$cli" stop >/dev/null || fail "cumux stop"
grep -q "launches waited for their stream (pacing)" "$log" || fail "no launch waited with pacing forced on"
# On by default but below its thresholds (one client launching, 33 needed; 2 needed): no launch waits.
start default
"$cli" run -- "$gdir/gpu_stream_memops" >"$tmp/run.out" 2>&1 || fail "gpu_stream_memops, pacing off"
"$cli" stop >/dev/null || fail "cumux stop"
CUMUX_PACE=1 CUMUX_PACE_CLIENTS=2 CUMUX_PACE_MIN_US=0 start "two clients needed"
"$cli" run -- "$gdir/gpu_stream_memops" >"$tmp/run.out" 2>&1 || fail "gpu_stream_memops, one client"
"$cli" stop >/dev/null || fail "cumux stop"
! grep -q "waited for their stream (pacing)" "$log" || fail "launches waited below the thresholds"
echo "PASS pacing"
