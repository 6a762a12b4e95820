#!/bin/sh
# Fails when cumuxd imports a driver entry point (cu*) that the fake driver does not define: a new driver
# call in the server must come with its emulation, or the fake-driver tests would break at load time.
# usage: check_exports.sh CUMUXD FAKE_LIBCUDA
set -u
[ $# -eq 2 ] || { echo "usage: $0 CUMUXD FAKE_LIBCUDA" >&2; exit 2; }
imports=$(nm -D --undefined-only "$1" | awk '$2 ~ /^cu/ {print $2}' | sort -u) || exit 2
defined=$(nm -D --defined-only "$2" | awk '$3 ~ /^cu/ {print $3}' | sort -u) || exit 2
[ -n "$imports" ] || { echo "FAIL: no cu* imports found in $1"; exit 1; }
missing=$(printf '%s\n' "$imports" | while read -r s; do
    printf '%s\n' "$defined" | grep -qx "$s" || echo "$s"
done)
if [ -n "$missing" ]; then
    echo "FAIL: cumuxd imports driver calls the fake driver (tests/fakecuda) does not define:"
    printf '    %s\n' $missing
    exit 1
fi
echo "PASS: all $(printf '%s\n' "$imports" | wc -l) cu* imports of cumuxd are defined by the fake driver"
