/* A client's SMs (placement.c): what it asked for, and the SMs its kernels may use now. */
#ifndef CUMUX_SERVER_CLIENT_PLACEMENT_H
#define CUMUX_SERVER_CLIENT_PLACEMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/proto.h"
#include "common/sm_plan.h"

struct srv_placed;

struct srv_client_placement {
    _Atomic uint32_t want_sms;     /* reserved for it alone (cumux run --sms, cumux set --sms); 0 none */
    _Atomic uint32_t want_percent; /* its active thread percentage; 0 the server's default */
    _Atomic uint32_t sms_now;      /* SMs its kernels may use (status); 0 before it has a stream */
    _Atomic bool sms_reserved;     /* they are its alone */
    struct cumux_sm_set sm_reserved[CUMUX_MAX_DEVICES]; /* its reserved SM groups, under placement.c's lock */
    int group_slot;      /* under that lock: its group's reservation (srv_placement_group): rule + 1, 0 none */
    uint32_t group_gen;  /* of that rule */
    bool placement_closed; /* under that lock: released at its end, nothing may be reserved for it again */
    struct srv_placed *placed[CUMUX_MAX_DEVICES]; /* worker: where its streams go now (NULL: the primary
                                                   * context, every SM) */
    struct srv_placed *retired;             /* worker: places some of its streams may still be in */
    uint64_t placed_gen[CUMUX_MAX_DEVICES]; /* worker: the placement generation placed[] follows */
};

#endif
