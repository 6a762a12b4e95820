#!/usr/bin/env bash
# The Kubernetes device plugin (issue 43; kubernetes/plugin) against cumuxd on the fake driver, driven by
# a test kubelet written from the device plugin API (kubernetes/testkubelet: registration, ListAndWatch,
# GetPreferredAllocation, Allocate), the containers it allocates started by a real OCI runtime (runc) with
# the CDI devices of the answers applied as a CDI-aware runtime applies them (environment, mounts, the
# allocation's hook) and the annotations a kubelet's CRI gives: two "pods" asking 2 and 1 units of
# cumux.io/gpu-memory (128 MiB units here) each see their own limit, one with cumux.io/gpu-sms too; their
# groups carry the pods' names in /metrics; a GPU fault makes the GPU's units Unhealthy and they come
# back; a change of the settings file applies live (the units re-advertised, cumuxd's settings reloaded,
# the server and the running pod untouched). No real cluster runs here (docs/kubernetes.md). Needs root,
# runc and the plugin built (golang-go, golang-google-grpc-dev, golang-goprotobuf-dev, protobuf-compiler).
# usage: test_kubernetes.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR PLUGIN TESTKUBELET
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") drv=$2 gdir=$(cd "$3" && pwd) plugin=$4 kubelet=$5
[ "$(id -u)" = 0 ] || { echo "SKIP kubernetes: needs root"; exit 0; }
[ -x "$plugin" ] && [ -x "$kubelet" ] || { echo "SKIP kubernetes: the device plugin was not built (apt install golang-go golang-google-grpc-dev golang-goprotobuf-dev protobuf-compiler)"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
. "$(dirname "${BASH_SOURCE[0]}")/oci_lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/k8s_lib.sh"
oci_runtime || { echo "SKIP kubernetes: no runc nor crun"; exit 0; }
own_server_test --no-standby a.out b.out plugin.log kubelet.out
base=/cumux-k8s.$$
pids=()
cleanup_k8s() {
    oci_cleanup
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    for d in $(find /sys/fs/cgroup -depth -type d -path "*$base*" 2>/dev/null); do rmdir "$d" 2>/dev/null; done
    own_server_cleanup
}
trap cleanup_k8s EXIT
export CUMUX_STANDBY=1 # a fault's GPU comes back at once
mkdir -p "$tmp/kubelet" "$tmp/cdi"
conf=$tmp/cumuxd.conf
printf 'CUMUX_K8S_MEMORY_UNIT=128Mi\nCUMUX_K8S_SHARES=4\nCUMUX_USERS=all\n' >"$conf"
port=$((20000 + $$ % 20000))
start_ours CUMUX_METRICS_PORT=$port CUMUX_CONFIG=$conf
spid=$("$cli" status | sed -n 's/^cumuxd pid \([0-9]*\),.*/\1/p')
"$cli" cdi --output "$tmp/cdi/cumux.json" || fail "cumux cdi"
shim=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])' "$tmp/cdi/cumux.json")
oci_rootfs "$shim" "$gdir/gpu_group_member"

k8s_up "$plugin" "$kubelet" "$conf" --poll 200ms
ask() { echo "$*" >&"$kin"; }
# expect PATTERN [N]: waits (20 s) until the kubelet's output has N (default 1) lines matching PATTERN.
expect() {
    local n=${2:-1}
    for ((i = 0; i < 400; i++)); do
        [ "$(grep -cE "$1" "$tmp/kubelet.out")" -ge "$n" ] && return 0
        grep -q '^error' "$tmp/kubelet.out" && break
        sleep 0.05
    done
    fail_show="$tmp/kubelet.out $tmp/plugin.log" fail "the test kubelet did not see: $1"
}
for r in gpu gpu-memory gpu-sms; do
    ask wait cumux.io/$r
    expect "^registered cumux.io/$r cumux-$r.sock$"
done
ask options cumux.io/gpu-memory
expect '^options cumux.io/gpu-memory .*"get_preferred_allocation_available":true'
ask watch cumux.io/gpu-memory
ask watch cumux.io/gpu
ask watch cumux.io/gpu-sms
expect '^devices cumux.io/gpu-memory healthy=8 unhealthy=0$' # 1024 MiB / 128 MiB
expect '^devices cumux.io/gpu healthy=4 unhealthy=0$'
nsm=$("$cli" status | grep -o '[0-9]* SMs' | head -1 | cut -d' ' -f1)
expect "^devices cumux.io/gpu-sms healthy=$nsm unhealthy=0$"
echo "ok: the plugin registered its three resources; 8 memory units, 4 shares, $nsm SMs advertised"

# Pod a: 2 memory units (256 MiB) and 16 SMs; pod b: 1 unit (128 MiB).
ask allocate cumux.io/gpu-memory 2
expect '^allocated cumux.io/gpu-memory '
ask allocate cumux.io/gpu-sms 16
expect '^allocated cumux.io/gpu-sms '
ask allocate cumux.io/gpu-memory 1
expect '^allocated cumux.io/gpu-memory ' 2
# The CDI devices of each answer (the kubelet hands them to the runtime as CRI CDIDevices).
cdi_of() { grep "^allocated $1 " "$tmp/kubelet.out" | sed -n "${2}p" | sed 's/^allocated [^ ]* //' |
    python3 -c 'import json, sys; print(",".join(d["name"] for d in json.load(sys.stdin)["cdi_devices"]))'; }
dev_a=$(cdi_of cumux.io/gpu-memory 1),$(cdi_of cumux.io/gpu-sms 1 | sed 's/cumux.io\/gpu=all,//')
dev_b=$(cdi_of cumux.io/gpu-memory 2)
[[ "$dev_a" == cumux.io/gpu=all,cumux.io/alloc=mem-*,cumux.io/alloc=sm-* ]] || fail "pod a's CDI devices: $dev_a"
[[ "$dev_b" == cumux.io/gpu=all,cumux.io/alloc=mem-* ]] || fail "pod b's CDI devices: $dev_b"
cri() { echo "io.kubernetes.cri.sandbox-namespace=$1,io.kubernetes.cri.sandbox-name=$2,io.kubernetes.cri.container-name=$3"; }
oci_container a "$base/pod-a/main" "$dev_a" "$(cri team-a trainer main)" "$gdir/gpu_group_member" 256 64
holding a
oci_container b "$base/pod-b/main" "$dev_b" "$(cri team-b infer main)" "$gdir/gpu_group_member" 128 32
holding b
"$cli" status >"$tmp/status.out"
awk -v g="$base/pod-a/main" '$NF == g && $2 == "256.0" && $3 == 1 && $6 == "16r" {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail_show="$tmp/status.out" fail "pod a's group: not 256 MiB, one program, 16 SMs"
awk -v g="$base/pod-b/main" '$NF == g && $2 == "128.0" && $3 == 1 {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail_show="$tmp/status.out" fail "pod b's group: not 128 MiB and one program"
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' "$port" >"$tmp/metrics.out" ||
    fail "no /metrics"
grep -q "^cumux_client_device_memory_bytes{.*group=\"$base/pod-a/main\",namespace=\"team-a\",pod=\"trainer\",container=\"main\"} $((64 << 20))$" "$tmp/metrics.out" ||
    fail_show="$tmp/metrics.out" fail "/metrics: pod a's program is not labelled with its namespace, pod and container"
grep -q "^cumux_group_device_memory_limit_bytes{group=\"$base/pod-b/main\",gpu=\"0\",namespace=\"team-b\",pod=\"infer\",container=\"main\"} $((128 << 20))$" "$tmp/metrics.out" ||
    fail_show="$tmp/metrics.out" fail "/metrics: pod b's group limit is not labelled with its names"
echo "ok: two pods with 256 and 128 MiB each saw its own (one with 16 SMs); /metrics by namespace, pod, container"

# A live change of the settings (the ConfigMap): 256 MiB units and a default priority for cumuxd.
printf 'CUMUX_K8S_MEMORY_UNIT=256Mi\nCUMUX_K8S_SHARES=2\nCUMUX_USERS=all\nCUMUX_DEFAULT_PRIORITY=low\n' >"$conf.new"
touch -d '+2 seconds' "$conf.new" && mv "$conf.new" "$conf"
expect '^devices cumux.io/gpu-memory healthy=4 unhealthy=0$'
expect '^devices cumux.io/gpu healthy=2 unhealthy=0$'
for ((i = 0; i < 100; i++)); do grep -q "cumux reload:" "$tmp/plugin.log" && break; sleep 0.05; done
grep -q "cumux reload: .*priority low" "$tmp/plugin.log" || fail_show="$tmp/plugin.log" fail "the plugin did not reload cumuxd's settings"
[ "$("$cli" status | sed -n 's/^cumuxd pid \([0-9]*\),.*/\1/p')" = "$spid" ] || fail "cumuxd was restarted"
let_go a
let_go b
for ((i = 0; i < 300; i++)); do grep -q '^PASS' "$tmp/a.out" && grep -q '^PASS' "$tmp/b.out" && break; sleep 0.05; done
for o in a b; do grep -q '^PASS' "$tmp/$o.out" || fail_show="$tmp/$o.out" fail "pod $o did not pass after the change"; done
echo "ok: a settings change applied live (4 units of 256 MiB, 2 shares, cumuxd reloaded, same server), the pods ran on"
# The kubelet restarts (it removes every socket of its directory): the plugin serves and registers again.
ask restart now
expect '^restarted$'
for r in gpu gpu-memory; do
    ask wait cumux.io/$r
    expect "^registered cumux.io/$r cumux-$r.sock$" 2
done
ask watch cumux.io/gpu-memory
expect '^devices cumux.io/gpu-memory healthy=4 unhealthy=0$' 2
echo "ok: after the kubelet's restart the plugin made its sockets again and registered anew"
# A GPU fault: the GPU's units are reported Unhealthy, then Healthy again once its worker serves.
"$cli" run -- "$gdir/gpu_fault" >"$tmp/fault.out" 2>&1 </dev/null
expect '^devices cumux.io/gpu-memory healthy=0 unhealthy=4$'
expect '^devices cumux.io/gpu-memory healthy=4 unhealthy=0$' 3
echo "ok: a GPU fault was reported (Unhealthy) and the GPU came back (Healthy)"

# Two GPUs (the server started again on a fake driver of two): a container's units come from one GPU, the
# one with most left, and its CDI device shows it that GPU alone.
n_of() { grep -cE "$1" "$tmp/kubelet.out"; }
n_down=$(n_of '^devices cumux.io/gpu-memory healthy=0 unhealthy=4$')
"$cli" stop >/dev/null || fail "cumux stop"
expect '^devices cumux.io/gpu-memory healthy=0 unhealthy=4$' $((n_down + 1))
n_up=$(n_of '^devices cumux.io/gpu-memory healthy=8 unhealthy=0$')
start_ours CUMUX_METRICS_PORT=$port CUMUX_CONFIG=$conf CUMUX_FAKE_GPUS=2
expect '^devices cumux.io/gpu-memory healthy=8 unhealthy=0$' $((n_up + 1))
ask free cumux.io/gpu-memory # the pods above are gone
expect '^freed cumux.io/gpu-memory$'
for k in 1 2; do
    n=$(n_of '^allocated cumux.io/gpu-memory ')
    ask allocate cumux.io/gpu-memory 3
    expect '^allocated cumux.io/gpu-memory ' $((n + 1))
done
grep -E 'cumux.io/gpu-memory: allocated \[' "$tmp/plugin.log" | tail -2 >"$tmp/two.out"
grep -q 'allocated \[gpu0-mem-[0-9] gpu0-mem-[0-9] gpu0-mem-[0-9]\]' "$tmp/two.out" && grep -q 'allocated \[gpu1-mem-[0-9] gpu1-mem-[0-9] gpu1-mem-[0-9]\]' "$tmp/two.out" ||
    fail_show="$tmp/two.out $tmp/plugin.log" fail "the two 3-unit allocations are not each of one GPU, GPU 0 then GPU 1"
for g in 0 1; do
    id=$(sed -n "$((g + 1))p" "$tmp/two.out" | grep -o 'cumux.io/alloc=mem-[0-9a-f]*' | cut -d= -f2)
    grep -q "\"CUDA_VISIBLE_DEVICES=$g\"" "$tmp/cdi/cumux-alloc-$id.json" || fail "allocation $id on GPU $g: its CDI device does not show that GPU"
done
echo "ok: on two GPUs, each allocation's units came from one GPU (the one with most left), its CDI device showing it"

echo "PASS kubernetes"
