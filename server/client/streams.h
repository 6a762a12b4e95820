/* A client's streams as a whole (stream.c): how many, their priority band, and destroyed ones whose work
 * may still run. */
#ifndef CUMUX_SERVER_CLIENT_STREAMS_H
#define CUMUX_SERVER_CLIENT_STREAMS_H

#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>

/* A destroyed stream: an event recorded on it before it went, so that the client's end waits for its work
 * too before freeing what it uses. */
struct srv_stream_tail {
    CUevent done;
    int gpu;
};

struct srv_client_streams {
    _Atomic uint32_t nstreams;
    _Atomic int priority; /* enum cumux_priority: the band of stream priorities of its new streams */
    struct srv_stream_tail *tails; /* the worker's alone */
    uint32_t ntails, captails;
};

#endif
