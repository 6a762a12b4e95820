#!/bin/sh
# The tracing libcuda.so.1 and `cumux trace` (docs/trace.md), with trace_prog (cuDriverGetVersion,
# cuGetProcAddress_v2 and a call through its pointer, cuGetErrorName, cuInit):
#   1. the library alone against the shim, no server (private pipe directory): cuInit = 805;
#   2. `cumux trace -o FILE` and `CUMUX_TRACE=1 cumux run` against a server serving no GPU;
#   3. `cumux trace --native`, which must skip cumux's directories on LD_LIBRARY_PATH and find the
#      stand-in driver (trace_fake_driver.c) as NVIDIA's;
#   4. usage errors.
# Each trace must have a line per call with arguments and result, the call made through the pointer
# included, and a summary with the right counts.
# usage: test_trace.sh CUMUX_CLI TRACE_PROG SHIM_LIB FAKE_DRIVER_DIR NOGPU_DRIVER_DIR WITH_NOGPU_SERVER
set -u
[ $# -eq 6 ] || { echo "usage: $0 CUMUX_CLI TRACE_PROG SHIM_LIB FAKE_DRIVER_DIR NOGPU_DRIVER_DIR WITH_NOGPU_SERVER" >&2; exit 2; }
cli=$1 prog=$2 shim=$3 fake=$4 nogpu=$5 with_server=$6
shim_dir=$(cd "$(dirname "$shim")" && pwd -P)
trace_dir=$shim_dir/trace
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
status=0

fail() {
    echo "FAIL: $*"
    status=1
}

# expect FILE COUNT ERE: COUNT lines of FILE match ERE.
expect() {
    n=$(grep -cE -- "$3" "$1")
    [ "$n" -eq "$2" ] || fail "$1: $n lines match, not $2: $3"
}

# A line of the trace: time since start, thread id, the call.
P='^ *[0-9]+\.[0-9]{6} [0-9]+ '
X='0x[0-9a-f]+'

# check_trace FILE VERSION INIT_RESULT INIT_NAME TARGET: the lines and the summary of one trace_prog run.
check_trace() {
    f=$1 v=$2 init=$3 init_name=$4 target=$5
    expect "$f" 1 "^cumux trace: pid [0-9]+ \\(.*trace_prog\\) tracing $target \\([0-9]+ of 637 entry points\\)$"
    expect "$f" 2 "${P}cuDriverGetVersion\\(driverVersion=$X->$v\\) = 0 CUDA_SUCCESS \\([0-9.]+ [mu]?s\\)$"
    expect "$f" 1 "${P}cuGetProcAddress_v2\\(symbol=\"cuDriverGetVersion\", pfn=$X->$X, cudaVersion=12000, flags=0x0, symbolStatus=$X->0\\) = 0 CUDA_SUCCESS \\([0-9.]+ [mu]?s\\) \\[pfn: cuDriverGetVersion, traced\\]$"
    expect "$f" 1 "${P}cuGetErrorName\\(error=1, pStr=$X->\"CUDA_ERROR_INVALID_VALUE\"\\) = 0 CUDA_SUCCESS \\("
    expect "$f" 1 "${P}cuInit\\(Flags=0x0\\) = $init $init_name \\("
    # The second cuDriverGetVersion (through the pointer) comes after cuGetProcAddress_v2.
    order=$(grep -oE "cuDriverGetVersion\\(|cuGetProcAddress_v2\\(|cuGetErrorName\\(|cuInit\\(" "$f" | tr -d '(' | tr '\n' ' ')
    [ "$order" = "cuDriverGetVersion cuGetProcAddress_v2 cuDriverGetVersion cuGetErrorName cuInit " ] ||
        fail "$f: calls in the wrong order: $order"
    errors=0
    [ "$init" -eq 0 ] || errors=1
    expect "$f" 1 "^cumux trace: summary of pid [0-9]+: 5 calls of 4 functions, $errors errors, [0-9.]+ s in calls$"
    expect "$f" 1 "^  cuDriverGetVersion +2 +0 +[0-9.]+ +[0-9.]+$"
    expect "$f" 1 "^  cuGetProcAddress_v2 +1 +0 +[0-9.]+ +[0-9.]+$"
    expect "$f" 1 "^  cuGetErrorName +1 +0 +[0-9.]+ +[0-9.]+$"
    expect "$f" 1 "^  cuInit +1 +$errors +[0-9.]+ +[0-9.]+$"
    # Nothing else: the header, 5 calls, the summary's 2 header lines and 4 rows.
    expect "$f" 12 "."
}

# ---- 1. the library alone, against the shim, no server ----
mkdir -m 700 "$tmp/no-server"
CUMUX_PIPE_DIRECTORY="$tmp/no-server" LD_LIBRARY_PATH="$trace_dir" CUMUX_TRACE_TARGET="$shim" \
    CUMUX_TRACE_FILE="$tmp/t1" "$prog" >"$tmp/out1" 2>"$tmp/err1" || fail "trace_prog (no server) exited $?"
grep -qx "version 13000 via-pointer 13000 name CUDA_ERROR_INVALID_VALUE init 805" "$tmp/out1" ||
    fail "trace_prog (no server) printed: $(cat "$tmp/out1")"
check_trace "$tmp/t1" 13000 805 CUDA_ERROR_MPS_CONNECTION_FAILED "$shim"
# The shim's own message stays on stderr, out of the trace.
grep -q "cannot reach cumuxd" "$tmp/err1" || fail "no message from the shim on stderr: $(cat "$tmp/err1")"

# ---- 2. cumux trace -o and CUMUX_TRACE=1 cumux run, with a server serving no GPU ----
export TT_CLI="$cli" TT_PROG="$prog" TT_TMP="$tmp"
"$with_server" "$cli" "$nogpu" -- sh -c '
    "$TT_CLI" trace -o "$TT_TMP/t2" -- "$TT_PROG" >"$TT_TMP/out2" || exit 1
    CUMUX_TRACE=1 "$TT_CLI" run -- "$TT_PROG" >"$TT_TMP/out3" 2>"$TT_TMP/t3" || exit 1
    "$TT_CLI" trace --output="$TT_TMP/t4" "$TT_PROG" >/dev/null' || fail "runs with the server failed"
for k in 2 3; do
    grep -qx "version 13000 via-pointer 13000 name CUDA_ERROR_INVALID_VALUE init 0" "$tmp/out$k" ||
        fail "trace_prog (run $k) printed: $(cat "$tmp/out$k")"
    check_trace "$tmp/t$k" 13000 0 CUDA_SUCCESS "$shim_dir/libcuda.so.1"
done
expect "$tmp/t4" 1 "${P}cuInit\\(Flags=0x0\\) = 0 CUDA_SUCCESS \\("

# ---- 3. --native: cumux's own directories are skipped, the first other libcuda.so.1 is traced ----
LD_LIBRARY_PATH="$shim_dir:$trace_dir:$fake" "$cli" trace --native -o "$tmp/t5" -- "$prog" >"$tmp/out5" 2>&1 ||
    fail "cumux trace --native exited $?: $(cat "$tmp/out5")"
grep -qx "version 12345 via-pointer 12345 name CUDA_ERROR_INVALID_VALUE init 0" "$tmp/out5" ||
    fail "trace_prog (native) printed: $(cat "$tmp/out5")"
check_trace "$tmp/t5" 12345 0 CUDA_SUCCESS "$fake/libcuda.so.1"

# ---- 4. usage ----
"$cli" trace >/dev/null 2>&1
[ $? -eq 2 ] || fail "cumux trace without a command: not exit status 2"
"$cli" trace --bogus -- true >/dev/null 2>&1
[ $? -eq 2 ] || fail "cumux trace --bogus: not exit status 2"

if [ $status -ne 0 ]; then
    for f in "$tmp"/t*; do
        echo "---- $f ----"
        cat "$f"
    done
else
    echo "ok: cumux trace against the shim (no server, a server with no GPU, CUMUX_TRACE=1 run) and --native"
fi
exit $status
