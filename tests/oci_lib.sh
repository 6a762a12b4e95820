# Containers for the tests, started by a real OCI runtime (runc, else crun) over a rootfs made here, their
# configs carrying CDI devices' edits as a CDI-aware engine (podman, containerd, CRI-O) applies them: the
# environment, mounts and hooks of the spec files' devices named. Sourced by tests/test_containers.sh and
# tests/test_kubernetes.sh after server_procs.sh; the caller sets rt (the runtime), gdir (the test
# programs), tmp, and calls oci_rootfs SHIM PROGRAM... once. names: the containers made (oci_cleanup
# deletes them).
names=()
oci_runtime() {
    rt=""
    for r in runc crun; do command -v "$r" >/dev/null && { rt=$r; return 0; }; done
    return 1
}
oci_cleanup() {
    for n in "${names[@]}"; do "$rt" delete -f "$n" >/dev/null 2>&1; done
}
# oci_rootfs SHIM PROGRAM...: $tmp/rootfs with the programs at their paths (their kernels' file too) and
# the libraries they and the shim need, and the shim's mount points.
oci_rootfs() {
    local shim=$1 b l
    shift
    rootfs=$tmp/rootfs
    mkdir -p "$rootfs$gdir" "$rootfs/usr/local/cumux/lib" "$rootfs/usr/lib/x86_64-linux-gnu" "$rootfs/run/cumux" "$rootfs/tmp"
    cp "$@" "$gdir/gpu_kernels.fatbin" "$rootfs$gdir/" || fail "cannot copy the programs"
    for b in "$@" "$shim"; do
        for l in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*'); do
            [ -e "$rootfs$l" ] || { mkdir -p "$rootfs$(dirname "$l")" && cp -L "$l" "$rootfs$l"; }
        done
    done
    touch "$rootfs/usr/local/cumux/lib/libcuda.so.1" "$rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.1" # mount points
}
# oci_container NAME CGROUP DEVICES ANNOTATIONS PROGRAM ARGS...: its bundle, the edits of the CDI devices
# DEVICES (comma-separated vendor/class=name, found in the spec files $tmp/cdi/*.json) applied and the OCI
# annotations ANNOTATIONS (k=v,k=v: what the kubelet's CRI gives) set, started in the background with
# $tmp/NAME.in (a fifo) as its stdin and $tmp/NAME.out its output.
oci_container() {
    local name=$1 cgroup=$2 devices=$3 annotations=$4
    shift 4
    local b=$tmp/bundle-$name
    mkdir -p "$b"
    (cd "$b" && "$rt" spec) || fail "$rt spec"
    python3 - "$b/config.json" "$tmp/cdi" "$rootfs" "$cgroup" "$devices" "$annotations" "$@" <<'PY' || fail "cannot write $name's config"
import glob, json, sys
path, cdidir, rootfs, cgroup, devices, annotations, args = sys.argv[1:7] + [sys.argv[7:]]
c = json.load(open(path))
specs = [json.load(open(f)) for f in sorted(glob.glob(cdidir + "/*.json"))]
edits = []
for want in devices.split(","):
    kind, name = want.split("=")
    found = [d for s in specs if s["kind"] == kind for d in s["devices"] if d["name"] == name]
    if not found:
        sys.exit("no CDI device " + want)
    edits += [s.get("containerEdits", {}) for s in specs if s["kind"] == kind] + [found[0]["containerEdits"]]
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["terminal"] = False
c["process"]["args"] = args
env = [e for e in c["process"].get("env", []) if not e.startswith("LD_LIBRARY_PATH=")]
for e in edits:
    env += [v for v in e.get("env", []) if v not in env]
    for m in e.get("mounts", []):
        c["mounts"].append({"destination": m["containerPath"], "source": m["hostPath"], "type": "bind",
                            "options": m.get("options", ["bind"])})
    for h in e.get("hooks", []):
        hook = {"path": h["path"], "args": h.get("args", [h["path"]])}
        if h.get("env"):
            hook["env"] = h["env"]
        c.setdefault("hooks", {}).setdefault(h["hookName"], []).append(hook)
c["process"]["env"] = env
c["linux"]["cgroupsPath"] = cgroup
if annotations:
    c["annotations"] = dict(kv.split("=", 1) for kv in annotations.split(","))
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
