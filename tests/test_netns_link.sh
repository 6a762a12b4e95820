#!/usr/bin/env bash
# The network link between two machines, as two network namespaces made here joined by a veth pair and
# nothing else (issue 45): a server in one, a client in the other; with the server's key file the client's
# frames (up to 16 MiB) come back intact over TLS; with another key it is refused. Needs root and ip
# (iproute2); else one SKIP line.
# usage: test_netns_link.sh TEST_TLS_LINK
set -u
prog=$1
[ "$(id -u)" = 0 ] || { echo "SKIP netns_link: needs root"; exit 0; }
command -v ip >/dev/null || { echo "SKIP netns_link: no ip (apt install iproute2)"; exit 0; }
a=cumux-a.$$ b=cumux-b.$$ tmp=$(mktemp -d)
cleanup() {
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL netns_link: $*"; for f in "$tmp"/*.out; do echo "---- $f"; cat "$f"; done; exit 1; }
ip netns add "$a" && ip netns add "$b" || { echo "SKIP netns_link: cannot make network namespaces"; exit 0; }
ip link add "va$$" netns "$a" type veth peer name "vb$$" netns "$b" || fail "veth"
ip -n "$a" addr add 10.231.0.1/24 dev "va$$" && ip -n "$b" addr add 10.231.0.2/24 dev "vb$$" || fail "addresses"
ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up && ip -n "$a" link set lo up && ip -n "$b" link set lo up || fail "links up"
python3 - "$tmp" <<'PY' || fail "key files"
import os, secrets, sys
d = sys.argv[1]
for name in ("site", "other"):
    p = os.path.join(d, name + ".key")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, ("site-1 " + secrets.token_hex(32) + "\n").encode())
    os.close(fd)
PY
# run_pair SERVER_KEY CLIENT_KEY NAME: the server in a, the client in b; the client's exit status.
run_pair() {
    ip netns exec "$a" "$prog" serve 7443 "$1" >"$tmp/$3-server.out" 2>&1 &
    local sp=$! i
    for ((i = 0; i < 100; i++)); do grep -q listening "$tmp/$3-server.out" && break; sleep 0.05; done
    ip netns exec "$b" timeout 60 "$prog" connect 10.231.0.1 7443 "$2" >"$tmp/$3-client.out" 2>&1
    local rc=$?
    wait "$sp"
    return $rc
}
run_pair "$tmp/site.key" "$tmp/site.key" right || fail "the right key: no link"
grep -q '^PASS link' "$tmp/right-client.out" && grep -q '^served' "$tmp/right-server.out" || fail "the right key's frames"
run_pair "$tmp/site.key" "$tmp/other.key" wrong && fail "another key was let in"
grep -q '^refused: TLS handshake' "$tmp/wrong-server.out" || fail "the server did not say it refused the other key"
# Nothing else joins them: the client's namespace reaches no other address.
ip netns exec "$b" ip route | grep -q default && fail "the client's namespace has a default route"
echo "PASS netns_link: across a veth pair between two network namespaces, the right key's frames came back over TLS; another key was refused"
