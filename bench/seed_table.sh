#!/usr/bin/env bash
# Issue 11's first acceptance, the seed's experiment: two PyTorch ResNet-50 trainings (bench/startup_train.py,
# batch 32) at once, time-sliced (natively), under NVIDIA MPS and under cumux; during a common window of
# timed steps, what the tools say: nvidia-smi's utilization and NVML's GPM SM activity and occupancy (read
# through `cumux top --once --json`, from a cumux server that idles beside the time-sliced and MPS runs),
# each program's share of GPU time (cumux's own measurement; nvidia-smi pmon's sm% where it has one), and
# each training's images/s. `cumux top`'s screen during the cumux run is captured (tmux when installed,
# else `cumux top --once`). Prints the table last; writes it to $OUT/summary.txt.
#   bench/seed_table.sh [--build DIR] [--duration S] [--no-mps]
# Logs: ${OUT:-/tmp/cumux-seed}.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=25 do_mps=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        --no-mps) do_mps=0 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "seed_table.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-seed}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" train="$here/startup_train.py"
[ -x "$cli" ] || { echo "seed_table.sh: $cli not built" >&2; exit 2; }
. "$repo/scripts/lib/sharing.sh"
sharing_init
python3 -c 'import torch' 2>/dev/null || { log "SKIP: no PyTorch in python3"; exit 0; }
cumux_start || { log "cumux did not start"; exit 1; }
cases=()
# one MODE PREFIX...: two trainings, their timed steps started together; samples the tools meanwhile.
one() {
    local mode=$1 i pids=() k
    shift
    rm -f "$out/$mode".*
    for i in 1 2; do
        STARTUP_READY="$out/$mode.ready.$i" STARTUP_GO="$out/$mode.go" STARTUP_DURATION=$dur \
            timeout -k 5 400 "$@" python3 "$train" >"$out/$mode.train.$i.log" 2>&1 &
        pids+=($!)
    done
    for ((k = 0; k < 3000; k++)); do
        [ -e "$out/$mode.ready.1" ] && [ -e "$out/$mode.ready.2" ] && break
        kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || break
        sleep 0.1
    done
    touch "$out/$mode.go"
    sleep 2
    local t_end=$((SECONDS + dur - 4))
    while [ $SECONDS -lt $t_end ]; do
        "$cli" top --once --json --interval 1 >>"$out/$mode.top.jsonl" 2>>"$out/$mode.top.err"
        nvidia-smi pmon -c 1 -s u >>"$out/$mode.pmon.txt" 2>/dev/null
        if [ "$mode" = cumux ] && [ ! -s "$out/cumux-top-screen.txt" ] && [ $SECONDS -gt $((t_end - dur / 2)) ]; then
            if command -v tmux >/dev/null; then
                tmux new-session -d -s cumux-top -x 160 -y 30 "$cli top --interval 1" 2>/dev/null &&
                    sleep 4 && tmux capture-pane -p -t cumux-top >"$out/cumux-top-screen.txt"
                tmux kill-session -t cumux-top 2>/dev/null
            else
                { echo "(no tmux: cumux top --once)"; "$cli" top --once; } >"$out/cumux-top-screen.txt" 2>&1
            fi
        fi
    done
    for i in "${pids[@]}"; do wait "$i"; done
    cases+=("$mode")
    log "$mode: $(grep -h '^STARTUP' "$out/$mode".train.*.log | grep -o 'images_per_s=[0-9.]*' | tr '\n' ' ')"
}
one timesliced
if [ $do_mps = 1 ] && [ -n "$mps_ctl" ] && [ -z "$(mps_procs)" ] && mps_start; then
    one mps env CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
    mps_stop
fi
one cumux "$cli" run --
cumux_stop
python3 - "$out" "${cases[@]}" <<'PY' | tee "$out/summary.txt"
import json, re, sys
out, cases = sys.argv[1], sys.argv[2:]
def mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None
def f(v, unit="%"):
    return "-" if v is None else "%.1f%s" % (v, unit)
print("== two ResNet-50 trainings (batch 32) at once: what the tools say (bench/seed_table.sh) ==")
print("%-11s %10s %10s %11s %13s %12s %14s  %s" % ("mode", "img/s 1", "img/s 2", "img/s sum", "nvidia-smi",
      "SM activity", "SM occupancy", "per-program share of GPU time"))
for m in cases:
    ips = []
    for i in (1, 2):
        try:
            t = open("%s/%s.train.%d.log" % (out, m, i)).read()
            ips.append(float(re.findall(r"images_per_s=([0-9.]+)", t)[-1]))
        except (OSError, IndexError, ValueError):
            ips.append(None)
    util, act, occ, shares = [], [], [], {}
    try:
        for line in open("%s/%s.top.jsonl" % (out, m)):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            g = j["gpus"][0]
            util.append(g.get("utilization_pct")); act.append(g.get("sm_activity_pct")); occ.append(g.get("sm_occupancy_pct"))
            for c in j["clients"]:
                if "startup_train" in c.get("command", ""):
                    shares.setdefault(c["pid"], []).append(c["gpu_share_pct"])
    except OSError:
        pass
    share = ", ".join("%.1f%%" % mean(v) for v in shares.values()) if shares else ""
    if not share:  # nvidia-smi pmon's sm% per process, where it has one
        sm = {}
        try:
            for line in open("%s/%s.pmon.txt" % (out, m)):
                p = line.split()
                if len(p) > 4 and p[0].isdigit() and p[3].isdigit():
                    sm.setdefault(p[1], []).append(float(p[3]))
        except OSError:
            pass
        share = "pmon sm%: " + ", ".join("%s %.0f%%" % (pid, mean(v)) for pid, v in sm.items()) if sm else "none"
    tot = sum(x for x in ips if x) if any(ips) else None
    print("%-11s %10s %10s %11s %13s %12s %14s  %s" % (m, f(ips[0], ""), f(ips[1], ""), f(tot, ""), f(mean(util)),
          f(mean(act)), f(mean(occ)), share))
print("nvidia-smi: utilization.gpu; SM activity and occupancy: NVML GPM (cumux top); shares: cumux's per-client")
print("GPU time over wall time (cumux only: MPS and time-slicing give no per-program figure but pmon's).")
try:
    print("\ncumux top during the cumux run:\n" + open("%s/cumux-top-screen.txt" % out).read())
except OSError:
    pass
PY
