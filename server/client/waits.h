/* A client's stream memory waits (waits.c). The worker's alone. */
#ifndef CUMUX_SERVER_CLIENT_WAITS_H
#define CUMUX_SERVER_CLIENT_WAITS_H

#include <stdint.h>

struct srv_wait;

struct srv_client_waits {
    struct srv_wait *list; /* the waits sent, by address, released at the end */
    uint32_t cap, n;
};

#endif
