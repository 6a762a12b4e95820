#!/usr/bin/env bash
# Completion marks (server/marks.c) stay out of spans a program times with events: a library's benchmark
# times each candidate kernel so (synchronize, record, launch, record: cuDNN's benchmark mode), and keeps
# the fastest. The synchronize asks about the stream, and the worker idles while the program prepares its
# launch: a mark queued then (an event record and two memory writes) would land between the two records.
# gpu_busy times 640 short kernels that way (GPU_BUSY_TIMED=1); the server logs each client's marks
# (CUMUX_DEBUG=1) when it goes: none queued (at most 2 before the first timing record), the idle moments
# without one counted. On the fake driver in CI; on a GPU the same.
# usage: test_timed_spans.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby busy.out
start_ours CUMUX_DEBUG=1
log="$tmp/log/cumuxd.log"
echo | GPU_BUSY_TIMED=1 "$cli" run -- "$gdir/gpu_busy" 0.02 640 >"$tmp/busy.out" 2>&1 || fail "gpu_busy (timed) failed"
for ((i = 0; i < 50; i++)); do grep -q 'client 1: .* completion marks queued' "$log" && break; sleep 0.1; done
marks=$(sed -n 's/.*client 1: \([0-9]*\) completion marks queued, none at \([0-9]*\) idle.*/\1 \2/p' "$log")
read -r queued withheld <<<"$marks"
[ "${queued:-9}" -le 2 ] && [ "${withheld:-0}" -ge 100 ] ||
    fail "timed spans: ${queued:-?} completion marks queued, ${withheld:-?} idle moments without; want 2 or fewer, 100 or more"
echo "PASS timed_spans: $queued completion marks queued in 640 timed spans, none at $withheld idle moments"
