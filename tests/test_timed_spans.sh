#!/usr/bin/env bash
# cumux's own GPU work stays out of spans a program times with events: a library's benchmark times each
# candidate kernel so (synchronize, record, launch, record: cuDNN's benchmark mode), and keeps the fastest.
# Neither a usage sample's two events (server/usage.c) nor a completion mark (server/marks.c: the
# synchronize asked about the stream, and the worker idles while the program prepares its launch) may land
# between the two records. gpu_busy times 640 short kernels that way (GPU_BUSY_TIMED=1), then launches them
# untimed; the server logs each client's samples (CUMUX_PROFILE=1) and marks (CUMUX_DEBUG=1) when it goes.
# Samples: when timed, one due is moved on, and since every launch here is in a span, taken only once moved
# past 256 launches (so that such a program still gets a figure): at most 3 taken; untimed about 10, none
# moved (the sampler's random gaps are seeded by the client's id: the same counts each run). Marks: when
# timed, none queued after the first timing record (at most 2 before it). On the fake driver in CI; on a
# GPU the same.
# usage: test_timed_spans.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0
fail_show="$tmp/busy.out"
CUMUX_PROFILE=1 CUMUX_DEBUG=1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start"
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
for ((i = 0; i < 50; i++)); do grep -q 'client 1: .* completion marks queued' "$log" && break; sleep 0.1; done
marks=$(sed -n 's/.*client 1: \([0-9]*\) completion marks queued, none at \([0-9]*\) idle.*/\1 \2/p' "$log")
read -r queued withheld <<<"$marks"
[ "${queued:-9}" -le 2 ] && [ "${withheld:-0}" -ge 100 ] ||
    fail "timed spans: ${queued:-?} completion marks queued, ${withheld:-?} idle moments without; want 2 or fewer, 100 or more"
echo | "$cli" run -- "$gdir/gpu_busy" 0.02 640 >"$tmp/busy.out" 2>&1 || fail "gpu_busy (untimed) failed"
read -r taken2 moved2 <<<"$(samples 2)"
[ "${taken2:-0}" -ge 6 ] && [ "${moved2:-x}" = 0 ] ||
    fail "untimed: ${taken2:-?} samples taken, ${moved2:-?} moved; want some taken, none moved"
echo "PASS timed_spans: samples timed $taken taken, $moved moved, untimed $taken2 taken, $moved2 moved; marks timed $queued queued, $withheld withheld"
