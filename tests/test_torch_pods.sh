#!/usr/bin/env bash
# Two PyTorch "pods" through the Kubernetes device plugin (issue 43's GPU acceptance): cumuxd on the GPU,
# the plugin (1 GiB units) and the test kubelet; the kubelet allocates 4 and 8 units of
# cumux.io/gpu-memory, and each answer is applied by hand as a CDI-aware runtime would: the allocation's
# createRuntime hook (`cumux hook`, the container's state on stdin) for a process in a cgroup of the
# pod's own, then PyTorch in that cgroup with the CDI devices' environment and mounts (the shim bound at
# /usr/local/cumux/lib/libcuda.so.1, and over the machine's libcuda.so.1 where it has one there, and the pipe
# directory at /run/cumux, in a mount namespace of its own; mount points are made only under
# /usr/local/cumux and /run/cumux, and removed after).
# Each must see its size (torch.cuda.mem_get_info), fail with torch.OutOfMemoryError past it, and compute
# right. Needs root, a GPU, PyTorch, unshare, and the plugin's binaries; else one SKIP line.
# usage: test_torch_pods.sh CUMUX_CLI PLUGIN TESTKUBELET
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") plugin=$2 kubelet=$3
[ "$(id -u)" = 0 ] || { echo "SKIP torch_pods: needs root"; exit 0; }
python3 -c 'import torch' 2>/dev/null || { echo "SKIP torch_pods: no PyTorch"; exit 0; }
nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP torch_pods: no GPU"; exit 0; }
[ -x "$plugin" ] && [ -x "$kubelet" ] || { echo "SKIP torch_pods: no device plugin built ($plugin)"; exit 0; }
command -v unshare >/dev/null || { echo "SKIP torch_pods: no unshare"; exit 0; }
cgm=$(findmnt -n -t cgroup2 -o TARGET 2>/dev/null | head -1)
base=/cumux-torch-pods.$$
[ -n "$cgm" ] && mkdir -p "$cgm$base/a" "$cgm$base/b" 2>/dev/null || { echo "SKIP torch_pods: no cgroup v2 hierarchy to make cgroups in"; exit 0; }
tmp=$(mktemp -d)
export CUMUX_PIPE_DIRECTORY=$tmp/pipe CUMUX_LOG_DIRECTORY=$tmp/log
pids=()
made_cumux_dir=0
[ -e /usr/local/cumux ] || made_cumux_dir=1
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    [ $made_cumux_dir = 1 ] && rm -rf /usr/local/cumux
    "$cli" stop >/dev/null 2>&1
    wait 2>/dev/null
    rmdir "$cgm$base/a" "$cgm$base/b" "$cgm$base" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL torch_pods: $*"; for f in "$tmp"/*.out "$tmp"/*.log; do echo "---- $f"; tail -20 "$f"; done; tail -20 "$tmp/log/cumuxd.log"; exit 1; }
mkdir -p "$tmp/kubelet" "$tmp/cdi" "$CUMUX_PIPE_DIRECTORY" && chmod 700 "$CUMUX_PIPE_DIRECTORY"
printf 'CUMUX_K8S_MEMORY_UNIT=1Gi\n' >"$tmp/cumuxd.conf"
CUMUX_CONFIG=$tmp/cumuxd.conf "$cli" start >/dev/null || fail "cumux start"
"$cli" cdi --output "$tmp/cdi/cumux.json" || fail "cumux cdi"
. "$(dirname "${BASH_SOURCE[0]}")/k8s_lib.sh"
k8s_up "$plugin" "$kubelet" "$tmp/cumuxd.conf"
printf 'wait cumux.io/gpu-memory\nwatch cumux.io/gpu-memory\nallocate cumux.io/gpu-memory 4\nallocate cumux.io/gpu-memory 8\n' >&"$kin"
for ((i = 0; i < 300; i++)); do [ "$(grep -c '^allocated' "$tmp/kubelet.out")" = 2 ] && break; grep -q '^error' "$tmp/kubelet.out" && break; sleep 0.1; done
[ "$(grep -c '^allocated' "$tmp/kubelet.out")" = 2 ] || fail "the kubelet got no two allocations"
grep -m1 '^devices' "$tmp/kubelet.out"
cat >"$tmp/pod.py" <<'PY'
import sys, torch
want = int(sys.argv[1]) << 30
free, total = torch.cuda.mem_get_info()
assert total == want, ("sees", total, "want", want)
x = torch.full((want // 8 // 4,), 2.0, device="cuda")  # an eighth of its size
assert float(x.sum()) == 2.0 * x.numel()
try:
    y = torch.empty(want, dtype=torch.uint8, device="cuda")  # its whole size again: past it
    sys.exit("FAIL pod: %d more bytes were allocated past its %d" % (want, want))
except torch.OutOfMemoryError:
    pass
print("PASS pod: sees %.2f GiB, out of memory past it" % (total / 2**30), flush=True)
PY
# pod NAME K SIZE_GIB: the K-th answer applied by hand, PyTorch in the pod's cgroup.
pod() {
    local name=$1 k=$2 gib=$3
    python3 - "$tmp/kubelet.out" "$k" "$tmp/cdi" >"$tmp/$name.edits" <<'PY' || fail "the answer of pod $name"
import glob, json, shlex, sys
line = [l for l in open(sys.argv[1]) if l.startswith("allocated ")][int(sys.argv[2]) - 1]
ans = json.loads(line.split(" ", 2)[2])
specs = [json.load(open(f)) for f in glob.glob(sys.argv[3] + "/*.json")]
env, mounts, hooks = [], [], []
for d in ans["cdi_devices"]:
    kind, name = d["name"].split("=")
    dev = [x for s in specs if s["kind"] == kind for x in s["devices"] if x["name"] == name][0]["containerEdits"]
    env += dev.get("env", [])
    mounts += [(m["hostPath"], m["containerPath"]) for m in dev.get("mounts", [])]
    hooks += [h for h in dev.get("hooks", []) if h["hookName"] == "createRuntime"]
print("ENV=%s" % shlex.quote(" ".join(env)))
print("MOUNTS=%s" % shlex.quote(" ".join("%s:%s" % m for m in mounts)))
print("HOOK=%s" % shlex.quote(" ".join([hooks[0]["path"]] + hooks[0]["args"][1:])))
print("HOOK_ENV=%s" % shlex.quote(" ".join(hooks[0].get("env", []))))
PY
    . "$tmp/$name.edits"
    # shellcheck disable=SC2086
    sh -c 'echo $$ >"$1/cgroup.procs" || exit 1
        printf "{\"ociVersion\":\"1.0.2\",\"id\":\"%s\",\"pid\":%d,\"annotations\":{\"io.kubernetes.cri.sandbox-namespace\":\"default\",\"io.kubernetes.cri.sandbox-name\":\"%s\",\"io.kubernetes.cri.container-name\":\"main\"}}" "$2" $$ "$2" |
            env $5 $3 || exit 1
        exec unshare -m sh -c "for m in $4; do src=\${m%%:*} dst=\${m#*:}; if [ ! -e \$dst ]; then case \$dst in /usr/local/cumux/*|/run/cumux) mkdir -p \$(dirname \$dst); if [ -d \$src ]; then mkdir -p \$dst; else touch \$dst; fi ;; *) continue ;; esac; fi; mount --bind \$src \$dst || exit 1; done; exec env $6 python3 $7 $8"' \
        _ "$cgm$base/$name" "$name" "$HOOK" "$MOUNTS" "$HOOK_ENV" "$ENV" "$tmp/pod.py" "$gib" >"$tmp/$name.out" 2>&1
}
pod a 1 4 &
pa=$!
pod b 2 8 &
pb=$!
wait $pa; ra=$?
wait $pb; rb=$?
cat "$tmp/a.out" "$tmp/b.out" | grep -E "PASS|FAIL|Error" | head -4
"$cli" status | sed -n '/^groups/,$p'
[ $ra = 0 ] && grep -q "^PASS pod: sees 4.00 GiB" "$tmp/a.out" || fail "pod a (4 GiB)"
[ $rb = 0 ] && grep -q "^PASS pod: sees 8.00 GiB" "$tmp/b.out" || fail "pod b (8 GiB)"
echo "PASS torch_pods: two PyTorch pods through the plugin's answers saw 4 and 8 GiB, out of memory past them"
