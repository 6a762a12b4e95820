#!/usr/bin/env bash
# cumux control: nvidia-cuda-mps-control's command lines (issue 11): the server and client lists, ps, the
# device memory limits (default and per server), the active thread percentages (the server's default and
# a client's), terminate_client, quit; unknown and malformed commands fail with a message; several lines on stdin run in order; the default limit
# survives a worker that replaces a faulted one. On the fake driver in CI; on a GPU the same script.
# usage: test_control.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
# With GPU coredumps on (the default) a faulting program's first synchronize may pass; its error comes later.
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && export GT_FAULT_SYNC_MAY_PASS=1
own_server_test --no-standby hang.out
ctl() { "$cli" control "$@" 2>"$tmp/ctl.err"; }
refused() { # WORDS...: the command fails and says why
    ctl "$@" >/dev/null && fail "cumux control $* succeeded"
    [ -s "$tmp/ctl.err" ] || fail "cumux control $* failed without a word"
}

start_ours
server=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid") worker=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")
[ "$(ctl get_server_list)" = "$server" ] || fail "get_server_list: $(ctl get_server_list)"
"$cli" run -- "$gdir/gpu_hang" idle >"$tmp/hang.out" 2>&1 &
client=$!
for ((i = 0; i < 300; i++)); do grep -q '^hang: waiting' "$tmp/hang.out" && break; sleep 0.1; done
grep -q '^hang: waiting' "$tmp/hang.out" || fail "gpu_hang idle did not start waiting"
[ "$(ctl get_client_list "$server")" = "$client" ] || fail "get_client_list $server: $(ctl get_client_list "$server")"
[ "$(ctl get_client_list "$worker")" = "$client" ] || fail "get_client_list $worker (the worker's pid)"
refused get_client_list 1
refused get_client_list
ctl ps | grep -q "^$client .*gpu_hang idle" || fail "ps: $(ctl ps)"
# Limits: the default for new clients, per server the same; device 0 only.
[ "$(ctl get_default_device_pinned_mem_limit 0)" = none ] || fail "default limit at start: $(ctl get_default_device_pinned_mem_limit 0)"
ctl set_default_device_pinned_mem_limit 0 48M || fail "set_default_device_pinned_mem_limit: $(cat "$tmp/ctl.err")"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 48M ] || fail "get_default_device_pinned_mem_limit 0: $(ctl get_default_device_pinned_mem_limit 0)"
[ "$(ctl get_device_pinned_mem_limit "$server" 0)" = 48M ] || fail "get_device_pinned_mem_limit"
out=$("$cli" run -- "$gdir/gpu_mem_limit" $((48 << 20)) 2>&1) || fail "a new program under the default 48M: $out"
refused set_default_device_pinned_mem_limit 1 1G
refused set_default_device_pinned_mem_limit 0 lots
refused set_device_pinned_mem_limit 1 0 1G
ctl set_device_pinned_mem_limit "$server" 0 2G || fail "set_device_pinned_mem_limit: $(cat "$tmp/ctl.err")"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 2G ] || fail "after set_device_pinned_mem_limit: $(ctl get_default_device_pinned_mem_limit 0)"
# The active thread percentage: the server's (the default of new clients) and a client's own.
[ "$(ctl get_default_active_thread_percentage)" = 100.0 ] || fail "default percentage at start: $(ctl get_default_active_thread_percentage)"
ctl set_default_active_thread_percentage 50 || fail "set_default_active_thread_percentage 50: $(cat "$tmp/ctl.err")"
[ "$(ctl get_default_active_thread_percentage)" = 50.0 ] || fail "after set_default_active_thread_percentage 50"
[ "$(ctl get_active_thread_percentage "$server")" = 50.0 ] || fail "get_active_thread_percentage of the server"
ctl set_active_thread_percentage "$server" 33.3 || fail "set_active_thread_percentage server 33.3"
[ "$(ctl get_default_active_thread_percentage)" = 34.0 ] || fail "33.3 rounds to 34: $(ctl get_default_active_thread_percentage)"
[ "$(ctl get_active_thread_percentage "$client")" = 100.0 ] || fail "a client from before keeps 100: $(ctl get_active_thread_percentage "$client")"
ctl set_active_thread_percentage "$client" 25 || fail "set_active_thread_percentage client 25: $(cat "$tmp/ctl.err")"
[ "$(ctl get_active_thread_percentage "$client")" = 25.0 ] || fail "the client's after set: $(ctl get_active_thread_percentage "$client")"
refused set_default_active_thread_percentage 0
refused set_default_active_thread_percentage 101
refused set_active_thread_percentage 1 50
refused get_active_thread_percentage 1
ctl set_default_active_thread_percentage 100 || fail "set_default_active_thread_percentage 100"
# Unknown: refused with a word.
# Client priority, MPS's levels (0 normal, 1 below normal) and cumux's names.
[ "$(ctl get_default_client_priority)" = 0 ] || fail "default priority at start: $(ctl get_default_client_priority)"
ctl set_default_client_priority 1 || fail "set_default_client_priority 1: $(cat "$tmp/ctl.err")"
[ "$(ctl get_default_client_priority)" = 1 ] || fail "after set_default_client_priority 1: $(ctl get_default_client_priority)"
ctl set_default_client_priority high || fail "set_default_client_priority high"
[ "$(ctl get_default_client_priority)" = high ] || fail "after set_default_client_priority high"
ctl set_default_client_priority 0 || fail "set_default_client_priority 0"
refused set_default_client_priority 2
refused no_such_command
# Several lines on stdin, comments and blank lines skipped, in order; one failing line makes the exit 1.
out=$(printf '# a comment\n\nget_server_list\nset_default_device_pinned_mem_limit 0 64M\nget_default_device_pinned_mem_limit 0\n' |
    "$cli" control 2>&1) || fail "stdin commands: exit $?: $out"
[ "$out" = "$(printf '%s\n64M' "$server")" ] || fail "stdin commands printed: $out"
printf 'get_server_list\nno_such_command\n' | "$cli" control >/dev/null 2>&1 && fail "a failing line left the exit 0"
# The default survives a worker that replaces a faulted one.
kill -KILL "$client"
wait "$client" 2>/dev/null
client=""
"$cli" run -- "$gdir/gpu_fault" >/dev/null 2>&1 || fail "gpu_fault did not get its error"
serve_one "$tmp/vecadd.out" || fail "no program served after the fault"
[ "$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd-gpu.pid")" != "$worker" ] || fail "the faulted worker $worker still serves"
[ "$(ctl get_default_device_pinned_mem_limit 0)" = 64M ] || fail "the default after a new worker: $(ctl get_default_device_pinned_mem_limit 0)"
# terminate_client, as cumux kill. (The output file is removed first: the new program's shell may not have
# emptied it yet when the wait below first looks, and the old program's "hang: waiting" would pass it.)
rm -f "$tmp/hang.out"
"$cli" run -- "$gdir/gpu_hang" idle >"$tmp/hang.out" 2>&1 &
client=$!
for ((i = 0; i < 300; i++)); do grep -q '^hang: waiting' "$tmp/hang.out" && break; sleep 0.1; done
refused terminate_client 1 "$client"
ctl terminate_client "$server" "$client" >/dev/null || fail "terminate_client: $(cat "$tmp/ctl.err")"
kill -USR1 "$client"
wait "$client" || fail "gpu_hang idle did not get CUDA_ERROR_MPS_CLIENT_TERMINATED: $(cat "$tmp/hang.out")"
client=""
# The per-user server commands.
[ "$(ctl get_server_status "$server")" = ACTIVE ] || fail "get_server_status: $(ctl get_server_status "$server")"
refused get_server_status 1
ctl start_server -uid "$(id -u)" || fail "start_server -uid $(id -u) (one runs): $(cat "$tmp/ctl.err")"
refused start_server -uid 12345
rm -f "$tmp/hang.out"
"$cli" run -- "$gdir/gpu_hang" idle >"$tmp/hang.out" 2>&1 &
client=$!
for ((i = 0; i < 300; i++)); do grep -q '^hang: waiting' "$tmp/hang.out" && break; sleep 0.1; done
ctl get_device_client_list | grep -q ":$client\$" || fail "get_device_client_list: $(ctl get_device_client_list)"
kill -KILL "$client"
wait "$client" 2>/dev/null
client=""
refused shutdown_server 1
ctl shutdown_server "$server" -f >/dev/null || fail "shutdown_server: $(cat "$tmp/ctl.err")"
for ((i = 0; i < 100; i++)); do [ -z "$(pids_of_ours)" ] && break; sleep 0.05; done
[ -z "$(pids_of_ours)" ] || fail "cumuxd processes left after shutdown_server: $(pids_of_ours)"
LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ctl start_server -uid "$(id -u)" ||
    fail "start_server -uid $(id -u): $(cat "$tmp/ctl.err")"
server=$(cat "$CUMUX_PIPE_DIRECTORY/cumuxd.pid")
[ "$(ctl get_server_list)" = "$server" ] || fail "get_server_list after start_server: $(ctl get_server_list)"
# quit stops the server.
ctl quit >/dev/null || fail "quit: $(cat "$tmp/ctl.err")"
for ((i = 0; i < 100; i++)); do [ -z "$(pids_of_ours)" ] && break; sleep 0.05; done
[ -z "$(pids_of_ours)" ] || fail "cumuxd processes left after quit: $(pids_of_ours)"
refused get_server_list
echo "PASS control"
