/* The descriptors of clients' memory chunks, which the supervisor keeps for each GPU's workers: a worker
 * hands each chunk over as it makes it (and says when it goes), the standby of its GPU maps each ahead as
 * it comes, and at a takeover the standby gets them all, so that programs come back to their memory at
 * the same addresses (docs/faults.md). The workers' side and the supervisor's. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/sock.h"
#include "server/supervisor.h"

int sup_keep_fd = -1; /* a worker's end of its socket of kept descriptors */
struct sup_shared *sup_page;

/* ---- kept descriptors of clients' memory chunks ---- */

enum keep_kind { KEEP_CHUNK = 1, KEEP_DROP, KEEP_DROP_CLIENT, KEEP_TAKE, KEEP_TAKE_END, KEEP_MIRROR, KEEP_UNMIRROR };

struct keep_msg {
    uint32_t kind;
    uint32_t client;
    int32_t gpu;
    int32_t pid;
    uint64_t base, size, token;
    uint32_t uid;
    uint32_t reserved;
    uint64_t id;
};

uint64_t srv_arena_hint, srv_arena_hint_size;
static uint64_t next_kept_id;

static void keep_send(const struct keep_msg *m, int fd)
{
    if (sup_keep_fd >= 0 && cumux_sock_send(sup_keep_fd, m, sizeof *m, fd) < 0)
        cumux_logf("the supervisor was not told of a chunk at 0x%llx: %s", (unsigned long long)m->base, strerror(errno));
}

static struct keep_msg keep_msg_of(uint32_t kind, const struct srv_kept_chunk *k)
{
    return (struct keep_msg){.kind = kind, .client = k->client, .gpu = k->gpu, .pid = k->pid, .base = k->base,
                             .size = k->size, .token = k->token, .uid = k->uid, .id = k->id};
}

static struct srv_kept_chunk kept_of(const struct keep_msg *m, int fd)
{
    return (struct srv_kept_chunk){.client = m->client, .gpu = m->gpu, .base = m->base, .size = m->size,
                                   .token = m->token, .pid = m->pid, .uid = m->uid, .fd = fd, .id = m->id};
}

/* A chunk to map ahead, or one that went, as the standby reads them (waiting, or taking over). */
static void mirror_message(const struct keep_msg *m, int fd, const struct srv_mirror_ops *mirror)
{
    if (m->kind == KEEP_MIRROR && fd >= 0 && mirror) {
        struct srv_kept_chunk k = kept_of(m, fd);
        mirror->add(&k);
        return;
    }
    if (fd >= 0)
        close(fd);
    if (m->kind == KEEP_UNMIRROR && mirror)
        mirror->remove(m->id);
}

/* A message the waiting standby read that is not about mapping ahead (the handover's first, should it
 * come before the word to go), for srv_standby_take. */
static struct keep_msg held_msg;
static int held_fd = -1;
static bool held;

bool sup_keep_holding(void)
{
    return held;
}

int sup_keep_take_one(const struct srv_mirror_ops *mirror)
{
    struct keep_msg m;
    int fd = -1;
    if (cumux_sock_recv(sup_keep_fd, &m, sizeof m, &fd) < 0)
        return -1; /* the supervisor is gone */
    if (m.kind == KEEP_MIRROR || m.kind == KEEP_UNMIRROR) {
        mirror_message(&m, fd, mirror);
    } else {
        held_msg = m;
        held_fd = fd;
        held = true;
    }
    return 0;
}

void srv_supervisor_keep(const struct srv_kept_chunk *k)
{
    struct keep_msg m = keep_msg_of(KEEP_CHUNK, k);
    keep_send(&m, k->fd);
}

void srv_supervisor_drop(uint64_t base)
{
    struct keep_msg m = {.kind = KEEP_DROP, .base = base};
    keep_send(&m, -1);
}

void srv_supervisor_drop_client(uint32_t client)
{
    struct keep_msg m = {.kind = KEEP_DROP_CLIENT, .client = client};
    keep_send(&m, -1);
}

#define HAND_OVER_WAIT_MS 5000 /* the most the standby waits for the handover's next message */

size_t srv_standby_take(struct srv_kept_chunk *out, size_t cap, const struct srv_mirror_ops *mirror)
{
    size_t n = 0;
    for (;;) {
        struct keep_msg m;
        int fd = -1;
        /* A supervisor that stopped sending (gone, or it could not) leaves the rest: never waited for
         * without end, since no client is served meanwhile. */
        struct pollfd p = {.fd = sup_keep_fd, .events = POLLIN};
        if (!held && sup_keep_fd >= 0 && poll(&p, 1, HAND_OVER_WAIT_MS) <= 0) {
            cumux_logf("the supervisor stopped handing over chunks after %zu: going on without the rest", n);
            return n;
        }
        bool got;
        if (held) {
            m = held_msg, fd = held_fd, got = true;
            held = false;
        } else {
            got = sup_keep_fd >= 0 && cumux_sock_recv(sup_keep_fd, &m, sizeof m, &fd) == 0;
        }
        if (got && (m.kind == KEEP_MIRROR || m.kind == KEEP_UNMIRROR)) { /* sent before the takeover */
            mirror_message(&m, fd, mirror);
            continue;
        }
        if (!got || m.kind != KEEP_TAKE) {
            if (fd >= 0)
                close(fd);
            return n;
        }
        if (n < cap && fd >= 0) {
            out[n++] = kept_of(&m, fd);
        } else {
            if (fd >= 0)
                close(fd);
            srv_supervisor_drop(m.base); /* no room here: the supervisor lets it go */
        }
    }
}

int srv_kept_memory(uint64_t *chunks, uint64_t *bytes)
{
    int g = srv_gpu_served;
    if (!sup_page || g < 0 || g >= CUMUX_MAX_DEVICES)
        return -1;
    *chunks = atomic_load(&sup_page->kept_chunks[g]);
    *bytes = atomic_load(&sup_page->kept_bytes[g]);
    return 0;
}

/* The count `cumux status` shows (the supervisor's table changed). */
static void kept_note(struct sup_domain *d)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < d->nkept; i++)
        bytes += d->kept[i].size;
    if (sup_page) {
        atomic_store(&sup_page->kept_chunks[d->gpu], d->nkept);
        atomic_store(&sup_page->kept_bytes[d->gpu], bytes);
    }
}

static void unmirror_later(struct sup_domain *d, uint64_t id);

/* Supervisor: what a worker of domain d said of its chunks. */
void sup_keep_read(struct sup_domain *d, int sock)
{
    for (bool changed = false;; changed = true) {
        struct keep_msg m;
        int fd = -1;
        if (cumux_sock_recv_some(sock, &m, sizeof m, &fd) != (ssize_t)sizeof m) {
            if (fd >= 0)
                close(fd);
            if (changed)
                kept_note(d);
            return;
        }
        if (m.kind == KEEP_CHUNK && fd >= 0) {
            if (d->nkept == d->capkept) {
                size_t nc = d->capkept ? d->capkept * 2 : 64;
                struct srv_kept_chunk *nv = realloc(d->kept, nc * sizeof *nv);
                if (nv)
                    d->kept = nv;
                bool *nm = nv ? realloc(d->kept_mirrored, nc * sizeof *nm) : NULL;
                if (!nm) {
                    close(fd);
                    cumux_logf("no memory to keep a chunk's descriptor: it will not outlive its worker");
                    continue;
                }
                d->kept_mirrored = nm;
                d->capkept = nc;
            }
            d->kept[d->nkept] = kept_of(&m, fd);
            d->kept[d->nkept].id = ++next_kept_id;
            d->kept_mirrored[d->nkept++] = false;
            continue;
        }
        if (fd >= 0)
            close(fd);
        for (size_t i = 0; i < d->nkept;) {
            if ((m.kind == KEEP_DROP && d->kept[i].base == m.base) ||
                (m.kind == KEEP_DROP_CLIENT && d->kept[i].client == m.client)) {
                if (d->kept_mirrored[i])
                    unmirror_later(d, d->kept[i].id);
                close(d->kept[i].fd);
                d->kept[i] = d->kept[--d->nkept];
                d->kept_mirrored[i] = d->kept_mirrored[d->nkept];
            } else {
                i++;
            }
        }
    }
}

/* ---- mapping ahead in the standby ----
 * Mapping a chunk costs the worker taking over milliseconds each (65 ms for 8 on the H200), and its
 * clients wait for theirs before they come back: so the ready standby gets each chunk as it comes and
 * maps it at once, and is told when one goes. Sent without waiting: what does not fit now goes at the
 * next round of the supervisor's loop; a chunk not mapped ahead is mapped at the takeover, as before. */

static void unmirror_later(struct sup_domain *d, uint64_t id)
{
    if (d->nunmirror == d->capunmirror) {
        size_t nc = d->capunmirror ? d->capunmirror * 2 : 64;
        uint64_t *nv = realloc(d->unmirror, nc * sizeof *nv);
        if (!nv) { /* the standby keeps a stale mapping until it takes over (it unmaps it then) */
            d->mirror_on = false;
            return;
        }
        d->unmirror = nv;
        d->capunmirror = nc;
    }
    d->unmirror[d->nunmirror++] = id;
}

/* A new standby (or none): nothing of the old one's is mapped there. */
void sup_mirror_reset(struct sup_domain *d, bool ready)
{
    for (size_t i = 0; i < d->nkept; i++)
        d->kept_mirrored[i] = false;
    d->nunmirror = 0;
    d->mirror_on = ready;
}

/* What the standby has not been told yet; true while some is left. */
bool sup_mirror_flush(struct sup_domain *d)
{
    if (!d->mirror_on || d->keep_standby < 0)
        return false;
    size_t sent = 0;
    for (; sent < d->nunmirror; sent++) {
        struct keep_msg m = {.kind = KEEP_UNMIRROR, .id = d->unmirror[sent]};
        if (cumux_sock_send_now(d->keep_standby, &m, sizeof m, -1) < 0)
            break;
    }
    if (sent) {
        memmove(d->unmirror, d->unmirror + sent, (d->nunmirror - sent) * sizeof *d->unmirror);
        d->nunmirror -= sent;
    }
    if (d->nunmirror)
        return true;
    for (size_t i = 0; i < d->nkept; i++) {
        if (d->kept_mirrored[i])
            continue;
        struct keep_msg m = keep_msg_of(KEEP_MIRROR, &d->kept[i]);
        if (cumux_sock_send_now(d->keep_standby, &m, sizeof m, d->kept[i].fd) < 0)
            return true;
        d->kept_mirrored[i] = true;
    }
    return false;
}

/* To the standby taking over, which reads them as they come: its socket (non-blocking here) holds a few
 * hundred messages, so a full one is waited on, up to the deadline. */
static int send_to_standby(struct sup_domain *d, const struct keep_msg *m, int fd, uint64_t deadline_ns)
{
    for (;;) {
        if (cumux_sock_send_now(d->keep_standby, m, sizeof *m, fd) == 0)
            return 0;
        uint64_t now = cumux_now_ns();
        if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) || now >= deadline_ns)
            return -1;
        struct pollfd p = {.fd = d->keep_standby, .events = POLLOUT};
        uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
        poll(&p, 1, left_ms < 100 ? (int)left_ms : 100);
    }
}

/* Supervisor: the chunks go to the standby that takes over (their descriptors stay here too, until the
 * new worker drops them); without one, they are let go. */
void sup_keep_hand_over(struct sup_domain *d, bool to_standby)
{
    if (d->keep_active >= 0)
        sup_keep_read(d, d->keep_active); /* what the failed worker said last */
    size_t handed = 0;
    /* In all, time for a standby still mapping ahead what it was sent before (milliseconds a chunk). */
    uint64_t deadline = cumux_now_ns() + 4 * HAND_OVER_WAIT_MS * 1000000ull;
    for (size_t i = 0; to_standby && d->keep_standby >= 0 && i < d->nkept; i++) {
        struct keep_msg m = keep_msg_of(KEEP_TAKE, &d->kept[i]);
        handed += send_to_standby(d, &m, d->kept[i].fd, deadline) == 0;
    }
    if (to_standby && d->keep_standby >= 0) {
        struct keep_msg end = {.kind = KEEP_TAKE_END};
        send_to_standby(d, &end, -1, deadline);
    }
    if (d->nkept && to_standby && handed < d->nkept)
        cumux_logf("clients' memory: %zu of %zu chunk(s) handed to the worker taking over (it stopped taking them)",
                   handed, d->nkept);
    else if (d->nkept)
        cumux_logf("clients' memory: %zu chunk(s) %s", d->nkept, to_standby ? "handed to the worker taking over" : "let go");
    if (!to_standby) {
        for (size_t i = 0; i < d->nkept; i++)
            close(d->kept[i].fd);
        d->nkept = 0;
    }
    for (size_t i = 0; i < d->nkept; i++)
        d->kept[i].client = UINT32_MAX; /* the old worker's ids: the new worker drops these by address */
    sup_mirror_reset(d, false); /* the next standby maps them anew */
    kept_note(d);
    if (d->keep_active >= 0)
        close(d->keep_active);
    d->keep_active = to_standby ? d->keep_standby : -1;
    d->keep_standby = -1;
}

