/* The relay (issue 45, docs/remote.md, common/mirror.h): on the program's machine, a cumuxd as far as the
 * program can tell (a pipe directory, a socket per GPU, a channel page per program), whose other side is
 * the gateway beside the real cumuxd, over TLS. The program's shim is the one it always is: what it writes
 * into its page (ring messages, staging slots, host-function words) goes to the gateway as it comes, one
 * frame for all the messages written since the last look (one-way calls never wait for the network);
 * what the gateway says the server and the GPU wrote is written into the page, where the shim reads it.
 *   cumux relay --server HOST:PORT --key FILE [--pipe-directory DIR]
 * `cumux run` starts one of its own where CUMUX_SERVER names a remote server (cli_relay_start). Calls that
 * cannot cross the network (the spec's net=refused: pinned host memory shared with the server,
 * descriptors the server hands out) are sent as NOT_CARRIED and fail with CUDA_ERROR_NOT_SUPPORTED. */
#include "cli/cli.h"

#ifndef CUMUX_HAVE_NET
int cli_relay(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "cumux: built without GnuTLS (libgnutls28-dev): no network link\n");
    return 1;
}
int cli_relay_start(const char *server, const char *key, pid_t program, char *dir, size_t dirlen)
{
    (void)server, (void)key, (void)program, (void)dir, (void)dirlen;
    fprintf(stderr, "cumux: CUMUX_SERVER: this cumux was built without GnuTLS (libgnutls28-dev)\n");
    return -1;
}
#else
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/frame.h"
#include "common/mirror.h"
#include "common/proto.h"
#include "common/sock.h"
#include "common/tls_link.h"
#include "cli/pinned_mirror.h"

struct relay {
    struct cumux_tls *t;
    int psock;  /* the program's connection */
    int out_fd; /* the program's stdout (its hello's), -1: none */
    uint32_t gpu;
    struct cumux_hello hello;
    struct cumux_shm *shm; /* the program's page, ours */
    uint64_t sent;         /* ring bytes sent to the gateway */
    uint8_t *copy;         /* the ring's bytes copied out before they are read (the program may rewrite them) */
    pthread_mutex_t stage_lock;
    uint32_t known[CUMUX_STAGING_SLOTS]; /* each slot's state as the gateway's page has it, as far as we know */
    uint32_t told_gen;
    uint32_t hostfn_done;
    uint32_t hostfn_words[CUMUX_HOSTFN_STREAMS];
    struct pinned_set pinned;
    pthread_mutex_t alloc_lock; /* pending: the program's pinned memory, mapped, until its HOST_ALLOC's answer */
    struct {
        uint8_t *mem;
        uint64_t size;
    } pending[CUMUX_REPLY_SLOTS];
    bool welcomed;
    int status; /* the welcome's, for the exit */
    _Atomic int done;
};

static int send_mirror(struct relay *r, uint32_t what, uint32_t index, uint64_t value, const void *data, size_t len)
{
    struct cumux_mirror_head h = {what, index, value};
    if (cumux_tls_send_frame(r->t, CUMUX_FRAME_MSG, &h, sizeof h, data, len) < 0) {
        atomic_store(&r->done, 1);
        return -1;
    }
    return 0;
}

/* ---- the program's side, to the gateway ---- */

/* The descriptor the program sent just before the message that needs it. */
static int program_fd(struct relay *r)
{
    struct pollfd p = {.fd = r->psock, .events = POLLIN};
    uint64_t tag = 0;
    int fd = -1;
    if (poll(&p, 1, 2000) != 1 || cumux_sock_recv(r->psock, &tag, sizeof tag, &fd) < 0 || tag != CUMUX_MAGIC) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int send_pinned(void *ctx, const uint8_t *records, size_t len)
{
    return send_mirror(ctx, CUMUX_MIRROR_PINNED, 0, 0, records, len);
}

/* A HOST_ALLOC's memory (the program's memfd): ours to map, until its answer names the server's address. */
static int pinned_new(struct relay *r, const struct cumux_msg_hdr *h, const uint8_t *body)
{
    struct cumux_host_alloc m;
    memcpy(&m, body, sizeof m);
    int fd = program_fd(r);
    void *mem = MAP_FAILED;
    if (fd >= 0 && h->reply < CUMUX_REPLY_SLOTS && m.size && m.size <= PINNED_MAX_BYTES)
        mem = mmap(NULL, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (mem == MAP_FAILED)
        return -1;
    pthread_mutex_lock(&r->alloc_lock);
    if (r->pending[h->reply].mem)
        munmap(r->pending[h->reply].mem, r->pending[h->reply].size);
    r->pending[h->reply].mem = mem, r->pending[h->reply].size = m.size;
    pthread_mutex_unlock(&r->alloc_lock);
    return send_mirror(r, CUMUX_MIRROR_PINNED_NEW, h->reply, m.size, NULL, 0);
}

/* A file (a module's image, the program's descriptor) to the gateway, in pieces. 0, or -1. */
static int send_image(struct relay *r, int fd)
{
    static uint8_t buf[8u << 20];
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0)
            return -1;
        off += n;
        bool last = n == 0 || off >= st.st_size;
        if (send_mirror(r, CUMUX_MIRROR_IMAGE, last, 0, buf, (size_t)n) < 0)
            return -1;
        if (last)
            return 0;
    }
}

/* Ring bytes p[0, n) at ring position pos, whole messages: the bytes a message needs go first. */
static int send_messages(struct relay *r, uint64_t pos, uint8_t *p, size_t n)
{
    size_t start = 0, off = 0;
    while (off + sizeof(struct cumux_msg_hdr) <= n) {
        struct cumux_msg_hdr h;
        memcpy(&h, p + off, sizeof h);
        if (h.size < sizeof h + 8 || h.size % 8 || h.size > n - off)
            break; /* the worker finds it malformed, and ends the program's client */
        enum cumux_op_net net = h.op < CUMUX_OP_COUNT ? cumux_op_net(h.op) : CUMUX_NET_PLAIN;
        if (net != CUMUX_NET_PLAIN && off > start) {
            if (send_mirror(r, CUMUX_MIRROR_RING, 0, pos + start, p + start, off - start) < 0)
                return -1;
            start = off;
        }
        if (net == CUMUX_NET_STAGE_IN && h.size >= sizeof h + sizeof(struct cumux_copy_staged)) {
            struct cumux_copy_staged m;
            memcpy(&m, p + off + sizeof h, sizeof m);
            if (m.slot < CUMUX_STAGING_SLOTS && m.size <= CUMUX_STAGING_BYTES &&
                send_mirror(r, CUMUX_MIRROR_STAGE_DATA, m.slot, 0, r->shm->staging[m.slot], m.size) < 0)
                return -1;
        } else if (net == CUMUX_NET_PINNED && h.size >= sizeof h + sizeof(struct cumux_host_alloc)) {
            if (pinned_new(r, &h, p + off + sizeof h) < 0) {
                if (atomic_load(&r->done))
                    return -1;
                net = CUMUX_NET_REFUSED;
            }
        } else if (net == CUMUX_NET_IMAGE || (net == CUMUX_NET_REFUSED && cumux_op_fd(h.op))) {
            int fd = program_fd(r);
            if (net == CUMUX_NET_IMAGE && fd >= 0) {
                int rc = send_image(r, fd);
                close(fd);
                if (rc < 0)
                    return -1;
            } else {
                if (fd >= 0)
                    close(fd);
                net = CUMUX_NET_REFUSED; /* no descriptor came: the call fails */
            }
        }
        if (h.op == CUMUX_OP_HOST_FREE && h.size >= sizeof h + sizeof(struct cumux_mem_free)) {
            struct cumux_mem_free f;
            memcpy(&f, p + off + sizeof h, sizeof f);
            pinned_remove(&r->pinned, f.ptr); /* what it held was sent before these messages */
        }
        if (net == CUMUX_NET_REFUSED) {
            /* The same size and reply slot, so the ring's bytes stay where the program put them. */
            struct cumux_not_carried nc = {.op = h.op};
            h.op = CUMUX_OP_NOT_CARRIED;
            memcpy(p + off, &h, sizeof h);
            memcpy(p + off + sizeof h, &nc, sizeof nc);
        }
        off += h.size;
    }
    return n > start ? send_mirror(r, CUMUX_MIRROR_RING, 0, pos + start, p + start, n - start) : 0;
}

#define LOOK_RANGES 16 /* a batch with more copies and memsets than this: a look at all pinned memory */

/* What of the program's pinned memory to look at before the messages of ring [from, to) go (the spec's
 * look=): all of it (-1) where one of them may touch any (a kernel), else the ranges of its copies and
 * memsets into rg (how many). The ring's bytes are the program's: a message that is not what a shim writes
 * ends the scan with a look at all (the worker refuses the message itself). */
static int batch_look(struct relay *r, uint64_t from, uint64_t to, struct pinned_range *rg)
{
    int n = 0;
    while (from < to) {
        uint64_t at = from % CUMUX_RING_BYTES, avail = CUMUX_RING_BYTES - at;
        if (avail > to - from)
            avail = to - from;
        const uint8_t *p = &r->shm->ring[at];
        struct cumux_msg_hdr h;
        if (avail < sizeof h)
            return -1;
        memcpy(&h, p, sizeof h);
        if (h.size < sizeof h || h.size % 8 || h.size > avail || h.op >= CUMUX_OP_COUNT)
            return -1;
        if (h.op == CUMUX_OP_PAD) { /* the rest of the ring is skipped */
            from += CUMUX_RING_BYTES - at;
            continue;
        }
        enum cumux_op_look lk = cumux_op_look(h.op);
        if (lk == CUMUX_LOOK_ALL)
            return -1;
        if (lk == CUMUX_LOOK_RANGE) {
            struct pinned_range two[2];
            /* The body is copied out first: the program may write its ring while we read. */
            uint8_t body[64];
            size_t blen = h.size - sizeof h < sizeof body ? h.size - sizeof h : sizeof body;
            memcpy(body, p + sizeof h, blen);
            int k = pinned_op_ranges(h.op, body, blen, false, two);
            if (k < 0 || n + k > LOOK_RANGES)
                return -1;
            for (int i = 0; i < k; i++)
                rg[n++] = two[i];
        }
        from += h.size;
    }
    return n;
}

/* One look at what the program writes; how many things were sent, or -1. */
static int up_round(struct relay *r)
{
    struct cumux_shm *m = r->shm;
    int sent = 0;
    uint64_t head = atomic_load(&m->head);
    /* What the program wrote into its pinned memory goes before the work that may read it (all of it before
     * a kernel, a copy's own range before a copy, nothing before a query), and all of it before a host
     * function's end lets its stream go on. */
    if (r->pinned.n) { /* (with none, no look is ever due) */
        struct pinned_range rg[LOOK_RANGES];
        int nr = 0;
        if (atomic_load(&m->hostfn_done) != r->hostfn_done || pinned_due(&r->pinned, cumux_now_ns()))
            nr = -1;
        else if (head != r->sent && head - r->sent <= CUMUX_RING_BYTES)
            nr = batch_look(r, r->sent, head, rg);
        long long changed = nr < 0 ? pinned_diff(&r->pinned, send_pinned, r)
                                   : pinned_diff_ranges(&r->pinned, rg, (size_t)nr, false, send_pinned, r);
        if (changed < 0)
            return -1;
        sent += changed > 0;
    }
    if (head != r->sent) {
        if (head - r->sent > CUMUX_RING_BYTES || (head - r->sent) % 8)
            return -1; /* not what a shim writes */
        while (r->sent != head) {
            uint64_t at = r->sent % CUMUX_RING_BYTES, n = head - r->sent;
            if (n > CUMUX_RING_BYTES - at)
                n = CUMUX_RING_BYTES - at;
            memcpy(r->copy, &m->ring[at], n);
            if (send_messages(r, r->sent, r->copy, n) < 0)
                return -1;
            r->sent += n;
        }
        sent++;
    }
    for (unsigned s = 0; s < CUMUX_STAGING_SLOTS; s++) {
        /* Sent without the lock (the downlink takes it): the gateway makes the slot ready again only after
         * this reaches it. */
        pthread_mutex_lock(&r->stage_lock);
        uint32_t known = r->known[s], st = atomic_load(&m->stage_state[s]);
        bool taken = st != known && st == CUMUX_STAGE_FREE && known == CUMUX_STAGE_READY; /* a chunk taken out */
        r->known[s] = st;
        pthread_mutex_unlock(&r->stage_lock);
        if (taken && (send_mirror(r, CUMUX_MIRROR_STAGE_FREE, s, 0, NULL, 0) < 0 || !++sent))
            return -1;
    }
    uint32_t pairs[2 * CUMUX_HOSTFN_STREAMS], np = 0;
    for (int i = 0; i < CUMUX_HOSTFN_STREAMS; i++) {
        uint32_t v = atomic_load(&m->hostfn_stream_done[i]);
        if (v != r->hostfn_words[i]) {
            r->hostfn_words[i] = v;
            pairs[np++] = (uint32_t)i, pairs[np++] = v;
        }
    }
    if (np && (send_mirror(r, CUMUX_MIRROR_HOSTFN_WORDS, 0, 0, pairs, np * 4) < 0 || !++sent))
        return -1;
    uint32_t done = atomic_load(&m->hostfn_done);
    if (done != r->hostfn_done) {
        if (send_mirror(r, CUMUX_MIRROR_HOSTFN_DONE, 0, done, NULL, 0) < 0)
            return -1;
        r->hostfn_done = done, sent++;
    }
    return sent;
}

static void *uplink(void *arg)
{
    struct relay *r = arg;
    struct cumux_shm *m = r->shm;
    uint64_t busy = cumux_now_ns(), looked = 0;
    while (!atomic_load(&r->done)) {
        int n = up_round(r);
        if (n < 0)
            break;
        uint64_t now = cumux_now_ns();
        if (n > 0)
            busy = now;
        if (now - looked > 100000000) { /* the program's end */
            looked = now;
            struct pollfd p = {.fd = r->psock, .events = POLLRDHUP};
            if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                up_round(r);
                break;
            }
        }
        if (now - busy < 2000000) {
            sched_yield();
            continue;
        }
        /* Idle: sleep until the program rings (it does while we say we sleep), or 100 us pass (its staging
         * slots and host-function words ring no one). */
        uint32_t bell = atomic_load(&m->doorbell);
        atomic_store(&m->server_sleeping, 1);
        if (atomic_load(&m->head) == r->sent)
            cumux_futex_wait(&m->doorbell, bell, 100000);
        atomic_store(&m->server_sleeping, 0);
    }
    atomic_store(&r->done, 1);
    cumux_tls_send_frame(r->t, CUMUX_FRAME_BYE, NULL, 0, NULL, 0);
    shutdown(cumux_tls_fd(r->t), SHUT_RDWR); /* the downlink's recv returns */
    return NULL;
}

/* ---- the gateway's side, into the program's page ---- */

static int welcome(struct relay *r, const uint8_t *p, uint32_t len)
{
    struct cumux_welcome w;
    if (len < sizeof w)
        return -1;
    memcpy(&w, p, sizeof w);
    uint32_t text_len = len - (uint32_t)sizeof w;
    r->welcomed = true;
    r->status = w.status;
    if (w.status != 0 || w.text_len != text_len) {
        w.text_len = text_len;
        if (cumux_sock_send(r->psock, &w, sizeof w, -1) == 0 && text_len)
            cumux_sock_send(r->psock, p + sizeof w, text_len, -1);
        return -1;
    }
    int fd = memfd_create("cumux-relay-channel", MFD_CLOEXEC);
    void *page = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof(struct cumux_shm)) == 0)
        page = mmap(NULL, sizeof(struct cumux_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED || !(r->copy = malloc(CUMUX_RING_BYTES))) {
        w.status = CUMUX_MIRROR_OUT_OF_MEMORY;
        cumux_sock_send(r->psock, &w, sizeof w, -1);
        return -1;
    }
    r->shm = page;
    cumux_shm_init(r->shm);
    w.shm_size = sizeof(struct cumux_shm);
    w.resume_token = 0;
    int rc = cumux_sock_send(r->psock, &w, sizeof w, fd);
    close(fd);
    pthread_t t;
    if (rc < 0 || pthread_create(&t, NULL, uplink, r) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}

static int on_gateway_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct relay *r = ctx;
    struct cumux_mirror_head h;
    if (kind != CUMUX_FRAME_MSG || len < sizeof h)
        return -1;
    memcpy(&h, p, sizeof h);
    p += sizeof h;
    len -= (uint32_t)sizeof h;
    if (!r->welcomed)
        return h.what == CUMUX_MIRROR_WELCOME ? welcome(r, p, len) : -1;
    struct cumux_shm *m = r->shm;
    switch (h.what) {
    case CUMUX_MIRROR_TAIL:
        atomic_store(&m->tail, h.value);
        return 0;
    case CUMUX_MIRROR_REPLY:
        if (h.index >= CUMUX_REPLY_SLOTS || len > CUMUX_REPLY_DATA || len != h.value >> 32)
            return -1;
        pthread_mutex_lock(&r->alloc_lock);
        if (r->pending[h.index].mem) { /* a HOST_ALLOC's answer: the server's address of that memory */
            uint64_t addr = 0;
            if ((uint32_t)h.value == 0 && len >= sizeof addr)
                memcpy(&addr, p, sizeof addr);
            int added = addr ? pinned_add(&r->pinned, addr, r->pending[h.index].size, r->pending[h.index].mem) : -1;
            if (!addr)
                munmap(r->pending[h.index].mem, r->pending[h.index].size);
            r->pending[h.index].mem = NULL;
            if (addr && added < 0) { /* the server has it and we cannot keep its copy: the program ends */
                pthread_mutex_unlock(&r->alloc_lock);
                return -1;
            }
        }
        pthread_mutex_unlock(&r->alloc_lock);
        cumux_reply_post(&m->replies[h.index], (int32_t)(uint32_t)h.value, p, len);
        return 0;
    case CUMUX_MIRROR_STAGE:
        if (h.index >= CUMUX_STAGING_SLOTS || len > CUMUX_STAGING_BYTES ||
            (h.value != CUMUX_STAGE_READY && h.value != CUMUX_STAGE_FREE))
            return -1;
        pthread_mutex_lock(&r->stage_lock);
        memcpy(m->staging[h.index], p, len);
        atomic_store(&m->stage_state[h.index], (uint32_t)h.value);
        r->known[h.index] = (uint32_t)h.value;
        atomic_fetch_add(&m->stage_seq[h.index], 1);
        cumux_futex_wake(&m->stage_seq[h.index], 1);
        pthread_mutex_unlock(&r->stage_lock);
        return 0;
    case CUMUX_MIRROR_HOSTFN_POST: {
        uint32_t n = len / sizeof(struct cumux_mirror_hostfn), posted = (uint32_t)h.value;
        if (n > CUMUX_HOSTFN_RING || len % sizeof(struct cumux_mirror_hostfn))
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            struct cumux_mirror_hostfn e;
            memcpy(&e, p + i * sizeof e, sizeof e);
            uint32_t k = (posted - n + i) % CUMUX_HOSTFN_RING;
            m->hostfn_ids[k] = e.id, m->hostfn_slot[k] = e.slot, m->hostfn_seq[k] = e.seq;
        }
        atomic_store(&m->hostfn_posted, posted);
        cumux_futex_wake(&m->hostfn_posted, 1 << 30);
        return 0;
    }
    case CUMUX_MIRROR_MARK_WORDS:
        for (uint32_t i = 0; i + 8 <= len; i += 8) {
            uint32_t w[2];
            memcpy(w, p + i, sizeof w);
            if (w[0] >= CUMUX_MARK_WORDS)
                return -1;
            atomic_store_explicit(&m->mark_word[w[0]], w[1], memory_order_release);
        }
        return 0;
    case CUMUX_MIRROR_MARKS_TOLD: {
        struct cumux_marks_told t;
        if (len != sizeof t)
            return -1;
        memcpy(&t, p, sizeof t);
        /* As the server tells them: gen odd while the rest is written. */
        atomic_store(&m->marks_told.gen, ++r->told_gen);
        m->marks_told.handled = t.handled;
        memcpy(m->marks_told.stream, t.stream, sizeof t.stream);
        memcpy(m->marks_told.ctx, t.ctx, sizeof t.ctx);
        atomic_store(&m->marks_told.gen, ++r->told_gen);
        return 0;
    }
    case CUMUX_MIRROR_PINNED:
        return pinned_apply(&r->pinned, p, len);
    case CUMUX_MIRROR_CLIENTS:
        atomic_store(&m->server_clients, (uint32_t)h.value);
        return 0;
    case CUMUX_MIRROR_FAULT:
        atomic_store(&m->server_resumable, 0); /* no coming back across the network */
        atomic_store(&m->server_fault, (int32_t)(uint32_t)h.value);
        cumux_shm_wake_waiters(m);
        return 0;
    case CUMUX_MIRROR_STDOUT:
        for (uint32_t off = 0; r->out_fd >= 0 && off < len;) {
            ssize_t w = write(r->out_fd, p + off, len - off);
            if (w <= 0)
                break;
            off += (uint32_t)w;
        }
        return 0;
    default:
        return -1;
    }
}

/* One program's connection, in a child process of its own. */
static int relay_one(int psock, uint32_t gpu, const char *server, const char *key)
{
    static struct relay r0;
    struct relay *r = &r0;
    *r = (struct relay){.psock = psock, .out_fd = -1, .gpu = gpu};
    pthread_mutex_init(&r->stage_lock, NULL);
    pthread_mutex_init(&r->alloc_lock, NULL);
    pinned_init(&r->pinned);
    struct pollfd pp = {.fd = psock, .events = POLLIN};
    if (poll(&pp, 1, 10000) != 1 || cumux_sock_recv(psock, &r->hello, sizeof r->hello, &r->out_fd) < 0)
        return 1;
    char err[512] = "";
    const char *why = NULL;
    if (r->hello.kind != CUMUX_HELLO_CLIENT)
        why = "a relay carries programs only: ask the server itself (CUMUX_SERVER=host:port cumux ...)";
    else if (!(r->t = cli_remote_connect(server, key, 10, err, sizeof err)))
        why = err;
    if (why) {
        struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION,
                                  .status = CUMUX_MIRROR_CONNECTION_FAILED, .text_len = strlen(why)};
        fprintf(stderr, "cumux relay: %s\n", why);
        if (cumux_sock_send(psock, &w, sizeof w, -1) == 0)
            cumux_sock_send(psock, why, w.text_len, -1);
        return 1;
    }
    cli_link_long_lived(r->t);
    uint8_t req[4 + sizeof r->hello];
    memcpy(req, &gpu, 4);
    memcpy(req + 4, &r->hello, sizeof r->hello);
    if (cumux_tls_send_frame(r->t, CUMUX_FRAME_HELLO, req, sizeof req, NULL, 0) < 0)
        return 1;
    struct cumux_frame_reader fr;
    memset(&fr, 0, sizeof fr);
    static uint8_t buf[1 << 16];
    while (!atomic_load(&r->done)) {
        ssize_t n = cumux_tls_recv(r->t, buf, sizeof buf);
        if (n <= 0 || cumux_frame_feed(&fr, buf, (size_t)n, on_gateway_frame, r) != n)
            break;
    }
    /* The link ended (the server let go of the program, or the network failed): the program sees its
     * server gone, as when cumuxd's worker ends. */
    atomic_store(&r->done, 1);
    if (r->shm)
        cumux_shm_wake_waiters(r->shm);
    shutdown(psock, SHUT_RDWR);
    close(psock);
    return r->status == 0 ? 0 : 1;
}

/* ---- the relay's pipe directory ---- */

static volatile sig_atomic_t stopping;
static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

static int serve(const char *server, const char *key, const char *dir, pid_t program, int ready_fd)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "cumux relay: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char err[512];
    if (cumux_check_pipe_dir(dir, err, sizeof err) < 0) {
        fprintf(stderr, "cumux relay: %s\n", err);
        return 1;
    }
    setenv("CUMUX_PIPE_DIRECTORY", dir, 1);
    int ls[CUMUX_MAX_DEVICES];
    struct pollfd p[CUMUX_MAX_DEVICES + 1];
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        char path[256];
        if (cumux_gpu_socket_path(g, path, sizeof path) < 0 || (ls[g] = cumux_sock_listen(path, 64)) < 0) {
            fprintf(stderr, "cumux relay: cannot listen in %s: %s\n", dir, strerror(errno));
            return 1;
        }
        p[g] = (struct pollfd){.fd = ls[g], .events = POLLIN};
    }
    int pidfd = program > 0 ? (int)syscall(SYS_pidfd_open, program, 0) : -1;
    p[CUMUX_MAX_DEVICES] = (struct pollfd){.fd = pidfd, .events = POLLIN};
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    signal(SIGPIPE, SIG_IGN);
    if (ready_fd >= 0) {
        (void)!write(ready_fd, "", 1);
        close(ready_fd);
    } else {
        printf("cumux relay: programs with CUMUX_PIPE_DIRECTORY=%s run on %s\n", dir, server);
        fflush(stdout);
    }
    while (!stopping) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        int n = poll(p, CUMUX_MAX_DEVICES + 1, 1000);
        if (program > 0 && ((pidfd >= 0 && n > 0 && p[CUMUX_MAX_DEVICES].revents) || (pidfd < 0 && kill(program, 0) < 0)))
            break; /* the program `cumux run` started has ended */
        for (int g = 0; n > 0 && g < CUMUX_MAX_DEVICES; g++) {
            if (!(p[g].revents & POLLIN))
                continue;
            int fd = accept4(ls[g], NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            pid_t c = fork();
            if (c == 0) {
                signal(SIGTERM, SIG_DFL);
                signal(SIGINT, SIG_DFL);
                for (int k = 0; k < CUMUX_MAX_DEVICES; k++)
                    close(ls[k]);
                _exit(relay_one(fd, (uint32_t)g, server, key));
            }
            close(fd);
        }
    }
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        char path[256];
        close(ls[g]);
        if (cumux_gpu_socket_path(g, path, sizeof path) == 0)
            unlink(path);
    }
    if (program > 0)
        rmdir(dir);
    return 0;
}

int cli_relay(int argc, char **argv)
{
    const char *server = NULL, *key = NULL, *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--server"))
            server = argv[i + 1];
        else if (!strcmp(argv[i], "--key"))
            key = argv[i + 1];
        else if (!strcmp(argv[i], "--pipe-directory"))
            dir = argv[i + 1];
        else
            server = NULL, argc = 0;
    if (!server || !key || argc % 2 == 0) {
        fprintf(stderr, "usage: cumux relay --server HOST:PORT --key FILE [--pipe-directory DIR]   (programs\n"
                        "  of this machine run on the cumuxd behind `cumux gateway` at HOST:PORT)\n");
        return 2;
    }
    return serve(server, key, dir ? dir : cumux_pipe_directory(), 0, -1);
}

int cli_relay_start(const char *server, const char *key, pid_t program, char *dir, size_t dirlen)
{
    const char *tmp = getenv("TMPDIR");
    if (snprintf(dir, dirlen, "%s/cumux-relay-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)dirlen || !mkdtemp(dir)) {
        fprintf(stderr, "cumux: cannot make the relay's pipe directory: %s\n", strerror(errno));
        return -1;
    }
    if (!key || !*key) {
        fprintf(stderr, "cumux: CUMUX_SERVER=%s: CUMUX_KEY_FILE names no key file\n", server);
        return -1;
    }
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return -1;
    pid_t c = fork();
    if (c == 0) { /* twice, so that the relay is no child of the program */
        close(ready[0]);
        if (fork() == 0) {
            setsid();
            int null = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (null >= 0)
                dup2(null, STDIN_FILENO);
            _exit(serve(server, key, dir, program, ready[1]));
        }
        _exit(0);
    }
    close(ready[1]);
    if (c > 0)
        waitpid(c, NULL, 0);
    char b;
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    bool up = c > 0 && poll(&p, 1, 10000) == 1 && read(ready[0], &b, 1) == 1;
    close(ready[0]);
    if (!up)
        fprintf(stderr, "cumux: the relay to %s did not start\n", server);
    return up ? 0 : -1;
}
#endif
