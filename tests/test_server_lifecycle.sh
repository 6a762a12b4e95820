#!/bin/sh
# The server's life cycle through the CLI, with a cumuxd that serves no GPU: start (daemon and
# foreground), status, a second start, stop, a stale socket, owner-only permissions, the log directory,
# a second cumuxd refused, and `cumux run` (shim first on LD_LIBRARY_PATH, server started on demand).
# usage: test_server_lifecycle.sh CUMUX_CLI CUMUXD SHIM_DIR DRIVER_DIR
#   DRIVER_DIR holds libcuda.so.1 -> the toolkit's stub (cuInit fails: the server serves 0 GPUs).
set -u
[ $# -eq 4 ] || { echo "usage: $0 CUMUX_CLI CUMUXD SHIM_DIR DRIVER_DIR" >&2; exit 2; }
cli=$1 srv=$2 shim_dir=$(cd "$3" && pwd -P) drv=$4

tmp=$(mktemp -d) || exit 2
fails=0
started_pids=""

cleanup() {
    # Stop every server this test started, in whichever pipe directory it was.
    for d in "$tmp"/pipe*; do
        [ -d "$d" ] && CUMUX_PIPE_DIRECTORY=$d "$cli" stop >/dev/null 2>&1
    done
    for p in $started_pids; do
        # Only a server of ours that still runs (not a process that reused the pid).
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = cumuxd ] && kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
ok() {
    echo "ok: $*"
}

# Every server here runs without a GPU; the CLI passes the environment on to cumuxd.
export CUMUX_ALLOW_NO_GPU=1
export LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset CUMUX_LOG_DIRECTORY CUMUX_SERVER CUMUX_SERVER_BINARY CUMUX_LIB_DIRECTORY

# use_pipe NAME: a pipe directory that does not exist yet (the server must create it, owner-only).
use_pipe() {
    export CUMUX_PIPE_DIRECTORY="$tmp/$1"
    sock="$CUMUX_PIPE_DIRECTORY/cumuxd.sock"
    pidfile="$CUMUX_PIPE_DIRECTORY/cumuxd.pid"
}

# running PID: the process exists and is not a zombie (the daemon's parent is init, which may take a
# while to reap it).
running() {
    [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

# wait_gone PID: up to 10 s for the process to end.
wait_gone() {
    i=0
    while running "$1"; do
        i=$((i + 1))
        [ $i -ge 100 ] && return 1
        sleep 0.1
    done
    return 0
}

# wait_socket: up to 10 s for the server to listen.
wait_socket() {
    i=0
    until [ -S "$sock" ] && "$cli" status >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -ge 100 ] && return 1
        sleep 0.1
    done
    return 0
}

perm() {
    stat -c %a "$1" 2>/dev/null
}

sanitizer_clean() { # FILE
    ! grep -qE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer' "$1" 2>/dev/null
}

# ---- daemon: start, status, second start, stop ----
use_pipe pipe1
out=$("$cli" status 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not running" && ok "status without a server: exit 1, not running" ||
    fail "status without a server: exit $rc: $out"
out=$("$cli" stop 2>&1)
rc=$?
[ $rc -eq 1 ] && ok "stop without a server: exit 1" || fail "stop without a server: exit $rc: $out"

# Its standard input closed, as a Slurm prolog starts it (the pipe directory's descriptor must not be 0).
out=$("$cli" start 2>&1 <&-)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "started" && ok "start (stdin closed)" || fail "start: exit $rc: $out"
pid=$(cat "$pidfile" 2>/dev/null)
[ -n "$pid" ] && started_pids="$started_pids $pid"
[ -n "$pid" ] && running "$pid" && ok "pid file names a live process" || fail "pid file: '$pid'"
[ -S "$sock" ] && ok "socket exists" || fail "no socket at $sock"

out=$("$cli" status 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "status: exit $rc: $out"
echo "$out" | grep -q "cumuxd pid $pid," && ok "status shows the pid" || fail "status does not show pid $pid: $out"
echo "$out" | grep -q "^clients: 0$" && ok "status shows clients: 0" || fail "status does not show clients: 0: $out"
echo "$out" | grep -qF "$CUMUX_PIPE_DIRECTORY" && ok "status names the pipe directory" ||
    fail "status does not name $CUMUX_PIPE_DIRECTORY: $out"

# Owner-only: the directory the server made, its socket, its pid file and its log.
[ "$(perm "$CUMUX_PIPE_DIRECTORY")" = 700 ] && ok "pipe directory 0700" ||
    fail "pipe directory mode $(perm "$CUMUX_PIPE_DIRECTORY")"
[ "$(perm "$sock")" = 600 ] && ok "socket 0600" || fail "socket mode $(perm "$sock")"
[ "$(perm "$pidfile")" = 600 ] && ok "pid file 0600" || fail "pid file mode $(perm "$pidfile")"
log="$CUMUX_PIPE_DIRECTORY/cumuxd.log"
[ "$(perm "$log")" = 600 ] && ok "log (in the pipe directory by default) 0600" || fail "log mode $(perm "$log")"

out=$("$cli" start 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "already runs" && ok "second start: exit 0, already runs" ||
    fail "second start: exit $rc: $out"
[ "$(cat "$pidfile" 2>/dev/null)" = "$pid" ] && running "$pid" && ok "the first server still runs" ||
    fail "the second start replaced the server"

# cumuxd itself refuses to start while another listens, and leaves the first one alone.
out=$(timeout 20 "$srv" --foreground 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -Eq "already (listens|runs)" && ok "a second cumuxd refuses to start" ||
    fail "a second cumuxd: exit $rc: $out"
"$cli" status >/dev/null 2>&1 && [ -S "$sock" ] && ok "the first server still serves" ||
    fail "the first server stopped serving after a second cumuxd"

out=$("$cli" stop 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "stop" || fail "stop: exit $rc: $out"
[ ! -e "$sock" ] && ok "socket removed" || fail "socket still there after stop"
wait_gone "$pid" && ok "server process gone" || fail "server process $pid still runs 10 s after stop"
[ ! -e "$pidfile" ] && ok "pid file removed" || fail "pid file still there after stop"
out=$("$cli" status 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "not running" && ok "status after stop: exit 1, not running" ||
    fail "status after stop: exit $rc: $out"
grep -q "listening on $sock" "$log" && grep -q "stopped" "$log" && ok "log tells start and stop" ||
    fail "log lacks start or stop: $(cat "$log")"
sanitizer_clean "$log" || fail "sanitizer report in $log: $(cat "$log")"

# ---- a server killed outright leaves its socket behind: status says so, start takes over ----
"$cli" start >/dev/null 2>&1 || fail "restart"
pid=$(cat "$pidfile" 2>/dev/null)
started_pids="$started_pids $pid"
# Both processes at once: the supervisor stopped first, or it would start a new worker (and a worker whose
# supervisor is gone stops cleanly, removing the socket).
wpid=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid" 2>/dev/null)
kill -STOP "$pid" 2>/dev/null
[ -n "$wpid" ] && kill -KILL "$wpid" 2>/dev/null && wait_gone "$wpid" || fail "could not kill the worker $wpid"
kill -KILL "$pid" 2>/dev/null && wait_gone "$pid" || fail "could not kill the server $pid"
[ -S "$sock" ] || fail "expected a stale socket after SIGKILL"
"$cli" status >/dev/null 2>&1 && fail "status with a stale socket exits 0" || ok "status with a stale socket: not running"
out=$("$cli" start 2>&1)
rc=$?
[ $rc -eq 0 ] && "$cli" status >/dev/null 2>&1 && ok "start over a stale socket" || fail "start over a stale socket: exit $rc: $out"
pid=$(cat "$pidfile" 2>/dev/null)
started_pids="$started_pids $pid"
# SIGTERM is a clean stop too.
kill -TERM "$pid" 2>/dev/null
wait_gone "$pid" && [ ! -e "$sock" ] && ok "SIGTERM stops the server and removes its socket" ||
    fail "SIGTERM: process or socket left"

# ---- CUMUX_LOG_DIRECTORY ----
use_pipe pipe2
export CUMUX_LOG_DIRECTORY="$tmp/logs"
out=$("$cli" start 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "start with CUMUX_LOG_DIRECTORY: exit $rc: $out"
pid=$(cat "$pidfile" 2>/dev/null)
started_pids="$started_pids $pid"
"$cli" stop >/dev/null 2>&1 || fail "stop with CUMUX_LOG_DIRECTORY"
wait_gone "$pid" || fail "server $pid still runs"
log="$CUMUX_LOG_DIRECTORY/cumuxd.log"
grep -q "listening on $sock" "$log" 2>/dev/null && ok "log written under CUMUX_LOG_DIRECTORY" ||
    fail "no log at $log"
[ ! -e "$CUMUX_PIPE_DIRECTORY/cumuxd.log" ] && ok "no log in the pipe directory then" ||
    fail "a log in the pipe directory although CUMUX_LOG_DIRECTORY is set"
[ "$(perm "$CUMUX_LOG_DIRECTORY")" = 700 ] && [ "$(perm "$log")" = 600 ] && ok "log directory 0700, log 0600" ||
    fail "log directory mode $(perm "$CUMUX_LOG_DIRECTORY"), log mode $(perm "$log")"
sanitizer_clean "$log" || fail "sanitizer report in $log: $(cat "$log")"
# A log directory made by someone else's mkdir (0755) is fine: only the pipe directory must be private.
mkdir -p "$tmp/shared-logs" && chmod 755 "$tmp/shared-logs"
export CUMUX_LOG_DIRECTORY="$tmp/shared-logs"
out=$("$cli" start 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
    ok "start with a 0755 log directory"
    pid=$(cat "$pidfile" 2>/dev/null)
    started_pids="$started_pids $pid"
    "$cli" stop >/dev/null 2>&1 || fail "stop with a 0755 log directory"
    wait_gone "$pid" || fail "server $pid still runs"
else
    fail "start with a 0755 log directory: exit $rc: $out"
fi
unset CUMUX_LOG_DIRECTORY
# A pipe directory open to others is refused: another user could stand in for the server.
use_pipe pipe-open
chmod 755 "$CUMUX_PIPE_DIRECTORY" 2>/dev/null || mkdir -m 755 -p "$CUMUX_PIPE_DIRECTORY"
out=$("$cli" start 2>&1)
rc=$?
[ $rc -ne 0 ] && ok "a pipe directory open to others is refused" ||
    { fail "started in a 0755 pipe directory: $out"; "$cli" stop >/dev/null 2>&1; }

# ---- foreground: the CLI becomes the server (same pid), logs on stderr, stop ends it ----
use_pipe pipe3
"$cli" start --foreground >"$tmp/fg.out" 2>"$tmp/fg.err" &
fg=$!
started_pids="$started_pids $fg"
wait_socket && ok "foreground server listens" || fail "foreground server did not come up: $(cat "$tmp/fg.err")"
out=$("$cli" status 2>&1)
echo "$out" | grep -q "cumuxd pid $fg," && ok "foreground server runs as the cumux process itself" ||
    fail "foreground status does not show pid $fg: $out"
"$cli" stop >/dev/null 2>&1 || fail "stop of the foreground server"
wait "$fg"
rc=$?
[ $rc -eq 0 ] && ok "foreground server exited 0 after stop" || fail "foreground server exited $rc: $(cat "$tmp/fg.err")"
grep -q "listening on $sock" "$tmp/fg.err" && ok "foreground server logs on stderr" ||
    fail "foreground stderr lacks the log: $(cat "$tmp/fg.err")"
sanitizer_clean "$tmp/fg.err" || fail "sanitizer report from the foreground server: $(cat "$tmp/fg.err")"
[ ! -e "$sock" ] || fail "socket left by the foreground server"

# ---- cumux run: the shim's directory first, the server started when none runs ----
use_pipe pipe4
out=$("$cli" run -- sh -c 'echo "$LD_LIBRARY_PATH"' 2>"$tmp/run.err")
rc=$?
[ $rc -eq 0 ] || fail "cumux run: exit $rc: $(cat "$tmp/run.err")"
first=${out%%:*}
[ "$(cd "$first" 2>/dev/null && pwd -P)" = "$shim_dir" ] && ok "cumux run puts the shim directory first" ||
    fail "cumux run: LD_LIBRARY_PATH=$out, expected $shim_dir first"
case ":$out:" in
    *":$drv:"*) ok "cumux run keeps the rest of LD_LIBRARY_PATH" ;;
    *) fail "cumux run dropped $drv from LD_LIBRARY_PATH=$out" ;;
esac
pid=$(cat "$pidfile" 2>/dev/null)
[ -n "$pid" ] && started_pids="$started_pids $pid"
"$cli" status >/dev/null 2>&1 && ok "cumux run started the server" || fail "no server after cumux run"
# With a server running, run reuses it, and passes on the program's exit status.
"$cli" run -- sh -c 'exit 3'
rc=$?
[ $rc -eq 3 ] && ok "cumux run passes on the exit status" || fail "cumux run -- sh -c 'exit 3': exit $rc"
[ "$(cat "$pidfile" 2>/dev/null)" = "$pid" ] && ok "cumux run reused the running server" ||
    fail "cumux run started another server"
"$cli" run -- "$tmp/no-such-program" 2>/dev/null
rc=$?
[ $rc -eq 127 ] && ok "cumux run of a missing program: 127" || fail "cumux run of a missing program: exit $rc"
"$cli" run 2>/dev/null
rc=$?
[ $rc -eq 2 ] && ok "cumux run without a command: usage, exit 2" || fail "cumux run without a command: exit $rc"
"$cli" stop >/dev/null 2>&1 || fail "stop after cumux run"
wait_gone "$pid" || fail "server $pid still runs"
sanitizer_clean "$CUMUX_PIPE_DIRECTORY/cumuxd.log" || fail "sanitizer report: $(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.log")"

# ---- a server that cannot start: no GPU and no CUMUX_ALLOW_NO_GPU ----
use_pipe pipe5
out=$(env -u CUMUX_ALLOW_NO_GPU "$cli" start 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "failed to start" && ok "start without a GPU fails and says so" ||
    fail "start without a GPU: exit $rc: $out"
"$cli" status >/dev/null 2>&1 && fail "a server runs although it could not start"
[ -e "$sock" ] && fail "socket left by a server that could not start"

echo "test_server_lifecycle: $fails failed"
[ $fails -eq 0 ]
