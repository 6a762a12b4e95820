/* A client's connection as the main thread's serve loop sees it (conn.c). */
#ifndef CUMUX_SERVER_CLIENT_CONN_H
#define CUMUX_SERVER_CLIENT_CONN_H

#include <stdbool.h>
#include <stdint.h>

struct srv_client_conn {
    int sock;
    bool hup_seen;
    uint32_t clients_told; /* the count last written into its channel's server_clients (serve loop) */
};

#endif
