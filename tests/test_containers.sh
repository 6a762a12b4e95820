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
rt=""
for r in runc crun; do command -v "$r" >/dev/null && { rt=$r; break; }; done
[ -n "$rt" ] || { echo "SKIP containers: no runc nor crun"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby c1.out c1b.out c2.out c3.out
base=/cumux-containers.$$
names=()
cleanup_containers() {
    for n in "${names[@]}"; do "$rt" delete -f "$n" >/dev/null 2>&1; done
    wait 2>/dev/null
    for d in $(find /sys/fs/cgroup -depth -type d -path "*$base*" 2>/dev/null); do rmdir "$d" 2>/dev/null; done
    own_server_cleanup
}
trap cleanup_containers EXIT

port=$((20000 + $$ % 20000))
start_ours CUMUX_METRICS_PORT=$port
"$cli" cdi --output "$tmp/cdi.json" || fail "cumux cdi"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["kind"] == "cumux.io/gpu" and d["devices"][0]["name"] == "all"' "$tmp/cdi.json" ||
    fail "cumux cdi wrote no spec for cumux.io/gpu=all: $(cat "$tmp/cdi.json")"

shim=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["devices"][0]["containerEdits"]["mounts"][0]["hostPath"])' "$tmp/cdi.json")
[ -f "$shim" ] || fail "the spec's shim $shim is not there"
# The rootfs: the programs at their paths (their kernels' file too), the libraries they and the shim need.
rootfs=$tmp/rootfs
mkdir -p "$rootfs$gdir" "$rootfs/usr/local/cumux/lib" "$rootfs/usr/lib/x86_64-linux-gnu" "$rootfs/run/cumux" "$rootfs/tmp"
cp "$gdir/gpu_group_member" "$gdir/gpu_vecadd" "$gdir/gpu_kernels.fatbin" "$rootfs$gdir/" || fail "cannot copy the programs"
for b in "$gdir/gpu_group_member" "$gdir/gpu_vecadd" "$shim"; do
    for l in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*'); do
        [ -e "$rootfs$l" ] || { mkdir -p "$rootfs$(dirname "$l")" && cp -L "$l" "$rootfs$l"; }
    done
done
touch "$rootfs/usr/local/cumux/lib/libcuda.so.1" "$rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.1" # mount points

# container NAME CGROUP_LEAF PROGRAM ARGS...: its bundle (the spec's edits applied), started in the
# background with $tmp/NAME.in (a fifo) as its stdin and $tmp/NAME.out its output.
container() {
    local name=$1 leaf=$2
    shift 2
    local b=$tmp/bundle-$name
    mkdir -p "$b"
    (cd "$b" && "$rt" spec) || fail "$rt spec"
    python3 - "$b/config.json" "$tmp/cdi.json" "$rootfs" "$base/$leaf" "$@" <<'PY' || fail "cannot write $name's config"
import json, sys
path, cdi, rootfs, cgroup, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
c = json.load(open(path))
edits = json.load(open(cdi))["devices"][0]["containerEdits"]
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["terminal"] = False
c["process"]["args"] = args
c["process"]["env"] = [e for e in c["process"].get("env", []) if not e.startswith("LD_LIBRARY_PATH=")] + edits.get("env", [])
c["linux"]["cgroupsPath"] = cgroup
for m in edits.get("mounts", []):
    c["mounts"].append({"destination": m["containerPath"], "source": m["hostPath"], "type": "bind",
                        "options": m.get("options", ["bind"])})
json.dump(c, open(path, "w"), indent=1)
PY
    mkfifo "$tmp/$name.in"
    "$rt" run --bundle "$b" "$name" <"$tmp/$name.in" >"$tmp/$name.out" 2>&1 &
    names+=("$name")
    eval "exec {fd_$name}>\"\$tmp/\$name.in\""
}
holding() {
    for ((i = 0; i < 300; i++)); do grep -q '^HOLDING' "$tmp/$1.out" && return; grep -q '^FAIL' "$tmp/$1.out" && break; sleep 0.05; done
    fail_show="$tmp/$1.out" fail "$1 did not get to hold its memory"
}
let_go() { local v="fd_$1"; echo >&"${!v}"; eval "exec {$v}>&-"; }

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
