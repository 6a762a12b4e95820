#!/usr/bin/env bash
# One GPU-bound PyTorch program alone, natively and under cumux, part by part (bench/efficiency.py: device
# attributes, a matrix product, ResNet-50 training eager and as a CUDA graph, the profiler's kernel time):
# where a program's own GPU work is slower under cumux. Order native, cumux, cumux, native (the clocks
# drift under load). EFF_VARIANTS="NAME:VAR=V,VAR=V ...": also cumux with those variables for the server
# and the program (CUMUX_PRIORITY=low: the program's streams at the device's least priority, where a
# normal client's run one above it), run after the rest, once each; a NAME starting "native" runs natively
# with those variables for the program.
# Special NAMEs: "idlesrv", natively while a cumux server runs with one idle client in it; "idlectx",
# natively beside another process that holds a CUDA context and does nothing (cumux's standby holds one);
# "kprof", the profile part with cuDNN's heuristics (no timed search), natively with torch.profiler and
# under cumux with CUMUX_PROFILE=kernels, both kernel tables printed (GPU time per launch by kernel, side by
# side). Parts of variants: EFF_VARIANT_PARTS (default "tiny eager graph"); EFF_MAIN=0: the variants alone.
# "ktrace" (or "ktrace-x:VAR=V,...", both runs with those): every kernel's GPU start and end, stream, channel
# and launch configuration from CUPTI
# (bench/kernel_trace.c, injected with CUDA_INJECTION64_PATH into the program natively and into the
# server, whose worker runs the kernels), then bench/kernel_trace.py side by side: kernel time against time
# between kernels, kernels run differently (parts EFF_VARIANT_PARTS, default graph here; KTRACE_LAST
# kernels, default 20,000; KTRACE_NATIVE_ENV="VAR=V ...": the other side natively with those variables).
# "cudnnlog" (or "cudnnlog-x:VAR=V,..."): cuDNN's benchmark searches, logged by cudnn_frontend
# (CUDNN_FRONTEND_LOG_INFO=1) natively and under cumux (with those variables), compared by bench/cudnn_find.py:
# how each run timed the same candidate plans, and which searches picked another plan (parts default graph).
# "tracespans": the eager part (1 s) natively under `cumux trace --native`: which driver calls the program
# makes inside the spans it times with events (bench/trace_spans.py: under cumux each that asks the server
# is a round trip inside the span), and which export tables' slots it calls.
# Any other NAME runs under cumux, whatever it says (the table's mode column tells how each row ran).
# Prints a table last; sync_us is the GPU's median idle time across a synchronize of the last timed part
# (eager or graph: bench/efficiency.py); EFF_SYNC_EVERY (default 5) sets how many steps between them.
#   bench/efficiency.sh [--build DIR]      logs: ${OUT:-/tmp/cumux-efficiency}
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
[ "${1:-}" = --build ] && { build=$(cd "$2" && pwd) || exit 2; }
out="${OUT:-/tmp/cumux-efficiency}"
mkdir -p "$out" || exit 2
cli="$build/cli/cumux"
py=${PYTHON:-python3}
. "$repo/scripts/lib/sharing.sh"
sharing_init
declare -A R
run_one() { # NAME CMD...
    local name=$1
    shift
    R[$name,mode]=native # which way it ran, in the table: a variant's name does not say
    local a
    for a in "$@"; do # the last word of these that the command has says (cumux trace --native: native)
        case "$a" in "$cli") R[$name,mode]=cumux ;; --native) R[$name,mode]=native ;; esac
    done
    # The GPU's clocks and power meanwhile (a slower GPU, not cumux, would explain a slower run).
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader,nounits \
        -lms 250 >"$out/$name.clocks" 2>/dev/null &
    local smi=$!
    timeout -k 5 "${EFF_TIMEOUT:-200}" "$@" "$here/efficiency.py" >"$out/$name.log" 2>&1
    local rc=$?
    kill $smi 2>/dev/null
    wait $smi 2>/dev/null
    # Busy samples (power over 250 W): median SM clock, mean power, highest temperature.
    local sm
    sm=$(awk -F', ' '$3 > 250 {print $1}' "$out/$name.clocks" | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}')
    R[$name,clocks]=$(awk -F', ' -v sm="$sm" '$3 > 250 {n++; p += $3; if ($4 > t) t = $4}
        END {if (!n) print "-"; else printf "%sMHz/%dW/%dC", sm, p / n, t}' "$out/$name.clocks")
    log "$name: rc $rc $(grep -c '^EFF' "$out/$name.log") lines, busy SM clock/power/temp ${R[$name,clocks]}"
    local l
    for k in mm:tflops bw:tbps tiny:us_per_kernel eager:images_per_s graph:images_per_s profile:step_ms profile:kernels_ms \
        profile:kernels_per_step gaps:us_median; do
        l=$(grep "^EFF ${k%%:*} " "$out/$name.log" | sed -n "s/.* ${k#*:}=\([^ ]*\).*/\1/p" | tail -1)
        R[$name,$k]=${l:--}
    done
}
names=""
if [ "${EFF_MAIN:-1}" != 0 ]; then # EFF_MAIN=0: the variants alone
    run_one native1 "$py"
    cumux_start || { echo "FAIL: cumux did not start"; cat "$out/cumux-cli.log"; exit 1; }
    run_one cumux1 "$cli" run -- "$py"
    run_one cumux2 "$cli" run -- "$py"
    cumux_stop
    run_one native2 "$py"
    names="native1 cumux1 cumux2 native2"
fi
for v in ${EFF_VARIANTS:-}; do
    name=${v%%:*}
    read -r -a venv <<<"$(tr , ' ' <<<"${v#*:}")"
    [ "$v" = "$name" ] && venv=()
    case "$name" in
    kprof)
        EFF_TOP=25 EFF_CUDNN_BENCHMARK=0 EFF_PARTS=profile run_one kprof-native "$py"
        echo "-- kernels natively (torch.profiler, 3 steps, cuDNN heuristics)"
        grep '^EFF kernel' "$out/kprof-native.log"
        CUMUX_SERVER_ENV="CUMUX_PROFILE=kernels" cumux_start || continue
        EFF_CUDNN_BENCHMARK=0 EFF_PARTS=profile run_one kprof-cumux "$cli" run -- "$py"
        cumux_stop
        echo "-- kernels under cumux (CUMUX_PROFILE=kernels, warm-up and 3 steps)"
        grep -h 'kernels: .*launches timed\|: kernel .* us each' "$CUMUX_LOG_DIRECTORY/cumuxd.log" | tail -41 |
            sed 's/^.*client [0-9]*: //'
        continue ;;
    ktrace*) # every kernel's GPU start and end (CUPTI, bench/kernel_trace.c) natively and in the server's worker;
        # "ktrace-x:VARS" gives both runs those variables (EFF_CUDNN_BENCHMARK=0: the same kernels both ways)
        lib="$build/bench/libkernel_trace.so"
        [ -f "$lib" ] || { log "ktrace: $lib not built (the toolkit has no CUPTI)"; continue; }
        rm -rf "$out/$name-native" "$out/$name-other" && mkdir -p "$out/$name-native" "$out/$name-other"
        kparts="${EFF_VARIANT_PARTS:-graph}"
        EFF_PARTS=$kparts run_one $name-native env "${venv[@]}" CUDA_INJECTION64_PATH="$lib" \
            KERNEL_TRACE_DIR="$out/$name-native" "$py"
        if [ -n "${KTRACE_NATIVE_ENV:-}" ]; then # the other side natively too, with these variables
            read -r -a kenv <<<"$KTRACE_NATIVE_ENV"
            EFF_PARTS=$kparts run_one $name-other env "${venv[@]}" "${kenv[@]}" \
                CUDA_INJECTION64_PATH="$lib" KERNEL_TRACE_DIR="$out/$name-other" "$py"
            labels="native,variant"
            echo "-- kernel traces: the variant is native with ${KTRACE_NATIVE_ENV}"
        else
            CUMUX_SERVER_ENV="CUDA_INJECTION64_PATH=$lib KERNEL_TRACE_DIR=$out/$name-other${CUMUX_SERVER_ENV:+ $CUMUX_SERVER_ENV}" \
                cumux_start || continue
            EFF_PARTS=$kparts run_one $name-other env "${venv[@]}" "$cli" run -- "$py"
            cumux_stop
            labels="native,cumux"
        fi
        echo "-- kernel traces (bench/kernel_trace.py, the last ${KTRACE_LAST:-20000} kernels of each)"
        "$py" "$here/kernel_trace.py" "$out/$name-native" "$out/$name-other" --last "${KTRACE_LAST:-20000}" \
            --labels "$labels" 2>&1 | tee "$out/$name.txt"
        names+=" $name-native $name-other"
        continue ;;
    cudnnlog*) # cuDNN's benchmark searches logged natively and under cumux (this variant's variables)
        rm -f "$out/$name-native.cudnn" "$out/$name-cumux.cudnn"
        cparts="${EFF_VARIANT_PARTS:-graph}"
        EFF_PARTS=$cparts run_one "$name-native" env CUDNN_FRONTEND_LOG_INFO=1 \
            CUDNN_FRONTEND_LOG_FILE="$out/$name-native.cudnn" "$py"
        CUMUX_SERVER_ENV="${venv[*]}" cumux_start || continue
        EFF_PARTS=$cparts run_one "$name-cumux" env "${venv[@]}" CUDNN_FRONTEND_LOG_INFO=1 \
            CUDNN_FRONTEND_LOG_FILE="$out/$name-cumux.cudnn" "$cli" run -- "$py"
        cumux_stop
        echo "-- cuDNN's searches, $name (bench/cudnn_find.py)${venv[*]:+; cumux with ${venv[*]}}"
        "$py" "$here/cudnn_find.py" "$out/$name-native.cudnn" "$out/$name-cumux.cudnn" 2>&1 | tee "$out/$name.txt"
        gzip -f "$out/$name-native.cudnn" "$out/$name-cumux.cudnn" 2>/dev/null # the logs travel back whole
        names+=" $name-native $name-cumux"
        continue ;;
    tracespans) # natively under `cumux trace`: the calls inside the spans cuDNN times, the export tables'
        EFF_SECONDS=1 EFF_PARTS=eager run_one tracespans "$cli" trace --native -o "$out/tracespans.trace" -- "$py"
        echo "-- driver calls inside timed spans, natively (bench/trace_spans.py)"
        "$py" "$here/trace_spans.py" "$out/tracespans.trace" 2>&1 | tee "$out/tracespans.txt"
        echo "-- export tables' slots called natively (the trace's summary)"
        grep -E '^  [0-9a-f]{32} +slot|^  [A-Z_]+ +slot' "$out/tracespans.trace" | sort -u | tee -a "$out/tracespans.txt"
        # Table 69a28e9f and the hooks' slots cumux leaves unsupported (issue 9, item 4): each slot's first
        # three calls and returns, with the words they wrote, are what implementing them needs; into the
        # file (the console keeps only a count).
        awk '/export table (69a28e9f|TOOLS_RUNTIME_CALLBACK_HOOKS slot [1345] )/ {
                match($0, /table [^ ]+ slot [0-9]+/); k = substr($0, RSTART, RLENGTH);
                r = index($0, " returned ") > 0; if (++c[k, r] <= 3) print substr($0, 1, 600) }' \
            "$out/tracespans.trace" > "$out/table69.txt"
        echo "-- table 69a28e9f and hooks [1,3-5]: $(wc -l < "$out/table69.txt") lines of first calls in table69.txt"
        cat "$out/table69.txt" >> "$out/tracespans.txt"
        gzip -f "$out/tracespans.trace" # tens of MB: the logs carry it compressed, unless even so it would
        # crowd out the rest (the device tool brings back files of 16 MiB at most)
        [ "$(stat -c %s "$out/tracespans.trace.gz")" -le $((4 << 20)) ] || { rm -f "$out/tracespans.trace.gz";
            echo "(tracespans.trace.gz over 4 MiB: not kept)"; }
        names+=" tracespans"
        continue ;;
    idlesrv) # natively while a cumux server runs with one client that holds a context and does nothing
        cumux_start || continue
        "$cli" run -- "$py" -c 'import torch, time; torch.zeros(1, device="cuda"); torch.cuda.synchronize(); time.sleep(300)' &
        idle=$!
        sleep 10
        EFF_PARTS="${EFF_VARIANT_PARTS:-tiny eager graph}" run_one "$name" "$py"
        kill $idle; wait $idle 2>/dev/null
        cumux_stop ;;
    idlectx)
        "$py" -c 'import torch, time; torch.zeros(1, device="cuda"); torch.cuda.synchronize(); time.sleep(300)' &
        idle=$!
        sleep 8
        EFF_PARTS="${EFF_VARIANT_PARTS:-tiny eager graph}" run_one "$name" "$py"
        kill $idle; wait $idle 2>/dev/null ;;
    native*) EFF_PARTS="${EFF_VARIANT_PARTS:-tiny eager graph}" run_one "$name" env "${venv[@]}" "$py" ;;
    *)
        CUMUX_SERVER_ENV="${venv[*]}" cumux_start || continue
        EFF_PARTS="${EFF_VARIANT_PARTS:-tiny eager graph}" run_one "$name" env "${venv[@]}" "$cli" run -- "$py"
        cumux_stop ;;
    esac
    names+=" $name"
done
if [ "${EFF_MAIN:-1}" != 0 ]; then
    # Attributes that differ between the native run and cumux: a different answer can pick other kernels.
    diff <(grep '^EFF attrs' "$out/native1.log" | tr ' ' '\n') <(grep '^EFF attrs' "$out/cumux1.log" | tr ' ' '\n') \
        >"$out/attrs.diff" && echo "device attributes: the same natively and under cumux" ||
        { echo "device attributes that differ (< native, > cumux):"; grep '^[<>]' "$out/attrs.diff"; }
    grep -h '^EFF meminfo' "$out/native1.log" "$out/cumux1.log"
    for n in native1 cumux1; do
        echo "-- $n: kernels taking the most"
        grep '^EFF kernel' "$out/$n.log" | head -12
    done
fi
{
    printf '%-13s %-6s %8s %7s %8s %10s %10s %8s %9s %11s %8s %s\n' run mode mm_TF/s bw_TB/s tiny_us eager_img/s \
        graph_img/s sync_us step_ms kernels_ms kernels clock/power/temp
    for n in $names; do
        printf '%-13s %-6s %8s %7s %8s %10s %10s %8s %9s %11s %8s %s\n' "$n" "${R[$n,mode]}" "${R[$n,mm:tflops]}" "${R[$n,bw:tbps]}" \
            "${R[$n,tiny:us_per_kernel]}" "${R[$n,eager:images_per_s]}" \
            "${R[$n,graph:images_per_s]}" "${R[$n,gaps:us_median]}" "${R[$n,profile:step_ms]}" \
            "${R[$n,profile:kernels_ms]}" "${R[$n,profile:kernels_per_step]}" "${R[$n,clocks]}"
    done
} | tee "$out/summary.txt"
