/* Host functions (cuLaunchHostFunc, graph host nodes): they run in the client, which the server asks
 * through the channel when the stream gets there. */

#include <stdlib.h>

#include "common/channel.h"
#include "server/handlers.h"

/* Runs on the driver's host-function thread when the stream gets there: hands the function to the client
 * and holds the stream until the client has run it, as CUDA does. A client that goes away releases it. */
void CUDA_CB hostfn_trampoline(void *arg)
{
    struct hostfn_job *j = arg;
    struct srv_client *c = j->c;
    struct cumux_shm *shm = c->shm;
    pthread_mutex_lock(&c->hostfn_lock);
    uint32_t n = atomic_load(&shm->hostfn_posted);
    shm->hostfn_ids[n % CUMUX_HOSTFN_RING] = j->id;
    atomic_store(&shm->hostfn_posted, n + 1);
    pthread_mutex_unlock(&c->hostfn_lock);
    cumux_futex_wake(&shm->hostfn_posted, 1);
    for (;;) {
        uint32_t done = atomic_load(&shm->hostfn_done);
        if ((int32_t)(done - (n + 1)) >= 0 || atomic_load(&c->dead))
            break;
        cumux_futex_wait(&shm->hostfn_done, done, 100000000);
    }
    if (!j->persistent)
        free(j);
}

CUresult op_host_func(struct srv_client *c, const struct cumux_host_func *m, struct srv_stream *stream)
{
    struct hostfn_job *j = malloc(sizeof *j);
    if (!j)
        return CUDA_ERROR_OUT_OF_MEMORY;
    j->c = c;
    j->id = m->id;
    /* Captured into a graph, it runs at every launch of the graph: it lives as long as the client. */
    j->persistent = srv_stream_capturing(c, stream);
    if (j->persistent)
        srv_keep_hostfn_job(c, j);
    CUresult r = before_op(stream);
    if (r == CUDA_SUCCESS)
        r = cuLaunchHostFunc(stream->cu, hostfn_trampoline, j);
    after_op(stream);
    if (r != CUDA_SUCCESS && !j->persistent)
        free(j);
    return r;
}

/* Graph host nodes run at every launch of their graph: their jobs are freed with the client. */
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j)
{
    pthread_mutex_lock(&c->hostfn_lock);
    j->next = c->graph_hostfns;
    c->graph_hostfns = j;
    pthread_mutex_unlock(&c->hostfn_lock);
}
