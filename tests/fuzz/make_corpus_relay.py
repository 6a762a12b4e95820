#!/usr/bin/env python3
"""Seeds for fuzz_relay (tests/fuzz/fuzz_relay.c): one input per kind of gateway frame, well formed, so the
fuzzer starts past the checks. Writes tests/fuzz/corpus_relay/. Frame kinds: common/mirror.h; sizes:
struct cumux_marks_told 112 bytes, CUMUX_STAGE_READY 2, FREE 0."""
import os
import struct

BLOCK = 0x7F0000100000  # fuzz_relay.c's pinned block
MARKS_TOLD = 112


def frame(what, index=0, value=0, data=b""):
    body = struct.pack("<IIQ", what, index, value) + data
    return struct.pack("<BBH", 0, 0, len(body)) + body


def reply(slot, result, data=b""):
    return frame(18, slot, result | len(data) << 32, data)


seeds = {
    "tail": frame(17, 0, 4096),
    "reply": reply(2, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
    "reply_error": reply(3, 700),
    "host_alloc_answer": reply(1, 0, struct.pack("<Q", 0x7F0000200000)),
    "stage": frame(19, 1, 2, b"abcdefgh") + frame(19, 1, 0),
    "hostfn_post": frame(20, 0, 1, struct.pack("<QII", 7, 1, 3)),
    "marks": frame(21, 0, 0, struct.pack("<IIII", 0, 5, 3, 9)) + frame(22, 0, 0, b"\0" * MARKS_TOLD),
    "pinned": frame(8, 0, 0, struct.pack("<QII", BLOCK + 40, 5, 0) + b"hello\0\0\0"),
    "clients_fault": frame(23, 0, 3) + frame(24, 0, 719),
    "stdout": frame(25, 0, 0, b"printf from a kernel\n"),
    "bye": frame(17, 0, 8) + b"\xff\0\0\0",
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_relay")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
