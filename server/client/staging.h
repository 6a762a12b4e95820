/* A client's staging slots for copies through its channel (copy.c). The worker's alone. */
#ifndef CUMUX_SERVER_CLIENT_STAGING_H
#define CUMUX_SERVER_CLIENT_STAGING_H

#include <cuda.h>
#include <stdbool.h>

#include "common/proto.h"

struct srv_client_staging {
    bool staging_registered;
    CUevent stage_event[CUMUX_STAGING_SLOTS];
    bool stage_pending[CUMUX_STAGING_SLOTS];
};

#endif
