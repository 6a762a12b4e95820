#!/bin/sh
# cumuxd refuses a pipe directory that is not its own private directory: a symbolic link (even to a
# good directory), a directory of another uid, one open to others (0755). Each is refused at once with
# a message naming the problem, and no server starts. Needs root (it chowns to 65534).
# usage: test_pipe_dir.sh CUMUXD CUMUX_CLI DRIVER_DIR
set -u
srv=$1 cli=$2 drv=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 0; }
tmp=$(mktemp -d) || exit 2
rc=0
trap 'CUMUX_PIPE_DIRECTORY="$tmp/real" "$cli" stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT

# refused NAME DIR PATTERN: cumuxd with pipe directory DIR must fail, saying PATTERN.
refused() {
    out=$(CUMUX_PIPE_DIRECTORY=$2 CUMUX_LOG_DIRECTORY=$tmp/log CUMUX_ALLOW_NO_GPU=1 LD_LIBRARY_PATH=$drv \
          timeout 20 "$srv" 2>&1)
    st=$?
    if [ $st -eq 0 ]; then
        echo "FAIL: $1: cumuxd started on $2"
        CUMUX_PIPE_DIRECTORY=$2 "$cli" stop >/dev/null 2>&1
        rc=1
    elif ! printf '%s' "$out" | grep -q -- "$3"; then
        echo "FAIL: $1: cumuxd's message does not say \"$3\": $out"
        rc=1
    else
        echo "ok: $1: $out"
    fi
}

mkdir -m 700 "$tmp/real" "$tmp/log"
ln -s "$tmp/real" "$tmp/link"
refused "symbolic link" "$tmp/link" "symbolic link"
[ -e "$tmp/real/cumuxd.sock" ] && { echo "FAIL: a socket was made through the link"; rc=1; }

mkdir -m 700 "$tmp/theirs"
chown 65534:65534 "$tmp/theirs"
refused "another uid's directory" "$tmp/theirs" "uid 65534"

mkdir -m 755 "$tmp/open"
refused "mode 0755" "$tmp/open" "0755"

# The directory it makes itself, and a good existing one, are accepted.
out=$(CUMUX_PIPE_DIRECTORY=$tmp/real CUMUX_LOG_DIRECTORY=$tmp/log CUMUX_ALLOW_NO_GPU=1 LD_LIBRARY_PATH=$drv \
      timeout 20 "$srv" 2>&1) || { echo "FAIL: cumuxd refused a good directory: $out"; rc=1; }
CUMUX_PIPE_DIRECTORY=$tmp/real "$cli" status >/dev/null || { echo "FAIL: no server on the good directory"; rc=1; }
CUMUX_PIPE_DIRECTORY=$tmp/real "$cli" stop >/dev/null || { echo "FAIL: cumux stop"; rc=1; }
exit $rc
