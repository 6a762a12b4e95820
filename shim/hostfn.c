/* Host functions and stream callbacks (cuLaunchHostFunc, cuStreamAddCallback). They must run in this
 * process, with this process's memory: the server holds the stream at that point and posts the
 * function's id into the channel; a thread of the shim runs it and says so: in the stream's word, which
 * the GPU waits on, and in the count of functions run. */
#include <stdlib.h>

#include "common/channel.h"
#include "common/log.h"
#include "shim/client.h"

struct pending_fn {
    uint64_t id; /* 0: free */
    bool persistent; /* a graph's host node: runs at every launch, stays */
    CUhostFn fn;
    CUstreamCallback cb;
    CUstream stream;
    void *data;
};

#define PENDING_MAX 4096
static struct pending_fn pending[PENDING_MAX];
static uint64_t next_id = 1;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static bool thread_running;

/* arg: the channel of a further GPU (shim_hostfn_watch), or NULL: the main one, whichever it is now. */
static void *callback_thread(void *arg)
{
    struct shim_chan *extra = arg;
    struct cumux_shm *shm = NULL;
    uint32_t consumed = 0;
    for (;;) {
        /* After another program's fault the program comes back on a new channel (connection.c): its host
         * functions are posted there from then on. */
        struct cumux_shm *now = extra ? extra->shm : __atomic_load_n(&shim.main.shm, __ATOMIC_ACQUIRE);
        if (!now)
            return NULL;
        if (now != shm) {
            shm = now;
            consumed = atomic_load(&shm->hostfn_done);
        }
        uint32_t posted = atomic_load(&shm->hostfn_posted);
        if (posted == consumed) {
            /* A failed worker may be followed by one taking over: only without a way back does it end. */
            if (cumux_futex_wait(&shm->hostfn_posted, posted, 200000000) < 0 &&
                (extra ? !shim_chan_alive(extra) : !shim_server_alive() && !shim.resume_token))
                return NULL;
            continue;
        }
        uint64_t id = shm->hostfn_ids[consumed % CUMUX_HOSTFN_RING];
        uint32_t slot = shm->hostfn_slot[consumed % CUMUX_HOSTFN_RING];
        uint32_t seq = shm->hostfn_seq[consumed % CUMUX_HOSTFN_RING];
        struct pending_fn f = {0};
        pthread_mutex_lock(&pending_lock);
        for (int k = 0; k < PENDING_MAX; k++) {
            struct pending_fn *p = &pending[(id + (uint64_t)k) % PENDING_MAX];
            if (p->id == id) {
                f = *p;
                if (!p->persistent)
                    p->id = 0;
                break;
            }
        }
        pthread_mutex_unlock(&pending_lock);
        if (f.fn)
            f.fn(f.data);
        else if (f.cb)
            f.cb(f.stream, CUDA_SUCCESS, f.data);
        else
            cumux_logf("host function %llu posted by the server is unknown", (unsigned long long)id);
        /* The stream waits, on the GPU, for its word to reach the function's number. */
        if (slot < CUMUX_HOSTFN_STREAMS)
            atomic_store_explicit(&shm->hostfn_stream_done[slot], seq, memory_order_release);
        consumed++;
        atomic_store(&shm->hostfn_done, consumed);
        cumux_futex_wake(&shm->hostfn_done, 1);
    }
}

static void after_fork_child(void)
{
    /* The callback thread does not exist in a child; its channel is a new one. */
    thread_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    thread_running = false;
    pthread_mutex_init(&pending_lock, NULL);
    for (int k = 0; k < PENDING_MAX; k++)
        pending[k].id = 0;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

static void start_thread(void)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT; /* not reset in a child: one handler for good */
    pthread_once(&atfork_once, register_atfork);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    thread_running = pthread_create(&t, &a, callback_thread, NULL) == 0;
    pthread_attr_destroy(&a);
}

void shim_hostfn_watch(struct shim_chan *ch)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, callback_thread, ch) != 0)
        cumux_logf("no thread for host functions on GPU %d's stream: they will not run", ch->gpu);
    pthread_attr_destroy(&a);
}

/* The function and argument a persistent number (a graph's host node) stands for; false if none. */
bool shim_hostfn_lookup(uint64_t id, CUhostFn *fn, void **data)
{
    bool found = false;
    pthread_mutex_lock(&pending_lock);
    for (int k = 0; k < PENDING_MAX && !found; k++) {
        if (pending[k].id == id && id && pending[k].fn) {
            *fn = pending[k].fn;
            *data = pending[k].data;
            found = true;
        }
    }
    pthread_mutex_unlock(&pending_lock);
    return found;
}

/* A number for the function, kept until it runs (or for good: a graph's host node). 0 when full. */
uint64_t shim_hostfn_register(CUhostFn fn, void *data, bool persistent)
{
    pthread_once(&thread_once, start_thread);
    if (!thread_running)
        return 0;
    pthread_mutex_lock(&pending_lock);
    uint64_t id = next_id++;
    struct pending_fn *slot = NULL;
    for (int k = 0; k < PENDING_MAX && !slot; k++) {
        struct pending_fn *p = &pending[(id + (uint64_t)k) % PENDING_MAX];
        if (!p->id)
            slot = p;
    }
    if (slot)
        *slot = (struct pending_fn){.id = id, .persistent = persistent, .fn = fn, .data = data};
    pthread_mutex_unlock(&pending_lock);
    return slot ? id : 0;
}

static CUresult post(CUstream h, CUhostFn fn, CUstreamCallback cb, void *data)
{
    uint32_t stream;
    CUresult r = shim_resolve_stream(h, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    /* Captured into a graph, it runs at every launch of the graph: it keeps its number. */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if ((r = shim_capture_status(stream, &st, NULL)) != CUDA_SUCCESS)
        return r;
    uint64_t id = shim_hostfn_register(fn, data, st != CU_STREAM_CAPTURE_STATUS_NONE);
    if (!id)
        return CUDA_ERROR_OUT_OF_MEMORY; /* no thread, or too many host functions not yet reached */
    if (cb) {
        pthread_mutex_lock(&pending_lock);
        for (int k = 0; k < PENDING_MAX; k++) {
            struct pending_fn *p = &pending[(id + (uint64_t)k) % PENDING_MAX];
            if (p->id == id) {
                p->cb = cb;
                p->stream = h;
                break;
            }
        }
        pthread_mutex_unlock(&pending_lock);
    }
    r = shim_op_host_func(stream, id);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&pending_lock);
        for (int k = 0; k < PENDING_MAX; k++)
            if (pending[(id + (uint64_t)k) % PENDING_MAX].id == id)
                pending[(id + (uint64_t)k) % PENDING_MAX].id = 0;
        pthread_mutex_unlock(&pending_lock);
    }
    return r;
}

CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return post(h, fn, NULL, data);
}

CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
    if (!cb || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return post(h, NULL, cb, data);
}

