#!/usr/bin/env bash
# The CLI across the network (issue 45's first use of the link; cli/remote.c): cumuxd on the fake driver
# and `cumux gateway` in one network namespace, the CLI in another, joined by a veth pair and nothing
# else; with CUMUX_SERVER and the gateway's key file the CLI's status, a group's setting and top's records
# reach the server and come back; with another key, or none, nothing does. Needs root and ip; else SKIP.
# usage: test_remote_cli.sh CUMUX_CLI DRIVER_DIR
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") drv=$2
[ "$(id -u)" = 0 ] || { echo "SKIP remote_cli: needs root"; exit 0; }
command -v ip >/dev/null || { echo "SKIP remote_cli: no ip (apt install iproute2)"; exit 0; }
"$cli" keygen /dev/null/x 2>&1 | grep -q "without GnuTLS" && { echo "SKIP remote_cli: cumux built without GnuTLS"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby gateway.out
a=cumux-ra.$$ b=cumux-rb.$$ gw=""
cleanup_remote() {
    [ -n "$gw" ] && kill "$gw" 2>/dev/null
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    own_server_cleanup
}
trap cleanup_remote EXIT
ip netns add "$a" && ip netns add "$b" || { echo "SKIP remote_cli: cannot make network namespaces"; exit 0; }
ip link add "ra$$" netns "$a" type veth peer name "rb$$" netns "$b" || fail "veth"
ip -n "$a" addr add 10.231.1.1/24 dev "ra$$" && ip -n "$b" addr add 10.231.1.2/24 dev "rb$$" || fail "addresses"
ip -n "$a" link set "ra$$" up && ip -n "$b" link set "rb$$" up || fail "links up"
"$cli" keygen "$tmp/site.key" site-1 || fail "cumux keygen"
"$cli" keygen "$tmp/other.key" site-1 || fail "cumux keygen (other)"
[ "$(stat -c %a "$tmp/site.key")" = 600 ] || fail "the key file is not mode 0600"
start_ours
spid=$("$cli" status | sed -n 's/^cumuxd pid \([0-9]*\),.*/\1/p')
ip netns exec "$a" "$cli" gateway --listen 10.231.1.1:7444 --key "$tmp/site.key" >"$tmp/gateway.out" 2>&1 &
gw=$!
for ((i = 0; i < 100; i++)); do grep -q listening "$tmp/gateway.out" && break; sleep 0.05; done
# remote ARGS...: the CLI in the other namespace, pointed at the gateway (its own pipe directory unused).
remote() { ip netns exec "$b" env CUMUX_PIPE_DIRECTORY="$tmp/nowhere" CUMUX_SERVER=10.231.1.1:7444 "$@"; }
remote env CUMUX_KEY_FILE="$tmp/site.key" "$cli" status >"$tmp/status.out" 2>&1 || fail_show="$tmp/status.out" fail "cumux status across the link"
grep -q "^cumuxd pid $spid," "$tmp/status.out" || fail_show="$tmp/status.out" fail "the status across the link is not the server's"
remote env CUMUX_KEY_FILE="$tmp/site.key" "$cli" set --group /remote-test --memory 64M >"$tmp/set.out" 2>&1 ||
    fail_show="$tmp/set.out" fail "cumux set --group across the link"
"$cli" status | awk '$NF == "/remote-test" && $2 == "64.0" {f = 1} END {exit !f}' || fail "the group set across the link is not on the server"
remote env CUMUX_KEY_FILE="$tmp/site.key" "$cli" top --once --json --interval 0.1 >"$tmp/top.json" 2>&1 || fail_show="$tmp/top.json" fail "cumux top across the link"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["server_pid"] == int(sys.argv[2]) and d["gpus"], d' "$tmp/top.json" "$spid" ||
    fail_show="$tmp/top.json" fail "top's records across the link"
echo "ok: status, set --group and top across a veth pair through the gateway"
remote env CUMUX_KEY_FILE="$tmp/other.key" "$cli" status >"$tmp/wrong.out" 2>&1 && fail_show="$tmp/wrong.out" fail "another key got an answer"
grep -q "TLS handshake" "$tmp/wrong.out" || fail_show="$tmp/wrong.out" fail "another key: not refused at the handshake"
remote "$cli" status >"$tmp/nokey.out" 2>&1 && fail "no key file got an answer"
grep -q "CUMUX_KEY_FILE" "$tmp/nokey.out" || fail_show="$tmp/nokey.out" fail "no key file: not said"
kill -0 "$gw" 2>/dev/null || fail_show="$tmp/gateway.out" fail "the gateway ended"
echo "ok: another key and no key file refused; the gateway serves on"
echo "PASS remote_cli"
