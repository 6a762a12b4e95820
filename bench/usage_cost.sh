#!/usr/bin/env bash
# What measuring each client's GPU time costs (issue 11: at most 1%): the spin benchmark and cuBLAS SGEMM,
# 4 processes each, under cumux with launch sampling (server/usage.c, the default) and without
# (CUMUX_USAGE_SAMPLING=0), in ABBA order (on, off, off, on: neither pays for running last); prints each
# run and the ratio of the means.
#   bench/usage_cost.sh [--build DIR] [--duration S] [--procs N]
# Logs: ${OUT:-/tmp/cumux-usage-cost}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=6 procs=4
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --procs) procs=$2; shift ;;
        -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
        *) echo "usage_cost.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-usage-cost}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" spin="$build/bench/bench_spin" sgemm="$build/tests/runtime/rt_sgemm_loop_static"
for p in "$cli" "$spin" "$sgemm"; do [ -x "$p" ] || { echo "usage_cost.sh: $p not built" >&2; exit 2; }; done
. "$repo/scripts/lib/sharing.sh"
sharing_init
# one WHICH SAMPLING N: N processes of the benchmark under a server started with that sampling; the sum.
one() {
    local which=$1 sampling=$2 n=$3 i pids=() start
    CUMUX_SERVER_ENV="CUMUX_USAGE_SAMPLING=$sampling" cumux_start >&2 || { echo FAIL; return; }
    start=$(($(date +%s%N) + 5000000000))
    for ((i = 1; i <= n; i++)); do
        if [ "$which" = spin ]; then
            timeout -k 5 $((dur + 60)) "$cli" run -- "$spin" "$start" "$dur" >"$out/$which.$sampling.$n.$i.log" 2>&1 &
        else
            timeout -k 5 $((dur + 90)) "$cli" run -- "$sgemm" "$start" "$dur" 512 >"$out/$which.$sampling.$n.$i.log" 2>&1 &
        fi
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    cumux_stop >&2
    cat "$out/$which.$sampling.$n".*.log | awk -v want="$n" '
        /^(spin|sgemm) / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
                           s += v["launches_per_s"] + v["iters_per_s"]; c++ }
        END { if (c == want) printf "%.1f", s; else print "FAIL" }'
}
declare -A R
for which in spin sgemm; do
    k=0
    for sampling in 1 0 0 1; do
        k=$((k + 1))
        v=$(one $which $sampling "$procs")
        R[$which,$sampling]="${R[$which,$sampling]:-}${R[$which,$sampling]:+ }$v"
        log "$which, sampling $([ $sampling = 1 ] && echo on || echo off), run $k: $v per s"
    done
done
mean() { awk '{ for (i = 1; i <= NF; i++) { if ($i !~ /^[0-9.]+$/) { print "FAIL"; exit } s += $i } printf "%.1f", s / NF }' <<<"$1"; }
{
    echo "== what sampling each client's GPU time costs (bench/usage_cost.sh, $(date -u +%FT%TZ)) =="
    for which in spin sgemm; do
        on=$(mean "${R[$which,1]}") off=$(mean "${R[$which,0]}")
        ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.3fx", a / b; else print "-" }')
        echo "$which, $procs processes: sampling on ${R[$which,1]} (mean $on), off ${R[$which,0]} (mean $off): on/off $ratio"
    done
} | tee "$out/summary.txt"
