#!/usr/bin/env bash
# Start-up time of a PyTorch training program (bench/startup_train.py: interpreter start to the end of
# 15 warm-up steps of a ResNet-50 with cuDNN benchmark on), natively, under NVIDIA MPS and under cumux,
# then once more under `cumux trace`: the driver calls that took the most time in all, which is where
# cumux's start-up goes. Prints a table last.   bench/startup.sh [--build DIR] [--no-mps] [--no-trace]
# Logs: ${OUT:-/tmp/cumux-startup}. Per run at most STARTUP_TIMEOUT seconds (default 150).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
do_mps=1 do_trace=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --no-mps) do_mps=0 ;;
        --no-trace) do_trace=0 ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "startup.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-startup}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux"
py=${PYTHON:-python3}
mps_pipe=/tmp/mps_pipe mps_log=/tmp/mps_log
mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
[ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control
log() { echo "[$(date +%T)] $*"; }
. "$repo/scripts/lib/sharing.sh"
trap 'mps_stop; cumux_stop' EXIT
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi
declare -A R
run() { # MODE CMD... : one start-up, its STARTUP line kept
    local mode=$1
    shift
    STARTUP_T0=$(date +%s.%N) timeout -k 5 "${STARTUP_TIMEOUT:-150}" "$@" "$here/startup_train.py" \
        >"$out/$mode.log" 2>&1
    local rc=$?
    R[$mode]=$(grep '^STARTUP' "$out/$mode.log" | tail -1)
    [ -z "${R[$mode]}" ] && R[$mode]="failed (exit $rc): $(tail -1 "$out/$mode.log" | cut -c1-150)"
    log "$mode: ${R[$mode]}"
}
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"${R[$1]:-}"; }
run native "$py"
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    CUDA_MPS_PIPE_DIRECTORY=$mps_pipe run mps "$py"
    mps_stop
fi
if [ -x "$cli" ] && cumux_start; then
    run cumux "$cli" run -- "$py"
    if [ $do_trace = 1 ]; then
        run cumux_traced "$cli" trace -o "$out/trace.txt" -- "$py"
    fi
    cumux_stop
fi
{
    echo "== start-up of a PyTorch training program (bench/startup_train.py, $(date -u +%FT%TZ)) =="
    printf '%-14s %8s %12s %11s %9s %9s\n' mode import model_ready first_step warm steps/s
    for m in native mps cumux cumux_traced; do
        [ -n "${R[$m]:-}" ] || continue
        if [ -z "$(field $m warm)" ]; then
            printf '%-14s %s\n' "$m" "${R[$m]}"
        else
            printf '%-14s %8s %12s %11s %9s %9s\n' "$m" "$(field $m import)" "$(field $m model_ready)" \
                "$(field $m first_step)" "$(field $m warm)" "$(field $m steps_per_s)"
        fi
    done
    n=$(field native warm) c=$(field cumux warm)
    [ -n "$n" ] && [ -n "$c" ] && echo "start-up (warm, seconds): cumux/native $(awk -v c="$c" -v n="$n" 'BEGIN{printf "%.2f", c/n}')x"
    if [ -f "$out/trace.txt" ]; then
        echo "where the traced run spent its time in driver calls (top 12 by total seconds):"
        awk '/^cumux trace: summary of pid/ {p = 1; next} p && NF >= 5 && $2 ~ /^[0-9]+$/ && $4 ~ /^[0-9.]+$/ {t[$1] += $4; c[$1] += $2}
             END {for (f in t) printf "  %-44s %9d calls %9.3f s\n", f, c[f], t[f]}' "$out/trace.txt" | sort -k4 -rn | head -12
    fi
} | tee "$out/summary.txt"
