# Sourced by the tests that start a server of their own (and often fault it) and must leave no process of it behind
# (test_fault_recover.sh, test_kill_client.sh, test_fault_soak.sh, test_mem_limit.sh, test_control.sh). Needs CUMUX_PIPE_DIRECTORY,
# CUMUX_LOG_DIRECTORY, $cli and $gdir (the GPU test programs).

# The cumuxd processes (supervisor, serving and standby workers) of this pipe directory.
pids_of_ours() {
    for d in /proc/[0-9]*; do
        case "$(cat "$d/comm" 2>/dev/null)" in cumuxd | cumuxd-gpu) ;; *) continue ;; esac
        grep -q '^State:[[:space:]]*Z' "$d/status" 2>/dev/null && continue
        tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "CUMUX_PIPE_DIRECTORY=$CUMUX_PIPE_DIRECTORY" &&
            echo "${d#/proc/}"
    done
}

# Stops the server, and kills whatever of it is left.
stop_ours() {
    "$cli" stop >/dev/null 2>&1
    for p in $(pids_of_ours); do kill -KILL "$p" 2>/dev/null; done
}

# Waits (up to 10 s) until the server has logged "standby worker ready" at least N times: each takeover
# starts the next standby, whose GPU takes a while to start.
wait_standby_ready() {
    local i
    for ((i = 0; i < 200; i++)); do
        [ "$(grep -c 'standby worker ready' "$CUMUX_LOG_DIRECTORY/cumuxd.log")" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}

# A new program (gpu_vecadd) is served: tried for up to 10 s, its last output in OUT; $serve_tries says
# how many tries it took.
serve_one() {
    for ((serve_tries = 1; serve_tries <= 100; serve_tries++)); do
        "$cli" run -- "$gdir/gpu_vecadd" >"$1" 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# Starts the server with the driver of $drv first on the library path and the variables given (VAR=V ...),
# or fails the test.
start_ours() {
    env "$@" LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null || fail "cumux start $*"
}

# The start of a test that runs a server of its own (then source this file): a temporary directory $tmp
# with the pipe and log directories in it; at exit the process $client (when set) is killed, the server
# stopped and $tmp removed. fail MSG prints MSG, the files that $fail_show names (a glob) and the server's
# log, and exits 1. own_server_test [--no-standby] [FILE...]: --no-standby runs the server without its
# standby worker (CUMUX_STANDBY=0); each FILE, a name in $tmp, goes into $fail_show.
own_server_test() {
    tmp=$(mktemp -d) || exit 2
    export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_LOG_DIRECTORY="$tmp/log" ASAN_OPTIONS=detect_leaks=0
    client="" fail_show=""
    local a
    for a in "$@"; do
        case "$a" in
        --no-standby) export CUMUX_STANDBY=0 ;;
        *) fail_show="${fail_show:+$fail_show }$tmp/$a" ;;
        esac
    done
    trap own_server_cleanup EXIT
}
own_server_cleanup() {
    [ -n "${client:-}" ] && kill -KILL "$client" 2>/dev/null
    stop_ours
    rm -rf "$tmp"
}
fail() {
    echo "FAIL: $*"
    local f
    for f in $fail_show; do [ -f "$f" ] && { echo "---- $f ----"; cat "$f"; }; done
    echo "---- cumuxd log ----"
    cat "$tmp/log/cumuxd.log" 2>/dev/null
    exit 1
}
