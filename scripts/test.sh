#!/usr/bin/env bash
# Runs every test that needs no GPU, in a normal build (build/) and in an AddressSanitizer +
# UndefinedBehaviorSanitizer build (build-asan/), checks that the generated code is current, fuzzes the
# server for a minute (tests/fuzz, clang), then runs the GPU suite, which prints a SKIP line on machines
# without a GPU. Exits non-zero if anything failed.
#   scripts/test.sh [--no-asan] [--jobs N]
# Environment: CUDA_ROOT (default /usr/local/cuda).
set -u

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2
jobs=$(nproc 2>/dev/null || echo 2)
asan=1
while [ $# -gt 0 ]; do
    case "$1" in
        --no-asan) asan=0 ;;
        --jobs) jobs=$2; shift ;;
        --jobs=*) jobs=${1#--jobs=} ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "test.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
export CUDA_ROOT=$cuda_root

failed=()
# step NAME CMD...: run, say how it went, remember a failure.
step() {
    local name=$1
    shift
    echo "==== $name"
    local t0=$SECONDS
    if "$@"; then
        echo "==== $name: ok ($((SECONDS - t0)) s)"
        return 0
    fi
    echo "==== $name: FAILED ($((SECONDS - t0)) s)"
    failed+=("$name")
    return 1
}

build() { # DIR [CMAKE_ARGS...]
    local dir=$1
    shift
    cmake -S "$repo" -B "$dir" -DCUDA_ROOT="$cuda_root" "$@" && cmake --build "$dir" -j "$jobs"
}

run_ctest() { # DIR
    (cd "$1" && ctest -LE gpu --output-on-failure 2>&1 | tee ctest.out; exit "${PIPESTATUS[0]}")
}

# The output of each failed test again, at the end, where a CI summary that keeps only the last lines
# still shows why it failed: its first 15 lines and its last 45 (a test's verdict and the server's log
# come last).
failed_outputs() {
    local out
    for out in build/ctest.out build-asan/ctest.out; do
        [ -r "$out" ] || continue
        awk -v file="$out" '
            function flush(   i, from) {
                if (!keep) return
                for (i = 1; i <= n && i <= 15; i++) print buf[i]
                from = n - 44 > 15 ? n - 44 : 16
                if (from > 16) print "    [... " from - 16 " lines ...]"
                for (i = from; i <= n; i++) print buf[i]
                keep = 0
            }
            /^ *Start +[0-9]+: / || /tests passed, / { flush() }
            /Test +#[0-9]+: .*(Failed|Timeout|Exception)/ { flush(); keep = 1; n = 0; print "---- " file ": " $0; next }
            keep { buf[++n] = $0 }
            END { flush() }' "$out"
    done
}

# LeakSanitizer stops the process's threads to scan them (ptrace); some containers forbid that, and then
# every sanitized program would fail at exit. Try it on a deliberate leak first; only when it cannot
# run, turn leak detection off, and say so.
lsan_probe() {
    local dir
    dir=$(mktemp -d) || return 1
    printf '#include <stdlib.h>\nvoid *volatile keep;\nint main(void) { keep = malloc(33); keep = 0; return 0; }\n' >"$dir/leak.c"
    local verdict=unknown
    if "${CC:-cc}" -fsanitize=address -g -o "$dir/leak" "$dir/leak.c" 2>"$dir/cc.err"; then
        ASAN_OPTIONS=detect_leaks=1 "$dir/leak" >"$dir/out" 2>&1
        if grep -q "detected memory leaks" "$dir/out"; then
            verdict=works
        else
            verdict=broken
            sed -n '1,5p' "$dir/out"
        fi
    else
        cat "$dir/cc.err"
    fi
    rm -rf "$dir"
    case $verdict in
        works) echo "LeakSanitizer works here" ;;
        broken)
            echo "WARNING: LeakSanitizer cannot run here (ptrace restricted?): ASAN_OPTIONS=detect_leaks=0"
            export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
            ;;
        *) echo "cannot build a sanitized program"; return 1 ;;
    esac
}

t_start=$SECONDS
rm -f build/ctest.out build-asan/ctest.out
if step "build (build/)" build build; then
    step "tests (build/)" run_ctest build
fi

if [ $asan = 1 ]; then
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1"
    if step "LeakSanitizer probe" lsan_probe &&
        step "build with ASan+UBSan (build-asan/)" build build-asan -DCUMUX_SANITIZE=ON; then
        step "tests with ASan+UBSan (build-asan/)" run_ctest build-asan
    fi
fi

step "generated code current" python3 tools/gen/generate.py --check

# Fuzzing (tests/fuzz): the committed corpus, then a short run over every op with the fake driver's
# oracle and ASan+UBSan. Longer runs: tests/fuzz/run.sh --seconds N [--fast].
if [ $asan = 1 ]; then
    step "fuzzing (corpus + ${FUZZ_SECONDS:-60} s)" env OUT="$repo/build-fuzz/out" tests/fuzz/run.sh \
        --seconds "${FUZZ_SECONDS:-60}" --jobs "$jobs"
fi

# The GPU suite: on a machine without a GPU it prints one SKIP line and succeeds.
if [ -x tests/gpu/run.sh ]; then
    if [ -d build ]; then
        step "GPU suite" tests/gpu/run.sh --build build
    else
        echo "==== GPU suite: not run, no build/"
        failed+=("GPU suite (no build)")
    fi
else
    echo "==== GPU suite: tests/gpu/run.sh not present, not run"
fi

echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "test.sh: all passed ($((SECONDS - t_start)) s)"
    exit 0
fi
failed_outputs
echo "test.sh: FAILED: ${failed[*]} ($((SECONDS - t_start)) s)"
exit 1
