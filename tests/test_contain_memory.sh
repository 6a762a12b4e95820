#!/usr/bin/env bash
# Client memory in VMM chunks (CUMUX_CONTAIN=1, server/chunks.c; issue 10's first step): the server says
# it keeps clients' memory in an arena; the GPU suite's programs, which allocate and free every way
# (cuMemAlloc, stream-ordered, pools, graphs, a killed client's gigabyte), give their results with it; their
# memory was in chunks and all of it comes back when they end; IPC export of chunk memory is refused and
# said (not supported yet). On the fake driver in CI (the oracle faults any access to unmapped memory, so a
# chunk unmapped too early fails a program); on a GPU the same script.
# usage: test_contain_memory.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0 CUMUX_DEBUG=1 CUMUX_FAKE_MEMORY_MB=4096
log="$tmp/log/cumuxd.log"
fail_show="$tmp/run.out"
CUMUX_CONTAIN=1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start"
grep -q "clients' device memory in VMM chunks of an arena" "$log" || fail "no arena said: $(grep -i arena "$log")"
used() { "$cli" status | sed -n 's/^GPU 0: .*memory \([0-9]*\) MiB used.*/\1/p'; }
before=$(used)
for p in gpu_vecadd gpu_matmul gpu_memcpy gpu_memcpy2d gpu_memset gpu_events gpu_graph gpu_multithread \
    gpu_stream_memops gpu_legacy_stream gpu_idle_known gpu_uva_disjoint gpu_managed gpu_module_globals \
    gpu_hostfn gpu_two_clients gpu_client_killed gpu_array gpu_link gpu_tensor_map gpu_vmm; do
    timeout 120 "$cli" run -- "$gdir/$p" >"$tmp/run.out" 2>&1 || fail "$p with memory in chunks"
done
grep -q "its device memory was in VMM chunks" "$log" || fail "no client's memory was in chunks"
if "$cli" run -- "$gdir/gpu_ipc" >"$tmp/run.out" 2>&1; then
    fail "gpu_ipc passed: IPC of chunk memory should be refused until it is supported"
fi
grep -q "cuIpcGetMemHandle(.*) returned 801" "$tmp/run.out" || fail "IPC refused otherwise than NOT_SUPPORTED"
grep -q "cuIpcGetMemHandle: not supported yet for memory that outlives the worker" "$log" || fail "the refusal not said"
for ((i = 0; i < 50; i++)); do "$cli" status | grep -q '^clients: 0$' && break; sleep 0.1; done
after=$(used)
[ -n "$before" ] && [ "$after" = "$before" ] || fail "device memory in use $before MiB before, $after MiB after"
"$cli" stop >/dev/null || fail "cumux stop"
echo "PASS contain_memory"
