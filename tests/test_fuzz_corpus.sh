#!/bin/sh
# The committed fuzzing corpus (tests/fuzz/corpus) is what tests/fuzz/make_corpus.py writes now: a seed
# changed by hand, or a generator changed without regenerating, would leave CI fuzzing from stale seeds.
# (fuzz_server itself checks that its setup's handles are those the generator names.)
# usage: test_fuzz_corpus.sh PYTHON
set -eu
py=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/fuzz/make_corpus.py" "$tmp/corpus" >/dev/null
if ! diff -r "$tmp/corpus" "$here/fuzz/corpus" >"$tmp/diff" 2>&1; then
    cat "$tmp/diff"
    echo "FAIL: tests/fuzz/corpus differs from make_corpus.py's output (run: python3 tests/fuzz/make_corpus.py)"
    exit 1
fi
echo "PASS test_fuzz_corpus ($(ls "$tmp/corpus" | wc -l) seeds)"
