/* Launch pacing (issue 13): beyond 32 busy clients their streams share the context's hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS=32). A client queues several kernels on its stream at once; in a shared
 * queue its second kernel waits at the head for its first, and the other client's kernels behind it wait
 * too, so about 32 kernels run at a time however many clients there are. On the H200, 128 streams with
 * bursts of 10 one-millisecond kernels took 39 ms, the same launched round-robin 11 ms
 * (tools/probe_green_partition.c, question 7): a queue whose every head is runnable feeds the GPU.
 * Pacing keeps at most one kernel of a paced stream in the driver: before a launch the worker waits for
 * the stream's earlier work, so the heads of shared queues stay runnable. It pays a gap between a
 * stream's kernels (the worker's poll and the launch), so it applies only while many clients launch and
 * to clients whose kernels are long (their sampled mean, usage.c: without sampling nobody is paced). The wait is bounded: a stream may wait
 * on work that this client's later messages release (a stream memory wait, an event recorded later), and
 * the worker must go on to them. Clients that have captured graphs are not paced.
 * On by default (48 clients on the H200: 1.18x MPS paced, 0.91x not; docs/performance.md); CUMUX_PACE=0
 * turns it off;
 * CUMUX_PACE_CLIENTS: clients launching in the last 20-40 ms from which it applies (33: more than the
 * queues); CUMUX_PACE_MIN_US: the least mean kernel time of a paced client (100). */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "server/handlers.h"

#define PACE_EPOCH_MS 20
#define PACE_WAIT_CAP_NS 10000000ull /* never more than 10 ms for one launch */

static int pace_on = -1;
static unsigned pace_clients = 33;
static uint64_t pace_min_ns = 100000;
/* Clients that launched in each of the last four 20 ms epochs (a ring: epoch e counts in slot e % 4). */
static _Atomic uint32_t launching[4];
static _Atomic uint64_t launching_epoch[4];

static unsigned env_unsigned(const char *name, unsigned dflt, unsigned max)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    return *end || v > max ? dflt : (unsigned)v;
}

static bool enabled(void)
{
    if (pace_on < 0) { /* read once, by whichever worker comes first: the same values for all */
        pace_clients = env_unsigned("CUMUX_PACE_CLIENTS", 33, 1u << 20);
        pace_min_ns = (uint64_t)env_unsigned("CUMUX_PACE_MIN_US", 100, 1000000) * 1000;
        const char *e = getenv("CUMUX_PACE");
        pace_on = !(e && e[0] == '0');
    }
    return pace_on;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Counts the client in this epoch (once), and answers how many clients launched in this or the last one. */
static unsigned count_launching(struct srv_client *c, uint64_t now)
{
    uint64_t e = now / (PACE_EPOCH_MS * 1000000ull) + 1; /* +1: 0 means never */
    unsigned slot = (unsigned)(e % 4);
    uint64_t seen = atomic_load_explicit(&launching_epoch[slot], memory_order_acquire);
    if (seen != e && atomic_compare_exchange_strong(&launching_epoch[slot], &seen, e))
        atomic_store(&launching[slot], 0); /* the slot held an epoch four back: start it anew */
    if (c->pacing.pace_epoch != e) {
        c->pacing.pace_epoch = e;
        atomic_fetch_add(&launching[slot], 1);
    }
    unsigned prev = (unsigned)((e - 1) % 4);
    unsigned here = atomic_load(&launching[slot]);
    unsigned before = atomic_load(&launching_epoch[prev]) == e - 1 ? atomic_load(&launching[prev]) : 0;
    return here > before ? here : before;
}

void srv_pace_launch(struct srv_client *c, struct srv_stream *s)
{
    /* A client that captures is left alone: asking about a stream that takes part in a capture would end
     * the capture (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
    if (!enabled() || c->graphs.ever_captured)
        return;
    uint64_t now = now_ns();
    if (count_launching(c, now) < pace_clients)
        return;
    uint64_t mean = atomic_load_explicit(&c->pacing.kernel_ns_recent, memory_order_relaxed);
    if (mean < pace_min_ns)
        return;
    if (cuStreamQuery(s->cu) != CUDA_ERROR_NOT_READY)
        return; /* idle (or an error, which its next synchronization reports) */
    uint64_t cap = mean * 2 < PACE_WAIT_CAP_NS ? mean * 2 : PACE_WAIT_CAP_NS;
    if (cap < 100000)
        cap = 100000;
    uint64_t until = now + cap;
    atomic_fetch_add_explicit(&c->pacing.paced, 1, memory_order_relaxed);
    /* Yield for the first 50 us, then sleep 20 us between questions: with a hundred workers waiting, the
     * cores stay free for the launches of the others. */
    uint64_t t = now;
    do {
        if (t - now < 50000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    } while (cuStreamQuery(s->cu) == CUDA_ERROR_NOT_READY && (t = now_ns()) < until);
}
