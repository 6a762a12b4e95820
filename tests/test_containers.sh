#!/usr/bin/env bash
# Programs in containers on cumuxd outside them (issue 41): `cumux cdi` writes the CDI spec for
# cumux.io/gpu=all; each container here is started by a real OCI runtime from Debian (runc, else crun) from
# a config whose edits are the spec's, applied as a CDI-aware engine (podman, containerd) applies them
# (mounts and environment), over a rootfs made here (the test programs and the libraries they need). The
# server is on the fake driver outside. Two containers with different group limits (`cumux set --group`
# on each container's cgroup): each program sees its container's limit, a second process run in the first
# container (runtime exec) counts against that container's; a program in a third container computes right;
# `cumux status` and /metrics name each program's container cgroup as its group. Needs root.
# usage: test_containers.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") drv=$2 gdir=$(cd "$3" && pwd)
[ "$(id -u)" = 0 ] || { echo "SKIP containers: needs root"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
. "$(dirname "${BASH_SOURCE[0]}")/oci_lib.sh"
oci_runtime || { echo "SKIP containers: no runc nor crun"; exit 0; }
own_server_test --no-standby c1.out c1b.out c2.out c3.out
base=/cumux-containers.$$
cleanup_containers() {
    oci_cleanup
    wait 2>/dev/null
    for d in $(find /sys/fs/cgroup -depth -type d -path "*$base*" 2>/dev/null); do rmdir "$d" 2>/dev/null; done
    own_server_cleanup
}
trap cleanup_containers EXIT

port=$((20000 + $$ % 20000))
start_ours CUMUX_METRICS_PORT=$port
mkdir -p "$tmp/cdi"
"$cli" cdi --output "$tmp/cdi/cumux.json" || fail "cumux cdi"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["kind"] == "cumux.io/gpu" and d["devices"][0]["name"] == "all"' "$tmp/cdi/cumux.json" ||
    fail "cumux cdi wrote no spec for cumux.io/gpu=all: $(cat "$tmp/cdi/cumux.json")"

shim=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])' "$tmp/cdi/cumux.json")
[ -f "$shim" ] || fail "the spec's shim $shim is not there"
oci_rootfs "$shim" "$gdir/gpu_group_member" "$gdir/gpu_vecadd"
# container NAME CGROUP_LEAF PROGRAM ARGS...: with the spec's edits (cumux.io/gpu=all).
container() {
    local name=$1 leaf=$2
    shift 2
    oci_container "$name" "$base/$leaf" cumux.io/gpu=all "" "$@"
}

"$cli" set --group "$base/c1" --memory 256M >/dev/null || fail "cumux set --group c1"
"$cli" set --group "$base/c2" --memory 128M >/dev/null || fail "cumux set --group c2"
container c1 c1 "$gdir/gpu_group_member" 256 64
holding c1
container c2 c2 "$gdir/gpu_group_member" 128 32
holding c2
# A second process in container c1: its limit is what c1's first leaves.
mkfifo "$tmp/c1b.in"
"$rt" exec --env CUMUX_PIPE_DIRECTORY=/run/cumux --env LD_LIBRARY_PATH=/usr/local/cumux/lib c1 \
    "$gdir/gpu_group_member" 192 64 <"$tmp/c1b.in" >"$tmp/c1b.out" 2>&1 &
c1b=$!
exec {fd_c1b}>"$tmp/c1b.in"
holding c1b
"$cli" status >"$tmp/status.out"
[ "$(grep -cE "  $base/c1\$" "$tmp/status.out")" = 3 ] || # its two programs and the group's line
    fail_show="$tmp/status.out" fail "container c1's programs are not its group's in the status"
awk -v g="$base/c1" '$NF == g && $2 == "256.0" && $3 == 2 {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail_show="$tmp/status.out" fail "group c1: not 256 MiB with two programs"
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' "$port" >"$tmp/metrics.out" ||
    fail "no /metrics"
[ "$(grep -c "^cumux_client_device_memory_bytes{.*group=\"$base/c1\"" "$tmp/metrics.out")" = 2 ] ||
    fail_show="$tmp/metrics.out" fail "/metrics: not two clients labelled with container c1's group"
grep -q "^cumux_group_device_memory_bytes{group=\"$base/c2\",gpu=\"0\"} $((32 << 20))$" "$tmp/metrics.out" ||
    fail_show="$tmp/metrics.out" fail "/metrics: container c2's group does not hold its 32 MiB"
# A third container, no group settings: a program that computes right.
container c3 c3 "$gdir/gpu_vecadd"
let_go c3
# The exec'd process first: when a container's first process ends, the kernel ends the rest.
let_go c1b
wait "$c1b" || fail_show="$tmp/c1b.out" fail "the second process of container c1"
for o in c1 c2; do let_go "$o"; done
for ((i = 0; i < 300; i++)); do
    done_n=0
    for o in c1 c2 c3; do grep -q '^PASS' "$tmp/$o.out" && done_n=$((done_n + 1)); done
    [ "$done_n" = 3 ] && break
    sleep 0.05
done
for o in c1 c1b c2 c3; do grep -q '^PASS' "$tmp/$o.out" || fail_show="$tmp/$o.out" fail "$o did not pass"; done
echo "PASS containers ($rt): two containers each saw its group's limit, a second process counted against its container's, a third computed right"
