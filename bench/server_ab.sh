#!/usr/bin/env bash
# A server setting measured against the server as it is, on the same GPU in one call: bench/run.sh's cumux
# rows (one process) with the server as it is (A) and with VAR=VALUE... (B), in the order A B B A so that
# a drift of the GPU's clock or temperature weighs on both alike; prints each row's mean for A and B and
# B/A (for rows marked "lower", below 1 is better). With --native, a native run first for reference.
#   bench/server_ab.sh [--build DIR] [--duration S] [--native] "VAR=VALUE ..."   (options in any order)
# Extra variables for every run (the benchmarks' and the server's) come from the environment, e.g.
# BENCH_LIBRARY=1 (the benchmarks' kernels loaded as a library, as the CUDA runtime does).
# Raw output: ${OUT:-/tmp/cumux-server-ab}/{native,A1,B1,B2,A2}.txt, the table also in summary.txt. AB_RUN: another bench/run.sh (tests).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run="${AB_RUN:-$here/run.sh}"
args=() native=0 setting=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build | --duration) [ $# -ge 2 ] || { echo "bench/server_ab.sh: $1 needs a value" >&2; exit 2; }
                              args+=("$1" "$2"); shift ;;
        --native) native=1 ;;
        -*) echo "bench/server_ab.sh: unknown option $1" >&2; exit 2 ;;
        *) [ -z "$setting" ] || { echo "bench/server_ab.sh: one setting only (quote it)" >&2; exit 2; }
           setting=$1 ;;
    esac
    shift
done
[ -n "$setting" ] || { sed -n '2,9p' "$0" >&2; exit 2; }
read -r -a variant <<<"$setting"
for v in "${variant[@]}"; do
    [[ "$v" =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || { echo "bench/server_ab.sh: not VAR=VALUE: $v" >&2; exit 2; }
done
out="${OUT:-/tmp/cumux-server-ab}"
mkdir -p "$out" || exit 2

one() { # NAME [VAR=VALUE...]: one run of run.sh, its output in $out/NAME.txt
    local name=$1
    shift
    echo "[$(date +%T)] $name${*:+ ($*)}"
    env "$@" OUT="$out/$name" "$run" "${args[@]}" --procs 1 --no-mps "${opts[@]}" >"$out/$name.txt" 2>&1 ||
        echo "[$(date +%T)] $name: bench/run.sh exited $? (rows it printed are still used)"
}
if [ $native = 1 ]; then
    opts=(--no-cumux)
    one native
fi
opts=(--no-native)
one A1
one B1 "${variant[@]}"
one B2 "${variant[@]}"
one A2

# The table's rows: a label, then five columns (native, MPS, cumux and two ratios; "-" where a side did not
# run). A label may be wider than its column, so the columns are counted from the end.
rows() { awk '/^== cumux benchmarks/ {on = 1; next} on && NF == 0 {exit}
              on && !/^benchmark / && NF >= 6 {l = $1; for (i = 2; i <= NF - 5; i++) l = l " " $i
                                                 print l "\t" $(NF - 4) "\t" $(NF - 2)}' "$1"; }
{
echo
echo "== $setting against the server as it is, one process, A B B A =="
printf '%-44s %12s %12s %12s %8s\n' benchmark native A B B/A
{
    rows "$out/A1.txt" | awk -F'\t' '{print "A\t" $0}'
    rows "$out/A2.txt" | awk -F'\t' '{print "A\t" $0}'
    rows "$out/B1.txt" | awk -F'\t' '{print "B\t" $0}'
    rows "$out/B2.txt" | awk -F'\t' '{print "B\t" $0}'
    [ -f "$out/native.txt" ] && rows "$out/native.txt" | awk -F'\t' '{print "N\t" $0}'
} | awk -F'\t' '
    function num(x) { return x ~ /^[0-9]+(\.[0-9]+)?$/ }
    !($2 in seen) { seen[$2] = 1; order[++k] = $2 }
    $1 == "N" && num($3) { nat[$2] = $3 }
    $1 != "N" && num($4) { s[$1, $2] += $4; c[$1, $2]++ }
    END {
        for (i = 1; i <= k; i++) {
            l = order[i]
            na = "-"; as = "-"; bs = "-"; r = "-"
            if (l in nat) na = nat[l]
            if (c["A", l]) as = sprintf("%.1f", s["A", l] / c["A", l])
            if (c["B", l]) bs = sprintf("%.1f", s["B", l] / c["B", l])
            if (c["A", l] && c["B", l] && s["A", l] > 0)
                r = sprintf("%.3f", (s["B", l] / c["B", l]) / (s["A", l] / c["A", l]))
            printf "%-44s %12s %12s %12s %8s\n", l, na, as, bs, r
        }
    }'
echo "A: the mean of runs A1 and A2; B: of B1 and B2 (a row missing from a run is left out of its mean)."
} | tee "$out/summary.txt"
