#!/usr/bin/env bash
# The server's GPU-time samples (server/usage.c) stay out of spans a program times with events: a library's
# benchmark times each candidate kernel between two events, and a sample's own two events would lengthen
# the span (docs/architecture.md, "A launch"). gpu_busy launches 640 short kernels, each between two timing
# events (GPU_BUSY_TIMED=1), then the same untimed; CUMUX_PROFILE=1 logs each client's samples when it goes.
# Timed: a sample due is moved on, and since every launch here is in a span, taken only once moved past 256
# launches (so that such a program still gets a figure): at most 3 taken. Untimed: about 10 taken, none
# moved (the sampler's random gaps are seeded by the client's id: the same counts each run). On the fake
# driver in CI; on a GPU the same.
# usage: test_usage_timed.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0
fail_show="$tmp/busy.out"
CUMUX_PROFILE=1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start"
log="$tmp/log/cumuxd.log"
samples() { # the usage line of the N-th client to go: "TAKEN MOVED"
    local i
    for ((i = 0; i < 100; i++)); do [ "$(grep -c 'profile: usage samples' "$log")" -ge "$1" ] && break; sleep 0.1; done
    grep 'profile: usage samples' "$log" | sed -n "$1"'s/.*samples: \([0-9]*\) taken, \([0-9]*\) due.*/\1 \2/p'
}
echo | GPU_BUSY_TIMED=1 "$cli" run -- "$gdir/gpu_busy" 0.02 640 >"$tmp/busy.out" 2>&1 || fail "gpu_busy (timed) failed"
read -r taken moved <<<"$(samples 1)"
[ "${taken:-9}" -le 3 ] && [ "${moved:-0}" -ge 1 ] ||
    fail "timed spans: ${taken:-?} samples taken, ${moved:-?} moved; want 3 or fewer taken, some moved: $(grep 'usage samples' "$log")"
echo | "$cli" run -- "$gdir/gpu_busy" 0.02 640 >"$tmp/busy.out" 2>&1 || fail "gpu_busy (untimed) failed"
read -r taken2 moved2 <<<"$(samples 2)"
[ "${taken2:-0}" -ge 6 ] && [ "${moved2:-x}" = 0 ] ||
    fail "untimed: ${taken2:-?} samples taken, ${moved2:-?} moved; want some taken, none moved"
echo "PASS test_usage_timed: timed spans $taken taken, $moved moved; untimed $taken2 taken, $moved2 moved"
