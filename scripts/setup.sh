#!/usr/bin/env bash
# Build cumux (Release, in build/) and start its server for this user's pipe directory.
#   scripts/setup.sh            build, then `cumux start`
# Needs cmake, a C compiler and the CUDA toolkit (headers and the stub libcuda) at $CUDA_ROOT
# (default /usr/local/cuda). Starting the server needs an NVIDIA GPU and its driver.
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CUDA_ROOT:+-DCUDA_ROOT=$CUDA_ROOT} >/dev/null
cmake --build build -j"$(nproc)"
echo "built: build/cli/cumux, build/server/cumuxd, build/lib/libcuda.so.1"
if build/cli/cumux start; then
    build/cli/cumux status
else
    echo "cumux: the server did not start (see ${CUMUX_LOG_DIRECTORY:-${CUMUX_PIPE_DIRECTORY:-/tmp/cumux}}/cumuxd.log);" \
         "it needs an NVIDIA GPU and driver" >&2
    exit 1
fi
