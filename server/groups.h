/* Client groups (server/groups.c). */
#ifndef CUMUX_SERVER_GROUPS_H
#define CUMUX_SERVER_GROUPS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/proto.h"

struct srv_client;

/* At connection (main thread): its cgroup, its group, the group's priority. At its end: leaves it. */
void srv_group_join(struct srv_client *c);
void srv_group_leave(struct srv_client *c);
/* Its INIT's wishes, where its group says otherwise: *priority (-1: none asked), *percent (0: none). */
void srv_group_wants(struct srv_client *c, int *priority, uint32_t *percent);
/* Device memory through the group (mem_limit.c): a charge past what the group has left on this GPU is
 * CUDA_ERROR_OUT_OF_MEMORY. srv_group_room: what the group leaves the client, counting what it holds
 * (UINT64_MAX: no group limit). */
CUresult srv_group_charge(struct srv_client *c, uint64_t size);
void srv_group_uncharge(struct srv_client *c, uint64_t size);
uint64_t srv_group_room(struct srv_client *c);
/* Its group's name for status and /metrics: the rule's path, or its own cgroup when in none. */
void srv_group_label(struct srv_client *c, char *out, size_t cap);
/* A worker, now and then (its connections' loop): its GPU's SM reservations for groups follow the rules
 * (set by another GPU's worker's request or the settings file; forgotten; a worker it replaces held them). */
void srv_groups_follow(void);
/* The supervisor, once its page is made: the rules set before (the settings file at start) go into it. */
void srv_groups_page_ready(void);
/* The rules, with what their members hold here. */
struct srv_group_stat {
    char path[CUMUX_GROUP_PATH];
    int rule, priority;
    uint32_t percent, members, sms;
    char labels[CUMUX_GROUP_LABELS];
    uint64_t limit, bytes, peak, gpu_ns;
};
size_t srv_groups_snapshot(struct srv_group_stat *out, size_t max);
/* `cumux set --group PATH` (hello SET_GROUP, control.c): the rule's setting `what` (CUMUX_GROUP_*) = value
 * (CUMUX_GROUP_LABELS_SET: none, the rule only made: srv_group_rule_labels);
 * the rule's index, or -1 (text says why), or -2 for CUMUX_GROUP_KILL (the path checked, no rule made). Then each client regrouped: whether it is the rule's (and then
 * given the setting); and the answer's line. */
int srv_group_rule_set(const char *path, uint32_t what, uint64_t value, char *text, size_t cap);
/* Is c's cgroup path, or below it? */
bool srv_group_contains(const char *path, const struct srv_client *c);
/* `cumux set --group PATH --labels K=V,...` (CUMUX_GROUP_LABELS_SET): the rule's labels (checked: up to 4
 * pairs, keys [a-z_][a-z0-9_]*, values of letters, digits and ._-:/), made with the rule if need be. 0, or
 * -1 (text says why). */
int srv_group_rule_labels(const char *path, const char *labels, char *text, size_t cap);
bool srv_group_regroup(struct srv_client *c, int rule, uint32_t what);
void srv_group_describe(const char *path, uint32_t what, uint64_t value, unsigned members, char *text, size_t cap);

#endif
