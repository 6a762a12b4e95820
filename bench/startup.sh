#!/usr/bin/env bash
# Start-up and sharing of PyTorch training programs (bench/startup_train.py: a ResNet-50, batch 32, cuDNN
# benchmark on), natively, under NVIDIA MPS and under cumux. Phases (--phases, default all four):
#   solo   one program alone: interpreter start to the end of its 15 warm-up steps ("warm"); natively and
#          under cumux twice, first with empty compile caches (cold), then with what that run left
#          (CUDA_CACHE_PATH is a fresh directory per run of this script: the driver's ComputeCache and
#          cumux's compile cache start empty alike)
#   trace  the same under `cumux trace`, natively and under cumux: the driver calls that took the most
#          time in all, side by side
#   join   a second program starting while one trains: its warm time (MPS and cumux)
#   steady one program alone after its warm-up, images/s over STARTUP_STEADY_S seconds (default 15): natively,
#          under MPS, under cumux (and the variant below); not in the default phases. With the pair it tells
#          whether a gap between cumux and MPS is in each program's own kernels or in their sharing
#   pair   two programs training together: aggregate images/s over STARTUP_PAIR_S seconds (default 15);
#          MPS and cumux in ABBA order (MPS, cumux, then cumux, MPS: the GPU's clocks drift over minutes of
#          load, and whichever ran last would pay), each mode's figure the mean of its two runs, the GPU's SM
#          clock, temperature and power logged at the end of each run (STARTUP_PAIR_ROUNDS=1: one run each;
#          3 or more: the order goes on, MPS, cumux, cumux, MPS, ..., each mode's figure the mean of all its
#          runs: cuDNN's benchmark mode picks each run's kernels anew, and the picks spread runs over 1-3 %).
#          STARTUP_PAIR_VARIANT="VAR=V ...": also cumux with those variables for the server and the programs
#          (say CUMUX_CONTAIN=1 CUMUX_FAULT_COREDUMP=1), inside the cumux runs: MPS, cumux, variant, variant,
#          cumux, MPS; with the solo phase, also one warm start-up alone in the variant.
#          STARTUP_PAIR_NATIVE=0: no native (time-sliced) pair; STARTUP_PAIR_STAGGER=1: the second starts once
#          the first is warm. STARTUP_PAIR_KTRACE=1 (with --phases pair alone: cumux's server is traced for
#          its whole life): every kernel of the pairs recorded by CUPTI (bench/kernel_trace.c, in each program
#          under MPS, in the server's worker under cumux), then bench/kernel_trace.py compares MPS's last
#          pair with cumux's last over the same window of each program's steady state: whether cumux's pair
#          runs other kernels (cuDNN's picks) or the same kernels slower
# Prints a table last.  bench/startup.sh [--build DIR] [--no-mps] [--phases "solo trace join pair"]
# Logs: ${OUT:-/tmp/cumux-startup}. Each program at most STARTUP_TIMEOUT seconds (default 150).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
do_mps=1 phases="solo trace join pair"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --no-mps) do_mps=0 ;;
        --phases) phases="$2"; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "startup.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-startup}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux"
py=${PYTHON:-python3}
tmo=${STARTUP_TIMEOUT:-150}
pair_s=${STARTUP_PAIR_S:-15}
pair_rounds=${STARTUP_PAIR_ROUNDS:-2}
steady_s=${STARTUP_STEADY_S:-15}
mps_pipe=/tmp/mps_pipe mps_log=/tmp/mps_log
mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
[ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] && mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control
log() { echo "[$(date +%T)] $*"; }
. "$repo/scripts/lib/sharing.sh"
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi
want() { [[ " $phases " == *" $1 "* ]]; }
CUDA_CACHE_PATH=$(mktemp -d /tmp/cumux-startup-cache.XXXXXX) || exit 2
export CUDA_CACHE_PATH
trap 'mps_stop; cumux_stop; rm -rf "$CUDA_CACHE_PATH"' EXIT
ktrace_lib=""
if [ "${STARTUP_PAIR_KTRACE:-0}" = 1 ]; then
    ktrace_lib="$build/bench/libkernel_trace.so"
    if [ -f "$ktrace_lib" ]; then
        rm -rf "$out"/ktrace.* && mkdir -p "$out/ktrace.cumux"
        # the server's worker runs every client's kernels: it is the process to trace under cumux
        CUMUX_SERVER_ENV="CUDA_INJECTION64_PATH=$ktrace_lib KERNEL_TRACE_DIR=$out/ktrace.cumux${CUMUX_SERVER_ENV:+ $CUMUX_SERVER_ENV}"
    else
        log "STARTUP_PAIR_KTRACE: $ktrace_lib not built (the toolkit has no CUPTI); no kernel traces"
        ktrace_lib=""
    fi
fi
declare -A R
line_of() { grep '^STARTUP' "$1" 2>/dev/null | tail -1; }
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
# prog NAME [ENV=V...] -- CMD... : one program in the background, its output in $out/NAME.log
prog() {
    local name=$1
    shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env STARTUP_T0="$(date +%s.%N)" "${envs[@]}" timeout -k 5 "$tmo" "$@" "$here/startup_train.py" >"$out/$name.log" 2>&1 &
}
wait_file() { # FILE SECONDS
    local i
    for ((i = 0; i < $2 * 10; i++)); do [ -e "$1" ] && return 0; sleep 0.1; done
    return 1
}
# phase_solo PHASE MODE CMD...: one start-up alone (PHASE cold: the first, compile caches empty; solo: after)
phase_solo() {
    local phase=$1 mode=$2
    shift 2
    prog "$phase.$mode" -- "$@"
    wait $!
    R[$phase,$mode]=$(line_of "$out/$phase.$mode.log")
    log "$phase $mode: ${R[$phase,$mode]:-failed: $(tail -1 "$out/$phase.$mode.log" | cut -c1-150)}"
}
phase_join() { # MODE CMD...
    local mode=$1 d
    shift
    d=$(mktemp -d)
    prog "join-first.$mode" STARTUP_READY="$d/a" STARTUP_DURATION=600 -- "$@"
    local a=$!
    if wait_file "$d/a" "$tmo"; then
        prog "join-second.$mode" -- "$@"
        wait $!
        R[join,$mode]=$(line_of "$out/join-second.$mode.log")
    fi
    kill "$a" 2>/dev/null
    wait "$a" 2>/dev/null
    rm -rf "$d"
    log "join $mode: ${R[join,$mode]:-failed}"
}
phase_steady() { # MODE CMD...: one program alone, trained over steady_s after its warm-up
    local mode=$1
    shift
    prog "steady.$mode" STARTUP_DURATION="$steady_s" -- "$@"
    wait $!
    R[steady,$mode]=$(field "$(line_of "$out/steady.$mode.log")" images_per_s)
    log "steady $mode: ${R[steady,$mode]:-failed} images/s alone over ${steady_s}s"
}
gpu_state() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader -i 0 2>/dev/null; }
phase_pair() { # MODE CMD...: one run of the pair; its aggregate appended to R[pairs,MODE]
    local mode=$1 d n
    shift
    n=$((${PAIR_N[$mode]:-0} + 1))
    PAIR_N[$mode]=$n
    d=$(mktemp -d)
    local kt=()
    [ -n "$ktrace_lib" ] && [ "$mode" != cumux ] && [ "$mode" != cumux_variant ] &&
        mkdir -p "$out/ktrace.$mode.$n" && kt=(CUDA_INJECTION64_PATH="$ktrace_lib" KERNEL_TRACE_DIR="$out/ktrace.$mode.$n")
    prog "pair-a.$mode.$n" STARTUP_READY="$d/a" STARTUP_GO="$d/go" STARTUP_DURATION="$pair_s" "${kt[@]}" -- "$@"
    local a=$!
    # STARTUP_PAIR_STAGGER=1: b starts once a is warm, so that neither's start-up (cuDNN timing its
    # candidates, code loading) runs beside the other's
    [ "${STARTUP_PAIR_STAGGER:-0}" = 1 ] && wait_file "$d/a" "$tmo"
    prog "pair-b.$mode.$n" STARTUP_READY="$d/b" STARTUP_GO="$d/go" STARTUP_DURATION="$pair_s" "${kt[@]}" -- "$@"
    local b=$!
    local st="" ia ib sum=""
    # The GPU's state 2 s before the timed window ends.
    wait_file "$d/a" "$tmo" && wait_file "$d/b" "$tmo" && touch "$d/go" &&
        sleep "$((pair_s > 3 ? pair_s - 2 : 1))" && st=$(gpu_state)
    wait "$a" "$b"
    ia=$(field "$(line_of "$out/pair-a.$mode.$n.log")" images_per_s)
    ib=$(field "$(line_of "$out/pair-b.$mode.$n.log")" images_per_s)
    [ -n "$ia" ] && [ -n "$ib" ] && sum=$(awk -v a="$ia" -v b="$ib" 'BEGIN{printf "%.1f", a + b}')
    R[pairs,$mode]="${R[pairs,$mode]:-}${R[pairs,$mode]:+ }${sum:-failed}"
    rm -rf "$d"
    log "pair $mode run $n: ${sum:-failed} images/s (${ia:-?} + ${ib:-?}); GPU near the end (SM clock, temperature, power): ${st:-?}"
}
# The mean of a mode's pair runs, empty if any failed.
pair_mean() { awk 'NF == 0 {exit} {for (i = 1; i <= NF; i++) {if ($i !~ /^[0-9.]+$/) exit; s += $i} printf "%.1f", s / NF}' <<<"${R[pairs,$1]:-}"; }
declare -A PAIR_N
# native (the join phase is MPS's and cumux's: natively the two are time-sliced)
want solo && phase_solo cold native "$py"
want solo && phase_solo solo native "$py"
[ -x "$cli" ] && want trace && phase_solo solo native_traced "$cli" trace --native -o "$out/trace-native.txt" -- "$py"
want steady && phase_steady native "$py"
want pair && [ "${STARTUP_PAIR_NATIVE:-1}" != 0 ] && phase_pair native "$py"
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
    want solo && phase_solo solo mps "$py"
    want join && phase_join mps "$py"
    want steady && phase_steady mps "$py"
    want pair && phase_pair mps "$py"
    mps_stop
    unset CUDA_MPS_PIPE_DIRECTORY
fi
if [ -x "$cli" ] && cumux_start; then
    want solo && phase_solo cold cumux "$cli" run -- "$py"
    want solo && phase_solo solo cumux "$cli" run -- "$py"
    want trace && phase_solo solo cumux_traced "$cli" trace -o "$out/trace.txt" -- "$py"
    want join && phase_join cumux "$cli" run -- "$py"
    want steady && phase_steady cumux "$cli" run -- "$py"
    want pair && phase_pair cumux "$cli" run -- "$py"
    if [ -n "${STARTUP_PAIR_VARIANT:-}" ] && { want pair || want solo || want steady; }; then
        read -r -a variant <<<"$STARTUP_PAIR_VARIANT"
        cumux_stop
        if CUMUX_SERVER_ENV="$STARTUP_PAIR_VARIANT" cumux_start; then
            want solo && phase_solo solo cumux_variant env "${variant[@]}" "$cli" run -- "$py"
            want steady && phase_steady cumux_variant env "${variant[@]}" "$cli" run -- "$py"
            want pair && phase_pair cumux_variant env "${variant[@]}" "$cli" run -- "$py"
            want pair && [ "$pair_rounds" -ge 2 ] && phase_pair cumux_variant env "${variant[@]}" "$cli" run -- "$py"
            cumux_stop
        fi
        cumux_start || log "cumuxd did not start again after the variant"
    fi
    # The second half of the ABBA order: cumux again at once, then MPS last.
    [ "$pair_rounds" -ge 2 ] && want pair && [ $cumux_up = 1 ] && phase_pair cumux "$cli" run -- "$py"
    cumux_stop
fi
# One pair under MPS, or under cumux, each service started for it and stopped after.
pair_mps_run() {
    [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start || return 0
    export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
    phase_pair mps "$py"
    mps_stop
    unset CUDA_MPS_PIPE_DIRECTORY
}
pair_cumux_run() {
    [ -x "$cli" ] && cumux_start || return 0
    phase_pair cumux "$cli" run -- "$py"
    cumux_stop
}
[ "$pair_rounds" -ge 2 ] && want pair && pair_mps_run
# Rounds past the second, in the same order (round 3: MPS then cumux; round 4: cumux then MPS; ...). Not with
# the kernel traces, which compare the runs of rounds 1-2.
if want pair && [ -z "$ktrace_lib" ]; then
    for ((r = 3; r <= pair_rounds; r++)); do
        if ((r % 2)); then pair_mps_run; pair_cumux_run; else pair_cumux_run; pair_mps_run; fi
    done
fi
for m in native mps cumux cumux_variant; do R[pair,$m]=$(pair_mean $m); done
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a / b}'; }
{
    echo "== PyTorch start-up and sharing (bench/startup.sh, $(date -u +%FT%TZ)) =="
    printf '%-14s %8s %12s %11s %9s %10s\n' "alone" import model_ready first_step warm images/s
    for m in native native_traced mps cumux cumux_traced cumux_variant; do
        l=${R[solo,$m]:-}
        [ -n "$l" ] || continue
        printf '%-14s %8s %12s %11s %9s %10s\n' "$m" "$(field "$l" import)" "$(field "$l" model_ready)" \
            "$(field "$l" first_step)" "$(field "$l" warm)" "$(field "$l" images_per_s)"
    done
    n=$(field "${R[cold,native]:-}" warm) c=$(field "${R[cold,cumux]:-}" warm)
    [ -n "$n" ] && [ -n "$c" ] && echo "start-up alone, compile caches empty (s): native $n, cumux $c: cumux/native $(ratio "$c" "$n")"
    n=$(field "${R[solo,native]:-}" warm) c=$(field "${R[solo,cumux]:-}" warm) m=$(field "${R[solo,mps]:-}" warm)
    [ -n "$n" ] && [ -n "$c" ] && echo "start-up alone, caches warm (s): native $n, cumux $c: cumux/native $(ratio "$c" "$n")${m:+, MPS/native $(ratio "$m" "$n")}"
    v=$(field "${R[solo,cumux_variant]:-}" warm)
    [ -n "$v" ] && [ -n "$c" ] && echo "  cumux with ${STARTUP_PAIR_VARIANT}, caches warm (s): $v: against cumux $(ratio "$v" "$c")${n:+, against native $(ratio "$v" "$n")}"
    if want steady; then
        sn=${R[steady,native]:-} sm=${R[steady,mps]:-} sc=${R[steady,cumux]:-} sv=${R[steady,cumux_variant]:-}
        echo "one training alone, images/s over ${steady_s}s after warm-up: native ${sn:--}, MPS ${sm:--}, cumux ${sc:--}${sm:+${sc:+: cumux/MPS $(ratio "$sc" "$sm")}}${sn:+${sc:+, cumux/native $(ratio "$sc" "$sn")}}${sv:+; cumux with ${STARTUP_PAIR_VARIANT}: $sv}"
    fi
    jm=$(field "${R[join,mps]:-}" warm) jc=$(field "${R[join,cumux]:-}" warm)
    want join && echo "second training joining a running one, warm (s): MPS ${jm:--}, cumux ${jc:--}${jm:+${jc:+: cumux/MPS $(ratio "$jc" "$jm")}}"
    pn=${R[pair,native]:-} pm=${R[pair,mps]:-} pc=${R[pair,cumux]:-}
    want pair && echo "two trainings together, images/s over ${pair_s}s: native ${pn:--}, MPS ${pm:--}, cumux ${pc:--}${pm:+${pc:+: cumux/MPS $(ratio "$pc" "$pm")}}"
    want pair && echo "  (each run, in the order run: native ${R[pairs,native]:--}; MPS ${R[pairs,mps]:--}; cumux ${R[pairs,cumux]:--}; in the order MPS, cumux, cumux, MPS, ...)"
    pv=${R[pair,cumux_variant]:-}
    [ -n "${STARTUP_PAIR_VARIANT:-}" ] && want pair &&
        echo "  cumux with ${STARTUP_PAIR_VARIANT}: ${pv:--} (runs ${R[pairs,cumux_variant]:--})${pv:+${pc:+: against cumux $(ratio "$pv" "$pc")}}${pv:+${pm:+, against MPS $(ratio "$pv" "$pm")}}"
    kt_mps="$out/ktrace.mps.${PAIR_N[mps]:-0}" # MPS's last pair: in ABBA order the one beside cumux's last
    if [ -n "$ktrace_lib" ] && [ -d "$kt_mps" ]; then
        # the window: from 2 s into the timed window to 1 s before its end, by each trace's last kernel
        echo "kernels of the pairs, MPS's run ${PAIR_N[mps]} against cumux's last (bench/kernel_trace.py):"
        "$py" "$here/kernel_trace.py" "$kt_mps" "$out/ktrace.cumux" --labels MPS,cumux \
            --window "$((pair_s > 4 ? pair_s - 2 : pair_s)),1" 2>&1 | head -45 | sed 's/^/  /'
    fi
    if [ -f "$out/trace.txt" ]; then
        echo "driver calls by total seconds in them, traced start-ups (top 15 under cumux):"
        sum_calls() { # FILE: "function calls seconds" per function, over every process in the trace
            awk '/^cumux trace: summary of pid/ {p = 1; next} p && NF >= 5 && $2 ~ /^[0-9]+$/ && $4 ~ /^[0-9.]+$/ {
                t[$1] += $4; c[$1] += $2} END {for (f in t) printf "%s %d %.6f\n", f, c[f], t[f]}' "$1" 2>/dev/null
        }
        sum_calls "$out/trace-native.txt" >"$out/calls-native.txt"
        sum_calls "$out/trace.txt" | sort -k3 -gr | head -15 >"$out/calls-cumux.txt"
        printf '  %-40s %10s %10s %10s %10s\n' function "native n" "native s" "cumux n" "cumux s"
        while read -r f n t; do
            read -r nn nt < <(awk -v f="$f" '$1 == f {print $2, $3}' "$out/calls-native.txt")
            printf '  %-40s %10s %10s %10s %10.3f\n' "$f" "${nn:--}" "${nt:--}" "$n" "$t"
        done <"$out/calls-cumux.txt"
    fi
} | tee "$out/summary.txt"
