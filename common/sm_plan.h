/* Which SMs a client's kernels may use (issue 11): the device's SMs are split once into groups of the
 * driver's granularity (8 on an H200; the last group holds the rest), and every client gets a set of
 * groups, a bit each:
 *  - a reservation (`cumux run --sms N`): the lowest free whole groups covering N SMs, its alone; at least
 *    one group always stays for the clients without one;
 *  - the others share what no reservation holds; a thread percentage (MPS's
 *    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) caps a client to a window of that share of the device's SMs
 *    inside it, placed by client so that capped clients spread over the shared SMs.
 * Pure arithmetic, for server/placement.c, which makes the green contexts. */
#ifndef CUMUX_SM_PLAN_H
#define CUMUX_SM_PLAN_H

#include <stdint.h>

#define CUMUX_SM_MAX_GROUPS 64

/* Whole groups of `per` SMs that hold at least `sms` SMs (0 for 0). */
unsigned cumux_sm_groups_for(unsigned sms, unsigned per);

/* A reservation of `k` groups among `full` (the whole groups) that `reserved` does not hold: the lowest
 * k free ones; 0 if that would leave no whole group free, or k is 0. */
uint64_t cumux_sm_reserve(uint64_t full, uint64_t reserved, unsigned k);

/* `k` groups of `shared` (wrapping), starting at its (start mod popcount)-th group; all of shared when k
 * covers it. */
uint64_t cumux_sm_window(uint64_t shared, unsigned k, unsigned start);

/* The groups of a thread percentage: `percent` of `total_sms`, rounded up to whole groups of `per`, at
 * least one. */
unsigned cumux_sm_groups_for_percent(unsigned percent, unsigned total_sms, unsigned per);

/* The SMs in `mask`, groups of group_sms[i]. */
unsigned cumux_sm_count(uint64_t mask, const unsigned *group_sms, unsigned ngroups);

/* "0-7,16-23" of the SMs of mask, groups in order (group i's SMs follow group i-1's). */
void cumux_sm_format(uint64_t mask, const unsigned *group_sms, unsigned ngroups, char *out, unsigned cap);

#endif
