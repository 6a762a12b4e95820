#include "common/ranges.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first range whose base is > addr. */
static size_t upper(const struct cumux_ranges *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int cumux_ranges_add(struct cumux_ranges *t, uint64_t base, uint64_t size, uint64_t tag, uint64_t extra)
{
    if (size == 0 || base + size < base)
        return -1;
    size_t i = upper(t, base);
    if (i > 0 && t->v[i - 1].base + t->v[i - 1].size > base)
        return -1;
    if (i < t->n && base + size > t->v[i].base)
        return -1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct cumux_range *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = (struct cumux_range){base, size, tag, extra};
    t->n++;
    return 0;
}

int cumux_ranges_remove(struct cumux_ranges *t, uint64_t base, struct cumux_range *out)
{
    size_t i = upper(t, base);
    if (i == 0 || t->v[i - 1].base != base)
        return -1;
    if (out)
        *out = t->v[i - 1];
    memmove(&t->v[i - 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->n--;
    return 0;
}

const struct cumux_range *cumux_ranges_find(const struct cumux_ranges *t, uint64_t addr)
{
    size_t i = upper(t, addr);
    if (i == 0)
        return NULL;
    const struct cumux_range *r = &t->v[i - 1];
    return addr - r->base < r->size ? r : NULL;
}

const struct cumux_range *cumux_ranges_covers(const struct cumux_ranges *t, uint64_t addr, uint64_t len)
{
    const struct cumux_range *r = cumux_ranges_find(t, addr);
    if (!r)
        return NULL;
    if (len > r->size - (addr - r->base))
        return NULL;
    return r;
}

void cumux_ranges_free(struct cumux_ranges *t)
{
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}

bool cumux_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

bool cumux_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

bool cumux_span_2d(uint64_t pitch, uint64_t row_bytes, uint64_t rows, uint64_t *span)
{
    uint64_t before_last;
    if (rows == 0 || row_bytes == 0 || (rows > 1 && pitch < row_bytes))
        return false;
    return cumux_mul_u64(pitch, rows - 1, &before_last) && cumux_add_u64(before_last, row_bytes, span);
}
