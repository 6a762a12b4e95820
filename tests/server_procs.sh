# Sourced by the tests that start a server of their own and must leave no process of it behind
# (test_fault_recover.sh, test_kill_client.sh). Needs CUMUX_PIPE_DIRECTORY and $cli.

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
