#!/bin/sh
# The shim must export exactly the driver's cu* entry points (as the toolkit stub does), nothing else,
# and like the real libcuda.so.1 without symbol versions.
# usage: test_exports.sh SHIM_LIB STUB_LIB SYMBOL_LIST   (SYMBOL_LIST: data/stub-symbols.txt)
set -eu
shim=$1 stub=$2 list=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$shim" | awk 'NF == 3 { sub(/@.*/, "", $3); print $3 }' | LC_ALL=C sort >"$tmp/shim"
grep -v '^#' "$list" | LC_ALL=C sort >"$tmp/list"
status=0
if [ -e "$stub" ]; then
    nm -D --defined-only "$stub" | awk 'NF == 3 && $3 ~ /^cu/ { print $3 }' | LC_ALL=C sort >"$tmp/stub"
    if ! cmp -s "$tmp/stub" "$tmp/list"; then
        echo "FAIL: $list differs from $stub (toolkit changed? run tools/gen/generate.py):"
        diff "$tmp/list" "$tmp/stub" | head -20
        status=1
    fi
else
    echo "note: no stub at $stub; comparing with $list only"
fi
if ! cmp -s "$tmp/shim" "$tmp/list"; then
    echo "FAIL: exported symbols of $shim differ from $list ('<' only in the list, '>' only in the shim):"
    diff "$tmp/list" "$tmp/shim" | head -40
    status=1
fi
# Every export is a function.
nonfunc=$(readelf -W --dyn-syms "$shim" | awk '$7 != "UND" && $8 ~ /^cu/ && $4 != "FUNC" { print $8 }')
if [ -n "$nonfunc" ]; then
    echo "FAIL: exports that are not functions: $nonfunc"
    status=1
fi
# The real library defines no symbol versions; a versioned shim would not satisfy unversioned lookups the same way.
if readelf -V "$shim" | grep -q 'Version definition'; then
    echo "FAIL: $shim defines symbol versions"
    status=1
fi
[ $status -eq 0 ] && echo "ok: $(wc -l <"$tmp/shim") exported symbols, same set as the stub"
exit $status
