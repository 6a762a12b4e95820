#!/usr/bin/env bash
# Completion marks (server/marks.c): a stream its program keeps asking about gets marks behind its work when
# the worker idles, and the questions after are answered from them. gpu_idle_known (whose case 7 checks
# that a mark never says done before the work is) passes with them, and the server says it answered
# questions from marks (CUMUX_MARKS=1); by default (off until measured on the GPU) it passes too and none is.
# On the fake driver in CI; on a GPU the same script.
# usage: test_marks.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0 CUMUX_DEBUG=1
log="$tmp/log/cumuxd.log"
fail_show="$tmp/run.out"
start() {
    rm -f "$log"
    LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start ($*)"
}
CUMUX_MARKS=1 start on
for p in gpu_idle_known gpu_legacy_stream gpu_events gpu_stream_memops gpu_graph; do
    timeout 120 "$cli" run -- "$gdir/$p" >"$tmp/run.out" 2>&1 || fail "$p with completion marks"
done
"$cli" stop >/dev/null || fail "cumux stop"
n=$(sed -n 's/.*client [0-9]*: \([0-9]*\) questions answered from completion marks.*/\1/p' "$log" | head -1)
[ -n "$n" ] && [ "$n" -ge 20 ] || fail "gpu_idle_known's questions were not answered from marks (${n:-none})"
start default
timeout 120 "$cli" run -- "$gdir/gpu_idle_known" >"$tmp/run.out" 2>&1 || fail "gpu_idle_known without marks"
"$cli" stop >/dev/null || fail "cumux stop"
! grep -q "answered from completion marks" "$log" || fail "questions answered from marks by default"
echo "PASS marks ($n questions of gpu_idle_known answered from marks)"
