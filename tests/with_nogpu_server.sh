#!/bin/sh
# Runs a command against a private cumuxd that serves without a GPU, then checks that every client is
# gone, stops the server, and fails on any sanitizer report in the server's log.
# usage: with_nogpu_server.sh CUMUX_CLI DRIVER_DIR -- CMD [ARGS...]
#   DRIVER_DIR holds libcuda.so.1 -> the toolkit's stub: its cuInit fails, so cumuxd (with
#   CUMUX_ALLOW_NO_GPU=1) serves 0 GPUs. CMD gets CUMUX_PIPE_DIRECTORY and CUMUX_TEST_DEVICE_COUNT=0.
set -u
[ $# -ge 4 ] && [ "$3" = "--" ] || { echo "usage: $0 CUMUX_CLI DRIVER_DIR -- CMD [ARGS...]" >&2; exit 2; }
cli=$1 drv=$2
shift 3

tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log"
log="$CUMUX_LOG_DIRECTORY/cumuxd.log"
pid=""

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

# running PID: exists and is not a zombie (the daemon's parent is init, which may reap it late).
running() {
    [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

show_log() {
    echo "---- cumuxd log ($log) ----"
    cat "$log" 2>/dev/null || echo "(none)"
    echo "---- end of log ----"
}

if ! CUMUX_ALLOW_NO_GPU=1 LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start; then
    echo "FAIL: cumux start"
    show_log
    exit 1
fi
pid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid" 2>/dev/null)
[ -n "$pid" ] || { echo "FAIL: no pid file"; show_log; exit 1; }

CUMUX_TEST_DEVICE_COUNT=0 "$@"
rc=$?
[ $rc -eq 0 ] || echo "FAIL: $* exited $rc"

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

if ! "$cli" stop >/dev/null; then
    echo "FAIL: cumux stop"
    rc=1
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
# A sanitizer's report in the server (it runs as a daemon: its stderr is the log).
if grep -qE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer' "$log" 2>/dev/null; then
    echo "FAIL: sanitizer report in the server's log"
    rc=1
fi
[ $rc -eq 0 ] || show_log
exit $rc
