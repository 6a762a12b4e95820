/* The gateway's side of a remote program (issue 45, docs/remote.md, common/mirror.h): in the child process
 * `cumux gateway` forks for the connection, a local client of the GPU's worker, as a shim is: its hello,
 * its channel page, its descriptors. What the relay says the program wrote goes into that page (the ring's
 * bytes at their positions, staging slots, host-function words, module images as files of our own); what
 * the server and the GPU write there (answers, the tail, staging slots it filled, marks, host functions it
 * posts) goes back as it changes. The worker validates every message as any client's: this process only
 * carries bytes, and trusts the relay with nothing (every index and length is checked here too, and a
 * position that is not the next is the end of the link). The link's end is the client's end: the worker
 * frees all it held, as for a killed program. */
#ifdef CUMUX_HAVE_NET
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/channel.h"
#include "common/frame.h"
#include "common/mirror.h"
#include "common/proto.h"
#include "common/sock.h"
#include "common/tls_link.h"
#include "cli/pinned_mirror.h"

/* A copy from the device to the program's memory that the worker fills the slots for, chunk by chunk. */
struct dtoh {
    uint64_t left, chunk; /* bytes still to come, and a chunk's bytes */
    uint32_t reply;       /* its reply slot: its answer ends it */
};
#define DTOH_QUEUE 64
#define GW_LOOK_RANGES 32 /* more copies' ranges at once than this: a look at all pinned memory */

struct gw {
    struct cumux_tls *t;
    pthread_mutex_t send_lock; /* the watcher and the printf thread both send */
    int sock;                  /* to the worker */
    struct cumux_shm *shm;
    uint64_t head; /* the ring's bytes written so far */
    struct watch *watch; /* the watcher's: what it last saw of the page */
    /* Staging slots: the state the relay's page has, as far as we know (under stage_lock). */
    pthread_mutex_t stage_lock;
    uint32_t known[CUMUX_STAGING_SLOTS];
    pthread_mutex_t dtoh_lock;
    struct dtoh dtoh[DTOH_QUEUE];
    unsigned dtoh_first, dtoh_n;
    int image_fd; /* the file being received (CUMUX_MIRROR_IMAGE), -1: none */
    struct pinned_set pinned;
    _Atomic uint64_t asked_ns; /* when the last message with a reply slot went to the worker */
    /* The kernels' printf output, from the worker's end of a pipe (-1: none, or it ended); read and sent
     * under out_lock by the printf thread as it comes and by the watcher before answers go (the worker
     * writes a synchronize's output before its answer: the program must have it when it goes on). */
    pthread_mutex_t out_lock;
    int out_fd;
    /* What the GPU may have written into pinned memory, for the watcher's looks (the spec's look=): where
     * a message that may write anywhere (a kernel) was the last, and the copies' and memsets' ranges, each
     * with its message's number; a look at answers covers them until an answered CTX_SYNC after them (all
     * the client's work before it is done, where the program made one context: a second one's work is
     * not the first's to wait for) or, for a synchronous copy, its own answer. Under look_lock. */
    pthread_mutex_t look_lock;
    struct gw_looks {
        uint64_t seq;     /* messages noted */
        uint64_t all_seq; /* the last look=all message's number, 0: none since an answered CTX_SYNC */
        struct gw_range {
            struct pinned_range r;
            uint64_t seq;
            uint32_t reply; /* its reply slot, CUMUX_NO_REPLY: one-way */
        } v[GW_LOOK_RANGES];
        unsigned n;
        uint64_t ctx_sync_seq[CUMUX_REPLY_SLOTS]; /* a CTX_SYNC's number by its reply slot, 0: none */
        unsigned contexts; /* CTX_CREATEs: with more than one, a CTX_SYNC covers only its own context's work */
    } looks;
    pthread_mutex_t alloc_lock; /* pending: our copy of a HOST_ALLOC's memory until its answer */
    struct {
        uint8_t *mem;
        uint64_t size;
    } pending[CUMUX_REPLY_SLOTS];
    _Atomic int done;
};

static int send_mirror(struct gw *g, uint32_t what, uint32_t index, uint64_t value, const void *data, size_t len)
{
    struct cumux_mirror_head h = {what, index, value};
    pthread_mutex_lock(&g->send_lock);
    int r = cumux_tls_send_frame(g->t, CUMUX_FRAME_MSG, &h, sizeof h, data, len);
    pthread_mutex_unlock(&g->send_lock);
    if (r < 0)
        atomic_store(&g->done, 1);
    return r;
}

/* ---- the relay's side into our page ---- */

/* What a message the worker is about to run may write of pinned memory (struct gw_looks). */
static void note_look(struct gw *g, const struct cumux_msg_hdr *h, const uint8_t *body, size_t len)
{
    struct gw_looks *l = &g->looks;
    enum cumux_op_look lk = h->op < CUMUX_OP_COUNT ? cumux_op_look(h->op) : CUMUX_LOOK_ALL;
    struct pinned_range two[2];
    int k = lk == CUMUX_LOOK_RANGE ? pinned_op_ranges(h->op, body, len, true, two) : 0;
    pthread_mutex_lock(&g->look_lock);
    uint64_t seq = ++l->seq;
    if (lk == CUMUX_LOOK_ALL || k < 0 || l->n + (unsigned)k > GW_LOOK_RANGES)
        l->all_seq = seq;
    else
        for (int i = 0; i < k; i++)
            l->v[l->n++] = (struct gw_range){two[i], seq, h->reply};
    if (h->op == CUMUX_OP_CTX_CREATE)
        l->contexts++;
    if (h->reply < CUMUX_REPLY_SLOTS)
        l->ctx_sync_seq[h->reply] = h->op == CUMUX_OP_CTX_SYNC && l->contexts <= 1 ? seq : 0;
    pthread_mutex_unlock(&g->look_lock);
    if (h->reply < CUMUX_REPLY_SLOTS)
        atomic_store(&g->asked_ns, cumux_now_ns());
}

/* The copies from the device the messages in ring bytes p[0, n) ask for, queued for the watcher; pinned
 * memory they free. */
static void note_messages(struct gw *g, const uint8_t *p, size_t n)
{
    for (size_t off = 0; off + sizeof(struct cumux_msg_hdr) <= n;) {
        struct cumux_msg_hdr h;
        memcpy(&h, p + off, sizeof h);
        if (h.size < sizeof h || h.size % 8 || h.size > n - off)
            return; /* malformed: the worker says so and ends the client */
        if (h.op == CUMUX_OP_COPY_DTOH_STAGED && h.size >= sizeof h + sizeof(struct cumux_copy_staged)) {
            struct cumux_copy_staged m;
            memcpy(&m, p + off + sizeof h, sizeof m);
            uint64_t chunk = m.width ? (m.width <= CUMUX_STAGING_BYTES ? (CUMUX_STAGING_BYTES / m.width) * m.width : 0)
                                     : CUMUX_STAGING_BYTES;
            pthread_mutex_lock(&g->dtoh_lock);
            if (g->dtoh_n < DTOH_QUEUE && chunk)
                g->dtoh[(g->dtoh_first + g->dtoh_n++) % DTOH_QUEUE] = (struct dtoh){m.size, chunk, h.reply};
            pthread_mutex_unlock(&g->dtoh_lock);
        }
        if (h.op == CUMUX_OP_HOST_FREE && h.size >= sizeof h + sizeof(struct cumux_mem_free)) {
            struct cumux_mem_free f;
            memcpy(&f, p + off + sizeof h, sizeof f);
            pinned_remove(&g->pinned, f.ptr);
        }
        note_look(g, &h, p + off + sizeof h, h.size - sizeof h);
        off += h.size;
    }
}

static int put_ring(struct gw *g, uint64_t pos, const uint8_t *p, size_t n)
{
    uint64_t at = pos % CUMUX_RING_BYTES;
    if (pos != g->head || n == 0 || n % 8 || n > CUMUX_RING_BYTES - at)
        return -1;
    /* Room: the relay's program had it in its own page, whose tail is ours, told; wait for the worker. */
    while (g->head + n - atomic_load(&g->shm->tail) > CUMUX_RING_BYTES) {
        if (atomic_load(&g->done))
            return -1;
        nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    memcpy(&g->shm->ring[at], p, n);
    note_messages(g, p, n);
    g->head += n;
    cumux_ring_commit(g->shm, (uint32_t)n); /* the head, and the worker's doorbell if it sleeps */
    return 0;
}

static void stage_set(struct gw *g, unsigned slot, uint32_t state)
{
    /* The state, then what we know: the watcher reads them the other way round (under the same lock). */
    atomic_store(&g->shm->stage_state[slot], state);
    g->known[slot] = state;
    atomic_fetch_add(&g->shm->stage_seq[slot], 1);
    cumux_futex_wake(&g->shm->stage_seq[slot], 1);
}

static int image_piece(struct gw *g, const uint8_t *p, size_t n, bool last)
{
    if (g->image_fd < 0 && (g->image_fd = memfd_create("cumux-remote-image", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        return -1;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(g->image_fd, p + off, n - off);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    if (!last)
        return 0;
    /* As the shim hands a descriptor: one the worker can seal (it takes no file that could change under it),
     * with a tag, just before the message (which comes next). */
    uint64_t tag = CUMUX_MAGIC;
    int r = lseek(g->image_fd, 0, SEEK_SET) == 0 ? cumux_sock_send(g->sock, &tag, sizeof tag, g->image_fd) : -1;
    close(g->image_fd);
    g->image_fd = -1;
    return r;
}

/* Our copy of pinned memory the program allocated: a memfd the worker maps and registers, as the shim's. */
static int pinned_new(struct gw *g, uint32_t slot, uint64_t size)
{
    if (slot >= CUMUX_REPLY_SLOTS || size == 0 || size > PINNED_MAX_BYTES)
        return -1;
    int fd = memfd_create("cumux-remote-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *mem = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    uint64_t tag = CUMUX_MAGIC;
    int r = mem != MAP_FAILED ? cumux_sock_send(g->sock, &tag, sizeof tag, fd) : -1;
    if (fd >= 0)
        close(fd);
    if (r < 0) {
        if (mem != MAP_FAILED)
            munmap(mem, size);
        return 0; /* no descriptor reaches the worker: it fails the HOST_ALLOC itself */
    }
    pthread_mutex_lock(&g->alloc_lock);
    if (g->pending[slot].mem)
        munmap(g->pending[slot].mem, g->pending[slot].size);
    g->pending[slot].mem = mem, g->pending[slot].size = size;
    pthread_mutex_unlock(&g->alloc_lock);
    return 0;
}

static int on_relay_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct gw *g = ctx;
    struct cumux_mirror_head h;
    if (kind == CUMUX_FRAME_BYE || kind != CUMUX_FRAME_MSG || len < sizeof h)
        return -1;
    memcpy(&h, p, sizeof h);
    p += sizeof h;
    len -= (uint32_t)sizeof h;
    switch (h.what) {
    case CUMUX_MIRROR_RING:
        return put_ring(g, h.value, p, len);
    case CUMUX_MIRROR_STAGE_DATA:
        if (h.index >= CUMUX_STAGING_SLOTS || len > CUMUX_STAGING_BYTES)
            return -1;
        pthread_mutex_lock(&g->stage_lock);
        memcpy(g->shm->staging[h.index], p, len);
        stage_set(g, h.index, CUMUX_STAGE_FULL);
        pthread_mutex_unlock(&g->stage_lock);
        return 0;
    case CUMUX_MIRROR_STAGE_FREE:
        if (h.index >= CUMUX_STAGING_SLOTS)
            return -1;
        pthread_mutex_lock(&g->stage_lock);
        stage_set(g, h.index, CUMUX_STAGE_FREE);
        pthread_mutex_unlock(&g->stage_lock);
        return 0;
    case CUMUX_MIRROR_IMAGE:
        return image_piece(g, p, len, h.index == 1);
    case CUMUX_MIRROR_PINNED_NEW:
        return pinned_new(g, h.index, h.value);
    case CUMUX_MIRROR_PINNED:
        return pinned_apply(&g->pinned, p, len);
    case CUMUX_MIRROR_HOSTFN_DONE:
        atomic_store(&g->shm->hostfn_done, (uint32_t)h.value);
        cumux_futex_wake(&g->shm->hostfn_done, 1 << 30);
        return 0;
    case CUMUX_MIRROR_HOSTFN_WORDS:
        for (uint32_t i = 0; i + 8 <= len; i += 8) {
            uint32_t w[2];
            memcpy(w, p + i, sizeof w);
            if (w[0] >= CUMUX_HOSTFN_STREAMS)
                return -1;
            atomic_store(&g->shm->hostfn_stream_done[w[0]], w[1]); /* the GPU reads it: the stream goes on */
        }
        return 0;
    default:
        return -1;
    }
}

/* ---- our page back to the relay ---- */

struct watch {
    uint64_t tail;
    uint32_t reply_seq[CUMUX_REPLY_SLOTS];
    uint32_t posted, clients, told_gen;
    int32_t fault;
    uint32_t marks[CUMUX_MARK_WORDS];
};

/* The length of the chunk the worker just made ready (the oldest copy's next). */
static uint64_t dtoh_chunk(struct gw *g)
{
    uint64_t len = 0;
    pthread_mutex_lock(&g->dtoh_lock);
    if (g->dtoh_n) {
        struct dtoh *d = &g->dtoh[g->dtoh_first];
        len = d->left < d->chunk ? d->left : d->chunk;
        d->left -= len;
    }
    pthread_mutex_unlock(&g->dtoh_lock);
    return len;
}

/* An answer in slot `reply`: the copy it ends, if the oldest is that slot's, is over. */
static void dtoh_answered(struct gw *g, uint32_t reply)
{
    pthread_mutex_lock(&g->dtoh_lock);
    if (g->dtoh_n && g->dtoh[g->dtoh_first].reply == reply) {
        g->dtoh_first = (g->dtoh_first + 1) % DTOH_QUEUE;
        g->dtoh_n--;
    }
    pthread_mutex_unlock(&g->dtoh_lock);
}

static int send_pinned(void *ctx, const uint8_t *records, size_t len)
{
    return send_mirror(ctx, CUMUX_MIRROR_PINNED, 0, 0, records, len);
}

/* A HOST_ALLOC answered in slot i: our copy becomes the block at the server's address (or goes). */
static void pinned_answered(struct gw *g, int i)
{
    pthread_mutex_lock(&g->alloc_lock);
    if (g->pending[i].mem) {
        struct cumux_reply_slot *r = &g->shm->replies[i];
        uint64_t addr = 0;
        if (r->result == 0 && r->len >= sizeof addr)
            memcpy(&addr, r->data, sizeof addr);
        if (!addr)
            munmap(g->pending[i].mem, g->pending[i].size);
        else if (pinned_add(&g->pinned, addr, g->pending[i].size, g->pending[i].mem) < 0)
            atomic_store(&g->done, 1); /* the worker has it and we cannot keep its copy: the client ends */
        g->pending[i].mem = NULL;
    }
    pthread_mutex_unlock(&g->alloc_lock);
}

/* What is in the printf pipe now, to the relay; at the pipe's end it is closed. 0, or -1 (it ended, or
 * the link did). */
static int pump_output(struct gw *g)
{
    char buf[4096];
    int rc = 0;
    pthread_mutex_lock(&g->out_lock);
    while (g->out_fd >= 0) {
        ssize_t n = read(g->out_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) { /* the worker let go of its end */
            close(g->out_fd);
            g->out_fd = -1;
            rc = -1;
            break;
        }
        if (send_mirror(g, CUMUX_MIRROR_STDOUT, 0, 0, buf, (size_t)n) < 0) {
            rc = -1;
            break;
        }
    }
    pthread_mutex_unlock(&g->out_lock);
    return rc;
}

/* The look at pinned memory before what the watcher saw goes back: all of it while a message that may
 * write anywhere is not known to be over, else the ranges of the copies not known to be over (nothing
 * where there are none). The answers in `answered` (a bit per reply slot) end what they cover. Bytes
 * changed, or -1. */
static long long answered_look(struct gw *g, bool due, const uint8_t answered[CUMUX_REPLY_SLOTS])
{
    struct gw_looks *l = &g->looks;
    struct pinned_range rg[GW_LOOK_RANGES];
    pthread_mutex_lock(&g->look_lock);
    bool all = l->all_seq != 0;
    unsigned n = l->n;
    for (unsigned i = 0; i < n; i++)
        rg[i] = l->v[i].r;
    pthread_mutex_unlock(&g->look_lock);
    long long changed = all ? pinned_diff(&g->pinned, send_pinned, g)
                            : pinned_diff_ranges(&g->pinned, rg, n, due, send_pinned, g);
    if (changed < 0)
        return -1;
    /* Before the answers go: the program's next message on a slot (after its answer) renumbers it. */
    pthread_mutex_lock(&g->look_lock);
    uint64_t covered = 0; /* messages before this number are over */
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++)
        if (answered[i] && l->ctx_sync_seq[i] > covered)
            covered = l->ctx_sync_seq[i];
    if (all && l->all_seq < covered)
        l->all_seq = 0;
    unsigned kept = 0;
    for (unsigned i = 0; i < l->n; i++) {
        struct gw_range *v = &l->v[i];
        bool over = i < n && (v->seq < covered || (v->reply < CUMUX_REPLY_SLOTS && answered[v->reply]));
        if (!over)
            l->v[kept++] = *v;
    }
    l->n = kept;
    pthread_mutex_unlock(&g->look_lock);
    return changed;
}

/* One look at everything the server and the GPU write. Answers go last: whatever the worker wrote before
 * an answer (a slot made ready, a mark, pinned memory) reaches the relay before it. How many things were
 * sent, or -1. */
static int watch_round(struct gw *g, struct watch *w)
{
    struct cumux_shm *m = g->shm;
    int sent = 0;
    /* Everything that tells the program its work is done (answers, host functions posted, marks) is looked
     * at before pinned memory is: the bytes the GPU wrote before any of it go first. */
    uint32_t seq[CUMUX_REPLY_SLOTS], marks[CUMUX_MARK_WORDS];
    uint8_t answered[CUMUX_REPLY_SLOTS];
    uint32_t posted = atomic_load(&m->hostfn_posted), gen = atomic_load(&m->marks_told.gen);
    bool any = posted != w->posted || gen != w->told_gen;
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++) {
        seq[i] = atomic_load(&m->replies[i].seq);
        answered[i] = seq[i] != w->reply_seq[i];
        if (answered[i]) {
            any = true;
            pinned_answered(g, i);
        }
    }
    for (int i = 0; i < CUMUX_MARK_WORDS; i++) {
        marks[i] = atomic_load_explicit(&m->mark_word[i], memory_order_acquire);
        any |= marks[i] != w->marks[i];
    }
    for (unsigned s = 0; !any && s < CUMUX_STAGING_SLOTS; s++)
        any = atomic_load(&m->stage_state[s]) == CUMUX_STAGE_READY;
    bool due = pinned_due(&g->pinned, cumux_now_ns());
    if ((any && g->pinned.n) || due) {
        long long changed = answered_look(g, due, answered);
        if (changed < 0)
            return -1;
        sent += changed > 0;
    }
    for (unsigned s = 0; s < CUMUX_STAGING_SLOTS; s++) {
        /* Sent without the lock (the reader takes it): a ready slot stays as it is until the relay says the
         * program took it, which comes after this. */
        pthread_mutex_lock(&g->stage_lock);
        uint32_t known = g->known[s], st = atomic_load(&m->stage_state[s]);
        bool tell = st != known && (st == CUMUX_STAGE_READY || st == CUMUX_STAGE_FREE);
        uint64_t len = tell && st == CUMUX_STAGE_READY ? dtoh_chunk(g) : 0;
        if (tell)
            g->known[s] = st;
        pthread_mutex_unlock(&g->stage_lock);
        if (tell && (send_mirror(g, CUMUX_MIRROR_STAGE, s, st, len ? m->staging[s] : NULL, len) < 0 || !++sent))
            return -1;
    }
    if (posted != w->posted) {
        struct cumux_mirror_hostfn e[CUMUX_HOSTFN_RING];
        uint32_t n = posted - w->posted;
        if (n > CUMUX_HOSTFN_RING)
            return -1; /* the server posts at most a ring's worth ahead of what was run */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k = (w->posted + i) % CUMUX_HOSTFN_RING;
            e[i] = (struct cumux_mirror_hostfn){m->hostfn_ids[k], m->hostfn_slot[k], m->hostfn_seq[k]};
        }
        if (send_mirror(g, CUMUX_MIRROR_HOSTFN_POST, 0, posted, e, n * sizeof e[0]) < 0)
            return -1;
        w->posted = posted, sent++;
    }
    uint32_t pairs[2 * CUMUX_MARK_WORDS], np = 0;
    for (int i = 0; i < CUMUX_MARK_WORDS; i++) {
        uint32_t v = marks[i];
        if (v != w->marks[i]) {
            w->marks[i] = v;
            pairs[np++] = (uint32_t)i, pairs[np++] = v;
        }
    }
    if (np && (send_mirror(g, CUMUX_MIRROR_MARK_WORDS, 0, 0, pairs, np * 4) < 0 || !++sent))
        return -1;
    if (!(gen & 1) && gen != w->told_gen) {
        struct cumux_marks_told copy;
        memcpy(&copy, (const void *)&m->marks_told, sizeof copy);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load(&m->marks_told.gen) == gen) {
            if (send_mirror(g, CUMUX_MIRROR_MARKS_TOLD, 0, 0, &copy, sizeof copy) < 0)
                return -1;
            w->told_gen = gen, sent++;
        }
    }
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++)
        if (answered[i]) {
            pump_output(g); /* a synchronize's printf output before its answer */
            break;
        }
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++) {
        if (seq[i] == w->reply_seq[i])
            continue;
        struct cumux_reply_slot *r = &m->replies[i];
        uint32_t len = r->len <= CUMUX_REPLY_DATA ? r->len : CUMUX_REPLY_DATA;
        uint64_t v = (uint32_t)r->result | (uint64_t)len << 32;
        /* The copy this answer ends is over before the answer goes: once the program has it, its thread's
         * next copy (the same reply slot) can reach the gateway before this thread would look again. */
        dtoh_answered(g, (uint32_t)i);
        if (send_mirror(g, CUMUX_MIRROR_REPLY, (uint32_t)i, v, r->data, len) < 0)
            return -1;
        w->reply_seq[i] = seq[i], sent++;
    }
    uint64_t tail = atomic_load(&m->tail);
    if (tail != w->tail) {
        if (send_mirror(g, CUMUX_MIRROR_TAIL, 0, tail, NULL, 0) < 0)
            return -1;
        w->tail = tail, sent++;
    }
    uint32_t clients = atomic_load(&m->server_clients);
    if (clients != w->clients) {
        if (send_mirror(g, CUMUX_MIRROR_CLIENTS, 0, clients, NULL, 0) < 0)
            return -1;
        w->clients = clients, sent++;
    }
    int32_t fault = atomic_load(&m->server_fault);
    if (fault && !w->fault) {
        if (send_mirror(g, CUMUX_MIRROR_FAULT, 0, (uint32_t)fault, NULL, 0) < 0)
            return -1;
        w->fault = fault, sent++;
    }
    return sent;
}

/* What the page holds before the relay's first message reaches the worker (taken before the watcher and the
 * reader start: an answer to that message, the hello, is then one the watcher tells). */
static struct watch *watch_start(struct gw *g)
{
    struct watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++)
        w->reply_seq[i] = atomic_load(&g->shm->replies[i].seq);
    w->posted = atomic_load(&g->shm->hostfn_posted);
    return w;
}

/* Looks at the page until the link or the worker's connection ends: spinning (giving the CPU away between
 * looks) for 2 ms after anything changed and, with 4 CPUs or more, for 20 ms after a message that is
 * answered went to the worker (the program waits for that answer: as the shim's own wait spins before it
 * sleeps), else every 50 us. The GPU's marks change with no one told, so it is looked at, not waited on. */
static void *watcher(void *arg)
{
    struct gw *g = arg;
    struct watch *w = g->watch;
    uint64_t busy = cumux_now_ns(), looked = 0;
    /* Where CPUs are few, a spinning watcher takes them from the worker and the programs it waits for. */
    uint64_t spin_after_ask_ns = sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? 20000000 : 0;
    while (!atomic_load(&g->done)) {
        int n = watch_round(g, w);
        if (n < 0)
            break;
        uint64_t now = cumux_now_ns();
        if (n > 0)
            busy = now;
        if (now - looked > 100000000) { /* the worker let go of us: the client ended */
            looked = now;
            struct pollfd p = {.fd = g->sock, .events = POLLRDHUP};
            if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                watch_round(g, w); /* what it said last (a fault) */
                break;
            }
        }
        if (now - busy < 2000000 || now - atomic_load(&g->asked_ns) < spin_after_ask_ns)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    free(w);
    atomic_store(&g->done, 1);
    shutdown(cumux_tls_fd(g->t), SHUT_RDWR); /* the reader's recv returns */
    return NULL;
}

/* The program's kernels' printf output, written by the worker into our pipe, to the relay. */
static void *printf_pump(void *arg)
{
    struct gw *g = arg;
    while (!atomic_load(&g->done)) {
        pthread_mutex_lock(&g->out_lock);
        int fd = g->out_fd;
        pthread_mutex_unlock(&g->out_lock);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (fd < 0 || (poll(&p, 1, 100) < 0 && errno != EINTR) || pump_output(g) < 0)
            break;
    }
    return NULL;
}

int cli_gateway_program(struct cumux_tls *t, uint32_t gpu, const struct cumux_hello *hello)
{
    static struct gw g0;
    struct gw *g = &g0;
    *g = (struct gw){.t = t, .sock = -1, .image_fd = -1, .out_fd = -1};
    pinned_init(&g->pinned);
    pthread_mutex_init(&g->out_lock, NULL);
    pthread_mutex_init(&g->look_lock, NULL);
    pthread_mutex_init(&g->alloc_lock, NULL);
    pthread_mutex_init(&g->send_lock, NULL);
    pthread_mutex_init(&g->stage_lock, NULL);
    pthread_mutex_init(&g->dtoh_lock, NULL);
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION,
                              .status = CUMUX_MIRROR_CONNECTION_FAILED};
    char path[256], err[512] = "", text[256] = "";
    int out[2] = {-1, -1}, shm_fd = -1;
    struct cumux_hello h = *hello;
    if (cumux_gpu_socket_path((int)gpu, path, sizeof path) == 0 && (g->sock = cumux_connect_checked(path, err, sizeof err)) >= 0) {
        if ((h.flags & CUMUX_HELLO_STDOUT) && pipe2(out, O_CLOEXEC) < 0)
            h.flags &= ~CUMUX_HELLO_STDOUT;
        if (cumux_sock_send(g->sock, &h, sizeof h, (h.flags & CUMUX_HELLO_STDOUT) ? out[1] : -1) < 0 ||
            cumux_sock_recv(g->sock, &w, sizeof w, &shm_fd) < 0 || w.magic != CUMUX_MAGIC) {
            snprintf(text, sizeof text, "the gateway's cumuxd (GPU %u) did not answer", gpu);
            w.status = CUMUX_MIRROR_CONNECTION_FAILED;
        } else if (w.status != 0 && w.text_len && w.text_len < sizeof text) {
            cumux_sock_recv(g->sock, text, w.text_len, NULL);
        }
    } else {
        snprintf(text, sizeof text, "no cumuxd for GPU %u beside the gateway: %.160s", gpu, err);
    }
    if (out[1] >= 0)
        close(out[1]);
    if (w.status == 0 && (shm_fd < 0 || w.shm_size != sizeof(struct cumux_shm) ||
                          (g->shm = mmap(NULL, sizeof *g->shm, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0)) == MAP_FAILED)) {
        g->shm = NULL;
        w.status = CUMUX_MIRROR_CONNECTION_FAILED;
        snprintf(text, sizeof text, "the gateway could not map the worker's channel");
    }
    if (shm_fd >= 0)
        close(shm_fd);
    w.resume_token = 0; /* no coming back across the network */
    w.text_len = strlen(text);
    uint8_t ans[sizeof w + sizeof text];
    memcpy(ans, &w, sizeof w);
    memcpy(ans + sizeof w, text, w.text_len);
    if (send_mirror(g, CUMUX_MIRROR_WELCOME, 0, 0, ans, sizeof w + w.text_len) < 0 || w.status != 0) {
        if (out[0] >= 0)
            close(out[0]);
        return 1;
    }
    g->head = atomic_load(&g->shm->head);
    pthread_t wt, pt;
    if (out[0] >= 0 && fcntl(out[0], F_SETFL, O_NONBLOCK) == 0)
        g->out_fd = out[0];
    else if (out[0] >= 0)
        close(out[0]);
    if (!(g->watch = watch_start(g)) || pthread_create(&wt, NULL, watcher, g) != 0)
        return 1;
    if (g->out_fd >= 0 && pthread_create(&pt, NULL, printf_pump, g) == 0)
        pthread_detach(pt); /* it ends with the process: the worker keeps its end of the pipe until it frees us */
    struct cumux_frame_reader r;
    memset(&r, 0, sizeof r);
    static uint8_t buf[1 << 16];
    while (!atomic_load(&g->done)) {
        ssize_t n = cumux_tls_recv(t, buf, sizeof buf);
        if (n <= 0 || cumux_frame_feed(&r, buf, (size_t)n, on_relay_frame, g) != n)
            break;
    }
    /* The link's end, or the relay's BYE, or a frame out of place: the client ends here. */
    atomic_store(&g->done, 1);
    close(g->sock); /* the worker frees all the client held */
    pthread_join(wt, NULL);
    cumux_frame_reader_free(&r);
    return 0;
}
#endif
