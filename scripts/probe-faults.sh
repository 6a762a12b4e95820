#!/usr/bin/env bash
# Issue 10's fault probes on a GPU machine, in one call: builds tools/probe_fault_*.c against the real
# driver and runs each (in-process recovery by reset and by re-creation, for an illegal address and a trap;
# VMM memory outliving a faulting process; a bystander stream in the faulting context, without and with
# GPU coredumps). Output: a short summary last; full logs in ${OUT:-/tmp/cumux-fault-probes}.
# GPU coredumps naming the faulting client's kernel (probe_fault_culprit.c); a standby taking over client
# memory kept in VMM chunks in a shared arena of addresses (probe_fault_contain.c). PROBES="culprit ..."
# runs only those named (recover vmm_share bystander culprit contain).
#   scripts/probe-faults.sh [ROUNDS]
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="${OUT:-/tmp/cumux-fault-probes}"
rounds=${1:-10}
mkdir -p "$out" || exit 2
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no CUDA GPU on this machine"
    exit 0
fi
cuda=${CUDA_ROOT:-/usr/local/cuda}
probes=${PROBES:-recover vmm_share bystander culprit contain}
for p in $probes; do
    gcc -std=c11 -O2 -pthread -I"$cuda/include" "$repo/tools/probe_fault_$p.c" -o "$out/probe_$p" -lcuda ||
        { echo "probe_$p: build failed"; exit 1; }
done
run() { # NAME CMD...: at most 120 s each, when its probe was built
    local name=$1
    shift
    [ -x "$1" ] || return 0
    timeout -k 5 120 "$@" >"$out/$name.log" 2>&1
    echo "$name: exit $? $(grep -E '^(SUMMARY|SKIP)' "$out/$name.log" | tail -1)"
}
{
    run recover-reset-illegal "$out/probe_recover" reset illegal "$rounds"
    run recover-reset-trap "$out/probe_recover" reset trap "$rounds"
    run recover-recreate-illegal "$out/probe_recover" recreate illegal "$rounds"
    run vmm-share "$out/probe_vmm_share" "$rounds"
    run bystander-plain "$out/probe_bystander" plain
    run bystander-coredump "$out/probe_bystander" coredump
    run culprit-global "$out/probe_culprit" global
    run culprit-context "$out/probe_culprit" context
    run contain "$out/probe_contain"
} | tee "$out/summary.txt"
