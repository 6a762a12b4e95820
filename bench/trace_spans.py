#!/usr/bin/env python3
"""What a program calls inside the spans it times: from a `cumux trace` file, the driver calls a thread
makes between two event records of the same event pair (a start record, then work, then a stop record, as
cuDNN's benchmark mode times each candidate plan). Under cumux each call there that asks the server is a
round trip inside the timed span, which natively is a host function; this lists them by how often they
come per span, so that the ones worth answering in the shim are known.
usage: trace_spans.py TRACE [--top N]"""
import collections
import re
import sys

CALL = re.compile(r"^\s*([0-9.]+) (\d+) (cu\w+)\((.*)\) = (-?\d+)")
EVENT = re.compile(r"hEvent=(0x[0-9a-f]+)")
CREATED = re.compile(r"phEvent=0x[0-9a-f]+->(0x[0-9a-f]+), Flags=(0x[0-9a-f]+)")


def main():
    args = sys.argv[1:]
    top = 25
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__)
        return 2
    open_span = {}  # thread -> (start event, calls so far)
    spans = 0
    per_name = collections.Counter()  # calls inside spans
    spans_with = collections.Counter()  # spans holding at least one call of the name
    untimed = set()  # events created with CU_EVENT_DISABLE_TIMING (allocators' and libraries' ordering)
    with open(args[0], errors="replace") as f:
        for line in f:
            m = CALL.match(line)
            if not m:
                continue
            _, tid, name, argtext, _ = m.groups()
            if name == "cuEventCreate":
                c = CREATED.search(argtext)
                if c and int(c.group(2), 16) & 0x2:
                    untimed.add(c.group(1))
                elif c:
                    untimed.discard(c.group(1))  # a handle used again
                continue
            if name.startswith("cuEventRecord"):
                ev = EVENT.search(argtext)
                ev = ev.group(1) if ev else "?"
                if ev in untimed:
                    if tid in open_span:
                        open_span[tid][1][name] += 1
                    continue
                cur = open_span.get(tid)
                if cur and cur[0] != ev and cur[1]:
                    spans += 1  # a record of another event closes the span its first record opened
                    for n, k in cur[1].items():
                        per_name[n] += k
                        spans_with[n] += 1
                    open_span.pop(tid)
                else:
                    open_span[tid] = (ev, collections.Counter())
                continue
            if tid in open_span:
                if name.startswith(("cuEventSynchronize", "cuCtxSynchronize", "cuStreamSynchronize")):
                    open_span.pop(tid)  # a wait before any stop record: not a timed span
                else:
                    open_span[tid][1][name] += 1
    print(f"timed spans (start record, calls, stop record of another event, same thread): {spans}")
    if not spans:
        return 1
    print(f"{'calls per span':>15} {'in % of spans':>14}  function")
    for name, n in per_name.most_common(top):
        print(f"{n / spans:15.2f} {100.0 * spans_with[name] / spans:13.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
