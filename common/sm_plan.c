/* Reservations and caps of SMs as sets of SM groups (common/sm_plan.h). */
#include "common/sm_plan.h"

#include <stdio.h>

#define WORDS (CUMUX_SM_MAX_GROUPS / 64)

struct cumux_sm_set cumux_sm_first(unsigned n)
{
    struct cumux_sm_set s = {{0}};
    for (unsigned i = 0; i < n && i < CUMUX_SM_MAX_GROUPS; i++)
        s.w[i / 64] |= 1ull << (i % 64);
    return s;
}

struct cumux_sm_set cumux_sm_or(struct cumux_sm_set a, struct cumux_sm_set b)
{
    for (int i = 0; i < WORDS; i++)
        a.w[i] |= b.w[i];
    return a;
}

struct cumux_sm_set cumux_sm_minus(struct cumux_sm_set a, struct cumux_sm_set b)
{
    for (int i = 0; i < WORDS; i++)
        a.w[i] &= ~b.w[i];
    return a;
}

bool cumux_sm_equal(struct cumux_sm_set a, struct cumux_sm_set b)
{
    for (int i = 0; i < WORDS; i++)
        if (a.w[i] != b.w[i])
            return false;
    return true;
}

bool cumux_sm_empty(struct cumux_sm_set a)
{
    return cumux_sm_groups(a) == 0;
}

unsigned cumux_sm_groups(struct cumux_sm_set a)
{
    unsigned n = 0;
    for (int i = 0; i < WORDS; i++)
        n += (unsigned)__builtin_popcountll(a.w[i]);
    return n;
}

unsigned cumux_sm_groups_for(unsigned sms, unsigned per)
{
    return per ? sms / per + (sms % per != 0) : 0;
}

struct cumux_sm_set cumux_sm_reserve(struct cumux_sm_set full, struct cumux_sm_set reserved, unsigned k)
{
    struct cumux_sm_set free_groups = cumux_sm_minus(full, reserved), pick = {{0}};
    if (k == 0 || cumux_sm_groups(free_groups) < k)
        return pick;
    for (unsigned i = 0; i < CUMUX_SM_MAX_GROUPS && k; i++) {
        if (cumux_sm_has(&free_groups, i)) {
            pick.w[i / 64] |= 1ull << (i % 64);
            k--;
        }
    }
    return pick;
}

unsigned cumux_sm_groups_for_percent(unsigned percent, unsigned total_sms, unsigned per)
{
    if (percent > 100)
        percent = 100;
    unsigned long long sms = ((unsigned long long)percent * total_sms + 99) / 100;
    unsigned g = cumux_sm_groups_for((unsigned)sms, per);
    return g ? g : 1;
}

struct cumux_sm_set cumux_sm_window_percent(struct cumux_sm_set shared, const unsigned *group_sms, unsigned ngroups,
                                            unsigned percent, unsigned total_sms, unsigned per, unsigned start)
{
    if (ngroups > CUMUX_SM_MAX_GROUPS)
        ngroups = CUMUX_SM_MAX_GROUPS;
    if (per == 0)
        per = 1;
    if (percent > 100)
        percent = 100;
    unsigned long long want = ((unsigned long long)percent * total_sms + 99) / 100;
    unsigned long long cap = (want + per - 1) / per * per;
    if (want == 0)
        want = 1;
    unsigned idx[CUMUX_SM_MAX_GROUPS], m = 0;
    unsigned long long in_shared = 0;
    for (unsigned i = 0; i < ngroups; i++)
        if (cumux_sm_has(&shared, i)) {
            idx[m++] = i;
            in_shared += group_sms[i];
        }
    if (m == 0 || in_shared <= want)
        return shared;
    struct cumux_sm_set w = {{0}};
    unsigned long long got = 0;
    for (unsigned j = 0; j < m && got < want; j++) {
        unsigned g = idx[(start + j) % m];
        if (got + group_sms[g] > cap)
            continue;
        w.w[g / 64] |= 1ull << (g % 64);
        got += group_sms[g];
    }
    if (got == 0) { /* every group is larger than the cap: the smallest one */
        unsigned best = idx[0];
        for (unsigned j = 1; j < m; j++)
            if (group_sms[idx[j]] < group_sms[best])
                best = idx[j];
        w.w[best / 64] |= 1ull << (best % 64);
    }
    return w;
}

unsigned cumux_sm_count(struct cumux_sm_set set, const unsigned *group_sms, unsigned ngroups)
{
    unsigned n = 0;
    for (unsigned i = 0; i < ngroups && i < CUMUX_SM_MAX_GROUPS; i++)
        if (cumux_sm_has(&set, i))
            n += group_sms[i];
    return n;
}

void cumux_sm_format(struct cumux_sm_set set, const unsigned *group_sms, unsigned ngroups, char *out, unsigned cap)
{
    unsigned first = 0, len = 0;
    int run_start = -1;
    if (cap)
        out[0] = 0;
    if (ngroups > CUMUX_SM_MAX_GROUPS)
        ngroups = CUMUX_SM_MAX_GROUPS;
    for (unsigned i = 0; i <= ngroups; i++) {
        bool in = i < ngroups && cumux_sm_has(&set, i);
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
