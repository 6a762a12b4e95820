#!/usr/bin/env bash
# Prometheus metrics (issue 11): with CUMUX_METRICS_PORT, cumuxd answers GET /metrics with each client's
# figures labelled by pid, user and CUMUX_CLIENT_NAME (a client of known GPU time: gpu_busy), GPU memory,
# faults; anything else is 404; a scraper that never finishes its request holds nobody up; after a fatal
# fault the worker that takes over answers on the same port. A port given badly or taken keeps the
# server from starting, said. On the fake driver in CI; on a GPU the same script.
# usage: test_metrics.sh CUMUX_CLI DRIVER_DIR GPU_TEST_DIR
set -u
cli=$1 drv=$2 gdir=$3
. "$(dirname "${BASH_SOURCE[0]}")/server_procs.sh"
# With GPU coredumps on (the default) a faulting program's first synchronize may pass; its error comes later.
[ "${CUMUX_FAULT_COREDUMP:-1}" = 1 ] && export GT_FAULT_SYNC_MAY_PASS=1
own_server_test
fail_show="$tmp/busy.out"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
    fail "no free port"
scrape() { # PATH: the body, or FAIL and the status
    python3 - "$port" "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5).read().decode(), end="")
except urllib.error.HTTPError as e:
    print("HTTP %d" % e.code)
except Exception as e:
    print("FAIL %s" % e)
PY
}
start() { LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$cli" start >/dev/null 2>&1; }
CUMUX_METRICS_PORT=nonsense start && fail "cumuxd started with CUMUX_METRICS_PORT=nonsense"
CUMUX_METRICS_PORT=$port start || fail "cumux start with metrics on $port"
m=$(scrape /metrics)
echo "$m" | grep -q '^cumux_clients 0$' || fail "metrics before any client: $m"
echo "$m" | grep -q '^# TYPE cumux_client_gpu_seconds_total counter$' || fail "no TYPE line for the GPU time: $m"
[ "$(scrape /other)" = "HTTP 404" ] || fail "/other: $(scrape /other)"
# A second server on the same port cannot start.
CUMUX_PIPE_DIRECTORY="$tmp/pipe2" CUMUX_METRICS_PORT=$port start && { CUMUX_PIPE_DIRECTORY="$tmp/pipe2" "$cli" stop; fail "a second cumuxd took port $port"; }
# A client of known GPU time (0.5 s), named.
mkfifo "$tmp/busy.in" || fail "mkfifo"
CUMUX_CLIENT_NAME='trainer "a"' "$cli" run -- "$gdir/gpu_busy" 5 100 <"$tmp/busy.in" >"$tmp/busy.out" 2>&1 &
client=$!
exec 3>"$tmp/busy.in"
for ((i = 0; i < 300; i++)); do grep -q '^busy: done' "$tmp/busy.out" && break; sleep 0.1; done
grep -q '^busy: done' "$tmp/busy.out" || fail "gpu_busy did not finish"
# A scraper that sends half a request and waits holds nobody up.
exec 5<>/dev/tcp/127.0.0.1/"$port" || fail "connect to $port"
printf 'GET /metr' >&5
m=$(scrape /metrics)
exec 5>&-
# A request that never ends its headers, up to the 4 KiB the server reads: answered (404) and closed, the
# server on.
resp=$(python3 - "$port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET /" + b"x" * 4091)  # the whole 4 KiB the server reads, no end of headers
print(s.recv(64).decode(errors="replace").split("\r\n")[0])
PY
) || fail "an oversized request: no answer"
[ "$resp" = "HTTP/1.1 404 Not Found" ] || fail "an oversized request was answered: $resp"
[ "$(scrape /other)" = "HTTP 404" ] || fail "after an oversized request: $(scrape /other)"
user=$(id -un)
labels="pid=\"$client\",user=\"$user\",name=\"trainer__a_\""
line=$(echo "$m" | grep "^cumux_client_gpu_seconds_total{$labels,gpu=\"0\",client=\"[0-9]*\",group=\"/[^\"]*\"} ") ||
    fail "no GPU time for the client (labels $labels): $m"
g=${line##* }
awk -v g="$g" 'BEGIN { exit !(g >= 0.25 && g <= 1.0) }' || fail "the client's GPU time $g s, want about 0.5: $line"
echo "$m" | grep -q "^cumux_client_kernel_launches_total{$labels,gpu=\"0\",client=\"[0-9]*\",group=\"/[^\"]*\"} 100$" ||
    fail "kernel launches: $(echo "$m" | grep launches)"
echo "$m" | grep -q '^cumux_clients 1$' || fail "cumux_clients: $(echo "$m" | grep '^cumux_clients')"
echo "$m" | grep -q '^cumux_gpu_memory_total_bytes{gpu="0",name=".*"} [1-9][0-9]*$' || fail "GPU memory: $m"
echo go >&3
exec 3>&-
wait "$client" || fail "gpu_busy failed"
client=""
# A fault: the worker that takes over answers on the same port.
"$cli" run -- "$gdir/gpu_fault" >/dev/null 2>&1 || fail "gpu_fault did not get its error"
serve_one "$tmp/vecadd.out" || fail "no program served after the fault"
for ((i = 0; i < 50; i++)); do scrape /metrics | grep -q '^cumux_fatal_gpu_faults_total 1$' && break; sleep 0.1; done
m=$(scrape /metrics)
echo "$m" | grep -q '^cumux_fatal_gpu_faults_total 1$' || fail "after the fault: $m"
echo "metrics: the client's GPU time $g s (0.5 s run), 100 launches, on port $port; after a fault the new worker answers"
echo "PASS metrics"
