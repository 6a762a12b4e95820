#!/usr/bin/env bash
# A launch's host cost natively, in the ways cumuxd's worker launches differently from a native program
# (tools/probe_launch_cost.c): a library kernel as its CUkernel or as its function, one thread or several
# launching into one context, and CUDA_DEVICE_MAX_CONNECTIONS unset, 8 and 32 (cumuxd's). A few seconds.
#   bench/launch_cost.sh [--build DIR]      (needs DIR/bench/bench_kernels.fatbin; output also in $OUT/summary.txt)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build="$here/../build"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift ;;
        *) sed -n '2,5p' "$0" >&2; exit 2 ;;
    esac
    shift
done
cuda=${CUDA_ROOT:-/usr/local/cuda}
fatbin="$build/bench/bench_kernels.fatbin"
[ -f "$fatbin" ] || { echo "bench/launch_cost.sh: $fatbin is missing (build first)" >&2; exit 2; }
out="${OUT:-/tmp/cumux-launch-cost}"
mkdir -p "$out" || exit 2
# Linked against the toolkit's stub; the driver found at run time is the machine's (or LD_LIBRARY_PATH's).
${CC:-cc} -O2 -pthread -I"$cuda/include" "$here/../tools/probe_launch_cost.c" -o "$out/probe_launch_cost" \
    -L"$cuda/lib64/stubs" -lcuda || { echo "bench/launch_cost.sh: the probe does not build" >&2; exit 2; }
rc=0
: >"$out/summary.txt"
for conn in unset 8 32; do
    if [ $conn = unset ]; then
        (unset CUDA_DEVICE_MAX_CONNECTIONS; "$out/probe_launch_cost" "$fatbin")
    else
        CUDA_DEVICE_MAX_CONNECTIONS=$conn "$out/probe_launch_cost" "$fatbin"
    fi >>"$out/summary.txt" 2>&1 || { echo "(the probe failed with CUDA_DEVICE_MAX_CONNECTIONS=$conn)" >>"$out/summary.txt"; rc=1; }
    echo >>"$out/summary.txt"
done
cat "$out/summary.txt"
exit $rc
