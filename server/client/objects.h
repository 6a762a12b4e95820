/* A client's handle table and what every handler consults beside it (objects.c): its current GPU, the
 * pending error of its one-way commands and its work generation. The worker thread's alone. */
#ifndef CUMUX_SERVER_CLIENT_OBJECTS_H
#define CUMUX_SERVER_CLIENT_OBJECTS_H

#include <cuda.h>
#include <stdint.h>

struct srv_handle;

struct srv_client_objects {
    struct srv_handle *handles;
    uint32_t nhandles, caphandles;
    uint32_t free_hint;
    CUresult pending_error; /* first error of a one-way command, reported at the next sync */
    uint64_t work_gen;      /* bumped by every command that may queue work (dispatch.c) */
    int current_gpu;
};

#endif
