#!/usr/bin/env bash
# cumux kill PID (as MPS's terminate_client): the client's calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED
# from then on, everything it held is freed, and the server goes on serving.
#   idle: a client whose GPU work is done is ended; the same worker serves on.
#   spin: a client whose kernel never returns is ended; its work cannot be taken off the shared context,
#         so after the grace period the standby worker takes over, and the fault record names the client.
#   an unknown pid is refused.
# On the fake driver in CI; on a GPU through the same script (scripts/device-check.sh).
# usage: test_kill_client.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
fail_show="$tmp/hang.*.out"
now_ms() { date +%s%3N; }
# Starts gpu_hang MODE under cumux and waits until it waits.
start_hang() {
    "$cli" run -- "$gdir/gpu_hang" "$1" >"$tmp/hang.$1.out" 2>&1 &
    client=$!
    for ((i = 0; i < 300; i++)); do
        grep -q '^hang: waiting' "$tmp/hang.$1.out" && return 0
        kill -0 "$client" 2>/dev/null || fail "gpu_hang $1 ended before it waited"
        sleep 0.1
    done
    fail "gpu_hang $1 did not start waiting in 30 s"
}

start_ours
serve_one "$tmp/vecadd.out" || fail "gpu_vecadd before any kill: $(cat "$tmp/vecadd.out")"

# An unknown pid.
out=$("$cli" kill 999999999 2>&1) && fail "cumux kill of an unknown pid succeeded: $out"
echo "$out" | grep -q 'no client of cumuxd has pid' || fail "cumux kill of an unknown pid said: $out"

# idle: ended at once; the same worker serves on.
w0=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
start_hang idle
out=$("$cli" kill "$client") || fail "cumux kill $client (idle): $out"
echo "$out" | grep -q "pid $client .*terminated" || fail "cumux kill said: $out"
kill -USR1 "$client"
wait "$client" || fail "gpu_hang idle did not get CUDA_ERROR_MPS_CLIENT_TERMINATED"
client=""
serve_one "$tmp/vecadd.out" || fail "no program served after the idle client was killed: $(cat "$tmp/vecadd.out")"
[ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")" = "$w0" ] || fail "the worker was replaced for an idle client"
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
"$cli" status | grep -q '^clients: 0$' || fail "the killed idle client is still listed: $("$cli" status)"
echo "kill: an idle client was ended; the same worker serves on"

# spin: its kernel never ends; the standby takes over and the record names the client.
start_hang spin
t0=$(now_ms)
out=$("$cli" kill "$client") || fail "cumux kill $client (spin): $out"
wait "$client" || fail "gpu_hang spin did not get CUDA_ERROR_MPS_CLIENT_TERMINATED"
t1=$(now_ms)
killed=$client
client=""
serve_one "$tmp/vecadd.out" || fail "no program served after the spinning client was killed: $(cat "$tmp/vecadd.out")"
t2=$(now_ms)
w1=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
[ "$w1" != "$w0" ] || fail "the worker that holds a never-ending kernel still serves"
st=$("$cli" status)
echo "$st" | grep -q "work did not end within .*culprit: [0-9]* pid $killed " ||
    fail "status does not name the killed client as the culprit: $st"
# The server's own figure (from its record of the kill to a worker serving), and what a run of the same
# program takes on a worker already serving: the rest of the time above is the program's own run.
back=$(grep -o 'serving again [0-9]* ms after the fault' "$CUMUX_LOG_DIRECTORY/cumuxd.log" | tail -n 1 | grep -o '[0-9]*')
t3=$(now_ms)
"$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vecadd.out" 2>&1 || fail "gpu_vecadd after the takeover: $(cat "$tmp/vecadd.out")"
t4=$(now_ms)
echo "kill: a spinning client was ended in $((t1 - t0)) ms; a new program was served $((t2 - t0)) ms after the kill" \
    "(a worker serving again ${back:-?} ms after the record; the same program alone takes $((t4 - t3)) ms)"
"$cli" stop >/dev/null || fail "cumux stop"
for ((i = 0; i < 50; i++)); do [ -z "$(pids_of_ours)" ] && break; sleep 0.1; done
[ -z "$(pids_of_ours)" ] || fail "cumuxd processes left after stop: $(pids_of_ours)"
echo "PASS kill_client"
