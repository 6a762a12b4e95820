/* Each client's GPU time, sampled, for `cumux status`, `cumux top` and /metrics. About one launch in
 * USAGE_MEAN_GAP (kernel or graph), picked at random so that the period of a training loop cannot bias
 * which kernels are timed, is bracketed by two timing events on its stream. The client's GPU time is the
 * sampled launches' mean time times its launches up to the last sample that ended: counted as the GPU
 * runs them, not when they are queued (a program may queue seconds of work at once). A sample measures
 * from the moment its stream reached the launch to the kernel's end: a kernel that waits for SMs that
 * other clients hold counts that wait. Pending samples are looked at when the next one is due and when
 * the status is asked for (srv_usage_refresh), never waited for; a synchronization that returns tells that
 * every launch before it has ended (srv_usage_synced); captures are never sampled (the events
 * would become graph nodes). One lock for all clients: taken at one launch in USAGE_MEAN_GAP and by status
 * requests, so it costs nothing measurable (docs/performance.md). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/channel.h"
#include "server/handlers.h"

#define USAGE_PAIRS 64 /* samples in flight: 64 x 64 launches covers a queue deeper than the driver lets one grow */
#define USAGE_MEAN_GAP 64

struct srv_usage {
    struct usage_pair {
        CUevent start, end;
        int gpu;       /* the context the events were made in; -1: none made */
        uint64_t unit; /* the client's launches up to and with this one */
    } pair[USAGE_PAIRS];
    uint32_t first, n; /* the samples waiting for their end: a ring from first */
    uint64_t rng;
    uint32_t countdown; /* launches to the next sample */
    double sampled_ns;
    uint64_t sampled, done_units; /* samples that ended; launches up to the last of them */
};

static pthread_mutex_t usage_lock = PTHREAD_MUTEX_INITIALIZER; /* the samples of every client */

static uint32_t next_gap(struct srv_usage *u)
{
    u->rng ^= u->rng << 13;
    u->rng ^= u->rng >> 7;
    u->rng ^= u->rng << 17;
    return 1 + (uint32_t)(u->rng % (2 * USAGE_MEAN_GAP - 1)); /* 1 .. 2*GAP-1: mean GAP */
}

/* Samples whose end the GPU has reached go into the estimate. */
static void harvest(struct srv_client *c, struct srv_usage *u)
{
    while (u->n) {
        struct usage_pair *p = &u->pair[u->first];
        CUresult q = cuEventQuery(p->end);
        if (q == CUDA_ERROR_NOT_READY)
            break;
        float ms;
        if (q == CUDA_SUCCESS && cuEventElapsedTime(&ms, p->start, p->end) == CUDA_SUCCESS && ms >= 0) {
            u->sampled_ns += ms * 1e6;
            u->sampled++;
            /* A recent mean (weight 1/4 to the newest) for pacing.c: the client's kernels now. */
            uint64_t ns = (uint64_t)(ms * 1e6), was = atomic_load_explicit(&c->pacing.kernel_ns_recent, memory_order_relaxed);
            atomic_store_explicit(&c->pacing.kernel_ns_recent, was ? (was * 3 + ns) / 4 : ns, memory_order_relaxed);
            if (p->unit > u->done_units) {
                u->done_units = p->unit;
                if (p->unit > atomic_load(&c->usage.done_units)) {
                    atomic_store(&c->usage.done_units, p->unit);
                    atomic_store(&c->usage.ended_ns, cumux_now_ns());
                }
            }
        }
        u->first = (u->first + 1) % USAGE_PAIRS;
        u->n--;
    }
    if (u->sampled)
        atomic_store(&c->usage.gpu_ns, (uint64_t)(u->sampled_ns / (double)u->sampled * (double)u->done_units));
}

void srv_usage_synced(struct srv_client *c)
{
    uint64_t work = atomic_load(&c->usage.work_units);
    if (atomic_load(&c->usage.done_units) < work)
        atomic_store(&c->usage.ended_ns, cumux_now_ns());
    atomic_store(&c->usage.done_units, work); /* sampling or not */
    c->marks.nlaunched_on = 0;
    pthread_mutex_lock(&usage_lock);
    struct srv_usage *u = c->usage.samples;
    if (u) {
        harvest(c, u);
        u->done_units = atomic_load(&c->usage.work_units); /* no launch comes while the worker synchronizes */
        if (u->sampled)
            atomic_store(&c->usage.gpu_ns, (uint64_t)(u->sampled_ns / (double)u->sampled * (double)u->done_units));
    }
    pthread_mutex_unlock(&usage_lock);
}

/* Clients that went with kernels in flight, lately: a culprit often has its error, and leaves, before
 * the fault watch sees the fault. */
#define DEPARTED_KEPT 8
static struct {
    uint64_t at_ns;
    char who[160];
} departed[DEPARTED_KEPT];
static unsigned departed_next;

void srv_usage_departed(struct srv_client *c)
{
    if (!srv_usage_in_flight(c) || srv_marks_client_done(c))
        return;
    pthread_mutex_lock(&usage_lock);
    unsigned i = departed_next++ % DEPARTED_KEPT;
    departed[i].at_ns = cumux_now_ns();
    srv_client_describe(c, departed[i].who, sizeof departed[i].who);
    pthread_mutex_unlock(&usage_lock);
}

size_t srv_usage_departed_lately(uint64_t within_ns, char (*out)[160], size_t max)
{
    size_t n = 0;
    uint64_t now = cumux_now_ns();
    pthread_mutex_lock(&usage_lock);
    for (unsigned i = 0; i < DEPARTED_KEPT && n < max; i++)
        if (departed[i].at_ns && now - departed[i].at_ns <= within_ns)
            memcpy(out[n++], departed[i].who, sizeof departed[i].who);
    pthread_mutex_unlock(&usage_lock);
    return n;
}

bool srv_usage_in_flight(struct srv_client *c)
{
    srv_usage_refresh(c);
    return atomic_load(&c->usage.work_units) > atomic_load(&c->usage.done_units);
}

void srv_usage_refresh(struct srv_client *c)
{
    pthread_mutex_lock(&usage_lock);
    if (c->usage.samples)
        harvest(c, c->usage.samples);
    pthread_mutex_unlock(&usage_lock);
}

/* The worker's part: the samples are taken in the lock (status requests look at them meanwhile). */
static int begin_locked(struct srv_client *c, struct srv_usage *u, struct srv_stream *s, uint64_t unit)
{
    harvest(c, u);
    if (u->n == USAGE_PAIRS || srv_stream_capturing(c, s))
        return -1;
    int slot = (int)((u->first + u->n) % USAGE_PAIRS);
    struct usage_pair *p = &u->pair[slot];
    if (p->gpu != s->ctx->gpu) {
        if (p->gpu >= 0) {
            cuEventDestroy(p->start);
            cuEventDestroy(p->end);
            p->gpu = -1;
        }
        if (cuEventCreate(&p->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            return -1;
        if (cuEventCreate(&p->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            cuEventDestroy(p->start);
            return -1;
        }
        p->gpu = s->ctx->gpu;
    }
    p->unit = unit;
    return cuEventRecord(p->start, s->cu) == CUDA_SUCCESS ? slot : -1;
}

/* CUMUX_USAGE_SAMPLING=0 (server): no samples, so that their cost can be measured against none. */
static bool sampling_off(void)
{
    static _Atomic int off = -1; /* every worker thread may ask first: each finds the same */
    if (atomic_load(&off) < 0) {
        const char *e = getenv("CUMUX_USAGE_SAMPLING");
        atomic_store(&off, e && !strcmp(e, "0"));
    }
    return atomic_load(&off) == 1;
}

int srv_usage_begin(struct srv_client *c, struct srv_stream *s)
{
    uint64_t unit = atomic_fetch_add_explicit(&c->usage.work_units, 1, memory_order_relaxed) + 1;
    /* Which streams have launches not known to have ended (marks.c: a client whose marks cover them all
     * has none in flight). */
    uint32_t k = 0;
    while (k < c->marks.nlaunched_on && k < 8 && c->marks.launched_on[k] != s->handle)
        k++;
    if (k == c->marks.nlaunched_on) {
        if (k < 8)
            c->marks.launched_on[k] = s->handle;
        c->marks.nlaunched_on = k < 8 ? k + 1 : 9;
    }
    /* marks.c's count of the launches after a timing event's record (sampling takes no notice of it: which
     * launches are sampled must not be the client's to steer, or it could keep its long kernels out). */
    if (c->marks.timing_quiet)
        c->marks.timing_quiet--;
    struct srv_usage *u = c->usage.samples;
    if (!u) {
        if (sampling_off())
            return -1;
        if (!(u = calloc(1, sizeof *u)))
            return -1;
        for (int i = 0; i < USAGE_PAIRS; i++)
            u->pair[i].gpu = -1;
        /* Seeded from the kernel, not from anything the client knows (its id is in its welcome): a client
         * that could tell which of its launches get sampled could give those short kernels and its real
         * work none. */
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
            seed = cumux_now_ns() ^ ((uint64_t)c->id * 0x9E3779B97F4A7C15ull);
        u->rng = seed | 1;
        u->countdown = 1; /* the first launch: a program of a few kernels gets a figure too */
        pthread_mutex_lock(&usage_lock);
        c->usage.samples = u;
        pthread_mutex_unlock(&usage_lock);
    }
    if (--u->countdown)
        return -1;
    u->countdown = next_gap(u);
    pthread_mutex_lock(&usage_lock);
    int slot = begin_locked(c, u, s, unit);
    pthread_mutex_unlock(&usage_lock);
    return slot;
}

void srv_usage_end(struct srv_client *c, struct srv_stream *s, int slot, CUresult launched)
{
    struct srv_usage *u = c->usage.samples;
    if (slot < 0 || !u || launched != CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&usage_lock);
    if (cuEventRecord(u->pair[slot].end, s->cu) == CUDA_SUCCESS)
        u->n++;
    pthread_mutex_unlock(&usage_lock);
}

void srv_usage_release(struct srv_client *c)
{
    pthread_mutex_lock(&usage_lock);
    struct srv_usage *u = c->usage.samples;
    c->usage.samples = NULL;
    pthread_mutex_unlock(&usage_lock);
    if (!u)
        return;
    for (int i = 0; i < USAGE_PAIRS; i++)
        if (u->pair[i].gpu >= 0) {
            cuEventDestroy(u->pair[i].start);
            cuEventDestroy(u->pair[i].end);
        }
    free(u);
}
