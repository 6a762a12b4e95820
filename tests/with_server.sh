#!/bin/sh
# Runs a command against a private cumuxd, then checks that every client is gone, stops the server, and
# fails on any sanitizer report in the server's log. Two drivers for the server:
#   the toolkit's stub (default): its cuInit fails, so cumuxd (CUMUX_ALLOW_NO_GPU=1) serves 0 GPUs;
#   --fake: the fake one-GPU driver (tests/fakecuda); then also the fake's live counts must come back to
#     what the server held before the command, and the log must have no oracle line.
# usage: with_server.sh CUMUX_CLI DRIVER_DIR [--fake [--memory-mb N]] -- CMD [ARGS...]
#   DRIVER_DIR holds the libcuda.so.1 that only the server gets. CMD gets CUMUX_PIPE_DIRECTORY and
#   CUMUX_TEST_DEVICE_COUNT (0, or 1 with --fake); it loads the shim itself (e.g. through `cumux run --`).
set -u
usage() { echo "usage: $0 CUMUX_CLI DRIVER_DIR [--fake [--memory-mb N]] -- CMD [ARGS...]" >&2; exit 2; }
[ $# -ge 4 ] || usage
cli=$1 drv=$2
shift 2
fake=0 mem=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
        --fake) fake=1 ;;
        --memory-mb) mem=$2; shift ;;
        *) usage ;;
    esac
    shift
done
[ "${1:-}" = "--" ] && [ $# -ge 2 ] || usage
shift

tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log"
log="$CUMUX_LOG_DIRECTORY/cumuxd.log"
stats="$tmp/fake-stats"
pid=""

# running PID: exists and is not a zombie (the daemon's parent is init, which may reap it late).
running() {
    [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

cleanup() {
    # Whatever happened, no server outlives the test.
    if [ -n "$pid" ] && running "$pid"; then
        "$cli" stop >/dev/null 2>&1 || true
        i=0
        while running "$pid" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = cumuxd ] && kill -KILL "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

show_log() {
    echo "---- cumuxd log ($log) ----"
    cat "$log" 2>/dev/null || echo "(none)"
    echo "---- end of log ----"
}

# Only the server sees the driver and its settings. No standby worker unless the caller asks for one: the
# fake driver's counts file is one per server, and a standby would write its own counts there too
# (tests/test_fault_recover.sh tests the standby).
export CUMUX_STANDBY="${CUMUX_STANDBY:-0}"
if [ $fake = 1 ]; then
    set -- env CUMUX_TEST_DEVICE_COUNT=1 "$@"
    env CUMUX_FAKE_STATS="$stats" ${mem:+CUMUX_FAKE_MEMORY_MB=$mem} \
        LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start
else
    set -- env CUMUX_TEST_DEVICE_COUNT=0 "$@"
    env CUMUX_ALLOW_NO_GPU=1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start
fi || { echo "FAIL: cumux start"; show_log; exit 1; }
pid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid" 2>/dev/null)
[ -n "$pid" ] || { echo "FAIL: no pid file"; show_log; exit 1; }
# The GPU worker: its supervisor would replace it silently if it crashed, so it is watched by its own pid.
wpid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid" 2>/dev/null)
[ -n "$wpid" ] || { echo "FAIL: no worker pid file"; show_log; exit 1; }
baseline=""
if [ $fake = 1 ]; then
    if ! "$cli" status 2>/dev/null | grep -q '^GPU 0: cumux fake GPU'; then
        echo "FAIL: the server does not serve the fake GPU:"
        "$cli" status
        show_log
        exit 1
    fi
    i=0
    while [ ! -s "$stats" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    # The fake rewrites its counts every 100 ms: a fresh copy holds what the server made while starting.
    sleep 0.3
    baseline=$(cat "$stats" 2>/dev/null)
    [ -n "$baseline" ] || { echo "FAIL: the fake driver wrote no counts to $stats"; show_log; exit 1; }
fi

"$@"
rc=$?
[ $rc -eq 0 ] || echo "FAIL: $* exited $rc"

if ! running "$pid" || ! running "$wpid"; then
    echo "FAIL: cumuxd (or its GPU worker $wpid) died during the test"
    rc=1
    # A supervisor that replaced its worker still runs: it is stopped as after any test.
    running "$pid" && ! "$cli" stop >/dev/null && echo "FAIL: cumux stop"
else
    # Every client of the command is gone, however it ended.
    i=0
    until "$cli" status 2>/dev/null | grep -q '^clients: 0$'; do
        i=$((i + 1))
        if [ $i -ge 100 ]; then
            echo "FAIL: clients left on the server after the test:"
            "$cli" status
            rc=1
            break
        fi
        sleep 0.1
    done
    # What the clients made is gone (the reaper unloads and unregisters a moment later: wait for it).
    i=0
    while [ -n "$baseline" ] && [ "$(cat "$stats" 2>/dev/null)" != "$baseline" ]; do
        i=$((i + 1))
        if [ $i -ge 100 ]; then
            echo "FAIL: the fake driver's counts did not come back to the server's baseline:"
            echo "$baseline" >"$tmp/base"
            cat "$stats" >"$tmp/now" 2>/dev/null
            diff "$tmp/base" "$tmp/now" | sed 's/^/    /'
            rc=1
            break
        fi
        sleep 0.1
    done
    if ! "$cli" stop >/dev/null; then
        echo "FAIL: cumux stop"
        rc=1
    fi
fi
i=0
while running "$pid"; do
    i=$((i + 1))
    if [ $i -ge 100 ]; then
        echo "FAIL: cumuxd (pid $pid) still runs 10 s after cumux stop"
        rc=1
        break
    fi
    sleep 0.1
done
if grep -q 'FAKECUDA ORACLE' "$log" 2>/dev/null; then
    echo "FAIL: the oracle caught the server touching memory outside any allocation"
    rc=1
fi
# A sanitizer's report in the server (it runs as a daemon: its stderr is the log).
if grep -qE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer' "$log" 2>/dev/null; then
    echo "FAIL: sanitizer report in the server's log"
    rc=1
fi
[ $rc -eq 0 ] || show_log
exit $rc
