#!/usr/bin/env bash
# Each kernel's GPU time natively and under cumux, measured the same way (issue 9: ResNet-50 training runs
# 2-3 % slower under cumux, on the GPU's own clock, in every configuration; torch.profiler natively against
# CUMUX_PROFILE=kernels under cumux cannot tell a 1-2 us difference per kernel, their methods differ by more).
# Nsight Compute (ncu) times every kernel in a window of the training's eager steps (bench/efficiency.py,
# part eager, cuDNN's heuristics so both runs choose the same kernels): natively around the program, under
# cumux around the server (`cumux start --foreground`, which runs the kernels; ncu follows its worker).
# Caches are not flushed and clocks not locked (`--cache-control none --clock-control none`), so each
# kernel runs as it does in the training, one at a time. Prints, per kernel, launches and mean us both ways,
# the kernels whose time differs the most, and the sums.
#   bench/kernel_times.sh [--build DIR]     logs: ${OUT:-/tmp/cumux-kernel-times}
# NCU_SKIP (default 12000: past model set-up and the 15 warm-up steps of ~755 kernels each), NCU_COUNT
# (default 2300: three steps). KT_NATIVE_ENV="VAR=V ...": the second column natively with those variables
# (say PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) instead of under cumux.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
[ "${1:-}" = --build ] && { build=$(cd "$2" && pwd) || exit 2; }
out="${OUT:-/tmp/cumux-kernel-times}"
mkdir -p "$out" || exit 2
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi
ncu=$(command -v ncu 2>/dev/null || echo /usr/local/cuda/bin/ncu)
[ -x "$ncu" ] || { echo "SKIP: no Nsight Compute (ncu)"; exit 0; }
py=${PYTHON:-python3}
cli="$build/cli/cumux"
ncu_opts=(--metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --page raw
    --print-units base --launch-skip "${NCU_SKIP:-12000}" --launch-count "${NCU_COUNT:-2300}")
export EFF_PARTS=eager EFF_SECONDS="${EFF_SECONDS:-2}" EFF_CUDNN_BENCHMARK=0

echo "[$(date +%T)] native"
timeout -k 5 240 "$ncu" "${ncu_opts[@]}" --log-file "$out/native.csv" "$py" "$here/efficiency.py" \
    >"$out/native.log" 2>&1
echo "[$(date +%T)] native: rc $?"

if [ -n "${KT_NATIVE_ENV:-}" ]; then # the second side natively too, with these variables (VAR=V ...)
    read -r -a kt_env <<<"$KT_NATIVE_ENV"
    echo "[$(date +%T)] native with ${KT_NATIVE_ENV} (in the cumux column)"
    timeout -k 5 240 env "${kt_env[@]}" "$ncu" "${ncu_opts[@]}" --log-file "$out/cumux.csv" "$py" \
        "$here/efficiency.py" >"$out/cumux.log" 2>&1
    echo "[$(date +%T)] native with ${KT_NATIVE_ENV}: rc $?"
else
    pipe=$(mktemp -d)
    export CUMUX_PIPE_DIRECTORY="$pipe" CUMUX_LOG_DIRECTORY="$out/cumux-server" CUMUX_STANDBY=0
    mkdir -p "$CUMUX_LOG_DIRECTORY"
    timeout -k 5 300 "$ncu" "${ncu_opts[@]}" --target-processes all --log-file "$out/cumux.csv" \
        "$cli" start --foreground >"$out/ncu-server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 120); do
        "$cli" status >/dev/null 2>&1 && break
        sleep 0.5
    done
    echo "[$(date +%T)] cumux (server up: $("$cli" status >/dev/null 2>&1 && echo yes || echo no))"
    timeout -k 5 240 "$cli" run -- "$py" "$here/efficiency.py" >"$out/cumux.log" 2>&1
    echo "[$(date +%T)] cumux: rc $?"
    "$cli" stop >/dev/null 2>&1
    wait $server
    rm -rf "$pipe"
fi

"$py" - "$out/native.csv" "$out/cumux.csv" <<'EOF' | tee "$out/summary.txt"
import collections, csv, sys

def load(path):
    """Kernel name -> list of durations (ns), from ncu's raw CSV page (one row per kernel, a units row
    after the header) or its details page (one row per metric)."""
    times = collections.defaultdict(list)
    try:
        lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    except OSError:
        return times
    rows = list(csv.reader(lines))
    if not rows:
        return times
    head = rows[0]
    if "gpu__time_duration.sum" in head:
        k, t = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
        for r in rows[1:]:
            try:
                ns = float(r[t].replace(",", ""))
            except (ValueError, IndexError):
                continue  # the units row
            times[r[k]].append(ns)
    elif "Metric Name" in head:
        k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
        for r in rows[1:]:
            if len(r) > v and r[m] == "gpu__time_duration.sum":
                times[r[k]].append(float(r[v].replace(",", "")))
    return times

nat, cum = load(sys.argv[1]), load(sys.argv[2])
print("kernels timed: native %d launches (%d kernels), cumux %d launches (%d kernels)" % (
    sum(map(len, nat.values())), len(nat), sum(map(len, cum.values())), len(cum)))
if not nat or not cum:
    print("FAIL kernel_times: nothing timed on one side (logs: native.log, cumux.log, ncu-server.log)")
    sys.exit(1)
common = [n for n in nat if n in cum]
rows = []
for n in common:
    a, b = sum(nat[n]) / len(nat[n]), sum(cum[n]) / len(cum[n])
    rows.append((b - a, n, len(nat[n]), a, len(cum[n]), b))
# Per step, weighted by how often natively: what the difference in each kernel's time costs a step.
tot_a = sum(r[3] * r[2] for r in rows)
tot_b = sum(r[5] * r[2] for r in rows)
print("kernels in both: %d; their time at the native counts: native %.3f ms, cumux %.3f ms (%.2f%%)" % (
    len(rows), tot_a / 1e6, tot_b / 1e6, 100.0 * (tot_b - tot_a) / tot_a if tot_a else 0))
print("only natively: %d kernels; only under cumux: %d (%s)" % (
    len([n for n in nat if n not in cum]), len([n for n in cum if n not in nat]),
    ", ".join(sorted(n for n in cum if n not in nat))[:300]))
print("%9s %9s %7s %7s  kernel (the 25 whose summed time differs most)" % ("native_us", "cumux_us", "n_nat", "n_cum"))
for d, n, na, a, nb, b in sorted(rows, key=lambda r: -abs(r[0] * r[2]))[:25]:
    print("%9.2f %9.2f %7d %7d  %s" % (a / 1e3, b / 1e3, na, nb, n[:110]))
EOF
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then # the device returns few files: what went wrong goes to the output
    for f in native.log cumux.log ncu-server.log; do
        [ -s "$out/$f" ] && { echo "-- $f (last lines)"; tail -15 "$out/$f"; }
    done
fi
exit "$rc"
