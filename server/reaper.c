/* The reaper: driver calls that wait until every kernel in the shared context has finished
 * (cuMemHostUnregister, cuModuleUnload, cuLibraryUnload; measured by tools/probe_blocking.c) run here,
 * on a thread of their own, so that the client that asked for them, and its worker, are not held up
 * by other clients' kernels. */
#include <stdlib.h>
#include <sys/mman.h>

#include "common/log.h"
#include "server/server.h"

struct reap_job {
    enum reap_kind kind;
    int gpu;
    void *ptr;
    size_t len;
    void *handle;
    struct reap_job *next;
};

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reap_cond = PTHREAD_COND_INITIALIZER;
static struct reap_job *reap_head, **reap_tail = &reap_head;
static bool reap_stopping, reap_started;
static uint64_t reap_queued, reap_done; /* for srv_reaper_drain */
static pthread_cond_t reap_idle = PTHREAD_COND_INITIALIZER;
static pthread_t reap_thread;

static void run_job(struct reap_job *j)
{
    if (j->gpu >= 0 && j->gpu < srv_gpu_count)
        cuCtxSetCurrent(srv_gpus[j->gpu].ctx);
    switch (j->kind) {
    case REAP_HOST_MEMORY:
        /* Unregistered first: the GPU must be done with the pages before they go. */
        cuMemHostUnregister(j->ptr);
        munmap(j->ptr, j->len);
        break;
    case REAP_HOST_UNREGISTER: /* pages that a later REAP_UNMAP of a larger range unmaps */
        cuMemHostUnregister(j->ptr);
        break;
    case REAP_UNMAP:
        munmap(j->ptr, j->len);
        break;
    case REAP_MODULE:
        cuModuleUnload((CUmodule)j->handle);
        if (j->ptr)
            munmap(j->ptr, j->len);
        break;
    case REAP_POOL:
        cuMemPoolTrimTo((CUmemoryPool)j->handle, 0);
        cuMemPoolDestroy((CUmemoryPool)j->handle);
        break;
    case REAP_LIBRARY:
        cuLibraryUnload((CUlibrary)j->handle);
        if (j->ptr)
            munmap(j->ptr, j->len);
        break;
    }
}

static void *reaper_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reap_lock);
    for (;;) {
        while (!reap_head && !reap_stopping)
            pthread_cond_wait(&reap_cond, &reap_lock);
        struct reap_job *j = reap_head;
        if (!j)
            break;
        reap_head = j->next;
        if (!reap_head)
            reap_tail = &reap_head;
        pthread_mutex_unlock(&reap_lock);
        run_job(j);
        free(j);
        pthread_mutex_lock(&reap_lock);
        reap_done++;
        pthread_cond_broadcast(&reap_idle);
    }
    pthread_mutex_unlock(&reap_lock);
    return NULL;
}

void srv_reap(enum reap_kind kind, int gpu, void *ptr, size_t len, void *handle)
{
    struct reap_job *j = malloc(sizeof *j);
    pthread_mutex_lock(&reap_lock);
    if (!j || !reap_started || reap_stopping) {
        pthread_mutex_unlock(&reap_lock);
        /* No reaper: do it here, late rather than never. */
        struct reap_job now = {kind, gpu, ptr, len, handle, NULL};
        run_job(&now);
        free(j);
        return;
    }
    *j = (struct reap_job){kind, gpu, ptr, len, handle, NULL};
    *reap_tail = j;
    reap_tail = &j->next;
    reap_queued++;
    pthread_cond_signal(&reap_cond);
    pthread_mutex_unlock(&reap_lock);
}

void srv_reaper_drain(void)
{
    pthread_mutex_lock(&reap_lock);
    while (reap_started && reap_done != reap_queued)
        pthread_cond_wait(&reap_idle, &reap_lock);
    pthread_mutex_unlock(&reap_lock);
}

int srv_reaper_start(void)
{
    if (pthread_create(&reap_thread, NULL, reaper_main, NULL) != 0)
        return -1;
    reap_started = true;
    return 0;
}

void srv_reaper_stop(void)
{
    if (!reap_started)
        return;
    pthread_mutex_lock(&reap_lock);
    reap_stopping = true;
    pthread_cond_signal(&reap_cond);
    pthread_mutex_unlock(&reap_lock);
    pthread_join(reap_thread, NULL); /* it finishes the jobs already queued */
    reap_started = false;
}
