#!/usr/bin/env bash
# The framework suite: each program checks its own results (against the CPU, NumPy or eager execution)
# and prints PASS, FAIL or SKIP (framework not installed). Runs natively and/or under cumux and prints a
# table.   tests/frameworks/run.sh [--native] [--cumux] [--build DIR] [--only "name ..."]
# Neither --native nor --cumux: both. Per-program timeout FW_TIMEOUT (default 180 s); logs in
# ${OUT:-/tmp/cumux-framework-logs}/<mode>.<name>.log. Exit 0 when nothing failed. A program that fails
# under cumux is run again under `cumux trace` (FW_TRACE=0: not): the calls that did not succeed are
# printed after the table (all of them in trace.<name>.errors.txt, the whole trace in trace.<name>.txt).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build"
do_native=0 do_cumux=0 only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --native) do_native=1 ;;
        --cumux) do_cumux=1 ;;
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --only) only="$2"; shift ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ $do_native = 0 ] && [ $do_cumux = 0 ] && do_native=1 do_cumux=1
logs=${OUT:-/tmp/cumux-framework-logs}
mkdir -p "$logs" || exit 2
tests=(torch_train torch_compile torch_graph torch_graph_async torch_expandable torch_ipc torch_dataloader hf_generate jax_train
       cupy_ops cupy_managed cupy_texture triton_add numba_kernel)
[ -n "$only" ] && read -r -a tests <<<"$only"
py=${PYTHON:-python3}
pipe=""
if [ $do_cumux = 1 ]; then
    cli="$build/cli/cumux"
    [ -x "$cli" ] || { echo "run.sh: no $cli (build first)" >&2; exit 2; }
    pipe=$(mktemp -d)
    export CUMUX_PIPE_DIRECTORY="$pipe/pipe" CUMUX_LOG_DIRECTORY="$logs/cumux-server"
    "$cli" start >"$logs/cumux-start.log" 2>&1 || { echo "run.sh: cumux start failed"; cat "$logs/cumux-start.log"; exit 2; }
    trap '"$cli" stop >/dev/null 2>&1; rm -rf "$pipe"' EXIT
fi
declare -A result
failed=0
run_one() { # MODE NAME
    local mode=$1 name=$2 log="$logs/$1.$2.log" rc
    local cmd=("$py" "$here/$name.py")
    [ "$mode" = cumux ] && cmd=("$cli" run -- "${cmd[@]}")
    local t0=$SECONDS
    (cd "$here" && timeout -k 10 "${FW_TIMEOUT:-180}" "${cmd[@]}") >"$log" 2>&1
    rc=$?
    local secs=$((SECONDS - t0)) r
    case $rc in
        0) r="pass ${secs}s" ;;
        77) r="skip" ;;
        124|137) r="TIMEOUT"; failed=1 ;;
        *) r="FAIL($rc)"; failed=1 ;;
    esac
    result[$mode.$name]=$r
    echo "$mode $name: $r  $(grep -E '^(PASS|FAIL|SKIP)' "$log" | tail -1)"
    if [ "$mode" = cumux ] && [ $rc != 0 ] && [ $rc != 77 ] && [ "${FW_TRACE:-1}" != 0 ]; then
        (cd "$here" && timeout -k 10 "${FW_TIMEOUT:-180}" "$cli" trace -o "$logs/trace.$name.txt" -- "$py" \
            "$here/$name.py") >"$logs/traced.$name.log" 2>&1
        grep -E ' = [1-9][0-9]* CUDA_|not supported|unknown' "$logs/trace.$name.txt" >"$logs/trace.$name.errors.txt"
        traced+=("$name")
    fi
}
traced=()
for t in "${tests[@]}"; do
    [ $do_native = 1 ] && run_one native "$t"
    [ $do_cumux = 1 ] && run_one cumux "$t"
done
echo
printf '%-18s | %-12s | %-12s\n' "framework test" native cumux
for t in "${tests[@]}"; do
    printf '%-18s | %-12s | %-12s\n' "$t" "${result[native.$t]:--}" "${result[cumux.$t]:--}"
done
for t in "${traced[@]}"; do
    echo
    echo "$t under cumux trace: $(wc -l <"$logs/trace.$t.errors.txt") calls that did not succeed; the first, by function:"
    # The first failing call of each function (with its arguments), in order of appearance.
    awk '{ f = $3; sub(/\(.*/, "", f); if (!(f in seen)) { seen[f] = 1; print } }' "$logs/trace.$t.errors.txt" |
        head -25 | cut -c1-400 | sed 's/^/  /'
done
echo "logs: $logs"
exit $failed
