/* SM reservations and caps as sets of SM groups (common/sm_plan.c), on an H200's layout: 132 SMs in 16
 * groups of 8 and a last group of the 4 left. */
#include <stdio.h>
#include <string.h>

#include "common/sm_plan.h"

static int failures;
#define WANT(cond, ...)                                                                                \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            printf("FAIL line %d: ", __LINE__);                                                        \
            printf(__VA_ARGS__);                                                                       \
            printf("\n");                                                                              \
            failures++;                                                                                \
        }                                                                                              \
    } while (0)

int main(void)
{
    unsigned sms[17];
    for (int i = 0; i < 16; i++)
        sms[i] = 8;
    sms[16] = 4;
    const uint64_t full = 0xffffull, all = 0x1ffffull;
    WANT(cumux_sm_count(all, sms, 17) == 132, "all %u", cumux_sm_count(all, sms, 17));
    WANT(cumux_sm_groups_for(66, 8) == 9 && cumux_sm_groups_for(64, 8) == 8 && cumux_sm_groups_for(0, 8) == 0 &&
             cumux_sm_groups_for(1, 8) == 1,
         "groups_for");
    /* Reservations: the lowest free whole groups, disjoint, never the last whole group. */
    uint64_t a = cumux_sm_reserve(full, 0, cumux_sm_groups_for(66, 8));
    WANT(a == 0x1ff, "66 SMs: %#llx", (unsigned long long)a);
    WANT(cumux_sm_count(a, sms, 17) == 72, "66 SMs reserved as %u", cumux_sm_count(a, sms, 17));
    uint64_t b = cumux_sm_reserve(full, a, 2);
    WANT(b == 0x600 && !(a & b), "second reservation %#llx overlaps or misplaced", (unsigned long long)b);
    WANT(cumux_sm_reserve(full, a | b, 5) == 0, "the last 5 whole groups reserved: %#llx",
         (unsigned long long)cumux_sm_reserve(full, a | b, 5));
    WANT(cumux_sm_reserve(full, a | b, 4) == 0x7800, "4 of 5 free: %#llx",
         (unsigned long long)cumux_sm_reserve(full, a | b, 4));
    WANT(cumux_sm_reserve(full, 0, 16) == 0, "the whole device reserved");
    WANT(cumux_sm_reserve(full, 0, 0) == 0, "nothing reserved as something");
    /* Every reservation sequence leaves a shared whole group, and never hands out a group twice. */
    uint64_t held = 0;
    for (unsigned k = 1; k < 8; k++) {
        uint64_t r = cumux_sm_reserve(full, held, k);
        if (!r)
            continue;
        WANT(!(r & held) && (unsigned)__builtin_popcountll(r) == k, "k=%u: %#llx over %#llx", k,
             (unsigned long long)r, (unsigned long long)held);
        held |= r;
        WANT((full & ~held) != 0, "k=%u left no whole group", k);
    }
    /* Caps: a window of the shared groups, wrapping, spread by start. */
    uint64_t shared = all & ~a;
    WANT(cumux_sm_window(shared, 2, 0) == 0x600, "window 0: %#llx", (unsigned long long)cumux_sm_window(shared, 2, 0));
    WANT(cumux_sm_window(shared, 2, 7) == 0x10200, "window wrapping: %#llx",
         (unsigned long long)cumux_sm_window(shared, 2, 7));
    WANT(cumux_sm_window(shared, 8, 3) == shared, "a window as large as the share");
    WANT(cumux_sm_window(0, 2, 3) == 0, "no share");
    WANT(cumux_sm_groups_for_percent(50, 132, 8) == 9, "50%%: %u", cumux_sm_groups_for_percent(50, 132, 8));
    WANT(cumux_sm_groups_for_percent(1, 132, 8) == 1, "1%%");
    WANT(cumux_sm_groups_for_percent(0, 132, 8) == 1, "0%%: at least one group");
    WANT(cumux_sm_groups_for_percent(100, 132, 8) == 17, "100%%: %u", cumux_sm_groups_for_percent(100, 132, 8));
    WANT(cumux_sm_groups_for_percent(250, 132, 8) == 17, "over 100%%");
    /* Formatting. */
    char text[64];
    cumux_sm_format(a, sms, 17, text, sizeof text);
    WANT(strcmp(text, "0-71") == 0, "%s", text);
    cumux_sm_format(0x10201, sms, 17, text, sizeof text);
    WANT(strcmp(text, "0-7,72-79,128-131") == 0, "%s", text);
    cumux_sm_format(0x10201, sms, 17, text, 6);
    WANT(strlen(text) < 6, "cut: %s", text);
    if (failures)
        return 1;
    printf("PASS sm_plan\n");
    return 0;
}
