#!/usr/bin/env bash
# Several GPUs (issue 40): cumuxd serves each GPU from a worker of its own, its fault domain, on a socket of
# its own. Programs see the GPUs their CUDA_VISIBLE_DEVICES names (indices, UUIDs and their beginnings),
# numbered from 0; the GPU suite's programs run at once on different GPUs, each served by its GPU's worker;
# a fault on one GPU while programs compute on the others: those never notice (their results right, no
# comeback, their workers the same), and the culprit's GPU serves again. cumux status, control, top and
# /metrics tell every GPU (each GPU's worker asked); per-GPU default memory limits (MPS's
# set_default_device_pinned_mem_limit DEV); `cumux set PID` reaches a program on any GPU; IPC memory
# between programs on different GPUs. On the fake driver as 4 GPUs
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
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
    fail "no free port"
scrape() { # the body of /metrics (bash's own socket: a python would start slowly beside busy programs)
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&"$fd"
    timeout 10 cat <&"$fd" | tr -d '\r' | sed '1,/^$/d'
    exec {fd}>&-
}
start_ours CUMUX_METRICS_PORT=$port
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

# The default limit of one GPU (MPS's control command, the device as the server numbers it): programs on
# that GPU get it, those on the others not.
"$cli" control set_default_device_pinned_mem_limit "$last" 48M || fail "set_default_device_pinned_mem_limit $last 48M"
[ "$("$cli" control get_default_device_pinned_mem_limit "$last")" = 48M ] || fail "GPU $last's default limit is not 48M"
[ "$("$cli" control get_default_device_pinned_mem_limit 0)" = none ] || fail "GPU 0 got GPU $last's default limit"
"$cli" control set_default_device_pinned_mem_limit "$n" 48M 2>/dev/null && fail "a default limit for GPU $n, which is none"
CUDA_VISIBLE_DEVICES=$last "$cli" run -- "$gdir/gpu_mem_limit" $((48 << 20)) >"$tmp/limit.out" 2>&1 ||
    { fail_show="$tmp/limit.out"; fail "GPU $last's default limit not held"; }
CUDA_VISIBLE_DEVICES=0 "$cli" run -- "$gdir/gpu_mem_limit" $((48 << 20)) >"$tmp/limit.out" 2>&1 &&
    fail "a program on GPU 0 was held to GPU $last's default limit"
grep -q "want the limit" "$tmp/limit.out" || { fail_show="$tmp/limit.out"; fail "GPU 0's program failed otherwise"; }
"$cli" control set_default_device_pinned_mem_limit "$last" none || fail "set_default_device_pinned_mem_limit $last none"
echo "ok: a default memory limit for GPU $last alone"

# SMs per GPU in MPS's per-device form: the entry of the program's GPU (as it numbers them) is its
# reservation there, on that GPU's part of the status.
mkfifo "$tmp/sm.in" || fail "mkfifo"
CUDA_VISIBLE_DEVICES=$last,0 CUMUX_SMS=1=64,0=16 "$cli" run -- "$gdir/gpu_sm_ids" 2 <"$tmp/sm.in" >"$tmp/sm.out" 2>&1 &
smpid=$!
exec {smfd}>"$tmp/sm.in"
for ((i = 0; i < 100; i++)); do grep -q "^sms: " "$tmp/sm.out" && break; sleep 0.1; done
"$cli" status >"$tmp/status.out"
st=$(awk -v g="$last" -v p="$smpid" '/^GPU [0-9]+: / { in_g = ($2 == g ":") } in_g && $2 == p { print $11 }' "$tmp/status.out")
[[ "$st" == *r ]] && [ "${st%r}" -ge 16 ] && [ "${st%r}" -lt 64 ] ||
    { fail_show="$tmp/status.out $tmp/sm.out"; fail "GPU $last's program (CUMUX_SMS=1=64,0=16) holds '$st' SMs there, not its entry 0's 16"; }
echo >&"$smfd"
exec {smfd}>&-
wait "$smpid" || { fail_show="$tmp/sm.out"; fail "gpu_sm_ids on GPU $last"; }
echo "ok: CUMUX_SMS's entry of the program's GPU"

# IPC across GPUs: memory a program on GPU 0 exports, a program on GPU $last opens (its worker maps GPU 0's
# chunk through a lease from GPU 0's worker), reads, writes; the owner sees the writes. Afterwards GPU 0's
# memory is back where it was (the lease's end let it go). Only a worker may take a lease.
used0() { "$cli" status | sed -n 's/^GPU 0: .* memory \([0-9]*\) MiB used.*/\1/p'; }
before=$(used0)
GT_IPC_OWNER_DEVICES=0 GT_IPC_OPENER_DEVICES=$last "$cli" run -- "$gdir/gpu_ipc" >"$tmp/ipc.out" 2>&1 ||
    { fail_show="$tmp/ipc.out"; fail "IPC from GPU 0 to GPU $last"; }
grep -q "^PASS ipc (opener)" "$tmp/ipc.out" || { fail_show="$tmp/ipc.out"; fail "IPC: the opener did not pass"; }
for ((i = 0; i < 50; i++)); do [ "$(used0)" = "$before" ] && break; sleep 0.1; done
[ "$(used0)" = "$before" ] || fail "GPU 0's memory in use: $before MiB before the IPC, $(used0) MiB after"
version=$(sed -n 's/^#define CUMUX_PROTO_VERSION \([0-9]*\)u.*/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../common/proto.h")
st=$(python3 - "$pipe/cumuxd.sock" "$version" <<'PY'
import socket, struct, sys
out = []
for kind in (12, 13):  # IPC_LEASE, VMM_FETCH
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(struct.pack("<IIIIQQ", 0x584d5543, int(sys.argv[2]), kind, 0, 0, 1234))
    w = b""
    while len(w) < 12:
        b = s.recv(12 - len(w))
        if not b:
            break
        w += b
    out.append(str(struct.unpack("<IIi", w)[2]) if len(w) == 12 else "closed")
print(" ".join(out))
PY
)
[ "$st" = "800 800" ] || fail "a lease and a VMM fetch asked by a program, not a worker: answered $st, not CUDA_ERROR_NOT_PERMITTED (800) twice"
# One program on several GPUs: a channel to each GPU's worker, work on all at once, copies between them,
# a wait on another GPU's event, a host function on the second's stream; then on all four.
"$cli" run -- "$gdir/gpu_multi_gpu" >"$tmp/multi.out" 2>&1 && grep -q "^PASS" "$tmp/multi.out" ||
    { fail_show="$tmp/multi.out"; fail "gpu_multi_gpu on GPUs 0 and 1"; }
GT_MULTI_GPUS=4 CUDA_VISIBLE_DEVICES=$last,2,1,0 "$cli" run -- "$gdir/gpu_multi_gpu" >"$tmp/multi.out" 2>&1 &&
    grep -q "^PASS" "$tmp/multi.out" || { fail_show="$tmp/multi.out"; fail "gpu_multi_gpu on GPUs $last,2,1,0"; }
echo "ok: one program on 2 and on 4 GPUs (a channel to each GPU's worker)"
# The owner frees and exits while the opener on GPU $last holds its memory open: it stays, the opener reads
# and writes it, then exits holding it; then GPU 0's memory is back where it was.
GT_IPC_OWNER_DEVICES=0 GT_IPC_OPENER_DEVICES=$last "$cli" run -- "$gdir/gpu_ipc" hold >"$tmp/ipc.out" 2>&1 ||
    { fail_show="$tmp/ipc.out"; fail "IPC from GPU 0 to GPU $last, held past the owner"; }
for ((i = 0; i < 50; i++)); do [ "$(used0)" = "$before" ] && break; sleep 0.1; done
[ "$(used0)" = "$before" ] || fail "GPU 0's memory in use: $before MiB before, $(used0) MiB after the opener held it past its owner"
GT_VMM_OWNER_DEVICES=0 GT_VMM_IMPORTER_DEVICES=$last "$cli" run -- "$gdir/gpu_vmm_share" >"$tmp/vmm.out" 2>&1 ||
    { fail_show="$tmp/vmm.out"; fail "a VMM allocation of GPU 0 imported on GPU $last"; }
grep -q "^PASS vmm_share (importer)" "$tmp/vmm.out" || { fail_show="$tmp/vmm.out"; fail "VMM: the importer did not pass"; }
for ((i = 0; i < 50; i++)); do [ "$(used0)" = "$before" ] && break; sleep 0.1; done
[ "$(used0)" = "$before" ] || fail "GPU 0's memory in use: $before MiB before the VMM share, $(used0) MiB after"
echo "ok: IPC and VMM memory from GPU 0 to GPU $last, freed after; leases for workers only"

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
# Every GPU told: cumux status a part per GPU, each with its program; control ps and top name each
# program's GPU; /metrics labels each client with its GPU; `cumux set PID` reaches the program on GPU $last.
"$cli" status >"$tmp/status.out" 2>&1 || fail "cumux status"
for g in "${others[@]}"; do
    i=$(printf '%s\n' "${others[@]}" | grep -nx "$g" | cut -d: -f1)
    bpid=${bys[i - 1]}
    awk -v g="$g" -v p="$bpid" '/^GPU [0-9]+: / { in_g = ($2 == g ":") } in_g && $2 == p { found = 1 } END { exit !found }' \
        "$tmp/status.out" || { fail_show="$tmp/status.out"; fail "cumux status does not list pid $bpid under GPU $g"; }
    "$cli" control ps | awk -v p="$bpid" -v g="$g" '$1 == p && $4 == g { f = 1 } END { exit !f }' ||
        fail "control ps does not put pid $bpid on device $g: $("$cli" control ps)"
    m=$(scrape)
    echo "$m" | grep -q "^cumux_client_streams{pid=\"$bpid\",.*,gpu=\"$g\",client=" ||
        fail "/metrics has no client pid $bpid on GPU $g: $(echo "$m" | grep cumux_client_streams)"
    echo "$m" | grep -q "^cumux_gpu_clients{gpu=\"$g\",name=\".*\"} 1$" || fail "/metrics: GPU $g's clients: $(echo "$m" | grep gpu_clients)"
done
[ "$(grep -c '^GPU [0-9]*: ' "$tmp/status.out")" = "$n" ] || { fail_show="$tmp/status.out"; fail "cumux status has not $n GPUs"; }
"$cli" top --once --json --interval 0.2 >"$tmp/top.json" || fail "cumux top"
python3 - "$tmp/top.json" "$n" "${others[*]}" "${bys[*]}" <<'PY' || { fail_show="$tmp/top.json"; fail "cumux top does not show every GPU and its program"; }
import json, sys
t = json.load(open(sys.argv[1]))
assert sorted(g["index"] for g in t["gpus"]) == list(range(int(sys.argv[2]))), t["gpus"]
on = {c["pid"]: c["gpu"] for c in t["clients"]}
for g, p in zip(sys.argv[3].split(), sys.argv[4].split()):
    assert on.get(int(p)) == int(g), (p, g, on)
PY
lastby=${bys[${#bys[@]} - 1]}
"$cli" set "$lastby" --priority high >"$tmp/set.out" 2>&1 || { fail_show="$tmp/set.out"; fail "cumux set $lastby (on GPU $last) --priority high"; }
"$cli" control ps >/dev/null
m=$(scrape)
echo "$m" | grep -q "^cumux_client_priority_class{pid=\"$lastby\",.*,gpu=\"$last\",client=\"[0-9]*\",group=\"[^\"]*\"} 3$" ||
    fail "the program on GPU $last did not become high: $(echo "$m" | grep priority_class)"
echo "ok: status, control ps, top and /metrics tell every GPU; cumux set reaches GPU $last"
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
# Told by every worker: the fault is GPU $fgpu's, on GPU 0's part of the status, and in /metrics.
"$cli" status >"$tmp/status.out" 2>&1
grep -q "^fault 1: .* GPU $fgpu " "$tmp/status.out" || { fail_show="$tmp/status.out"; fail "cumux status does not tell GPU $fgpu's fault"; }
awk -v g="$fgpu" '/^GPU [0-9]+: / { in_g = ($2 == g ":") } in_g && /fatal GPU faults: 1; workers restarted: 1/ { f = 1 } END { exit !f }' "$tmp/status.out" ||
    { fail_show="$tmp/status.out"; fail "GPU $fgpu's part does not count its fault"; }
m=$(scrape)
echo "$m" | grep -q "^cumux_gpu_fatal_faults_total{gpu=\"$fgpu\",.*} 1$" && echo "$m" | grep -q "^cumux_fatal_gpu_faults_total 1$" &&
    echo "$m" | grep -q "^cumux_gpu_fatal_faults_total{gpu=\"0\",.*} 0$" || fail "/metrics does not count GPU $fgpu's fault alone: $m"
echo "ok: a fault on GPU $fgpu: the programs on GPUs ${others[*]} never noticed, GPU $fgpu serves again"
"$cli" stop >/dev/null || fail "cumux stop"
for ((g = 1; g < n; g++)); do [ ! -e "$(sock $g)" ] || fail "GPU $g's socket left after the stop"; done
echo "PASS gpus"
