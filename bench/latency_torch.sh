#!/usr/bin/env bash
# Issue 12's table: a ResNet-18 inference program (fp16, batch 1, 100 requests/s: bench/infer_latency.py)
# alone and beside a ResNet-50 training (batch 64: bench/startup_train.py), its p50/p99 latency and the
# training's images/s: time-sliced (natively), under NVIDIA MPS, and under cumux (normal; the inference
# program high; high with SMs reserved for it). The training is warm before the requests are timed.
# Each mode's cases run --rounds times in turn (alone, beside, ..., alone, beside, ...: default 2), and
# each case's percentiles are over the requests of all its rounds (a p99 of one short run is set by a
# handful of requests); the training's images/s is the rounds' mean. Prints a table last.
#   bench/latency_torch.sh [--build DIR] [--duration S] [--rounds N] [--no-native] [--no-mps] [--sms "8 16 32"]
# Logs: ${OUT:-/tmp/cumux-latency-torch}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=20 rounds=2 do_native=1 do_mps=1 sms="8 16 32"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --rounds) rounds=$2; shift ;;
        --no-native) do_native=0 ;;
        --no-mps) do_mps=0 ;;
        --sms) sms=$2; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "latency_torch.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-latency-torch}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux"
. "$repo/scripts/lib/sharing.sh"
sharing_init
python3 -c 'import torch' 2>/dev/null || { log "SKIP: no PyTorch in python3"; exit 0; }
declare -A R
cases=()
kv() { grep -ho "$2=[0-9.]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2; }
# one NAME WITH_TRAINING INFER_PREFIX TRAIN_PREFIX: one round of a case (prefixes: words before python3,
# "" for none); its requests' latencies go to $out/NAME.samples, its training's images/s to R[NAME,imgs].
one() {
    local name=$1 train=$2 ipre=$3 tpre=$4 tp="" k img
    local r=$name.r$((${R[$name,n]:-0} + 1))
    R[$name,n]=$((${R[$name,n]:-0} + 1))
    [ "${R[$name,n]}" = 1 ] && { rm -f "$out/$name".*; cases+=("$name"); }
    if [ "$train" = 1 ]; then
        # shellcheck disable=SC2086
        STARTUP_BATCH=64 STARTUP_READY="$out/$r.train-ready" STARTUP_GO="$out/$r.go" \
            STARTUP_DURATION=$((dur + 8)) timeout -k 5 600 $tpre python3 "$here/startup_train.py" \
            >"$out/$r.train.log" 2>&1 &
        tp=$!
    fi
    # shellcheck disable=SC2086
    INFER_READY="$out/$r.infer-ready" INFER_GO="$out/$r.go" INFER_DURATION=$dur INFER_SAMPLES="$out/$name.samples" \
        timeout -k 5 600 $ipre python3 "$here/infer_latency.py" >"$out/$r.infer.log" 2>&1 &
    local ip=$!
    for ((k = 0; k < 6000; k++)); do
        [ -e "$out/$r.infer-ready" ] && { [ "$train" = 0 ] || [ -e "$out/$r.train-ready" ]; } && break
        kill -0 "$ip" 2>/dev/null || break
        sleep 0.1
    done
    [ "$train" = 1 ] && sleep 3 # the training's timed steps under way
    touch "$out/$r.go"
    wait "$ip"
    [ -n "$tp" ] && wait "$tp"
    img=-
    [ "$train" = 1 ] && img=$(kv "$out/$r.train.log" images_per_s)
    [ -n "$img" ] && [ "$img" != - ] && R[$name,imgs]="${R[$name,imgs]:-} $img"
    log "$r: p50 $(kv "$out/$r.infer.log" p50_ms) ms, p99 $(kv "$out/$r.infer.log" p99_ms) ms; training ${img:-?} img/s"
    # A round without its figures says why here: the device tool brings back only a few of the log files.
    if [ "$ipre" != true ] && [ -z "$(kv "$out/$r.infer.log" p99_ms)" ]; then
        log "$r: the inference program gave no figures; the end of its log:"
        tail -n 15 "$out/$r.infer.log"
    fi
    if [ "$train" = 1 ] && [ -z "$img" ]; then
        log "$r: the training gave no figures; the end of its log:"
        tail -n 15 "$out/$r.train.log"
    fi
}
# The table's figures of each case, from all its rounds.
summarize() {
    local c
    for c in "${cases[@]}"; do
        R[$c,p50]=$(sort -n "$out/$c.samples" 2>/dev/null | awk '{ v[NR] = $1 } END { if (NR) print v[int(0.5 * NR) + 1] }')
        R[$c,p99]=$(sort -n "$out/$c.samples" 2>/dev/null | awk '{ v[NR] = $1 } END { if (NR) { i = int(0.99 * NR) + 1; if (i > NR) i = NR; print v[i] } }')
        R[$c,img]=-
        [ -n "${R[$c,imgs]:-}" ] && R[$c,img]=$(echo ${R[$c,imgs]} | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", s / NF }')
    done
}
if [ $do_native = 1 ]; then
    for ((i = 0; i < rounds; i++)); do
        one native_alone 0 "" ""
        one native 1 "" ""
    done
fi
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    for ((i = 0; i < rounds; i++)); do
        one mps_alone 0 "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" ""
        one mps 1 "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe"
    done
    mps_stop
fi
if [ -x "$cli" ] && cumux_start; then
    for ((i = 0; i < rounds; i++)); do
        one cumux_alone 0 "$cli run --" ""
        one cumux 1 "$cli run --" "$cli run --"
        one cumux_high 1 "$cli run --priority high --" "$cli run --"
        for n in $sms; do
            one "cumux_high_sms$n" 1 "$cli run --priority high --sms $n --" "$cli run --"
        done
    done
    one cumux_train_alone 1 "true" "$cli run --"
    cumux_stop
fi
summarize
{
    echo "== ResNet-18 inference (fp16, batch 1, 100 req/s) beside a ResNet-50 training (batch 64), $rounds round(s) of ${dur} s (bench/latency_torch.sh, $(date -u +%FT%TZ)) =="
    printf '%-18s %9s %9s %14s %14s\n' case p50_ms p99_ms "p99/own alone" "training img/s"
    for c in "${cases[@]}"; do
        base=${R[${c%%_*}_alone,p99]:-}
        [[ $c == *_alone ]] && base=${R[$c,p99]:-}
        r=$(awk -v a="${R[$c,p99]:-}" -v b="$base" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }')
        printf '%-18s %9s %9s %14s %14s\n' "$c" "${R[$c,p50]:--}" "${R[$c,p99]:--}" "$r" "${R[$c,img]:--}"
    done
    echo "p99/own alone: against the same program alone in the same mode (native, mps, cumux). cumux_high_smsN:"
    echo "the inference program high, with N SMs reserved for it; cumux_train_alone: the training alone."
} | tee "$out/summary.txt"
