#!/usr/bin/env bash
# Builds fuzz_server (clang, libFuzzer, ASan+UBSan, the fake driver in-process) in build-fuzz/ and runs it
# over the committed corpus (tests/fuzz/corpus), then for SECONDS more seconds (default 60) on JOBS
# processes (default: the cores). Findings land in $OUT (default /tmp/cumux-fuzz) as crash-*/timeout-*
# files, with finding-history: the finding client's inputs as one input, which replays it
# (FUZZ_CLIENT_INPUTS=1 FUZZ_TRACE=1 build-fuzz/tests/fuzz/fuzz_server $OUT/finding-history); the exit status
# is non-zero when there is one.
# Then the network link's readers (fuzz_frames, fuzz_mirror, fuzz_relay) for LINK_SECONDS each (default 15).
#   tests/fuzz/run.sh [--seconds N] [--jobs N] [--runs N] [--fast] [--binary FUZZ_SERVER]
# --fast: UBSan without ASan (about three times the executions; the fake driver's oracle still checks
# every device range), built in build-fuzz-fast/.
# --binary: run a fuzz_server built elsewhere, build nothing (a machine whose clang lacks libFuzzer's
# runtime); set FUZZ_FATBIN to the kernels' image (build/tests/gpu/gpu_kernels.fatbin of that build).
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=60
jobs=$(nproc 2>/dev/null || echo 2)
runs=""
sanitizers=address,undefined
binary=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift ;;
        --jobs) jobs=$2; shift ;;
        --runs) runs=$2; shift ;;
        --fast) sanitizers=undefined ;;
        --binary) binary=$2; shift ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "$binary" ]; then
    fuzzer=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
    [ -x "$fuzzer" ] || { echo "fuzz: $binary is not an executable" >&2; exit 2; }
    sanitizers="as built"
else
    cc=$(command -v clang || ls /usr/bin/clang-[0-9]* 2>/dev/null | sort -V | tail -1)
    [ -n "$cc" ] || { echo "fuzz: clang is needed (apt-get install clang)" >&2; exit 2; }
    build=${FUZZ_BUILD:-$repo/build-fuzz}
    [ $sanitizers = undefined ] && build=${FUZZ_BUILD:-$repo/build-fuzz-fast}
    cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCUMUX_FUZZ=ON -DCUMUX_FUZZ_SANITIZERS=$sanitizers \
        -DCUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}" >/dev/null &&
        cmake --build "$build" --target fuzz_server -j "$jobs" >/dev/null || { echo "fuzz: build failed" >&2; exit 2; }
    fuzzer=$build/tests/fuzz/fuzz_server
fi
out=${OUT:-/tmp/cumux-fuzz}
mkdir -p "$out/corpus" || exit 2
rm -f "$out"/crash-* "$out"/timeout-* "$out"/leak-* "$out"/oom-* "$out"/finding-history # findings of an earlier run
cp -n "$repo"/tests/fuzz/corpus/* "$out/corpus/" 2>/dev/null
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=1"
export CUMUX_LOG_DIRECTORY="$out"
# A finding's client history (fuzz_server.c): replay it with FUZZ_CLIENT_INPUTS=1 fuzz_server FILE.
export FUZZ_HISTORY="${FUZZ_HISTORY:-$out/finding-history}"
# The committed corpus first, each input once: a regression test of its own.
"$fuzzer" -runs=0 "$repo/tests/fuzz/corpus" >"$out/corpus-run.log" 2>&1 || {
    echo "fuzz: the committed corpus fails:"; tail -30 "$out/corpus-run.log"; exit 1; }
args=(-print_final_stats=1 -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=4096 -artifact_prefix="$out/")
[ -n "$runs" ] && args=(-print_final_stats=1 -runs="$runs" -timeout=30 -rss_limit_mb=4096 -max_len=4096 -artifact_prefix="$out/")
if [ "$jobs" -gt 1 ]; then
    args+=(-fork="$jobs" -ignore_crashes=0 -ignore_timeouts=0)
fi
(cd "$out" && "$fuzzer" "${args[@]}" "$out/corpus" >"$out/fuzz.log" 2>&1)
rc=$?
# Executions: the final stats of a single process, or the fork mode's last progress line (#N: ...).
execs=$(grep -h -oE 'stat::number_of_executed_units: *[0-9]+' "$out/fuzz.log" | awk '{s+=$2} END {print s+0}')
[ "$execs" = 0 ] && execs=$(grep -oE '^#[0-9]+' "$out/fuzz.log" | tail -1 | tr -d '#')
grep -E '^#[0-9]+' "$out/fuzz.log" | tail -1
echo "fuzz: ${execs:-0} executions (sanitizers: $sanitizers, $jobs process(es)), exit $rc"
# The network link's readers (issue 45), where they were built (GnuTLS): the frame reader and the gateway's
# reading of a relay's frames, LINK_SECONDS each (default 15), single process.
for f in fuzz_frames fuzz_mirror fuzz_relay; do
    [ -z "$binary" ] || break
    cmake --build "$build" --target $f -j "$jobs" >/dev/null 2>&1 || continue
    mkdir -p "$out/corpus-$f"
    [ $f = fuzz_mirror ] && cp -n "$repo"/tests/fuzz/corpus_mirror/* "$out/corpus-$f/" 2>/dev/null
    [ $f = fuzz_relay ] && cp -n "$repo"/tests/fuzz/corpus_relay/* "$out/corpus-$f/" 2>/dev/null
    (cd "$out" && "$build/tests/fuzz/$f" -print_final_stats=1 -max_total_time="${LINK_SECONDS:-15}" -timeout=30 \
        -rss_limit_mb=4096 -artifact_prefix="$out/" "$out/corpus-$f" >"$out/$f.log" 2>&1)
    rc_f=$?
    echo "fuzz: $f: $(grep -h -oE 'stat::number_of_executed_units: *[0-9]+' "$out/$f.log" | awk '{print $2}') executions, exit $rc_f"
    [ $rc_f = 0 ] || rc=$rc_f
done
if ls "$out"/crash-* "$out"/timeout-* "$out"/leak-* >/dev/null 2>&1; then
    echo "fuzz: FINDINGS:"; ls "$out"/crash-* "$out"/timeout-* "$out"/leak-* 2>/dev/null
    exit 1
fi
exit $rc
