#!/usr/bin/env bash
# Client priority classes (issues 11 and 12): `cumux run --priority`, CUMUX_PRIORITY, MPS's
# CUDA_MPS_CLIENT_PRIORITY and the server's CUMUX_DEFAULT_PRIORITY put each client's streams in its class's
# band of the device's stream priorities (the server's debug log says where each stream runs), while the
# program sees the priority it asked for; `cumux status` shows the class, `cumux set --priority` changes it;
# a priority that cannot be read is said and ignored. On the fake driver in CI (its range is the H200's,
# 0..-5); on a GPU the same script.
# usage: test_priority.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
own_server_test
export CUMUX_STANDBY=0 CUMUX_DEBUG=1
fail_show="$tmp/run.out $tmp/hold.out"
log="$tmp/log/cumuxd.log"
start() { LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null; }
runs_at() { # EXPECTED_LEGACY EXPECTED_ASKED_MINUS5 CLASS CMD...: checks the log lines of the run
    local legacy=$1 top=$2 cls=$3
    shift 3
    local before
    before=$(wc -l <"$log")
    echo go | "$@" >"$tmp/run.out" 2>&1 || fail "$*: $(cat "$tmp/run.out")"
    local new
    new=$(tail -n +$((before + 1)) "$log")
    echo "$new" | grep -q "a stream of priority 0 runs at $legacy ($cls)" ||
        fail "$*: the legacy stream did not run at $legacy ($cls): $(echo "$new" | grep 'stream of priority')"
    echo "$new" | grep -q "a stream of priority -5 runs at $top ($cls)" ||
        fail "$*: the stream of priority -5 did not run at $top ($cls): $(echo "$new" | grep 'stream of priority')"
}
busy=("$gdir/gpu_busy" 0.1 5 -5)
start || fail "cumux start"
runs_at -1 -3 normal "$cli" run -- "${busy[@]}"
runs_at -4 -5 high "$cli" run --priority high -- "${busy[@]}"
runs_at 0 0 low "$cli" run --priority low -- "${busy[@]}"
runs_at 0 0 low env CUDA_MPS_CLIENT_PRIORITY=1 "$cli" run -- "${busy[@]}"
runs_at -4 -5 high env CUMUX_PRIORITY=high "$cli" run -- "${busy[@]}"
runs_at -1 -3 normal env CUMUX_PRIORITY=urgent "$cli" run -- "${busy[@]}"
grep -q 'CUMUX_PRIORITY=urgent is not a priority' "$tmp/run.out" || fail "CUMUX_PRIORITY=urgent not said: $(cat "$tmp/run.out")"
"$cli" run --priority urgent -- true 2>/dev/null && fail "cumux run --priority urgent ran"
# cumux status shows the class; cumux set changes it.
mkfifo "$tmp/in" || fail "mkfifo"
"$cli" run --priority low -- "$gdir/gpu_busy" 0.1 5 <"$tmp/in" >"$tmp/hold.out" 2>&1 &
client=$!
exec 3>"$tmp/in"
for ((i = 0; i < 300; i++)); do grep -q '^busy: done' "$tmp/hold.out" && break; sleep 0.1; done
row() { "$cli" status | awk -v p="$client" '$2 == p { print $10 }'; }
[ "$(row)" = low ] || fail "status: class $(row), want low: $("$cli" status)"
"$cli" set "$client" --priority high >"$tmp/set.out" || fail "cumux set --priority: $(cat "$tmp/set.out")"
grep -q 'priority high for its new streams' "$tmp/set.out" || fail "cumux set said: $(cat "$tmp/set.out")"
[ "$(row)" = high ] || fail "status after cumux set: $(row)"
"$cli" set "$client" --priority 7 2>/dev/null && fail "cumux set --priority 7 succeeded"
echo go >&3
exec 3>&-
wait "$client" || fail "gpu_busy failed"
client=""
"$cli" stop >/dev/null || fail "cumux stop"
# The server's default.
CUMUX_DEFAULT_PRIORITY=low start || fail "cumux start with CUMUX_DEFAULT_PRIORITY=low"
runs_at 0 0 low "$cli" run -- "${busy[@]}"
runs_at -4 -5 high "$cli" run --priority high -- "${busy[@]}"
"$cli" stop >/dev/null || fail "cumux stop"
CUMUX_DEFAULT_PRIORITY=urgent start 2>/dev/null && fail "cumuxd started with CUMUX_DEFAULT_PRIORITY=urgent"
echo "PASS priority"
