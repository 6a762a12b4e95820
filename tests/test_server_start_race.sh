#!/bin/sh
# Several `cumux run` at once (as a job launcher starts its ranks) must end with exactly one cumuxd for
# the pipe directory, and `cumux stop` must leave none.
# usage: test_server_start_race.sh CUMUX_CLI DRIVER_DIR [N]
#   DRIVER_DIR holds libcuda.so.1 -> the toolkit's stub (cuInit fails: the server serves 0 GPUs).
set -u
[ $# -ge 2 ] || { echo "usage: $0 CUMUX_CLI DRIVER_DIR [N]" >&2; exit 2; }
cli=$1 drv=$2 n=${3:-8}

tmp=$(mktemp -d) || exit 2
export CUMUX_PIPE_DIRECTORY="$tmp/pipe" CUMUX_ALLOW_NO_GPU=1
export LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The cumuxd processes of this test: found by the pipe directory in their environment.
servers() {
    for d in /proc/[0-9]*; do
        [ "$(cat "$d/comm" 2>/dev/null)" = cumuxd ] || continue
        grep -q '^State:[[:space:]]*Z' "$d/status" 2>/dev/null && continue
        tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "CUMUX_PIPE_DIRECTORY=$CUMUX_PIPE_DIRECTORY" &&
            echo "${d#/proc/}"
    done
}

cleanup() {
    "$cli" stop >/dev/null 2>&1
    for p in $(servers); do
        kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

rc=0
i=0
pids=""
while [ $i -lt "$n" ]; do
    "$cli" run -- true &
    pids="$pids $!"
    i=$((i + 1))
done
for p in $pids; do
    wait "$p" || { echo "FAIL: a cumux run exited non-zero"; rc=1; }
done
running=$(servers | wc -l)
if [ "$running" -eq 1 ]; then
    echo "ok: $n concurrent cumux run: one server"
else
    echo "FAIL: $n concurrent cumux run left $running servers for one pipe directory: $(servers | tr '\n' ' ')"
    rc=1
fi
"$cli" stop >/dev/null 2>&1 || { echo "FAIL: cumux stop"; rc=1; }
i=0
while [ -n "$(servers)" ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
left=$(servers | wc -l)
if [ "$left" -eq 0 ]; then
    echo "ok: none left after cumux stop"
else
    echo "FAIL: $left servers still run after cumux stop (unreachable: their socket was replaced)"
    rc=1
fi
exit $rc
