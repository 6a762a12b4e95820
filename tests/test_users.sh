#!/usr/bin/env bash
# Other users' programs on one server (CUMUX_USERS, server/access.c; issue 41): by default only cumuxd's user
# and root get in (its sockets 0600, and a connection of another uid is refused); CUMUX_USERS=NAME lets that
# user's programs compute (right results) and read the status, but not change the server (stop, defaults,
# reload) nor end another's program; a user it does not name is refused with a message; @GROUP admits a
# member by a supplementary group. The pipe directory may then be 0755 (root's, as the service's
# /run/cumux), and is still refused writable by others. Needs root (programs run as uid 65534 by setpriv).
# usage: test_users.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (it runs programs as another user)"; exit 0; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv (util-linux)"; exit 0; }
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby vec.out
chmod 755 "$tmp"
as() { # UID GID[,GROUPS] CMD...: CMD as that user, in the test's environment
    local u=$1 g=${2%%,*} groups=${2#*,}
    shift 2
    local gopt=--clear-groups
    [ "$groups" != "$2" ] && gopt=--groups=$groups # supplementary ones
    setpriv --reuid="$u" --regid="$g" "$gopt" env CUMUX_PIPE_DIRECTORY="$CUMUX_PIPE_DIRECTORY" "$@"
}
# Can uid 65534 reach the programs at all (the build tree's directories open to others)?
as 65534 65534 test -x "$gdir/gpu_vecadd" -a -r "$gdir/gpu_kernels.fatbin" -a -x "$cli" ||
    { echo "SKIP: the build tree ($gdir) is not readable by uid 65534"; exit 0; }

# Default: only the server's user and root.
mkdir -m 700 "$CUMUX_PIPE_DIRECTORY"
start_ours
[ "$(stat -c %a "$CUMUX_PIPE_DIRECTORY/cumuxd.sock")" = 600 ] || fail "the socket's mode by default: $(stat -c %a "$CUMUX_PIPE_DIRECTORY/cumuxd.sock")"
"$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vec.out" 2>&1 || fail "root's program"
stop_ours

# CUMUX_USERS=nobody, the pipe directory root's and 0755 like the service's.
chmod 755 "$CUMUX_PIPE_DIRECTORY"
start_ours CUMUX_USERS=nobody
for s in "$CUMUX_PIPE_DIRECTORY"/cumuxd*.sock; do
    [ "$(stat -c %a "$s")" = 666 ] || fail "$s's mode with CUMUX_USERS: $(stat -c %a "$s")"
done
as 65534 65534 "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vec.out" 2>&1 || fail "nobody's program under CUMUX_USERS=nobody"
grep -q "^PASS" "$tmp/vec.out" || fail "nobody's program did not pass"
as 65534 65534 "$cli" status >"$tmp/st.out" 2>&1 || fail "nobody's cumux status: $(cat "$tmp/st.out")"
as 65534 65534 "$cli" control set_default_device_pinned_mem_limit 0 1G >"$tmp/ctl.out" 2>&1 &&
    fail "nobody changed the server's default limit"
grep -q "only cumuxd's user and root" "$tmp/ctl.out" || fail "nobody's refused control said: $(cat "$tmp/ctl.out")"
as 65534 65534 "$cli" stop >"$tmp/stop.out" 2>&1
"$cli" status >/dev/null 2>&1 || fail "nobody stopped the server: $(cat "$tmp/stop.out")"
as 65534 65534 "$cli" reload >/dev/null 2>&1 && fail "nobody reloaded the server's settings"
as 65534 65534 "$cli" set --group /some/cgroup --memory 1G >/dev/null 2>&1 && fail "nobody gave a group settings"
as 65534 65534 "$cli" kill --group / >/dev/null 2>&1 && fail "nobody ended a group's programs"
"$cli" status | awk '$NF == "/some/cgroup" {f = 1} END {exit !f}' && fail "nobody's refused cumux set --group made a group"
# A user it does not name.
as 65533 65533 "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vec.out" 2>&1 && fail "uid 65533's program ran, not named in CUMUX_USERS"
grep -q "CUMUX_USERS does not name you" "$tmp/vec.out" "$tmp/log"/*.log 2>/dev/null ||
    fail "uid 65533's refusal did not say why: $(cat "$tmp/vec.out")"
stop_ours

# @GROUP: a member by a supplementary group gets in, the same uid without it does not.
start_ours CUMUX_USERS=@65530
as 65533 65533,65530 "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vec.out" 2>&1 || fail_show="$tmp/vec.out" fail "a member of group 65530 under CUMUX_USERS=@65530"
as 65533 65533 "$cli" run -- "$gdir/gpu_vecadd" >"$tmp/vec.out" 2>&1 && fail "a non-member ran under CUMUX_USERS=@65530"
stop_ours

# Writable by others: refused even so; a user list naming nobody known: refused at start.
chmod 757 "$CUMUX_PIPE_DIRECTORY"
start=$(env CUMUX_USERS=all LD_LIBRARY_PATH="$drv" "$cli" start 2>&1) && fail "a server started on a pipe directory writable by others"
chmod 755 "$CUMUX_PIPE_DIRECTORY"
start=$(env CUMUX_USERS=no-such-user-here LD_LIBRARY_PATH="$drv" "$cli" start 2>&1) && fail "a server started with CUMUX_USERS naming no one"
printf '%s' "$start" | grep -q "no-such-user-here is no user" || fail "the refusal of an unknown user said: $start"
echo "PASS users"
