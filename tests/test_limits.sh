#!/usr/bin/env bash
# The limits of the one shared context (server/context.c): a program may raise one (here the stack);
# while it runs, another that asks for less does not lower it; once every program that raised it has
# gone, it is back where it was, and with it the device memory: on an H200 a 4 KiB stack held ~800 MiB
# (local memory for every resident thread) long after its program had gone. On the fake driver in CI; on
# a GPU the same script, which also says the device memory in use before, while raised and after.
# usage: test_limits.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby run.out hold.out
used() { "$cli" status | sed -n 's/^GPU 0: .* memory \([0-9]*\) MiB used.*/\1/p'; }
stack() { "$cli" run -- "$gdir/gpu_limits" read >"$tmp/run.out" 2>&1 || fail "gpu_limits read"; sed -n 's/^stack //p' "$tmp/run.out"; }
idle() {
    for ((i = 0; i < 100; i++)); do "$cli" status | grep -q '^clients: 0$' && return; sleep 0.05; done
    fail "clients left: $("$cli" status)"
}
start_ours
base=$(stack)
[ -n "$base" ] && [ "$base" -gt 0 ] || fail "no stack limit read: $(cat "$tmp/run.out")"
idle
mem0=$(used)
high=$((base * 4))
# One program raises it and goes: it comes back down.
"$cli" run -- "$gdir/gpu_limits" raise $high >"$tmp/run.out" 2>&1 || fail "gpu_limits raise $high"
idle
[ "$(stack)" = "$base" ] || fail "stack limit $(stack) after the program that raised it to $high went, was $base"
grep -q "gone: GPU 0 stack size back from $high to $base" "$tmp/log/cumuxd.log" || fail "the server did not say the stack came back"
# One holds it raised: another asking for less does not lower it, nor does its going.
mkfifo "$tmp/in" || fail "mkfifo"
"$cli" run -- "$gdir/gpu_limits" raise $high hold <"$tmp/in" >"$tmp/hold.out" 2>&1 &
client=$!
exec 3>"$tmp/in"
for ((i = 0; i < 200; i++)); do grep -q '^raised' "$tmp/hold.out" && break; sleep 0.05; done
grep -q '^raised' "$tmp/hold.out" || fail "the holder did not raise its limit"
mem1=$(used)
"$cli" run -- "$gdir/gpu_limits" raise $((base * 2)) >"$tmp/run.out" 2>&1 || fail "gpu_limits raise $((base * 2))"
[ "$(stack)" -ge "$high" ] || fail "stack limit $(stack) while a program holds $high"
echo go >&3
exec 3>&-
wait "$client" || fail "the holder failed"
client=""
idle
[ "$(stack)" = "$base" ] || fail "stack limit $(stack) after the holder went, was $base"
mem2=$(used)
# On a GPU the memory the raise took comes back (on the fake driver the figures do not move).
[ -n "$mem0" ] && [ -n "$mem2" ] && [ $((mem2 - mem0)) -le 64 ] ||
    fail "device memory in use: $mem0 MiB before, $mem2 MiB after the programs that raised the stack went"
"$cli" stop >/dev/null || fail "cumux stop"
echo "limits: stack $base bytes, raised to $high and back; device memory in use $mem0 MiB, $mem1 MiB while raised, $mem2 MiB after"
echo "PASS limits"
