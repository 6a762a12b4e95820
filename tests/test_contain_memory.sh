#!/usr/bin/env bash
# Client memory in VMM chunks (CUMUX_CONTAIN=1, server/chunks.c; issue 10's first step): the server says
# it keeps clients' memory in an arena; the GPU suite's programs, which allocate and free every way
# (cuMemAlloc, stream-ordered, pools, graphs, a killed client's gigabyte), give their results with it; their
# memory was in chunks and all of it comes back when they end (gpu_ipc's too: memory in a chunk shared
# with another program). Then with a standby: its arena is at the serving worker's address, and when a
# program faults while another holds memory, the standby taking over maps the held chunks where they were
# (clients do not come back for them yet: it lets them go, and says so). On the fake driver in CI (the oracle faults any access to unmapped memory, so a
# chunk unmapped too early fails a program); on a GPU the same script.
# usage: test_contain_memory.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0 CUMUX_DEBUG=1 CUMUX_FAKE_MEMORY_MB=4096
# With GPU coredumps on (the default) a faulting program's first synchronize may succeed while the dump is
# written, natively too; gpu_fault then wants the error at its next call (as test_fault_recover.sh).
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && export GT_FAULT_SYNC_MAY_PASS=1
log="$tmp/log/cumuxd.log"
fail_show="$tmp/run.out"
start_ours CUMUX_CONTAIN=1
grep -q "clients' device memory in VMM chunks of an arena" "$log" || fail "no arena said: $(grep -i arena "$log")"
used() { "$cli" status | sed -n 's/^GPU 0: .*memory \([0-9]*\) MiB used.*/\1/p'; }
# The suite runs twice and the memory in use is compared around the second pass: the first grows what the
# driver keeps for the context once (kernels' local memory, the server's own kernels loaded on first use;
# +38 MiB on the H200), which is not clients' memory. A chunk kept per pass still shows.
suite() {
for p in gpu_vecadd gpu_matmul gpu_memcpy gpu_memcpy2d gpu_memset gpu_events gpu_graph gpu_multithread \
    gpu_stream_memops gpu_legacy_stream gpu_idle_known gpu_uva_disjoint gpu_managed gpu_module_globals \
    gpu_hostfn gpu_two_clients gpu_client_killed gpu_array gpu_link gpu_tensor_map gpu_vmm gpu_ipc; do
    timeout 120 "$cli" run -- "$gdir/$p" >"$tmp/run.out" 2>&1 || fail "$p with memory in chunks"
done
}
suite
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
before=$(used)
suite
grep -q "its device memory was in VMM chunks" "$log" || fail "no client's memory was in chunks"
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
after=$(used)
[ -n "$before" ] && [ "$after" = "$before" ] ||
    fail "device memory in use $before MiB before, $after MiB after; $("$cli" status | grep -i 'outside the worker')"
"$cli" stop >/dev/null || fail "cumux stop"

# A fault while a program holds memory: the standby takes its chunks over at the same addresses, and the
# program, idle at the fault, comes back to it: its memory intact, and it computes again.
rm -f "$log"
start_ours CUMUX_RESUME_WAIT_MS=1500 CUMUX_STANDBY=1 CUMUX_CONTAIN=1
# Starts gpu_contain_bystander MODE (told to go on by a line on descriptor 3) and waits for its first line.
start_bystander() { # MODE WHO
    local want='^bystander: ready'
    [ "$1" = busy ] && want='^bystander: busy'
    # hold.out still holds the previous bystander's lines ("bystander: ready" among them), and the job's
    # own >hold.out truncates it only in the child, after its fifo open has met ours: a look in between
    # took the old line for this one's, and the look after the loop then found the file just emptied
    # ("did not start", with no output and the process still `cumux run`). Emptied here, before the job.
    : >"$tmp/hold.out"
    "$cli" run -- "$gdir/gpu_contain_bystander" "$1" <"$tmp/hold.in" >"$tmp/hold.out" 2>&1 &
    client=$!
    exec 3>"$tmp/hold.in"
    for ((i = 0; i < 200; i++)); do grep -q "$want" "$tmp/hold.out" && break; sleep 0.1; done
    # Where it waits, should it not start.
    grep -q "$want" "$tmp/hold.out" ||
        fail "$2 did not start: $(tail -3 "$tmp/hold.out"); its process: $(tr '\0' ' ' </proc/$client/cmdline 2>&1)," \
            "waiting in $(cat /proc/$client/wchan 2>&1), state $(awk '/^State/ {print $2}' /proc/$client/status 2>&1);" \
            "threads' waits: $(cat /proc/$client/task/*/wchan 2>/dev/null | tr '\0' ' ');" \
            "its program: $(readlink /proc/$client/exe 2>&1); its stacks: $(stacks_of $client)"
}
# Where a process is, for the message above: gdb's backtrace of every thread where gdb is installed.
stacks_of() {
    command -v gdb >/dev/null 2>&1 || { echo "(no gdb)"; return; }
    timeout 30 gdb -p "$1" -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^(#|Thread)' | head -40 | tr '\n' ' '
}
# gpu_fault faults the GPU; once a worker has taken over, the bystander started last goes on and must pass.
fault_then_go() { # WHO
    local before
    before=$(grep -c 'took over' "$log")
    "$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error ($1)"
    for ((i = 0; i < 100; i++)); do [ "$(grep -c 'took over' "$log")" -gt "$before" ] && break; sleep 0.1; done
    echo go >&3
    exec 3>&-
    wait "$client" || { cp "$tmp/hold.out" "$tmp/run.out"; fail "$1 did not end right"; }
    client=""
}
wait_standby_ready 1 || fail "no standby ready"
arenas=$(sed -n "s/.*VMM chunks of an arena at \(0x[0-9a-f]*\).*/\1/p" "$log" | sort -u)
[ "$(grep -c 'VMM chunks of an arena at' "$log")" -ge 2 ] && [ "$(wc -l <<<"$arenas")" = 1 ] ||
    fail "the workers' arenas are not at one address: $arenas"
mkfifo "$tmp/hold.in" || fail "mkfifo"
start_bystander wait-twice "the bystander"
# `cumux status` shows the memory the supervisor holds: the bystander's two chunks, 6 MiB.
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q "outside the worker: 2 chunk(s), 6.0 MiB" && break; sleep 0.1; done
"$cli" status | grep -q "^clients' memory outside the worker: 2 chunk(s), 6.0 MiB (CUMUX_CONTAIN)$" ||
    fail "status does not show the kept memory: $("$cli" status | grep -i 'outside')"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error"
for ((i = 0; i < 100; i++)); do grep -q 'took over .* chunk' "$log" && break; sleep 0.1; done
# Its small and stream-ordered allocations share a 2 MiB chunk; the 3 MiB one has a chunk of 4 MiB.
grep -q 'took over 2 of 2 chunk(s) of 1 client(s) of the failed worker (6 MiB) at their addresses' "$log" ||
    fail "the bystander's chunks not taken over: $(grep -i 'took over\|chunk' "$log")"
echo go >&3
# A second fault: it comes back a second time (its chunks are still known by its token).
for ((i = 0; i < 100; i++)); do grep -q '^bystander: ready again' "$tmp/hold.out" && break; sleep 0.1; done
grep -q '^bystander: ready again' "$tmp/hold.out" || { cp "$tmp/hold.out" "$tmp/run.out"; fail "the bystander did not come back whole"; }
wait_standby_ready 2 || fail "no second standby ready"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error (second fault)"
for ((i = 0; i < 100; i++)); do [ "$(grep -c 'took over .* chunk' "$log")" -ge 2 ] && break; sleep 0.1; done
echo go >&3
exec 3>&-
wait "$client" || { cp "$tmp/hold.out" "$tmp/run.out"; fail "the bystander did not come back whole twice"; }
[ "$(grep -c 'back after its worker failed: 2 chunk(s) taken back, 5 of 5 allocation(s) intact' "$log")" = 2 ] ||
    fail "the bystander's memory not given back at the second fault: $(grep 'back after' "$log")"
client=""
grep -q '^PASS contain_bystander' "$tmp/hold.out" || fail "the bystander: $(tail -3 "$tmp/hold.out")"
grep -q 'back after its worker failed: 2 chunk(s) taken back, 5 of 5 allocation(s) intact' "$log" ||
    fail "the server did not give the bystander its memory back: $(grep 'back after' "$log")"
# What it made before the fault was made again (not only handles that happen to be the same numbers).
grep -q 'made again 1 stream(s), 2 event(s), 2 module(s) and librar(ies), 2 function(s), 1 graph(s), 2 graph instance(s); 1 range(s) of pinned host memory' "$tmp/hold.out" ||
    fail "the bystander's objects not made again: $(grep 'made again' "$tmp/hold.out")"
# Its instance holding a child graph is not made again, and the log says why.
grep -q '1 graph instance(s) and 1 graph(s) not made again.*child graph' "$tmp/hold.out" ||
    fail "the graph instance not made again is not said: $(grep 'not made again' "$tmp/hold.out")"
# A bystander with work queued and not seen to end at the fault lost it: it comes back, and that stream,
# the event recorded behind the work and its context say CUDA_ERROR_LAUNCH_FAILED once each, its other
# streams and events nothing (the program checks it), then it goes on.
wait_standby_ready 3 || fail "no third standby ready"
start_bystander wait-unsynced "the unsynced bystander"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error (third fault)"
for ((i = 0; i < 100; i++)); do [ "$(grep -c 'took over .* chunk' "$log")" -ge 3 ] && break; sleep 0.1; done
echo go >&3
exec 3>&-
wait "$client" || { cp "$tmp/hold.out" "$tmp/run.out"; fail "the bystander whose queued work was lost did not come back"; }
client=""
grep -q 'work it had going was lost: the streams that had it, their events and contexts say CUDA_ERROR_LAUNCH_FAILED once each' "$tmp/hold.out" ||
    fail "the unsynced bystander was not told its work was lost: $(grep 'back as client' "$tmp/hold.out")"
serve_one "$tmp/run.out" || fail "no program served after the takeover"
# A program that holds memory and never comes back (killed meanwhile): its chunks are let go after
# CUMUX_RESUME_WAIT_MS (1.5 s here), and the supervisor holds nothing more.
wait_standby_ready 4 || fail "no fourth standby ready"
start_bystander wait "the bystander to kill"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error (fourth fault)"
pkill -KILL -f 'gpu_contain_bystander wait$'
exec 3>&-
wait "$client" 2>/dev/null
client=""
for ((i = 0; i < 100; i++)); do grep -q "not taken back: let go" "$log" && break; sleep 0.1; done
grep -q "2 chunk(s) of the failed worker's clients (6 MiB) not taken back: let go" "$log" ||
    fail "the killed bystander's chunks were not let go: $(grep -i 'let go' "$log")"
for ((i = 0; i < 100; i++)); do "$cli" status | grep -q "outside the worker: 0 chunk(s), 0.0 MiB" && break; sleep 0.1; done
"$cli" status | grep -q "outside the worker: 0 chunk(s), 0.0 MiB" ||
    fail "memory left with the supervisor: $("$cli" status | grep -i 'outside')"
# A bystander computing in a loop (a kernel, a synchronize, a check) through three faults: a round's work
# may be lost at a fault, never silently (a wrong result after calls that all succeeded: exit 1). It comes
# back, and its streams say CUDA_ERROR_LAUNCH_FAILED once; or, when a call of its was answered the fault's
# own error (the context fails for every call until the worker gives up), it keeps it (exit 3).
start_bystander busy "the busy bystander"
for k in 1 2 3; do
    wait_standby_ready $((4 + k)) || fail "no standby ready for busy fault $k"
    # With the bystander's kernels in flight too the culprit may not be known: then both come back and are
    # told CUDA_ERROR_LAUNCH_FAILED, the culprit's program as well (its check of its error then fails).
    if ! "$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1; then
        grep -q 'returned 719, not CUDA_ERROR_ILLEGAL_ADDRESS' "$tmp/run.out" &&
            grep 'culprit:' "$log" | tail -n 1 | grep -q 'culprit: not known' ||
            fail "gpu_fault did not get its error (busy fault $k)"
    fi
    sleep 0.3
done
(echo go >&3) 2>/dev/null # in a subshell: a bystander that has ended makes it a broken pipe
exec 3>&-
wait "$client"
rc=$?
client=""
case $rc in
    0) grep -q '^bystander: [0-9]* busy rounds, all right' "$tmp/hold.out" || fail "the busy bystander: $(tail -3 "$tmp/hold.out")" ;;
    3) grep -q '^bystander: told the fault.s error after [0-9]* rounds (CUDA_ERROR_ILLEGAL_ADDRESS)' "$tmp/hold.out" ||
        fail "the busy bystander failed with another error: $(tail -3 "$tmp/hold.out")" ;;
    *) cp "$tmp/hold.out" "$tmp/run.out"; fail "the busy bystander failed (status $rc)" ;;
esac
echo "busy bystander through 3 faults: came back $(grep -c 'back as client' "$tmp/hold.out") time(s);" \
    "$(grep '^bystander: [0-9]* busy\|^bystander: told' "$tmp/hold.out")"
grep 'culprit:' "$log" | tail -n 3 | sed 's/.*GPU 0: /    fault: /; s/; the standby worker takes over//'
serve_one "$tmp/run.out" || fail "no program served after the busy faults"
# A bystander with 600 chunks, more than the supervisor's socket to the standby holds messages at once:
# the handover waits for the standby to read them, and every allocation is intact.
wait_standby_ready 8 || fail "no standby ready for the bystander of many chunks"
start_bystander wait-many "the bystander of many chunks"
"$cli" run -- "$gdir/gpu_fault" >"$tmp/run.out" 2>&1 || fail "gpu_fault did not get its error (many chunks)"
for ((i = 0; i < 100; i++)); do grep -q 'took over 600 of' "$log" && break; sleep 0.1; done
echo go >&3
exec 3>&-
wait "$client" || { cp "$tmp/hold.out" "$tmp/run.out"; fail "the bystander of many chunks did not come back whole"; }
client=""
grep 'took over' "$log" | tail -n 1 | grep -q 'took over 600 of 600 chunk' ||
    fail "not every chunk taken over: $(grep 'took over\|handed' "$log" | tail -n 2)"
# The ready standby had mapped them ahead, as they came (all of them, unless the fault came first).
grep 'took over' "$log" | tail -n 1 | grep -q '([1-9][0-9]* mapped ahead)' ||
    fail "no chunk mapped ahead by the standby: $(grep 'took over' "$log" | tail -n 1)"
echo "many chunks: $(grep 'took over' "$log" | tail -n 1 | sed 's/.*: took/took/; s/ of the failed worker.*addresses//; s/; kept.*//'); $(grep 'serving again' "$log" | tail -n 1 | sed 's/.*: //')"
serve_one "$tmp/run.out" || fail "no program served after the fault beside many chunks"
# Work left on the per-thread stream, which no stream object of the program claims: that stream, the
# event behind it and the context say it was lost; its own stream and the legacy one do not.
wait_standby_ready 9 || fail "no standby ready for the bystander with per-thread work"
start_bystander wait-unsynced-ptds "the bystander with per-thread work"
fault_then_go "the bystander with per-thread work"
# A program holding an array does not come back (its contents were the failed worker's): every call of its
# returns the fault's error, and the worker it reached lets go of it. Nor does one holding another program's
# memory open through CUDA IPC, nor one that asked for a module global's address.
not_back() { # STANDBY_NUMBER MODE WHO LOG_LINE
    wait_standby_ready "$1" || fail "no standby ready for $3"
    start_bystander "$2" "$3"
    fault_then_go "$3"
    grep -q '^bystander: did not come back (700)' "$tmp/hold.out" && grep -q "$4" "$tmp/hold.out" ||
        fail "$3: $(tail -4 "$tmp/hold.out")"
    for ((i = 0; i < 100; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
    "$cli" status | grep -q '^clients: 0$' || fail "$3 still listed: $("$cli" status)"
}
not_back 10 wait-array "the bystander with an array" 'holds 1 array(s), texture or surface object(s), which cannot come back'
not_back 11 wait-ipc "the bystander with IPC memory" 'holds 1 allocation(s) of other programs open (CUDA IPC)'
not_back 12 wait-global "the bystander with a global's address" "asked for the address of a module global 1 time(s)"
"$cli" stop >/dev/null || fail "cumux stop"
echo "PASS contain_memory"
