#!/usr/bin/env bash
# Client groups (issue 41, server/groups.c): a group is a cgroup; `cumux set --group CGROUP --memory SIZE`
# gives its programs (those in it or below) one device memory limit together. Two groups with different
# limits: each program sees its group's limit less what the group's others hold, and cannot allocate past
# it; a third program, in a cgroup below the first group's, counts against that group; a live change of a
# limit holds for the next program; a group's priority reaches its running programs; `cumux status` and
# /metrics name each program's group. Needs root and a cgroup v2 hierarchy it can make cgroups in (cgroup
# v1's named systemd hierarchy does too).
# usage: test_groups.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (it makes cgroups)"; exit 0; }
cgm=$(findmnt -n -t cgroup2 -o TARGET 2>/dev/null | head -1)
[ -n "$cgm" ] || cgm=$(findmnt -n -t cgroup -o TARGET,OPTIONS 2>/dev/null | awk '$2 ~ /name=systemd/ {print $1; exit}')
[ -n "$cgm" ] && mkdir "$cgm/cumux-test.$$" 2>/dev/null || { echo "SKIP: no cgroup hierarchy to make cgroups in"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby a1.out a2.out b1.out b2.out
base=/cumux-test.$$
pids=()
cleanup_groups() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    for d in "$cgm$base/a/inner" "$cgm$base/a" "$cgm$base/b" "$cgm$base"; do rmdir "$d" 2>/dev/null; done
    own_server_cleanup
}
trap cleanup_groups EXIT
mkdir -p "$cgm$base/a/inner" "$cgm$base/b" || fail "cannot make cgroups under $cgm$base"
# in_group CGROUP NAME SEE HOLD [VAR=V...]: gpu_group_member in that cgroup, output $tmp/NAME.out, stdin a
# fifo (let_go NAME writes its line), in the background.
in_group() {
    local cg=$1 out=$2 see=$3 hold=$4
    shift 4
    mkfifo "$tmp/$out.in"
    env "$@" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$1" run -- "$2" "$3" "$4" <"$5"' "$cgm$cg" "$cli" \
        "$gdir/gpu_group_member" "$see" "$hold" "$tmp/$out.in" >"$tmp/$out.out" 2>&1 &
    pids+=($!)
    eval "exec {fd_$out}>\"\$tmp/\$out.in\""
}
holding() { # NAME: waits until the program says HOLDING
    for ((i = 0; i < 200; i++)); do grep -q '^HOLDING' "$tmp/$1.out" && return; grep -q '^FAIL' "$tmp/$1.out" && break; sleep 0.05; done
    fail_show="$tmp/$1.out" fail "$1 did not get to hold its memory"
}
let_go() { local v="fd_$1"; echo >&"${!v}"; eval "exec {$v}>&-"; }

port=$((20000 + $$ % 20000))
start_ours CUMUX_METRICS_PORT=$port
"$cli" set --group "$base/a" --memory 256M >"$tmp/set.out" 2>&1 || fail "cumux set --group: $(cat "$tmp/set.out")"
grep -q "group $base/a: device memory limit 256.0 MiB" "$tmp/set.out" || fail "cumux set --group said: $(cat "$tmp/set.out")"
"$cli" set --group "$base/b" --memory 128M >/dev/null || fail "cumux set --group b"
"$cli" set --group relative --memory 1G >/dev/null 2>&1 && fail "a group that is no cgroup path was taken"
# Malformed SET_GROUP hellos (a name without its NUL, paths that are no cgroup path, settings out of range,
# a setting that does not exist, a name cut short) and an event lease asked by a program, not a worker:
# each refused with its error, and the server serves on.
version=$(sed -n 's/^#define CUMUX_PROTO_VERSION \([0-9]*\)u.*/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../common/proto.h")
st=$(python3 - "$CUMUX_PIPE_DIRECTORY/cumuxd.sock" "$version" <<'PY'
import socket, struct, sys
def ask(kind, flags, arg, extra):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sys.argv[1])
    s.sendall(struct.pack("<IIIIQQ", 0x584d5543, int(sys.argv[2]), kind, flags, arg, 1234) + extra)
    if extra is None or len(extra) < 384 and kind == 15:
        s.shutdown(socket.SHUT_WR)
    w = b""
    try:
        while len(w) < 12:
            b = s.recv(12 - len(w))
            if not b:
                break
            w += b
    except socket.timeout:
        return "timeout"
    return str(struct.unpack("<IIi", w)[2]) if len(w) == 12 else "closed"
name = lambda p: p.encode().ljust(384, b"\0")
out = [ask(15, 1, 1 << 30, b"x" * 384),              # no NUL, no leading /
       ask(15, 1, 1 << 30, name("/a/../b")),
       ask(15, 1, 1 << 30, name("/a//b")),
       ask(15, 1, 1 << 30, name("/a b")),
       ask(15, 2, 7, name("/a")),                    # no such priority class
       ask(15, 3, 101, name("/a")),                  # more than 100 %
       ask(15, 99, 0, name("/a")),                   # no such setting
       ask(15, 6, 5000, name("/a")),                 # more SMs than any GPU has
       ask(15, 7, 0, b"/a".ljust(256, b"\0") + b"k=v," * 32),  # labels without their NUL
       ask(15, 7, 0, b"/a".ljust(256, b"\0") + b"pid=1".ljust(128, b"\0")),  # one of cumux's own labels
       ask(15, 1, 1 << 30, name("/a")[:40]),         # cut short: the connection just closes
       ask(12, 1, 0, b"")]                           # an event lease: for workers only
print(" ".join(out))
PY
)
[ "$st" = "1 1 1 1 1 1 1 1 1 1 closed 800" ] || fail "malformed SET_GROUP hellos and an event lease answered: $st (want 1 x10, closed, 800)"
"$cli" status >/dev/null || fail "the server after malformed SET_GROUP hellos"
"$cli" status | awk '$NF == "/a" || $NF == "/a/../b" {f = 1} END {exit !f}' && fail "a malformed SET_GROUP made a group"

# Group a: a program holding 64 MiB; later a second in a cgroup below a's, holding 64 more.
in_group "$base/a" a1 256 64 GT_SEE_AFTER_MIB=192
holding a1
in_group "$base/b" b1 128 32
holding b1
in_group "$base/a/inner" a2 192 64
holding a2
let_go a1
wait "${pids[0]}" || fail_show="$tmp/a1.out" fail "the first of group a"
pids=("${pids[@]:1}")
# The status: each program's group; the groups with what they hold (a1's end is cleaned up meanwhile).
for ((i = 0; i < 100; i++)); do
    "$cli" status >"$tmp/status.out"
    awk -v g="$base/a" '$NF == g && $3 == 1 {f = 1} END {exit !f}' "$tmp/status.out" && break
    sleep 0.05
done
grep -E "  $base/a\$" "$tmp/status.out" | grep -q . || fail_show="$tmp/status.out" fail "no program of group a in the status"
grep -E "  $base/b\$" "$tmp/status.out" | grep -q . || fail_show="$tmp/status.out" fail "no program of group b in the status"
awk -v g="$base/a" '$NF == g && $2 == "256.0" && $3 == 1 {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail_show="$tmp/status.out" fail "group a's line: not 256 MiB and one program"
# A live change: group b down to 64 MiB; its next program sees 64 less b1's 32.
"$cli" set --group "$base/b" --memory 64M >/dev/null || fail "cumux set --group b 64M"
in_group "$base/b" b2 32 16
holding b2
# A group's priority reaches its programs at once.
"$cli" set --group "$base/b" --priority low >/dev/null || fail "cumux set --group b --priority low"
"$cli" status >"$tmp/status.out"
n_low=$(awk -v g="$base/b" '$NF == g && $10 == "low"' "$tmp/status.out" | wc -l)
[ "$n_low" = 2 ] || fail_show="$tmp/status.out" fail "group b's programs at priority low: $n_low of 2"
# cumux top by group: group b's two programs and its 64 MiB limit; the JSON names each client's group.
"$cli" top --once --interval 0.2 >"$tmp/top.out" 2>&1 || fail "cumux top --once"
awk -v g="$base/b" '$NF == g && $2 == 2 && $6 == "64.0" {f = 1} END {exit !f}' "$tmp/top.out" ||
    fail_show="$tmp/top.out" fail "cumux top: no line of group b with two programs and its 64 MiB"
"$cli" top --once --json --interval 0.2 >"$tmp/top.json" 2>&1 || fail "cumux top --once --json"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert sum(c["group"] == sys.argv[2] for c in d["clients"]) == 2, d' \
    "$tmp/top.json" "$base/b" || fail_show="$tmp/top.json" fail "cumux top --json: not two clients of group b"
# /metrics labels by group, and by the labels a group is given (a pod's names); bad labels are refused.
"$cli" set --group "$base/b" --labels namespace=ns1,pod=p-1,container=c.1 >/dev/null || fail "cumux set --group --labels"
for bad in pid=1 "a=b c" A=b a=b,c=d,e=f,g=h,i=j "a=b," =b 'a=b"'; do
    "$cli" set --group "$base/b" --labels "$bad" >/dev/null 2>&1 && fail "labels '$bad' were taken"
done
if true; then
    python3 -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode())' "$port" >"$tmp/metrics.out" ||
        fail "no /metrics"
    grep -q "cumux_client_device_memory_bytes{.*group=\"$base/b\"" "$tmp/metrics.out" || fail_show="$tmp/metrics.out" fail "/metrics: no client labelled group b"
    grep -q "cumux_group_device_memory_limit_bytes{group=\"$base/b\",gpu=\"0\",namespace=\"ns1\",pod=\"p-1\",container=\"c.1\"} $((64 << 20))" "$tmp/metrics.out" ||
        fail_show="$tmp/metrics.out" fail "/metrics: group b's limit, with its labels"
    grep -q "cumux_client_device_memory_bytes{.*group=\"$base/b\",namespace=\"ns1\",pod=\"p-1\",container=\"c.1\"}" "$tmp/metrics.out" ||
        fail_show="$tmp/metrics.out" fail "/metrics: group b's programs without its labels"
fi
for o in b1 b2 a2; do let_go "$o"; done
for p in "${pids[@]}"; do wait "$p" || fail_show="$tmp/a2.out $tmp/b1.out $tmp/b2.out" fail "a group's program failed"; done
pids=()
for o in a1 a2 b1 b2; do grep -q '^PASS' "$tmp/$o.out" || fail_show="$tmp/$o.out" fail "$o did not pass"; done

# A group's SMs (cumux set --group --sms N): reserved from the setting on; every program of the group runs
# on them, others never do; more than the GPU has is refused; none, and forgetting, give them back.
sm_list() { grep '^sms: ' "$tmp/$1.out" | head -1 | sed 's/^sms: [^:]*: //'; }
sm_run() { # CGROUP NAME: gpu_sm_ids, one round, in that cgroup
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$1" run -- "$2" 1 </dev/null' "$cgm$1" "$cli" "$gdir/gpu_sm_ids" \
        >"$tmp/$2.out" 2>&1 || fail_show="$tmp/$2.out" fail "gpu_sm_ids in $1"
    [ -n "$(sm_list "$2")" ] || fail_show="$tmp/$2.out" fail "gpu_sm_ids in $1 printed no SMs"
}
count() { tr ',' '\n' <<<"$1" | grep -c .; }
overlap() { comm -12 <(tr ',' '\n' <<<"$1" | sort) <(tr ',' '\n' <<<"$2" | sort) | tr '\n' ' '; }
nsm=$("$cli" status | grep -o '[0-9]* SMs' | head -1 | cut -d' ' -f1)
[ -n "$nsm" ] && [ "$nsm" -gt 32 ] || fail "no SM count in cumux status"
"$cli" set --group "$base/a" --sms $((nsm * 2)) >"$tmp/set.out" 2>&1 && fail "a group got more SMs than the GPU has"
grep -q "cannot be reserved" "$tmp/set.out" || fail_show="$tmp/set.out" fail "an impossible group reservation: not said why"
"$cli" set --group "$base/a" --sms 16 >"$tmp/set.out" 2>&1 || fail_show="$tmp/set.out" fail "cumux set --group --sms 16"
grep -q "group $base/a: SMs 16 reserved" "$tmp/set.out" || fail_show="$tmp/set.out" fail "cumux set --group --sms said"
"$cli" status | awk -v g="$base/a" '$NF == g && $6 == "16r" {f = 1} END {exit !f}' ||
    fail "the status does not show group a's 16 SMs: $("$cli" status | tail -4)"
sm_run "$base/a" sa1
sm_run "$base/a/inner" sa2
sm_run "$base/b" sb1
for o in sa1 sa2; do
    n=$(count "$(sm_list $o)")
    [ "$n" -ge 1 ] && [ "$n" -lt 32 ] || fail_show="$tmp/$o.out" fail "a program of group a ran on $n SMs (16 reserved)"
done
[ -z "$(overlap "$(sm_list sa1)" "$(sm_list sb1)")" ] || fail "group b's program ran on group a's SMs: $(overlap "$(sm_list sa1)" "$(sm_list sb1)")"
[ -z "$(overlap "$(sm_list sa2)" "$(sm_list sb1)")" ] || fail "group b's program ran on group a's SMs (inner)"
[ "$(count "$(sm_list sb1)")" -le $((nsm - 16)) ] || fail "group b's program ran on $(count "$(sm_list sb1)") SMs of $nsm, 16 reserved"
"$cli" set --group "$base/a" --sms none >/dev/null || fail "cumux set --group --sms none"
sm_run "$base/b" sb2
[ "$(count "$(sm_list sb2)")" -gt $((nsm - 16)) ] || fail "after --sms none, group b ran on $(count "$(sm_list sb2)") SMs only"
"$cli" set --group "$base/b" --sms 16 >/dev/null || fail "cumux set --group b --sms 16"
sm_run "$base/a" sa3
[ "$(count "$(sm_list sa3)")" -le $((nsm - 16)) ] || fail "group a ran on group b's SMs"
"$cli" set --group "$base/b" --forget >/dev/null || fail "cumux set --group b --forget"
sm_run "$base/a" sa4
[ "$(count "$(sm_list sa4)")" -gt $((nsm - 16)) ] || fail "a forgotten group's SMs stayed reserved"
echo "PASS groups"
