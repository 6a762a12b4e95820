#!/usr/bin/env bash
# Reserved SMs and thread percentages (issue 11; server/placement.c): a client run with --sms N gets SMs of
# its own, and another client's kernels, started while it holds them, never run there; `cumux status`
# shows each client's SMs; `cumux set --sms none` gives the SMs back and the holder's next kernels run on
# every SM again; `cumux set --threads P` caps it at P% (rounded up to whole SM groups) from its next
# kernel; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE does it from the start; a reservation that cannot be had is
# refused and said. Which SMs a kernel ran on is read on the device (gpu_sm_ids: %smid on a GPU; the
# SMs of its stream's green context on the fake driver in CI).
# usage: test_sms.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0 CUMUX_DEBUG=1
fail_show="$tmp/a.out $tmp/b.out $tmp/c.out $tmp/set.out"
start_ours
nsm=$("$cli" status | sed -n 's/^GPU 0: .*, \([0-9]*\) SMs.*/\1/p')
[ -n "$nsm" ] || nsm=$("$cli" status | grep -o '[0-9]* SMs' | head -1 | cut -d' ' -f1)
[ -n "$nsm" ] && [ "$nsm" -gt 16 ] || fail "no SM count in cumux status: $("$cli" status)"
# sms_of FILE K: the SM list of the K-th "sms:" line of FILE, waiting up to 30 s for it (else empty).
sms_of() {
    local i l
    for ((i = 0; i < 300; i++)); do
        l=$(grep '^sms: ' "$1" | sed -n "$2p")
        [ -n "$l" ] && { echo "${l#sms: *: }"; return 0; }
        sleep 0.1
    done
}
count() { tr ',' '\n' <<<"$1" | grep -c .; }
overlap() { comm -12 <(tr ',' '\n' <<<"$1" | sort) <(tr ',' '\n' <<<"$2" | sort) | tr '\n' ' '; }
status_sms() { "$cli" status | awk -v p="$1" '$2 == p { print $11 }'; }

# A holds 16 SMs (rounded up to whole groups) over three rounds, told when to go on.
mkfifo "$tmp/a.in" || fail "mkfifo"
"$cli" run --sms 16 -- "$gdir/gpu_sm_ids" 3 <"$tmp/a.in" >"$tmp/a.out" 2>&1 &
client=$!
exec 3>"$tmp/a.in"
a1=$(sms_of "$tmp/a.out" 1)
[ -n "$a1" ] || fail "A printed no SMs"
# The driver's group size, as the server found it.
per=$(sed -n 's/.*SMs in [0-9]* groups of \([0-9]*\) for reservations.*/\1/p' "$tmp/log/cumuxd.log" | head -1)
[ -n "$per" ] && [ "$per" -ge 1 ] || fail "the server logged no SM groups"
na=$(count "$a1")
st=$(status_sms "$client")
[[ "$st" == *r ]] && [ "${st%r}" -ge 16 ] && [ "${st%r}" -lt $((16 + per)) ] ||
    fail "status shows A's SMs as '$st' (16 asked for, groups of $per)"
[ "$na" -ge 1 ] && [ "$na" -le "${st%r}" ] || fail "A reserved ${st%r} SMs but ran on $na: $a1"
# B, no reservation, meanwhile: never on A's SMs.
"$cli" run -- "$gdir/gpu_sm_ids" 1 >"$tmp/b.out" 2>&1 </dev/null || fail "B failed"
b1=$(sms_of "$tmp/b.out" 1)
[ -n "$b1" ] || fail "B printed no SMs"
[ -z "$(overlap "$a1" "$b1")" ] || fail "B ran on A's reserved SMs: $(overlap "$a1" "$b1")"
[ "$(count "$b1")" -gt 16 ] || fail "B ran on only $(count "$b1") SMs: $b1"
# A gives its SMs back: its next kernel runs on more than it held.
"$cli" set "$client" --sms none >"$tmp/set.out" 2>&1 || fail "cumux set --sms none"
echo go >&3
a2=$(sms_of "$tmp/a.out" 2)
[ -n "$a2" ] || fail "A printed no second round"
[ "$(count "$a2")" -gt 16 ] || fail "A after --sms none: $(count "$a2") SMs"
# A capped at 25%: at most a quarter of the SMs, rounded up to whole groups.
"$cli" set "$client" --threads 25 >"$tmp/set.out" 2>&1 || fail "cumux set --threads 25"
cap=$(( (nsm * 25 + 99) / 100 ))
cap=$(( (cap + per - 1) / per * per ))
echo go >&3
a3=$(sms_of "$tmp/a.out" 3)
[ -n "$a3" ] || fail "A printed no third round"
[ "$(count "$a3")" -le "$cap" ] || fail "A at 25% ran on $(count "$a3") SMs (at most $cap)"
exec 3>&-
wait "$client" || fail "A failed"
client=""
# A kernel in thread-block clusters larger than a reservation holds (PyTorch's under --sms 16 on the
# H200): it runs, on every SM, in its stream's order, and that is said; the reservation stays.
"$cli" run --sms 16 -- "$gdir/gpu_sm_ids" 1 2 cluster:16 >"$tmp/b.out" 2>&1 </dev/null
rc=$?
if [ $rc = 77 ]; then
    echo "clusters of 16: $(grep SKIP "$tmp/b.out")"
else
    [ $rc = 0 ] || fail "a kernel in clusters of 16 under --sms 16 failed"
    b1=$(sms_of "$tmp/b.out" 1)
    [ -n "$b1" ] || fail "the cluster program printed no SMs"
    if grep -q "thread-block clusters do not fit its 16 SMs: such kernels run on every SM" "$tmp/log/cumuxd.log"; then
        [ "$(count "$b1")" -gt 16 ] || fail "clusters outside the reservation ran on $(count "$b1") SMs: $b1"
        echo "clusters of 16 under --sms 16: refused by the reservation, ran on $(count "$b1") SMs"
    else
        [ "$(count "$b1")" -le 16 ] || fail "clusters held in the reservation ran on $(count "$b1") SMs: $b1"
        echo "clusters of 16 under --sms 16: held by the reservation, ran on $(count "$b1") SMs"
    fi
fi
# MPS's variable, from the start.
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 "$cli" run -- "$gdir/gpu_sm_ids" 1 >"$tmp/b.out" 2>&1 </dev/null ||
    fail "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 failed"
b1=$(sms_of "$tmp/b.out" 1)
[ -n "$b1" ] && [ "$(count "$b1")" -le "$cap" ] || fail "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25: SMs $b1"
# More than can be had: refused (said in the log), and the program runs on the shared SMs.
"$cli" run --sms "$nsm" -- "$gdir/gpu_sm_ids" 1 >"$tmp/b.out" 2>&1 </dev/null || fail "--sms $nsm failed"
grep -q "its SMs as asked cannot be had: $nsm SMs cannot be reserved" "$tmp/log/cumuxd.log" ||
    fail "an impossible reservation not said"
"$cli" run --sms 0 -- true 2>/dev/null && fail "cumux run --sms 0 ran"
# Fine groups (CUMUX_SM_GROUPS=fine): half the SMs each for two programs, exactly, disjoint.
"$cli" stop >/dev/null || fail "cumux stop"
CUMUX_SM_GROUPS=fine LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null ||
    fail "cumux start with CUMUX_SM_GROUPS=fine"
half=$((nsm / 2))
mkfifo "$tmp/c.in" || fail "mkfifo"
"$cli" run --sms "$half" -- "$gdir/gpu_sm_ids" 2 <"$tmp/c.in" >"$tmp/c.out" 2>&1 &
client=$!
exec 3>"$tmp/c.in"
a1=$(sms_of "$tmp/c.out" 1)
"$cli" run --sms "$half" -- "$gdir/gpu_sm_ids" 1 >"$tmp/b.out" 2>&1 </dev/null || fail "the second half failed"
b1=$(sms_of "$tmp/b.out" 1)
[ -n "$a1" ] && [ -n "$b1" ] && [ -z "$(overlap "$a1" "$b1")" ] || fail "halves overlap: $a1 / $b1"
[ "$(status_sms "$client")" = "${half}r" ] || fail "fine groups: the first half holds $(status_sms "$client")"
grep -q "client .*: SMs .* reserved ($half asked for)" "$tmp/log/cumuxd.log" || fail "no reservation of $half logged"
echo go >&3
exec 3>&-
wait "$client" || fail "the first half failed"
client=""
"$cli" set 1 --threads 101 2>/dev/null && fail "cumux set --threads 101 accepted"
echo "PASS sms"
