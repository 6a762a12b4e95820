/* SM reservations and caps as sets of SM groups (common/sm_plan.c): on an H200's coscheduled layout (132
 * SMs in 16 groups of 8 and a last group of the 4 left) and on a fine one (66 groups of 2, past 64 bits). */
#include <stdio.h>
#include <string.h>

#include "common/sm_plan.h"
#include "tests/check.h"


static struct cumux_sm_set bits(uint64_t lo)
{
    struct cumux_sm_set s = {{lo}};
    return s;
}

int main(void)
{
    unsigned sms[17];
    for (int i = 0; i < 16; i++)
        sms[i] = 8;
    sms[16] = 4;
    const struct cumux_sm_set full = cumux_sm_first(16), all = cumux_sm_first(17);
    CHECK(full.w[0] == 0xffff && all.w[0] == 0x1ffff && all.w[1] == 0, "first");
    CHECK(cumux_sm_count(all, sms, 17) == 132, "all %u", cumux_sm_count(all, sms, 17));
    CHECK(cumux_sm_groups_for(66, 8) == 9 && cumux_sm_groups_for(64, 8) == 8 && cumux_sm_groups_for(0, 8) == 0 &&
             cumux_sm_groups_for(1, 8) == 1,
         "groups_for");
    /* Reservations: the lowest free whole groups, disjoint; all of them may go, not one more. */
    struct cumux_sm_set a = cumux_sm_reserve(full, bits(0), cumux_sm_groups_for(66, 8));
    CHECK(a.w[0] == 0x1ff, "66 SMs: %#llx", (unsigned long long)a.w[0]);
    CHECK(cumux_sm_count(a, sms, 17) == 72, "66 SMs reserved as %u", cumux_sm_count(a, sms, 17));
    struct cumux_sm_set b = cumux_sm_reserve(full, a, 2);
    CHECK(b.w[0] == 0x600, "second reservation %#llx", (unsigned long long)b.w[0]);
    struct cumux_sm_set ab = cumux_sm_or(a, b);
    CHECK(cumux_sm_reserve(full, ab, 5).w[0] == 0xf800, "the last 5 whole groups: %#llx",
         (unsigned long long)cumux_sm_reserve(full, ab, 5).w[0]);
    CHECK(cumux_sm_empty(cumux_sm_reserve(full, ab, 6)), "6 of 5 free groups");
    CHECK(cumux_sm_empty(cumux_sm_reserve(full, bits(0), 17)), "more than the whole groups");
    CHECK(cumux_sm_empty(cumux_sm_reserve(full, bits(0), 0)), "nothing reserved as something");
    /* Any sequence of reservations never hands out a group twice nor one outside full. */
    struct cumux_sm_set held = {{0}};
    for (unsigned k = 1; k < 8; k++) {
        struct cumux_sm_set r = cumux_sm_reserve(full, held, k);
        if (cumux_sm_empty(r))
            continue;
        CHECK(cumux_sm_groups(r) == k && cumux_sm_equal(cumux_sm_minus(r, held), r) &&
                 cumux_sm_empty(cumux_sm_minus(r, full)),
             "k=%u: %#llx over %#llx", k, (unsigned long long)r.w[0], (unsigned long long)held.w[0]);
        held = cumux_sm_or(held, r);
    }
    /* Caps: a window of the shared groups, wrapping, spread by start, never more SMs than the percentage
     * rounded up to whole groups. */
    struct cumux_sm_set shared = cumux_sm_minus(all, a); /* groups 9-16: 7 x 8 SMs and the 4 left */
    struct cumux_sm_set w0 = cumux_sm_window_percent(shared, sms, 17, 10, 132, 8, 0); /* 14 SMs: 16 */
    CHECK(w0.w[0] == 0x600, "window 0: %#llx", (unsigned long long)w0.w[0]);
    struct cumux_sm_set w7 = cumux_sm_window_percent(shared, sms, 17, 10, 132, 8, 7); /* the 4 and 8: 12 (the next 8 would pass the cap) */
    CHECK(w7.w[0] == 0x10200 || w7.w[0] == 0x10000 + 0x200, "window wrapping: %#llx", (unsigned long long)w7.w[0]);
    CHECK(cumux_sm_count(w7, sms, 17) == 12, "wrapping window of %u SMs", cumux_sm_count(w7, sms, 17));
    CHECK(cumux_sm_equal(cumux_sm_window_percent(shared, sms, 17, 50, 132, 8, 3), shared),
         "a window as large as the share");
    CHECK(cumux_sm_empty(cumux_sm_window_percent(bits(0), sms, 17, 10, 132, 8, 3)), "no share");
    /* The H200's own split (15 groups of 8 and a remainder of 12, SMs 120-131): 25% is 33 SMs, at most 40,
     * from every start (the remainder once made a window of 44, beyond the cap). */
    unsigned h200[16];
    for (int i = 0; i < 15; i++)
        h200[i] = 8;
    h200[15] = 12;
    for (unsigned start = 0; start < 40; start++) {
        struct cumux_sm_set w = cumux_sm_window_percent(cumux_sm_first(16), h200, 16, 25, 132, 8, start);
        unsigned n = cumux_sm_count(w, h200, 16);
        CHECK(n >= 33 && n <= 40, "25%% from group %u: %u SMs", start, n);
    }
    unsigned big[2] = {12, 12}; /* every group larger than the cap: the smallest single one */
    CHECK(cumux_sm_groups(cumux_sm_window_percent(cumux_sm_first(2), big, 2, 1, 24, 8, 0)) == 1, "one group at least");
    CHECK(cumux_sm_groups_for_percent(50, 132, 8) == 9, "50%%: %u", cumux_sm_groups_for_percent(50, 132, 8));
    CHECK(cumux_sm_groups_for_percent(1, 132, 8) == 1, "1%%");
    CHECK(cumux_sm_groups_for_percent(0, 132, 8) == 1, "0%%: at least one group");
    CHECK(cumux_sm_groups_for_percent(100, 132, 8) == 17, "100%%: %u", cumux_sm_groups_for_percent(100, 132, 8));
    CHECK(cumux_sm_groups_for_percent(250, 132, 8) == 17, "over 100%%");
    /* Formatting. */
    char text[64];
    cumux_sm_format(a, sms, 17, text, sizeof text);
    CHECK(strcmp(text, "0-71") == 0, "%s", text);
    cumux_sm_format(bits(0x10201), sms, 17, text, sizeof text);
    CHECK(strcmp(text, "0-7,72-79,128-131") == 0, "%s", text);
    cumux_sm_format(bits(0x10201), sms, 17, text, 6);
    CHECK(strlen(text) < 6, "cut: %s", text);
    /* A fine layout, 66 groups of 2: two halves of 66 SMs each, past the first 64 bits. */
    unsigned fine[66];
    for (int i = 0; i < 66; i++)
        fine[i] = 2;
    struct cumux_sm_set ffull = cumux_sm_first(66);
    struct cumux_sm_set h1 = cumux_sm_reserve(ffull, bits(0), cumux_sm_groups_for(66, 2));
    struct cumux_sm_set h2 = cumux_sm_reserve(ffull, h1, cumux_sm_groups_for(66, 2));
    CHECK(cumux_sm_count(h1, fine, 66) == 66 && cumux_sm_count(h2, fine, 66) == 66, "halves: %u, %u",
         cumux_sm_count(h1, fine, 66), cumux_sm_count(h2, fine, 66));
    CHECK(cumux_sm_empty(cumux_sm_minus(ffull, cumux_sm_or(h1, h2))) && cumux_sm_groups(cumux_sm_or(h1, h2)) == 66,
         "the halves cover the device once");
    CHECK(cumux_sm_has(&h2, 65) && !cumux_sm_has(&h2, 32) && cumux_sm_has(&h1, 32), "the halves' groups");
    cumux_sm_format(h2, fine, 66, text, sizeof text);
    CHECK(strcmp(text, "66-131") == 0, "%s", text);
    struct cumux_sm_set win = cumux_sm_window_percent(ffull, fine, 66, 50, 132, 2, 40);
    CHECK(cumux_sm_groups(win) == 33 && cumux_sm_has(&win, 65) && cumux_sm_has(&win, 6) && !cumux_sm_has(&win, 7),
         "a window past 64 bits, wrapping");
    if (failures) {
        printf("FAIL sm_plan: %lu of %lu checks\n", failures, checks);
        return 1;
    }
    printf("PASS sm_plan (%lu checks)\n", checks);
    return 0;
}
