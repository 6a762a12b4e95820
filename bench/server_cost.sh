#!/usr/bin/env bash
# cumuxd's own CPU cost per launch, without a GPU: the server runs under callgrind on the fake driver
# (tests/fakecuda), collecting only while its worker takes a message from the ring and handles it, and
# bench_launch makes empty launches through the shim. Prints instructions per launch: in all, inside the
# driver's calls (here the fake's), and cumuxd's own by function (bench/server_cost.py). On the GPU the
# worker's launch takes about a microsecond longer than a native program's (docs/performance.md); this says
# how much of that cumuxd's own code could be.
#   bench/server_cost.sh [--build DIR] [--launches N]      (N: bench_launch's timed launches, default 20000)
# Server variables (CUMUX_PACE=0, ...) pass through the environment. Raw output: ${OUT:-/tmp/cumux-server-cost}.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="$here/../build" launches=20000
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift ;;
        --launches) launches=$2; shift ;;
        *) sed -n '2,9p' "$0" >&2; exit 2 ;;
    esac
    shift
done
[[ "$launches" =~ ^[1-9][0-9]*$ ]] || { echo "bench/server_cost.sh: --launches takes a positive count" >&2; exit 2; }
command -v valgrind >/dev/null 2>&1 || { echo "bench/server_cost.sh: skipped: valgrind is not installed"; exit 0; }
build=$(cd "$build" && pwd) || exit 2
for f in cli/cumux server/cumuxd bench/bench_launch tests/fakecuda/driver/libcuda.so.1; do
    [ -e "$build/$f" ] || { echo "bench/server_cost.sh: $build/$f is missing (build first)" >&2; exit 2; }
done
out="${OUT:-/tmp/cumux-server-cost}"
rm -rf "$out/callgrind" && mkdir -p "$out/callgrind" || exit 2

# The server's binary, wrapped: callgrind follows the supervisor's worker (a child process) and collects
# only inside the two functions every command passes through.
wrapper="$out/cumuxd-callgrind"
cat >"$wrapper" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out/callgrind/out.%p" \\
    --toggle-collect=srv_dispatch --toggle-collect=cumux_ring_take_at "$build/server/cumuxd" "\$@"
EOF
chmod +x "$wrapper"

echo "[$(date +%T)] bench_launch $launches 1 10 under cumux, the server under callgrind (fake driver)"
CUMUX_SERVER_BINARY="$wrapper" "$here/../tests/with_server.sh" "$build/cli/cumux" "$build/tests/fakecuda/driver" --fake -- \
    "$build/cli/cumux" run -- "$build/bench/bench_launch" "$launches" 1 10 >"$out/run.log" 2>&1 ||
    { tail -n 30 "$out/run.log"; echo "bench/server_cost.sh: the run failed (log: $out/run.log)" >&2; exit 1; }
python3 "$here/server_cost.py" "$out"/callgrind/out.* | tee "$out/summary.txt"
exit "${PIPESTATUS[0]}"
