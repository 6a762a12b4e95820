/* Pinned host memory across the network: see pinned_mirror.h. */
#include "cli/pinned_mirror.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/channel.h"
#include "common/mirror.h"
#include "common/proto.h"

#define PAGE 4096u
#define GAP 32u /* changed runs closer than this go as one (a record's head is 16 bytes) */
#define REC_HEAD 16u

void pinned_init(struct pinned_set *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
}

void pinned_fini(struct pinned_set *s)
{
    while (s->n)
        pinned_remove(s, s->v[s->n - 1].server_addr);
    free(s->v);
    pthread_mutex_destroy(&s->lock);
    memset(s, 0, sizeof *s);
}

static struct pinned_block *find(struct pinned_set *s, uint64_t addr, uint64_t len)
{
    for (size_t i = 0; i < s->n; i++) {
        struct pinned_block *b = &s->v[i];
        if (addr >= b->server_addr && addr - b->server_addr <= b->size && len <= b->size - (addr - b->server_addr))
            return b;
    }
    return NULL;
}

int pinned_add(struct pinned_set *s, uint64_t server_addr, uint64_t size, uint8_t *mem)
{
    int rc = -1;
    pthread_mutex_lock(&s->lock);
    bool overlap = size == 0 || server_addr + size < server_addr || s->bytes + size > PINNED_MAX_BYTES;
    for (size_t i = 0; !overlap && i < s->n; i++)
        overlap = server_addr < s->v[i].server_addr + s->v[i].size && s->v[i].server_addr < server_addr + size;
    if (!overlap && s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 16;
        struct pinned_block *nv = realloc(s->v, nc * sizeof *nv);
        if (nv)
            s->v = nv, s->cap = nc;
    }
    /* The shadow starts as zeros, as the other side's fresh copy does: the first look sends what is not. */
    uint8_t *shadow = !overlap && s->n < s->cap
                          ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                          : MAP_FAILED;
    if (shadow != MAP_FAILED) {
        s->v[s->n++] = (struct pinned_block){server_addr, size, mem, shadow};
        s->bytes += size;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        munmap(mem, size);
    return rc;
}

void pinned_remove(struct pinned_set *s, uint64_t server_addr)
{
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].server_addr != server_addr)
            continue;
        munmap(s->v[i].mem, s->v[i].size);
        munmap(s->v[i].shadow, s->v[i].size);
        s->bytes -= s->v[i].size;
        s->v[i] = s->v[--s->n];
        break;
    }
    pthread_mutex_unlock(&s->lock);
}

struct out {
    uint8_t *buf;
    size_t len, cap;
};

/* Whether a record of n bytes still fits. */
static bool fits(const struct out *o, uint32_t n)
{
    return o->len + REC_HEAD + ((n + 7u) & ~7u) <= o->cap;
}

static void record(struct out *o, uint64_t addr, const uint8_t *p, uint32_t n)
{
    size_t need = REC_HEAD + ((n + 7u) & ~7u);
    uint32_t head[4] = {(uint32_t)addr, (uint32_t)(addr >> 32), n, 0};
    memcpy(o->buf + o->len, head, sizeof head);
    memcpy(o->buf + o->len + REC_HEAD, p, n);
    memset(o->buf + o->len + REC_HEAD + n, 0, need - REC_HEAD - n);
    o->len += need;
}

/* Whether the 8-byte unit at k (shorter at the page's end) differs. */
static bool unit_differs(const uint8_t *a, const uint8_t *b, uint32_t k, uint32_t n)
{
    if (n - k >= 8) {
        uint64_t x, y;
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        return x != y;
    }
    return memcmp(a + k, b + k, n - k) != 0;
}

/* The changed runs of one page into o, the shadow made what was recorded. How many bytes changed. Runs
 * are found 8 bytes at a time (a byte at a time, a whole changed page cost more than sending it). */
static long long diff_page(struct pinned_block *b, uint64_t off, struct out *o)
{
    uint32_t n = b->size - off < PAGE ? (uint32_t)(b->size - off) : PAGE;
    if (!memcmp(b->mem + off, b->shadow + off, n))
        return 0;
    uint8_t page[PAGE];
    memcpy(page, b->mem + off, n); /* one look: the bytes sent are the bytes the shadow keeps */
    uint8_t *sh = b->shadow + off;
    long long changed = 0;
    for (uint32_t k = 0; k < n; k += 8) {
        if (!unit_differs(page, sh, k, n))
            continue;
        uint32_t start = k, last = k;
        for (k += 8; k < n && k - last <= GAP; k += 8)
            if (unit_differs(page, sh, k, n))
                last = k;
        uint32_t end = last + 8 < n ? last + 8 : n, len = end - start;
        record(o, b->server_addr + off + start, page + start, len);
        memcpy(sh + start, page + start, len);
        changed += len;
        k = last; /* the loop's step moves past it */
    }
    return changed;
}

int pinned_due(struct pinned_set *s, uint64_t now_ns)
{
    pthread_mutex_lock(&s->lock);
    int due = s->n && now_ns >= s->next_look_ns;
    pthread_mutex_unlock(&s->lock);
    return due;
}

/* ---- a large span's pages compared on several cores ----
 * A look's cost is the compare of each page against its shadow: one core reads both at its memory
 * bandwidth, which for a buffer of hundreds of MiB is longer than the GPU's copy of it. Spans of at least
 * PAR_MIN are split between the looking thread and helper threads (half the CPUs, at most 8 in all),
 * started at the first such look; each says which pages differ, and the looking thread then diffs those
 * alone. One parallel compare at a time per process (a relay's or a gateway's looks are one thread's). */
#define PAR_MIN (8ull << 20)
#define PAR_THREADS 8

static struct {
    pthread_once_t once;
    pthread_mutex_t one; /* one job at a time */
    pthread_mutex_t m;
    pthread_cond_t go, done;
    unsigned helpers, pending;
    pid_t pid; /* the process the helpers are threads of (a child forked after has none) */
    uint64_t gen;
    /* the job: pages [lo, hi) of mem against shadow (a block of size bytes), a byte per page into changed */
    const uint8_t *mem, *shadow;
    uint64_t lo, hi, size;
    uint8_t *changed;
} par = {.once = PTHREAD_ONCE_INIT,
         .one = PTHREAD_MUTEX_INITIALIZER,
         .m = PTHREAD_MUTEX_INITIALIZER,
         .go = PTHREAD_COND_INITIALIZER,
         .done = PTHREAD_COND_INITIALIZER};

/* Part k of `parts` of the current job. */
static void par_part(unsigned k, unsigned parts)
{
    uint64_t pages = (par.hi - par.lo + PAGE - 1) / PAGE, from = pages * k / parts, to = pages * (k + 1) / parts;
    for (uint64_t i = from; i < to; i++) {
        uint64_t off = par.lo + i * PAGE, n = par.size - off < PAGE ? par.size - off : PAGE;
        par.changed[i] = memcmp(par.mem + off, par.shadow + off, n) != 0;
    }
}

static void *par_helper(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&par.m);
    for (;;) {
        while (par.gen == seen)
            pthread_cond_wait(&par.go, &par.m);
        seen = par.gen;
        unsigned parts = par.helpers + 1;
        pthread_mutex_unlock(&par.m);
        par_part(k, parts);
        pthread_mutex_lock(&par.m);
        if (--par.pending == 0)
            pthread_cond_signal(&par.done);
    }
    return NULL;
}

static void par_start(void)
{
    par.pid = getpid();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = cpus > 1 ? (unsigned)(cpus / 2) : 1;
    if (want > PAR_THREADS)
        want = PAR_THREADS;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* helpers take no signals: the process's threads do */
    for (unsigned k = 1; k < want; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, par_helper, (void *)(uintptr_t)k) != 0)
            break;
        pthread_detach(t);
        par.helpers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Which pages of [lo, hi) of block b differ from the shadow, a byte each into *changed (a buffer of this
 * thread's): false where there are no helpers (the caller compares as it goes). */
static bool par_compare(const struct pinned_block *b, uint64_t lo, uint64_t hi, uint8_t **changed)
{
    static __thread uint8_t *buf;
    static __thread uint64_t cap;
    pthread_once(&par.once, par_start);
    uint64_t pages = (hi - lo + PAGE - 1) / PAGE;
    if (!par.helpers || par.pid != getpid())
        return false;
    if (pages > cap) {
        uint8_t *nb = realloc(buf, pages);
        if (!nb)
            return false;
        buf = nb, cap = pages;
    }
    pthread_mutex_lock(&par.one);
    pthread_mutex_lock(&par.m);
    par.mem = b->mem, par.shadow = b->shadow, par.lo = lo, par.hi = hi, par.size = b->size, par.changed = buf;
    par.pending = par.helpers;
    par.gen++;
    pthread_cond_broadcast(&par.go);
    pthread_mutex_unlock(&par.m);
    par_part(0, par.helpers + 1);
    pthread_mutex_lock(&par.m);
    while (par.pending)
        pthread_cond_wait(&par.done, &par.m);
    pthread_mutex_unlock(&par.m);
    pthread_mutex_unlock(&par.one);
    *changed = buf;
    return true;
}

/* The span of pages of block b that range r (NULL: all of it) touches: [*lo, *hi) offsets. false: none. */
static bool span(const struct pinned_block *b, const struct pinned_range *r, uint64_t *lo, uint64_t *hi)
{
    if (!r) {
        *lo = 0, *hi = b->size;
        return true;
    }
    uint64_t end = r->addr + r->len; /* pinned_op_ranges made it fit in 64 bits */
    if (r->len == 0 || end <= b->server_addr || r->addr >= b->server_addr + b->size)
        return false;
    uint64_t a = r->addr > b->server_addr ? r->addr - b->server_addr : 0;
    uint64_t z = end - b->server_addr < b->size ? end - b->server_addr : b->size;
    *lo = a / PAGE * PAGE, *hi = z;
    return true;
}

/* A look at the blocks' pages that ranges r[0, nr) touch, or at all of them (r NULL). */
static long long look(struct pinned_set *s, const struct pinned_range *r, size_t nr, pinned_send_fn send, void *ctx)
{
    /* A frame's payload holds the mirror's head too; records of a page at most are under this. */
    static __thread uint8_t *buf;
    enum { CAP = (1u << 20) };
    if (!buf && !(buf = malloc(CAP)))
        return -1;
    struct out o = {.buf = buf, .cap = CAP};
    long long changed = 0;
    /* Records are gathered under the lock and sent without it: the other side may be sending to us at the
     * same time, and our reader, applying what it sends, takes this lock; holding it through a send that
     * waits for the other side to read would leave both sides waiting. Blocks are found again by address
     * after each send (one freed meanwhile is skipped; its bytes mean nothing any more). */
    static __thread uint64_t *addrs; /* kept between calls: this runs at every synchronizing point */
    static __thread size_t addrs_cap;
    pthread_mutex_lock(&s->lock);
    size_t nblocks = s->n;
    if (nblocks > addrs_cap) {
        uint64_t *na = realloc(addrs, nblocks * sizeof *na);
        if (!na) {
            pthread_mutex_unlock(&s->lock);
            return -1;
        }
        addrs = na, addrs_cap = nblocks;
    }
    for (size_t i = 0; i < nblocks; i++)
        addrs[i] = s->v[i].server_addr;
    int failed = 0;
    size_t nspans = r ? nr : 1;
    for (size_t i = 0; i < nblocks && !failed; i++) {
        for (size_t j = 0; j < nspans && !failed; j++) {
            bool first = true;
            uint8_t *same = NULL; /* where set, a byte per page from `from`: whether it differed (par_compare) */
            uint64_t from = 0;
            const uint8_t *same_mem = NULL;
            for (uint64_t off = 0;;) {
                struct pinned_block *b = find(s, addrs[i], 1);
                uint64_t lo, hi;
                if (!b || b->server_addr != addrs[i] || !span(b, r ? &r[j] : NULL, &lo, &hi))
                    break;
                if (first) {
                    off = from = lo, first = false;
                    if (hi - lo >= PAR_MIN && par_compare(b, lo, hi, &same))
                        same_mem = b->mem;
                }
                while (off < hi && fits(&o, PAGE)) {
                    /* A block freed and made again at the address while we sent: compared as we go. */
                    if (!same || b->mem != same_mem || same[(off - from) / PAGE])
                        changed += diff_page(b, off, &o);
                    off += PAGE;
                }
                if (off < hi) {
                    /* Full: out without the lock. */
                    pthread_mutex_unlock(&s->lock);
                    failed = send(ctx, o.buf, o.len) < 0;
                    o.len = 0;
                    pthread_mutex_lock(&s->lock);
                    continue;
                }
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!failed && o.len)
        failed = send(ctx, o.buf, o.len) < 0;
    return failed ? -1 : changed;
}

/* A look that counts as the one now and then, begun at t0: the next is due in 1 ms, or 20 times what this
 * one cost. */
static void looked(struct pinned_set *s, uint64_t t0)
{
    uint64_t t1 = cumux_now_ns();
    pthread_mutex_lock(&s->lock);
    s->look_cost_ns = t1 - t0;
    s->next_look_ns = t1 + (20 * s->look_cost_ns > 1000000 ? 20 * s->look_cost_ns : 1000000);
    pthread_mutex_unlock(&s->lock);
}

long long pinned_diff(struct pinned_set *s, pinned_send_fn send, void *ctx)
{
    uint64_t t0 = cumux_now_ns();
    long long changed = look(s, NULL, 0, send, ctx);
    looked(s, t0);
    return changed;
}

long long pinned_diff_ranges(struct pinned_set *s, const struct pinned_range *r, size_t nr, bool scheduled,
                             pinned_send_fn send, void *ctx)
{
    uint64_t t0 = scheduled ? cumux_now_ns() : 0;
    long long changed = nr ? look(s, r, nr, send, ctx) : 0;
    if (scheduled)
        looked(s, t0);
    return changed;
}

/* [start, start + (rows - 1) * pitch + width) as a range; false where it does not fit in 64 bits. */
static bool rows_range(uint64_t start, uint64_t pitch, uint64_t width, uint64_t rows, struct pinned_range *r)
{
    uint64_t len = width;
    if (rows > 1) {
        if (pitch && rows - 1 > (UINT64_MAX - width) / pitch)
            return false;
        len = (rows - 1) * pitch + width;
    }
    if (len > UINT64_MAX - start)
        return false;
    *r = (struct pinned_range){start, len};
    return true;
}

int pinned_op_ranges(unsigned op, const uint8_t *body, size_t len, bool gateway, struct pinned_range r[2])
{
    struct pinned_range src, dst;
    if (op == CUMUX_OP_COPY && len >= sizeof(struct cumux_copy)) {
        struct cumux_copy m;
        memcpy(&m, body, sizeof m);
        if (!rows_range(m.src, 0, m.size, 1, &src) || !rows_range(m.dst, 0, m.size, 1, &dst))
            return -1;
    } else if (op == CUMUX_OP_COPY_2D && len >= sizeof(struct cumux_copy_2d)) {
        struct cumux_copy_2d m;
        memcpy(&m, body, sizeof m);
        if (!rows_range(m.src, m.src_pitch, m.width, m.height, &src) ||
            !rows_range(m.dst, m.dst_pitch, m.width, m.height, &dst))
            return -1;
    } else if (op == CUMUX_OP_MEMSET && len >= sizeof(struct cumux_memset)) {
        struct cumux_memset m;
        memcpy(&m, body, sizeof m);
        if (m.elem_size > 4 || (m.elem_size && m.width > UINT64_MAX / m.elem_size) ||
            !rows_range(m.dst, m.pitch, m.width * m.elem_size, m.height ? m.height : 1, &r[0]))
            return -1;
        return 1;
    } else {
        return -1;
    }
    /* The relay sends what the GPU reads, and what it overwrites (the program's own bytes there, which the
     * gateway's copy must hold before the GPU's replace them: the bytes the GPU leaves as they were come
     * back as no change); the gateway sends back what the GPU writes. Either side may be pinned memory,
     * whatever the kind says (mapped pinned memory through its device address): the blocks tell. */
    int n = 0;
    if (!gateway)
        r[n++] = src;
    r[n++] = dst;
    return n;}

int pinned_apply(struct pinned_set *s, const uint8_t *p, size_t len)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t off = 0; off < len;) {
        uint32_t head[4];
        if (len - off < REC_HEAD) {
            rc = -1;
            break;
        }
        memcpy(head, p + off, sizeof head);
        uint64_t addr = head[0] | (uint64_t)head[1] << 32, n = head[2], need = REC_HEAD + ((n + 7u) & ~7ull);
        if (need > len - off || n == 0 || n > PAGE) {
            rc = -1;
            break;
        }
        /* Outside every block: one this side freed while the other sent its bytes (nothing to write). */
        struct pinned_block *b = find(s, addr, n);
        if (b) {
            memcpy(b->mem + (addr - b->server_addr), p + off + REC_HEAD, n);
            memcpy(b->shadow + (addr - b->server_addr), p + off + REC_HEAD, n);
        }
        off += need;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}
