#!/usr/bin/env bash
# Issue 11's reserved SMs: spin programs whose throughput follows their SMs (grids of 32 blocks of 128
# threads an SM of the device, each block ~0.1 ms), under cumux with half the SMs reserved for each
# (cumux run --sms, the server's groups fine: CUMUX_SM_GROUPS=fine), against one alone on its half, and
# under NVIDIA MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 each (a cap, not a reservation); then how
# long a change of SMs takes to reach a running program (cumux set --sms while gpu_sm_ids reads its SMs
# every ~1 ms). Prints a table last.
#   bench/sms.sh [--build DIR] [--duration S] [--no-mps]
# Logs: ${OUT:-/tmp/cumux-sms}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=6 do_mps=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --no-mps) do_mps=0 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "sms.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-sms}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" spin="$build/bench/bench_spin" ids="$build/tests/gpu/gpu_sm_ids"
for p in "$spin" "$ids"; do [ -x "$p" ] || { echo "sms.sh: $p not built" >&2; exit 2; }; done
. "$repo/scripts/lib/sharing.sh"
sharing_init
# The device's SMs, as a grid spread over all of them finds them (natively, before any server).
nsm=$("$ids" 1 2>/dev/null | sed -n 's/^sms: \([0-9]*\):.*/\1/p')
[ -n "$nsm" ] && [ "$nsm" -ge 8 ] || { log "sms.sh: no GPU (gpu_sm_ids found no SMs): SKIP"; exit 0; }
half=$((nsm / 2))
blocks=$((nsm * 32)) cycles=200000
declare -A R
# spin NAME N PREFIX...: N spin programs at once; R[NAME,i] each one's launches/s.
spin() {
    local name=$1 n=$2 i pids=() start
    shift 2
    start=$(($(date +%s%N) + 4000000000))
    for ((i = 1; i <= n; i++)); do
        timeout -k 5 $((dur + 60)) "$@" "$spin" "$start" "$dur" "$cycles" "$blocks" >"$out/$name.$i.log" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    for ((i = 1; i <= n; i++)); do
        R[$name,$i]=$(grep -o 'launches_per_s=[0-9.]*' "$out/$name.$i.log" | tail -1 | cut -d= -f2)
    done
    log "$name: ${R[$name,1]:-?} ${R[$name,2]:-}"
}
cases=()
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
    spin mps_whole 1
    spin mps_alone50 1 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
    spin mps_pair50 2 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
    cases+=(mps_whole mps_alone50 mps_pair50)
    mps_stop
    unset CUDA_MPS_PIPE_DIRECTORY
fi
change="-"
if [ -x "$cli" ] && CUMUX_SERVER_ENV="CUMUX_SM_GROUPS=fine" cumux_start; then
    spin cumux_whole 1 "$cli" run --
    spin cumux_alone_half 1 "$cli" run --sms "$half" --
    spin cumux_pair_half 2 "$cli" run --sms "$half" --
    spin cumux_pair_none 2 "$cli" run --
    cases+=(cumux_whole cumux_alone_half cumux_pair_half cumux_pair_none)
    # A change while it runs: from half the SMs to a quarter; the first round read after the change on
    # at most a quarter (plus a group) tells when it took effect.
    quarter=$((nsm / 4))
    "$cli" run --sms "$half" -- "$ids" 20000 1 free >"$out/change.log" 2>&1 &
    holder=$!
    for ((i = 0; i < 100; i++)); do grep -q '^sms: ' "$out/change.log" && break; sleep 0.1; done
    sleep 1
    t0=$(date +%s%N)
    "$cli" set "$holder" --sms "$quarter" >"$out/change-set.log" 2>&1
    t1=$(date +%s%N)
    sleep 1
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    change=$(awk -v t0="$t0" -v lim=$((quarter + 8)) '
        /^sms: / { n = $2; t = $3; sub(/^t=/, "", t); sub(/:$/, "", t); if (t + 0 > t0 && n <= lim) { printf "%.1f", (t - t0) / 1e6; exit } }' \
        "$out/change.log")
    log "change of SMs: set took $(((t1 - t0) / 1000000)) ms; the program's kernels on $quarter SMs after ${change:-?} ms"
    cumux_stop
fi
ratio() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }'; }
{
    echo "== reserved SMs: spin programs of $blocks blocks x ~0.1 ms (bench/sms.sh, $(date -u +%FT%TZ)) =="
    printf '%-18s %12s %12s %14s\n' case "prog1/s" "prog2/s" "each/alone"
    for c in "${cases[@]}"; do
        base=${R[cumux_alone_half,1]:-}
        [[ $c == mps* ]] && base=${R[mps_alone50,1]:-}
        [[ $c == *whole ]] && base=""
        printf '%-18s %12s %12s %14s\n' "$c" "${R[$c,1]:--}" "${R[$c,2]:--}" \
            "$(ratio "${R[$c,1]:-}" "$base") $(ratio "${R[$c,2]:-}" "$base")"
    done
    echo "cumux: --sms $half each (CUMUX_SM_GROUPS=fine); MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 each."
    echo "each/alone: each program of the pair against one alone on the same share. A change of SMs"
    echo "($half -> $quarter, cumux set) reached the running program's kernels after ${change:-?} ms."
} | tee "$out/summary.txt"
