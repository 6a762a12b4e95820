#!/bin/sh
# bench/server_ab.sh on a made-up bench/run.sh (AB_RUN) whose cumux rows depend on a server variable: the
# runs with the variable must get it and the others not, the means and B/A must be those of the four runs
# in A B B A order, a label wider than its column must keep its row, and a row that one side lacks shows "-".
# usage: test_server_ab.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/run.sh" <<'RUNEOF'
#!/bin/sh
# Each run's launches/s: 200 without the variable, 250 with it, plus the run's number (1, 2, 3, ...).
n=$(($(cat "$COUNTER" 2>/dev/null || echo 0) + 1))
echo $n >"$COUNTER"
case " $* " in *" --no-cumux "*) nat=100 c=- ;; *) nat=- c=$((200 + 50 * ${CUMUX_TEST_AB:-0} + n)) ;; esac
echo "[log] a line before the table"
echo
echo "== cumux benchmarks (now) =="
printf '%-34s %12s %12s %12s %10s %12s\n' benchmark native MPS cumux cumux/MPS cumux/native
printf '%-34s %12s %12s %12s %10s %12s\n' "empty kernel launches/s" $nat - $c - -
printf '%-34s %12s %12s %12s %10s %12s\n' "cuCtxSynchronize that must ask, rt ns (lower)" $nat - 400 - -
printf '%-34s %12s %12s %12s %10s %12s\n' "a row only natively, us" $nat - - - -
echo
echo "footnote: 1 2 3 4 5 6"
RUNEOF
chmod +x "$tmp/run.sh"
COUNTER="$tmp/n" AB_RUN="$tmp/run.sh" OUT="$tmp/out" "$here/../bench/server_ab.sh" --native CUMUX_TEST_AB=1 --duration 1 \
    >"$tmp/table"
cat "$tmp/table"
# Runs: native 1, A1 2, B1 3, B2 4, A2 5: A = (202 + 205) / 2 = 203.5, B = (253 + 254) / 2 = 253.5.
grep -q '^empty kernel launches/s  *100  *203\.5  *253\.5  *1\.246$' "$tmp/table" || { echo "FAIL: launches row"; exit 1; }
grep -q '^cuCtxSynchronize that must ask, rt ns (lower)  *100  *400\.0  *400\.0  *1\.000$' "$tmp/table" ||
    { echo "FAIL: the row with a wide label"; exit 1; }
grep -q '^a row only natively, us  *100  *-  *-  *-$' "$tmp/table" || { echo "FAIL: a row cumux lacks"; exit 1; }
if "$here/../bench/server_ab.sh" "NOT_AN_ASSIGNMENT" >/dev/null 2>&1; then echo "FAIL: a bad variable was taken"; exit 1; fi
[ -s "$tmp/out/summary.txt" ] && tail -n "$(wc -l <"$tmp/out/summary.txt")" "$tmp/table" | cmp -s - "$tmp/out/summary.txt" &&
    grep -q '^empty kernel launches/s ' "$tmp/out/summary.txt" || { echo "FAIL: summary.txt is not the table"; exit 1; }
echo "PASS test_server_ab"
