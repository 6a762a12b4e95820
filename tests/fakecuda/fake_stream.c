/* fakecuda streams and events: each stream has its own executor thread that runs its ops in order;
 * events name a position in a stream; cross-stream waits are ops that wait for that position. Stream
 * capture records ops into a graph instead. Copies, memsets, launches and host functions are ops. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>
#include <time.h>

#include "fake.h"
#include "fake_graph.h"

struct fc_capture {
    uint64_t id;
    struct fc_graph *g;
    bool into; /* cuStreamBeginCaptureToGraph: g is the caller's, never freed here */
    bool invalid;
    CUstreamCaptureMode mode;
    pthread_t thread; /* that began it */
    struct fc_stream *origin;
    struct fc_stream **members; /* every stream in it, the origin too; each holds a reference */
    size_t nmembers;
    struct fc_capture *next;
};

struct fc_stream {
    uint32_t magic;
    unsigned flags;
    int priority;
    bool green;         /* made in a green context (fake_green.c) */
    struct fc_sms sms;  /* then its SMs */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* new work (for the executor) and finished work (for waiters) */
    struct fc_op *head, *tail;
    uint64_t submitted;          /* under mu */
    _Atomic uint64_t completed;  /* the seq of the last op done */
    _Atomic int faulted;         /* an op faulted while running: the next synchronization says so */
    bool closing;                /* destroyed by its user: the executor ends when the queue is empty */
    bool running;                /* under mu: an executor thread serves the queue */
    int refs;                    /* under all_mu: its user, its executor, events and waits naming it */
    struct fc_stream *prev, *next; /* all streams, under all_mu */
    /* capture state, under fc_graph_mu */
    struct fc_capture *cap;
    struct fc_gnode **cdeps;
    size_t ncdeps, capdeps;
};

struct fc_event {
    uint32_t magic;
    unsigned flags;
    _Atomic int refs; /* its user and queued records */
    /* under ev_mu */
    struct fc_stream *s; /* last recorded on (holds a reference), NULL if never */
    uint64_t seq, gen, time_gen, time_ns;
    /* under fc_graph_mu: recorded in a capture */
    uint64_t cap_id;
    struct fc_gnode **cnodes;
    size_t ncnodes;
    /* CU_EVENT_INTERPROCESS: its state is shared with the processes that open it (fc_ipc_state) */
    struct fc_ipc_state *sh;
    bool sh_owner; /* made here (unlinks the name at its end), not opened */
    char sh_name[48];
};

/* An interprocess event's state, in shared memory another process opens by the name its handle carries,
 * so that a record in any of them is seen by all: records issued and the highest one completed. Waits
 * and queries compare the two (the last record done means every earlier one counts as done, as an
 * event only ever tells of its last record). */
struct fc_ipc_state {
    _Atomic uint64_t issued, completed;
};

pthread_mutex_t fc_graph_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_stream *all_streams;
static struct fc_capture *captures;
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* The driver's rule for "potentially unsafe" calls during a capture (cuThreadExchangeStreamCaptureMode):
 * unless the calling thread is in relaxed mode, a call is prohibited while this thread has a capture
 * that is not relaxed under way, or (the thread in global mode) while any thread has a global one. The
 * call fails and the capture that prohibits it is invalidated. */
static CUresult capture_prohibits(void)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&fc_graph_mu);
    for (struct fc_capture *c = captures; c; c = c->next) {
        if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        if (pthread_equal(c->thread, pthread_self()) ||
            (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalid = true;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
static uint64_t next_capture_id = 1;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- ops */

struct fc_op *fc_op_new(enum fc_op_kind kind, const char *call)
{
    struct fc_op *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        op->call = call;
    }
    return op;
}

static void stream_ref(struct fc_stream *s);
static void stream_unref(struct fc_stream *s);
static void event_unref(struct fc_event *e);

/* What an op holds (arguments, references to events, streams, graph memory, its graph's ops), not the op. */
static void op_release(struct fc_op *op)
{
    switch (op->kind) {
    case OP_KERNEL:
        free(op->u.k.args);
        break;
    case OP_RECORD:
        event_unref(op->u.rec.ev);
        break;
    case OP_WAIT:
        if (op->u.wait.s)
            stream_unref(op->u.wait.s);
        if (op->u.wait.ipc_ev)
            event_unref(op->u.wait.ipc_ev);
        break;
    case OP_EVENT_NODE:
        event_unref(op->u.evn.ev);
        break;
    case OP_GMEM:
        if (op->u.gm.m)
            fc_gmem_unref(op->u.gm.m);
        break;
    case OP_COND:
        fc_cond_op_free(op);
        break;
    case OP_GRAPH:
        for (size_t i = 0; i < op->u.graph.n; i++)
            fc_op_free(op->u.graph.ops[i]);
        free(op->u.graph.ops);
        break;
    default:
        break;
    }
    op->kind = OP_EMPTY; /* released: nothing left to release again */
}

void fc_op_free(struct fc_op *op)
{
    if (!op)
        return;
    op_release(op);
    free(op);
}

struct fc_op *fc_op_clone(const struct fc_op *op)
{
    struct fc_op *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    *c = *op;
    c->next = NULL;
    if (op->kind == OP_KERNEL) {
        size_t n = fc_param_bytes(op->u.k.fn->def);
        c->u.k.args = malloc(n ? n : 1);
        if (!c->u.k.args) {
            free(c);
            return NULL;
        }
        memcpy(c->u.k.args, op->u.k.args, n);
    }
    if (op->kind == OP_GRAPH) { /* a child graph: its ops, copied */
        c->u.graph.ops = calloc(op->u.graph.n ? op->u.graph.n : 1, sizeof *c->u.graph.ops);
        for (size_t i = 0; c->u.graph.ops && i < op->u.graph.n; i++) {
            if (op->u.graph.ops[i] && !(c->u.graph.ops[i] = fc_op_clone(op->u.graph.ops[i]))) {
                c->u.graph.n = i;
                fc_op_free(c);
                return NULL;
            }
        }
        if (!c->u.graph.ops) {
            free(c);
            return NULL;
        }
    }
    if (op->kind == OP_EVENT_NODE)
        atomic_fetch_add(&op->u.evn.ev->refs, 1);
    if (op->kind == OP_GMEM && op->u.gm.m)
        fc_gmem_ref(op->u.gm.m);
    if (op->kind == OP_COND && !fc_cond_op_clone(c, op)) {
        free(c);
        return NULL;
    }
    /* Other graph nodes hold kernels, copies, memsets, host functions, child graphs: no references. */
    return c;
}

static uint64_t memop_size(unsigned op)
{
    return op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || op == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
}

/* Whether a wait's condition holds for the value now in memory (CUDA's definitions); cond without FLUSH. */
static bool value_ready(uint64_t addr, uint64_t want, bool wide, unsigned cond)
{
    uint64_t v = wide ? __atomic_load_n((uint64_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE)
                      : __atomic_load_n((uint32_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
    uint64_t mask = wide ? ~0ull : 0xffffffffull;
    switch (cond) {
    case CU_STREAM_WAIT_VALUE_GEQ: return wide ? (int64_t)(v - want) >= 0 : (int32_t)(uint32_t)(v - want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == want;
    case CU_STREAM_WAIT_VALUE_AND: return (v & want) != 0;
    default: return (~(v | want) & mask) != 0; /* NOR */
    }
}

void fc_wait_value(uint64_t addr, uint64_t want, bool wide, unsigned cond)
{
    if (value_ready(addr, want, wide, cond))
        return;
    fc_order_release(); /* it waits for other streams, or the host */
    /* CUMUX_FAKE_WAIT_LIMIT_MS: give up after that long (fuzzing, where nobody writes the word). */
    const char *e = getenv("CUMUX_FAKE_WAIT_LIMIT_MS");
    long limit_us = e && *e ? atol(e) * 1000 : -1;
    for (long waited = 0; !value_ready(addr, want, wide, cond) && (limit_us < 0 || waited < limit_us);
         waited += 100)
        usleep(100);
}

void fc_write_value(uint64_t addr, uint64_t v, bool wide)
{
    if (wide)
        __atomic_store_n((uint64_t *)(uintptr_t)addr, v, __ATOMIC_RELEASE);
    else
        __atomic_store_n((uint32_t *)(uintptr_t)addr, (uint32_t)v, __ATOMIC_RELEASE);
}

static uint64_t copy_span(uint64_t pitch, uint64_t slice, const struct fc_copy *c)
{
    uint64_t rows = fc_add_sat(fc_mul_sat(c->depth - 1, slice), c->height - 1);
    return fc_add_sat(fc_mul_sat(rows, pitch), c->width);
}

static uint64_t memset_span(const struct fc_memset *m)
{
    uint64_t row = fc_mul_sat(m->width, m->elem);
    return fc_add_sat(fc_mul_sat(m->height - 1, m->pitch), row);
}

static void check_side(const char *call, CUmemorytype t, uint64_t p, uint64_t n)
{
    if (t == CU_MEMORYTYPE_HOST)
        fc_oracle_host(call, p, n);
    else
        fc_oracle_dev(call, p, n);
}

void fc_op_check(const struct fc_op *op)
{
    switch (op->kind) {
    case OP_COPY: {
        const struct fc_copy *c = &op->u.cp;
        if (!c->width || !c->height || !c->depth)
            return;
        check_side(op->call, c->stype, c->src, copy_span(c->spitch, c->sslice, c));
        check_side(op->call, c->dtype, c->dst, copy_span(c->dpitch, c->dslice, c));
        break;
    }
    case OP_MEMSET:
        if (op->u.ms.width && op->u.ms.height)
            fc_oracle_any(op->call, op->u.ms.dst, memset_span(&op->u.ms)); /* unified: pinned memory too */
        break;
    case OP_MEMOP:
        if (op->u.mem.op != CU_STREAM_MEM_OP_BARRIER)
            fc_oracle_any(op->call, op->u.mem.addr, memop_size(op->u.mem.op));
        break;
    case OP_GRAPH:
        for (size_t i = 0; i < op->u.graph.n; i++)
            if (op->u.graph.ops[i])
                fc_op_check(op->u.graph.ops[i]);
        break;
    default:
        break;
    }
}

/* Interprocess events: another process's record shows only in the shared state, so it is polled. */
static void ipc_complete(struct fc_ipc_state *sh, uint64_t n)
{
    uint64_t c = atomic_load(&sh->completed);
    while (c < n && !atomic_compare_exchange_weak(&sh->completed, &c, n)) {
    }
}

static void ipc_wait(const struct fc_ipc_state *sh, uint64_t n)
{
    while (atomic_load(&sh->completed) < n)
        usleep(20);
}

static void stream_wait(struct fc_stream *s, uint64_t target)
{
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->completed) < target)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void fc_op_run(struct fc_op *op)
{
    switch (op->kind) {
    case OP_KERNEL: {
        struct fc_launch l = {.fn = op->u.k.fn, .call = op->call, .args = op->u.k.args};
        memcpy(l.grid, op->u.k.grid, sizeof l.grid);
        memcpy(l.block, op->u.k.block, sizeof l.block);
        op->u.k.fn->def->run(&l);
        break;
    }
    case OP_COPY: {
        fc_op_check(op); /* at the access itself too: the memory may have gone since the call */
        const struct fc_copy *c = &op->u.cp;
        for (uint64_t z = 0; z < c->depth; z++)
            for (uint64_t y = 0; y < c->height; y++)
                memmove((void *)(uintptr_t)(c->dst + (z * c->dslice + y) * c->dpitch),
                        (const void *)(uintptr_t)(c->src + (z * c->sslice + y) * c->spitch), (size_t)c->width);
        break;
    }
    case OP_MEMSET: {
        fc_op_check(op);
        const struct fc_memset *m = &op->u.ms;
        for (uint64_t y = 0; y < m->height; y++) {
            uint8_t *row = (uint8_t *)(uintptr_t)(m->dst + y * m->pitch);
            if (m->elem == 1) {
                memset(row, (int)(m->value & 0xff), (size_t)m->width);
            } else if (m->elem == 2) {
                uint16_t v = (uint16_t)m->value;
                for (uint64_t x = 0; x < m->width; x++)
                    memcpy(row + x * 2, &v, 2);
            } else {
                uint32_t v = m->value;
                for (uint64_t x = 0; x < m->width; x++)
                    memcpy(row + x * 4, &v, 4);
            }
        }
        break;
    }
    case OP_HOSTFN: {
        /* The driver runs a context's host functions on one thread of its own: one at a time, whatever
         * their streams (a function that blocks holds up every other stream's). */
        static pthread_mutex_t hostfn_thread = PTHREAD_MUTEX_INITIALIZER;
        fc_order_release(); /* it may wait for anything (cumuxd's waits for its client) */
        pthread_mutex_lock(&hostfn_thread);
        op->u.h.fn(op->u.h.data);
        pthread_mutex_unlock(&hostfn_thread);
        break;
    }
    case OP_RECORD: {
        struct fc_event *e = op->u.rec.ev;
        pthread_mutex_lock(&ev_mu);
        if (op->u.rec.gen >= e->time_gen) {
            e->time_gen = op->u.rec.gen;
            e->time_ns = now_ns();
        }
        pthread_mutex_unlock(&ev_mu);
        if (op->u.rec.ipc)
            ipc_complete(e->sh, op->u.rec.ipc);
        break;
    }
    case OP_WAIT:
        if (op->u.wait.s)
            stream_wait(op->u.wait.s, op->u.wait.seq);
        else
            ipc_wait(op->u.wait.ipc_ev->sh, op->u.wait.seq);
        break;
    case OP_FREE:
        if (op->u.free_ptr)
            fc_mem_release(op->u.free_ptr);
        break;
    case OP_COND:
        fc_cond_op_run(op);
        break;
    case OP_GRAPH:
        /* The nodes in an order that respects every dependency (made at instantiation). */
        fc_cond_launch_defaults(op);
        for (size_t i = 0; i < op->u.graph.n; i++)
            if (op->u.graph.ops[i])
                fc_op_run(op->u.graph.ops[i]);
        break;
    case OP_MEMOP:
        fc_op_check(op); /* as for copies: the memory may have gone since the call or the node was made */
        if (op->u.mem.op == CU_STREAM_MEM_OP_WRITE_VALUE_64 || op->u.mem.op == CU_STREAM_MEM_OP_WRITE_VALUE_32)
            fc_write_value(op->u.mem.addr, op->u.mem.value, op->u.mem.op == CU_STREAM_MEM_OP_WRITE_VALUE_64);
        else if (op->u.mem.op != CU_STREAM_MEM_OP_BARRIER)
            fc_wait_value(op->u.mem.addr, op->u.mem.value, op->u.mem.op == CU_STREAM_MEM_OP_WAIT_VALUE_64,
                          op->u.mem.flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH);
        break;
    case OP_EMPTY:
    case OP_GMEM: /* the memory exists as long as its graph */
    case OP_EVENT_NODE: /* made a record or a wait at launch; one left is a graph never launched as such */
        break;
    }
}

/* ---------------------------------------------------------------- dispatch order
 * A GPU finishes short work in about the order it was submitted, whatever the stream: programs rely on
 * it without knowing (a synchronous memset on the legacy stream, then a kernel on a non-blocking
 * stream). With a thread per stream the fake would run such work at the same time, for as long as its
 * CPU copy takes. So an op at the head of its stream starts only when no op with an earlier ticket is
 * at the head of another stream or running there, unless that one has let go: it sleeps (spin kernels),
 * runs a host function, or is a kernel (or graph) that has run for longer than ORDER_GRACE_NS (then the
 * two overlap, as long kernels on a GPU do). Copies and memsets, a thousand times slower here than on a
 * GPU, hold later work back until they are done. Waits for events are never on the list. */
#define ORDER_GRACE_NS 2000000ull
/* Hundreds of streams may wait at once (a storm of clients): the list is kept in ticket order, a waiter
 * sleeps until the one change that can let it go (or the grace of the kernel before it runs out), and
 * each change wakes only the waiters it can let go, not all of them. */

static pthread_mutex_t ord_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_op *ord_head, *ord_tail;
static _Atomic uint64_t next_ticket;
static _Thread_local struct fc_op *ord_current;

/* CUMUX_FAKE_ORDER=0 turns the dispatch order off: streams then run independently (the fuzzer's choice,
 * for speed; it has no program relying on that order). */
static bool ord_enabled(void)
{
    static _Atomic int on = -1;
    int v = atomic_load(&on);
    if (v < 0) {
        const char *e = getenv("CUMUX_FAKE_ORDER");
        v = !(e && !strcmp(e, "0"));
        atomic_store(&on, v);
    }
    return v;
}

static bool ord_graceable(const struct fc_op *e)
{
    return (e->kind == OP_KERNEL || e->kind == OP_GRAPH) && e->ord_start;
}

/* Whether e still holds back every later ticket at time now. */
static bool ord_holds(const struct fc_op *e, uint64_t now)
{
    return !e->ord_released && !(ord_graceable(e) && now - e->ord_start > ORDER_GRACE_NS);
}

/* After a change at the front of the list: wake the waiters it may let go, that is those before the
 * first op that holds the rest back for other than a kernel's grace (that one too, if it waits).
 * Caller holds ord_mu. */
static void ord_kick(void)
{
    uint64_t now = now_ns();
    for (struct fc_op *e = ord_head; e; e = e->ord_next) {
        if (e->ord_wake)
            pthread_cond_signal(e->ord_wake);
        if (ord_holds(e, now) && !ord_graceable(e))
            break;
    }
}

static void ord_insert(struct fc_op *op)
{
    if (op->kind == OP_WAIT || !ord_enabled())
        return;
    pthread_mutex_lock(&ord_mu);
    /* Mostly the newest ticket; an op that became its stream's head late goes back to its place. */
    struct fc_op *after = ord_tail;
    while (after && after->ticket > op->ticket)
        after = after->ord_prev;
    op->ord_prev = after;
    op->ord_next = after ? after->ord_next : ord_head;
    if (op->ord_next)
        op->ord_next->ord_prev = op;
    else
        ord_tail = op;
    if (after)
        after->ord_next = op;
    else
        ord_head = op;
    op->ord_in = true;
    op->ord_wake = NULL;
    pthread_mutex_unlock(&ord_mu);
}

static void ord_remove(struct fc_op *op)
{
    pthread_mutex_lock(&ord_mu);
    if (op->ord_in) {
        if (op->ord_prev)
            op->ord_prev->ord_next = op->ord_next;
        else
            ord_head = op->ord_next;
        if (op->ord_next)
            op->ord_next->ord_prev = op->ord_prev;
        else
            ord_tail = op->ord_prev;
        op->ord_in = false;
        ord_kick();
    }
    pthread_mutex_unlock(&ord_mu);
}

void fc_order_release(void)
{
    struct fc_op *op = ord_current;
    if (!op)
        return;
    pthread_mutex_lock(&ord_mu);
    op->ord_released = true;
    ord_kick();
    pthread_mutex_unlock(&ord_mu);
}

static void ord_wait_turn(struct fc_op *op)
{
    pthread_cond_t wake;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&ord_mu);
    op->ord_wake = &wake;
    for (;;) {
        uint64_t now = now_ns();
        const struct fc_op *blocker = NULL;
        for (const struct fc_op *e = ord_head; e && e != op && !blocker; e = e->ord_next)
            if (ord_holds(e, now))
                blocker = e;
        if (!blocker)
            break;
        if (!ord_graceable(blocker)) {
            pthread_cond_wait(&wake, &ord_mu);
            continue;
        }
        uint64_t until_ns = blocker->ord_start + ORDER_GRACE_NS + 1;
        struct timespec until = {(time_t)(until_ns / 1000000000u), (long)(until_ns % 1000000000u)};
        pthread_cond_timedwait(&wake, &ord_mu, &until);
    }
    op->ord_wake = NULL;
    op->ord_start = now_ns();
    if (ord_graceable(op))
        ord_kick(); /* those behind it now wait for its grace, not for its end */
    pthread_mutex_unlock(&ord_mu);
    pthread_cond_destroy(&wake);
}

/* ---------------------------------------------------------------- streams */

static void stream_ref(struct fc_stream *s)
{
    pthread_mutex_lock(&all_mu);
    s->refs++;
    pthread_mutex_unlock(&all_mu);
}

static void stream_unref(struct fc_stream *s)
{
    pthread_mutex_lock(&all_mu);
    if (--s->refs > 0) {
        pthread_mutex_unlock(&all_mu);
        return;
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        all_streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&all_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->cdeps);
    free(s);
}

/* A stream's executor runs its queue and ends after EXECUTOR_IDLE_MS without work; the next op starts
 * another. A thread per stream for the stream's whole life made a kill storm's server (128 clients with
 * their streams) hold some 1,300 idle threads, 5.7 GB under AddressSanitizer. The executor's reference
 * to the stream is the stream's while no thread runs: whoever ends last, the executor at closing or
 * cuStreamDestroy on a stream with none, drops it. */
#define EXECUTOR_IDLE_MS 50

/* One op, in its turn; a fault in it (fc_fault_env) marks the stream. */
static void executor_run(struct fc_stream *s, struct fc_op *op)
{
    if (op->ord_in)
        ord_wait_turn(op);
    ord_current = op;
    fc_running_sms = s->green ? &s->sms : NULL;
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1) == 0) {
        fc_fault_env = &jb;
        fc_op_run(op);
    } else {
        atomic_store(&s->faulted, 1);
    }
    fc_fault_env = NULL;
    ord_current = NULL;
}

static void *executor(void *arg)
{
    struct fc_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->closing) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += EXECUTOR_IDLE_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT && !s->head && !s->closing) {
                s->running = false; /* idle: the next enqueue starts another */
                pthread_mutex_unlock(&s->mu);
                return NULL;
            }
        }
        struct fc_op *op = s->head;
        if (!op)
            break;
        pthread_mutex_unlock(&s->mu);
        executor_run(s, op);
        /* What it held goes before it counts as done: a synchronize that returns must find, say, the graph
         * memory of a launch released (a fuzzing run took the moment between for a leak of the server's). */
        op_release(op);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        /* The next op takes its place in the order before this one leaves it: no later op of another
         * stream may slip in between. */
        if (s->head)
            ord_insert(s->head);
        else
            s->tail = NULL;
        atomic_store(&s->completed, op->seq);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        ord_remove(op);
        free(op);
        pthread_mutex_lock(&s->mu);
    }
    s->running = false;
    pthread_mutex_unlock(&s->mu);
    stream_unref(s);
    return NULL;
}

/* Under s->mu, with work queued and no executor: start one. A fake that cannot run queued work cannot go
 * on (its callers would wait forever), so it says why and stops. */
static void executor_start(struct fc_stream *s)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 1 << 20);
    pthread_t t;
    int rc = EAGAIN;
    for (int tries = 0; tries < 100 && rc != 0; tries++) {
        rc = pthread_create(&t, &a, executor, s);
        if (rc != 0) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    pthread_attr_destroy(&a);
    if (rc != 0) {
        fprintf(stderr, "fakecuda: cannot start a stream's executor thread (%s)\n", strerror(rc));
        abort();
    }
    s->running = true;
}

static struct fc_stream *stream_new(unsigned flags, int priority)
{
    struct fc_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->magic = FC_MAGIC_STREAM;
    s->flags = flags;
    s->priority = priority;
    s->refs = 2; /* its user and its executor */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&all_mu);
    s->next = all_streams;
    if (all_streams)
        all_streams->prev = s;
    all_streams = s;
    pthread_mutex_unlock(&all_mu);
    return s;
}

/* The NULL stream (and CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) of a program that uses the fake directly:
 * one ordinary stream. cumuxd never uses it. */
static struct fc_stream *default_stream;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static void default_init(void)
{
    default_stream = stream_new(0, 0);
}

static struct fc_stream *stream_get(CUstream h)
{
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        pthread_once(&default_once, default_init);
        return default_stream;
    }
    struct fc_stream *s = (struct fc_stream *)h;
    return s->magic == FC_MAGIC_STREAM ? s : NULL;
}

/* Queue an op; its seq. A record on an idle stream is complete at once (*done set, the op not queued,
 * the caller frees it): nothing is before it. */
static uint64_t enqueue(struct fc_stream *s, struct fc_op *op, bool *done)
{
    pthread_mutex_lock(&s->mu);
    uint64_t seq = op->seq = ++s->submitted; /* the op is the executor's once the lock is dropped */
    op->ticket = atomic_fetch_add(&next_ticket, 1) + 1;
    op->next = NULL;
    if (done && op->kind == OP_RECORD && !s->head) {
        atomic_store(&s->completed, seq);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        *done = true;
        return seq;
    }
    if (s->tail) {
        s->tail->next = op;
    } else {
        s->head = op;
        ord_insert(op); /* now, not when the executor wakes: its place in the order is taken at once */
    }
    s->tail = op;
    if (!s->running)
        executor_start(s);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}

static uint64_t submitted(struct fc_stream *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t v = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return v;
}

/* Capture: the op becomes a node after the stream's current dependencies. Caller holds fc_graph_mu. */
static CUresult capture_op(struct fc_stream *s, struct fc_op *op)
{
    struct fc_capture *cap = s->cap;
    if (op->kind != OP_KERNEL && op->kind != OP_COPY && op->kind != OP_MEMSET && op->kind != OP_HOSTFN &&
        op->kind != OP_GMEM) {
        fc_op_free(op);
        cap->invalid = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    struct fc_gnode *node;
    CUresult r = fc_graph_add(cap->g, s->cdeps, s->ncdeps, op, &node);
    if (r != CUDA_SUCCESS) {
        cap->invalid = true;
        return r;
    }
    if (s->capdeps < 1) {
        struct fc_gnode **d = realloc(s->cdeps, 8 * sizeof *d);
        if (!d) {
            cap->invalid = true;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s->cdeps = d;
        s->capdeps = 8;
    }
    s->cdeps[0] = node;
    s->ncdeps = 1;
    return CUDA_SUCCESS;
}

CUresult fc_submit(CUstream hs, struct fc_op *op)
{
    struct fc_stream *s = stream_get(hs);
    if (!s) {
        fc_op_free(op);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fc_op_check(op); /* what the call names must exist when it is made */
    pthread_mutex_lock(&fc_graph_mu);
    if (s->cap) {
        CUresult r = capture_op(s, op);
        pthread_mutex_unlock(&fc_graph_mu);
        return r;
    }
    enqueue(s, op, NULL);
    pthread_mutex_unlock(&fc_graph_mu);
    return CUDA_SUCCESS;
}

CUresult fc_stream_usable(CUstream hs)
{
    struct fc_stream *s = stream_get(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&fc_graph_mu);
    if (s->cap) {
        s->cap->invalid = true;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

void fc_drain(void)
{
    pthread_mutex_lock(&all_mu);
    size_t n = 0;
    for (struct fc_stream *s = all_streams; s; s = s->next)
        n++;
    struct fc_stream **v = calloc(n ? n : 1, sizeof *v);
    uint64_t *target = calloc(n ? n : 1, sizeof *target);
    if (!v || !target) {
        pthread_mutex_unlock(&all_mu);
        free(v);
        free(target);
        return;
    }
    size_t i = 0;
    for (struct fc_stream *s = all_streams; s; s = s->next, i++) {
        s->refs++;
        v[i] = s;
        target[i] = submitted(s);
    }
    pthread_mutex_unlock(&all_mu);
    for (i = 0; i < n; i++) {
        stream_wait(v[i], target[i]);
        stream_unref(v[i]);
    }
    free(v);
    free(target);
}

CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority)
{
    CHECK_RET(fc_check_init());
    if (!out || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    struct fc_stream *s = stream_new(flags, priority);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&fc_stats.streams, 1);
    *out = (CUstream)s;
    return CUDA_SUCCESS;
}

_Thread_local const struct fc_sms *fc_running_sms;

/* Before the stream's first op: the op's submission (under the stream's lock) orders it before the run. */
void fc_stream_set_sms(CUstream hs, const struct fc_sms *sms)
{
    struct fc_stream *s = (struct fc_stream *)hs;
    s->sms = *sms;
    s->green = true;
}

bool fc_stream_in_green(CUstream hs)
{
    struct fc_stream *s = hs ? stream_get(hs) : NULL;
    return s && s->green;
}

CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    return cuStreamCreateWithPriority(out, flags, 0);
}

CUresult cuStreamDestroy(CUstream hs)
{
    CHECK_RET(fc_check_init());
    struct fc_stream *s = stream_get(hs);
    if (!s || s == default_stream)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fc_graph_mu);
    if (s->cap)
        s->cap->invalid = true;
    pthread_mutex_unlock(&fc_graph_mu);
    /* As in CUDA, work already queued still runs; the handle is dead at once. */
    s->magic = FC_MAGIC_DEAD;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    bool idle = !s->running; /* no executor to drop its reference: it is dropped here */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_sub(&fc_stats.streams, 1);
    if (idle)
        stream_unref(s);
    stream_unref(s);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hs)
{
    CHECK_RET(fc_check_init());
    CHECK_RET(fc_stream_usable(hs));
    struct fc_stream *s = stream_get(hs);
    stream_wait(s, submitted(s));
    if (atomic_exchange(&s->faulted, 0))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    return fc_check_init(); /* a fatal fault while it waited */
}

CUresult cuStreamQuery(CUstream hs)
{
    CHECK_RET(fc_check_init());
    CHECK_RET(fc_stream_usable(hs));
    struct fc_stream *s = stream_get(hs);
    if (atomic_load(&s->completed) < submitted(s))
        return CUDA_ERROR_NOT_READY;
    return fc_check_init();
}

/* ---------------------------------------------------------------- capture */

static struct fc_capture *capture_find(uint64_t id)
{
    for (struct fc_capture *c = captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static int capture_add_member(struct fc_capture *cap, struct fc_stream *s)
{
    struct fc_stream **m = realloc(cap->members, (cap->nmembers + 1) * sizeof *m);
    if (!m)
        return -1;
    cap->members = m;
    m[cap->nmembers++] = s;
    stream_ref(s);
    s->cap = cap;
    s->ncdeps = 0;
    return 0;
}

static int set_deps(struct fc_stream *s, struct fc_gnode *const *nodes, size_t n, bool merge)
{
    size_t base = merge ? s->ncdeps : 0;
    if (base + n > s->capdeps) {
        size_t cap = base + n + 8;
        struct fc_gnode **d = realloc(s->cdeps, cap * sizeof *d);
        if (!d)
            return -1;
        s->cdeps = d;
        s->capdeps = cap;
    }
    size_t k = base;
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        for (size_t j = 0; j < k; j++)
            dup |= s->cdeps[j] == nodes[i];
        if (!dup)
            s->cdeps[k++] = nodes[i];
    }
    s->ncdeps = k;
    return 0;
}

/* The stream a capture may begin on (not the NULL stream), in a valid mode. */
static CUresult capture_start_stream(CUstream hs, CUstreamCaptureMode mode, struct fc_stream **out)
{
    CHECK_RET(fc_check_init());
    struct fc_stream *s = stream_get(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s == default_stream)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    *out = s;
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream hs, CUstreamCaptureMode mode)
{
    struct fc_stream *s;
    CHECK_RET(capture_start_stream(hs, mode, &s));
    pthread_mutex_lock(&fc_graph_mu);
    CUresult r = CUDA_SUCCESS;
    struct fc_capture *cap = NULL;
    if (s->cap)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (!(cap = calloc(1, sizeof *cap)) || !(cap->g = fc_graph_new()))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        cap->id = next_capture_id++;
        cap->origin = s;
        cap->mode = mode;
        cap->thread = pthread_self();
        if (capture_add_member(cap, s) < 0) {
            fc_graph_free(cap->g);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            cap->next = captures;
            captures = cap;
        }
    }
    if (r != CUDA_SUCCESS)
        free(cap);
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

/* A capture into the caller's graph, after the given nodes of it. */
CUresult cuStreamBeginCaptureToGraph(CUstream hs, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t n, CUstreamCaptureMode mode)
{
    (void)edges;
    struct fc_stream *s;
    CHECK_RET(capture_start_stream(hs, mode, &s));
    if (n && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = fc_graph_of(hg);
    CUresult r = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (!fc_node_of(deps[i], g))
            r = CUDA_ERROR_INVALID_VALUE;
    struct fc_capture *cap = NULL;
    if (r == CUDA_SUCCESS && s->cap)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (r == CUDA_SUCCESS && !(cap = calloc(1, sizeof *cap)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        *cap = (struct fc_capture){.id = next_capture_id++, .g = g, .into = true, .origin = s, .mode = mode,
                                   .thread = pthread_self()};
        if (capture_add_member(cap, s) < 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            free(cap);
        } else if (set_deps(s, (struct fc_gnode *const *)deps, n, false) < 0) { /* after: joining clears them */
            r = CUDA_ERROR_OUT_OF_MEMORY;
            s->cap = NULL;
            stream_unref(s);
            free(cap->members);
            free(cap);
        } else {
            cap->next = captures;
            captures = cap;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

/* The stream behind hs for the capture calls that answer through out: a bad handle is named before a
 * missing out. */
static CUresult capture_stream(CUstream hs, const void *out, struct fc_stream **s)
{
    CHECK_RET(fc_check_init());
    *s = stream_get(hs);
    if (!*s)
        return CUDA_ERROR_INVALID_HANDLE;
    return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuStreamEndCapture(CUstream hs, CUgraph *out)
{
    struct fc_stream *s;
    CHECK_RET(capture_stream(hs, out, &s));
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_capture *cap = s->cap;
    if (!cap) {
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (cap->origin != s) {
        cap->invalid = true;
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    for (struct fc_capture **p = &captures; *p; p = &(*p)->next) {
        if (*p == cap) {
            *p = cap->next;
            break;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    for (size_t i = 0; i < cap->nmembers; i++) {
        pthread_mutex_lock(&fc_graph_mu);
        cap->members[i]->cap = NULL;
        cap->members[i]->ncdeps = 0;
        pthread_mutex_unlock(&fc_graph_mu);
        stream_unref(cap->members[i]);
    }
    free(cap->members);
    CUresult r = CUDA_SUCCESS;
    if (cap->invalid) {
        if (!cap->into)
            fc_graph_free(cap->g);
        *out = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *out = (CUgraph)cap->g;
    }
    free(cap);
    return r;
}

/* cuStreamIsCapturing is cuStreamGetCaptureInfo that asks for the status alone. */
static CUresult capture_info(CUstream hs, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    struct fc_stream *s;
    CHECK_RET(capture_stream(hs, st, &s));
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_capture *cap = s->cap;
    *st = !cap ? CU_STREAM_CAPTURE_STATUS_NONE
               : cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (cap && id)
        *id = cap->id;
    if (cap && graph)
        *graph = (CUgraph)cap->g;
    if (cap && deps)
        *deps = (const CUgraphNode *)s->cdeps;
    if (cap && edges)
        *edges = NULL;
    if (cap && ndeps)
        *ndeps = s->ncdeps;
    pthread_mutex_unlock(&fc_graph_mu);
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hs, CUstreamCaptureStatus *st)
{
    return capture_info(hs, st, NULL, NULL, NULL, NULL, NULL);
}

CUresult cuStreamGetCaptureInfo(CUstream hs, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(hs, st, id, graph, deps, edges, ndeps);
}

CUresult cuStreamUpdateCaptureDependencies(CUstream hs, CUgraphNode *nodes, const CUgraphEdgeData *edges, size_t n,
                                           unsigned int flags)
{
    CHECK_RET(fc_check_init());
    struct fc_stream *s = stream_get(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((n && !nodes) || edges ||
        (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (!nodes[i])
            return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    CUresult r = CUDA_SUCCESS;
    if (!s->cap || s->cap->invalid)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (set_deps(s, (struct fc_gnode *const *)nodes, n, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

/* ---------------------------------------------------------------- events */

static struct fc_event *event_get(CUevent h)
{
    struct fc_event *e = (struct fc_event *)h;
    return e && e->magic == FC_MAGIC_EVENT ? e : NULL;
}

/* The event behind h, after the init check every entry point makes. */
static CUresult event_arg(CUevent h, struct fc_event **out)
{
    CHECK_RET(fc_check_init());
    *out = event_get(h);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static void event_unref(struct fc_event *e)
{
    if (atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    if (e->s)
        stream_unref(e->s);
    if (e->sh) {
        munmap(e->sh, sizeof *e->sh);
        if (e->sh_owner)
            shm_unlink(e->sh_name);
    }
    free(e->cnodes);
    free(e);
}

/* An interprocess event's shared state, made under a random name in /dev/shm. */
static bool ipc_state_make(struct fc_event *e)
{
    uint64_t r;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        return false;
    snprintf(e->sh_name, sizeof e->sh_name, "/fakecuda-ipc-event-%d-%016llx", (int)getpid(), (unsigned long long)r);
    int fd = shm_open(e->sh_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    void *m = ftruncate(fd, sizeof *e->sh) == 0
                  ? mmap(NULL, sizeof *e->sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(e->sh_name);
        return false;
    }
    e->sh = m; /* zeros: never recorded */
    e->sh_owner = true;
    return true;
}

CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    if (!out || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FC_MAGIC_EVENT;
    e->flags = flags;
    atomic_store(&e->refs, 1);
    if ((flags & CU_EVENT_INTERPROCESS) && !ipc_state_make(e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&fc_stats.events, 1);
    *out = (CUevent)e;
    return CUDA_SUCCESS;
}

/* The handle of an interprocess event: the name of its shared state. */
static const char ipc_event_magic[8] = "FCIPCEV";
_Static_assert(8 + sizeof(((struct fc_event *)0)->sh_name) <= sizeof(CUipcEventHandle), "fits");

CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent he)
{
    struct fc_event *e;
    CHECK_RET(event_arg(he, &e));
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (!e->sh)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, ipc_event_magic, sizeof ipc_event_magic);
    memcpy(handle->reserved + sizeof ipc_event_magic, e->sh_name, sizeof e->sh_name);
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *out, CUipcEventHandle handle)
{
    CHECK_RET(fc_check_init());
    if (!out || memcmp(handle.reserved, ipc_event_magic, sizeof ipc_event_magic))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(e->sh_name, handle.reserved + sizeof ipc_event_magic, sizeof e->sh_name - 1);
    int fd = e->sh_name[0] == '/' ? shm_open(e->sh_name, O_RDWR | O_CLOEXEC, 0) : -1;
    void *m = fd >= 0 ? mmap(NULL, sizeof *e->sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    if (m == MAP_FAILED) {
        free(e);
        return CUDA_ERROR_INVALID_VALUE;
    }
    e->sh = m;
    e->magic = FC_MAGIC_EVENT;
    e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    atomic_store(&e->refs, 1);
    atomic_fetch_add(&fc_stats.events, 1);
    *out = (CUevent)e;
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent h)
{
    struct fc_event *e;
    CHECK_RET(event_arg(h, &e));
    e->magic = FC_MAGIC_DEAD; /* records still queued finish with it; the handle is dead now */
    atomic_fetch_sub(&fc_stats.events, 1);
    event_unref(e);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent he, CUstream hs)
{
    CHECK_RET(fc_check_init());
    struct fc_event *e = event_get(he);
    struct fc_stream *s = stream_get(hs);
    if (!e || !s)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fc_graph_mu);
    if (s->cap) {
        /* In a capture: the event names the stream's current nodes, for streams that wait on it. */
        CUresult r = CUDA_SUCCESS;
        struct fc_gnode **n = malloc((s->ncdeps ? s->ncdeps : 1) * sizeof *n);
        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            memcpy(n, s->cdeps, s->ncdeps * sizeof *n);
            free(e->cnodes);
            e->cnodes = n;
            e->ncnodes = s->ncdeps;
            e->cap_id = s->cap->id;
        }
        pthread_mutex_unlock(&fc_graph_mu);
        return r;
    }
    struct fc_op *op = fc_op_new(OP_RECORD, "cuEventRecord");
    if (!op) {
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&e->refs, 1);
    op->u.rec.ev = e;
    stream_ref(s);
    pthread_mutex_lock(&ev_mu);
    e->cap_id = 0;
    op->u.rec.gen = ++e->gen;
    op->u.rec.ipc = e->sh ? atomic_fetch_add(&e->sh->issued, 1) + 1 : 0;
    struct fc_stream *old = e->s;
    e->s = s;
    bool done = false;
    e->seq = enqueue(s, op, &done);
    if (done) {
        e->time_gen = op->u.rec.gen;
        e->time_ns = now_ns();
        if (op->u.rec.ipc)
            ipc_complete(e->sh, op->u.rec.ipc);
    }
    pthread_mutex_unlock(&ev_mu);
    pthread_mutex_unlock(&fc_graph_mu);
    if (done)
        fc_op_free(op);
    if (old)
        stream_unref(old);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- event nodes of graphs */

CUresult fc_event_node_op(CUevent he, bool wait, struct fc_op **out)
{
    struct fc_event *e = event_get(he);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_EVENT_NODE, wait ? "graph event wait node" : "graph event record node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&e->refs, 1);
    op->u.evn.ev = e;
    op->u.evn.wait = wait;
    *out = op;
    return CUDA_SUCCESS;
}

CUresult fc_event_node_set(struct fc_op *op, CUevent he)
{
    struct fc_event *e = event_get(he);
    if (!e || op->kind != OP_EVENT_NODE)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add(&e->refs, 1);
    event_unref(op->u.evn.ev);
    op->u.evn.ev = e;
    return CUDA_SUCCESS;
}

CUevent fc_event_node_event(const struct fc_op *op)
{
    return op->kind == OP_EVENT_NODE ? (CUevent)op->u.evn.ev : NULL;
}

static size_t count_records(const struct fc_op *op)
{
    size_t n = 0;
    for (size_t i = 0; i < op->u.graph.n; i++) {
        const struct fc_op *o = op->u.graph.ops[i];
        n += o && o->kind == OP_GRAPH ? count_records(o) : o && o->kind == OP_EVENT_NODE && !o->u.evn.wait;
    }
    return n;
}

/* Waits become waits for the events' last records; records get their generation, and their events go
 * into recs with a reference of the caller's (the queued op may be gone when they are placed). ev_mu held. */
static void resolve_event_nodes(struct fc_op *op, struct fc_event **recs, size_t *nrecs)
{
    for (size_t i = 0; i < op->u.graph.n; i++) {
        struct fc_op *o = op->u.graph.ops[i];
        if (o && o->kind == OP_GRAPH) {
            resolve_event_nodes(o, recs, nrecs);
        } else if (o && o->kind == OP_EVENT_NODE && o->u.evn.wait) {
            struct fc_event *e = o->u.evn.ev;
            if (e->s) {
                stream_ref(e->s);
                o->kind = OP_WAIT;
                o->u.wait.s = e->s;
                o->u.wait.seq = e->seq;
                o->u.wait.ipc_ev = NULL;
            } else {
                o->kind = OP_EMPTY; /* never recorded: nothing to wait for */
            }
            event_unref(e);
        } else if (o && o->kind == OP_EVENT_NODE) {
            struct fc_event *e = o->u.evn.ev; /* the node's reference passes to the record */
            o->kind = OP_RECORD;
            o->u.rec.ev = e;
            o->u.rec.gen = ++e->gen;
            o->u.rec.ipc = 0; /* graphs' records of interprocess events are this process's alone */
            atomic_fetch_add(&e->refs, 1);
            recs[(*nrecs)++] = e;
        }
    }
}

CUresult fc_submit_graph(CUstream hs, struct fc_op *op)
{
    struct fc_stream *s = stream_get(hs);
    if (!s) {
        fc_op_free(op);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* No check here, unlike fc_submit: a node's memory was checked when the node was made or changed (what the
     * server validated then), and may have been freed since, which only the client can have done: its nodes
     * then touch memory no longer its own, as a kernel with a stale pointer does (docs/security.md). On a GPU
     * a fault; here too, when the node runs (fc_op_run). */
    pthread_mutex_lock(&fc_graph_mu);
    if (s->cap) { /* a launch captured: its event nodes are resolved when the capture's graph is launched */
        CUresult r = capture_op(s, op);
        pthread_mutex_unlock(&fc_graph_mu);
        return r;
    }
    size_t n = count_records(op), nrecs = 0;
    struct fc_event **recs = calloc(n ? n : 1, sizeof *recs);
    struct fc_stream **old = calloc(n ? n : 1, sizeof *old);
    if (!recs || !old) {
        pthread_mutex_unlock(&fc_graph_mu);
        free(recs);
        free(old);
        fc_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&ev_mu);
    resolve_event_nodes(op, recs, &nrecs);
    uint64_t seq = enqueue(s, op, NULL); /* the op is the executor's from here */
    for (size_t i = 0; i < nrecs; i++) { /* each recorded event's position: the graph's end */
        old[i] = recs[i]->s;
        stream_ref(s);
        recs[i]->s = s;
        recs[i]->seq = seq;
        recs[i]->cap_id = 0;
    }
    pthread_mutex_unlock(&ev_mu);
    pthread_mutex_unlock(&fc_graph_mu);
    for (size_t i = 0; i < nrecs; i++) {
        if (old[i])
            stream_unref(old[i]);
        event_unref(recs[i]);
    }
    free(recs);
    free(old);
    return CUDA_SUCCESS;
}

CUresult cuEventRecordWithFlags(CUevent he, CUstream hs, unsigned int flags)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    return cuEventRecord(he, hs);
}

/* The stream and position an event waits for (a reference on the stream), or NULL if never recorded. */
static struct fc_stream *event_position(struct fc_event *e, uint64_t *seq)
{
    pthread_mutex_lock(&ev_mu);
    struct fc_stream *s = e->s;
    *seq = e->seq;
    if (s)
        stream_ref(s);
    pthread_mutex_unlock(&ev_mu);
    return s;
}

CUresult cuEventQuery(CUevent he)
{
    struct fc_event *e;
    CHECK_RET(event_arg(he, &e));
    CHECK_RET(capture_prohibits());
    if (e->sh) /* any process's last record */
        return atomic_load(&e->sh->completed) >= atomic_load(&e->sh->issued) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    uint64_t seq;
    struct fc_stream *s = event_position(e, &seq);
    if (!s)
        return CUDA_SUCCESS;
    bool done = atomic_load(&s->completed) >= seq;
    stream_unref(s);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent he)
{
    struct fc_event *e;
    CHECK_RET(event_arg(he, &e));
    CHECK_RET(capture_prohibits());
    if (e->sh) {
        ipc_wait(e->sh, atomic_load(&e->sh->issued));
        return fc_check_init();
    }
    uint64_t seq;
    struct fc_stream *s = event_position(e, &seq);
    CUresult r = CUDA_SUCCESS;
    if (s) {
        stream_wait(s, seq);
        if (atomic_exchange(&s->faulted, 0))
            r = CUDA_ERROR_ILLEGAL_ADDRESS;
        stream_unref(s);
    }
    return r != CUDA_SUCCESS ? r : fc_check_init(); /* a fatal fault while it waited */
}

CUresult cuEventElapsedTime(float *ms, CUevent ha, CUevent hb)
{
    CHECK_RET(fc_check_init());
    struct fc_event *a = event_get(ha), *b = event_get(hb);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a || !b || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ev_mu);
    if (!a->s || !b->s)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (atomic_load(&a->s->completed) < a->seq || atomic_load(&b->s->completed) < b->seq)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
    pthread_mutex_unlock(&ev_mu);
    return r;
}

CUresult cuStreamWaitEvent(CUstream hs, CUevent he, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    struct fc_stream *s = stream_get(hs);
    struct fc_event *e = event_get(he);
    if (!s || !e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_capture *cap = e->cap_id ? capture_find(e->cap_id) : NULL;
    if (cap) {
        /* An event of a capture: the stream joins it (or, already in it, gains the event's nodes). */
        CUresult r = CUDA_SUCCESS;
        if (s->cap && s->cap != cap) {
            s->cap->invalid = cap->invalid = true;
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        } else if (!s->cap && capture_add_member(cap, s) < 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (set_deps(s, e->cnodes, e->ncnodes, true) < 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_mutex_unlock(&fc_graph_mu);
        return r;
    }
    if (s->cap) {
        /* Ordering on work outside the capture cannot be put into the graph. */
        s->cap->invalid = true;
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    if (e->sh) { /* any process's last record, polled on the stream */
        uint64_t n = atomic_load(&e->sh->issued);
        struct fc_op *op = atomic_load(&e->sh->completed) >= n ? NULL : fc_op_new(OP_WAIT, "cuStreamWaitEvent");
        if (op) {
            atomic_fetch_add(&e->refs, 1);
            op->u.wait.s = NULL;
            op->u.wait.seq = n;
            op->u.wait.ipc_ev = e;
            enqueue(s, op, NULL);
        }
        pthread_mutex_unlock(&fc_graph_mu);
        return op || atomic_load(&e->sh->completed) >= n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t seq;
    struct fc_stream *target = event_position(e, &seq);
    if (!target) { /* never recorded: nothing to wait for */
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_SUCCESS;
    }
    if (atomic_load(&target->completed) >= seq) { /* done already: nothing to wait for */
        pthread_mutex_unlock(&fc_graph_mu);
        stream_unref(target);
        return CUDA_SUCCESS;
    }
    struct fc_op *op = fc_op_new(OP_WAIT, "cuStreamWaitEvent");
    if (!op) {
        pthread_mutex_unlock(&fc_graph_mu);
        stream_unref(target);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.wait.s = target; /* the reference from event_position */
    op->u.wait.seq = seq;
    enqueue(s, op, NULL);
    pthread_mutex_unlock(&fc_graph_mu);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- copies and memsets */

CUresult fc_copy_validate(const struct fc_copy *c)
{
    if ((c->height > 1 || c->depth > 1) && (c->dpitch < c->width || c->spitch < c->width))
        return CUDA_ERROR_INVALID_VALUE;
    if (c->depth > 1 && (c->dslice < c->height || c->sslice < c->height))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult fc_memset_validate(const struct fc_memset *m)
{
    if (m->dst % m->elem)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->height > 1 && m->pitch < fc_mul_sat(m->width, m->elem))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult fc_submit_copy(const char *call, CUstream hs, const struct fc_copy *c)
{
    CHECK_RET(fc_check_init());
    CHECK_RET(fc_copy_validate(c));
    if (!c->width || !c->height || !c->depth)
        return stream_get(hs) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    struct fc_op *op = fc_op_new(OP_COPY, call);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.cp = *c;
    return fc_submit(hs, op);
}

static struct fc_copy copy_1d(CUmemorytype dt, uint64_t dst, CUmemorytype st, uint64_t src, size_t n)
{
    return (struct fc_copy){.dtype = dt, .stype = st, .dst = dst, .src = src, .dpitch = n, .spitch = n,
                            .dslice = 1, .sslice = 1, .width = n, .height = 1, .depth = 1};
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    struct fc_copy c = copy_1d(CU_MEMORYTYPE_DEVICE, dst, CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)src, n);
    return fc_submit_copy("cuMemcpyHtoDAsync", s, &c);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    struct fc_copy c = copy_1d(CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)dst, CU_MEMORYTYPE_DEVICE, src, n);
    return fc_submit_copy("cuMemcpyDtoHAsync", s, &c);
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    struct fc_copy c = copy_1d(CU_MEMORYTYPE_DEVICE, dst, CU_MEMORYTYPE_DEVICE, src, n);
    return fc_submit_copy("cuMemcpyDtoDAsync", s, &c);
}

/* A copy between two GPUs' memory: each side must be its context's GPU's (peer access is not needed for a
 * copy, as with the driver); then a copy like any other on the stream. */
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                           CUstream s)
{
    CHECK_RET(fc_check_init());
    int dd = fc_ctx_device(dst_ctx), sd = fc_ctx_device(src_ctx);
    if (dd < 0 || sd < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (n && (fc_mem_device(dst) != dd || fc_mem_device(src) != sd))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_copy c = copy_1d(CU_MEMORYTYPE_DEVICE, dst, CU_MEMORYTYPE_DEVICE, src, n);
    return fc_submit_copy("cuMemcpyPeerAsync", s, &c);
}

/* Memory type of one side; UNIFIED is decided by where the address lies. */
static CUmemorytype side_type(CUmemorytype t, uint64_t p)
{
    if (t == CU_MEMORYTYPE_UNIFIED)
        return fc_is_device_ptr(p) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return t;
}

CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p->srcMemoryType != CU_MEMORYTYPE_HOST && p->srcMemoryType != CU_MEMORYTYPE_DEVICE &&
         p->srcMemoryType != CU_MEMORYTYPE_UNIFIED) ||
        (p->dstMemoryType != CU_MEMORYTYPE_HOST && p->dstMemoryType != CU_MEMORYTYPE_DEVICE &&
         p->dstMemoryType != CU_MEMORYTYPE_UNIFIED))
        return CUDA_ERROR_INVALID_VALUE; /* arrays: not emulated */
    uint64_t src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->srcHost : p->srcDevice;
    uint64_t dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->dstHost : p->dstDevice;
    struct fc_copy c = {.stype = side_type(p->srcMemoryType, src), .dtype = side_type(p->dstMemoryType, dst),
                        .spitch = p->srcPitch, .dpitch = p->dstPitch, .sslice = 1, .dslice = 1,
                        .width = p->WidthInBytes, .height = p->Height, .depth = 1};
    /* The first byte touched: (X, Y) into the pitched region, with the arithmetic the hardware does. */
    c.src = src + p->srcY * p->srcPitch + p->srcXInBytes;
    c.dst = dst + p->dstY * p->dstPitch + p->dstXInBytes;
    return fc_submit_copy("cuMemcpy2DAsync", s, &c);
}

void fc_copy_from_3d(struct fc_copy *c, const CUDA_MEMCPY3D *p)
{
    uint64_t src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->srcHost : p->srcDevice;
    uint64_t dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)p->dstHost : p->dstDevice;
    *c = (struct fc_copy){.stype = side_type(p->srcMemoryType, src), .dtype = side_type(p->dstMemoryType, dst),
                          .spitch = p->srcPitch ? p->srcPitch : p->WidthInBytes,
                          .dpitch = p->dstPitch ? p->dstPitch : p->WidthInBytes,
                          .sslice = p->srcHeight ? p->srcHeight : p->Height,
                          .dslice = p->dstHeight ? p->dstHeight : p->Height, .width = p->WidthInBytes,
                          .height = p->Height, .depth = p->Depth};
    c->src = src + (p->srcZ * c->sslice + p->srcY) * c->spitch + p->srcXInBytes;
    c->dst = dst + (p->dstZ * c->dslice + p->dstY) * c->dpitch + p->dstXInBytes;
}

static CUresult submit_memset(const char *call, CUstream hs, uint64_t dst, uint64_t pitch, unsigned value,
                              unsigned elem, uint64_t width, uint64_t height)
{
    CHECK_RET(fc_check_init());
    struct fc_memset m = {.dst = dst, .pitch = pitch, .width = width, .height = height, .value = value, .elem = elem};
    CHECK_RET(fc_memset_validate(&m));
    if (!width || !height)
        return stream_get(hs) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    struct fc_op *op = fc_op_new(OP_MEMSET, call);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.ms = m;
    return fc_submit(hs, op);
}

CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return submit_memset("cuMemsetD8Async", s, d, n, v, 1, n, 1);
}

CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return submit_memset("cuMemsetD16Async", s, d, fc_mul_sat(n, 2), v, 2, n, 1);
}

CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return submit_memset("cuMemsetD32Async", s, d, fc_mul_sat(n, 4), v, 4, n, 1);
}

CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s)
{
    return submit_memset("cuMemsetD2D8Async", s, d, pitch, v, 1, w, h);
}

CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s)
{
    return submit_memset("cuMemsetD2D16Async", s, d, pitch, v, 2, w, h);
}

CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s)
{
    return submit_memset("cuMemsetD2D32Async", s, d, pitch, v, 4, w, h);
}

/* ---------------------------------------------------------------- host functions */

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    CHECK_RET(fc_check_init());
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_HOSTFN, "cuLaunchHostFunc");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.h.fn = fn; /* runs on the stream's executor thread, never the caller's */
    op->u.h.data = data;
    return fc_submit(s, op);
}

/* ---------------------------------------------------------------- stream memory operations */

CUresult cuStreamBatchMemOp_v2(CUstream hs, unsigned int count, CUstreamBatchMemOpParams *p, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    if (!count || !p || flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        unsigned kind = p[i].operation, f;
        uint64_t addr = 0, value = 0;
        switch (kind) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            addr = p[i].waitValue.address, f = p[i].waitValue.flags;
            value = kind == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? p[i].waitValue.value64 : p[i].waitValue.value;
            if ((f & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            addr = p[i].writeValue.address, f = p[i].writeValue.flags;
            value = kind == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? p[i].writeValue.value64 : p[i].writeValue.value;
            if (f & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            f = p[i].memoryBarrier.flags;
            break;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
        if (addr % memop_size(kind))
            return CUDA_ERROR_INVALID_VALUE;
        /* The H200's driver refuses waits and writes on pool memory (tools/probe_stream_memops.c). */
        if (kind != CU_STREAM_MEM_OP_BARRIER && fc_mem_stream_ordered(addr))
            return CUDA_ERROR_INVALID_VALUE;
        struct fc_op *op = fc_op_new(OP_MEMOP, "cuStreamBatchMemOp");
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.mem.op = kind, op->u.mem.flags = f, op->u.mem.addr = addr, op->u.mem.value = value;
        CHECK_RET(fc_submit(hs, op));
    }
    return CUDA_SUCCESS;
}
