#!/usr/bin/env bash
# Issue 12's table: a ResNet-18 inference program (fp16, batch 1, 100 requests/s: bench/infer_latency.py)
# alone and beside a ResNet-50 training (batch 64: bench/startup_train.py), its p50/p99 latency and the
# training's images/s: time-sliced (natively), under NVIDIA MPS, and under cumux (normal; the inference
# program high; high with SMs reserved for it). The training is warm before the requests are timed.
# Prints a table last.
#   bench/latency_torch.sh [--build DIR] [--duration S] [--no-native] [--no-mps] [--sms "8 16 32"]
# Logs: ${OUT:-/tmp/cumux-latency-torch}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=20 do_native=1 do_mps=1 sms="8 16 32"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --no-native) do_native=0 ;;
        --no-mps) do_mps=0 ;;
        --sms) sms=$2; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
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
# one NAME WITH_TRAINING INFER_PREFIX TRAIN_PREFIX: (prefixes: words before python3, "" for none)
one() {
    local name=$1 train=$2 ipre=$3 tpre=$4 tp="" k
    rm -f "$out/$name".*
    if [ "$train" = 1 ]; then
        # shellcheck disable=SC2086
        STARTUP_BATCH=64 STARTUP_READY="$out/$name.train-ready" STARTUP_GO="$out/$name.go" \
            STARTUP_DURATION=$((dur + 8)) timeout -k 5 600 $tpre python3 "$here/startup_train.py" \
            >"$out/$name.train.log" 2>&1 &
        tp=$!
    fi
    # shellcheck disable=SC2086
    INFER_READY="$out/$name.infer-ready" INFER_GO="$out/$name.go" INFER_DURATION=$dur \
        timeout -k 5 600 $ipre python3 "$here/infer_latency.py" >"$out/$name.infer.log" 2>&1 &
    local ip=$!
    for ((k = 0; k < 6000; k++)); do
        [ -e "$out/$name.infer-ready" ] && { [ "$train" = 0 ] || [ -e "$out/$name.train-ready" ]; } && break
        kill -0 "$ip" 2>/dev/null || break
        sleep 0.1
    done
    [ "$train" = 1 ] && sleep 3 # the training's timed steps under way
    touch "$out/$name.go"
    wait "$ip"
    [ -n "$tp" ] && wait "$tp"
    R[$name,p50]=$(kv "$out/$name.infer.log" p50_ms)
    R[$name,p99]=$(kv "$out/$name.infer.log" p99_ms)
    R[$name,img]=-
    [ "$train" = 1 ] && R[$name,img]=$(kv "$out/$name.train.log" images_per_s)
    cases+=("$name")
    log "$name: p50 ${R[$name,p50]:-?} ms, p99 ${R[$name,p99]:-?} ms; training ${R[$name,img]:-?} img/s"
    # A case without its figures says why here: the device tool brings back only a few of the log files.
    if [ "$ipre" != true ] && [ -z "${R[$name,p99]}" ]; then
        log "$name: the inference program gave no figures; the end of its log:"
        tail -n 15 "$out/$name.infer.log"
    fi
    if [ "$train" = 1 ] && [ -z "${R[$name,img]}" ]; then
        log "$name: the training gave no figures; the end of its log:"
        tail -n 15 "$out/$name.train.log"
    fi
}
if [ $do_native = 1 ]; then
    one native_alone 0 "" ""
    one native 1 "" ""
fi
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    one mps_alone 0 "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" ""
    one mps 1 "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" "env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe"
    mps_stop
fi
if [ -x "$cli" ] && cumux_start; then
    one cumux_alone 0 "$cli run --" ""
    one cumux 1 "$cli run --" "$cli run --"
    one cumux_high 1 "$cli run --priority high --" "$cli run --"
    for n in $sms; do
        one "cumux_high_sms$n" 1 "$cli run --priority high --sms $n --" "$cli run --"
    done
    one cumux_train_alone 1 "true" "$cli run --"
    cumux_stop
fi
{
    echo "== ResNet-18 inference (fp16, batch 1, 100 req/s) beside a ResNet-50 training (batch 64) (bench/latency_torch.sh, $(date -u +%FT%TZ)) =="
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
