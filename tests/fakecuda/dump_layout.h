/* Building a CUDA coredump in memory, for the fake driver's dumps (fake_coredump.c) and the reader's test
 * (tests/test_coredump.c): pieces appended at 8-byte alignment. The layout itself (sections of type
 * SHT_LOUSER + n, their rows) is cuda-gdb's cudacoredump.h, as server/coredump.c reads it. */
#ifndef CUMUX_FAKE_DUMP_LAYOUT_H
#define CUMUX_FAKE_DUMP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct dump {
    uint8_t b[8192];
    size_t len;
};

/* Appends n bytes at the next 8-byte boundary: their offset, or 0 when they do not fit. */
static inline size_t dump_put(struct dump *d, const void *p, size_t n)
{
    size_t at = (d->len + 7) & ~(size_t)7;
    if (at > sizeof d->b || n > sizeof d->b - at)
        return 0;
    memset(d->b + d->len, 0, at - d->len);
    memcpy(d->b + at, p, n);
    d->len = at + n;
    return at;
}

#endif
