#!/usr/bin/env bash
# PyTorch in a client group (issue 41's GPU acceptance; server/groups.c): two PyTorch processes in one
# cgroup under `cumux set --group CGROUP --memory 4G`. The first holds 1 GiB; the second sees the GPU as
# the 4 GiB less the first's (torch.cuda.mem_get_info), gets torch.OutOfMemoryError for 4 GiB more, and
# 2 GiB fine; both compute right. Needs root (cgroups), a GPU and PyTorch; else one SKIP line.
# usage: test_torch_group.sh CUMUX_CLI
set -u
cli=$1
[ "$(id -u)" = 0 ] || { echo "SKIP torch_group: needs root"; exit 0; }
python3 -c 'import torch' 2>/dev/null || { echo "SKIP torch_group: no PyTorch"; exit 0; }
nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP torch_group: no GPU"; exit 0; }
cgm=$(findmnt -n -t cgroup2 -o TARGET 2>/dev/null | head -1)
[ -n "$cgm" ] || cgm=$(findmnt -n -t cgroup -o TARGET,OPTIONS 2>/dev/null | awk '$2 ~ /name=systemd/ {print $1; exit}')
base=/cumux-torch-group.$$
[ -n "$cgm" ] && mkdir "$cgm$base" 2>/dev/null || { echo "SKIP torch_group: no cgroup hierarchy to make cgroups in"; exit 0; }
tmp=$(mktemp -d)
export CUMUX_PIPE_DIRECTORY=$tmp/pipe CUMUX_LOG_DIRECTORY=$tmp/log
holder=""
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null
    "$cli" stop >/dev/null 2>&1
    wait 2>/dev/null
    rmdir "$cgm$base" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL torch_group: $*"; for f in "$tmp"/*.out; do echo "---- $f"; tail -20 "$f"; done; tail -20 "$tmp/log/cumuxd.log"; exit 1; }
"$cli" start >/dev/null || fail "cumux start"
"$cli" set --group "$base" --memory 4G >/dev/null || fail "cumux set --group"
cat >"$tmp/holder.py" <<'PY'
import sys, torch
x = torch.full((256 << 20,), 1.5, device="cuda")  # 1 GiB of floats
free, total = torch.cuda.mem_get_info()
assert abs(total - (4 << 30)) < (64 << 20), ("holder sees", total)
assert float(x.sum()) == 1.5 * (256 << 20)
print("HOLDING", torch.cuda.memory_reserved(), flush=True)
sys.stdin.readline()
print("PASS holder", flush=True)
PY
cat >"$tmp/second.py" <<'PY'
import sys, torch
held = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
want = (4 << 30) - held
assert abs(total - want) < (64 << 20), ("second sees", total, "want about", want)
try:
    y = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    print("FAIL second: 4 GiB more than the group's limit was allocated", flush=True)
    sys.exit(1)
except torch.OutOfMemoryError as e:
    print("OOM as expected:", str(e).splitlines()[0], flush=True)
z = torch.ones(512 << 20, device="cuda")  # 2 GiB
assert float(z.sum()) == float(512 << 20)
print("PASS second: sees %.2f GiB of the group's 4" % (total / (1 << 30)), flush=True)
PY
mkfifo "$tmp/go"
sh -c 'echo $$ >"$0/cgroup.procs" && exec "$1" run -- python3 "$2" <"$3"' "$cgm$base" "$cli" "$tmp/holder.py" "$tmp/go" >"$tmp/holder.out" 2>&1 &
holder=$!
exec {go}>"$tmp/go"
for ((i = 0; i < 600; i++)); do grep -q '^HOLDING' "$tmp/holder.out" && break; kill -0 "$holder" 2>/dev/null || break; sleep 0.1; done
held=$(sed -n 's/^HOLDING \([0-9]*\)/\1/p' "$tmp/holder.out")
[ -n "$held" ] || fail "the first process did not get to hold its memory"
sh -c 'echo $$ >"$0/cgroup.procs" && exec "$1" run -- python3 "$2" "$3"' "$cgm$base" "$cli" "$tmp/second.py" "$held" >"$tmp/second.out" 2>&1 ||
    fail "the second process"
echo >&"$go"
exec {go}>&-
wait "$holder" || fail "the first process"
holder=""
grep -h '^OOM\|^PASS' "$tmp/second.out" "$tmp/holder.out"
echo "PASS torch_group: two PyTorch processes in a 4 GiB group; the second saw what the first left, and torch.OutOfMemoryError past it"
