/* What a fault needs to know of a client (failover.c, fault.c, chunks.c): what it lost and
 * whether and how it may come back. */
#ifndef CUMUX_SERVER_CLIENT_FAULT_H
#define CUMUX_SERVER_CLIENT_FAULT_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/proto.h"

/* A client's streams with work that no synchronize or query has seen end: at a fault, the work it lost
 * (failover.c srv_worker_fails tells which streams). Changed by its worker, read by the fault's thread. */
struct srv_unconfirmed {
    _Atomic int64_t count;
    _Atomic int64_t beyond; /* of them, those with a handle past the bits */
    _Atomic uint64_t bits[CUMUX_LOST_STREAM_WORDS]; /* bit h%64 of word h/64: stream handle h */
};

struct srv_client_fault {
    uint64_t resume_token; /* its secret for a RESUME hello after a worker change (0: none) */
    uint64_t resume_claim; /* a RESUME hello's token: whose memory it may take back (0: none) */
    struct srv_unconfirmed unconfirmed; /* streams with work not seen to end (objects.c before_op): a client
                                         * with none lost nothing at a fault, one with some lost theirs */
    _Atomic uint64_t ring_done; /* ring bytes whose messages the worker has handled to the end (client.c):
                                 * at a fault, all its messages were seen when this equals the ring's head */
    _Atomic int resumable;      /* at a fault: it may come back (what the server wrote in its channel) */
};

#endif
