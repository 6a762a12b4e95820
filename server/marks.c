/* Completion marks (issue 12: round trips). The shared context has CUDA_DEVICE_MAX_CONNECTIONS=32
 * hardware queues, and with 32 the driver's cuStreamQuery and cuStreamSynchronize cost 0.77 us natively
 * on the H200 (0.21 us with the default count), 2-3 us in the server, whose context holds every client's
 * streams (docs/performance.md). So a stream its client keeps asking about gets, whenever the client's
 * worker runs out of commands, a write of a fresh number into server memory behind its work (a stream
 * memory operation, which waits for the work before it). A later question, with no work queued on the
 * stream in between, is answered by reading that word: the number there means all the work before it has ended,
 * which is what the driver would say. Written only for streams asked about in the last 200 us (a program
 * polling a stream gets one behind each piece of work; one that synchronizes once a training step, a few
 * a step): each costs driver calls in the worker's idle time and a semaphore on the GPU. Never for a
 * client that has captured graphs (the write would become a node). A word that does not say done, a
 * stream moved to another green context, an error: the question goes to the driver.
 * A mark is work on the stream too: until it lands the driver would call the stream busy. So an event is
 * recorded just before it, and a question the word cannot answer yet asks the driver about that event,
 * i.e. about the client's own work, never about the mark (srv_marks_query).
 * Numbers come from one counter for the process, so a write still queued behind the work of a destroyed
 * stream can never show a later stream in the same slot idle, only not yet.
 * The same number also goes into a word of the client's channel, and the worker tells the client which
 * streams and contexts the marks answer for (tell): while the client has sent nothing since, a question
 * whose mark has landed is answered in the client with no round trip at all (shim/marks.c). On unless
 * CUMUX_MARKS=0. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "server/handlers.h"

#define MARK_SLOTS 16384
#define MARK_ASKED_NS 200000ull /* a stream asked about within this long is marked when its worker idles */

static pthread_mutex_t marks_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t *marks_host; /* MARK_SLOTS words of pinned host memory, written by the GPU */
static CUdeviceptr marks_dev;
static uint64_t marks_used[MARK_SLOTS / 64];
static _Atomic int marks_state; /* 0 not tried, 1 ready, -1 off */
static _Atomic uint32_t marks_seq;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The page of words (under marks_lock), once: pinned (portable: for every GPU's context) and mapped; the
 * caller has a context current. */
static void init_locked(void)
{
    if (marks_state != 0)
        return;
    marks_state = -1;
    const char *e = getenv("CUMUX_MARKS");
    if ((e && e[0] == '0') || srv_gpu_served < 0)
        return;
    /* Kept for the process's life: a mark may still be queued behind a gone client's work. */
    void *p = aligned_alloc(4096, MARK_SLOTS * sizeof(uint32_t));
    if (!p)
        return;
    memset(p, 0, MARK_SLOTS * sizeof(uint32_t));
    CUresult r = cuMemHostRegister(p, MARK_SLOTS * sizeof(uint32_t),
                                   CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r == CUDA_SUCCESS && (r = cuMemHostGetDevicePointer(&marks_dev, p, 0)) != CUDA_SUCCESS)
        cuMemHostUnregister(p);
    if (r != CUDA_SUCCESS) {
        free(p);
        cumux_logf("completion marks: no pinned page for them (%d); every question goes to the driver", (int)r);
        return;
    }
    marks_host = p;
    marks_state = 1;
}

void srv_marks_init(void)
{
    pthread_mutex_lock(&marks_lock);
    init_locked();
    pthread_mutex_unlock(&marks_lock);
}

/* A slot (under marks_lock), -1 when none is left or marks are off. */
static int slot_take(void)
{
    init_locked();
    if (marks_state < 0)
        return -1;
    for (int w = 0; w < MARK_SLOTS / 64; w++) {
        if (marks_used[w] != ~0ull) {
            int b = __builtin_ctzll(~marks_used[w]);
            marks_used[w] |= 1ull << b;
            return w * 64 + b;
        }
    }
    return -1;
}

void srv_marks_stream_gone(struct srv_stream *s)
{
    if (s->mark_event) {
        cuEventDestroy(s->mark_event);
        s->mark_event = NULL;
    }
    if (s->mark_slot1 == 0)
        return;
    int slot = (int)s->mark_slot1 - 1;
    pthread_mutex_lock(&marks_lock);
    marks_used[slot / 64] &= ~(1ull << (slot % 64));
    pthread_mutex_unlock(&marks_lock);
    s->mark_slot1 = 0;
}

void srv_marks_asked(struct srv_client *c, struct srv_stream *s)
{
    uint64_t t = now_ns();
    unsigned oldest = 0;
    for (unsigned i = 0; i < SRV_MARKS_ASKED; i++) {
        if (c->marks.marks_asked[i] == s->handle) {
            c->marks.marks_asked_ns[i] = t;
            return;
        }
        if (c->marks.marks_asked_ns[i] < c->marks.marks_asked_ns[oldest])
            oldest = i;
    }
    c->marks.marks_asked[oldest] = s->handle;
    c->marks.marks_asked_ns[oldest] = t;
}

/* Streams that take marks: non-blocking ones, and the legacy stream of a context without blocking
 * streams. A question about the others may first queue the legacy stream's joins (objects.c before_op)
 * behind a mark, and could then find the stream busy with the mark alone. */
static bool markable(const struct srv_stream *s)
{
    if (s->kind == STREAM_NONBLOCKING)
        return true;
    if (s->kind != STREAM_LEGACY)
        return false;
    for (const struct srv_stream *o = s->ctx->streams; o; o = o->next_in_ctx)
        if (o->kind == STREAM_BLOCKING)
            return false;
    return true;
}

/* Whether s's last work is its mark: nothing queued on it since (before_op clears mark_behind), on the
 * same driver stream. */
static bool mark_last(struct srv_stream *s)
{
    return s->mark_slot1 && s->mark_behind && s->mark_cu == s->cu && !s->capturing && markable(s);
}

static void found_idle(struct srv_client *c, struct srv_stream *s)
{
    s->idle_gen = c->obj.work_gen;
    srv_stream_confirmed(s);
}

bool srv_marks_idle(struct srv_client *c, struct srv_stream *s)
{
    if (!mark_last(s) || atomic_load_explicit(&marks_host[s->mark_slot1 - 1], memory_order_acquire) != s->mark_seq)
        return false;
    found_idle(c, s);
    c->marks.marks_answered++;
    return true;
}

CUresult srv_marks_query(struct srv_client *c, struct srv_stream *s)
{
    if (!mark_last(s))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = cuEventQuery(s->mark_event);
    if (r == CUDA_SUCCESS)
        found_idle(c, s);
    return r;
}

static void tell(struct srv_client *c, uint64_t handled);

void srv_marks_write(struct srv_client *c, uint64_t handled)
{
    if (c->graphs.ever_captured || marks_state < 0)
        return;
    if (c->marks.timing_quiet) {
        /* The program may be timing work between two events (a library's benchmark: synchronize, which
         * asks about the stream, record, launch, record): a mark queued while it prepares the next launch
         * would add its event and writes to the span, once for each such pause, so a candidate of more
         * launches would pay more. Until SRV_TIMING_QUIET_LAUNCHES launches after the record, its questions
         * go to the driver. */
        c->marks.marks_withheld++;
        tell(c, handled);
        return;
    }
    uint64_t t = 0;
    for (unsigned i = 0; i < SRV_MARKS_ASKED; i++) {
        if (!c->marks.marks_asked[i])
            continue;
        if (!t)
            t = now_ns();
        if (t - c->marks.marks_asked_ns[i] > MARK_ASKED_NS) {
            c->marks.marks_asked[i] = 0; /* not asked about lately: no more marks */
            c->marks.marks_asked_ns[i] = 0;
            continue;
        }
        struct srv_stream *s = handle_get(c, c->marks.marks_asked[i], OBJ_STREAM);
        if (!s || s->capturing || s->idle_gen == c->obj.work_gen || (s->mark_behind && s->mark_cu == s->cu) ||
            !markable(s))
            continue;
        use_gpu(c, s->ctx->gpu);
        if (!s->mark_slot1) {
            pthread_mutex_lock(&marks_lock);
            int slot = slot_take();
            pthread_mutex_unlock(&marks_lock);
            if (slot < 0)
                break;
            s->mark_slot1 = (uint32_t)slot + 1;
        }
        uint32_t v = atomic_fetch_add(&marks_seq, 1) + 1;
        if (v == 0) /* 0 is what a fresh word holds */
            v = atomic_fetch_add(&marks_seq, 1) + 1;
        if (!s->mark_event && cuEventCreate(&s->mark_event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            s->mark_event = NULL;
            continue;
        }
        s->mark_cu = NULL; /* until both are queued */
        if (cuEventRecord(s->mark_event, s->cu) != CUDA_SUCCESS)
            continue;
        /* The number goes into the server's word and into the client's (its channel), for the client to
         * answer its own questions (tell). */
        CUstreamBatchMemOpParams p[2];
        memset(p, 0, sizeof p);
        p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        p[0].writeValue.address = marks_dev + (CUdeviceptr)(s->mark_slot1 - 1) * sizeof(uint32_t);
        p[0].writeValue.value = v;
        p[0].writeValue.flags = 0; /* with the memory barrier: the work before it has ended and is visible */
        /* Streams whose handles share a word may overwrite each other's number there, and a write still
         * queued behind a destroyed stream's work may land late: numbers are never used twice, so either
         * only makes the client ask. */
        s->mark_word = s->handle % CUMUX_MARK_WORDS;
        p[1] = p[0];
        p[1].writeValue.address = c->marks.mark_words + (CUdeviceptr)s->mark_word * sizeof(uint32_t);
        if (cuStreamBatchMemOp(s->cu, c->marks.mark_words ? 2 : 1, p, 0) != CUDA_SUCCESS)
            continue;
        s->mark_seq = v;
        s->mark_behind = true;
        s->mark_cu = s->cu;
        c->marks.marks_queued++;
    }
    tell(c, handled);
}

/* What the client may answer itself (its channel's marks_told): with every message it sent handled (the
 * ring up to `handled`) and no error of one-way work left to report, each stream asked about lately that
 * is idle already (value 0) or has its mark as its last work; and each context of theirs all of whose
 * streams are among those. Written only when it changes (seqlock: gen odd while written). The client uses it
 * only while its ring's head is still `handled`: anything it sends after makes it ask again. */
/* Set once a GPU coredump of this worker's context has begun: nothing is told from then on. */
static _Atomic int withdrawn;

void srv_marks_stop_telling(void)
{
    atomic_store(&withdrawn, 1);
}

void srv_marks_withdraw(struct srv_client *c)
{
    atomic_store(&withdrawn, 1);
    /* An odd generation: the client takes it for a telling being written, and asks (shim/marks.c); a tell
     * under way, which ends with an even one, makes it odd again (below). */
    if (c->shm)
        atomic_fetch_or(&c->shm->marks_told.gen, 1);
}

static void tell(struct srv_client *c, uint64_t handled)
{
    /* Known idle: as srv_stream_known_idle (stream.c, which calls this file: not called from here) */
#define KNOWN_IDLE(s) ((s)->idle_gen == c->obj.work_gen && !(s)->capturing)
    struct cumux_marks_told t;
    memset(&t, 0, sizeof t);
    unsigned n = 0, nc = 0;
    /* With GPU coredumps on, the driver lets a faulting stream go on while it writes the dump (a mark behind
     * the faulted kernel may land): once the dump has begun the answers must wait for the worker (fault.c),
     * so what was told is withdrawn and nothing more is (srv_marks_withdraw). Before it begins a program
     * answering itself risks what the worker answering from the driver does: a success the driver gives
     * for a stream that went on past a fault, which natively, with dumps on, a program gets too. */
    bool may_tell = c->marks.mark_words && c->obj.pending_error == CUDA_SUCCESS && !atomic_load(&withdrawn);
    uint32_t slots[SRV_MARKS_ASKED], values[SRV_MARKS_ASKED];
    struct srv_stream *told[SRV_MARKS_ASKED];
    unsigned nmarked = 0;
    for (unsigned i = 0; i < SRV_MARKS_ASKED && may_tell; i++) {
        struct srv_stream *s = c->marks.marks_asked[i] ? handle_get(c, c->marks.marks_asked[i], OBJ_STREAM) : NULL;
        if (!s || s->capturing || !markable(s))
            continue;
        uint32_t value;
        if (KNOWN_IDLE(s))
            value = 0;
        else if (mark_last(s))
            value = s->mark_seq;
        else
            continue;
        told[n] = s;
        t.stream[n++] = (struct cumux_mark_told){.stream = s->handle, .value = value, .word = s->mark_word,
                                                 .ctx = s->ctx->handle};
        if (value) {
            slots[nmarked] = s->mark_slot1 - 1;
            values[nmarked++] = value;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        bool seen = false;
        for (unsigned j = 0; j < nc && !seen; j++)
            seen = t.ctx[j].ctx == t.stream[i].ctx;
        if (seen)
            continue;
        uint32_t mask = 0;
        bool all = true;
        for (const struct srv_stream *o = told[i]->ctx->streams; o && all; o = o->next_in_ctx) {
            if (KNOWN_IDLE(o))
                continue;
            unsigned k = 0;
            while (k < n && t.stream[k].stream != o->handle)
                k++;
            all = k < n;
            mask |= all ? 1u << k : 0;
        }
        if (all)
            t.ctx[nc++] = (struct cumux_ctx_told){.ctx = t.stream[i].ctx, .mask = mask};
    }
    if (n)
        t.handled = handled;
    if (!memcmp(&t, &c->marks.told, sizeof t))
        return; /* as told already: the client's copy of the line stays in its cache */
    c->marks.told = t;
    struct cumux_marks_told *m = &c->shm->marks_told;
    c->marks.told_gen += 2;
    atomic_store_explicit(&m->gen, c->marks.told_gen - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    m->handled = t.handled;
    memcpy(m->stream, t.stream, sizeof t.stream);
    memcpy(m->ctx, t.ctx, sizeof t.ctx);
    atomic_store_explicit(&m->gen, c->marks.told_gen, memory_order_release);
    if (atomic_load(&withdrawn)) /* withdrawn while this was written: it stays withdrawn */
        atomic_fetch_or(&m->gen, 1);
    /* For the fault watch: every launch not known to have ended is behind these marks when each stream
     * launched on since is a told one. */
    bool complete = n && c->marks.nlaunched_on <= 8;
    for (uint32_t i = 0; i < c->marks.nlaunched_on && complete; i++) {
        unsigned k = 0;
        while (k < n && t.stream[k].stream != c->marks.launched_on[i])
            k++;
        complete = k < n;
    }
    atomic_store_explicit(&c->marks.told_seq, c->marks.told_gen - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&c->marks.told_complete, complete, memory_order_relaxed);
    atomic_store_explicit(&c->marks.told_units, atomic_load(&c->usage.work_units), memory_order_relaxed);
    atomic_store_explicit(&c->marks.told_n, nmarked, memory_order_relaxed);
    for (unsigned i = 0; i < nmarked; i++) {
        atomic_store_explicit(&c->marks.told_slot[i], slots[i], memory_order_relaxed);
        atomic_store_explicit(&c->marks.told_value[i], values[i], memory_order_relaxed);
    }
    atomic_store_explicit(&c->marks.told_seq, c->marks.told_gen, memory_order_release);
#undef KNOWN_IDLE
}

bool srv_marks_client_done(struct srv_client *c)
{
    if (marks_state <= 0)
        return false;
    uint32_t seq = atomic_load_explicit(&c->marks.told_seq, memory_order_acquire);
    if (seq & 1 || !atomic_load_explicit(&c->marks.told_complete, memory_order_relaxed) ||
        atomic_load_explicit(&c->marks.told_units, memory_order_relaxed) != atomic_load(&c->usage.work_units))
        return false;
    uint32_t n = atomic_load_explicit(&c->marks.told_n, memory_order_relaxed);
    for (uint32_t i = 0; i < n && i < SRV_MARKS_ASKED; i++) {
        uint32_t slot = atomic_load_explicit(&c->marks.told_slot[i], memory_order_relaxed);
        if (slot >= MARK_SLOTS || atomic_load_explicit(&marks_host[slot], memory_order_acquire) !=
                                      atomic_load_explicit(&c->marks.told_value[i], memory_order_relaxed))
            return false;
    }
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&c->marks.told_seq, memory_order_relaxed) == seq;
}
