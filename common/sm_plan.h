/* Which SMs a client's kernels may use (issue 11): the device's SMs are split once into groups of the
 * driver's granularity (8 on an H200, or finer where coscheduling is not asked for; the last group holds
 * what is left), and every client gets a set of groups:
 *  - a reservation (`cumux run --sms N`): the lowest free whole groups covering N SMs, its alone;
 *  - the others share what no reservation holds; a thread percentage (MPS's
 *    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) caps a client to a window of that share of the device's SMs
 *    inside it, placed by client so that capped clients spread over the shared SMs.
 * Pure arithmetic, for server/placement.c, which makes the green contexts. */
#ifndef CUMUX_SM_PLAN_H
#define CUMUX_SM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#define CUMUX_SM_MAX_GROUPS 256

/* A set of SM groups: group i is bit i. */
struct cumux_sm_set {
    uint64_t w[CUMUX_SM_MAX_GROUPS / 64];
};

static inline bool cumux_sm_has(const struct cumux_sm_set *s, unsigned i)
{
    return i < CUMUX_SM_MAX_GROUPS && (s->w[i / 64] >> (i % 64) & 1);
}
/* Groups 0 .. n-1. */
struct cumux_sm_set cumux_sm_first(unsigned n);
struct cumux_sm_set cumux_sm_or(struct cumux_sm_set a, struct cumux_sm_set b);
struct cumux_sm_set cumux_sm_minus(struct cumux_sm_set a, struct cumux_sm_set b); /* a without b */
bool cumux_sm_equal(struct cumux_sm_set a, struct cumux_sm_set b);
bool cumux_sm_empty(struct cumux_sm_set a);
unsigned cumux_sm_groups(struct cumux_sm_set a); /* how many groups */

/* Whole groups of `per` SMs that hold at least `sms` SMs (0 for 0). */
unsigned cumux_sm_groups_for(unsigned sms, unsigned per);

/* A reservation of `k` groups among `full` (the whole groups) that `reserved` does not hold: the lowest
 * k free ones; empty when fewer are free, or k is 0. */
struct cumux_sm_set cumux_sm_reserve(struct cumux_sm_set full, struct cumux_sm_set reserved, unsigned k);

/* The groups of a thread percentage: `percent` of `total_sms`, rounded up to whole groups of `per`, at
 * least one. */
unsigned cumux_sm_groups_for_percent(unsigned percent, unsigned total_sms, unsigned per);

/* A thread percentage's SMs among `shared` (groups of group_sms[i], ngroups of them): groups taken in
 * order from its (start mod its size)-th, wrapping, until they hold `percent` of `total_sms`, never more
 * than that rounded up to whole groups of `per` (a group larger than `per`, the driver's remainder, is
 * passed over where it would overshoot; fewer where only such groups are left). All of shared when it holds no more; at least one group. */
struct cumux_sm_set cumux_sm_window_percent(struct cumux_sm_set shared, const unsigned *group_sms, unsigned ngroups,
                                            unsigned percent, unsigned total_sms, unsigned per, unsigned start);

/* The SMs in `set`, groups of group_sms[i] (ngroups of them). */
unsigned cumux_sm_count(struct cumux_sm_set set, const unsigned *group_sms, unsigned ngroups);

/* "0-7,16-23" of the SMs of set, groups in order (group i's SMs follow group i-1's). */
void cumux_sm_format(struct cumux_sm_set set, const unsigned *group_sms, unsigned ngroups, char *out, unsigned cap);

#endif
