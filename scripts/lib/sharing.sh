# Starting and stopping the GPU sharing modes the benchmarks compare: NVIDIA MPS and cumux.
# Sourced by the benchmarks (bench/*.sh, tests/runtime/bench_sgemm.sh). The caller sets: out (log folder),
# cli (the cumux CLI), mps_ctl (nvidia-cuda-mps-control), mps_pipe, mps_log, and defines log().
mps_up=0 cumux_up=0
# The newer benchmarks (bench/latency.sh, bench/many.sh, bench/usage_cost.sh) call this first: it exits 0
# with a SKIP line where there is no GPU, and sets MPS's defaults (mps_ctl "" where MPS is not installed)
# and log().
sharing_init() {
    if ! nvidia-smi -L >/dev/null 2>&1; then
        echo "SKIP: no CUDA GPU on this machine"
        exit 0
    fi
    mps_pipe=/tmp/mps_pipe mps_log=/tmp/mps_log
    mps_ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null || true)
    [ -z "$mps_ctl" ] && [ -x /usr/local/nvidia/bin/nvidia-cuda-mps-control ] &&
        mps_ctl=/usr/local/nvidia/bin/nvidia-cuda-mps-control
    log() { echo "[$(date +%T)] $*"; }
    trap 'mps_stop; cumux_stop' EXIT
}
# Anchored on the program path: a shell whose command line merely mentions MPS must not match.
mps_procs() { pgrep -f '^[^ ]*nvidia-cuda-mps-(control|server)( |$)' 2>/dev/null || true; }
mps_start() {
    mkdir -p "$mps_pipe" "$mps_log"
    if CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log "$mps_ctl" -d >>"$out/mps.log" 2>&1; then
        mps_up=1
        sleep 1
        return 0
    fi
    return 1
}
mps_stop() {
    [ $mps_up = 1 ] || return 0
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe "$mps_ctl" >>"$out/mps.log" 2>&1
    for _ in $(seq 1 60); do
        [ -z "$(mps_procs)" ] && break
        sleep 0.25
    done
    if [ -n "$(mps_procs)" ]; then
        log "warning: MPS processes still present after quit: $(mps_procs | tr '\n' ' ')"
        return 1
    fi
    mps_up=0
}
# CUMUX_SERVER_ENV: settings for the server alone, e.g. "CUDA_DEVICE_MAX_CONNECTIONS=16" (its hardware
# queues, which all clients' streams share), to try without changing the native and MPS runs.
cumux_start() {
    export CUMUX_LOG_DIRECTORY="${CUMUX_LOG_DIRECTORY:-$out/cumux-server}"
    mkdir -p "$CUMUX_LOG_DIRECTORY"
    local server_env
    read -r -a server_env <<<"${CUMUX_SERVER_ENV:-}"
    [ -n "${CUMUX_SERVER_ENV:-}" ] && log "cumuxd started with ${CUMUX_SERVER_ENV}"
    if env "${server_env[@]}" "$cli" start >>"$out/cumux-cli.log" 2>&1; then
        cumux_up=1
        "$cli" status >>"$out/cumux-cli.log" 2>&1
        return 0
    fi
    return 1
}
cumux_stop() {
    [ $cumux_up = 1 ] || return 0
    "$cli" stop >>"$out/cumux-cli.log" 2>&1 || log "warning: cumux stop failed"
    cumux_up=0
}
