#!/usr/bin/env bash
# A Slurm job of 4 spin tasks through cumux, as the SPANK plugin runs it (issue 42's device figure), against
# the same 4 tasks under NVIDIA MPS: rounds MPS, cumux, cumux, MPS. Where no Slurm is installed (the
# device machine), each task is started as the plugin's hooks would leave it: moved into the job's cgroup
# /cumux-slurm/job_ID (slurm_spank_task_init_privileged), the group given its settings with `cumux set
# --group` (memory none, as for a job without --cumux-memory; SMS=N: --cumux-sms=N), and the shim first on
# its library path with the server's pipe directory and the name slurm-job-ID (slurm_spank_task_init).
# While the job runs, `cumux status` must show its 4 programs in that group; the epilog's report (`cumux
# group`) is printed after. Needs root and a cgroup v2 hierarchy (else the group is the server's default
# and it says so).
#   bench/slurm_job.sh [--build DIR] [--duration S]
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" dur=4 ntasks=4 job=4242
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --duration) dur=$2; shift ;;
        *) echo "bench/slurm_job.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
out="${OUT:-/tmp/cumux-bench}/slurm_job"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux" bin="$build/bench" shim="$build/lib"
. "$repo/scripts/lib/sharing.sh"
sharing_init
[ -x "$bin/bench_spin" ] && [ -e "$shim/libcuda.so.1" ] || { echo "bench/slurm_job.sh: build first ($bin/bench_spin, $shim/libcuda.so.1)" >&2; exit 2; }
cgm=$(findmnt -n -t cgroup2 -o TARGET 2>/dev/null | head -1)
group=/cumux-slurm/job_$job
if [ -n "$cgm" ] && mkdir -p "$cgm$group" 2>/dev/null; then
    procs_file=$cgm$group/cgroup.procs
else
    procs_file="" group=""
    log "no cgroup v2 hierarchy to make $group in: the tasks run in the server's default group"
fi
trap 'mps_stop; cumux_stop; [ -n "$group" ] && rmdir "$cgm$group" "$cgm/cumux-slurm" 2>/dev/null' EXIT

# tasks MODE ROUND: the job's tasks, one shared start; prints the aggregate launches/s.
tasks() {
    local mode=$1 round=$2 start=$(($(date +%s%N) + 3000000000)) pids=() i
    for i in $(seq 1 $ntasks); do
        if [ "$mode" = cumux ]; then
            sh -c '[ -z "$0" ] || echo $$ >"$0"; exec "$@"' "$procs_file" env LD_LIBRARY_PATH="$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
                CUMUX_PIPE_DIRECTORY="$CUMUX_PIPE_DIRECTORY" CUMUX_CLIENT_NAME=slurm-job-$job SLURM_JOB_ID=$job SLURM_PROCID=$((i - 1)) \
                "$bin/bench_spin" "$start" "$dur" >"$out/$mode.$round.$i.log" 2>&1 &
        else
            CUDA_MPS_PIPE_DIRECTORY=$mps_pipe SLURM_JOB_ID=$job SLURM_PROCID=$((i - 1)) "$bin/bench_spin" "$start" "$dur" >"$out/$mode.$round.$i.log" 2>&1 &
        fi
        pids+=($!)
    done
    if [ "$mode" = cumux ]; then
        sleep 4
        "$cli" status >"$out/status.$round.txt" 2>&1
    fi
    local ok=1
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    [ $ok = 1 ] || { echo FAIL; return; }
    cat "$out/$mode.$round".*.log | awk -v want=$ntasks '/^spin / { for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
        s += v["launches_per_s"]; c++ } END { if (c == want) printf "%.0f", s; else print "FAIL" }'
}

export CUMUX_PIPE_DIRECTORY="${CUMUX_PIPE_DIRECTORY:-/tmp/cumux-slurm-bench.$$}"
mkdir -p "$CUMUX_PIPE_DIRECTORY" && chmod 700 "$CUMUX_PIPE_DIRECTORY"
declare -A R
for round in 1 2 3 4; do
    case $round in 1 | 4) mode=mps ;; *) mode=cumux ;; esac
    if [ $mode = mps ]; then
        [ -n "$mps_ctl" ] && mps_start || { R[$round]=FAIL; log "MPS did not start"; continue; }
        R[$round]=$(tasks mps $round)
        mps_stop
    else
        cumux_start || { R[$round]=FAIL; log "cumuxd did not start"; continue; }
        if [ -n "$group" ]; then
            "$cli" set --group "$group" --memory none >>"$out/set.log" 2>&1 || log "cumux set --group failed"
            [ -n "${SMS:-}" ] && { "$cli" set --group "$group" --sms "$SMS" >>"$out/set.log" 2>&1 || log "cumux set --group --sms $SMS failed"; }
        fi
        R[$round]=$(tasks cumux $round)
        [ -n "$group" ] && "$cli" group "$group" >"$out/report.$round.txt" 2>&1
        n_in=$(awk -v g="${group:-/}" '$NF == g && $2 ~ /^[0-9]+$/' "$out/status.$round.txt" | wc -l)
        [ -z "$group" ] || [ "$n_in" -ge $ntasks ] || { log "round $round: $n_in of $ntasks tasks in group $group (see $out/status.$round.txt)"; R[$round]="FAIL(group)"; }
        [ -n "$group" ] && "$cli" set --group "$group" --forget >>"$out/set.log" 2>&1
        cumux_stop
    fi
    log "round $round ($mode): ${R[$round]} launches/s"
done
mean() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/) printf "%.0f", (a + b) / 2; else print "FAIL" }'; }
m=$(mean "${R[1]}" "${R[4]}") c=$(mean "${R[2]}" "${R[3]}")
echo "== a Slurm job of $ntasks spin tasks (the plugin's group $group${SMS:+, --cumux-sms=$SMS}), rounds MPS cumux cumux MPS =="
printf '%-44s %12s %12s\n' "mode" "launches/s" "rounds"
printf '%-44s %12s %12s\n' "NVIDIA MPS, $ntasks tasks" "$m" "${R[1]} ${R[4]}"
printf '%-44s %12s %12s\n' "cumux, $ntasks tasks in the job's group" "$c" "${R[2]} ${R[3]}"
awk -v c="$c" -v m="$m" 'BEGIN { if (c ~ /^[0-9]+$/ && m ~ /^[0-9]+$/ && m > 0) printf "cumux/MPS: %.3fx\n", c / m; else print "cumux/MPS: -" }'
[ -n "$group" ] && [ -f "$out/report.2.txt" ] && echo "the job's report (cumux group): $(head -1 "$out/report.2.txt")"
