/* A client's pacing (pacing.c). */
#ifndef CUMUX_SERVER_CLIENT_PACING_H
#define CUMUX_SERVER_CLIENT_PACING_H

#include <stdatomic.h>
#include <stdint.h>

struct srv_client_pacing {
    _Atomic uint64_t kernel_ns_recent; /* its sampled launches' recent mean time (usage.c) */
    _Atomic uint64_t paced;            /* launches that waited for their stream */
    uint64_t pace_epoch;               /* the last epoch pacing.c counted it in: the worker's alone */
};

#endif
