#!/usr/bin/env bash
# Issue 13's table: N processes each launching a 4-block spin kernel (~1 ms, 10 launches then a
# synchronize) in a loop over a common window; aggregate launches/s and the device memory in use, under
# NVIDIA MPS and under cumux (natively too with --native), for each N; ratios last. A run whose
# processes do not all start (MPS serves at most 48 clients) says so.
#   bench/many.sh [--build DIR] [--duration S] [--clients "16 32 48 64 128"] [--native] [--no-mps] [--green]
#                 [--unpaced]
# --green: also cumux with a green context of its own for every client (CUMUX_GREEN_QUEUES=1: do they
# bring hardware queues of their own?). --unpaced: also cumux without launch pacing (CUMUX_PACE=0; pacing is
# on by default).
# Logs: ${OUT:-/tmp/cumux-many}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=6 clients="16 32 48 64 128" do_native=0 do_mps=1 do_green=0 do_unpaced=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --clients) clients=$2; shift ;;
        --native) do_native=1 ;;
        --no-mps) do_mps=0 ;;
        --green) do_green=1 ;;
        --unpaced) do_unpaced=1 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "many.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-many}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" spin="$build/bench/bench_spin"
[ -x "$spin" ] || { echo "many.sh: $spin not built" >&2; exit 2; }
. "$repo/scripts/lib/sharing.sh"
sharing_init
declare -A R M C
# server_ticks: CPU ticks (user + system) of the server processes so far.
server_ticks() {
    local p t=0
    for p in $(pgrep -x cumuxd; pgrep -f '^[^ ]*nvidia-cuda-mps-server'); do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo $t
}
# run MODE N PREFIX...: N processes; R[MODE,N] the aggregate (or how many failed), M[MODE,N] GiB in use.
run() {
    local mode=$1 n=$2 i pids=() start mem
    shift 2
    start=$(($(date +%s%N) + (5 + n / 16) * 1000000000))
    rm -f "$out/$mode.$n".*.log
    for ((i = 1; i <= n; i++)); do
        timeout -k 5 $((dur + 120)) "$@" "$spin" "$start" "$dur" 2000000 4 >"$out/$mode.$n.$i.log" 2>&1 &
        pids+=($!)
    done
    # The device memory in use in the middle of the window, and the machine's CPU over 2 s there: busy
    # share of all cores, and how much of it the server (cumuxd, nvidia-cuda-mps-server) took.
    sleep $((5 + n / 16 + dur / 2 - 1))
    mem=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
    local c0 c1 s0 s1
    c0=$(head -1 /proc/stat) s0=$(server_ticks)
    sleep 2
    c1=$(head -1 /proc/stat) s1=$(server_ticks)
    C[$mode,$n]=$(awk -v a="$c0" -v b="$c1" -v s0="$s0" -v s1="$s1" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        split(a, x); split(b, y); t = 0; for (i = 2; i <= 11; i++) t += y[i] - x[i]
        idle = (y[5] - x[5]) + (y[6] - x[6]); ncpu = t / (2 * hz)
        printf "%.0f%%/%.1f", (t > 0 ? 100 * (t - idle) / t : 0), (s1 - s0) / hz / 2 }')
    for i in "${pids[@]}"; do wait "$i"; done
    R[$mode,$n]=$(cat "$out/$mode.$n".*.log | awk -v want="$n" '
        /^spin / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }; s += v["launches_per_s"]; c++ }
        END { if (c == want) printf "%.0f", s; else printf "%d_of_%d_failed", want - c, want }')
    M[$mode,$n]=$(awk -v m="${mem:-0}" 'BEGIN { printf "%.1f", m / 1024 }')
    log "$mode, $n clients: ${R[$mode,$n]} launches/s, ${M[$mode,$n]} GiB in use, CPU busy/server cores ${C[$mode,$n]}"
}
modes=()
if [ $do_native = 1 ]; then
    modes+=(native)
    for n in $clients; do run native "$n"; done
fi
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    modes+=(mps)
    for n in $clients; do run mps "$n" env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe; done
    mps_stop
fi
if [ -x "$cli" ] && cumux_start; then
    modes+=(cumux)
    for n in $clients; do run cumux "$n" "$cli" run --; done
    cumux_stop
fi
if [ $do_green = 1 ] && [ -x "$cli" ] && CUMUX_SERVER_ENV="CUMUX_GREEN_QUEUES=1" cumux_start; then
    modes+=(green)
    for n in $clients; do run green "$n" "$cli" run --; done
    cumux_stop
fi
if [ $do_unpaced = 1 ] && [ -x "$cli" ] && CUMUX_SERVER_ENV="CUMUX_PACE=0" cumux_start; then
    modes+=(unpaced)
    for n in $clients; do run unpaced "$n" "$cli" run --; done
    cumux_stop
fi
{
    echo "== many clients: 4-block ~1 ms spin kernels, ${dur} s window (bench/many.sh, $(date -u +%FT%TZ)) =="
    printf '%-8s' clients
    for m in "${modes[@]}"; do printf ' %14s %8s %10s' "$m/s" "GiB" "cpu/srv"; done
    printf ' %10s' cumux/MPS
    [ $do_green = 1 ] && printf ' %10s' green/MPS
    [ $do_unpaced = 1 ] && printf ' %10s' unpaced/MPS
    echo
    for n in $clients; do
        printf '%-8s' "$n"
        for m in "${modes[@]}"; do printf ' %14s %8s %10s' "${R[$m,$n]:--}" "${M[$m,$n]:--}" "${C[$m,$n]:--}"; done
        for m in cumux $([ $do_green = 1 ] && echo green) $([ $do_unpaced = 1 ] && echo unpaced); do
            awk -v a="${R[$m,$n]:-}" -v b="${R[mps,$n]:-}" 'BEGIN { if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/ && b > 0) printf " %9.2fx", a / b; else printf "          -" }'
        done
        echo
    done
    echo "cpu/srv: the machine's CPU busy (all cores) / cores the server processes used, 2 s mid-window."
} | tee "$out/summary.txt"
