# Sourced by the tests that start a server of their own, fault it and must leave no process of it behind
# (test_fault_recover.sh, test_kill_client.sh, test_fault_soak.sh). Needs CUMUX_PIPE_DIRECTORY,
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
