#!/usr/bin/env bash
# Programs across the network (issue 45's program transport: cli/relay.c, cli/gateway_program.c): cumuxd on
# the fake driver and `cumux gateway` in one network namespace, the programs in another, joined by a veth
# pair and nothing else. Each program of the GPU suite that can cross runs there unchanged through
# `cumux run` with CUMUX_SERVER (a relay of its own) and must pass; a program whose link is cut mid-work
# (its relay killed, or the veth pair deleted so only TCP keepalive can tell) is a killed client to the
# server: its log says it is gone with everything it held freed and no client is left; another key is
# refused; the relay refuses a hello that is not a program's.
# Needs root and ip; else SKIP.
# usage: test_remote_programs.sh CUMUX_CLI DRIVER_DIR GPU_DIR [PROGRAM...]   (default: the list below)
set -u
cli=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") drv=$2 gdir=$(cd "$3" && pwd)
shift 3
[ "$(id -u)" = 0 ] || { echo "SKIP remote_programs: needs root"; exit 0; }
command -v ip >/dev/null || { echo "SKIP remote_programs: no ip (apt install iproute2)"; exit 0; }
"$cli" keygen /dev/null/x 2>&1 | grep -q "without GnuTLS" && { echo "SKIP remote_programs: cumux built without GnuTLS"; exit 0; }
# The GPU suite's programs that cross the network. Not here: vmm, vmm_share (descriptors of memory
# exported to another process), link (cuLinkComplete's image read back): their ops are refused across
# the network (NOT_CARRIED), which gpu_remote_refused below checks.
programs=(device_api vecadd matmul uva_disjoint memcpy2d memset module_globals events hostfn graph ipc
    tensor_map stream_memops legacy_stream cache_config two_clients hostfn_shared contain_bystander
    client_killed memcpy idle_known managed array multithread)
[ $# -gt 0 ] && programs=("$@")
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby gateway.out
a=cumux-pa.$$ b=cumux-pb.$$ gw="" gwlink=""
cleanup_remote() {
    [ -n "$gw" ] && kill "$gw" 2>/dev/null
    ip netns pids "$b" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    own_server_cleanup
}
trap cleanup_remote EXIT
ip netns add "$a" && ip netns add "$b" || { echo "SKIP remote_programs: cannot make network namespaces"; exit 0; }
# link_up N: a veth pair pa$$N/pb$$N with 10.232.N.1 in A and 10.232.N.2 in B.
link_up() {
    ip link add "pa$$x$1" netns "$a" type veth peer name "pb$$x$1" netns "$b" || fail "veth $1"
    ip -n "$a" addr add "10.232.$1.1/24" dev "pa$$x$1" && ip -n "$b" addr add "10.232.$1.2/24" dev "pb$$x$1" || fail "addresses $1"
    ip -n "$a" link set "pa$$x$1" up && ip -n "$b" link set "pb$$x$1" up || fail "links up $1"
}
link_up 1
ip -n "$a" link set lo up
"$cli" keygen "$tmp/site.key" site-1 && "$cli" keygen "$tmp/other.key" site-1 || fail "cumux keygen"
# One client holds 1 GiB (client_killed): the fake GPU has 2 GiB.
start_ours CUMUX_FAKE_MEMORY_MB=2048 CUMUX_FAKE_STATS="$tmp/stats"
for ((i = 0; i < 50; i++)); do [ -s "$tmp/stats" ] && break; sleep 0.1; done
sleep 0.3 # the fake rewrites its counts every 100 ms: a fresh copy holds what the server made while starting
baseline=$(cat "$tmp/stats")
[ -n "$baseline" ] || fail "the fake driver wrote no counts"
ip netns exec "$a" "$cli" gateway --listen 0.0.0.0:7445 --key "$tmp/site.key" >"$tmp/gateway.out" 2>&1 &
gw=$!
for ((i = 0; i < 100; i++)); do grep -q listening "$tmp/gateway.out" && break; sleep 0.05; done
grep -q listening "$tmp/gateway.out" || fail "the gateway does not listen"

# remote_run ADDR KEY OUT PROGRAM [ARGS...]: PROGRAM under `cumux run` in namespace B, across to ADDR.
remote_run() {
    local addr=$1 key=$2 out=$3
    shift 3
    ip netns exec "$b" env -u CUMUX_PIPE_DIRECTORY CUMUX_SERVER="$addr:7445" CUMUX_KEY_FILE="$key" \
        CUMUX_TEST_DEVICE_COUNT=1 ASAN_OPTIONS=detect_leaks=0 "$cli" run -- "$@" >"$out" 2>&1
}
# all_freed: the server has no client left and the fake driver's counts are back to the server's
# baseline: what the clients made is gone (tried for 10 s).
all_freed() {
    for ((i = 0; i < 100; i++)); do
        "$cli" status 2>/dev/null | grep -q '^clients: 0$' && [ "$(cat "$tmp/stats")" = "$baseline" ] && return 0
        sleep 0.1
    done
    "$cli" status
    diff <(echo "$baseline") "$tmp/stats" | sed 's/^/    /'
    return 1
}

failed=()
for p in "${programs[@]}"; do
    t0=$(date +%s%N)
    remote_run 10.232.1.1 "$tmp/site.key" "$tmp/$p.out" timeout 240 "$gdir/gpu_$p"
    rc=$?
    t=$((($(date +%s%N) - t0) / 100000000)) t=$((t / 10)).$((t % 10))
    if [ $rc = 0 ] && ! grep -q "^FAIL" "$tmp/$p.out"; then
        echo "ok: gpu_$p across the network (${t} s)"
    else
        echo "FAIL: gpu_$p across the network (rc $rc, ${t} s):"
        tail -n 20 "$tmp/$p.out"
        failed+=("$p")
    fi
    all_freed || { failed+=("$p (not freed)"); echo "FAIL: gpu_$p left a client or what it made on the server"; }
done
[ ${#failed[@]} = 0 ] || fail "across the network: ${failed[*]}"
echo "ok: ${#programs[@]} programs of the GPU suite across the network, each leaving nothing on the server"

# Ops that cannot cross (descriptors of memory for another process): refused with CUDA_ERROR_NOT_SUPPORTED,
# which gpu_vmm_share reports as a failure of its own; the worker names the op once.
remote_run 10.232.1.1 "$tmp/site.key" "$tmp/vmm_share.out" timeout 120 "$gdir/gpu_vmm_share" &&
    fail_show="$tmp/vmm_share.out" fail "gpu_vmm_share passed across the network: its export cannot cross"
grep -q "NOT_SUPPORTED\|not supported" "$tmp/vmm_share.out" || fail_show="$tmp/vmm_share.out" fail "gpu_vmm_share: not refused as unsupported"
grep -q "cannot cross the network" "$tmp/log/cumuxd.log" || fail "the worker did not name the op that cannot cross"
all_freed || fail "gpu_vmm_share left something on the server"
echo "ok: an export of memory's descriptor is refused across the network, and named in the server's log"

# cut_mid_work WHAT HOW ADDR: gpu_busy (20 kernels of 0.5 s) across to ADDR; once the server serves it, the
# link is cut (HOW: a command; WHAT: its name); the server must end the client and free all it held.
cut_mid_work() {
    local what=$1 how=$2 addr=$3 gone_before
    gone_before=$(grep -c "gone; everything it held is freed" "$tmp/log/cumuxd.log")
    remote_run "$addr" "$tmp/site.key" "$tmp/busy.out" timeout 120 "$gdir/gpu_busy" 500 20 &
    local run=$!
    for ((i = 0; i < 100; i++)); do "$cli" status | grep -q '^clients: 1$' && break; sleep 0.1; done
    "$cli" status | grep -q '^clients: 1$' || fail_show="$tmp/busy.out" fail "gpu_busy across the network is not served"
    sleep 1.5 # a kernel or two in flight
    local t0=$SECONDS
    eval "$how"
    for ((i = 0; i < 600; i++)); do
        [ "$(grep -c "gone; everything it held is freed" "$tmp/log/cumuxd.log")" -gt "$gone_before" ] && break
        sleep 0.1
    done
    [ "$(grep -c "gone; everything it held is freed" "$tmp/log/cumuxd.log")" -gt "$gone_before" ] ||
        fail_show="$tmp/busy.out" fail "link cut ($what): the server did not end the client in 60 s"
    all_freed || fail "link cut ($what): something of the client is left on the server"
    wait "$run"
    local rc=$?
    [ $rc = 0 ] && fail_show="$tmp/busy.out" fail "link cut ($what): gpu_busy passed without its link"
    [ $rc = 124 ] && fail_show="$tmp/busy.out" fail "link cut ($what): gpu_busy did not end (it waited on)"
    echo "ok: link cut ($what): the server freed the client after $((SECONDS - t0)) s (its kernels in queue ran first, as for a killed local client); the program ended (rc $rc)"
}
relays_killed='for p in $(ip netns pids "$b"); do [ "$(cat /proc/$p/comm)" = cumux ] && kill -KILL $p; done'
cut_mid_work "the relay killed" "$relays_killed" 10.232.1.1
# A link that goes silent (no FIN, no reset): TCP keepalive or the unacknowledged data's timeout ends it.
link_up 2
cut_mid_work "the veth pair deleted" 'ip -n "$a" link del "pa$$x2"' 10.232.2.1

# Another key: refused at the handshake, the program told why; the gateway serves on.
remote_run 10.232.1.1 "$tmp/other.key" "$tmp/wrong.out" timeout 60 "$gdir/gpu_vecadd" &&
    fail_show="$tmp/wrong.out" fail "a program with another key ran"
grep -q "TLS handshake" "$tmp/wrong.out" || fail_show="$tmp/wrong.out" fail "another key: the program is not told of the handshake"
kill -0 "$gw" 2>/dev/null || fail "the gateway ended"
"$cli" status | grep -q '^clients: 0$' || fail "another key: a client on the server"
echo "ok: a program with another key is refused at the handshake"

# A relay of its own (cumux relay): programs reach it by its pipe directory; the CLI's hellos are refused.
ip netns exec "$b" "$cli" relay --server 10.232.1.1:7445 --key "$tmp/site.key" --pipe-directory "$tmp/relay" \
    >"$tmp/relay.out" 2>&1 &
relay=$!
for ((i = 0; i < 100; i++)); do [ -S "$tmp/relay/cumuxd.sock" ] && break; sleep 0.05; done
ip netns exec "$b" env CUMUX_PIPE_DIRECTORY="$tmp/relay" CUMUX_TEST_DEVICE_COUNT=1 "$cli" run -- "$gdir/gpu_vecadd" \
    >"$tmp/own_relay.out" 2>&1 || fail_show="$tmp/own_relay.out $tmp/relay.out" fail "gpu_vecadd through cumux relay"
ip netns exec "$b" env CUMUX_PIPE_DIRECTORY="$tmp/relay" "$cli" status >"$tmp/relay_status.out" 2>&1 &&
    fail_show="$tmp/relay_status.out" fail "cumux status through a program relay was answered"
grep -qi "relay" "$tmp/relay_status.out" || fail_show="$tmp/relay_status.out $tmp/relay.out" fail "cumux status through a relay: not told why"
kill "$relay"
all_freed || fail "cumux relay: something left on the server"
echo "ok: cumux relay serves a program; a hello that is not a program's is refused, saying why"
echo "PASS remote_programs"
