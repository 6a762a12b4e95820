#!/usr/bin/env bash
# Library kernels launched through their function in the context (server/launch.c, CUMUX_LAUNCH_FUNCTIONS=1):
# the fake driver gives each kernel's function a handle of its own, as the real driver does, and counts
# which of the two each launch of a library kernel named (CUMUX_FAKE_LAUNCH_COUNTS). With the setting on,
# gpu_vecadd (which also raises its kernel's shared memory after the first launch, on the kernel and on its
# function) and gpu_cache_config (preferences changed between launches) pass with every launch made by
# function; with it off, every launch names the kernel. gpu_graph (captures, which keep the kernel) passes
# with it on.
# usage: test_launch_functions.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby out
counts="$tmp/launches"

# count NAME: the named count from the fake's file, once it has been rewritten after the programs ended.
count() { sed -n "s/^$1 //p" "$counts"; }
run_progs() { # SETTING PROGRAM...
    local on=$1 p
    shift
    rm -f "$counts"
    start_ours CUMUX_LAUNCH_FUNCTIONS="$on" CUMUX_FAKE_LAUNCH_COUNTS="$counts"
    for p in "$@"; do
        "$cli" run -- "$gdir/gpu_$p" >"$tmp/out" 2>&1 || fail "gpu_$p failed with CUMUX_LAUNCH_FUNCTIONS=$on"
        grep -q '^PASS' "$tmp/out" || fail "gpu_$p did not pass with CUMUX_LAUNCH_FUNCTIONS=$on"
    done
    sleep 0.3 # the fake rewrites its counts every 100 ms
    [ -s "$counts" ] || fail "the fake driver wrote no launch counts"
    by_kernel=$(count launches_by_kernel) by_function=$(count launches_by_function)
    stop_ours
}

run_progs 1 vecadd cache_config
[ "${by_function:-0}" -gt 0 ] && [ "${by_kernel:-x}" = 0 ] ||
    fail "with CUMUX_LAUNCH_FUNCTIONS=1: $by_function launches by function, $by_kernel by kernel (want some, and none)"
on_function=$by_function
run_progs 0 vecadd cache_config
[ "${by_kernel:-0}" -gt 0 ] && [ "${by_function:-x}" = 0 ] ||
    fail "with CUMUX_LAUNCH_FUNCTIONS=0: $by_kernel launches by kernel, $by_function by function (want some, and none)"
[ "$by_kernel" = "$on_function" ] || fail "$on_function launches by function with the setting on, $by_kernel by kernel off"
run_progs 1 graph
echo "PASS test_launch_functions: $on_function library launches by function with the setting on, by kernel off"
