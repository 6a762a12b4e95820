/* A client's launches and GPU time (usage.c, kernel_profile.c); the counters are read by status reports. */
#ifndef CUMUX_SERVER_CLIENT_USAGE_H
#define CUMUX_SERVER_CLIENT_USAGE_H

#include <stdatomic.h>
#include <stdint.h>

struct srv_usage;
struct srv_kprof;

struct srv_client_usage {
    _Atomic uint64_t launches;
    _Atomic uint64_t work_units; /* kernel and graph launches */
    _Atomic uint64_t done_units; /* of those, how many are known to have ended */
    _Atomic uint64_t ended_ns;   /* when some of them were last seen to end (a culprit's seem to while a
                                  * GPU coredump is written: failover.c srv_on_gpu_fault) */
    _Atomic uint64_t gpu_ns;     /* its GPU time so far, estimated from samples */
    struct srv_usage *samples;   /* usage.c's samples: the worker's alone */
    struct srv_kprof *kprof;     /* kernel_profile.c's timings (CUMUX_PROFILE=kernels): the worker's alone */
};

#endif
