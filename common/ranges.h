/* A sorted table of disjoint address ranges: device allocations, pinned host memory, module globals.
 * The server checks every address a client names against that client's table; the shim classifies
 * pointers with its own. Not thread-safe: callers lock. */
#ifndef CUMUX_RANGES_H
#define CUMUX_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cumux_range {
    uint64_t base;
    uint64_t size;
    uint64_t tag;   /* what it is; the owner's meaning */
    uint64_t extra; /* e.g. the other side's address of shared host memory */
};

struct cumux_ranges {
    struct cumux_range *v;
    size_t n, cap;
};

/* Insert; -1 when it overlaps an existing range or memory runs out. */
int cumux_ranges_add(struct cumux_ranges *t, uint64_t base, uint64_t size, uint64_t tag, uint64_t extra);
/* Remove the range that starts exactly at base; fills *out when given. -1 when there is none. */
int cumux_ranges_remove(struct cumux_ranges *t, uint64_t base, struct cumux_range *out);
/* The range holding addr, or NULL. */
const struct cumux_range *cumux_ranges_find(const struct cumux_ranges *t, uint64_t addr);
/* Does one range hold all of [addr, addr+len)? len 0 still needs addr inside a range. */
const struct cumux_range *cumux_ranges_covers(const struct cumux_ranges *t, uint64_t addr, uint64_t len);
void cumux_ranges_free(struct cumux_ranges *t);

/* Range arithmetic on sizes a client chose: every sum and product the server forms from message fields
 * goes through these, so that no wrapped value can pass a range check (invariant 3). Each returns false,
 * leaving *out unset, when the exact result does not fit 64 bits. */
bool cumux_add_u64(uint64_t a, uint64_t b, uint64_t *out);
bool cumux_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
/* The bytes from the first to the last byte of `rows` rows of `row_bytes` bytes whose starts are `pitch`
 * apart: pitch * (rows - 1) + row_bytes. False when rows or row_bytes is 0, when rows overlap
 * (rows > 1 and pitch < row_bytes), or when the span does not fit 64 bits. */
bool cumux_span_2d(uint64_t pitch, uint64_t row_bytes, uint64_t rows, uint64_t *span);

#endif
