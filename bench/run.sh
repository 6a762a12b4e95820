#!/usr/bin/env bash
# One run of every benchmark, natively, under NVIDIA MPS and under cumux; prints a table last.
#   bench/run.sh [--build DIR] [--no-native] [--no-mps] [--no-cumux] [--duration S] [--procs "1 2 4 8"]
# Raw logs: ${OUT:-/tmp/cumux-bench}. MPS and cumux never run at the same time; both are stopped
# on exit, failure included.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
do_native=1 do_mps=1 do_cumux=1
dur=6
procs="1 2 4 8"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --build=*) build=$(cd "${1#--build=}" && pwd) || exit 2 ;;
        --no-native) do_native=0 ;;
        --no-mps) do_mps=0 ;;
        --no-cumux) do_cumux=0 ;;
        --duration) dur="$2"; shift ;;
        --procs) procs="$2"; shift ;;
        -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
        *) echo "bench/run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

out="${OUT:-/tmp/cumux-bench}"
mkdir -p "$out" || exit 2
bin="$build/bench"
cli="$build/cli/cumux"
mps_pipe=/tmp/mps_pipe
mps_log=/tmp/mps_log
mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
[ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control

for b in bench_spin bench_launch bench_copy bench_event_timing; do
    if [ ! -x "$bin/$b" ]; then
        echo "bench/run.sh: $bin/$b not built (cmake --build $build --target benchmarks)" >&2
        exit 2
    fi
done
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi

declare -A R # R[metric,mode] = number, or a word saying why not
log() { echo "[$(date +%T)] $*"; }

# --- MPS / cumux lifetime (trap-protected) ---
# shellcheck source=scripts/lib/sharing.sh
. "$repo/scripts/lib/sharing.sh"
reported=0
cleanup() {
    mps_stop
    cumux_stop
}
trap cleanup EXIT
# Cut short (e.g. by an outer timeout): still print what was measured.
trap 'log "interrupted"; [ $reported = 1 ] || report; exit 130' INT TERM

# --- runners ---
# spin MODE N DELAY_S PREFIX... : N processes with one shared start time; sums launches/s.
spin() {
    local mode=$1 n=$2 delay=$3
    shift 3
    local start=$(($(date +%s%N) + delay * 1000000000)) pids=() ok=1 i
    for i in $(seq 1 "$n"); do
        timeout -k 5 $((dur + delay + 60)) "$@" "$bin/bench_spin" "$start" "$dur" >"$out/spin.$mode.$n.$i.log" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    local sum
    sum=$(cat "$out"/spin."$mode"."$n".*.log | awk -v want="$n" '
        /^spin / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
                   s += v["launches_per_s"]; c++; if (v["late_ms"] > late) late = v["late_ms"] }
        END { if (c == want) printf "%.0f %.0f", s, late }')
    if [ $ok = 1 ] && [ -n "$sum" ]; then
        R[spin$n,$mode]=${sum% *}
        log "spin $mode $n proc(s): ${sum% *} launches/s (latest start ${sum#* } ms late)"
    else
        R[spin$n,$mode]=FAIL
        log "spin $mode $n proc(s): FAILED (see $out/spin.$mode.$n.*.log)"
    fi
}
# kv FILE KEY: value of KEY=VALUE in the last line holding it.
kv() { grep -o "$2=[0-9.]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2; }
# bench_event_timing's keys in the table: read by micro, marked by mark.
EV_KEYS="evtime_k1_g0_med_us evtime_k1_g30_med_us evtime_k1_g80_med_us evtime_k1_g80_p90_us evtime_k1_g300_p90_us
    evtime_k3_g80_p90_us evtime_k1_lib_med_us evtime_plan_med_us evtime_plan_p90_us"
micro() {
    local mode=$1 k
    shift
    if timeout -k 5 90 "$@" "$bin/bench_launch" >"$out/launch.$mode.log" 2>&1; then
        for k in launch_rate launch_call_ns stream_query_ns stream_query_own_ns ctx_sync_ns query_asked_ns query_rt_ns ctx_sync_rt_ns launch_sync_ns; do R[$k,$mode]=$(kv "$out/launch.$mode.log" $k); done
    else
        for k in launch_rate launch_call_ns stream_query_ns stream_query_own_ns ctx_sync_ns query_asked_ns query_rt_ns ctx_sync_rt_ns launch_sync_ns; do R[$k,$mode]=FAIL; done
    fi
    if timeout -k 5 90 "$@" "$bin/bench_copy" >"$out/copy.$mode.log" 2>&1; then
        for k in h2d_pinned_gbs d2h_pinned_gbs h2d_pageable_gbs d2h_pageable_gbs; do
            R[$k,$mode]=$(kv "$out/copy.$mode.log" $k)
        done
    else
        for k in h2d_pinned_gbs d2h_pinned_gbs h2d_pageable_gbs d2h_pageable_gbs; do R[$k,$mode]=FAIL; done
    fi
    if timeout -k 5 60 "$@" "$bin/bench_event_timing" >"$out/evtime.$mode.log" 2>&1; then
        for k in $EV_KEYS; do R[$k,$mode]=$(kv "$out/evtime.$mode.log" $k); done
    else
        for k in $EV_KEYS; do R[$k,$mode]=FAIL; done
    fi
    if [ "$mode" = cumux ] && [ -x "$bin/bench_channel" ]; then
        # The transport alone, two threads and no driver: what of a round trip is the channel's.
        timeout -k 5 60 "$bin/bench_channel" >"$out/channel.log" 2>&1 && R[channel_rt_ns,cumux]=$(kv "$out/channel.log" channel_round_trip_ns)
    fi
    log "micro $mode: launch ${R[launch_rate,$mode]}/s, query ${R[stream_query_ns,$mode]} ns, H2D pinned ${R[h2d_pinned_gbs,$mode]} GB/s"
}
phase() { # MODE DELAY PREFIX...
    local mode=$1 delay=$2 n
    shift 2
    for n in $procs; do spin "$mode" "$n" "$delay" "$@"; done
    micro "$mode" "$@"
}
mark() { local mode=$1 why=$2 n k; for n in $procs; do R[spin$n,$mode]=$why; done
    for k in launch_rate launch_call_ns stream_query_ns stream_query_own_ns ctx_sync_ns query_asked_ns query_rt_ns ctx_sync_rt_ns launch_sync_ns h2d_pinned_gbs d2h_pinned_gbs h2d_pageable_gbs d2h_pageable_gbs \
        $EV_KEYS; do
        R[$k,$mode]=$why; done; }

# --- table ---
isnum() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
ratio() { if isnum "$1" && isnum "$2" && [ "$2" != 0 ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; else echo -; fi; }
row() { # LABEL METRIC
    local n=${R[$2,native]:--} m=${R[$2,mps]:--} c=${R[$2,cumux]:--}
    printf '%-34s %12s %12s %12s %10s %12s\n' "$1" "$n" "$m" "$c" "$(ratio "$c" "$m")" "$(ratio "$c" "$n")"
}
report() {
    reported=1
    {
        echo
        echo "== cumux benchmarks ($(date -Is)) =="
        printf '%-34s %12s %12s %12s %10s %12s\n' benchmark native MPS cumux cumux/MPS cumux/native
        for n in $procs; do row "spin, $n proc(s), launches/s" "spin$n"; done
        row "empty kernel launches/s" launch_rate
        row "H2D pinned 256 MiB, GB/s" h2d_pinned_gbs
        row "D2H pinned 256 MiB, GB/s" d2h_pinned_gbs
        row "H2D pageable 256 MiB, GB/s" h2d_pageable_gbs
        row "D2H pageable 256 MiB, GB/s" d2h_pageable_gbs
        row "cuLaunchKernel host call, ns (lower)" launch_call_ns
        row "cuStreamQuery idle, ns (lower)" stream_query_ns
        row "cuStreamQuery own stream, ns (lower)" stream_query_own_ns
        row "cuCtxSynchronize idle, ns (lower)" ctx_sync_ns
        row "cuStreamQuery that must ask, ns (lower)" query_asked_ns
        row "  its round trip alone, ns (lower)" query_rt_ns
        row "cuCtxSynchronize that must ask, rt ns (lower)" ctx_sync_rt_ns
        row "empty kernel + its sync, ns (lower)" launch_sync_ns
        row "channel round trip alone, ns (lower)" channel_rt_ns
        row "event-timed 50 us kernel, us (lower)" evtime_k1_g0_med_us
        row "  30 us of host work first, us" evtime_k1_g30_med_us
        row "  80 us of host work first, us" evtime_k1_g80_med_us
        row "  80 us of host work first, p90 us" evtime_k1_g80_p90_us
        row "  300 us of host work first, p90 us" evtime_k1_g300_p90_us
        row "3 kernels, 80 us host work before each, p90" evtime_k3_g80_p90_us
        row "  1 kernel after a library's questions, us" evtime_k1_lib_med_us
        row "a cuDNN-like plan (memset, 3 short kernels), us" evtime_plan_med_us
        row "  the same, p90 us" evtime_plan_p90_us
        echo "spin: 16x128 threads x 2,000,000 cycles, 10 launches + sync, ${dur} s common window, aggregate over processes."
        echo "reference on this GPU: 1 process 985 launches/s; 4 processes: MPS 3,940, time-sliced 1,265."
        echo "event-timed: start event, host busy work, a ~50 us kernel, stop event (bench_event_timing.c, as cuDNN times"
        echo "each candidate); the host work is in the time natively too: only the excess over native is cumux's."
    } | tee "$out/summary.txt"
}

log "benchmarks: build $build, logs $out, window ${dur}s, processes: $procs"
nvidia-smi >"$out/nvidia-smi.log" 2>&1

if [ $do_native = 1 ]; then
    log "phase: native (time-sliced)"
    phase native 3
else
    mark native skipped
fi

if [ $do_mps = 1 ]; then
    if [ -z "$mps_ctl" ]; then
        log "MPS: nvidia-cuda-mps-control not found"
        mark mps n/a
    elif [ -n "$(mps_procs)" ]; then
        log "MPS: already running (not ours): skipped"
        mark mps busy
    elif mps_start; then
        log "phase: NVIDIA MPS"
        phase mps 5 env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
        echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe "$mps_ctl" >>"$out/mps.log" 2>&1
        mps_stop
    else
        log "MPS: control daemon did not start (see $out/mps.log)"
        mark mps FAIL
    fi
else
    mark mps skipped
fi

if [ $do_cumux = 1 ]; then
    if [ ! -x "$cli" ]; then
        log "cumux: CLI not found at $cli"
        mark cumux n/a
    elif [ $mps_up = 1 ] || [ -n "$(mps_procs)" ]; then
        log "cumux: MPS still running; not mixing the two"
        mark cumux MPS-up
    elif cumux_start; then
        log "phase: cumux"
        phase cumux 5 "$cli" run --
        "$cli" status >>"$out/cumux-cli.log" 2>&1
        cumux_stop
    else
        log "cumux: server did not start (see $out/cumux-cli.log)"
        mark cumux FAIL
    fi
else
    mark cumux skipped
fi

report
status=0
for key in "${!R[@]}"; do [ "${R[$key]}" = FAIL ] && status=1; done
exit $status
