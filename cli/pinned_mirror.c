/* Pinned host memory across the network: see pinned_mirror.h. */
#include "cli/pinned_mirror.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/frame.h"
#include "common/channel.h"
#include "common/mirror.h"

#define PAGE 4096u
#define GAP 32u /* changed runs closer than this go as one (a record's head is 16 bytes) */
#define REC_HEAD 16u

void pinned_init(struct pinned_set *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
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

/* The changed runs of one page into o, the shadow made what was recorded. How many bytes changed. */
static long long diff_page(struct pinned_block *b, uint64_t off, struct out *o)
{
    uint32_t n = b->size - off < PAGE ? (uint32_t)(b->size - off) : PAGE;
    if (!memcmp(b->mem + off, b->shadow + off, n))
        return 0;
    uint8_t page[PAGE];
    memcpy(page, b->mem + off, n); /* one look: the bytes sent are the bytes the shadow keeps */
    uint8_t *sh = b->shadow + off;
    long long changed = 0;
    for (uint32_t k = 0; k < n;) {
        if (page[k] == sh[k]) {
            k++;
            continue;
        }
        uint32_t start = k, last = k;
        for (; k < n && k - last <= GAP; k++)
            if (page[k] != sh[k])
                last = k;
        uint32_t len = last - start + 1;
        record(o, b->server_addr + off + start, page + start, len);
        memcpy(sh + start, page + start, len);
        changed += len;
        k = last + 1;
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

long long pinned_diff(struct pinned_set *s, pinned_send_fn send, void *ctx)
{
    /* A frame's payload holds the mirror's head too; records of a page at most are under this. */
    static __thread uint8_t *buf;
    enum { CAP = (1u << 20) };
    if (!buf && !(buf = malloc(CAP)))
        return -1;
    struct out o = {.buf = buf, .cap = CAP};
    long long changed = 0;
    uint64_t t0 = cumux_now_ns();
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
    for (size_t i = 0; i < nblocks && !failed; i++) {
        for (uint64_t off = 0;;) {
            struct pinned_block *b = find(s, addrs[i], 1);
            if (!b || b->server_addr != addrs[i])
                break;
            while (off < b->size && fits(&o, PAGE)) {
                changed += diff_page(b, off, &o);
                off += PAGE;
            }
            if (off < b->size || (i + 1 == nblocks && o.len)) {
                /* Full (or the last block's records): out without the lock. */
                pthread_mutex_unlock(&s->lock);
                failed = o.len && send(ctx, o.buf, o.len) < 0;
                o.len = 0;
                pthread_mutex_lock(&s->lock);
                if (failed)
                    break;
            }
            if (off >= b->size)
                break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!failed && o.len) /* the last block freed before its records went */
        failed = send(ctx, o.buf, o.len) < 0;
    uint64_t t1 = cumux_now_ns();
    pthread_mutex_lock(&s->lock);
    s->look_cost_ns = t1 - t0;
    s->next_look_ns = t1 + (20 * s->look_cost_ns > 1000000 ? 20 * s->look_cost_ns : 1000000);
    pthread_mutex_unlock(&s->lock);
    return failed ? -1 : changed;
}

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
