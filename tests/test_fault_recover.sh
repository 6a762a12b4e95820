#!/usr/bin/env bash
# A program that faults the GPU (gpu_fault: a store where nothing is mapped) gets its error, and cumuxd
# serves the next program by itself: the faulted worker gives way to a new one under the same supervisor,
# `cumux status` lists the fault, and nothing is left when the server stops. On the fake driver in CI
# (its fault_store kernel makes the context's error sticky, as a GPU does); on a GPU through the same script.
# With a standby worker (the default; CUMUX_STANDBY=0: none) the standby must take over each time.
# usage: test_fault_recover.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR [ROUNDS]
set -u
cli=$1 drv=$2 gdir=$3 rounds=${4:-3}
# With GPU coredumps the driver answers the culprit's first synchronize with success (tests/gpu/test_fault.c).
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && export GT_FAULT_SYNC_MAY_PASS=1
tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log" ASAN_OPTIONS=detect_leaks=0
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
cleanup() {
    stop_ours
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "---- cumuxd log ----"
    cat "$tmp/log/cumuxd.log" 2>/dev/null
    exit 1
}
now_ms() { date +%s%3N; }

start_ours
spid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid")
"$cli" run -- "$gdir/gpu_vecadd" >/dev/null 2>&1 || fail "gpu_vecadd before any fault"
stack_limit() { "$cli" run -- "$gdir/gpu_probe" --stack 2>&1 | sed -n 's/^stack limit: \([0-9]*\) bytes$/\1/p'; }
stack0=$(stack_limit)
[ -n "$stack0" ] || fail "gpu_probe --stack: $("$cli" run -- "$gdir/gpu_probe" --stack 2>&1)"
worst=0
standby=on
[ "${CUMUX_STANDBY:-1}" = 0 ] && standby=off
for ((r = 1; r <= rounds; r++)); do
    # With a standby: the fault comes once it is ready (each takeover starts the next one, whose GPU takes
    # a while to start), so that what is measured is a takeover, not a GPU's start.
    [ $standby = on ] && wait_standby_ready $r
    w0=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
    st=$("$cli" status)
    if [ $standby = on ]; then
        echo "$st" | grep -q '^standby worker: pid [0-9]*, ready$' || fail "round $r: status shows no ready standby: $st"
    else
        echo "$st" | grep -q '^standby worker: none (CUMUX_STANDBY=0)$' || fail "round $r: status: $st"
    fi
    "$cli" run -- "$gdir/gpu_fault" >"$tmp/fault.out" 2>&1 &
    culprit=$!
    wait $culprit || fail "round $r: gpu_fault did not get its error: $(cat "$tmp/fault.out")"
    t0=$(now_ms)
    # The next program is served by a new worker: it may connect while the old one goes (and wait in the
    # socket's backlog), never be refused.
    serve_one "$tmp/vecadd.out" || fail "round $r: no program served after the fault: $(cat "$tmp/vecadd.out")"
    t1=$(now_ms)
    [ $((t1 - t0)) -gt $worst ] && worst=$((t1 - t0))
    [ $serve_tries = 1 ] || echo "round $r: the first program after the fault failed; served at try $serve_tries"
    kill -0 "$spid" 2>/dev/null || fail "round $r: the supervisor $spid is gone"
    # A standby shrinks its contexts' stacks while it waits: serving, it has them back.
    st_now=$(stack_limit)
    [ "$st_now" = "$stack0" ] || fail "round $r: stack limit $st_now bytes after the takeover, $stack0 before"
    w1=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
    [ "$w1" != "$w0" ] || fail "round $r: the faulted worker $w0 still serves"
    # The standby serves before the faulted process is gone (a faulted context takes a while to end).
    for ((i = 0; i < 100; i++)); do kill -0 "$w0" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$w0" 2>/dev/null && fail "round $r: the faulted worker $w0 still runs 5 s after"
    st=$("$cli" status) || fail "round $r: cumux status"
    echo "$st" | grep -q "fatal GPU faults: $r;" || fail "round $r: status does not count the fault: $st"
    echo "$st" | grep -q "(CUDA_ERROR_ILLEGAL_ADDRESS), serving again after" ||
        fail "round $r: status does not describe the fault: $st"
    # The programs have ended, but the server may not have seen the last one go yet (a client's departure
    # is noticed when its socket closes, and freeing what it held takes a while on a GPU).
    for ((i = 0; i < 50; i++)); do echo "$st" | grep -q '^clients: 0$' && break; sleep 0.1; st=$("$cli" status); done
    echo "$st" | grep -q '^clients: 0$' || fail "round $r: clients listed 5 s after the fault: $st"
    # The culprit is named: from the GPU coredump (CUMUX_FAULT_COREDUMP=1), else as the only client with
    # kernels in flight (it runs alone here).
    echo "$st" | grep "^fault $r:" | grep -q "culprit: [0-9]* pid $culprit " ||
        fail "round $r: the culprit (pid $culprit) is not named: $st"
    if [ "${CUMUX_FAULT_COREDUMP:-1}" != 1 ]; then
        echo "$st" | grep "^fault $r:" | grep -q "the only client with kernels in flight" ||
            fail "round $r: the culprit is not said to be the only client with kernels in flight: $st"
    else # and its kernel, from the dump (its code section's name)
        echo "$st" | grep "^fault $r:" | grep -q "fatal GPU error in kernel fault_store" ||
            fail "round $r: the faulting kernel is not named: $st"
    fi
done
grep -q 'fatal GPU error.*(CUDA_ERROR_ILLEGAL_ADDRESS)' "$tmp/log/cumuxd.log" || fail "the log does not tell the fault"
# With dumps on, each dump's start withdraws the completion marks told to programs (server/marks.c): the
# driver may let a faulted stream go on while it writes the dump.
if [ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ]; then
    withdrawn=$(grep -c 'a GPU coredump has begun: programs ask the worker' "$tmp/log/cumuxd.log")
    [ "$withdrawn" -ge "$rounds" ] || fail "marks withdrawn at $withdrawn of the $rounds dumps"
fi
takeovers=$(grep -c 'standby worker [0-9]* takes over' "$tmp/log/cumuxd.log")
if [ $standby = on ]; then
    [ "$takeovers" -eq "$rounds" ] || fail "the standby worker took over $takeovers times in $rounds faults"
else
    [ "$takeovers" -eq 0 ] || fail "a standby worker took over with CUMUX_STANDBY=0"
fi
# From each fault to a worker serving again, as the server measured it (the last five faults).
rec=$("$cli" status | sed -n 's/.*serving again after \(-\{0,1\}[0-9]*\) ms.*/\1/p' | sort -n | tr '\n' ' ')
echo "fault recovery (standby $standby): fault to serving again, ms (last 5, sorted): $rec"
echo "fault recovery: $rounds faults, a program served within $worst ms of its culprit's exit (worst)"
# Beside an idle program that learned of its kernels' end by polling (its last questions answered from
# completion marks in its own channel, never telling the server): the culprit is still the only client
# with kernels in flight.
[ $standby = on ] && wait_standby_ready $((rounds + 1))
mkfifo "$tmp/poll.in" || fail "mkfifo"
"$cli" run -- "$gdir/gpu_probe" --poll-then-wait <"$tmp/poll.in" >"$tmp/poll.out" 2>&1 &
poller=$!
exec 9>"$tmp/poll.in"
for ((i = 0; i < 100; i++)); do grep -q '^probe: polled' "$tmp/poll.out" && break; sleep 0.1; done
grep -q '^probe: polled' "$tmp/poll.out" || fail "the polling program did not get ready: $(cat "$tmp/poll.out")"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/fault.out" 2>&1 &
culprit=$!
wait $culprit || fail "beside the poller: gpu_fault did not get its error: $(cat "$tmp/fault.out")"
serve_one "$tmp/vecadd.out" || fail "no program served after the fault beside the poller"
r=$((rounds + 1))
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q "^fault $r:" && break; sleep 0.1; done
exec 9>&- # the poller goes once the fault is recorded (it lost its context with the others)
wait $poller
"$cli" status | grep "^fault $r:" | grep -q "culprit: [0-9]* pid $culprit " ||
    fail "beside the poller, the culprit (pid $culprit) is not named: $("$cli" status)"
if [ "${CUMUX_FAULT_COREDUMP:-1}" != 1 ]; then
    "$cli" status | grep "^fault $r:" | grep -q "the only client with kernels in flight" ||
        fail "beside the poller, the culprit is not the only client with kernels in flight: $("$cli" status)"
fi
# own_error N KIND ERROR: fault N is `gpu_fault KIND`, which must get ERROR at its synchronize and after;
# a program is served right after, and status records the fault with that error.
own_error() {
    [ $standby = on ] && wait_standby_ready "$1"
    "$cli" run -- "$gdir/gpu_fault" "$2" >"$tmp/fault.out" 2>&1 ||
        fail "gpu_fault $2 did not get $3: $(cat "$tmp/fault.out")"
    serve_one "$tmp/vecadd.out" || fail "no program served after the $2: $(cat "$tmp/vecadd.out")"
    for ((i = 0; i < 50; i++)); do "$cli" status | grep -q "^fault $1:" && break; sleep 0.1; done
    "$cli" status | grep "^fault $1:" | grep -q "($3)" ||
        fail "status does not record the $2 as $3: $("$cli" status)"
    # The kernel named from the dump: the grid's, for an assert. A trap's dump once named no one on the
    # H200 (12-04; CUMUX_FAKE_TRAP_DUMP_UNNAMED=1 on the fake driver): the program, the only client with
    # kernels in flight, must still be the culprit (gpu_fault checked its error stayed: it did not come back).
    local named="in kernel fault_$2 "
    [ "$2" = trap ] && named="in kernel fault_trap \|the only client with kernels in flight"
    if [ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ]; then
        "$cli" status | grep "^fault $1:" | grep -q "$named" ||
            fail "status does not name the kernel fault_$2 or its program: $("$cli" status)"
    fi
}
# A device-side assert: the program gets its own error, CUDA_ERROR_ASSERT (with GPU coredumps on the
# driver says CUDA_ERROR_LAUNCH_FAILED, as on the H200; the dump says which it was).
own_error $((rounds + 2)) assert CUDA_ERROR_ASSERT
# A trap: CUDA_ERROR_LAUNCH_FAILED, as natively.
own_error $((rounds + 3)) trap CUDA_ERROR_LAUNCH_FAILED
# A worker that dies without a word (kill -9) is replaced the same way.
[ $standby = on ] && wait_standby_ready $((rounds + 4))
w0=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
kill -KILL "$w0"
t0=$(now_ms)
serve_one "$tmp/vecadd.out" || fail "no program served after the worker was killed: $(cat "$tmp/vecadd.out")"
[ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")" != "$w0" ] || fail "the killed worker $w0 is still named"
if [ $standby = on ]; then
    grep -q "worker $w0 ended (signal 9): standby worker [0-9]* takes over" "$tmp/log/cumuxd.log" ||
        fail "the standby did not take over from the killed worker"
fi
echo "fault recovery: a worker killed with SIGKILL: a program served $(($(now_ms) - t0)) ms after"
# Workers that die as soon as they take over (a bug that ends each one): the standbys slow down to one a
# second (no loop that spins the CPU and fills the log), and once they stop dying programs are served.
if [ $standby = on ]; then
    for ((k = 0; k < 6; k++)); do
        w=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
        kill -KILL "$w"
        for ((i = 0; i < 200; i++)); do
            [ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid" 2>/dev/null)" != "$w" ] && break
            sleep 0.01
        done
        wait_standby_ready $((rounds + 5 + k)) || fail "no standby ready after $((k + 1)) quick kills"
    done
    grep -q 'workers in a row ended within a second of taking over: the next standby starts in 1 s' \
        "$tmp/log/cumuxd.log" || fail "workers killed as they took over: the standbys did not slow down"
    serve_one "$tmp/vecadd.out" || fail "no program served after the quick kills: $(cat "$tmp/vecadd.out")"
fi
# Stopped at once, even while the standby behind the last one is still starting its GPU.
t0=$(now_ms)
"$cli" stop >/dev/null || fail "cumux stop"
echo "fault recovery: stopped in $(($(now_ms) - t0)) ms"
for ((i = 0; i < 50; i++)); do [ -z "$(pids_of_ours)" ] && break; sleep 0.1; done
[ -z "$(pids_of_ours)" ] || fail "cumuxd processes left after stop: $(pids_of_ours)"
echo "PASS fault_recover"
