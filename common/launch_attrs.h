/* Launch attributes cumux forwards: only those made of plain values. Attributes that name an event
 * or a host-side window would hand the server a handle or pointer of the client's; they are refused. */
#ifndef CUMUX_LAUNCH_ATTRS_H
#define CUMUX_LAUNCH_ATTRS_H

#include <cuda.h>
#include <stdbool.h>

static inline bool cumux_launch_attr_plain(unsigned id)
{
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        return true;
    default:
        return false;
    }
}

#endif
