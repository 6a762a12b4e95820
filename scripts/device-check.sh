#!/usr/bin/env bash
# The one command for the GPU machine: build everything, run the GPU tests (native and under cumux),
# the CUDA runtime suite (tests/runtime, native and under cumux, at most 90 s), the benchmarks (native,
# MPS, cumux), print a summary last. Budget: 9 minutes at most (DEVICE_CHECK_BUDGET, default 540 s).
#   scripts/device-check.sh [--native-only] [--no-tests] [--no-bench] [--no-mps] [--frameworks] [--startup]
#                           [--usage-cost] [--efficiency] [--kernel-times] [--latency] [--many] [--sms] [--seed] [--latency-torch]
#                           [--fuzz S] [--faults] [--no-suites] [--ab "VAR=VALUE ..."] [--launch-cost] [--install]
#                           [--slurm] [--pods] [--remote]
# --remote: also bench/remote.sh (issue 45: the GPU and runtime suites across TCP loopback through the relay, TLS
# and `cumux gateway`, then spin, pinned copies, round trips and a ResNet-50 training remotely against locally;
# about 6 minutes: with --no-tests --no-bench a call of its own). A machine without libgnutls28-dev can be
# given GnuTLS unpacked from Debian's packages in .gnutls/ (carried): .gnutls/use.sh is sourced when present.
# --pods: also tests/test_torch_pods.sh (issue 43: two PyTorch "pods" with 4 and 8 GiB through the Kubernetes
# device plugin's answers applied by hand; its Go binaries built elsewhere and carried: K8S_BIN, default
# build/kubernetes; about a minute).
# --slurm: also bench/slurm_job.sh (issue 42: a Slurm job of 4 spin tasks as the SPANK plugin runs them, in
# the job's client group, against 4 tasks under MPS; rounds MPS cumux cumux MPS; about a minute).
# --latency: also bench/latency.sh (issue 12: a latency client beside a training-like load, alone, natively,
# under MPS and under cumux normal and high priority; about 1.5 minutes).
# --many: also bench/many.sh --unpaced (issue 13: 16 to 128 clients of 4-block kernels, MPS, cumux, and cumux
# without launch pacing, CUMUX_PACE=0; ~5 minutes).
# --sms: also bench/sms.sh (issue 11: two spin programs on half the SMs each, reserved, against one alone,
# and MPS at 50% each; how long a change of SMs takes; ~1.5 minutes).
# --seed: also bench/seed_table.sh (issue 11: two ResNet-50 trainings time-sliced, under MPS and cumux, with
# nvidia-smi's utilization, GPM SM activity and per-program GPU time; 3-5 minutes: a call of its own).
# --latency-torch: also bench/latency_torch.sh (issue 12's table: ResNet-18 inference p99 alone and beside a
# ResNet-50 training, natively, under MPS and cumux; ~5 minutes: a call of its own).
# --efficiency: also bench/efficiency.sh (one GPU-bound PyTorch program alone, natively and under cumux, part
# by part: a matrix product, a streaming add, ResNet-50 training eager and as a CUDA graph; EFF_VARIANTS as
# that script says, e.g. "kprof" for each kernel's GPU time both ways; ~5 minutes: a call of its own).
# --kernel-times: also bench/kernel_times.sh (each kernel of ResNet-50's eager steps timed by Nsight Compute
# natively and around the cumux server, the same way both times; ~4 minutes: a call of its own).
# --usage-cost: also bench/usage_cost.sh (spin and SGEMM with and without sampling each client's GPU time,
# about 2 minutes).
# --frameworks: also the framework suite (tests/frameworks: PyTorch, JAX, CuPy, Triton), at most
# FW_BUDGET seconds (default 420) on top of the rest: with a 10-minute limit per command, run it as a
# call of its own (scripts/device-check.sh --no-tests --no-bench --frameworks); FW_ONLY="name ..." runs
# only those tests.
# --faults: also issue 10's fault runs: tools/probe_fault_culprit.c natively (what the faulting stream's
# synchronize returns while the driver writes a GPU coredump; without CU_COREDUMP_SKIP_ABORT), fault
# recovery and the 50-fault soak with what is on by default turned off (containment and coredumps; the
# soak with containment only), and the runtime's fault programs beside a bystander under NVIDIA MPS and
# under cumux; ~5.5 minutes: with --no-tests --no-bench a call of its own. (The soak at the defaults, culprit
# named at every fault, is one of the server tests.)
# --no-suites: not the GPU test suite nor the runtime suite (the server tests, faults and the rest still run):
# for a call that only needs what comes after them within its budget.
# --ab "VAR=VALUE ...": also bench/server_ab.sh: the one-process benchmark rows under cumux with the server as it
# is and with those variables, in the order A B B A, after a native run (about 4 minutes; BENCH_LIBRARY=1 in
# the environment loads the benchmarks' kernels as a library, as the CUDA runtime does).
# --launch-cost: also bench/launch_cost.sh: a launch's host cost natively as a library kernel or its function,
# from 1, 2 and 4 threads into one context, with 8 and 32 hardware queues (a few seconds).
# --install: also the installed tree (issue 41): `cmake --install` into a prefix, the GPU suite under that
# cumux (tests/gpu/run.sh --cumux, CUMUX_CLI), and tests/test_torch_group.sh with it (two PyTorch processes
# in a 4 GiB client group); about 2 minutes.
# --fuzz SECONDS: also fuzz_server on every core for that long (built elsewhere: FUZZ_BINARY, default
# build-fuzz-fast/tests/fuzz/fuzz_server, carried with the run).
# --startup: also bench/startup.sh (PyTorch ResNet-50 trainings: start-up alone, under cumux trace, a second
# joining a running one, two together; natively, under MPS and under cumux; issue 9's figures), 5-8
# minutes: a call of its own (scripts/device-check.sh --no-tests --no-bench --startup); STARTUP_PHASES
# picks phases ("solo trace", then "join pair" in a second call if one is too long).
# Output in $OUT (default /tmp/cumux-device-check): summary.txt, device-check-logs.tar.gz (all raw
# logs: build, per-test, per-benchmark, cumux server). Falls back to building only the tests and
# benchmarks (scripts/gpu-standalone) when the full project does not build; cumux runs are then skipped.
set -u

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2
out="${OUT:-/tmp/cumux-device-check}"
logs="${DEVICE_CHECK_LOGS:-/tmp/cumux-device-check-logs}"
budget_s="${DEVICE_CHECK_BUDGET:-540}" # hard stop for everything, build included
do_suites=1 native_only=0 do_tests=1 do_bench=1 do_fw=0 do_startup=0 do_usage=0 do_eff=0 do_latency=0 do_many=0 do_sms=0 do_seed=0 do_latency_torch=0 do_ktimes=0 do_faults=0 fuzz_s=0 bench_opts=() do_ab=0 ab_setting="" do_launch_cost=0 do_install=0 do_slurm=0 do_pods=0 do_remote=0
while [ $# -gt 0 ]; do
    case "$1" in
        --native-only) native_only=1 ;;
        --no-tests) do_tests=0 ;;
        --no-suites) do_suites=0 ;;
        --no-bench) do_bench=0 ;;
        --no-mps) bench_opts+=(--no-mps) ;;
        --frameworks) do_fw=1 ;;
        --startup) do_startup=1 ;;
        --usage-cost) do_usage=1 ;;
        --efficiency) do_eff=1 ;;
        --kernel-times) do_ktimes=1 ;;
        --latency) do_latency=1 ;;
        --many) do_many=1 ;;
        --sms) do_sms=1 ;;
        --slurm) do_slurm=1 ;;
        --pods) do_pods=1 ;;
        --remote) do_remote=1 ;;
        --seed) do_seed=1 ;;
        --latency-torch) do_latency_torch=1 ;;
        --fuzz) fuzz_s=$2; shift ;;
        --ab) do_ab=1 ab_setting=$2; shift ;;
        --launch-cost) do_launch_cost=1 ;;
        --faults) do_faults=1 ;;
        --install) do_install=1 ;;
        -h|--help) sed -n '2,/^set -u$/{/^#/p}' "$0"; exit 0 ;;
        *) echo "device-check.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out" || exit 2
rm -rf "$logs" && mkdir -p "$logs" || exit 2
t0=$SECONDS
left() { echo $((budget_s - (SECONDS - t0))); }
say() { echo "[device-check +$((SECONDS - t0))s] $*"; }

# --- build ---
# GnuTLS carried where the machine has no -dev package (see --remote above).
[ -f .gnutls/use.sh ] && . .gnutls/use.sh
build_mode=""
build=""
say "configure + build (full project)"
# CUMUX_CMAKE_ARGS: more for CMake (.gnutls/use.sh names the machine's GnuTLS library there).
read -r -a cmake_args <<<"${CUMUX_CMAKE_ARGS:-}"
if { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCUMUX_RUNTIME_TESTS=ON "${cmake_args[@]}" && cmake --build build -j16; } >"$logs/build.log" 2>&1; then
    build_mode="full project"
    build="$repo/build"
else
    say "full build failed (tail of build.log below); building tests + benchmarks alone"
    tail -n 25 "$logs/build.log" | sed 's/^/    /'
    if { cmake -S scripts/gpu-standalone -B build-gpu -DCMAKE_BUILD_TYPE=Release &&
        cmake --build build-gpu -j16; } >"$logs/build-standalone.log" 2>&1; then
        build_mode="standalone (full build FAILED: cumux not testable)"
        build="$repo/build-gpu"
        native_only=1
    else
        build_mode="FAILED"
        tail -n 25 "$logs/build-standalone.log" | sed 's/^/    /'
    fi
fi
if [ -n "$build" ] && [ $native_only = 0 ] && [ ! -x "$build/cli/cumux" ]; then
    build_mode="$build_mode (no cli/cumux: cumux runs skipped)"
    native_only=1
fi
say "build: $build_mode"
export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$logs/cumux-server}"
mkdir -p "$CUMUX_LOG_DIRECTORY"

# --- GPU tests ---
tests_rc="not run"
modes=(--native)
[ $native_only = 0 ] && modes+=(--cumux)
[ $do_suites = 0 ] && [ $do_tests = 1 ] && tests_rc=0 && say "GPU and runtime suites: not run (--no-suites)"
if [ -n "$build" ] && [ $do_tests = 1 ] && [ $do_suites = 1 ]; then
    modes=(--native)
    [ $native_only = 0 ] && modes+=(--cumux)
    # Keep ~3.5 minutes for the benchmarks and 95 s for the runtime suite.
    t_budget=$(($(left) - (do_bench ? 270 : 10) - 95))
    [ $t_budget -gt 300 ] && t_budget=300
    [ $t_budget -lt 60 ] && t_budget=60
    say "GPU tests ${modes[*]} (at most ${t_budget}s)"
    OUT="$logs/gpu-tests" GPU_TEST_TIMEOUT=60 timeout -k 10 "$t_budget" \
        tests/gpu/run.sh "${modes[@]}" --build "$build" 2>&1 | tee "$logs/gpu-tests.txt"
    tests_rc=${PIPESTATUS[0]}
fi

# --- CUDA runtime suite (tests/runtime): at most 90 s ---
rt_rc="not run"
[ $do_suites = 0 ] && rt_rc=0
if [ -n "$build" ] && [ $do_tests = 1 ] && [ $do_suites = 1 ]; then
    if [ -d "$build/tests/runtime" ]; then
        r_budget=$(($(left) - (do_bench ? 270 : 10)))
        [ $r_budget -gt 90 ] && r_budget=90
        if [ $r_budget -ge 30 ]; then
            say "runtime suite ${modes[*]} (at most ${r_budget}s)"
            OUT="$logs/runtime-tests" RT_TEST_TIMEOUT=30 timeout -k 5 "$r_budget" \
                tests/runtime/run.sh "${modes[@]}" --build "$build" 2>&1 | tee "$logs/runtime-tests.txt"
            rt_rc=${PIPESTATUS[0]}
        else
            rt_rc="no time left"
        fi
    else
        rt_rc="not built"
    fi
fi

# --- cumux trace of a cuBLAS program: its driver calls and export-table slots ---
trace_note="not run"
if [ -n "$build" ] && [ $do_tests = 1 ] && [ $native_only = 0 ] && [ -x "$build/tests/runtime/rt_cublas_static" ]; then
    say "cumux trace of rt_cublas_static"
    CUMUX_PIPE_DIRECTORY="$logs/trace-pipe" timeout -k 5 60 "$build/cli/cumux" trace -o "$logs/trace-cublas.txt" \
        -- "$build/tests/runtime/rt_cublas_static" >"$logs/trace-cublas.out" 2>&1
    trc=$?
    CUMUX_PIPE_DIRECTORY="$logs/trace-pipe" "$build/cli/cumux" stop >/dev/null 2>&1
    calls=$(grep -c ' = [0-9]* CUDA_' "$logs/trace-cublas.txt" 2>/dev/null)
    slots=$(grep -c 'export table .* slot [0-9]* (' "$logs/trace-cublas.txt" 2>/dev/null)
    kinds=$(grep -o 'export table [^ ]* slot [0-9]* (' "$logs/trace-cublas.txt" 2>/dev/null | sort -u | wc -l)
    trace_note="exit $trc; $calls driver calls, $slots export-table slot calls ($kinds distinct slots)"
fi

# --- hostile clients on the real driver: attacks through a client's own shared memory and message fields
# (tests/test_hostile.c), with gpu_vecadd as a bystander whose results must stay right ---
hostile_note="not run"
if [ -n "$build" ] && [ $do_tests = 1 ] && [ $native_only = 0 ] && [ -x "$build/tests/test_hostile" ]; then
    say "hostile clients (test_hostile) on the GPU"
    hp="$logs/hostile-pipe"
    if CUMUX_PIPE_DIRECTORY="$hp" CUMUX_LOG_DIRECTORY="$logs/hostile-server" "$build/cli/cumux" start >"$logs/hostile.txt" 2>&1; then
        CUMUX_PIPE_DIRECTORY="$hp" LD_LIBRARY_PATH="$build/lib" timeout -k 5 90 "$build/tests/test_hostile" \
            "$build/cli/cumux" "$build/tests/gpu/gpu_kernels.fatbin" param-scribble span-wrap ptx-no-nul capture-free capture-global capture-left counts vmm-foreign ipc-owner-frees wait-orphan scribble-all \
            -- "$build/tests/gpu/gpu_vecadd" >>"$logs/hostile.txt" 2>&1
        hrc=$?
        alive=no
        CUMUX_PIPE_DIRECTORY="$hp" "$build/cli/cumux" status >/dev/null 2>&1 && alive=yes
        CUMUX_PIPE_DIRECTORY="$hp" "$build/cli/cumux" stop >/dev/null 2>&1
        hostile_note="exit $hrc, server alive afterwards: $alive; $(grep -h '^scribble-all:' "$logs/hostile.txt" | tail -1)"
        [ $hrc = 0 ] && [ $alive = yes ] || tests_rc="${tests_rc} (hostile failed)"
    else
        hostile_note="cumux start failed"
    fi
    say "hostile clients: $hostile_note"
fi

# --- a fatal GPU fault (gpu_fault: a store where nothing is mapped): cumuxd replaces its GPU worker by
# itself and serves the next program (tests/test_fault_recover.sh, as in CI on the fake driver) ---
fault_note="not run" kill_note="not run" soak_note="not run" limit_note="not run"
# server_test LABEL LOG PATTERN LIMIT CMD...: one of tests/'s server scripts against the GPU; its summary
# lines (PATTERN) in $note.
server_test() {
    local label=$1 log=$2 pattern=$3 limit=$4
    shift 4
    # Within the whole run's budget: a test that no longer fits is said not run, not cut by the caller.
    local cap=$(($(left) - 30))
    if [ "$cap" -lt 20 ]; then
        note="not run (out of budget)"
        say "$label: $note"
        return
    fi
    [ "$limit" -gt "$cap" ] && limit=$cap
    say "$label on the GPU"
    timeout -k 5 "$limit" "$@" >"$logs/$log" 2>&1
    local rc=$?
    note="exit $rc; $(grep -h "$pattern" "$logs/$log" | tr '\n' ' ')"
    [ $rc = 0 ] || tests_rc="${tests_rc} ($label failed)"
    say "$label: $note"
}
if [ -n "$build" ] && [ $do_tests = 1 ] && [ $native_only = 0 ] && [ -x "$build/tests/gpu/gpu_fault" ]; then
    mkdir -p "$logs/no-driver-dir"
    server_test "fault recovery" fault-recover.txt '^fault recovery' 120 \
        tests/test_fault_recover.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 5
    fault_note=$note
    server_test "cumux kill" kill-client.txt '^kill: a spinning' 120 \
        tests/test_kill_client.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    kill_note=$note
    # Issue 10's acceptance: at the defaults (containment and GPU coredumps), 4 programs computing through
    # the 50 faults, the culprit named at each. (The same soak with both off runs with --faults: its 75 s
    # went to the benchmark table.)
    server_test "fault soak at the defaults (50 faults, 4 busy bystanders)" fault-soak-contain.txt '^fault soak:\|^FAIL' 240 \
        env REQUIRE_BYSTANDERS=1 SOAK_LOGS="$logs/fault-soak-contain" \
        tests/test_fault_soak.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 50 4
    soak_note=$note
    server_test "memory limits" mem-limit.txt '^mem_limit: \|^PASS mem_limit' 240 \
        tests/test_mem_limit.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note=$note
    server_test "cumux control" control.txt '^PASS control' 120 \
        tests/test_control.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; control: $note"
    server_test "per-client GPU time" usage.txt '^usage:' 120 \
        tests/test_usage.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; GPU time: $note"
    server_test "Prometheus metrics" metrics.txt '^metrics:' 120 \
        tests/test_metrics.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; metrics: $note"
    server_test "priority classes" priority.txt '^PASS priority' 120 \
        tests/test_priority.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; priority: $note"
    server_test "context limits" limits.txt '^limits:\|^FAIL' 60 \
        tests/test_limits.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; limits: $note"
    server_test "reserved SMs" sms.txt '^PASS sms' 120 \
        tests/test_sms.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; SMs: $note"
    server_test "memory in VMM chunks (CUMUX_CONTAIN=1)" contain.txt '^PASS contain_memory' 150 \
        tests/test_contain_memory.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; chunks: $note"
    server_test "completion marks (CUMUX_MARKS=1)" marks.txt '^PASS marks' 120 \
        tests/test_marks.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu"
    limit_note="$limit_note; marks: $note"
    server_test "128 clients at once" many-clients.txt '^many clients:' 180 \
        tests/test_many_clients.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 128
    limit_note="$limit_note; $note"
fi

# --- --faults: naming the culprit from GPU coredumps (issue 10) ---
faults_note="not run"
if [ -n "$build" ] && [ $do_faults = 1 ] && [ $native_only = 0 ] && [ -x "$build/tests/gpu/gpu_fault" ]; then
    mkdir -p "$logs/no-driver-dir"
    cuda_inc=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include
    if gcc -O2 -pthread -I"$cuda_inc" tools/probe_fault_culprit.c -o "$logs/probe_fault_culprit" -lcuda \
        >"$logs/probe-fault-culprit.txt" 2>&1; then
        for mode in global abort "assert $build/tests/gpu/gpu_kernels.fatbin"; do
            say "probe_fault_culprit $mode (natively)"
            # shellcheck disable=SC2086
            (cd "$logs" && timeout -k 5 60 ./probe_fault_culprit $mode) >>"$logs/probe-fault-culprit.txt" 2>&1
        done
        faults_note="probe: $(grep -h '^SUMMARY\|^B: ' "$logs/probe-fault-culprit.txt" | tr '\n' ' ')"
    else
        faults_note="probe: not built (see probe-fault-culprit.txt)"
    fi
    server_test "fault recovery without containment or dumps" fault-recover-dumps.txt '^fault recovery\|^FAIL' 150 \
        env CUMUX_CONTAIN=0 CUMUX_FAULT_COREDUMP=0 tests/test_fault_recover.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 3
    faults_note="$faults_note; recovery without: $note"
    server_test "fault soak without containment or dumps (50 faults, 4 bystander loops)" fault-soak.txt '^fault soak:' 240 \
        env CUMUX_CONTAIN=0 CUMUX_FAULT_COREDUMP=0 tests/test_fault_soak.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 50 4
    faults_note="$faults_note; soak without containment or dumps: $note"
    server_test "fault soak with containment, without dumps (50 faults, 4 busy bystanders)" fault-soak-named.txt \
        '^fault soak:\|^FAIL' 240 env CUMUX_CONTAIN=1 CUMUX_FAULT_COREDUMP=0 REQUIRE_BYSTANDERS=1 \
        SOAK_LOGS="$logs/fault-soak-named" \
        tests/test_fault_soak.sh "$build/cli/cumux" "$logs/no-driver-dir" "$build/tests/gpu" 50 4
    faults_note="$faults_note; soak without dumps: $note"
    # The runtime's fault programs beside a computing bystander under NVIDIA MPS (recorded) and under cumux
    # with containment and dumps (the bystander must end right): issue 10's comparison.
    server_test "runtime faults under MPS and with containment" runtime-faults.txt \
        '^fault tests under\|bystander at the same time (mps\|bystander at the same time (contain' 120 \
        env OUT="$logs/runtime-faults" RT_TEST_TIMEOUT=30 tests/runtime/run.sh --mps --contain \
        --only "fault_assert fault_illegal fault_trap" --variants static --build "$build"
    faults_note="$faults_note; runtime faults: $note"
fi

# --- benchmarks ---
bench_rc="not run"
if [ -n "$build" ] && [ $do_bench = 1 ]; then
    b_budget=$(($(left) - 10))
    [ $native_only = 1 ] && bench_opts+=(--no-cumux)
    dur=6
    [ $b_budget -lt 260 ] && dur=4 # shorter windows rather than a cut-off table
    say "benchmarks ${bench_opts[*]:-} (window ${dur}s, at most ${b_budget}s)"
    if [ $b_budget -gt 60 ]; then
        OUT="$logs/bench" timeout -k 30 "$((b_budget - 60))" bench/run.sh --build "$build" --duration $dur \
            "${bench_opts[@]}" 2>&1 | tee "$logs/bench.txt"
        bench_rc=${PIPESTATUS[0]}
        # cuBLAS: 4 processes of 512x512 SGEMMs (issue 3's acceptance figure).
        if [ -x "$build/tests/runtime/rt_sgemm_loop_static" ] && [ "$(left)" -gt 45 ]; then
            OUT="$logs/bench-sgemm" timeout -k 10 "$(($(left) - 5))" tests/runtime/bench_sgemm.sh --build "$build" \
                --duration $dur "${bench_opts[@]}" 2>&1 | tee "$logs/bench-sgemm.txt"
        fi
    else
        bench_rc="no time left"
    fi
fi

# --- the framework suite (tests/frameworks), when asked: its own budget ---
fw_rc="not run"
if [ -n "$build" ] && [ $do_fw = 1 ]; then
    fw_modes=(--native)
    [ $native_only = 0 ] && fw_modes+=(--cumux)
    say "framework suite ${fw_modes[*]} (at most ${FW_BUDGET:-420}s)"
    OUT="$logs/frameworks" FW_TIMEOUT=120 timeout -k 10 "${FW_BUDGET:-420}" \
        tests/frameworks/run.sh "${fw_modes[@]}" --build "$build" ${FW_ONLY:+--only "$FW_ONLY"} 2>&1 |
        tee "$logs/frameworks.txt"
    fw_rc=${PIPESTATUS[0]}
fi

# --- the installed tree (issue 41), when asked ---
install_rc="not run" torch_group_rc="not run"
if [ -n "$build" ] && [ $do_install = 1 ]; then
    prefix=$out/prefix
    rm -rf "$prefix"
    say "installed tree in $prefix: the GPU suite under it, then PyTorch in a 4 GiB client group"
    if cmake --install "$build" --prefix "$prefix" >"$logs/install.log" 2>&1; then
        CUMUX_CLI="$prefix/bin/cumux" OUT="$logs/installed-gpu" timeout -k 10 240 tests/gpu/run.sh --cumux --build "$build" 2>&1 |
            tee "$logs/installed-gpu.txt"
        install_rc=${PIPESTATUS[0]}
        timeout -k 10 180 tests/test_torch_group.sh "$prefix/bin/cumux" 2>&1 | tee "$logs/torch-group.txt"
        torch_group_rc=${PIPESTATUS[0]}
    else
        install_rc="cmake --install failed"
    fi
fi

# --- PyTorch pods through the Kubernetes plugin (issue 43), when asked ---
pods_rc="not run"
if [ -n "$build" ] && [ $do_pods = 1 ] && [ $native_only = 0 ]; then
    say "two PyTorch pods (4 and 8 GiB) through the Kubernetes device plugin's answers"
    kb=${K8S_BIN:-$build/kubernetes}
    timeout -k 10 240 tests/test_torch_pods.sh "$build/cli/cumux" "$kb/cumux-device-plugin" "$kb/testkubelet" 2>&1 |
        tee "$logs/torch-pods.txt"
    pods_rc=${PIPESTATUS[0]}
fi

# --- start-up of a PyTorch program (bench/startup.sh), when asked ---
startup_rc="not run"
if [ -n "$build" ] && [ $do_startup = 1 ] && [ $native_only = 0 ]; then
    say "start-up benchmark (at most $(($(left) - 10))s)"
    OUT="$logs/startup" timeout -k 10 "$(($(left) - 10))" bench/startup.sh --build "$build" "${bench_opts[@]}" \
        --phases "${STARTUP_PHASES:-solo trace join pair}" 2>&1 |
        tee "$logs/startup.txt"
    startup_rc=${PIPESTATUS[0]}
fi

# --- the benchmarks run only when asked: what sampling each client's GPU time costs (bench/usage_cost.sh),
# a latency-critical program beside a load (bench/latency.sh), many clients (bench/many.sh) ---
# extra_bench FLAG NAME LABEL SCRIPT [ARGS...]: within what is left of the budget; its exit status in
# extra_rc[NAME], its output in $logs/NAME.txt and its logs (summary.txt last) in $logs/NAME/.
declare -A extra_rc
extra_names=(usage-cost efficiency kernel-times latency many sms seed latency-torch launch-cost server-ab remote)
extra_bench() {
    local flag=$1 name=$2 label=$3
    shift 3
    extra_rc[$name]="not run"
    { [ -n "$build" ] && [ "$flag" = 1 ] && [ $native_only = 0 ]; } || return 0
    say "$label (at most $(($(left) - 10))s)"
    OUT="$logs/$name" timeout -k 10 "$(($(left) - 10))" "$@" --build "$build" 2>&1 | tee "$logs/$name.txt"
    extra_rc[$name]=${PIPESTATUS[0]}
}
extra_bench $do_usage usage-cost "usage sampling cost" bench/usage_cost.sh
extra_bench $do_eff efficiency "one program's own GPU work, natively and under cumux" bench/efficiency.sh
extra_bench $do_ktimes kernel-times "each kernel's GPU time by Nsight Compute, natively and under cumux" bench/kernel_times.sh
extra_bench $do_latency latency "latency benchmark" bench/latency.sh "${bench_opts[@]}"
extra_bench $do_many many "many-clients benchmark" bench/many.sh --unpaced "${bench_opts[@]}"
extra_bench $do_sms sms "reserved-SMs benchmark" bench/sms.sh "${bench_opts[@]}"
extra_bench $do_slurm slurm "a Slurm job's 4 tasks in its group, against MPS" bench/slurm_job.sh
extra_bench $do_seed seed "the seed's two ResNet-50 trainings" bench/seed_table.sh "${bench_opts[@]}"
extra_bench $do_latency_torch latency-torch "ResNet-18 inference beside a training" bench/latency_torch.sh "${bench_opts[@]}"
extra_bench $do_launch_cost launch-cost "a launch's host cost natively, the worker's ways" bench/launch_cost.sh
REMOTE_BUDGET=$(($(left) - 30)) extra_bench $do_remote remote "programs across TCP loopback against local cumux" bench/remote.sh
extra_bench $do_ab server-ab "cumux with $ab_setting against cumux as it is" \
    bench/server_ab.sh --native --duration 3 "$ab_setting"

# --- fuzzing on every core, when asked: the fuzz_server built on a machine whose clang has libFuzzer
# (tests/fuzz/run.sh --fast there), carried here as FUZZ_BINARY ---
fuzz_note="not run"
if [ "$fuzz_s" -gt 0 ]; then
    fb=${FUZZ_BINARY:-build-fuzz-fast/tests/fuzz/fuzz_server}
    if [ -x "$fb" ] && [ -n "$build" ] && [ -f "$build/tests/gpu/gpu_kernels.fatbin" ]; then
        say "fuzzing ${fuzz_s}s on $(nproc) processes"
        FUZZ_FATBIN="$build/tests/gpu/gpu_kernels.fatbin" OUT="$logs/fuzz" timeout -k 10 $((fuzz_s + 60)) \
            tests/fuzz/run.sh --binary "$fb" --jobs "$(nproc)" --seconds "$fuzz_s" >"$logs/fuzz.txt" 2>&1
        fuzz_note="exit $?: $(grep -h '^fuzz:' "$logs/fuzz.txt" | tr '\n' ' ')"
    else
        fuzz_note="no fuzz_server at $fb (build it with tests/fuzz/run.sh --fast and carry it)"
    fi
fi

# --- summary, last ---
tar -czf "$out/device-check-logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
{
    echo
    echo "================ cumux device check ================"
    echo "build: $build_mode"
    echo "GPU tests (exit $tests_rc):"
    if [ -f "$logs/gpu-tests.txt" ]; then
        sed -n '/^test  *| native/,/^logs:/p' "$logs/gpu-tests.txt" | grep -v '^logs:' | sed 's/^/  /'
        grep -q '^SKIP: no CUDA GPU' "$logs/gpu-tests.txt" && echo "  SKIP: no CUDA GPU on this machine"
    fi
    echo "runtime tests (exit $rt_rc):"
    if [ -f "$logs/runtime-tests.txt" ]; then
        sed -n '/^test  *| static native/,/^logs:/p' "$logs/runtime-tests.txt" | grep -v '^logs:' | sed 's/^/  /'
        grep -q '^SKIP: no CUDA GPU' "$logs/runtime-tests.txt" && echo "  SKIP: no CUDA GPU on this machine"
    fi
    if [ $do_fw = 1 ]; then
        echo "framework suite (exit $fw_rc):"
        [ -f "$logs/frameworks.txt" ] && sed -n '/^framework test/,/^logs:/p' "$logs/frameworks.txt" | grep -v '^logs:' | sed 's/^/  /'
    fi
    [ $do_pods = 1 ] && echo "PyTorch pods through the Kubernetes plugin (exit $pods_rc): $(grep -E '^(PASS|FAIL|SKIP)' "$logs/torch-pods.txt" 2>/dev/null | tail -1)"
    if [ $do_install = 1 ]; then
        echo "installed tree: GPU suite under the installed cumux (exit $install_rc):"
        [ -f "$logs/installed-gpu.txt" ] && grep -E '^(PASS|FAIL|SKIP)|passed|failed' "$logs/installed-gpu.txt" | tail -5 | sed 's/^/  /'
        echo "PyTorch in a 4 GiB client group (exit $torch_group_rc):"
        [ -f "$logs/torch-group.txt" ] && grep -E '^(PASS|FAIL|SKIP|OOM)' "$logs/torch-group.txt" | sed 's/^/  /'
    fi
    if [ $do_startup = 1 ]; then
        echo "start-up benchmark (exit $startup_rc):"
        [ -f "$logs/startup/summary.txt" ] && sed 's/^/  /' "$logs/startup/summary.txt"
    fi
    for name in "${extra_names[@]}"; do
        [ "${extra_rc[$name]}" = "not run" ] && continue
        echo "$name (exit ${extra_rc[$name]}):"
        [ -f "$logs/$name/summary.txt" ] && sed 's/^/  /' "$logs/$name/summary.txt"
    done
    echo "cumux trace of a cuBLAS program: $trace_note"
    echo "hostile clients (test_hostile, bystander gpu_vecadd): $hostile_note"
    echo "fault recovery (5 faults of gpu_fault): $fault_note"
    echo "cumux kill (an idle client, then one whose kernel never returns): $kill_note"
    echo "fault soak at the defaults (50 faults, 4 busy bystanders): $soak_note"
    [ $do_faults = 1 ] && echo "faults with GPU coredumps (--faults): $faults_note"
    echo "control and truth (memory limits, cumux control, per-client GPU time, /metrics): $limit_note"
    [ "$fuzz_s" -gt 0 ] && echo "fuzzing: $fuzz_note"
    echo "benchmarks (exit $bench_rc):"
    [ -f "$logs/bench/summary.txt" ] && sed '/^$/d; s/^/  /' "$logs/bench/summary.txt"
    [ -f "$logs/bench-sgemm.txt" ] && sed -n '/^== cuBLAS/,$p' "$logs/bench-sgemm.txt" | sed '/^$/d; s/^/  /'
    echo "elapsed: $((SECONDS - t0)) s; logs: $out/device-check-logs.tar.gz"
} | tee "$out/summary.txt"

[ "$tests_rc" = 0 ] && { [ "$rt_rc" = 0 ] || [ "$rt_rc" = "not built" ]; } &&
    { [ "$bench_rc" = 0 ] || [ $do_bench = 0 ]; } && exit 0
[ $do_tests = 0 ] && [ "$bench_rc" = 0 ] && exit 0
exit 1
