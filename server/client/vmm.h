/* A client's virtual memory management (vmm.c). The worker's alone. */
#ifndef CUMUX_SERVER_CLIENT_VMM_H
#define CUMUX_SERVER_CLIENT_VMM_H

#include "common/ranges.h"

struct srv_client_vmm {
    /* Its reservations (extra: the GPU) and the mappings in them (tag: accessible or not, extra: the
     * allocation's handle). */
    struct cumux_ranges vmm_reserved, vmm_mapped;
};

#endif
