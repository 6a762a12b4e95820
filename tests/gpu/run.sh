#!/usr/bin/env bash
# Runs the GPU test suite natively and/or under cumux and prints a result table.
#   tests/gpu/run.sh [--native] [--cumux] [--build DIR] [--only "name ..."] [--skip-rc N]
# Neither --native nor --cumux: both. Logs: ${OUT:-/tmp/cumux-gpu-logs}/<mode>.<test>.log
# Exit: 0 all passed, 1 a test failed, 2 usage/setup error; no GPU at all: one SKIP line and
# exit 0 (or N with --skip-rc N, which CTest reports as skipped).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build"
do_native=0
do_cumux=0
only=""
skip_rc=0
while [ $# -gt 0 ]; do
    case "$1" in
        --native) do_native=1 ;;
        --cumux) do_cumux=1 ;;
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --build=*) build=$(cd "${1#--build=}" && pwd) || exit 2 ;;
        --only) only="$2"; shift ;;
        --skip-rc) skip_rc="$2"; shift ;;
        -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ $do_native = 0 ] && [ $do_cumux = 0 ]; then
    do_native=1
    do_cumux=1
fi

# Order: cheap API checks first, multi-process tests last.
tests=(device_api vecadd matmul memcpy uva_disjoint memcpy2d memset module_globals events hostfn graph vmm vmm_share ipc managed tensor_map array link stream_memops legacy_stream cache_config multithread export_tables two_clients hostfn_shared client_killed contain_bystander)
[ -n "$only" ] && read -r -a tests <<<"$only"

out="${OUT:-/tmp/cumux-gpu-logs}"
mkdir -p "$out" || exit 2
bindir="$build/tests/gpu"
cli="${CUMUX_CLI:-$build/cli/cumux}" # CUMUX_CLI: an installed cumux (scripts/device-check.sh --install)
timeout_s="${GPU_TEST_TIMEOUT:-180}"

# No GPU at all: not an error (CI machines have none).
gpu_listed=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
if [ "${gpu_listed:-0}" = 0 ]; then
    if [ ! -x "$bindir/gpu_probe" ] || ! "$bindir/gpu_probe" >"$out/probe.log" 2>&1; then
        echo "SKIP: no CUDA GPU on this machine"
        exit "$skip_rc"
    fi
fi
# One program on several GPUs: where there are two.
if [ -z "$only" ]; then
    if [ "${gpu_listed:-0}" -ge 2 ]; then
        tests+=(multi_gpu)
    else
        echo "SKIP multi_gpu: it needs two GPUs, this machine has ${gpu_listed:-0}"
    fi
fi
for t in probe "${tests[@]}"; do
    if [ ! -x "$bindir/gpu_$t" ]; then
        echo "run.sh: $bindir/gpu_$t not built (cmake --build $build --target gpu_tests)" >&2
        exit 2
    fi
done

declare -A res
run_one() { # mode test -> sets res[test,mode]
    local mode=$1 t=$2 log="$out/$1.$2.log" rc t0=$SECONDS
    shift 2
    {
        echo "# $(date -Is) $mode: $*"
        timeout -k 10 "$timeout_s" "$@"
    } >"$log" 2>&1
    rc=$?
    echo "# exit $rc after $((SECONDS - t0)) s" >>"$log"
    case $rc in
        0) res[$t,$mode]=PASS ;;
        77) res[$t,$mode]="NO-GPU" ;; # a GPU is present (checked above): the program could not use it
        124|137) res[$t,$mode]=TIMEOUT ;;
        *) res[$t,$mode]="FAIL($rc)" ;;
    esac
    printf '%-16s %-7s %-10s %3ss\n' "$t" "$mode" "${res[$t,$mode]}" $((SECONDS - t0))
    if [ "${res[$t,$mode]}" != PASS ]; then
        grep -E '^(FAIL|SKIP)' "$log" | head -3 | sed 's/^/    /'
    fi
}

if [ $do_native = 1 ]; then
    for t in "${tests[@]}"; do
        run_one native "$t" "$bindir/gpu_$t"
    done
fi

started_cumux=0
stop_cumux() {
    if [ $started_cumux = 1 ]; then
        "$cli" stop >>"$out/cumux-server.log" 2>&1 || echo "run.sh: cumux stop failed" >&2
        started_cumux=0
    fi
}
trap stop_cumux EXIT
trap 'exit 130' INT TERM

if [ $do_cumux = 1 ]; then
    if [ ! -x "$cli" ]; then
        echo "run.sh: cumux CLI not found at $cli" >&2
        for t in "${tests[@]}"; do res[$t,cumux]="NO-CLI"; done
    else
        export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$out/cumux-server}"
        mkdir -p "$CUMUX_LOG_DIRECTORY"
        # A server someone else started is used and left running; one we start, we stop.
        if "$cli" start >>"$out/cumux-server.log" 2>&1; then
            started_cumux=1
        fi
        for t in "${tests[@]}"; do
            run_one cumux "$t" "$cli" run -- "$bindir/gpu_$t"
            # The server must survive every test (the killed-client test especially).
            "$cli" status >>"$out/cumux.$t.log" 2>&1 || echo "# cumux status failed after $t" >>"$out/cumux.$t.log"
        done
        stop_cumux
    fi
fi

echo
printf '%-16s | %-10s | %-10s\n' test native cumux
printf '%-16s-+-%-10s-+-%-10s\n' ---------------- ---------- ----------
failed=0
for t in "${tests[@]}"; do
    n="${res[$t,native]:--}"
    c="${res[$t,cumux]:--}"
    printf '%-16s | %-10s | %-10s\n' "$t" "$n" "$c"
    for r in "$n" "$c"; do
        case "$r" in PASS|-) ;; *) failed=1 ;; esac
    done
done
echo "logs: $out"
exit $failed
