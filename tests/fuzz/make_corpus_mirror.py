#!/usr/bin/env python3
"""Seeds for fuzz_mirror (tests/fuzz/fuzz_mirror.c): one input per kind of relay frame, well formed, so the
fuzzer starts past the checks. Writes tests/fuzz/corpus_mirror/. Op numbers and struct sizes: printed by
the generated protocol (COPY_DTOH_STAGED 36, HOST_FREE 10, struct cumux_copy_staged 40 bytes)."""
import os
import struct

OP_COPY_DTOH_STAGED, OP_HOST_FREE = 36, 10
BLOCK = 0x7F0000100000  # fuzz_mirror.c's pinned block


def frame(what, index=0, value=0, data=b""):
    body = struct.pack("<IIQ", what, index, value) + data
    return struct.pack("<BBH", 0, 0, len(body)) + body


def msg(op, body, reply=0xFFFF):
    size = 8 + len(body)
    pad = (-size) % 8
    return struct.pack("<HHI", op, reply, size + pad) + body + b"\0" * pad


seeds = {
    "ring_dtoh": frame(1, 0, 0, msg(OP_COPY_DTOH_STAGED, struct.pack("<IIQQQQ", 1, 0, 0x1000, 100, 0, 0), reply=3)),
    "ring_host_free": frame(1, 0, 0, msg(OP_HOST_FREE, struct.pack("<Q", BLOCK))),
    "ring_two": frame(1, 0, 0, msg(0, b"\0" * 8)) + frame(1, 0, 16, msg(0, b"\0" * 16)),
    "stage": frame(2, 1, 0, b"abcdefgh") + frame(3, 1),
    "image": frame(4, 0, 0, b"\x7fELF" * 4) + frame(4, 1, 0, b"end!"),
    "hostfn": frame(5, 0, 7) + frame(6, 0, 0, struct.pack("<IIII", 0, 1, 3, 9)),
    "pinned_new": frame(7, 2, 1 << 20),
    "pinned": frame(8, 0, 0, struct.pack("<QII", BLOCK + 40, 5, 0) + b"hello\0\0\0"),
    "bye": frame(1, 0, 0, msg(0, b"\0" * 8)) + b"\xff\0\0\0",
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_mirror")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
