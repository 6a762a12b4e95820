#!/usr/bin/env bash
# Completion marks (server/marks.c): a stream its program keeps asking about gets marks behind its work when
# the worker idles, and the questions after are answered from them: by the worker without a driver call, or
# by the program itself with no round trip when the worker told it the mark's word (shim/marks.c).
# gpu_idle_known (whose case 7 checks that a mark never says done before the work is) and other programs
# pass with them (the default), and questions must have been answered from marks, some by the program
# itself; with CUMUX_MARKS=0 the same passes and none is.
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
start default
here=0
for p in gpu_idle_known gpu_legacy_stream gpu_events gpu_stream_memops gpu_graph; do
    timeout 120 "$cli" run -- "$gdir/$p" >"$tmp/run.out" 2>&1 || fail "$p with completion marks"
    k=$(sed -n 's/.* \([0-9]*\) questions answered here from completion marks.*/\1/p' "$tmp/run.out" | head -1)
    [ "$p" = gpu_idle_known ] && here=${k:-0}
done
"$cli" stop >/dev/null || fail "cumux stop"
n=$(sed -n 's/.*client [0-9]*: \([0-9]*\) questions answered from completion marks.*/\1/p' "$log" | head -1)
n=${n:-0}
[ $((n + here)) -ge 20 ] || fail "gpu_idle_known's questions were not answered from marks ($n by the worker, $here by itself)"
[ "$here" -ge 1 ] || fail "gpu_idle_known answered no question itself from marks ($n by the worker)"
CUMUX_MARKS=0 start off
timeout 120 "$cli" run -- "$gdir/gpu_idle_known" >"$tmp/run.out" 2>&1 || fail "gpu_idle_known without marks"
"$cli" stop >/dev/null || fail "cumux stop"
! grep -q "answered from completion marks" "$log" || fail "questions answered from marks with CUMUX_MARKS=0"
! grep -q "answered here from completion marks" "$tmp/run.out" || fail "questions answered here with CUMUX_MARKS=0"
echo "PASS marks (of gpu_idle_known's questions, $n answered by the worker from marks, $here by the program itself)"
