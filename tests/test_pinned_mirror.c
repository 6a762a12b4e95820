/* Pinned memory across the network (cli/pinned_mirror.c; issue 45): two sets stand for the relay's and the
 * gateway's copies of the same blocks, each side's records applied to the other's. Checked: a whole look
 * carries every changed byte (in runs of 8-byte words, not pages: the other side's bytes between runs stay);
 * a look at ranges carries the changes in the pages those ranges touch and leaves the rest for a later
 * look; a block of 16 MiB (compared on several threads) the same; a look is due again only after a whole
 * one (or a scheduled ranged one); the ranges an op's body
 * gives each side (copy, 2-D copy, memset; sizes past 2^64 refused); records that are malformed or outside
 * every block. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cli/pinned_mirror.h"
#include "common/channel.h"
#include "common/proto.h"
#include "tests/check.h"


#define BLOCK (64u * 4096u)
#define ADDR 0x7f0000000000ull

/* Records from one side applied to the other, counted. */
struct peer {
    struct pinned_set *to;
    size_t frames, bytes;
    int apply_rc;
};

static int deliver(void *ctx, const uint8_t *records, size_t len)
{
    struct peer *p = ctx;
    p->frames++, p->bytes += len;
    if (pinned_apply(p->to, records, len) < 0)
        p->apply_rc = -1;
    return 0;
}

static uint8_t *block(void)
{
    uint8_t *m = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return m;
}

int main(void)
{
    struct pinned_set a, b;
    pinned_init(&a);
    pinned_init(&b);
    uint8_t *ma = block(), *mb = block();
    CHECK(pinned_add(&a, ADDR, BLOCK, ma) == 0, "add a");
    CHECK(pinned_add(&b, ADDR, BLOCK, mb) == 0, "add b");
    CHECK(pinned_add(&b, ADDR + 4096, 4096, block()) < 0, "an overlapping block is refused");
    struct peer to_b = {.to = &b}, to_a = {.to = &a};

    /* Nothing written: a whole look sends nothing. */
    CHECK(pinned_diff(&a, deliver, &to_b) == 0 && to_b.frames == 0, "no change, no records");

    /* A whole look carries scattered changes exactly. */
    ma[5] = 1, ma[4096 * 7 + 100] = 2, ma[4096 * 7 + 101] = 3, ma[BLOCK - 1] = 4;
    memset(ma + 4096 * 20, 0xab, 4096 * 3); /* whole pages */
    long long changed = pinned_diff(&a, deliver, &to_b);
    CHECK(changed == 3 * 8 + 4096 * 3, "changed %lld (8-byte words)", changed);
    CHECK(to_b.apply_rc == 0 && !memcmp(ma, mb, BLOCK), "b holds what a wrote");
    CHECK(pinned_diff(&a, deliver, &to_b) == 0, "a second look finds nothing");

    /* Runs, not pages: b's own write beside a's change in the same page survives a's record. */
    ma[4096 * 30 + 10] = 9;
    mb[4096 * 30 + 3000] = 7; /* b's, not yet sent */
    pinned_diff(&a, deliver, &to_b);
    CHECK(mb[4096 * 30 + 10] == 9 && mb[4096 * 30 + 3000] == 7, "b's byte kept (%d)", mb[4096 * 30 + 3000]);
    CHECK(pinned_diff(&b, deliver, &to_a) == 8 && ma[4096 * 30 + 3000] == 7, "b's byte reaches a");
    CHECK(!memcmp(ma, mb, BLOCK), "both the same");

    /* A look at a range: the pages it touches only; the rest waits for a whole look. */
    ma[4096 * 40 + 1] = 11; /* in the range's first page, before its start */
    ma[4096 * 41 + 2] = 12; /* in the range */
    ma[4096 * 50] = 13;     /* outside */
    struct pinned_range r = {ADDR + 4096 * 40 + 500, 4096};
    changed = pinned_diff_ranges(&a, &r, 1, false, deliver, &to_b);
    CHECK(changed == 16, "ranged look changed %lld", changed);
    CHECK(mb[4096 * 40 + 1] == 11 && mb[4096 * 41 + 2] == 12 && mb[4096 * 50] == 0, "only the range's pages");
    CHECK(pinned_diff(&a, deliver, &to_b) == 8 && mb[4096 * 50] == 13, "the rest at the whole look");
    struct pinned_range away = {ADDR + BLOCK, 1 << 20}, wrap = {~0ull - 10, 10};
    CHECK(pinned_diff_ranges(&a, &away, 1, false, deliver, &to_b) == 0, "a range past the block");
    CHECK(pinned_diff_ranges(&a, &wrap, 1, false, deliver, &to_b) == 0, "a range at the top of the space");
    CHECK(pinned_diff_ranges(&a, NULL, 0, false, deliver, &to_b) == 0, "no ranges");

    /* When a look is due: after a whole look, not at once; a ranged look leaves it, a scheduled one moves it. */
    pinned_diff(&a, deliver, &to_b);
    uint64_t now = cumux_now_ns();
    CHECK(!pinned_due(&a, now), "not due right after a whole look");
    CHECK(pinned_due(&a, now + 2000000000ull), "due later");
    pinned_diff_ranges(&a, &r, 1, false, deliver, &to_b);
    CHECK(pinned_due(&a, now + 2000000000ull), "still due after an unscheduled ranged look");
    struct pinned_set c;
    pinned_init(&c);
    CHECK(!pinned_due(&c, now + 2000000000ull), "an empty set is never due");

    /* The ranges an op's body gives each side. */
    struct pinned_range two[2];
    struct cumux_copy cp = {.kind = CUMUX_COPY_DTOH, .dst = ADDR + 64, .src = 0x200000000ull, .size = 1000};
    CHECK(pinned_op_ranges(CUMUX_OP_COPY, (uint8_t *)&cp, sizeof cp, false, two) == 2 && two[0].addr == cp.src &&
              two[1].addr == cp.dst && two[1].len == 1000,
          "copy: the relay looks at both sides");
    CHECK(pinned_op_ranges(CUMUX_OP_COPY, (uint8_t *)&cp, sizeof cp, true, two) == 1 && two[0].addr == cp.dst &&
              two[0].len == 1000,
          "copy: the gateway at the destination");
    CHECK(pinned_op_ranges(CUMUX_OP_COPY, (uint8_t *)&cp, sizeof cp - 8, false, two) < 0, "a short body");
    cp.size = ~0ull - 10;
    CHECK(pinned_op_ranges(CUMUX_OP_COPY, (uint8_t *)&cp, sizeof cp, false, two) < 0, "a size past 2^64");
    struct cumux_copy_2d c2 = {.kind = CUMUX_COPY_HTOD, .dst = 0x200000000ull, .dst_pitch = 512, .src = ADDR,
                               .src_pitch = 4096, .width = 100, .height = 3};
    CHECK(pinned_op_ranges(CUMUX_OP_COPY_2D, (uint8_t *)&c2, sizeof c2, false, two) == 2 && two[0].addr == ADDR &&
              two[0].len == 2 * 4096 + 100 && two[1].len == 2 * 512 + 100,
          "2-D copy: rows");
    c2.src_pitch = ~0ull / 2;
    CHECK(pinned_op_ranges(CUMUX_OP_COPY_2D, (uint8_t *)&c2, sizeof c2, false, two) < 0, "2-D rows past 2^64");
    struct cumux_memset ms = {.elem_size = 4, .dst = ADDR + 8, .pitch = 0, .width = 10, .height = 1};
    CHECK(pinned_op_ranges(CUMUX_OP_MEMSET, (uint8_t *)&ms, sizeof ms, true, two) == 1 && two[0].addr == ADDR + 8 &&
              two[0].len == 40,
          "memset: its destination");
    ms.width = ~0ull / 2;
    CHECK(pinned_op_ranges(CUMUX_OP_MEMSET, (uint8_t *)&ms, sizeof ms, true, two) < 0, "memset past 2^64");
    CHECK(pinned_op_ranges(CUMUX_OP_LAUNCH, (uint8_t *)&ms, sizeof ms, true, two) < 0, "not a look=range op");
    CHECK(cumux_op_look(CUMUX_OP_LAUNCH) == CUMUX_LOOK_ALL && cumux_op_look(CUMUX_OP_STREAM_QUERY) == CUMUX_LOOK_NONE &&
              cumux_op_look(CUMUX_OP_COPY) == CUMUX_LOOK_RANGE && cumux_op_look(CUMUX_OP_STREAM_MEM_OP) == CUMUX_LOOK_ALL,
          "the spec's look= classes");

    /* A large block (compared on several threads where there are CPUs for them), not a whole number of
     * pages: changes scattered over it, its last short page included, all arrive; a ranged look in it too. */
    {
        const uint64_t big = (16u << 20) + 100, at = 0x7f1000000000ull;
        uint8_t *ba = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint8_t *bb = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (ba == MAP_FAILED || bb == MAP_FAILED)
            return 2;
        CHECK(pinned_add(&a, at, big, ba) == 0 && pinned_add(&b, at, big, bb) == 0, "add the large blocks");
        unsigned seed = 12345, writes = 0;
        for (int k = 0; k < 3000; k++) {
            seed = seed * 1103515245u + 12345u;
            ba[(uint64_t)seed % big] = (uint8_t)(k | 1);
            writes++;
        }
        ba[big - 1] = 0x77;
        changed = pinned_diff(&a, deliver, &to_b);
        CHECK(changed > 0 && !memcmp(ba, bb, big) && !memcmp(ma, mb, BLOCK), "the large block arrives (%u writes)", writes);
        CHECK(pinned_diff(&a, deliver, &to_b) == 0, "then nothing");
        memset(ba + (9u << 20), 0x42, 3 << 20); /* 3 MiB in the middle */
        ba[100] = 0x99;                          /* outside the range below */
        struct pinned_range mid = {at + (8u << 20), 8u << 20};
        changed = pinned_diff_ranges(&a, &mid, 1, false, deliver, &to_b);
        CHECK(changed == 3 << 20 && !memcmp(ba + (8u << 20), bb + (8u << 20), 8u << 20) && bb[100] != 0x99,
              "a ranged look in the large block: %lld", changed);
        CHECK(pinned_diff(&a, deliver, &to_b) == 8 && bb[100] == 0x99, "the rest at the whole look");
        pinned_remove(&a, at);
        pinned_remove(&b, at);
    }

    /* Records: malformed ones refused, those outside every block skipped. */
    uint8_t rec[32] = {0};
    uint32_t head[4] = {(uint32_t)(ADDR + 16), (uint32_t)((ADDR + 16) >> 32), 8, 0};
    memcpy(rec, head, sizeof head);
    memset(rec + 16, 0x5a, 8);
    CHECK(pinned_apply(&b, rec, 24) == 0 && mb[16] == 0x5a, "a record applied");
    head[2] = 0;
    memcpy(rec, head, sizeof head);
    CHECK(pinned_apply(&b, rec, 24) < 0, "a record of 0 bytes");
    head[2] = 4097;
    memcpy(rec, head, sizeof head);
    CHECK(pinned_apply(&b, rec, 32) < 0, "a record longer than a page");
    head[2] = 16;
    memcpy(rec, head, sizeof head);
    CHECK(pinned_apply(&b, rec, 24) < 0, "a record longer than the frame");
    head[0] = 0x1000, head[1] = 0, head[2] = 8;
    memcpy(rec, head, sizeof head);
    CHECK(pinned_apply(&b, rec, 24) == 0, "a record outside every block is skipped");
    CHECK(pinned_apply(&b, rec, 10) < 0, "a frame shorter than a record's head");

    pinned_remove(&a, ADDR);
    CHECK(a.n == 0 && a.bytes == 0, "removed");
    pinned_fini(&a);
    pinned_fini(&b);
    pinned_fini(&c);
    if (failures) {
        printf("FAIL pinned_mirror: %lu of %lu checks\n", failures, checks);
        return 1;
    }
    printf("PASS pinned_mirror\n");
    return 0;
}
