/* Reservations and caps of SMs as sets of SM groups (common/sm_plan.h). */
#include "common/sm_plan.h"

#include <stdbool.h>
#include <stdio.h>

unsigned cumux_sm_groups_for(unsigned sms, unsigned per)
{
    return per ? sms / per + (sms % per != 0) : 0;
}

uint64_t cumux_sm_reserve(uint64_t full, uint64_t reserved, unsigned k)
{
    uint64_t free_groups = full & ~reserved, pick = 0;
    if (k == 0 || (unsigned)__builtin_popcountll(free_groups) <= k)
        return 0; /* one whole group stays for everyone else */
    for (unsigned i = 0; i < CUMUX_SM_MAX_GROUPS && k; i++) {
        if (free_groups >> i & 1) {
            pick |= 1ull << i;
            k--;
        }
    }
    return pick;
}

uint64_t cumux_sm_window(uint64_t shared, unsigned k, unsigned start)
{
    unsigned n = (unsigned)__builtin_popcountll(shared);
    if (n == 0 || k >= n)
        return shared;
    unsigned idx[CUMUX_SM_MAX_GROUPS], m = 0;
    for (unsigned i = 0; i < CUMUX_SM_MAX_GROUPS; i++)
        if (shared >> i & 1)
            idx[m++] = i;
    uint64_t w = 0;
    for (unsigned j = 0; j < k; j++)
        w |= 1ull << idx[(start + j) % n];
    return w;
}

unsigned cumux_sm_groups_for_percent(unsigned percent, unsigned total_sms, unsigned per)
{
    if (percent > 100)
        percent = 100;
    unsigned long long sms = ((unsigned long long)percent * total_sms + 99) / 100;
    unsigned g = cumux_sm_groups_for((unsigned)sms, per);
    return g ? g : 1;
}

unsigned cumux_sm_count(uint64_t mask, const unsigned *group_sms, unsigned ngroups)
{
    unsigned n = 0;
    for (unsigned i = 0; i < ngroups && i < CUMUX_SM_MAX_GROUPS; i++)
        if (mask >> i & 1)
            n += group_sms[i];
    return n;
}

void cumux_sm_format(uint64_t mask, const unsigned *group_sms, unsigned ngroups, char *out, unsigned cap)
{
    unsigned first = 0, len = 0;
    int run_start = -1;
    if (cap)
        out[0] = 0;
    for (unsigned i = 0; i <= ngroups && i < CUMUX_SM_MAX_GROUPS + 1; i++) {
        bool in = i < ngroups && i < CUMUX_SM_MAX_GROUPS && (mask >> i & 1);
        if (in && run_start < 0)
            run_start = (int)first;
        if (!in && run_start >= 0) {
            int w = snprintf(out + len, len < cap ? cap - len : 0, "%s%d-%u", len ? "," : "", run_start, first - 1);
            if (w > 0)
                len += (unsigned)w;
            run_start = -1;
        }
        if (i < ngroups)
            first += group_sms[i];
    }
}
