#!/usr/bin/env bash
# How the server's context waits in a synchronize (CUMUX_SYNC, server/gpu.c): yielding by default, the
# mode asked for when there is one, and a mode that is no mode said and replaced by the default; the mode
# checked is the one the driver reports holding (cuDevicePrimaryCtxGetState), and a program runs in each.
# On the fake driver in CI; on a GPU the same script.
# usage: test_sync_mode.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0
log="$tmp/log/cumuxd.log"
fail_show="$tmp/run.out"
# serves_waiting_by SYNC_VALUE EXPECTED: a server started with CUMUX_SYNC=SYNC_VALUE waits by EXPECTED.
serves_waiting_by() {
    rm -f "$log"
    CUMUX_SYNC=$1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null ||
        fail "cumux start with CUMUX_SYNC=$1"
    grep -q "GPU 0: .*, waits by $2\$" "$log" ||
        fail "CUMUX_SYNC=$1: the context does not wait by $2: $(grep 'GPU 0' "$log")"
    "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/run.out" 2>&1 || fail "gpu_vecadd with CUMUX_SYNC=$1"
    "$cli" stop >/dev/null || fail "cumux stop"
}
serves_waiting_by "" yield
serves_waiting_by blocking blocking
serves_waiting_by spin spin
serves_waiting_by auto auto
serves_waiting_by sleepy yield
grep -q 'CUMUX_SYNC=sleepy: not yield, spin, blocking or auto' "$log" || fail "CUMUX_SYNC=sleepy not said"
echo "PASS sync_mode"
