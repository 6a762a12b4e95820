#!/usr/bin/env bash
# Device memory limits (issue 11): a program given a limit (`cumux run --memory`, CUMUX_MEMORY_LIMIT, MPS's
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, the server's CUMUX_DEFAULT_MEMORY_LIMIT) sees a GPU of that size and
# gets CUDA_ERROR_OUT_OF_MEMORY past it whatever way it allocates (gpu_mem_limit checks each); `cumux set`
# changes it while the program runs; `cumux status` shows it; a neighbour without a limit is untouched;
# malformed limits are refused, never taken as none. On the fake driver in CI; on a GPU the same script.
# usage: test_mem_limit.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby hold.out
M=$((1 << 20))
start_server() {
    LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null
}
expect_pass() { # WHAT CMD...: the command's output must end in a PASS line
    local out
    out=$("$@" 2>&1) || fail "$1... ($*): exit $?: $out"
    echo "$out" | grep -q '^PASS' || fail "$*: no PASS: $out"
}

start_server || fail "cumux start"
# 1. cumux run --memory; the MPS variable, its device 0 entry.
expect_pass "$cli" run --memory 64M -- "$gdir/gpu_mem_limit" $((64 * M))
expect_pass env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="1=8G,0=32M" "$cli" run -- "$gdir/gpu_mem_limit" $((32 * M))
expect_pass env CUMUX_MEMORY_LIMIT=40M "$cli" run -- "$gdir/gpu_mem_limit" $((40 * M))
# 2. Malformed limits are refused, not taken as none.
"$cli" run --memory 12Q -- true 2>"$tmp/err" && fail "cumux run --memory 12Q ran"
grep -q 'not a size' "$tmp/err" || fail "cumux run --memory 12Q: $(cat "$tmp/err")"
out=$(CUMUX_MEMORY_LIMIT=lots "$cli" run -- "$gdir/gpu_mem_limit" $((64 * M)) 2>&1) &&
    fail "CUMUX_MEMORY_LIMIT=lots: the program ran: $out"
echo "$out" | grep -q 'CUMUX_MEMORY_LIMIT=lots is not a size' || fail "CUMUX_MEMORY_LIMIT=lots: $out"
out=$(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=" "$cli" run -- "$gdir/gpu_mem_limit" $((64 * M)) 2>&1) &&
    fail "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=: the program ran: $out"
# 3. cumux set while it runs; cumux status shows the limit; a neighbour without one is untouched.
mkfifo "$tmp/in" || fail "mkfifo"
"$cli" run --memory 64M -- "$gdir/gpu_mem_limit" $((64 * M)) --then $((32 * M)) <"$tmp/in" >"$tmp/hold.out" 2>&1 &
client=$!
exec 3>"$tmp/in"
for ((i = 0; i < 300; i++)); do
    grep -q '^HOLDING' "$tmp/hold.out" && break
    kill -0 "$client" 2>/dev/null || fail "gpu_mem_limit --then ended before it held"
    sleep 0.1
done
grep -q '^HOLDING' "$tmp/hold.out" || fail "gpu_mem_limit --then did not hold in 30 s"
row() { "$cli" status | awk -v p="$client" '$2 == p'; }
[ "$(row | awk '{print $4, $5}')" = "16.0 64.0" ] || fail "status row of $client: $(row) (want 16.0 MiB held, limit 64.0)"
expect_pass "$cli" run -- "$gdir/gpu_vecadd"
"$cli" set "$client" --memory 32M >"$tmp/set.out" || fail "cumux set: $(cat "$tmp/set.out")"
grep -q "limit 32.0 MiB" "$tmp/set.out" || fail "cumux set said: $(cat "$tmp/set.out")"
[ "$(row | awk '{print $5}')" = "32.0" ] || fail "status row after cumux set: $(row)"
echo go >&3
exec 3>&-
wait "$client" || fail "gpu_mem_limit --then: exit $?"
client=""
grep -q '^PASS' "$tmp/hold.out" || fail "gpu_mem_limit --then did not pass"
# PyTorch, where the GPU and PyTorch are there (issue 11's figure): 4 GiB seen, out of memory past it, also
# with expandable segments; a neighbour without a limit, training meanwhile, untouched.
fw="$(dirname "${BASH_SOURCE[0]}")/frameworks"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    "$cli" run -- python3 "$fw/torch_train.py" >"$tmp/neighbour.out" 2>&1 &
    nb=$!
    for mode in plain expandable; do
        "$cli" run --memory 4G -- python3 "$fw/torch_mem_limit.py" 4 $mode >"$tmp/torch.$mode.out" 2>&1 ||
            fail "torch_mem_limit.py 4 $mode: $(tail -5 "$tmp/torch.$mode.out")"
        echo "mem_limit: PyTorch under --memory 4G ($mode allocator): $(grep '^PASS' "$tmp/torch.$mode.out")"
    done
    wait $nb || fail "the neighbour torch_train failed: $(tail -5 "$tmp/neighbour.out")"
    echo "mem_limit: the neighbour without a limit, training meanwhile: $(grep '^PASS' "$tmp/neighbour.out")"
else
    echo "mem_limit: SKIP the PyTorch part (no PyTorch with a GPU here)"
fi
"$cli" set 2147483647 --memory 1G >/dev/null && fail "cumux set of a pid with no client succeeded"
"$cli" set "$$" --memory 1Q 2>/dev/null && fail "cumux set --memory 1Q succeeded"
"$cli" set x --memory 1G 2>/dev/null && fail "cumux set x succeeded"
"$cli" stop >/dev/null || fail "cumux stop"
# 4. The server's default: every client at most that, asking for more or nothing; less is taken.
CUMUX_DEFAULT_MEMORY_LIMIT=48M start_server || fail "cumux start with a default limit"
expect_pass "$cli" run -- "$gdir/gpu_mem_limit" $((48 * M))
expect_pass "$cli" run --memory 64M -- "$gdir/gpu_mem_limit" $((48 * M))
expect_pass "$cli" run --memory 32M -- "$gdir/gpu_mem_limit" $((32 * M))
"$cli" stop >/dev/null || fail "cumux stop"
CUMUX_DEFAULT_MEMORY_LIMIT=huge start_server 2>/dev/null && fail "cumuxd started with CUMUX_DEFAULT_MEMORY_LIMIT=huge"
echo "PASS mem_limit"
