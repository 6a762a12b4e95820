#!/usr/bin/env bash
# Many fatal faults in a row while other programs keep using the GPU (issue 10's soak): after each fault
# (gpu_fault, once the standby is ready) a new program must be served; at the end no process of the
# server may be left over (a supervisor, a serving worker, a standby), no client listed, and the device
# memory in use back to where it was. The bystanders (BYSTANDERS loops of gpu_vecadd, each checking its
# result) are counted: until the other clients' work is contained (docs/faults.md), a bystander whose run
# overlaps a fault fails, so their failures are reported, not required to be 0, unless
# REQUIRE_BYSTANDERS=1.
# With CUMUX_CONTAIN=1 (programs come back after another's fault, docs/faults.md) each bystander is one
# program computing in a loop through all the faults (gpu_contain_bystander busy: a kernel, a synchronize,
# a check of every word): work lost at a fault is said (CUDA_ERROR_LAUNCH_FAILED once) and done again,
# and every other result must be right; how often each came back and how many rounds it lost is reported.
# With CUMUX_FAULT_COREDUMP=1 the culprit must be named at every fault, and get its own error.
# SOAK_LOGS=DIR keeps the server's log and the bystanders' output there.
# usage: test_fault_soak.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR [FAULTS [BYSTANDERS]]
set -u
cli=$1 drv=$2 gdir=$3 faults=${4:-10} nby=${5:-2}
tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log" ASAN_OPTIONS=detect_leaks=0
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
by_pids=()
cleanup() {
    touch "$tmp/stop"
    for p in "${by_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    stop_ours
    [ -n "${SOAK_LOGS:-}" ] && mkdir -p "$SOAK_LOGS" && cp "$tmp"/log/*.log "$tmp"/by.*.out "$SOAK_LOGS/" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    echo "---- cumuxd log (last 40 lines) ----"
    tail -n 40 "$tmp/log/cumuxd.log" 2>/dev/null
    exit 1
}
now_ms() { date +%s%3N; }
mem_used() { "$cli" status | sed -n 's/^GPU 0: .* memory \([0-9]*\) MiB used.*/\1/p'; }

start_ours
"$cli" run -- "$gdir/gpu_vecadd" >/dev/null 2>&1 || fail "gpu_vecadd before any fault"
standby=on
[ "${CUMUX_STANDBY:-1}" = 0 ] && standby=off
# The baseline includes the standby's context (it starts after the first worker serves).
[ $standby = on ] && { wait_standby_ready 1 || fail "no standby worker ready 10 s after the first program"; }
base=$(mem_used)
contain=0 dumps=0
[ "${CUMUX_CONTAIN:-1}" = 1 ] && contain=1
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && { dumps=1; export GT_FAULT_SYNC_MAY_PASS=1; }
# The bystanders: each a loop of programs, counting good and failed runs; with containment each one
# program, told to stop by a line on its stdin (a fifo held open here).
for ((b = 0; b < nby && contain; b++)); do
    mkfifo "$tmp/by.$b.in" || fail "mkfifo"
    "$cli" run -- "$gdir/gpu_contain_bystander" busy <"$tmp/by.$b.in" >"$tmp/by.$b.out" 2>&1 &
    by_pids+=($!)
    eval "exec $((10 + b))>\"\$tmp/by.\$b.in\""
done
for ((b = 0; b < nby && contain; b++)); do
    for ((i = 0; i < 100; i++)); do grep -q '^bystander: busy' "$tmp/by.$b.out" && break; sleep 0.1; done
    grep -q '^bystander: busy' "$tmp/by.$b.out" || fail "bystander $b did not start: $(cat "$tmp/by.$b.out")"
done
for ((b = 0; b < nby && !contain; b++)); do
    (
        ok=0 bad=0
        while [ ! -e "$tmp/stop" ]; do
            if "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/by.$b.last" 2>&1; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
            echo "$ok $bad" >"$tmp/by.$b.count"
        done
    ) &
    by_pids+=($!)
done
worst=0
for ((r = 1; r <= faults; r++)); do
    [ $standby = on ] && wait_standby_ready $r
    # Beside busy bystanders the culprit may not be known (several programs with kernels in flight): then
    # every candidate comes back told CUDA_ERROR_LAUNCH_FAILED, the culprit's program too.
    # With GPU coredumps (CUMUX_FAULT_COREDUMP=1) it is named, and must get its own error.
    # Every other culprit loads its code as the CUDA runtime does (a library), which a dump names apart.
    how=""
    [ $((r % 2)) = 0 ] && how=library
    if ! out=$("$cli" run -- "$gdir/gpu_fault" $how 2>&1); then
        [ $contain = 1 ] && [ $dumps = 0 ] && grep -q 'returned 719, not CUDA_ERROR_ILLEGAL_ADDRESS' <<<"$out" ||
            fail "fault $r: gpu_fault did not get its error: $out"
    fi
    t0=$(now_ms)
    serve_one "$tmp/vecadd.out" || fail "fault $r: no program served after it: $(cat "$tmp/vecadd.out")"
    t1=$(now_ms)
    [ $((t1 - t0)) -gt $worst ] && worst=$((t1 - t0))
done
touch "$tmp/stop"
ok=0 bad=0 back=0 lost=0 rounds=0
for ((b = 0; b < nby && contain; b++)); do
    (echo stop >&$((10 + b))) 2>/dev/null # a bystander that has ended makes it a broken pipe
    eval "exec $((10 + b))>&-"
done
for ((b = 0; b < nby; b++)); do
    wait "${by_pids[$b]}"
    rc=$?
    if [ $contain = 1 ]; then
        # 0: all its results right, its lost rounds said and done again; else it failed.
        if [ $rc = 0 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); echo "bystander $b (status $rc): $(tail -n 2 "$tmp/by.$b.out")"; fi
        back=$((back + $(grep -c 'back as client' "$tmp/by.$b.out")))
        read -r n l < <(sed -n 's/^bystander: \([0-9]*\) busy rounds, all right; \([0-9]*\) lost at faults/\1 \2/p' "$tmp/by.$b.out")
        rounds=$((rounds + ${n:-0})) lost=$((lost + ${l:-0}))
        continue
    fi
    read -r o f <"$tmp/by.$b.count" || { o=0 f=0; }
    ok=$((ok + o)) bad=$((bad + f))
done
by_pids=()
# Recovery as the server measured it, from each fault to a worker serving again.
rec=$(sed -n 's/.*serving again \([0-9]*\) ms after the fault.*/\1/p' "$tmp/log/cumuxd.log" | sort -n)
n=$(echo "$rec" | grep -c .)
[ "$n" -eq "$faults" ] || fail "$n recoveries logged for $faults faults"
median=$(echo "$rec" | sed -n "$(((n + 1) / 2))p") top=$(echo "$rec" | tail -n 1)
for ((i = 0; i < 100; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
"$cli" status | grep -q '^clients: 0$' || fail "clients left: $("$cli" status)"
# What is left: the supervisor, the serving worker and (with a standby) the standby, once the last faulted
# worker has ended.
want=2
[ $standby = on ] && want=3
for ((i = 0; i < 200; i++)); do [ "$(pids_of_ours | wc -l)" -eq $want ] && break; sleep 0.05; done
[ "$(pids_of_ours | wc -l)" -eq $want ] || fail "server processes: $(pids_of_ours | tr '\n' ' ') (want $want)"
now=$(mem_used)
[ -n "$base" ] && [ -n "$now" ] && [ $((now - base)) -le 64 ] ||
    fail "device memory in use: $base MiB before, $now MiB after; $("$cli" status | grep -i 'outside the worker');" \
        "by process: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr '\n' ' ')"
echo "fault soak: $faults faults (standby $standby): serving again after median $median ms, worst $top ms;" \
    "a program served within $worst ms (worst); memory in use $base -> $now MiB; $(pids_of_ours | wc -l) server processes"
# On a GPU: the device memory each server process holds (the standby gives its stacks back while it waits).
if command -v nvidia-smi >/dev/null 2>&1; then
    apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
    gpu=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
    per=""
    for p in $(pids_of_ours); do
        m=$(echo "$apps" | awk -F', *' -v p="$p" '$1 == p { print $2 }')
        [ -n "$m" ] || continue
        role=standby
        [ "$p" = "$gpu" ] && role=serving
        per="$per $role $m MiB;"
    done
    echo "fault soak: device memory by server process:${per:- none listed}"
fi
if [ $contain = 1 ]; then
    # How long after each fault (the worker's record of it) each bystander was back with all it held made
    # again (its shim's line): the service's recovery for the programs that were running.
    backs=$( { sed -n 's/^\([0-9:.]*\) cumuxd\[[0-9]*\]: GPU [0-9]*: .*culprit: .*takes over$/F \1/p' "$tmp/log/cumuxd.log"
               cat "$tmp"/by.*.out | sed -n 's/^\([0-9:.]*\) cumux\[[0-9]*\]: .* back as client .*/B \1/p'; } |
        awk '{ split($2, t, ":"); print (t[1] * 3600 + t[2] * 60 + t[3]) * 1000, $1 }' | sort -n |
        awk '$2 == "F" { f = $1 } $2 == "B" && f != "" { print int($1 - f) }' | sort -n)
    nb=$(echo "$backs" | grep -c .)
    back_med=$(echo "$backs" | sed -n "$(((nb + 1) / 2))p") back_top=$(echo "$backs" | tail -n 1)
    echo "fault soak: bystanders ($nby programs computing through the faults): $ok ended right, $bad failed;" \
        "came back $back times in all, $rounds rounds right, $lost lost at faults (said, done again);" \
        "back after a fault in median ${back_med:-?} ms, worst ${back_top:-?} ms"
else
    echo "fault soak: bystanders ($nby loops of gpu_vecadd): $ok runs passed, $bad failed"
fi
# The culprit named at every fault: gpu_fault, however many others had kernels in flight.
named=$(grep -c 'culprit: [0-9]* pid [0-9]* uid [0-9]* [^;]*gpu_fault' "$tmp/log/cumuxd.log")
echo "fault soak: the culprit named at $named of $faults faults"
# And never a bystander: one named the culprit is told the fault and loses what it held.
wrong=$(grep 'culprit: [0-9]* pid' "$tmp/log/cumuxd.log" | grep -v 'culprit: [0-9]* pid [0-9]* uid [0-9]* [^;]*gpu_fault')
[ -z "$wrong" ] || fail "a bystander was named the culprit: $wrong"
[ $dumps = 1 ] && [ "$named" -ne "$faults" ] && fail "the culprit was named at $named of $faults faults"
[ "${REQUIRE_BYSTANDERS:-0}" = 1 ] && [ $bad -gt 0 ] && fail "$bad bystander runs failed"
"$cli" stop >/dev/null || fail "cumux stop"
for ((i = 0; i < 100; i++)); do [ -z "$(pids_of_ours)" ] && break; sleep 0.05; done
[ -z "$(pids_of_ours)" ] || fail "cumuxd processes left after stop: $(pids_of_ours)"
echo "PASS fault_soak"
