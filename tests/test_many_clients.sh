#!/usr/bin/env bash
# Many clients at once (issue 13): N programs (gpu_vecadd, each checking its result against the CPU) start
# together under one server and all must pass; then none is left listed. On the fake driver in CI (N 64);
# on a GPU through the same script (device-check: 128).
# usage: test_many_clients.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR [N]
set -u
cli=$1 drv=$2 gdir=$3 n=${4:-128}
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0
start_ours
t0=$(date +%s%3N)
pids=()
for ((i = 1; i <= n; i++)); do
    "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/c.$i.out" 2>&1 &
    pids+=($!)
done
bad=0 peak=0
for ((i = 0; i < 50; i++)); do
    c=$("$cli" status | sed -n 's/^clients: \([0-9]*\)$/\1/p')
    [ "${c:-0}" -gt $peak ] && peak=$c
    sleep 0.05
done
for ((i = 1; i <= n; i++)); do
    wait "${pids[$((i - 1))]}" || { bad=$((bad + 1)); [ $bad -le 3 ] && { echo "client $i:"; tail -3 "$tmp/c.$i.out"; }; }
done
t1=$(date +%s%3N)
[ $bad = 0 ] || fail "$bad of $n clients failed"
for ((i = 1; i <= n; i++)); do grep -q '^PASS' "$tmp/c.$i.out" || fail "client $i printed no PASS: $(tail -2 "$tmp/c.$i.out")"; done
for ((i = 0; i < 100; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
"$cli" status | grep -q '^clients: 0$' || fail "clients left: $("$cli" status)"
echo "many clients: $n programs at once all passed in $((t1 - t0)) ms (up to $peak connected at a time)"
echo "PASS many_clients"
