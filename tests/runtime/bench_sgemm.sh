#!/usr/bin/env bash
# cuBLAS throughput with several processes: rt_sgemm_loop (512x512 SGEMMs, a sync every 20) in N
# processes sharing one wall-clock window, natively (time-sliced), under NVIDIA MPS and under cumux;
# prints the aggregate iterations per second of each mode and the ratios last.
#   tests/runtime/bench_sgemm.sh [--build DIR] [--procs N] [--duration S] [--size N] [--variant static|shared]
#                                [--no-native] [--no-mps] [--no-cumux]
# Defaults: 4 processes, 6 s window, 512, the static build. Raw logs: ${OUT:-/tmp/cumux-bench-sgemm}.
# MPS and cumux never run at the same time; both are stopped on exit, failure included (the MPS
# start/stop logic is bench/run.sh's).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build"
procs=4 dur=6 size=512 variant=static
do_native=1 do_mps=1 do_cumux=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --build=*) build=$(cd "${1#--build=}" && pwd) || exit 2 ;;
        --procs) procs="$2"; shift ;;
        --duration) dur="$2"; shift ;;
        --size) size="$2"; shift ;;
        --variant) variant="$2"; shift ;;
        --no-native) do_native=0 ;;
        --no-mps) do_mps=0 ;;
        --no-cumux) do_cumux=0 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "bench_sgemm.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

out="${OUT:-/tmp/cumux-bench-sgemm}"
mkdir -p "$out" || exit 2
prog="$build/tests/runtime/rt_sgemm_loop_$variant"
cli="$build/cli/cumux"
mps_pipe=/tmp/mps_pipe
mps_log=/tmp/mps_log
mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
[ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control

if [ ! -x "$prog" ]; then
    echo "bench_sgemm.sh: $prog not built (cmake --build $build --target runtime_tests)" >&2
    exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi

declare -A R # R[mode] = aggregate iterations/s, or a word saying why not
log() { echo "[$(date +%T)] $*"; }

# --- MPS / cumux lifetime (trap-protected) ---
# shellcheck source=scripts/lib/sharing.sh
. "$repo/scripts/lib/sharing.sh"
cleanup() {
    mps_stop
    cumux_stop
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# run MODE DELAY_S PREFIX...: $procs processes with one shared start time; sums iters_per_s.
run() {
    local mode=$1 delay=$2
    shift 2
    local start=$(($(date +%s%N) + delay * 1000000000)) pids=() ok=1 i
    rm -f "$out"/sgemm."$mode".*.log
    for i in $(seq 1 "$procs"); do
        timeout -k 5 $((${dur%.*} + delay + 90)) "$@" "$prog" "$start" "$dur" "$size" >"$out/sgemm.$mode.$i.log" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    local sum
    sum=$(cat "$out"/sgemm."$mode".*.log | awk -v want="$procs" '
        /^sgemm / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
                    s += v["iters_per_s"]; c++; if (v["late_ms"] > late) late = v["late_ms"] }
        END { if (c == want) printf "%.1f %.0f", s, late }')
    if [ $ok = 1 ] && [ -n "$sum" ]; then
        R[$mode]=${sum% *}
        log "$mode: $procs process(es), ${sum% *} SGEMMs/s in total (latest start ${sum#* } ms late)"
    else
        R[$mode]=FAIL
        log "$mode: FAILED (see $out/sgemm.$mode.*.log)"
        grep -h -E '^(FAIL|SKIP)' "$out"/sgemm."$mode".*.log 2>/dev/null | head -3 | sed 's/^/    /'
    fi
}

log "sgemm benchmark: $prog, $procs process(es), ${size}x${size}, window ${dur}s, logs $out"
nvidia-smi >"$out/nvidia-smi.log" 2>&1
# One process alone first: the reference for "how much does sharing give".
if [ $do_native = 1 ]; then
    saved=$procs
    procs=1
    run native1 3
    procs=$saved
    run native 3
else
    R[native1]=skipped
    R[native]=skipped
fi
if [ $do_mps = 1 ]; then
    if [ -z "$mps_ctl" ]; then
        log "MPS: nvidia-cuda-mps-control not found"
        R[mps]=n/a
    elif [ -n "$(mps_procs)" ]; then
        log "MPS: already running (not ours): skipped"
        R[mps]=busy
    elif mps_start; then
        run mps 5 env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
        mps_stop
    else
        log "MPS: control daemon did not start (see $out/mps.log)"
        R[mps]=FAIL
    fi
else
    R[mps]=skipped
fi
if [ $do_cumux = 1 ]; then
    if [ ! -x "$cli" ]; then
        log "cumux: CLI not found at $cli"
        R[cumux]=n/a
    elif [ $mps_up = 1 ] || [ -n "$(mps_procs)" ]; then
        log "cumux: MPS still running; not mixing the two"
        R[cumux]=MPS-up
    elif cumux_start; then
        run cumux 5 "$cli" run --
        "$cli" status >>"$out/cumux-cli.log" 2>&1
        cumux_stop
    else
        log "cumux: server did not start (see $out/cumux-cli.log)"
        R[cumux]=FAIL
    fi
else
    R[cumux]=skipped
fi

isnum() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
ratio() { if isnum "$1" && isnum "$2" && [ "$2" != 0 ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; else echo -; fi; }
{
    echo
    echo "== cuBLAS SGEMM throughput, $procs processes ($(date -Is)) =="
    printf '%-40s %12s\n' "mode" "SGEMMs/s"
    printf '%-40s %12s\n' "native, 1 process" "${R[native1]:--}"
    printf '%-40s %12s\n' "native, $procs processes (time-sliced)" "${R[native]:--}"
    printf '%-40s %12s\n' "NVIDIA MPS, $procs processes" "${R[mps]:--}"
    printf '%-40s %12s\n' "cumux, $procs processes" "${R[cumux]:--}"
    echo "cumux/MPS: $(ratio "${R[cumux]:--}" "${R[mps]:--}")   cumux/native: $(ratio "${R[cumux]:--}" "${R[native]:--}")   MPS/native: $(ratio "${R[mps]:--}" "${R[native]:--}")"
    echo "${size}x${size} SGEMM (cuBLAS, $variant CUDA runtime), 20 per stream sync, ${dur} s common window, aggregate over processes."
} | tee "$out/summary.txt"
status=0
for m in native1 native mps cumux; do [ "${R[$m]:-}" = FAIL ] && status=1; done
exit $status
