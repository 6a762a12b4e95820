#!/usr/bin/env bash
# Several GPUs (issue 40): cumuxd serves each GPU from a worker of its own, its fault domain, on a socket of
# its own. Programs see the GPUs their CUDA_VISIBLE_DEVICES names (indices, UUIDs and their beginnings),
# numbered from 0; the GPU suite's programs run at once on different GPUs, each served by its GPU's worker;
# a fault on one GPU while programs compute on the others: those never notice (their results right, no
# comeback, their workers the same), and the culprit's GPU serves again. On the fake driver as 4 GPUs
# (CUMUX_FAKE_GPUS=4) in CI; on a machine of several GPUs the same script (GPUS=N: how many to use).
# usage: test_gpus.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test probe.out
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && export GT_FAULT_SYNC_MAY_PASS=1
export CUMUX_FAKE_GPUS=${CUMUX_FAKE_GPUS:-4}
n=${GPUS:-$CUMUX_FAKE_GPUS}
log="$CUMUX_LOG_DIRECTORY/cumuxd.log"
start_ours
pipe=$CUMUX_PIPE_DIRECTORY
sock() { [ "$1" = 0 ] && echo "$pipe/cumuxd.sock" || echo "$pipe/cumuxd-gpu$1.sock"; }
worker() { [ "$1" = 0 ] && cat "$pipe/cumuxd-gpu.pid" || cat "$pipe/cumuxd-gpu$1.pid"; }
declare -a wpid
for ((g = 0; g < n; g++)); do
    [ -S "$(sock $g)" ] || fail "no socket for GPU $g: $(ls "$pipe")"
    wpid[g]=$(worker $g) || fail "no worker pid file for GPU $g"
    [ -d "/proc/${wpid[g]}" ] || fail "GPU $g's worker ${wpid[g]} is not running"
done
[ "$(printf '%s\n' "${wpid[@]}" | sort -u | wc -l)" = "$n" ] || fail "the GPUs' workers are not $n processes: ${wpid[*]}"

# What the programs see: every GPU, each its own UUID and PCI bus; then what CUDA_VISIBLE_DEVICES names.
"$cli" run -- "$gdir/gpu_probe" --devices >"$tmp/probe.out" 2>&1 || fail "gpu_probe --devices"
grep -q "^probe: $n CUDA device(s)" "$tmp/probe.out" || fail "not $n devices seen"
declare -a uuid bus
for ((g = 0; g < n; g++)); do
    read -r uuid[g] bus[g] < <(sed -n "s/^device $g: \([^ ]*\) \([^ ]*\) .*/\1 \2/p" "$tmp/probe.out")
    [ -n "${uuid[g]}" ] || fail "no line for device $g"
done
[ "$(printf '%s\n' "${uuid[@]}" | sort -u | wc -l)" = "$n" ] || fail "UUIDs not distinct: ${uuid[*]}"
[ "$(printf '%s\n' "${bus[@]}" | sort -u | wc -l)" = "$n" ] || fail "PCI buses not distinct: ${bus[*]}"
sees() { # CUDA_VISIBLE_DEVICES WANT-INDICES...: the program sees those GPUs, in that order
    local spec=$1 i=0 g
    shift
    CUDA_VISIBLE_DEVICES=$spec "$cli" run -- "$gdir/gpu_probe" --devices >"$tmp/probe.out" 2>&1
    local rc=$?
    if [ $# = 0 ]; then # none: the program finds no GPU (gpu_probe skips, 77)
        [ $rc = 77 ] || fail "CUDA_VISIBLE_DEVICES=$spec: exit $rc, not 77 (no device)"
        return
    fi
    [ $rc = 0 ] || fail "CUDA_VISIBLE_DEVICES=$spec: exit $rc"
    grep -q "^probe: $# CUDA device(s)" "$tmp/probe.out" || fail "CUDA_VISIBLE_DEVICES=$spec: not $# devices"
    for g in "$@"; do
        grep -q "^device $i: ${uuid[g]} ${bus[g]} " "$tmp/probe.out" || fail "CUDA_VISIBLE_DEVICES=$spec: device $i is not GPU $g"
        i=$((i + 1))
    done
}
last=$((n - 1))
sees "$last" "$last"
sees "$last,0" "$last" 0
sees "0,$last,-1,1" 0 "$last"
sees "${uuid[last]}" "$last"
sees "${uuid[last]:0:8},0" "$last" 0
sees "$n"
sees ""
echo "ok: $n GPUs, each its worker and socket; CUDA_VISIBLE_DEVICES by index and UUID"

# The GPU suite's programs at once, each on a GPU of its own (round robin), each served by that GPU's worker.
progs=(vecadd matmul memcpy memset events graph vmm stream_memops multithread legacy_stream module_globals hostfn)
pids=() i=0
for p in "${progs[@]}"; do
    g=$((i % n))
    CUDA_VISIBLE_DEVICES=$g "$cli" run -- "$gdir/gpu_$p" >"$tmp/suite.$p.out" 2>&1 &
    pids+=($!)
    i=$((i + 1))
done
i=0
for p in "${progs[@]}"; do
    wait "${pids[i]}" || { fail_show="$tmp/suite.$p.out"; fail "gpu_$p on GPU $((i % n)) failed"; }
    grep -q "^PASS" "$tmp/suite.$p.out" || fail "gpu_$p: no PASS"
    # Served by its GPU's worker: the worker's log lines name the program's pid.
    grep -q "cumuxd\[${wpid[i % n]}\]: client [0-9]* connected: pid ${pids[i]} " "$log" ||
        fail "gpu_$p (pid ${pids[i]}) was not served by GPU $((i % n))'s worker ${wpid[i % n]}"
    i=$((i + 1))
done
echo "ok: ${#progs[@]} of the suite's programs at once on $n GPUs, each by its GPU's worker"

# Each GPU's memory limit in MPS's form: the entry of the GPU the program uses, as it numbers them.
CUDA_VISIBLE_DEVICES=$last,0 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=48M,1=96M "$cli" run -- "$gdir/gpu_mem_limit" $((48 << 20)) \
    >"$tmp/limit.out" 2>&1 || { fail_show="$tmp/limit.out"; fail "GPU $last's limit (its entry 0) not held"; }
CUDA_VISIBLE_DEVICES=1,0 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=64M,0=32M "$cli" run -- "$gdir/gpu_mem_limit" $((32 << 20)) \
    >"$tmp/limit.out" 2>&1 || { fail_show="$tmp/limit.out"; fail "device 0 (server GPU 1): its entry 0, not 1, not held"; }
echo "ok: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's entry of the program's GPU"

# A fault on GPU 1 while programs compute on the others (gpu_contain_bystander busy: rounds of a kernel,
# each result checked, until told to stop): they never notice (no round lost, no comeback).
fgpu=$((n > 1 ? 1 : 0))
others=()
for ((g = 0; g < n; g++)); do [ $g != $fgpu ] && others+=($g); done
bys=()
for g in "${others[@]}"; do
    mkfifo "$tmp/by$g.in" || fail "mkfifo"
    CUDA_VISIBLE_DEVICES=$g "$cli" run -- "$gdir/gpu_contain_bystander" busy <"$tmp/by$g.in" >"$tmp/by$g.out" 2>&1 &
    bys+=($!)
    exec {fd}>"$tmp/by$g.in"
    eval "byfd$g=$fd"
done
for g in "${others[@]}"; do
    for ((i = 0; i < 200; i++)); do grep -q '^bystander: busy' "$tmp/by$g.out" && break; sleep 0.05; done
    grep -q '^bystander: busy' "$tmp/by$g.out" || { fail_show="$tmp/by$g.out"; fail "the bystander on GPU $g did not start"; }
done
CUDA_VISIBLE_DEVICES=$fgpu "$cli" run -- "$gdir/gpu_fault" >"$tmp/fault.out" 2>&1 ||
    { fail_show="$tmp/fault.out"; fail "gpu_fault on GPU $fgpu did not get its error"; }
for ((i = 0; i < 100; i++)); do [ "$(worker $fgpu)" != "${wpid[fgpu]}" ] && break; sleep 0.1; done
[ "$(worker $fgpu)" != "${wpid[fgpu]}" ] || fail "GPU $fgpu's worker was not replaced after its fault"
i=0
for g in "${others[@]}"; do
    eval "fd=\$byfd$g"
    echo go >&"$fd"
    eval "exec $fd>&-"
    wait "${bys[i]}" || { fail_show="$tmp/by$g.out"; fail "the bystander on GPU $g failed after GPU $fgpu's fault"; }
    grep -q '^bystander: [0-9]* busy rounds, all right; 0 lost at faults' "$tmp/by$g.out" &&
        ! grep -q 'worker failed' "$tmp/by$g.out" || { fail_show="$tmp/by$g.out"; fail "the bystander on GPU $g came back: it noticed"; }
    [ "$(worker $g)" = "${wpid[g]}" ] || fail "GPU $g's worker changed at GPU $fgpu's fault"
    i=$((i + 1))
done
CUDA_VISIBLE_DEVICES=$fgpu "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/after.out" 2>&1 ||
    { fail_show="$tmp/after.out"; fail "GPU $fgpu does not serve after its fault"; }
grep -q "GPU $fgpu: worker ${wpid[fgpu]} met a fatal GPU error" "$log" || fail "the supervisor did not say GPU $fgpu's worker failed"
echo "ok: a fault on GPU $fgpu: the programs on GPUs ${others[*]} never noticed, GPU $fgpu serves again"
"$cli" stop >/dev/null || fail "cumux stop"
for ((g = 1; g < n; g++)); do [ ! -e "$(sock $g)" ] || fail "GPU $g's socket left after the stop"; done
echo "PASS gpus"
