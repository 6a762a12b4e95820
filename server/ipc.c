/* CUDA IPC between clients of this server. Every client's memory lives in the one shared context, so
 * sharing an allocation needs no mapping: its owner exports it as a random token, and a client that opens
 * the token may name the same device address until it closes it (it joins that client's dev_ranges). The
 * memory lives until its owner has freed it and every opener has closed it: an owner that frees or goes
 * first leaves the free to the last opener, ordered after the owner's own work. The table of exports is
 * the only state shared between clients' workers: ipc_lock guards it, and an export's owner is compared,
 * never followed. Memory in chunks (CUMUX_CONTAIN=1) is the chunk's client's to free: the last opener
 * asks it to (srv_chunk_free_later), or, once that client has gone, lets its chunk go. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"
#include "server/handlers.h"

struct ipc_export {
    uint64_t token, base, size;
    int gpu;
    const struct srv_client *owner; /* NULL once the owner freed it or went */
    unsigned opens;                 /* clients' opens not yet closed */
    CUevent freed_after;            /* the owner's work before its free, when the free waits for openers */
    /* Memory in a chunk (CUMUX_CONTAIN=1) freed by its owner while open: the client whose chunk holds it
     * (followed: cleared under ipc_lock at that client's end, before its chunks go), then the chunk
     * itself once that client has gone (chunks.c srv_chunk_hold). */
    struct srv_client *chunk_owner;
    struct chunk *held;
    struct ipc_export *next;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ipc_export *exports;

/* Caller holds ipc_lock. */
static struct ipc_export **find(uint64_t token, uint64_t base)
{
    struct ipc_export **p = &exports;
    while (*p && !(token ? (*p)->token == token : (*p)->base == base))
        p = &(*p)->next;
    return p;
}

static void reply_handle(const struct ipc_export *e, uint8_t *out, uint32_t *out_len)
{
    struct cumux_ipc_mem_handle rep = {.token = e->token, .base = e->base, .size = e->size};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
}

CUresult op_ipc_get_mem_handle(struct srv_client *c, const struct cumux_ipc_get_mem_handle *m, uint8_t *out,
                               uint32_t *out_len)
{
    const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, m->ptr);
    if (!r || r->base != m->ptr || r->tag != RANGE_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    struct ipc_export *e = *find(0, m->ptr);
    if (e && e->owner != c)
        e = NULL; /* an old export of memory at the same address, freed and kept for its openers */
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* Unguessable, and never 0 or one in use. */
        do {
            if (getrandom(&e->token, sizeof e->token, 0) != sizeof e->token) {
                pthread_mutex_unlock(&ipc_lock);
                free(e);
                return CUDA_ERROR_OPERATING_SYSTEM;
            }
        } while (e->token == 0 || *find(e->token, 0));
        *e = (struct ipc_export){.token = e->token, .base = r->base, .size = r->size, .gpu = (int)r->extra,
                                 .owner = c, .next = exports};
        exports = e;
    }
    reply_handle(e, out, out_len);
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

CUresult op_ipc_open_mem_handle(struct srv_client *c, const struct cumux_ipc_open_mem_handle *m, uint8_t *out,
                                uint32_t *out_len)
{
    if (m->token == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    struct ipc_export *e = *find(m->token, 0);
    /* Memory freed by its owner is not opened anew; nor is one's own (as in CUDA, within one context). */
    CUresult res = !e || !e->owner ? CUDA_ERROR_INVALID_VALUE : e->owner == c ? CUDA_ERROR_INVALID_CONTEXT
                                                                              : CUDA_SUCCESS;
    if (res == CUDA_SUCCESS) {
        struct cumux_range *mine = (struct cumux_range *)cumux_ranges_find(&c->memory.dev_ranges, e->base);
        if (mine && mine->base == e->base && mine->tag == RANGE_IPC)
            mine->extra++; /* opened again: closed as many times */
        else if (cumux_ranges_add(&c->memory.dev_ranges, e->base, e->size, RANGE_IPC, 1) < 0)
            res = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (res == CUDA_SUCCESS) {
        e->opens++;
        reply_handle(e, out, out_len);
    }
    pthread_mutex_unlock(&ipc_lock);
    return res;
}

/* One close of export e by client c, who holds it open. Caller holds ipc_lock. The last close of memory
 * its owner let go frees it: after the owner's work before its free and this client's work so far. */
static void close_once(struct srv_client *c, struct ipc_export **pe)
{
    struct ipc_export *e = *pe;
    if (--e->opens > 0 || e->owner)
        return;
    CUstream ms;
    if (after_client_work(c, e->gpu, &ms) == CUDA_SUCCESS) {
        if (e->freed_after)
            cuStreamWaitEvent(ms, e->freed_after, 0);
        CUevent done = NULL;
        if (e->chunk_owner) { /* its chunk's client frees it, after this work */
            if (cuEventCreate(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                cuEventRecord(done, ms) == CUDA_SUCCESS)
                srv_chunk_free_later(e->chunk_owner, e->base, done);
            else if (done)
                cuEventDestroy(done);
        } else if (srv_chunks_in_arena(e->base)) { /* its chunk's client has gone: the chunk goes with the last hold */
            cuStreamSynchronize(ms);
            srv_chunk_unhold(c, e->held);
        } else {
            cuMemFreeAsync(e->base, ms);
        }
    } else if (e->held) {
        srv_chunk_unhold(c, e->held);
    }
    if (e->freed_after)
        cuEventDestroy(e->freed_after);
    *pe = e->next;
    free(e);
}

CUresult op_ipc_close_mem_handle(struct srv_client *c, const struct cumux_ipc_close_mem_handle *m)
{
    struct cumux_range *mine = (struct cumux_range *)cumux_ranges_find(&c->memory.dev_ranges, m->ptr);
    if (!mine || mine->base != m->ptr || mine->tag != RANGE_IPC)
        return CUDA_ERROR_INVALID_VALUE;
    if (--mine->extra == 0)
        cumux_ranges_remove(&c->memory.dev_ranges, m->ptr, NULL);
    pthread_mutex_lock(&ipc_lock);
    /* The export open at this address: the one with openers (a newer export of the same address has none
     * of this client's, since this client's range still covered the address). */
    struct ipc_export **pe = &exports;
    while (*pe && !((*pe)->base == m->ptr && (*pe)->opens > 0))
        pe = &(*pe)->next;
    if (*pe)
        close_once(c, pe);
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

bool srv_ipc_defer_free(struct srv_client *c, uint64_t base, int gpu, CUstream stream)
{
    pthread_mutex_lock(&ipc_lock);
    struct ipc_export **pe = &exports;
    while (*pe && !((*pe)->base == base && (*pe)->owner == c))
        pe = &(*pe)->next;
    struct ipc_export *e = *pe;
    bool defer = false;
    if (e && e->opens == 0) {
        *pe = e->next; /* nobody holds it: the owner frees it as usual */
        free(e);
    } else if (e) {
        /* The free waits for the owner's work so far (on `stream`, or on all its streams) and for the
         * openers' closes. */
        CUstream after = stream;
        if ((after || after_client_work(c, gpu, &after) == CUDA_SUCCESS) &&
            cuEventCreate(&e->freed_after, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS)
            cuEventRecord(e->freed_after, after);
        e->owner = NULL;
        if (srv_chunks_in_arena(base))
            e->chunk_owner = c; /* it stays allocated in c's chunk */
        defer = true;
    }
    pthread_mutex_unlock(&ipc_lock);
    return defer;
}

void srv_ipc_release_all(struct srv_client *c)
{
    /* What it opened, closed as many times as it was opened. */
    for (size_t i = c->memory.dev_ranges.n; i-- > 0;) {
        struct cumux_range r = c->memory.dev_ranges.v[i];
        if (r.tag != RANGE_IPC)
            continue;
        cumux_ranges_remove(&c->memory.dev_ranges, r.base, NULL);
        pthread_mutex_lock(&ipc_lock);
        for (uint64_t k = 0; k < r.extra; k++) {
            struct ipc_export **pe = &exports;
            while (*pe && !((*pe)->base == r.base && (*pe)->opens > 0))
                pe = &(*pe)->next;
            if (*pe)
                close_once(c, pe);
        }
        pthread_mutex_unlock(&ipc_lock);
    }
    /* What it exported: freed as usual (the caller) unless others hold it. */
    for (size_t i = c->memory.dev_ranges.n; i-- > 0;) {
        struct cumux_range r = c->memory.dev_ranges.v[i];
        if (r.tag == RANGE_ALLOC && srv_ipc_defer_free(c, r.base, (int)r.extra, NULL)) {
            cumux_ranges_remove(&c->memory.dev_ranges, r.base, NULL);
            srv_mem_uncharge(c, r.size);
        }
    }
    /* Memory in its chunks that others hold open: those chunks outlive it. */
    pthread_mutex_lock(&ipc_lock);
    for (struct ipc_export *e = exports; e; e = e->next)
        if (e->chunk_owner == c) {
            e->held = srv_chunk_hold(c, e->base);
            e->chunk_owner = NULL;
        }
    pthread_mutex_unlock(&ipc_lock);
}

/* ---- interprocess events: one CUevent, shared by the handles of its owner and its openers ---- */
struct ipc_event {
    uint64_t token;
    CUevent cu;
    unsigned refs; /* handles of it, in all clients */
    struct ipc_event *next;
};

static struct ipc_event *ipc_events;

CUresult op_ipc_get_event_handle(struct srv_client *c, struct srv_event *event, uint8_t *out, uint32_t *out_len)
{
    (void)c;
    if (!(event->flags & CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    if (!event->ipc) {
        struct ipc_event *ev = calloc(1, sizeof *ev);
        if (!ev) {
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        bool taken;
        do {
            if (getrandom(&ev->token, sizeof ev->token, 0) != sizeof ev->token) {
                pthread_mutex_unlock(&ipc_lock);
                free(ev);
                return CUDA_ERROR_OPERATING_SYSTEM;
            }
            taken = ev->token == 0;
            for (struct ipc_event *x = ipc_events; x && !taken; x = x->next)
                taken = x->token == ev->token;
        } while (taken);
        ev->cu = event->cu;
        ev->refs = 1;
        ev->next = ipc_events;
        ipc_events = ev;
        event->ipc = ev;
    }
    uint64_t token = event->ipc->token;
    pthread_mutex_unlock(&ipc_lock);
    return reply_u64(out, out_len, token);
}

CUresult op_ipc_open_event_handle(struct srv_client *c, const struct cumux_ipc_open_event_handle *m,
                                  struct srv_ctx *ctx, uint8_t *out, uint32_t *out_len)
{
    struct srv_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ipc_lock);
    struct ipc_event *ev = ipc_events;
    while (ev && (m->token == 0 || ev->token != m->token))
        ev = ev->next;
    if (!ev) {
        pthread_mutex_unlock(&ipc_lock);
        free(e);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *e = (struct srv_event){.cu = ev->cu, .ctx = ctx, .flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
                            .ipc = ev};
    e->handle = handle_new(c, OBJ_EVENT, e);
    if (e->handle)
        ev->refs++;
    pthread_mutex_unlock(&ipc_lock);
    if (!e->handle) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, e->handle);
}

void srv_ipc_event_drop(struct ipc_event *ev)
{
    pthread_mutex_lock(&ipc_lock);
    bool last = --ev->refs == 0;
    if (last) {
        struct ipc_event **p = &ipc_events;
        while (*p != ev)
            p = &(*p)->next;
        *p = ev->next;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (last) {
        cuEventDestroy(ev->cu);
        free(ev);
    }
}
