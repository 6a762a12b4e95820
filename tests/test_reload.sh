#!/usr/bin/env bash
# The settings file (cumuxd --config FILE, CUMUX_CONFIG; the service's /etc/cumux/cumuxd.conf) and
# `cumux reload` (issue 41): the file's defaults hold from the start; a reload while a program computes
# applies the new defaults to programs that connect after it, and the running one finishes right, on the
# same worker; settings that only a start takes are named; a file that does not read right changes
# nothing and says why; SIGHUP to the supervisor (systemctl reload) does the same as `cumux reload`.
# On the fake driver in CI; on a GPU the same script.
# usage: test_reload.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test --no-standby busy.out reload.out
ctl() { "$cli" control "$@" 2>"$tmp/ctl.err"; }
conf=$tmp/cumuxd.conf
cat >"$conf" <<'CONF'
# a comment, then a blank line

CUMUX_DEFAULT_MEMORY_LIMIT=48M
CUMUX_DEFAULT_PRIORITY="low"
CUMUX_SYNC=yield
CUMUX_GROUPS="/cumux-reload-test/a:memory=64M,priority=high /cumux-reload-test/b:threads=50"
CONF
start_ours CUMUX_CONFIG="$conf"
server=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid") worker=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 48M ] || fail "the file's limit at start: $(ctl get_default_device_pinned_mem_limit 0)"
[ "$(ctl get_default_client_priority)" = 1 ] || fail "the file's priority (low: MPS's 1) at start: $(ctl get_default_client_priority)"
out=$("$cli" run -- "$gdir/gpu_mem_limit" $((48 << 20)) 2>&1) || fail "a program under the file's 48M: $out"
# The file's groups (CUMUX_GROUPS), as cumux set --group would give them.
"$cli" status >"$tmp/status.out"
awk '$NF == "/cumux-reload-test/a" && $2 == "64.0" && $4 == "high" {f = 1} END {exit !f}' "$tmp/status.out" &&
    awk '$NF == "/cumux-reload-test/b" && $2 == "-" && $5 == "50%" {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail "the file's groups at start: $(grep -A3 '^groups' "$tmp/status.out")"

# A program computing while the settings are read again: 40 kernels of 50 ms, checked, then it waits.
mkfifo "$tmp/go"
"$cli" run -- "$gdir/gpu_busy" 50 40 <"$tmp/go" >"$tmp/busy.out" 2>&1 &
client=$!
exec {go}>"$tmp/go"
for ((i = 0; i < 200; i++)); do [ "$(ctl get_client_list "$server")" = "$client" ] && break; sleep 0.05; done
[ "$(ctl get_client_list "$server")" = "$client" ] || fail "the busy program did not connect"
cat >"$conf" <<'CONF'
CUMUX_DEFAULT_MEMORY_LIMIT=0=96M
CUMUX_DEFAULT_THREADS=50
CUMUX_SYNC=blocking
CUMUX_MAX_CLIENTS=64
CUMUX_GROUPS=/cumux-reload-test/a:memory=32M
CONF
"$cli" reload >"$tmp/reload.out" 2>&1 || fail "cumux reload: $(cat "$tmp/reload.out")"
grep -q "^reloaded $conf: default memory limit 0=96M, priority normal, thread percentage 50, 1 group(s); changed, for the next start: CUMUX_SYNC, CUMUX_MAX_CLIENTS" "$tmp/reload.out" ||
    fail "cumux reload said: $(cat "$tmp/reload.out")"
grep -q "^busy: done" "$tmp/busy.out" && fail "the busy program was done before the reload: the test proves nothing"
[ "$(ctl get_default_client_priority)" = 0 ] || fail "a priority the file dropped: $(ctl get_default_client_priority)"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 96M ] || fail "after the reload: $(ctl get_default_device_pinned_mem_limit 0)"
"$cli" status >"$tmp/status.out"
awk '$NF == "/cumux-reload-test/a" && $2 == "32.0" && $4 == "-" {f = 1} END {exit !f}' "$tmp/status.out" &&
    awk '$NF == "/cumux-reload-test/b" && $2 == "-" && $5 == "-" {f = 1} END {exit !f}' "$tmp/status.out" ||
    fail "the groups after the reload (a: 32M only; b: nothing): $(grep -A3 '^groups' "$tmp/status.out")"
[ "$(ctl get_default_active_thread_percentage)" = 50.0 ] || fail "thread percentage after the reload: $(ctl get_default_active_thread_percentage)"
out=$("$cli" run -- "$gdir/gpu_mem_limit" $((96 << 20)) 2>&1) || fail "a program after the reload, under 96M: $out"
for ((i = 0; i < 600; i++)); do grep -q "^busy: done" "$tmp/busy.out" && break; sleep 0.05; done
grep -q "^busy: done" "$tmp/busy.out" || fail "the program running across the reload did not finish its kernels"
echo >&"$go"
exec {go}>&-
wait "$client" || fail "the program running across the reload failed"
client=""
grep -q "^PASS" "$tmp/busy.out" || fail "the program running across the reload did not pass"
[ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")" = "$worker" ] || fail "the worker changed across the reload"

# A file that does not read right: nothing changes, and the answer says where.
printf 'CUMUX_DEFAULT_MEMORY_LIMIT=12M\nthis is not a setting\n' >"$conf"
"$cli" reload >"$tmp/reload.out" 2>&1 && fail "a reload of a broken file succeeded: $(cat "$tmp/reload.out")"
grep -q "not reloaded: $conf:2: not CUMUX_VARIABLE=value" "$tmp/reload.out" || fail "a broken file's reload said: $(cat "$tmp/reload.out")"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 96M ] || fail "a broken file changed the limit: $(ctl get_default_device_pinned_mem_limit 0)"
printf 'CUMUX_GROUPS=relative:memory=1G\n' >"$conf"
"$cli" reload >"$tmp/reload.out" 2>&1 && fail "a reload of a bad group succeeded"
grep -q "CUMUX_GROUPS=relative:memory=1G: not CGROUP" "$tmp/reload.out" || fail "a bad group's reload said: $(cat "$tmp/reload.out")"
printf 'CUMUX_DEFAULT_PRIORITY=urgent\n' >"$conf"
"$cli" reload >"$tmp/reload.out" 2>&1 && fail "a reload of a bad priority succeeded"
grep -q "CUMUX_DEFAULT_PRIORITY=urgent: not high, normal or low" "$tmp/reload.out" || fail "a bad value's reload said: $(cat "$tmp/reload.out")"

# SIGHUP, as systemctl reload sends it: a file that no longer names the limit goes back to the start's
# environment (none here).
printf 'CUMUX_DEFAULT_THREADS=25\n' >"$conf"
kill -HUP "$server"
for ((i = 0; i < 100; i++)); do [ "$(ctl get_default_active_thread_percentage)" = 25.0 ] && break; sleep 0.05; done
[ "$(ctl get_default_active_thread_percentage)" = 25.0 ] || fail "SIGHUP did not reload: $(ctl get_default_active_thread_percentage)"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = none ] || fail "a limit the file dropped: $(ctl get_default_device_pinned_mem_limit 0)"
kill -0 "$server" && [ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")" = "$worker" ] || fail "SIGHUP ended the server or its worker"
grep -q "reloaded $conf" "$tmp/log/cumuxd.log" || fail "the log has no reload"

# A broken file at start: the server does not start, and says where.
stop_ours
printf 'CUMUX_DEFAULT_MEMORY_LIMIT=lots\n' >"$conf"
env CUMUX_CONFIG="$conf" LD_LIBRARY_PATH="$drv" "$cli" start >"$tmp/start.out" 2>&1 && fail "a server started with a broken file"
grep -q "CUMUX_DEFAULT_MEMORY_LIMIT=lots" "$tmp/start.out" "$tmp/log/cumuxd.log" 2>/dev/null || fail "the start's refusal did not say why: $(cat "$tmp/start.out")"
echo "PASS reload"
