/* A client's device and pinned host memory (memory.c, pool.c, mem_limit.c). */
#ifndef CUMUX_SERVER_CLIENT_MEMORY_H
#define CUMUX_SERVER_CLIENT_MEMORY_H

#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/proto.h"
#include "common/ranges.h"

struct srv_pool;

struct srv_client_memory {
    /* The worker's alone. */
    struct cumux_ranges dev_ranges;  /* device memory the client may name: its allocations and globals */
    struct cumux_ranges host_ranges; /* its pinned host memory, by server address; extra = mapping size */
    CUstream mem_stream[CUMUX_MAX_DEVICES]; /* frees, ordered after the client's own work */
    /* cuMemAlloc's: a stream with nothing queued before, so an allocation never waits for the client's
     * kernels (the frees on mem_stream do) */
    CUstream alloc_stream[CUMUX_MAX_DEVICES];
    struct srv_pool *default_pool[CUMUX_MAX_DEVICES];
    struct srv_pool *chunked_pools; /* pools that allocated in chunks (pool.c) */
    CUevent mem_event;
    /* Read by status reports. */
    _Atomic uint64_t mem_bytes;
    _Atomic uint64_t mem_limit; /* device memory it may hold (bytes, 0: no limit): srv_mem_charge */
    _Atomic uint64_t host_bytes;
};

#endif
