#!/usr/bin/env bash
# Programs across the network against the same programs on the same server locally (issue 45): one cumuxd,
# `cumux gateway` beside it on TCP loopback with a key of `cumux keygen`, and each workload run twice, through
# `cumux run` locally (shared memory) and through `cumux run` with CUMUX_SERVER=127.0.0.1:PORT (relay, TLS,
# gateway). Phases (--phases, default all), in this order:
#   spin       bench_spin in 1 and 4 processes (one common window), launches/s summed; local, remote, remote,
#              local (each side's figure the mean of its two runs; REMOTE_SPIN_ROUNDS=1: local, remote)
#   copy       bench_copy: 256 MiB host-device copies, pinned and pageable, GB/s
#   roundtrip  bench_roundtrip: a synchronizing call's median and p99 (4-byte DtoH, memset + synchronize,
#              stream query)
#   train      bench/startup_train.py: a ResNet-50 training's images/s over REMOTE_TRAIN_S seconds (default 20)
#              after its warm-up; local, remote
#   train_pinned  the same with its batches copied from 4 pinned buffers in turn (STARTUP_PINNED=4, as a
#              DataLoader with pin_memory=True): pinned memory is compared around the work across the network
#   suites     the GPU suite (tests/gpu/run.sh --cumux) and the runtime suite (tests/runtime/run.sh --cumux),
#              remotely: every program must pass; within what is left of REMOTE_BUDGET seconds (default 900)
# Prints a table last (local, remote, remote/local, and the issue's goal). Logs: ${OUT:-/tmp/cumux-remote}.
#   bench/remote.sh [--build DIR] [--phases "spin copy roundtrip train train_pinned suites"] [--port P]
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
phases="${REMOTE_PHASES:-spin copy roundtrip train train_pinned suites}" # REMOTE_PHASES: the default phases
port=7461
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --phases) phases="$2"; shift ;;
        --port) port="$2"; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "remote.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-remote}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux"
bin="$build/bench"
py=${PYTHON:-python3}
train_s=${REMOTE_TRAIN_S:-20}
budget=${REMOTE_BUDGET:-900} # the suites, last, get what is left of it
t0=$SECONDS
left() { echo $((budget - (SECONDS - t0))); }
log() { echo "[$(date +%T)] $*"; }
has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }

if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi
if ! "$cli" help 2>&1 | grep -q gateway; then
    echo "SKIP: this cumux was built without the network link (GnuTLS not found at configure time)"
    exit 0
fi

declare -A R # R[metric,local|remote]
suites_note="not run"
isnum() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
ratio() { if isnum "$1" && isnum "$2" && [ "$2" != 0 ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; else echo -; fi; }
row() { printf '%-36s %12s %12s %10s   %s\n' "$1" "${R[$2,local]:--}" "${R[$2,remote]:--}" "$(ratio "${R[$2,remote]:-}" "${R[$2,local]:-}")" "$3"; }
report() {
    reported=1
    {
        echo
        echo "== cumux remote (TCP loopback through relay, TLS and gateway) against local (shared memory), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        printf '%-36s %12s %12s %10s   %s\n' metric local remote ratio goal
        row "spin, 1 proc, launches/s" spin1 ""
        row "spin, 4 procs, launches/s" spin4 ">= 0.95x"
        row "H2D pinned 256 MiB, GB/s" h2d_pinned_gbs ">= 0.8x"
        row "D2H pinned 256 MiB, GB/s" d2h_pinned_gbs ">= 0.8x"
        row "H2D pageable 256 MiB, GB/s" h2d_pageable_gbs ""
        row "D2H pageable 256 MiB, GB/s" d2h_pageable_gbs ""
        row "round trip DtoH 4 B, median us" dtoh4_us_median "(figure)"
        row "round trip DtoH 4 B, p99 us" dtoh4_us_p99 ""
        row "memset + sync, median us" sync_us_median ""
        row "stream query, median us" query_us_median ""
        row "memset + sync after 5 ms idle, median us" idle_us_median ""
        row "ResNet-50 train, images/s" train ">= 0.90x"
        row "ResNet-50 warm start-up, s" train_warm ""
        row "ResNet-50, batches from pinned, img/s" train_pinned ""
        echo "suites: $suites_note"
    } | tee "$out/summary.txt"
}
cumux_up=0 gw_pid=""
cleanup() {
    [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null
    [ $cumux_up = 1 ] && "$cli" stop >>"$out/cumux-cli.log" 2>&1
}
trap cleanup EXIT
reported=0
trap 'log interrupted; [ $reported = 1 ] || report; exit 130' INT TERM

export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$out/cumux-server}"
mkdir -p "$CUMUX_LOG_DIRECTORY"
"$cli" start >>"$out/cumux-cli.log" 2>&1 && cumux_up=1 || { echo "remote.sh: cumux start failed ($out/cumux-cli.log)"; exit 1; }
key="$out/remote.key"
rm -f "$key"
"$cli" keygen "$key" bench >>"$out/cumux-cli.log" 2>&1 || { echo "remote.sh: cumux keygen failed"; exit 1; }
"$cli" gateway --listen "127.0.0.1:$port" --key "$key" >"$out/gateway.log" 2>&1 &
gw_pid=$!
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
# A cumux whose `run` crosses the network and whose other commands are the local CLI's: what the suites'
# scripts are given as CUMUX_CLI (the server they find running is used and left running).
rcli="$out/remote-cumux"
cat >"$rcli" <<EOF
#!/bin/sh
if [ "\$1" = run ]; then
    exec env -u CUMUX_PIPE_DIRECTORY CUMUX_SERVER=127.0.0.1:$port CUMUX_KEY_FILE=$key "$cli" "\$@"
fi
exec "$cli" "\$@"
EOF
chmod +x "$rcli"
log "cumuxd up; gateway on 127.0.0.1:$port (pid $gw_pid)"

# The command prefix of each side: the programs under cumux, locally or across the network.
declare -A pre=([local]="$cli" [remote]="$rcli")
kv() { grep -o "$2=[0-9.]*" "$1" 2>/dev/null | tail -1 | cut -d= -f2; }
mean() { awk 'BEGIN { s = 0; n = 0; for (i = 1; i < ARGC; i++) if (ARGV[i] ~ /^[0-9.]+$/) { s += ARGV[i]; n++ }
                      if (n) printf "%.1f", s / n; else print "FAIL" }' "$@"; }

spin() { # SIDE N ROUND
    local side=$1 n=$2 k=$3 start pids=() i
    start=$(($(date +%s%N) + 3000000000))
    for i in $(seq 1 "$n"); do
        timeout -k 5 90 "${pre[$side]}" run -- "$bin/bench_spin" "$start" 6 >"$out/spin.$side.$n.$k.$i.log" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    cat "$out"/spin."$side"."$n"."$k".*.log | awk -v want="$n" '
        /^spin / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] } s += v["launches_per_s"]; c++ }
        END { if (c == want) printf "%.0f", s; else print "FAIL" }'
}
if has spin; then
    for n in 1 4; do
        a=$(spin local $n 1) b=$(spin remote $n 1) c="" d=""
        if [ "${REMOTE_SPIN_ROUNDS:-2}" -ge 2 ]; then c=$(spin remote $n 2) d=$(spin local $n 2); fi
        R[spin$n,local]=$(mean "$a" $d) R[spin$n,remote]=$(mean "$b" $c)
        log "spin $n: local $a $d, remote $b $c launches/s"
    done
fi
if has copy; then
    for side in local remote; do
        timeout -k 5 120 "${pre[$side]}" run -- "$bin/bench_copy" >"$out/copy.$side.log" 2>&1
        for k in h2d_pinned_gbs d2h_pinned_gbs h2d_pageable_gbs d2h_pageable_gbs; do R[$k,$side]=$(kv "$out/copy.$side.log" $k); done
        log "copy $side: $(tail -1 "$out/copy.$side.log")"
    done
fi
if has roundtrip; then
    for side in local remote; do
        timeout -k 5 120 "${pre[$side]}" run -- "$bin/bench_roundtrip" 3000 >"$out/roundtrip.$side.log" 2>&1
        for k in dtoh4_us_median dtoh4_us_p99 sync_us_median sync_us_p99 query_us_median query_us_p99 idle_us_median idle_us_p99; do
            R[$k,$side]=$(kv "$out/roundtrip.$side.log" $k)
        done
        log "roundtrip $side: $(tail -1 "$out/roundtrip.$side.log")"
    done
fi
if has train; then
    for side in local remote; do
        PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" STARTUP_DURATION=$train_s timeout -k 5 $((train_s + 150)) \
            "${pre[$side]}" run -- "$py" "$here/startup_train.py" >"$out/train.$side.log" 2>&1
        R[train,$side]=$(kv "$out/train.$side.log" images_per_s)
        R[train_warm,$side]=$(kv "$out/train.$side.log" warm)
        log "train $side: $(grep -h '^STARTUP\|^FAIL\|^SKIP' "$out/train.$side.log" | tail -1)"
    done
fi
if has train_pinned; then
    for side in local remote; do
        PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" STARTUP_DURATION=$train_s STARTUP_PINNED=4 \
            timeout -k 5 $((train_s + 150)) "${pre[$side]}" run -- "$py" "$here/startup_train.py" \
            >"$out/train_pinned.$side.log" 2>&1
        R[train_pinned,$side]=$(kv "$out/train_pinned.$side.log" images_per_s)
        log "train, batches from pinned memory, $side: $(grep -h '^STARTUP\|^FAIL\|^SKIP' "$out/train_pinned.$side.log" | tail -1)"
    done
fi

if has suites; then
    log "GPU suite remotely"
    t_gpu=$(( $(left) * 3 / 5 )); [ $t_gpu -gt 300 ] && t_gpu=300
    OUT="$out/gpu-tests" CUMUX_CLI="$rcli" GPU_TEST_TIMEOUT=90 timeout -k 10 $t_gpu \
        "$repo/tests/gpu/run.sh" --cumux --build "$build" >"$out/gpu-tests.txt" 2>&1
    g_rc=$?
    g_fail=$(awk -F'|' 'NF == 3 && $3 !~ /PASS|cumux|-----/ { gsub(/ /, "", $1); printf "%s ", $1 }' "$out/gpu-tests.txt")
    log "runtime suite remotely"
    t_rt=$(( $(left) - 10 )); [ $t_rt -gt 200 ] && t_rt=200; [ $t_rt -lt 30 ] && t_rt=30
    OUT="$out/runtime-tests" CUMUX_CLI="$rcli" RT_TEST_TIMEOUT=60 timeout -k 10 $t_rt \
        "$repo/tests/runtime/run.sh" --cumux --build "$build" >"$out/runtime-tests.txt" 2>&1
    r_rc=$?
    # What cannot cross (docs/remote.md: descriptor export, an image read back) fails by design.
    g_unexpected=$(for t in $g_fail; do case " vmm vmm_share link " in *" $t "*) ;; *) printf '%s ' "$t" ;; esac; done)
    suites_note="GPU suite: not passing ${g_fail:-none} (unexpected: ${g_unexpected:-none}); runtime suite exit $r_rc"
    log "$suites_note"
    tail -n 4 "$out/runtime-tests.txt" | sed 's/^/    /'
fi

report

