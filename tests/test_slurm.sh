#!/usr/bin/env bash
# Slurm jobs through cumux (issue 42): a real one-node Slurm (slurmctld and slurmd from Debian, munge, on
# localhost, ports and state of its own) with the SPANK plugin (slurm/cumux_spank.c) and cumuxd on the fake
# driver, which the first cumux job's prolog starts. Two jobs at once with different --cumux-memory each see their own limit (each job one client
# group, /cumux-slurm/job_ID, which `cumux status` lists with its limit); a job of 4 tasks computes right;
# a job whose program faults does not end another's, which finishes right; a job ended with scancel frees
# all it held, and its use is in its AdminComment; --cumux-sms and gres/shard give SMs; a 50-job array
# (sbatch --cumux) completes. It stops everything it started. Needs root,
# slurmctld, slurmd, munged; else one SKIP line.
# usage: test_slurm.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR SPANK_PLUGIN SHIM_DIR
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") drv=$2 gdir=$(cd "$3" && pwd) plugin=$4 shimdir=$(cd "$5" && pwd)
[ "$(id -u)" = 0 ] || { echo "SKIP slurm: needs root (slurmd)"; exit 0; }
for c in slurmctld slurmd srun sbatch squeue scancel munged; do command -v "$c" >/dev/null || { echo "SKIP slurm: no $c (apt install slurm-wlm munge)"; exit 0; }; done
[ -f "$plugin" ] || { echo "SKIP slurm: the SPANK plugin $plugin was not built (apt install libslurm-dev)"; exit 0; }
trap "" PIPE # a job that ended early must not end the test when its stdin is written
export GT_FAULT_SYNC_MAY_PASS=1 # with GPU coredumps (the default) a faulting program's first synchronize may pass
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test a.out b.out busy.out
sl=$tmp/slurm
mkdir -p "$sl/spool" "$sl/state" "$sl/out" && chmod 755 "$tmp"
daemons=()
cleanup_slurm() {
    for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${daemons[@]}"; do for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done; kill -9 "$p" 2>/dev/null; done
    for d in $(find /sys/fs/cgroup -depth -type d -name "job_*" -path "*cumux-slurm*" 2>/dev/null); do rmdir "$d" 2>/dev/null; done
    own_server_cleanup
}
trap cleanup_slurm EXIT
# munge with a key and socket of its own.
dd if=/dev/urandom of="$sl/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$sl/munge.key"
munged --force --key-file="$sl/munge.key" --socket="$sl/munge.sock" --pid-file="$sl/munged.pid" \
    --log-file="$sl/munged.log" --seed-file="$sl/munged.seed" 2>"$sl/munged.err" || { fail_show="$sl/munged.err" fail "munged"; }
for ((i = 0; i < 50; i++)); do [ -s "$sl/munged.pid" ] && break; sleep 0.1; done
daemons+=("$(cat "$sl/munged.pid")")
port=$((30000 + $$ % 10000))
# write_conf GRES_TYPES NODE_GRES GRES_CONF_LINES...: slurm.conf and gres.conf. gres/shard and gres/mps do
# not go together on a node (Slurm gave CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=625 for mps:25 beside shard:4), so
# the mps job runs last, on a node configured again.
write_conf() {
    local types=$1 node=$2
    shift 2
    cat >"$sl/slurm.conf" <<CONF
ClusterName=cumuxtest
SlurmctldHost=localhost
AuthType=auth/munge
AuthInfo=socket=$sl/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile=$sl/ctld.pid
SlurmdPidFile=$sl/d.pid
SlurmdSpoolDir=$sl/spool
StateSaveLocation=$sl/state
SlurmUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
PlugStackConfig=$sl/plugstack.conf
MpiDefault=none
ReturnToService=2
SlurmctldLogFile=$sl/ctld.log
SlurmdLogFile=$sl/d.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
Prolog=/bin/true
Epilog=/bin/true
GresTypes=$types
NodeName=localhost CPUs=$(nproc) RealMemory=1000 Gres=$node State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
    printf '%s\n' "$@" >"$sl/gres.conf"
}
# gres/shard and gres/mps need a gres/gpu with a device file: a character device of the test's own (as /dev/null's).
mknod "$sl/nvidia0" c 1 3 || fail "mknod"
write_conf gpu,shard gpu:1,shard:4 "Name=gpu File=$sl/nvidia0" "Name=shard Count=4 File=$sl/nvidia0"
mport=$((port + 2))
# The first cumux job's prolog starts the server (none runs yet): here on the fake driver, by this script.
cat >"$sl/start-cumuxd.sh" <<START
#!/bin/sh
exec env LD_LIBRARY_PATH="$drv" CUMUX_LOG_DIRECTORY="$CUMUX_LOG_DIRECTORY" CUMUX_METRICS_PORT=$mport "$cli" start
START
chmod 755 "$sl/start-cumuxd.sh"
echo "required $plugin cumux=$cli pipe_dir=$CUMUX_PIPE_DIRECTORY lib_dir=$shimdir state_dir=$sl/cumux-state start=$sl/start-cumuxd.sh" >"$sl/plugstack.conf"
export SLURM_CONF=$sl/slurm.conf
slurm_up() {
    slurmctld -D >>"$sl/ctld.out" 2>&1 &
    ctld=$!
    slurmd -D -N localhost >>"$sl/d.out" 2>&1 &
    slurmd=$!
    daemons+=("$ctld" "$slurmd")
    for ((i = 0; i < 100; i++)); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
    sinfo -h -o %T 2>/dev/null | grep -q idle || { fail_show="$sl/ctld.log $sl/d.log" fail "the Slurm node is not idle"; }
}
slurm_down() {
    kill "$ctld" "$slurmd" 2>/dev/null
    wait "$ctld" "$slurmd" 2>/dev/null
}
slurm_up
mkdir -p "$CUMUX_PIPE_DIRECTORY" && chmod 700 "$CUMUX_PIPE_DIRECTORY"
"$cli" status >/dev/null 2>&1 && fail "a cumuxd runs already"
unset CUMUX_PIPE_DIRECTORY_FOR_JOBS
group_line() { "$cli" status | awk -v j="/cumux-slurm/job_$1" '$NF == j'; }

# Two jobs at once with different limits: each sees its own.
mkfifo "$tmp/a.in" "$tmp/b.in"
srun --cumux --cumux-memory=256M "$gdir/gpu_group_member" 256 64 <"$tmp/a.in" >"$tmp/a.out" 2>&1 &
ja=$!
exec {fa}>"$tmp/a.in"
srun --cumux --cumux-memory=128M "$gdir/gpu_group_member" 128 32 <"$tmp/b.in" >"$tmp/b.out" 2>&1 &
jb=$!
exec {fb}>"$tmp/b.in"
for o in a b; do
    for ((i = 0; i < 300; i++)); do grep -q '^HOLDING' "$tmp/$o.out" && break; grep -q 'FAIL\|error' "$tmp/$o.out" && break; sleep 0.1; done
    grep -q '^HOLDING' "$tmp/$o.out" || fail_show="$tmp/$o.out $sl/d.log" fail "job $o did not get to hold its memory"
done
grep -q "cumux: job [0-9]*: started cumuxd ($sl/start-cumuxd.sh)" "$sl/d.log" || fail_show="$sl/d.log" fail "no job's prolog started cumuxd"
"$cli" status >"$tmp/status.out"
[ "$(awk '$NF ~ /^\/cumux-slurm\/job_[0-9]+$/ && ($2 == "256.0" || $2 == "128.0")' "$tmp/status.out" | wc -l)" -ge 2 ] ||
    fail_show="$tmp/status.out" fail "the two jobs' groups with their limits are not in the status"
# /metrics by job: each job's program and group carry its id.
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' "$mport" >"$tmp/metrics.out" ||
    fail "no /metrics"
jobs=$(awk '$NF ~ /^\/cumux-slurm\/job_[0-9]+$/ && $2 ~ /^[0-9]/ { sub(/.*job_/, "", $NF); print $NF }' "$tmp/status.out" | sort -u)
[ "$(wc -w <<<"$jobs")" = 2 ] || { fail_show="$tmp/status.out" fail "not two jobs' groups in the status: $jobs"; }
for j in $jobs; do
    grep -q "^cumux_client_device_memory_bytes{.*,group=\"/cumux-slurm/job_$j\",job=\"$j\"} [1-9]" "$tmp/metrics.out" ||
        fail_show="$tmp/metrics.out" fail "/metrics: no program of job $j labelled job=\"$j\""
    grep -q "^cumux_group_device_memory_limit_bytes{group=\"/cumux-slurm/job_$j\",gpu=\"0\",job=\"$j\"} [1-9]" "$tmp/metrics.out" ||
        fail_show="$tmp/metrics.out" fail "/metrics: job $j's group limit not labelled by job"
done
echo >&"$fa"; echo >&"$fb"
exec {fa}>&- {fb}>&-
wait "$ja" && wait "$jb" || fail_show="$tmp/a.out $tmp/b.out" fail "a job with a limit failed"
grep -q '^PASS' "$tmp/a.out" && grep -q '^PASS' "$tmp/b.out" || fail_show="$tmp/a.out $tmp/b.out" fail "a job with a limit did not pass"
# Each job's end: its GPU time and peak memory in slurmd's log (the plugin's epilog).
for ((i = 0; i < 100; i++)); do grep -q "cumux: job [0-9]*: group /cumux-slurm/job_[0-9]*: 0 program(s) now, device memory 0.0 MiB (peak 64.0 MiB on one GPU), limit 256.0 MiB, GPU time [0-9.]* s" "$sl/d.log" && break; sleep 0.1; done
grep -q "cumux: job [0-9]*: group /cumux-slurm/job_[0-9]*: 0 program(s) now, device memory 0.0 MiB (peak 64.0 MiB on one GPU), limit 256.0 MiB, GPU time [0-9.]* s" "$sl/d.log" ||
    fail_show="$sl/d.log" fail "job a's end did not report its peak memory and GPU time"
echo "ok: the first jobs' prolog started cumuxd; two jobs with 256 and 128 MiB, each saw its own; /metrics labelled by job"

# An MPI-style job of 4 tasks, one group.
out=$(timeout 120 srun -O -n 4 --cumux "$gdir/gpu_vecadd" </dev/null 2>&1)
[ "$(grep -c '^PASS vecadd' <<<"$out")" = 4 ] || fail "the 4-task job: $out"
echo "ok: a job of 4 tasks computed right"

# One job faults; the other's program finishes right.
mkfifo "$tmp/busy.in"
# (The other computes in a loop, checked, and does again what a fault loses, as a program that resumes.)
srun --cumux "$gdir/gpu_contain_bystander" busy <"$tmp/busy.in" >"$tmp/busy.out" 2>&1 &
jbusy=$!
exec {fbusy}>"$tmp/busy.in"
for ((i = 0; i < 300; i++)); do grep -q '^bystander: busy' "$tmp/busy.out" && break; sleep 0.1; done
grep -q '^bystander: busy' "$tmp/busy.out" || fail_show="$tmp/busy.out" fail "the computing job did not start"
timeout 120 srun --cumux "$gdir/gpu_fault" </dev/null >"$tmp/fault.out" 2>&1 || fail_show="$tmp/fault.out" fail "the faulting job did not get its error"
sleep 1
echo >&"$fbusy"
exec {fbusy}>&-
wait "$jbusy" && grep -q "^bystander: [0-9]* busy rounds, all right" "$tmp/busy.out" && grep -q "back as client" "$tmp/busy.out" || fail_show="$tmp/busy.out $tmp/fault.out" fail "the other job did not finish right after the fault"
echo "ok: a job's fault left another's right"

# scancel: what the job held is freed.
jid=$(sbatch --parsable --cumux --cumux-memory=64M -o "$sl/out/hang.out" --wrap "$gdir/gpu_hang idle") || fail "sbatch"
for ((i = 0; i < 300; i++)); do "$cli" status | grep -q '^clients: 1$' && break; sleep 0.1; done
"$cli" status | grep -q '^clients: 1$' || fail_show="$sl/out/hang.out" fail "the job to cancel did not connect"
scancel "$jid"
for ((i = 0; i < 300; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
"$cli" status | grep -q '^clients: 0$' || fail "the cancelled job's client is still there"
g=$(group_line "$jid")
# (Its epilog may have forgotten the group already; else it holds nothing.)
[ -z "$g" ] || [ "$(awk '{print $1, $3}' <<<"$g")" = "0.0 0" ] || fail "the cancelled job's group still holds memory: $g"
# The job's epilog forgot its group.
for ((i = 0; i < 100; i++)); do [ -z "$(group_line "$jid")" ] && break; sleep 0.1; done
[ -z "$(group_line "$jid")" ] || fail "the cancelled job's group was not forgotten at its end: $(group_line "$jid")"
grep -q "cumux: job $jid: group /cumux-slurm/job_$jid:" "$sl/d.log" || fail_show="$sl/d.log" fail "the epilog did not log job $jid's use"
echo "ok: scancel freed all the job held; its epilog reported and forgot the group"

# A job's use in its record: AdminComment, set as its task ended (slurmctld takes no update once the job
# is completing); its peak is the 48 MiB gpu_vecadd holds.
jid=$(timeout 120 sbatch --parsable --wait --cumux --cumux-memory=256M -o "$sl/out/vecadd.out" --wrap "$gdir/gpu_vecadd") ||
    fail_show="$sl/out/vecadd.out" fail "sbatch --wait"
scontrol show job "$jid" >"$tmp/job.out" 2>&1
grep -q "AdminComment=cumux: group /cumux-slurm/job_$jid: .*(peak [1-9][0-9.]* MiB on one GPU), limit 256.0 MiB, GPU time [0-9.]* s" "$tmp/job.out" ||
    fail_show="$tmp/job.out $sl/d.log" fail "the job's AdminComment does not report its use"
echo "ok: the job's GPU time and peak memory in its AdminComment"

# SMs: a job with --cumux-sms=16 runs on SMs of its own; one asking more than the GPU has is refused; a
# gres/shard job of 2 of the GPU's 4 shards runs on half the SMs (its share, as MPS's percentage); a
# gres/mps job of 25 of 100 on a quarter.
nsm=$("$cli" status | grep -o '[0-9]* SMs' | head -1 | cut -d' ' -f1)
sm_count() { grep '^sms: ' "$1" | head -1 | sed 's/^sms: [^:]*: //' | tr ',' '\n' | grep -c .; }
timeout 120 srun --cumux --cumux-sms=16 "$gdir/gpu_sm_ids" 1 </dev/null >"$tmp/sms.out" 2>&1 || fail_show="$tmp/sms.out" fail "the --cumux-sms job"
n=$(sm_count "$tmp/sms.out")
[ "$n" -ge 1 ] && [ "$n" -lt 32 ] || fail_show="$tmp/sms.out" fail "the --cumux-sms=16 job ran on $n SMs"
timeout 120 srun --cumux --cumux-sms=$((nsm * 2)) "$gdir/gpu_sm_ids" 1 </dev/null >"$tmp/sms2.out" 2>&1 &&
    fail_show="$tmp/sms2.out" fail "a job asking for more SMs than the GPU has ran"
grep -q "cannot be reserved" "$tmp/sms2.out" || fail_show="$tmp/sms2.out" fail "the refused --cumux-sms job was not told why"
timeout 120 srun --cumux --gres=shard:2 "$gdir/gpu_sm_ids" 1 </dev/null >"$tmp/shard.out" 2>&1 || fail_show="$tmp/shard.out $sl/d.log" fail "the gres/shard job"
n=$(sm_count "$tmp/shard.out")
[ "$n" -ge 1 ] && [ "$n" -le $((nsm / 2 + 16)) ] || fail_show="$tmp/shard.out" fail "the job of 2 of 4 shards ran on $n of $nsm SMs"
timeout 120 srun --cumux "$gdir/gpu_sm_ids" 1 </dev/null >"$tmp/whole.out" 2>&1 || fail "a job without shards"
[ "$(sm_count "$tmp/whole.out")" -gt $((nsm / 2 + 16)) ] || fail "a job without shards or SMs ran on $(sm_count "$tmp/whole.out") SMs"
echo "ok: --cumux-sms reserved SMs for a job, refused more than there are; 2 of 4 shards gave half the SMs"

# A 50-job array.
sbatch --parsable --cumux --array=1-50 -o "$sl/out/%a.out" --wrap "$gdir/gpu_vecadd" >/dev/null || fail "sbatch --array"
for ((i = 0; i < 1200; i++)); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
n=$(grep -l '^PASS vecadd' "$sl/out/"[0-9]*.out 2>/dev/null | wc -l)
[ "$n" = 50 ] || fail "the array: $n of 50 passed"
echo "ok: a 50-job array completed"

# gres/mps, on the node configured again with mps instead of shards (the server runs on).
slurm_down
write_conf gpu,mps gpu:1,mps:100 "Name=gpu File=$sl/nvidia0" "Name=mps Count=100 File=$sl/nvidia0"
slurm_up
# gres/mps: 25 of the GPU's 100 gives the programs CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 (Slurm's), which the
# shim hands to the server as MPS's clients do.
timeout 120 srun --cumux --gres=mps:25 "$gdir/gpu_sm_ids" 1 </dev/null >"$tmp/mps.out" 2>&1 || fail_show="$tmp/mps.out $sl/d.log" fail "the gres/mps job"
n=$(sm_count "$tmp/mps.out")
[ "$n" -ge 1 ] && [ "$n" -le $((nsm / 4 + 16)) ] || fail_show="$tmp/mps.out" fail "the job of 25 of 100 mps ran on $n of $nsm SMs"
echo "ok: a gres/mps job of 25 of 100 ran on a quarter of the SMs (Slurm's percentage, through the shim)"
echo "PASS slurm"
