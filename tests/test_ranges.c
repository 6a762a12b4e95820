/* The address-range table the server checks every client address against: fixed cases at the edges,
 * then many random operations compared with a brute-force model.
 * usage: test_ranges [OPS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ranges.h"

#include "test_util.h"

#define U(x) ((unsigned long long)(x))

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fixed_cases(void)
{
    struct cumux_ranges t = {0};
    struct cumux_range out;

    REQUIRE(cumux_ranges_find(&t, 0) == NULL && cumux_ranges_find(&t, UINT64_MAX) == NULL, "empty find");
    REQUIRE(cumux_ranges_covers(&t, 100, 0) == NULL, "empty covers");
    REQUIRE(cumux_ranges_remove(&t, 0, NULL) == -1, "empty remove");

    REQUIRE(cumux_ranges_add(&t, 1000, 100, 1, 11) == 0, "add [1000,1100)");
    /* Boundaries: first and last byte inside, one before and one past outside. */
    REQUIRE(cumux_ranges_find(&t, 999) == NULL, "one before");
    const struct cumux_range *r = cumux_ranges_find(&t, 1000);
    REQUIRE(r && r->base == 1000 && r->size == 100 && r->tag == 1 && r->extra == 11, "first byte");
    REQUIRE(cumux_ranges_find(&t, 1099) == r, "last byte");
    REQUIRE(cumux_ranges_find(&t, 1100) == NULL, "one past");
    REQUIRE(cumux_ranges_find(&t, 0) == NULL, "address 0");

    REQUIRE(cumux_ranges_covers(&t, 1000, 100) == r, "covers all of it");
    REQUIRE(cumux_ranges_covers(&t, 1000, 101) == NULL, "one byte too many");
    REQUIRE(cumux_ranges_covers(&t, 1099, 1) == r, "last byte");
    REQUIRE(cumux_ranges_covers(&t, 1099, 2) == NULL, "last byte and one past");
    REQUIRE(cumux_ranges_covers(&t, 1050, 0) == r, "zero length inside");
    REQUIRE(cumux_ranges_covers(&t, 1100, 0) == NULL, "zero length one past the end");
    REQUIRE(cumux_ranges_covers(&t, 999, 2) == NULL, "starts before");
    REQUIRE(cumux_ranges_covers(&t, 1001, UINT64_MAX) == NULL, "length that would wrap");
    REQUIRE(cumux_ranges_covers(&t, 1001, UINT64_MAX - 1000) == NULL, "addr + len wraps to inside");

    /* Zero size and wrapping ranges are refused. */
    REQUIRE(cumux_ranges_add(&t, 5000, 0, 0, 0) == -1, "zero size");
    REQUIRE(cumux_ranges_add(&t, UINT64_MAX - 9, 11, 0, 0) == -1, "base + size wraps by one");
    REQUIRE(cumux_ranges_add(&t, UINT64_MAX, 2, 0, 0) == -1, "last address + 2");
    REQUIRE(cumux_ranges_add(&t, 2, UINT64_MAX, 0, 0) == -1, "huge size");
    REQUIRE(t.n == 1, "refused adds changed the table (n=%zu)", t.n);

    /* Overlaps, each way, are refused; touching neighbours are fine. */
    REQUIRE(cumux_ranges_add(&t, 1000, 100, 0, 0) == -1, "same range");
    REQUIRE(cumux_ranges_add(&t, 1050, 10, 0, 0) == -1, "inside");
    REQUIRE(cumux_ranges_add(&t, 900, 500, 0, 0) == -1, "around");
    REQUIRE(cumux_ranges_add(&t, 900, 101, 0, 0) == -1, "overlaps the first byte");
    REQUIRE(cumux_ranges_add(&t, 1099, 10, 0, 0) == -1, "overlaps the last byte");
    REQUIRE(cumux_ranges_add(&t, 900, 100, 2, 22) == 0, "touches the start");
    REQUIRE(cumux_ranges_add(&t, 1100, 50, 3, 33) == 0, "touches the end");
    REQUIRE(t.n == 3, "n=%zu", t.n);
    REQUIRE(cumux_ranges_find(&t, 999)->tag == 2 && cumux_ranges_find(&t, 1000)->tag == 1 &&
              cumux_ranges_find(&t, 1100)->tag == 3,
          "neighbours");
    /* One range must hold all of [addr, addr+len): adjacent ranges do not add up. */
    REQUIRE(cumux_ranges_covers(&t, 990, 20) == NULL, "across two adjacent ranges");

    /* Remove only by exact base. */
    REQUIRE(cumux_ranges_remove(&t, 1001, NULL) == -1, "not a base");
    REQUIRE(cumux_ranges_remove(&t, 1099, NULL) == -1, "last byte is not a base");
    REQUIRE(cumux_ranges_remove(&t, 1000, &out) == 0, "remove the middle");
    REQUIRE(out.base == 1000 && out.size == 100 && out.tag == 1 && out.extra == 11, "removed range returned");
    REQUIRE(cumux_ranges_find(&t, 1000) == NULL && cumux_ranges_find(&t, 999) && cumux_ranges_find(&t, 1100),
          "only that range gone");
    REQUIRE(cumux_ranges_remove(&t, 1000, &out) == -1, "removed twice");
    REQUIRE(cumux_ranges_add(&t, 1000, 100, 4, 44) == 0, "the gap can be reused");

    /* The top of the address space. */
    REQUIRE(cumux_ranges_add(&t, UINT64_MAX - 100, 50, 5, 55) == 0, "near the top");
    REQUIRE(cumux_ranges_find(&t, UINT64_MAX - 51)->tag == 5, "last byte near the top");
    REQUIRE(cumux_ranges_find(&t, UINT64_MAX - 50) == NULL, "one past, near the top");
    REQUIRE(cumux_ranges_find(&t, UINT64_MAX) == NULL, "the last address");
    REQUIRE(cumux_ranges_covers(&t, UINT64_MAX - 60, UINT64_MAX) == NULL, "huge length near the top");
    REQUIRE(cumux_ranges_add(&t, 0, 1, 6, 66) == 0, "address 0");
    REQUIRE(cumux_ranges_find(&t, 0)->tag == 6 && cumux_ranges_find(&t, 1) == NULL, "address 0 alone");
    cumux_ranges_free(&t);
    REQUIRE(t.n == 0 && t.v == NULL, "free resets");
    REQUIRE(cumux_ranges_add(&t, 1, 1, 0, 0) == 0, "usable after free");
    cumux_ranges_free(&t);
}

/* ---- random operations against a brute-force model ---- */
#define MODEL_MAX 4096
static struct cumux_range model[MODEL_MAX];
static size_t model_n;

static const struct cumux_range *model_find(uint64_t a)
{
    for (size_t i = 0; i < model_n; i++)
        if (a >= model[i].base && a - model[i].base < model[i].size)
            return &model[i];
    return NULL;
}

static int model_add(uint64_t base, uint64_t size, uint64_t tag, uint64_t extra)
{
    if (size == 0 || base + size < base)
        return -1;
    for (size_t i = 0; i < model_n; i++)
        if (base < model[i].base + model[i].size && model[i].base < base + size)
            return -1;
    if (model_n == MODEL_MAX)
        return -2; /* the model is full: the caller skips the operation */
    model[model_n++] = (struct cumux_range){base, size, tag, extra};
    return 0;
}

static int model_remove(uint64_t base, struct cumux_range *out)
{
    for (size_t i = 0; i < model_n; i++) {
        if (model[i].base == base) {
            *out = model[i];
            model[i] = model[--model_n];
            return 0;
        }
    }
    return -1;
}

static const struct cumux_range *model_covers(uint64_t a, uint64_t len)
{
    const struct cumux_range *r = model_find(a);
    if (!r || len > r->base + r->size - a)
        return NULL;
    return r;
}

static bool same(const struct cumux_range *a, const struct cumux_range *b)
{
    if (!a || !b)
        return a == b;
    return a->base == b->base && a->size == b->size && a->tag == b->tag && a->extra == b->extra;
}

static void check_table(const struct cumux_ranges *t)
{
    REQUIRE(t->n == model_n, "table has %zu ranges, model %zu", t->n, model_n);
    for (size_t i = 0; i < t->n; i++) {
        REQUIRE(i == 0 || t->v[i - 1].base + t->v[i - 1].size <= t->v[i].base, "table unsorted or overlapping at %zu", i);
        REQUIRE(same(&t->v[i], model_find(t->v[i].base)), "range %zu not in the model", i);
    }
}

/* An address worth asking about: near a range's edges most of the time. */
static uint64_t probe_addr(uint64_t offset, uint64_t space)
{
    if (model_n && rnd() % 4) {
        const struct cumux_range *r = &model[rnd() % model_n];
        switch (rnd() % 5) {
        case 0: return r->base - 1;
        case 1: return r->base;
        case 2: return r->base + r->size - 1;
        case 3: return r->base + r->size;
        default: return r->base + rnd() % r->size;
        }
    }
    return offset + rnd() % space;
}

static void random_ops(unsigned long nops, uint64_t offset, uint64_t space, uint64_t max_size)
{
    struct cumux_ranges t = {0};
    model_n = 0;
    unsigned long adds = 0, refused = 0, removes = 0;
    for (unsigned long op = 0; op < nops; op++) {
        uint64_t k = rnd() % 10;
        if (k < 4) {
            uint64_t base = offset + rnd() % space, size = rnd() % (max_size + 1);
            uint64_t tag = rnd(), extra = rnd();
            int want = model_add(base, size, tag, extra);
            if (want == -2)
                continue;
            int got = cumux_ranges_add(&t, base, size, tag, extra);
            REQUIRE(got == want, "op %lu: add(%llu, %llu) = %d, model %d", op, U(base), U(size), got, want);
            adds += want == 0;
            refused += want != 0;
        } else if (k < 6) {
            uint64_t base = model_n && rnd() % 2 ? model[rnd() % model_n].base : probe_addr(offset, space);
            struct cumux_range g = {0}, w = {0};
            int want = model_remove(base, &w);
            int got = cumux_ranges_remove(&t, base, rnd() % 2 ? &g : NULL);
            REQUIRE(got == want, "op %lu: remove(%llu) = %d, model %d", op, U(base), got, want);
            removes += want == 0;
        } else if (k < 8) {
            uint64_t a = probe_addr(offset, space);
            REQUIRE(same(cumux_ranges_find(&t, a), model_find(a)), "op %lu: find(%llu)", op, U(a));
        } else {
            uint64_t a = probe_addr(offset, space);
            uint64_t len = rnd() % 3 == 0 ? rnd() : rnd() % (max_size + 2);
            REQUIRE(same(cumux_ranges_covers(&t, a, len), model_covers(a, len)), "op %lu: covers(%llu, %llu)", op,
                  U(a), U(len));
        }
        if (op % 512 == 0)
            check_table(&t);
    }
    check_table(&t);
    printf("random ops at %#llx: %lu ops, %lu added, %lu refused, %lu removed, %zu left\n", U(offset), nops,
           adds, refused, removes, t.n);
    cumux_ranges_free(&t);
}

/* The overflow-checked arithmetic every range the server computes goes through. The 2-D cases are the
 * ones that wrapped before: pitch 2^33 and 2^31 + 1 rows of 4 bytes span 2^64 + 4 bytes, which used to
 * come out as 4 and pass the range check of a 4 KiB buffer. */
static void span_cases(void)
{
    uint64_t v = 7;
    REQUIRE(cumux_add_u64(1, 2, &v) && v == 3, "1 + 2");
    REQUIRE(cumux_add_u64(UINT64_MAX - 1, 1, &v) && v == UINT64_MAX, "largest sum");
    v = 7;
    REQUIRE(!cumux_add_u64(UINT64_MAX, 1, &v) && v == 7, "sum that wraps: refused, *out untouched");
    REQUIRE(cumux_mul_u64(1ull << 32, (1ull << 32) - 1, &v) && v == (1ull << 32) * ((1ull << 32) - 1), "largest product");
    REQUIRE(!cumux_mul_u64(1ull << 32, 1ull << 32, &v), "2^32 * 2^32");
    REQUIRE(!cumux_mul_u64(4, 1ull << 62, &v), "4 * 2^62");
    REQUIRE(cumux_mul_u64(0, UINT64_MAX, &v) && v == 0, "0 * anything");

    REQUIRE(cumux_span_2d(0, 16, 1, &v) && v == 16, "one row ignores the pitch");
    REQUIRE(cumux_span_2d(64, 16, 3, &v) && v == 144, "3 rows of 16, 64 apart");
    REQUIRE(cumux_span_2d(16, 16, 4, &v) && v == 64, "packed rows");
    REQUIRE(!cumux_span_2d(15, 16, 2, &v), "overlapping rows");
    REQUIRE(!cumux_span_2d(64, 0, 3, &v), "empty rows");
    REQUIRE(!cumux_span_2d(64, 16, 0, &v), "no rows");
    REQUIRE(!cumux_span_2d(1ull << 33, 4, (1ull << 31) + 1, &v), "pitch 2^33, 2^31+1 rows: 2^64 + 4 bytes");
    REQUIRE(!cumux_span_2d(1ull << 40, 1ull << 40, 1ull << 32, &v), "the old limits' largest product");
    REQUIRE(!cumux_span_2d(UINT64_MAX, 1, 2, &v), "pitch + row wraps");
    REQUIRE(cumux_span_2d(UINT64_MAX - 1, 1, 2, &v) && v == UINT64_MAX, "the largest span");
    /* Against 128-bit arithmetic, at random. */
    for (int i = 0; i < 200000; i++) {
        uint64_t pitch = rnd() >> (rnd() % 64), row = rnd() >> (rnd() % 64), rows = rnd() >> (rnd() % 64);
        unsigned __int128 exact = rows ? (unsigned __int128)pitch * (rows - 1) + row : 0;
        bool want = rows && row && (rows == 1 || pitch >= row) && exact <= UINT64_MAX;
        bool got = cumux_span_2d(pitch, row, rows, &v);
        REQUIRE(got == want && (!got || v == (uint64_t)exact), "span(%llu, %llu, %llu)", (unsigned long long)pitch,
                (unsigned long long)row, (unsigned long long)rows);
    }
}

int main(int argc, char **argv)
{
    unsigned long nops = argc > 1 ? strtoul(argv[1], NULL, 10) : 200000;
    fixed_cases();
    span_cases();
    /* Dense: small addresses and sizes, so most adds collide and most probes hit edges. */
    random_ops(nops, 0, 4096, 64);
    /* Sparse, growing the table to hundreds of ranges. */
    random_ops(nops / 4, 1ull << 40, 1ull << 30, 1 << 20);
    /* At the top of the address space, where base + size can wrap. */
    random_ops(nops / 4, UINT64_MAX - 8191, 8192, 300);
    printf("test_ranges: %lu checks passed\n", test_checks);
    return 0;
}
