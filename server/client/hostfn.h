/* A client's host functions (hostfn.c): the words of its channel that streams wait on and the jobs that
 * graphs hold. */
#ifndef CUMUX_SERVER_CLIENT_HOSTFN_H
#define CUMUX_SERVER_CLIENT_HOSTFN_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

struct hostfn_job;

struct srv_client_hostfn {
    CUdeviceptr words_pinned;   /* the device's address of shm->hostfn_stream_done once pinned (client.c) */
    CUdeviceptr hostfn_words;   /* the same once streams can wait on it (0: not usable) */
    uint32_t hostfn_slots_used; /* words given to streams (never taken back) */
    uint32_t *hostfn_last;      /* per word, the number of its stream's last host function (released at
                                 * the end even for streams destroyed since) */
    pthread_mutex_t hostfn_lock; /* host functions may be posted from several driver threads */
    struct hostfn_job *graph_hostfns; /* host functions that graphs hold */
};

#endif
