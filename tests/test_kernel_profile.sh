#!/usr/bin/env bash
# CUMUX_PROFILE=kernels (server/kernel_profile.c): when a client goes, the server logs its kernels' GPU time
# by kernel. A client of known GPU time (gpu_busy: 40 kernels "spin_flag" of 2 ms, each checked to have run)
# must be logged with its 40 launches timed, 40 of spin_flag, at 2 ms each within what the machine allows
# (the fake driver's kernels are CPU threads: 1.5-20 ms). On the fake driver in CI; on a GPU the same.
# usage: test_kernel_profile.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby busy.out
start_ours CUMUX_PROFILE=kernels
echo | "$cli" run -- "$gdir/gpu_busy" 2 40 >"$tmp/busy.out" 2>&1 || fail "gpu_busy failed"
grep -q '^busy: done' "$tmp/busy.out" || fail "gpu_busy did not finish"
log="$tmp/log/cumuxd.log"
for ((i = 0; i < 100; i++)); do grep -q 'kernels: .* launches timed' "$log" && break; sleep 0.1; done
total=$(grep -o 'kernels: [0-9]* launches timed' "$log" | awk '{print $2}')
[ "$total" = 40 ] || fail "launches timed: '${total}', want 40"
line=$(grep 'kernel .* launches, .* us each: spin_flag' "$log") || fail "no line for spin_flag"
n=$(sed -n 's/.*ms in all, \([0-9]*\) launches.*/\1/p' <<<"$line")
each=$(sed -n 's/.*launches, \([0-9.]*\) us each.*/\1/p' <<<"$line")
[ "$n" = 40 ] || fail "spin_flag: $n launches, want 40: $line"
awk -v e="$each" 'BEGIN { exit !(e >= 1500 && e <= 20000) }' || fail "spin_flag: $each us each, want about 2000: $line"
# Without CUMUX_PROFILE=kernels nothing is timed.
"$cli" stop >/dev/null
start_ours
echo | "$cli" run -- "$gdir/gpu_busy" 2 5 >"$tmp/busy.out" 2>&1 || fail "gpu_busy failed (2)"
sleep 0.3
[ "$(grep -c 'launches timed' "$log")" = 1 ] || fail "kernels timed without CUMUX_PROFILE=kernels"
echo "PASS test_kernel_profile: 40 launches timed, spin_flag $each us each"
