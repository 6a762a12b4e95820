#!/usr/bin/env bash
# Issue 12: a latency-critical program beside a training job (bench_latency: 20 us kernels, each waited
# for; beside a load whose grids fill every SM with 500 us blocks). Its round-trip latency alone, then with
# the load natively (time-sliced), under NVIDIA MPS (also with its stream at the greatest priority), under
# cumux (normal, as a high-priority client, and high with 8 SMs reserved for it), each the median and
# 99th percentile, with the load's throughput; prints a table last.
#   bench/latency.sh [--build DIR] [--duration S] [--no-mps]
# Logs: ${OUT:-/tmp/cumux-latency}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=5 do_mps=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --no-mps) do_mps=0 ;;
        -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
        *) echo "latency.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-latency}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" prog="$build/bench/bench_latency"
[ -x "$prog" ] || { echo "latency.sh: $prog not built" >&2; exit 2; }
. "$repo/scripts/lib/sharing.sh"
sharing_init
declare -A R
kv() { grep -o "$2=[0-9.]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2; }
run_pair() { # NAME LOAD LATENCY_PREFIX_WORDS LATENCY_EXTRA LOAD_PREFIX_WORDS
    local name=$1 load=$2 lpre=$3 lex=$4 dpre=$5
    local start=$(($(date +%s%N) + 4000000000)) lp=""
    if [ "$load" = 1 ]; then
        # shellcheck disable=SC2086
        timeout -k 5 $((dur + 60)) $dpre "$prog" load "$start" "$dur" >"$out/$name.load.log" 2>&1 &
        lp=$!
    fi
    # shellcheck disable=SC2086
    timeout -k 5 $((dur + 60)) $lpre "$prog" latency "$start" "$dur" 20 $lex >"$out/$name.latency.log" 2>&1
    [ -n "$lp" ] && wait "$lp"
    R[$name,p50]=$(kv "$out/$name.latency.log" p50_us)
    R[$name,p99]=$(kv "$out/$name.latency.log" p99_us)
    R[$name,load]=-
    [ "$load" = 1 ] && R[$name,load]=$(kv "$out/$name.load.log" grids_per_s)
    log "$name: p50 ${R[$name,p50]:-?} us, p99 ${R[$name,p99]:-?} us; load ${R[$name,load]:-?} grids/s"
}
cases=(alone load_alone native native_greatest)
run_pair alone 0 "" "" ""
run_pair load_alone 1 "true" "" ""
run_pair native 1 "" "" ""
run_pair native_greatest 1 "" "--greatest" ""
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
    run_pair mps 1 "" "" ""
    run_pair mps_greatest 1 "" "--greatest" ""
    cases+=(mps mps_greatest)
    mps_stop
    unset CUDA_MPS_PIPE_DIRECTORY
fi
if [ -x "$cli" ] && cumux_start; then
    run_pair cumux_alone 0 "$cli run --" "" ""
    run_pair cumux 1 "$cli run --" "" "$cli run --"
    run_pair cumux_high 1 "$cli run --priority high --" "" "$cli run --"
    # SMs of its own for the latency program (8, one group on an H200): the load's blocks never hold them.
    run_pair cumux_sms8 1 "$cli run --priority high --sms 8 --" "" "$cli run --"
    # The load alone under cumux, at normal and at low priority (low must cost it nothing alone).
    run_pair cumux_load_normal 1 "true" "" "$cli run --"
    run_pair cumux_load_low 1 "true" "" "$cli run --priority low --"
    # The load waiting as a program that asked to spin (cudaDeviceScheduleSpin): no futex wake-up after
    # each synchronize (alone at normal it ran at 0.958x of native, 2026-12-03).
    run_pair cumux_load_spin 1 "true" "" "env CUMUX_WAIT=spin $cli run --"
    cases+=(cumux_alone cumux cumux_high cumux_sms8 cumux_load_normal cumux_load_low cumux_load_spin)
    cumux_stop
fi
{
    echo "== a latency-critical program beside a training-like load (bench/latency.sh, $(date -u +%FT%TZ)) =="
    printf '%-18s %10s %10s %12s %14s\n' case p50_us p99_us p99/alone load_grids/s
    for c in "${cases[@]}"; do
        r=$(awk -v a="${R[$c,p99]:-}" -v b="${R[alone,p99]:-}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }')
        printf '%-18s %10s %10s %12s %14s\n' "$c" "${R[$c,p50]:--}" "${R[$c,p99]:--}" "$r" "${R[$c,load]:--}"
    done
    echo "latency: 1 block of 32 threads spinning 20 us, then a synchronize; load: 8 blocks of 256 threads an SM,"
    echo "500 us each, 4 grids then a synchronize; ${dur} s windows. load_alone: the load with no latency client"
    echo "(its p50/p99 are those of 'true', meaningless); so are cumux_load_normal, _low and _spin."
} | tee "$out/summary.txt"
