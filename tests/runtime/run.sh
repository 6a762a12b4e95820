#!/usr/bin/env bash
# Runs the CUDA runtime suite (tests/runtime) natively and/or under cumux and prints a result table:
#   tests/runtime/run.sh [--native] [--cumux] [--mps] [--contain] [--build DIR] [--only "name ..."]
#                        [--variants "static shared"] [--skip-rc N] [--no-bystander]
# None of the modes: --native --cumux. Every program runs in both builds (static and shared CUDA runtime).
# --mps and --contain run only the fault tests: under NVIDIA MPS (recorded, for comparison), and under
# cumux with containment and GPU coredumps (CUMUX_CONTAIN=1 CUMUX_FAULT_COREDUMP=1), where the faulting
# program must get its own error and the bystander must end right, redoing work the fault took away.
# Logs: ${OUT:-/tmp/cumux-runtime-logs}/<mode>.<variant>.<test>.log; per-test timeout RT_TEST_TIMEOUT
# (default 60 s). Exit: 0 all passed, 1 a test failed, 2 usage/setup error; no GPU at all: one SKIP
# line and exit 0 (or N with --skip-rc N, which CTest reports as skipped).
# Checks beyond each program's own PASS/FAIL: props' "prop" lines must be identical natively and under
# cumux (and between the static and shared builds); printf's device lines must all appear exactly once.
# The fault tests (fault_assert, fault_illegal, fault_trap) pass when the faulting program itself gets the expected
# error; what happened to a bystander process running at the same time is recorded, not required.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build="$repo/build"
do_native=0
do_cumux=0
do_mps=0
do_contain=0
only=""
variants="static shared"
skip_rc=0
bystander=1
while [ $# -gt 0 ]; do
    case "$1" in
        --native) do_native=1 ;;
        --cumux) do_cumux=1 ;;
        --mps) do_mps=1 ;;
        --contain) do_contain=1 ;;
        --build) build=$(cd "$2" && pwd) || exit 2; shift ;;
        --build=*) build=$(cd "${1#--build=}" && pwd) || exit 2 ;;
        --only) only="$2"; shift ;;
        --variants) variants="$2"; shift ;;
        --skip-rc) skip_rc="$2"; shift ;;
        --no-bystander) bystander=0 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ $do_native = 0 ] && [ $do_cumux = 0 ] && [ $do_mps = 0 ] && [ $do_contain = 0 ]; then
    do_native=1
    do_cumux=1
fi
read -r -a vlist <<<"$variants"
for v in "${vlist[@]}"; do
    case "$v" in static|shared) ;; *) echo "run.sh: unknown variant $v" >&2; exit 2 ;; esac
done

# Order: API checks first, libraries next, the faults last (under cumux a fault may poison the server's
# shared context, so nothing may come after them).
tests=(props vecadd mapped symbols mempool graphs ptds multithread reset printf
       cublas cublaslt cufft curand cusparse cusolver cudnn fault_assert fault_illegal fault_trap)
[ -n "$only" ] && read -r -a tests <<<"$only"

out="${OUT:-/tmp/cumux-runtime-logs}"
mkdir -p "$out" || exit 2
bindir="$build/tests/runtime"
cli="${CUMUX_CLI:-$build/cli/cumux}" # CUMUX_CLI: another cumux (bench/remote.sh: one whose run crosses the network)
timeout_s="${RT_TEST_TIMEOUT:-60}"

# No GPU at all: not an error (CI machines have none). The props program decides when nvidia-smi is
# absent or lists nothing; it skips only when the runtime finds no driver or no device.
gpu_listed=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
if [ "${gpu_listed:-0}" = 0 ]; then
    if [ ! -x "$bindir/rt_props_static" ] || ! "$bindir/rt_props_static" >"$out/probe.log" 2>&1; then
        echo "SKIP: no CUDA GPU on this machine"
        exit "$skip_rc"
    fi
fi
if [ ! -d "$bindir" ]; then
    echo "run.sh: $bindir missing (cmake --build $build --target runtime_tests)" >&2
    exit 2
fi
for t in "${tests[@]}"; do
    for v in "${vlist[@]}"; do
        # cuDNN is optional at configure time: a missing rt_cudnn_* is reported, not an error.
        if [ ! -x "$bindir/rt_${t}_$v" ] && [ "$t" != cudnn ]; then
            echo "run.sh: $bindir/rt_${t}_$v not built (cmake --build $build --target runtime_tests)" >&2
            exit 2
        fi
    done
done

# The device lines of printf.cu, each expected exactly once.
expected_printf() {
    local b t
    for b in 0 1; do
        for t in 0 1 2 3; do
            echo "devprintf: block $b thread $t value $((100 * b + 7 * t))"
        done
    done
    echo "devprintf: float 3.250 int -42 hex 0xcafe str cumux"
    echo "devprintf: second launch n=12345"
}

rm -f "$out"/*.props.txt "$out"/*.props.diff
declare -A res
notes=()
note() { notes+=("$*"); }

started_cumux=0
cumux_start() { # [VAR=VALUE...]: the server's environment
    if env "$@" "$cli" start >>"$out/cumux-server.log" 2>&1; then
        started_cumux=1
    fi
}
stop_cumux() {
    if [ $started_cumux = 1 ]; then
        "$cli" stop >>"$out/cumux-server.log" 2>&1 || echo "run.sh: cumux stop failed" >&2
        started_cumux=0
    fi
}

# start_bg MODE PROGRAM ARGS...: starts the program in the background, natively or under cumux, under the
# per-test timeout; $! is the timeout process (a signal to it reaches the program).
start_bg() {
    local mode=$1
    shift
    if [ "$mode" = cumux ]; then
        # The server's defaults, containment and GPU coredumps (unless the environment turns them off): a
        # bystander may lose a round at a fault (and redo it), a culprit's first synchronize may pass.
        local lost_ok=0 may_pass=0
        [ "${CUMUX_CONTAIN:-1}" = 1 ] && lost_ok=1
        [ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && may_pass=1
        RT_BYSTANDER_LOST_OK=$lost_ok RT_FAULT_SYNC_MAY_PASS=$may_pass timeout -k 10 "$timeout_s" "$cli" run -- "$@" &
    elif [ "$mode" = contain ]; then
        RT_BYSTANDER_LOST_OK=1 RT_FAULT_SYNC_MAY_PASS=1 timeout -k 10 "$timeout_s" "$cli" run -- "$@" &
    elif [ "$mode" = mps ]; then
        CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" timeout -k 10 "$timeout_s" "$@" &
    else
        timeout -k 10 "$timeout_s" "$@" &
    fi
}

# check_extra MODE VARIANT TEST LOG: the checks beyond the exit status; prints a word when one fails.
check_extra() {
    local mode=$1 v=$2 t=$3 log=$4 line missing=0 count
    case "$t" in
        printf)
            while IFS= read -r line; do
                count=$(grep -cxF -- "$line" "$log")
                if [ "$count" != 1 ]; then
                    echo "# printf check: '$line' appeared $count time(s)" >>"$log"
                    missing=1
                fi
            done < <(expected_printf)
            [ $missing = 1 ] && echo PRINTF-MISSING
            ;;
        props)
            grep '^prop ' "$log" >"$out/$mode.$v.props.txt"
            local ref=""
            if [ "$mode" = cumux ]; then
                ref="$out/native.$v.props.txt"
            elif [ "$v" = shared ] && [ -f "$out/native.static.props.txt" ]; then
                ref="$out/native.static.props.txt"
            fi
            if [ -n "$ref" ] && [ -f "$ref" ]; then
                if ! diff -u "$ref" "$out/$mode.$v.props.txt" >"$out/$mode.$v.props.diff"; then
                    echo "# props differ from $(basename "$ref"): $out/$mode.$v.props.diff" >>"$log"
                    echo PROPS-DIFF
                fi
            elif [ "$mode" = cumux ]; then
                echo "# props: no native output to compare with" >>"$log"
            fi
            ;;
    esac
}

cur_pid="" byst_pid="" cur_key=""
# run_one MODE VARIANT TEST: runs one program, sets res[TEST,VARIANT,MODE] and prints a line.
run_one() {
    local mode=$1 v=$2 t=$3 log="$out/$1.$2.$3.log" rc t0=$SECONDS r extra blog=""
    local prog="$bindir/rt_${t}_$v"
    if [ ! -x "$prog" ]; then
        res[$t,$v,$mode]="not-built"
        printf '%-14s %-6s %-6s %-14s\n' "$t" "$v" "$mode" "not built"
        return
    fi
    # Fault tests: a bystander client computes at the same time (static build only, to save time); what
    # happens to it is recorded.
    if [[ "$t" == fault_* ]] && [ $bystander = 1 ] && [ "$v" = static ]; then
        blog="$out/$mode.$v.$t.bystander.log"
        start_bg "$mode" "$bindir/rt_bystander_$v" 2 >"$blog" 2>&1
        byst_pid=$!
        local waited=0
        while ! grep -q '^bystander: running' "$blog" 2>/dev/null && [ $waited -lt 150 ] &&
            kill -0 "$byst_pid" 2>/dev/null; do
            sleep 0.1
            waited=$((waited + 1))
        done
    fi
    echo "# $(date -Is) $mode $v: $prog" >"$log"
    start_bg "$mode" "$prog" >>"$log" 2>&1
    cur_pid=$!
    cur_key="$t,$v,$mode"
    wait "$cur_pid"
    rc=$?
    cur_pid="" cur_key=""
    echo "# exit $rc after $((SECONDS - t0)) s" >>"$log"
    case $rc in
        0) r=PASS ;;
        77) r="NO-GPU" ;; # a GPU is present (checked above): the program could not use it
        124|137) r=TIMEOUT ;;
        *) r="FAIL($rc)" ;;
    esac
    if [ "$r" = PASS ]; then
        extra=$(check_extra "$mode" "$v" "$t" "$log")
        [ -n "$extra" ] && r=$extra
    fi
    res[$t,$v,$mode]=$r
    printf '%-14s %-6s %-6s %-14s %3ss\n' "$t" "$v" "$mode" "$r" $((SECONDS - t0))
    if [ "$r" != PASS ]; then
        grep -E '^(FAIL|SKIP)|^# (printf check|props differ)' "$log" | head -3 | sed 's/^/    /'
    fi
    if [[ "$t" == fault_* ]]; then
        local got
        got=$(grep -m1 '^fault: got=' "$log" | sed 's/^fault: //')
        note "$t $v $mode: ${got:-no 'fault:' line}; program ${r}"
        if [ -n "$byst_pid" ]; then
            wait "$byst_pid"
            local brc=$? bres
            byst_pid=""
            bres=$(grep -m1 -E '^(PASS|FAIL|SKIP)' "$blog" || true)
            note "  bystander at the same time ($mode $v): exit $brc, ${bres:-no result line}$(grep -m1 -o '[0-9]* lost at faults and done again' "$blog" | sed 's/^/, /')"
            # With containment the bystander is issue 10's point: it must end right.
            [ "$mode" = contain ] && [ "$brc" != 0 ] && [ "${res[$t,$v,$mode]}" = PASS ] && res[$t,$v,$mode]="BYSTANDER-FAILED"
        fi
    fi
}

reported=0
report() {
    reported=1
    echo
    printf '%-14s | %-14s | %-14s | %-14s | %-14s\n' test "static native" "static cumux" "shared native" "shared cumux"
    printf '%-14s-+-%-14s-+-%-14s-+-%-14s-+-%-14s\n' -------------- -------------- -------------- -------------- --------------
    failed=0
    local t v m r cells
    for t in "${tests[@]}"; do
        cells=()
        for v in static shared; do
            for m in native cumux; do
                r="${res[$t,$v,$m]:--}"
                cells+=("$r")
                case "$r" in PASS|-|not-built) ;; *) failed=1 ;; esac
            done
        done
        printf '%-14s | %-14s | %-14s | %-14s | %-14s\n' "$t" "${cells[@]}"
    done
    local other
    for other in mps contain; do
        cells=()
        for t in "${tests[@]}"; do
            for v in static shared; do
                r="${res[$t,$v,$other]:-}"
                [ -n "$r" ] && cells+=("$t $v $r")
                [ "$other" = contain ] && case "$r" in PASS|"") ;; *) failed=1 ;; esac
            done
        done
        [ ${#cells[@]} -gt 0 ] || continue
        [ $other = mps ] && echo "fault tests under NVIDIA MPS (recorded, not required): $(IFS=';'; echo "${cells[*]}")"
        [ $other = contain ] && echo "fault tests under cumux with containment and coredumps (the bystander required): $(IFS=';'; echo "${cells[*]}")"
    done
    if [ ${#notes[@]} -gt 0 ]; then
        echo "fault tests (the faulting program must get its error; the bystander is recorded, not required):"
        local n
        for n in "${notes[@]}"; do echo "  $n"; done
    fi
    echo "logs: $out"
}
on_signal() {
    [ -n "$cur_pid" ] && kill -TERM "$cur_pid" 2>/dev/null
    [ -n "$cur_key" ] && res[$cur_key]=INTERRUPTED
    [ -n "$byst_pid" ] && kill -TERM "$byst_pid" 2>/dev/null
    echo "run.sh: interrupted; the table shows what ran"
    [ $reported = 1 ] || report
    exit 130
}
trap stop_cumux EXIT
trap on_signal INT TERM

ran_native_props=0
if [ $do_native = 1 ]; then
    for t in "${tests[@]}"; do
        for v in "${vlist[@]}"; do
            run_one native "$v" "$t"
        done
    done
    [[ " ${tests[*]} " == *" props "* ]] && ran_native_props=1
fi

if [ $do_cumux = 1 ]; then
    if [ ! -x "$cli" ]; then
        echo "run.sh: cumux CLI not found at $cli" >&2
        for t in "${tests[@]}"; do for v in "${vlist[@]}"; do res[$t,$v,cumux]="NO-CLI"; done; done
    else
        # Reference for the props comparison when the native runs were not part of this invocation.
        if [[ " ${tests[*]} " == *" props "* ]] && [ $ran_native_props = 0 ]; then
            for v in "${vlist[@]}"; do
                timeout -k 5 "$timeout_s" "$bindir/rt_props_$v" >"$out/native-ref.$v.props.log" 2>&1 &&
                    grep '^prop ' "$out/native-ref.$v.props.log" >"$out/native.$v.props.txt"
            done
        fi
        export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$out/cumux-server}"
        mkdir -p "$CUMUX_LOG_DIRECTORY"
        # A server someone else started is used and left running; one we start, we stop.
        cumux_start
        for t in "${tests[@]}"; do
            for v in "${vlist[@]}"; do
                # No fresh server for a fault test: the one server recovers from each fault by itself
                # (docs/faults.md), and every test after a fault runs on what it recovered to.
                run_one cumux "$v" "$t"
                "$cli" status >>"$out/cumux.$v.$t.log" 2>&1 || echo "# cumux status failed after $t" >>"$out/cumux.$v.$t.log"
            done
        done
        stop_cumux
    fi
fi

fault_tests=()
for t in "${tests[@]}"; do [[ "$t" == fault_* ]] && fault_tests+=("$t"); done

# NVIDIA MPS, for comparison: its own daemon in a pipe directory of this run's, stopped at the end.
mps_pipe="$out/mps-pipe"
if [ $do_mps = 1 ] && [ ${#fault_tests[@]} -gt 0 ]; then
    mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
    [ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] &&
        mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control
    mkdir -p "$mps_pipe" "$out/mps-log"
    if [ -z "$mps_ctl" ]; then
        note "NVIDIA MPS: not installed here, not run"
    elif CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps-log" "$mps_ctl" -d >>"$out/mps.log" 2>&1; then
        sleep 1
        for t in "${fault_tests[@]}"; do
            for v in "${vlist[@]}"; do run_one mps "$v" "$t"; done
        done
        echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" "$mps_ctl" >>"$out/mps.log" 2>&1
        sleep 2
    else
        note "NVIDIA MPS: the daemon did not start (another may be running): not run"
    fi
fi

# cumux with containment and coredumps: a fresh server for each fault test.
if [ $do_contain = 1 ] && [ ${#fault_tests[@]} -gt 0 ] && [ -x "$cli" ]; then
    export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$out/cumux-server}"
    mkdir -p "$CUMUX_LOG_DIRECTORY"
    for t in "${fault_tests[@]}"; do
        for v in "${vlist[@]}"; do
            stop_cumux
            cumux_start CUMUX_CONTAIN=1 CUMUX_FAULT_COREDUMP=1
            run_one contain "$v" "$t"
            "$cli" status >>"$out/contain.$v.$t.log" 2>&1
        done
    done
    stop_cumux
fi

report
exit $failed
