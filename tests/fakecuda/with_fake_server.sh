#!/bin/sh
# Runs a command against a private cumuxd whose driver is the fake one-GPU driver (tests/fakecuda), then
# checks that every client is gone, that the fake's live counts are back to what the server held before
# the command, stops the server, and fails on any sanitizer report or oracle line in the server's log.
# usage: with_fake_server.sh CUMUX_CLI FAKE_DRIVER_DIR [--memory-mb N] -- CMD [ARGS...]
#   FAKE_DRIVER_DIR holds the fake libcuda.so.1; only the server gets it. CMD gets CUMUX_PIPE_DIRECTORY
#   and CUMUX_TEST_DEVICE_COUNT=1; it loads the shim itself (e.g. through `cumux run --`).
set -u
[ $# -ge 4 ] || { echo "usage: $0 CUMUX_CLI FAKE_DRIVER_DIR [--memory-mb N] -- CMD [ARGS...]" >&2; exit 2; }
cli=$1 drv=$2
shift 2
mem=""
if [ "$1" = "--memory-mb" ]; then
    mem=$2
    shift 2
fi
[ "${1:-}" = "--" ] && [ $# -ge 2 ] || { echo "$0: expected -- CMD" >&2; exit 2; }
shift

tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log"
log="$CUMUX_LOG_DIRECTORY/cumuxd.log"
stats="$tmp/fake-stats"
pid=""

running() {
    [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

cleanup() {
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

# Only the server sees the fake and its settings.
if ! env CUMUX_FAKE_STATS="$stats" ${mem:+CUMUX_FAKE_MEMORY_MB=$mem} \
        LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start; then
    echo "FAIL: cumux start"
    show_log
    exit 1
fi
pid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid" 2>/dev/null)
[ -n "$pid" ] || { echo "FAIL: no pid file"; show_log; exit 1; }
if ! "$cli" status 2>/dev/null | grep -q '^GPU 0: cumux fake GPU'; then
    echo "FAIL: the server does not serve the fake GPU:"
    "$cli" status
    show_log
    exit 1
fi
i=0
while [ ! -s "$stats" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
baseline=$(cat "$stats" 2>/dev/null)
[ -n "$baseline" ] || { echo "FAIL: the fake driver wrote no counts to $stats"; show_log; exit 1; }

CUMUX_TEST_DEVICE_COUNT=1 "$@"
rc=$?
[ $rc -eq 0 ] || echo "FAIL: $* exited $rc"

if ! running "$pid"; then
    echo "FAIL: cumuxd died during the test"
    rc=1
else
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
    until [ "$(cat "$stats" 2>/dev/null)" = "$baseline" ]; do
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
if grep -qE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer' "$log" 2>/dev/null; then
    echo "FAIL: sanitizer report in the server's log"
    rc=1
fi
[ $rc -eq 0 ] || show_log
exit $rc
