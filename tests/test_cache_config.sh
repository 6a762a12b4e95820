#!/usr/bin/env bash
# Cache preferences under cumux (shim/module.c shim_cache_config_sync): gpu_cache_config changes the
# preference in effect for its kernel 4 times (context, function, back to the context, none); each must
# reach the server once, as one FUNC_SET_CACHE_CONFIG command before the next launch, and none more (the
# server's profile, CUMUX_PROFILE=1, counts them). On the fake driver in CI; on a GPU the same.
# usage: test_cache_config.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby cache.out
start_ours CUMUX_PROFILE=1
ASAN_OPTIONS=detect_leaks=0 "$cli" run -- "$gdir/gpu_cache_config" >"$tmp/cache.out" 2>&1 || fail "gpu_cache_config failed"
grep -q '^PASS' "$tmp/cache.out" || fail "gpu_cache_config did not pass"
log="$tmp/log/cumuxd.log"
for ((i = 0; i < 100; i++)); do grep -q 'profile: FUNC_SET_CACHE_CONFIG' "$log" && break; sleep 0.1; done
n=$(sed -n 's/.*profile: FUNC_SET_CACHE_CONFIG: \([0-9]*\) commands.*/\1/p' "$log")
[ "$n" = 4 ] || fail "FUNC_SET_CACHE_CONFIG sent ${n:-0} times, want 4"
echo "PASS test_cache_config: 4 changes of preference, 4 commands"
