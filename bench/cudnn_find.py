#!/usr/bin/env python3
"""cuDNN's benchmark mode side by side: the cudnn_frontend log (CUDNN_FRONTEND_LOG_INFO=1) of the same program
run twice, natively and under cumux. Each search times every candidate plan once ("Plan TAG took MS") and
ends with "Auto-tuning returns N plans"; the program then runs the fastest for its whole life. Prints how
the two runs timed the same plans (cumux minus native, per plan), how many searches picked a different plan,
and what the other run's picks cost by the native run's own times.
usage: cudnn_find.py NATIVE_LOG OTHER_LOG [--labels native,cumux]"""
import re
import statistics
import sys

PLAN = re.compile(r"Plan (\S+) took\s+([0-9.eE+-]+)")
END = re.compile(r"Auto-tuning returns")


def searches(path):
    out, cur = [], []
    with open(path, errors="replace") as f:
        for line in f:
            m = PLAN.search(line)
            if m:
                cur.append((m.group(1), float(m.group(2)) * 1000.0))  # us
            elif END.search(line):
                out.append(cur)
                cur = []
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    args = sys.argv[1:]
    labels = ["native", "cumux"]
    if "--labels" in args:
        i = args.index("--labels")
        labels = args[i + 1].split(",")
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    a, b = searches(args[0]), searches(args[1])
    print(f"searches: {labels[0]} {len(a)}, {labels[1]} {len(b)}")
    if not a or not b:
        print("no 'Plan ... took' lines: cuDNN benchmark mode off, or cudnn_frontend's logging compiled out")
        return 1
    diffs, ratios, same_set, differ, cost, best_sum = [], [], 0, 0, 0.0, 0.0
    worst = []
    for sa, sb in zip(a, b):
        ta, tb = dict(sa), dict(sb)
        if set(ta) != set(tb):
            continue
        same_set += 1
        for tag, t in ta.items():
            diffs.append(tb[tag] - t)
            if t > 0:
                ratios.append(tb[tag] / t)
        pick_a, pick_b = min(ta, key=ta.get), min(tb, key=tb.get)
        best_sum += ta[pick_a]
        if pick_a != pick_b:
            differ += 1
            extra = ta[pick_b] - ta[pick_a]  # what the other pick costs, timed natively
            cost += extra
            worst.append((extra, ta[pick_a], pick_a, pick_b))
    print(f"searches with the same candidates (compared): {same_set}; plans timed both ways: {len(diffs)}")
    if diffs:
        print(f"{labels[1]} minus {labels[0]} per plan, us: median {statistics.median(diffs):.1f}, "
              f"p10 {pct(diffs, 0.1):.1f}, p90 {pct(diffs, 0.9):.1f}, max {max(diffs):.1f}; "
              f"ratio median {statistics.median(ratios):.3f}, p90 {pct(ratios, 0.9):.3f}")
    print(f"searches whose fastest plan differs: {differ} of {same_set}; the {labels[1]} picks, timed by the "
          f"{labels[0]} run, take {cost:.1f} us more than its own picks' {best_sum:.1f} us "
          f"({100.0 * cost / best_sum if best_sum else 0:.2f} % over one pass of every searched operation)")
    for extra, t, pa, pb in sorted(worst, reverse=True)[:8]:
        print(f"  +{extra:8.1f} us over {t:8.1f}: {labels[0]} {pa[:60]}  {labels[1]} {pb[:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
