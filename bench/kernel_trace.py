"""Compare two kernel traces written by bench/kernel_trace.c (CUPTI activity records: each kernel's GPU start
and end, its stream, channel and launch configuration): where one run's GPU time goes that the other's
does not. Each side is a trace file, or a directory whose largest kernels.*.tsv is taken (under cumux the
worker's; the standby's holds almost nothing). The window is the last --last kernels of each side (default
20,000: the timed loop of bench/efficiency.py's part). Prints: span, kernel time summed, time the GPU ran
some kernel (the union), and the time between kernels by size of the gap; the kernels whose summed time
differs most; kernels whose launch configuration or execution (registers, shared memory executed, cache
configuration executed, local memory, grid, block, cluster, channel type) differs between the two sides.
With --window FROM,TO (seconds) each side is instead every trace in its directory (a pair of programs under
MPS writes one per program; cumux's worker one for all its clients), each cut to the kernels that ran
between FROM and TO seconds before that trace's last kernel ended (traces of under 1,000 kernels left
out: cumux's standby), merged: two programs' steady state, by the same rule both ways.
  python3 bench/kernel_trace.py NATIVE CUMUX [--last N | --window FROM,TO] [--labels A,B]"""
import argparse
import collections
import glob
import os
import sys

FIELDS = ("start end stream channel channel_type regs static_shared dynamic_shared shared_executed "
          "cache_requested cache_executed local_per_thread grid block cluster launch_type graph name").split()
CONFIG = ("channel_type regs static_shared dynamic_shared shared_executed cache_executed local_per_thread "
          "grid block cluster").split()
GAPS = ((-1e18, 0, "overlapping"), (0, 1e3, "0-1 us"), (1e3, 2e3, "1-2 us"), (2e3, 5e3, "2-5 us"),
        (5e3, 20e3, "5-20 us"), (20e3, 100e3, "20-100 us"), (100e3, 1e18, ">100 us"))


def trace_file(path):
    if os.path.isdir(path):
        files = glob.glob(os.path.join(path, "kernels.*.tsv"))
        if not files:
            sys.exit("kernel_trace: no kernels.*.tsv in %s" % path)
        return max(files, key=os.path.getsize)
    return path


def read_rows(path):
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            v = line.rstrip("\n").split("\t")
            if len(v) != len(FIELDS) or v[0] == "start":
                continue
            r = dict(zip(FIELDS, v))
            r["start"], r["end"] = int(r["start"]), int(r["end"])
            rows.append(r)
    return rows


def load(path, last):
    rows = read_rows(trace_file(path))
    rows.sort(key=lambda r: r["start"])
    return rows[-last:] if last else rows


def load_window(path, first_s, last_s):
    files = glob.glob(os.path.join(path, "kernels.*.tsv")) if os.path.isdir(path) else [path]
    rows = []
    for name in files:
        got = read_rows(name)
        if len(got) < 1000:
            continue
        end = max(r["end"] for r in got)
        lo, hi = end - first_s * 1e9, end - last_s * 1e9
        rows += [r for r in got if r["start"] >= lo and r["end"] <= hi]
    rows.sort(key=lambda r: r["start"])
    return rows


def summary(rows):
    if not rows:
        return None
    span = rows[-1]["end"] - rows[0]["start"]
    busy = kernel = 0
    gaps = [[0, 0.0] for _ in GAPS]
    reach = rows[0]["start"]
    for r in rows:
        kernel += r["end"] - r["start"]
        gap = r["start"] - reach
        for i, (lo, hi, _) in enumerate(GAPS):
            if lo <= gap < hi:
                gaps[i][0] += 1
                gaps[i][1] += max(gap, 0)
                break
        busy += max(0, r["end"] - max(r["start"], reach))
        reach = max(reach, r["end"])
    return {"n": len(rows), "span": span, "kernel": kernel, "busy": busy, "gaps": gaps,
            "streams": len({r["stream"] for r in rows}), "channels": len({r["channel"] for r in rows})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("native")
    ap.add_argument("cumux")
    ap.add_argument("--last", type=int, default=20000)
    ap.add_argument("--labels", default="native,cumux")
    ap.add_argument("--window", help="FROM,TO: seconds before each trace's end (every trace of a directory)")
    a = ap.parse_args()
    la, lb = a.labels.split(",")
    if a.window:
        w0, w1 = (float(x) for x in a.window.split(","))
        A, B = load_window(a.native, w0, w1), load_window(a.cumux, w0, w1)
        window = "%g-%g s before the end" % (w0, w1)
    else:
        A, B = load(a.native, a.last), load(a.cumux, a.last)
        window = "last %d kernels" % a.last
    sa, sb = summary(A), summary(B)
    if not sa or not sb:
        print("FAIL kernel_trace: an empty trace (%s %d kernels, %s %d)" % (la, len(A), lb, len(B)))
        return 1
    print("%-34s %14s %14s %8s" % (window, la, lb, "ratio"))
    print("%-34s %14d %14d" % ("kernels", len(A), len(B)))

    def row(label, x, y, unit=1e6, fmt="%14.3f"):
        print(("%-34s " + fmt + " " + fmt + " %8s") % (label, x / unit, y / unit, "%.4f" % (y / x) if x else "-"))

    row("span, ms", sa["span"], sb["span"])
    row("kernel time summed, ms", sa["kernel"], sb["kernel"])
    row("GPU running a kernel, ms", sa["busy"], sb["busy"])
    row("GPU running none, ms", sa["span"] - sa["busy"], sb["span"] - sb["busy"])
    for i, (_, _, name) in enumerate(GAPS):
        print("%-34s %8d %8.3fms %8d %8.3fms" % ("gaps " + name + ": count, time", sa["gaps"][i][0],
              sa["gaps"][i][1] / 1e6, sb["gaps"][i][0], sb["gaps"][i][1] / 1e6))
    print("%-34s %14d %14d" % ("streams", sa["streams"], sb["streams"]))
    print("%-34s %14d %14d" % ("hardware channels", sa["channels"], sb["channels"]))

    by = [collections.defaultdict(list), collections.defaultdict(list)]
    conf = [collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)]
    for side, rows in enumerate((A, B)):
        for r in rows:
            by[side][r["name"]].append(r["end"] - r["start"])
            conf[side][r["name"]][tuple(r[k] for k in CONFIG)] += 1
    common = [n for n in by[0] if n in by[1]]
    diffs = []
    for n in common:
        ma, mb = sum(by[0][n]) / len(by[0][n]), sum(by[1][n]) / len(by[1][n])
        diffs.append(((mb - ma) * len(by[0][n]), n, len(by[0][n]), ma, len(by[1][n]), mb))
    print("kernels only on one side: %s %d, %s %d" % (la, len([n for n in by[0] if n not in by[1]]), lb,
                                                   len([n for n in by[1] if n not in by[0]])))
    for side, lab, other in ((0, la, 1), (1, lb, 0)):
        only = sorted(((sum(v), len(v), n) for n, v in by[side].items() if n not in by[other]), reverse=True)
        for t, k, n in only[:8]:
            print("  only %-6s %9.3f ms in %6d  %s" % (lab, t / 1e6, k, n[:100]))
    print("%10s %10s %7s %7s %10s  kernel (the 20 whose summed time differs most)" % (
        la + "_us", lb + "_us", "n_" + la[:3], "n_" + lb[:3], "diff_ms"))
    for d, n, na, ma, nb, mb in sorted(diffs, key=lambda x: -abs(x[0]))[:20]:
        print("%10.2f %10.2f %7d %7d %10.3f  %s" % (ma / 1e3, mb / 1e3, na, nb, d / 1e6, n[:100]))
    # The time between a kernel and the one before it (gaps under 100 us: inside a step), by kernel: a
    # cost that only some launches pay (a launch attribute, a cluster, a kind of memory) shows here.
    before = [collections.defaultdict(list), collections.defaultdict(list)]
    for side, rows in enumerate((A, B)):
        reach = None
        for r in rows:
            if reach is not None and r["start"] - reach < 100e3:
                before[side][r["name"]].append(r["start"] - reach)
            reach = r["end"] if reach is None else max(reach, r["end"])
    gb = []
    for n in common:
        if before[0][n] and before[1][n]:
            ga, gc = sum(before[0][n]) / len(before[0][n]), sum(before[1][n]) / len(before[1][n])
            gb.append(((gc - ga) * len(before[0][n]), n, ga, gc, len(before[0][n])))
    print("%10s %10s %7s %10s  gap before the kernel (the 10 whose summed gap differs most)" % (
        la + "_us", lb + "_us", "n", "diff_ms"))
    for d, n, ga, gc, k in sorted(gb, key=lambda x: -abs(x[0]))[:10]:
        print("%10.2f %10.2f %7d %10.3f  %s" % (ga / 1e3, gc / 1e3, k, d / 1e6, n[:100]))
    differ = [n for n in common if set(conf[0][n]) != set(conf[1][n])]
    print("kernels run differently (%s): %d of %d" % (" ".join(CONFIG), len(differ), len(common)))
    for n in differ[:15]:
        print("  %s" % n[:110])
        for side, lab in ((0, la), (1, lb)):
            for c, k in conf[side][n].most_common(3):
                print("    %-6s x%-5d %s" % (lab, k, " ".join("%s=%s" % kv for kv in zip(CONFIG, c))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
