#!/usr/bin/env bash
# kill -9 storms: KILLS working clients (storm_client: memory, streams, events, copies, launches), CONCURRENT
# at a time, each killed after a random 20-400 ms, against the server the caller started (on the fake
# driver in CI). Afterwards the server must still run, list no client, serve a new one, and the caller's
# wrapper checks that the driver's live objects are back to where they were.
# usage: test_kill_storm.sh CUMUX_CLI SHIM_DIR STORM_CLIENT FATBIN [KILLS [CONCURRENT]]
set -u
cli=$1 shim_dir=$2 client=$3 fatbin=$4 kills=${5:-1000} concurrent=${6:-128}
pid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid") || exit 1 # the GPU worker: a crash would replace it
export LD_LIBRARY_PATH="$shim_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The shim keeps destroyed objects as dead handles on purpose: in an ASan build of the client that reads
# as leaks at exit. The server's leaks are what matters here, and the wrapper checks those.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
declare -A started
killed=0 early=0
t0=$SECONDS
log_dir=$(mktemp -d) || exit 2
# Clients still running when the test stops early (a failure) go too: none may outlive it.
trap 'for p in "${!started[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$log_dir"' EXIT
# Microseconds, without a fork: this loop must keep up with 128 busy clients on two cores.
now_us() { local t=${EPOCHREALTIME/[.,]/}; now=$((10#$t)); }
spawn() {
    # The clients run niced so that the kills come on time: when they are killed is what varies.
    nice -n 10 "$client" "$fatbin" >"$log_dir/storm.tmp" 2>&1 &
    mv "$log_dir/storm.tmp" "$log_dir/storm.$!.log" 2>/dev/null
    now_us
    started[$!]=$now
}
# Why the worker went: the end of the server's log and the machine's memory.
gone() {
    echo "$early client(s) had ended by themselves"
    echo "---- the end of the server's log ----"
    tail -n 30 "${CUMUX_LOG_DIRECTORY:-/nonexistent}/cumuxd.log" 2>/dev/null || echo "(no log)"
    echo "---- memory ----"
    free -m 2>/dev/null
}
for ((i = 0; i < concurrent; i++)); do spawn; done
while [ $killed -lt "$kills" ]; do
    now_us
    for p in "${!started[@]}"; do
        age_ms=$(((now - ${started[$p]}) / 1000))
        if ! kill -0 "$p" 2>/dev/null; then
            # It ended by itself: a client that fails before being killed is a finding.
            wait "$p"; rc=$?
            # The first few in full: when the server goes, all of them fail alike.
            if [ $early -lt 4 ]; then
                echo "client $p exited by itself with status $rc after $age_ms ms"
                tail -n 4 "$log_dir/storm.$p.log" 2>/dev/null | sed 's/^/    /'
            fi
            early=$((early + 1))
            unset "started[$p]"
            spawn
        elif [ $age_ms -ge $((20 + (p * 7919 + killed * 104729) % 380)) ]; then
            kill -KILL "$p" 2>/dev/null
            wait "$p" 2>/dev/null
            killed=$((killed + 1))
            unset "started[$p]"
            [ $killed -lt "$kills" ] && spawn
        fi
        [ $killed -ge "$kills" ] && break
    done
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: cumuxd died during the storm after $killed kills"; gone; exit 1; }
    sleep 0.01
done
for p in "${!started[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
echo "kill storm: $killed clients killed ($concurrent at a time) in $((SECONDS - t0)) s; $early ended by themselves;" \
    "the worker's peak memory $(awk '/^VmHWM/ {print int($2 / 1024) " MiB"}' "/proc/$pid/status" 2>/dev/null)"
# A server that stops answering: its threads' stacks go in the log (gdb, where there is one), then the
# test fails, rather than waiting for the test's own time limit.
stacks() {
    command -v gdb >/dev/null 2>&1 || { echo "(no gdb: no stacks)"; return; }
    echo "---- the GPU worker's threads ----"
    timeout -k 5 60 gdb -q -batch -p "$pid" -ex "thread apply all bt 16" 2>&1 |
        grep -v '^\[New LWP\|^$\|^warning:' | head -n 600
}
answers() { # status with a deadline; 1 when the server does not answer
    local out
    out=$(timeout -k 2 15 "$cli" status 2>/dev/null)
    local rc=$?
    [ $rc = 124 ] || [ $rc = 137 ] && return 1
    printf '%s\n' "$out"
}
# Every killed client's cleanup is done.
t1=$SECONDS
for ((i = 0; i < 600; i++)); do
    st=$(answers) || { echo "FAIL: cumuxd does not answer cumux status after the storm"; stacks; exit 1; }
    echo "$st" | grep -q '^clients: 0$' && break
    sleep 0.1
done
echo "kill storm: the server listed no client $((SECONDS - t1)) s after the last kill"
"$cli" status | grep -q '^clients: 0$' || { echo "FAIL: clients left after the storm:"; "$cli" status; exit 1; }
kill -0 "$pid" 2>/dev/null || { echo "FAIL: cumuxd is gone"; exit 1; }
# A new client is served and computes right.
timeout -k 5 120 "$client" "$fatbin" 3 || { echo "FAIL: a client after the storm failed"; stacks; exit 1; }
[ $early -eq 0 ] || { echo "FAIL: $early clients failed before they were killed"; exit 1; }
echo "kill storm: PASS"
