#!/usr/bin/env bash
# What cumux says each client used (issue 11): GPU time estimated by the server from sampled launches
# (server/usage.c), shown by `cumux status` (gpu_s), `cumux top --once --json` and its screen. Two clients
# of known GPU time (gpu_busy: kernels of a known length, each checked to have run): their figures must
# come within a factor of two of the truth, the light one's stay small, and top's share of a client that
# keeps the GPU busy during its window must be near 100%. On the fake driver in CI; on a GPU the same.
# usage: test_usage.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby '*.out'
heavy="" light=""
own_server_cleanup_more() { for p in $heavy $light; do kill -KILL "$p" 2>/dev/null; done; own_server_cleanup; }
trap own_server_cleanup_more EXIT
start_ours
mkfifo "$tmp/heavy.in" "$tmp/light.in" || fail "mkfifo"
# heavy: 1500 kernels of 0.4 ms (0.6 s of GPU time: a sample ends every ~25 ms, so top's window of 0.3 s
# is measured to ~10%); light: 150 of 0.05 ms (7.5 ms).
"$cli" run -- "$gdir/gpu_busy" 0.4 1500 <"$tmp/heavy.in" >"$tmp/heavy.out" 2>&1 &
heavy=$!
"$cli" run -- "$gdir/gpu_busy" 0.05 150 <"$tmp/light.in" >"$tmp/light.out" 2>&1 &
light=$!
exec 3>"$tmp/heavy.in" 4>"$tmp/light.in"
# While heavy runs: top's share for it.
sleep 0.2
json=$("$cli" top --once --json --interval 0.3) || fail "cumux top --once --json: $json"
for ((i = 0; i < 300; i++)); do
    grep -q '^busy: done' "$tmp/heavy.out" && grep -q '^busy: done' "$tmp/light.out" && break
    sleep 0.1
done
grep -q '^busy: done' "$tmp/heavy.out" && grep -q '^busy: done' "$tmp/light.out" || fail "gpu_busy did not finish"
gpu_s() { "$cli" status | awk -v p="$1" '$2 == p { print $9 }'; }
h=$(gpu_s "$heavy") l=$(gpu_s "$light")
# On the fake driver the timings stretch with the machine's load (its kernels are CPU threads): 0.79-0.90 s
# alone on a 2-core machine, 1.24 s with a build beside it. On a GPU device-check runs the same test.
awk -v h="$h" 'BEGIN { exit !(h >= 0.3 && h <= 1.6) }' || fail "heavy client: gpu_s $h, want about 0.6: $("$cli" status)"
awk -v l="$l" 'BEGIN { exit !(l < 0.25) }' || fail "light client: gpu_s $l, want about 0.0075: $("$cli" status)"
# top's JSON while heavy was busy: its share near 100% (the fake runs one kernel at a time a stream). The
# window is 0.3 s of a dozen samples: on a loaded 2-core machine the fake's kernels (CPU spins) stretch
# when descheduled and a sample or two more or less lands in it (169% seen in CI), hence the wide bound.
share=$(python3 -c 'import json, sys
d = json.loads(sys.argv[1])
c = [c for c in d["clients"] if c["pid"] == int(sys.argv[2])]
print(c[0]["gpu_share_pct"] if c else "missing")' "$json" "$heavy") || fail "top's JSON does not parse: $json"
[ "$share" != missing ] || fail "top's JSON lists no client $heavy: $json"
awk -v s="$share" 'BEGIN { exit !(s >= 40 && s <= 250) }' || fail "heavy client's share during its run: $share%: $json"
# top's screen, once.
screen=$("$cli" top --once --interval 0.2) || fail "cumux top --once"
echo "$screen" | grep -q "^ *$heavy .*gpu_busy 0.4 1500" || fail "top's screen lacks the heavy client: $screen"
echo go >&3
echo go >&4
exec 3>&- 4>&-
wait "$heavy" || fail "gpu_busy (heavy) failed"
wait "$light" || fail "gpu_busy (light) failed"
heavy="" light=""
echo "usage: heavy client ${h} s of GPU time (0.6 s run), light ${l} s (0.0075 s); top's share of the heavy one while it ran: ${share}%"
echo "PASS usage"
