#!/usr/bin/env bash
# Builds fuzz_server (clang, libFuzzer, ASan+UBSan, the fake driver in-process) in build-fuzz/ and runs it
# over the committed corpus (tests/fuzz/corpus), then for SECONDS more seconds (default 60) on JOBS
# processes (default: the cores). Findings land in $OUT (default /tmp/cumux-fuzz) as crash-*/timeout-*
# files; the exit status is non-zero when there is one.
#   tests/fuzz/run.sh [--seconds N] [--jobs N] [--runs N]
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=60
jobs=$(nproc 2>/dev/null || echo 2)
runs=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift ;;
        --jobs) jobs=$2; shift ;;
        --runs) runs=$2; shift ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
command -v clang >/dev/null || { echo "fuzz: clang is needed (apt-get install clang)" >&2; exit 2; }
build=${FUZZ_BUILD:-$repo/build-fuzz}
cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DCUMUX_FUZZ=ON -DCUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}" >/dev/null &&
    cmake --build "$build" --target fuzz_server -j "$jobs" >/dev/null || { echo "fuzz: build failed" >&2; exit 2; }
out=${OUT:-/tmp/cumux-fuzz}
mkdir -p "$out/corpus" || exit 2
cp -n "$repo"/tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=1"
export CUMUX_LOG_DIRECTORY="$out"
# The committed corpus first, each input once: a regression test of its own.
"$build/tests/fuzz/fuzz_server" -runs=0 "$repo/tests/fuzz/corpus" >"$out/corpus-run.log" 2>&1 || {
    echo "fuzz: the committed corpus fails:"; tail -30 "$out/corpus-run.log"; exit 1; }
args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=4096 -artifact_prefix="$out/")
[ -n "$runs" ] && args=(-runs="$runs" -timeout=30 -rss_limit_mb=4096 -max_len=4096 -artifact_prefix="$out/")
if [ "$jobs" -gt 1 ]; then
    args+=(-jobs="$jobs" -workers="$jobs")
fi
(cd "$out" && "$build/tests/fuzz/fuzz_server" "${args[@]}" "$out/corpus" >"$out/fuzz.log" 2>&1)
rc=$?
grep -h -E '^#[0-9]+.*(DONE|pulse|NEW)' "$out"/fuzz*.log 2>/dev/null | tail -3
execs=$(grep -h -oE 'stat::number_of_executed_units: *[0-9]+' "$out"/fuzz*.log 2>/dev/null | awk '{s+=$2} END {print s+0}')
echo "fuzz: $execs executions in total, exit $rc"
if ls "$out"/crash-* "$out"/timeout-* "$out"/leak-* >/dev/null 2>&1; then
    echo "fuzz: FINDINGS:"; ls "$out"/crash-* "$out"/timeout-* "$out"/leak-* 2>/dev/null
    exit 1
fi
exit $rc
