/* Host functions (cuLaunchHostFunc, graph host nodes): they run in the client, which the server asks
 * through the channel when the stream gets there.
 *
 * A stream's own host function is posted by the driver's host-function thread, which returns at once;
 * the stream then waits on the GPU (a stream memory wait) for the word the client writes once it has run
 * the function. The driver's thread, which every client's host functions share, is never held by one
 * client's slow function. A graph's host node cannot carry a number of its own (the graph runs again), so
 * for those the driver's thread waits for the client as CUDA's own does. */

#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "server/handlers.h"

/* Posts the job's function to the client (room in the ring: waits only when 256 are outstanding). */
static uint32_t post(struct hostfn_job *j)
{
    struct srv_client *c = j->c;
    struct cumux_shm *shm = c->shm;
    pthread_mutex_lock(&c->hostfn.hostfn_lock);
    uint32_t n = atomic_load(&shm->hostfn_posted);
    for (;;) {
        uint32_t done = atomic_load(&shm->hostfn_done);
        if ((uint32_t)(n - done) < CUMUX_HOSTFN_RING || atomic_load(&c->dead))
            break;
        cumux_futex_wait(&shm->hostfn_done, done, 100000000);
    }
    shm->hostfn_ids[n % CUMUX_HOSTFN_RING] = j->id;
    shm->hostfn_slot[n % CUMUX_HOSTFN_RING] = j->slot;
    shm->hostfn_seq[n % CUMUX_HOSTFN_RING] = j->seq;
    atomic_store(&shm->hostfn_posted, n + 1);
    pthread_mutex_unlock(&c->hostfn.hostfn_lock);
    cumux_futex_wake(&shm->hostfn_posted, 1);
    return n;
}

/* Runs on the driver's host-function thread when the stream gets there. A graph's function: the thread
 * holds the stream until the client has run it (or is gone). A stream's own: the GPU holds the stream. */
void CUDA_CB hostfn_trampoline(void *arg)
{
    struct hostfn_job *j = arg;
    struct srv_client *c = j->c;
    uint32_t n = post(j);
    if (j->slot == CUMUX_HOSTFN_NO_SLOT) {
        for (;;) {
            uint32_t done = atomic_load(&c->shm->hostfn_done);
            if ((int32_t)(done - (n + 1)) >= 0 || atomic_load(&c->dead))
                break;
            cumux_futex_wait(&c->shm->hostfn_done, done, 100000000);
        }
    }
    if (!j->persistent)
        free(j);
}

/* The stream's word, given on its first host function; none when the client's words are not registered
 * with the GPU or all are taken (then the driver's thread waits, as for graphs). */
static uint32_t stream_slot(struct srv_client *c, struct srv_stream *stream)
{
    if (!c->hostfn.hostfn_last && c->hostfn.hostfn_words)
        c->hostfn.hostfn_last = calloc(CUMUX_HOSTFN_STREAMS, sizeof *c->hostfn.hostfn_last);
    if (!stream->hostfn_slot1 && c->hostfn.hostfn_last && c->hostfn.hostfn_slots_used < CUMUX_HOSTFN_STREAMS)
        stream->hostfn_slot1 = ++c->hostfn.hostfn_slots_used;
    return stream->hostfn_slot1 ? stream->hostfn_slot1 - 1 : CUMUX_HOSTFN_NO_SLOT;
}

CUresult op_host_func(struct srv_client *c, const struct cumux_host_func *m, struct srv_stream *stream)
{
    struct hostfn_job *j = malloc(sizeof *j);
    if (!j)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *j = (struct hostfn_job){.c = c, .id = m->id, .slot = CUMUX_HOSTFN_NO_SLOT};
    /* Captured into a graph, it runs at every launch of the graph: it lives as long as the client. */
    j->persistent = srv_stream_capturing(c, stream);
    if (j->persistent)
        srv_keep_hostfn_job(c, j);
    else if ((j->slot = stream_slot(c, stream)) != CUMUX_HOSTFN_NO_SLOT)
        j->seq = c->hostfn.hostfn_last[j->slot] = ++stream->hostfn_seq;
    /* The job is the driver thread's once launched (it may run and free it at once): what the wait below
     * needs is copied first. */
    uint32_t slot = j->slot, seq = j->seq;
    CUresult r = before_op(stream);
    if (r == CUDA_SUCCESS)
        r = cuLaunchHostFunc(stream->cu, hostfn_trampoline, j);
    if (r != CUDA_SUCCESS) {
        after_op(stream);
        if (!j->persistent)
            free(j);
        return r;
    }
    if (slot != CUMUX_HOSTFN_NO_SLOT) {
        CUstreamBatchMemOpParams w;
        memset(&w, 0, sizeof w);
        w.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
        w.waitValue.address = c->hostfn.hostfn_words + 4ull * slot;
        w.waitValue.value = seq;
        w.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
        r = cuStreamBatchMemOp(stream->cu, 1, &w, 0);
    }
    after_op(stream);
    return r;
}

/* Graph host nodes run at every launch of their graph: their jobs are freed with the client. */
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j)
{
    pthread_mutex_lock(&c->hostfn.hostfn_lock);
    j->next = c->hostfn.graph_hostfns;
    c->hostfn.graph_hostfns = j;
    pthread_mutex_unlock(&c->hostfn.hostfn_lock);
}

void srv_hostfn_release(struct srv_client *c)
{
    for (uint32_t i = 0; c->hostfn.hostfn_last && i < c->hostfn.hostfn_slots_used; i++)
        atomic_store(&c->shm->hostfn_stream_done[i], c->hostfn.hostfn_last[i]);
}
