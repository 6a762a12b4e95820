/* CUDA IPC between clients of this server. Every client's memory lives in the one shared context, so
 * sharing an allocation needs no mapping: its owner exports it as a random token, and a client that opens
 * the token may name the same device address until it closes it (it joins that client's dev_ranges). The
 * memory lives until its owner has freed it and every opener has closed it: an owner that frees or goes
 * first leaves the free to the last opener, ordered after the owner's own work. The table of exports is
 * the only state shared between clients' workers: ipc_lock guards it, and an export's owner is compared,
 * never followed. Memory in chunks (CUMUX_CONTAIN=1) is the chunk's client's to free: the last opener
 * asks it to (srv_chunk_free_later), or, once that client has gone, lets its chunk go.
 *
 * Across GPUs (a worker per GPU, each its own process): a client opens a token of another GPU's worker
 * through that worker. Its worker connects to the owner's socket (IPC_LEASE), which checks the token, counts
 * one open and answers with a descriptor of the VMM chunk holding the memory (clients' memory is in chunks:
 * CUMUX_CONTAIN); the opener's worker maps the chunk at the same address (the workers' arenas lie side by
 * side, so the address is free there) with access for its own GPU (peer access: refused where the hardware
 * has none), and keeps the lease connection open while any of its clients holds the token open. The last
 * close waits for its client's work, then closes the connection: the owner's worker sees it go and
 * counts the open closed, as it does when the opener's worker dies. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/ask.h"
#include "common/log.h"
#include "common/sock.h"
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
    uint64_t chunk_base, chunk_size; /* the chunk holding it (0 0: none, or not in chunks) */
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
    struct cumux_ipc_mem_handle rep = {.token = e->token, .base = e->base, .size = e->size, .owner_gpu = srv_gpu_served};
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
        /* its chunk, for another GPU's worker to map (srv_ipc_lease): read here, on the owner's thread */
        if (srv_chunks_in_arena(e->base) && srv_chunk_extent(c, e->base, &e->chunk_base, &e->chunk_size) < 0)
            e->chunk_base = e->chunk_size = 0;
        exports = e;
    }
    reply_handle(e, out, out_len);
    pthread_mutex_unlock(&ipc_lock);
    return CUDA_SUCCESS;
}

/* ---- across GPUs: the opener's worker ---- */
/* A chunk of another GPU's worker mapped here, and the tokens opened in it. Under ipc_lock. */
struct remote_chunk {
    uint64_t base, size;
    unsigned refs; /* remote_opens mapping it */
    struct remote_chunk *next;
};
struct remote_open {
    uint64_t token, base, size;
    int owner_gpu;
    int lease;      /* the connection to the owner's worker */
    unsigned opens; /* clients' opens here not yet closed */
    struct remote_chunk *chunk;
    struct remote_open *next;
};
static struct remote_chunk *remote_chunks;
static struct remote_open *remote_opens;

/* The owner's worker's answer: the lease connection and the chunk's descriptor, or an error. */
static CUresult lease_ask(int gpu, uint64_t token, struct cumux_ipc_lease *info, int *lease, int *fd)
{
    char err[256] = "";
    *lease = -1;
    struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = CUMUX_HELLO_IPC_LEASE,
                            .token = token};
    struct cumux_welcome w;
    int s = cumux_ask_open(gpu, &h, 5000, &w, fd, err, sizeof err);
    if (s < 0) {
        cumux_logf("IPC: cannot reach GPU %d's worker: %s", gpu, err[0] ? err : strerror(errno));
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (w.status != 0 || *fd < 0) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        close(s);
        return w.status ? (CUresult)w.status : CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(info, w.message, sizeof *info);
    *lease = s;
    return CUDA_SUCCESS;
}

/* The chunk mapped here with access for this worker's GPU; NULL and *res when it cannot be. Caller holds
 * ipc_lock. */
static struct remote_chunk *chunk_map(const struct cumux_ipc_lease *info, int fd, CUresult *res)
{
    for (struct remote_chunk *k = remote_chunks; k; k = k->next)
        if (k->base == info->chunk_base && k->size == info->chunk_size) {
            k->refs++;
            return k;
        }
    struct remote_chunk *k = calloc(1, sizeof *k);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    CUresult r = k ? cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && (r = cuMemAddressReserve(&va, info->chunk_size, 0, info->chunk_base, 0)) == CUDA_SUCCESS &&
        va != info->chunk_base) {
        cuMemAddressFree(va, info->chunk_size);
        va = 0;
        r = CUDA_ERROR_INVALID_VALUE; /* its address is taken here: the same pointer cannot be given */
    }
    if (r == CUDA_SUCCESS && (r = cuMemMap(va, info->chunk_size, 0, h, 0)) == CUDA_SUCCESS) {
        CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = srv_gpus[srv_gpu_served].dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        if ((r = cuMemSetAccess(va, info->chunk_size, &rw, 1)) != CUDA_SUCCESS) {
            cuMemUnmap(va, info->chunk_size);
            r = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; /* no path from this GPU to the owner's */
        }
    }
    if (h)
        cuMemRelease(h); /* the mapping holds it */
    if (r != CUDA_SUCCESS) {
        if (va)
            cuMemAddressFree(va, info->chunk_size);
        free(k);
        *res = r;
        return NULL;
    }
    *k = (struct remote_chunk){.base = info->chunk_base, .size = info->chunk_size, .refs = 1, .next = remote_chunks};
    remote_chunks = k;
    return k;
}

static void chunk_unmap_remote(struct remote_chunk *k)
{
    if (--k->refs)
        return;
    struct remote_chunk **p = &remote_chunks;
    while (*p != k)
        p = &(*p)->next;
    *p = k->next;
    cuMemUnmap(k->base, k->size);
    cuMemAddressFree(k->base, k->size);
    free(k);
}

/* One close of the token open at base, if one is (caller holds ipc_lock): the last one's record, taken off
 * the list, is returned for remote_finish after the lock. */
static struct remote_open *remote_close_locked(uint64_t base)
{
    struct remote_open **p = &remote_opens;
    while (*p && !((*p)->base == base && (*p)->opens > 0))
        p = &(*p)->next;
    struct remote_open *o = *p;
    if (!o || --o->opens > 0)
        return NULL;
    *p = o->next;
    return o;
}

/* The last close of a token opened from another GPU's worker: once the client's work so far is done
 * (wait), the chunk is unmapped here if nothing else holds it, and the lease goes, which tells the owner's
 * worker. */
static void remote_finish(struct srv_client *c, struct remote_open *o, bool wait)
{
    CUstream ms;
    if (wait && after_client_work(c, srv_gpu_served, &ms) == CUDA_SUCCESS)
        cuStreamSynchronize(ms);
    pthread_mutex_lock(&ipc_lock);
    chunk_unmap_remote(o->chunk);
    pthread_mutex_unlock(&ipc_lock);
    close(o->lease);
    free(o);
}

/* The client's range for an opened token (another open: counted). Caller holds ipc_lock. */
static CUresult range_open(struct srv_client *c, uint64_t base, uint64_t size)
{
    struct cumux_range *mine = (struct cumux_range *)cumux_ranges_find(&c->memory.dev_ranges, base);
    if (mine && mine->base == base && mine->tag == RANGE_IPC) {
        mine->extra++; /* opened again: closed as many times */
        return CUDA_SUCCESS;
    }
    return cumux_ranges_add(&c->memory.dev_ranges, base, size, RANGE_IPC, 1) < 0 ? CUDA_ERROR_OUT_OF_MEMORY
                                                                                  : CUDA_SUCCESS;
}

static CUresult remote_open(struct srv_client *c, const struct cumux_ipc_open_mem_handle *m, uint8_t *out,
                            uint32_t *out_len)
{
    if (m->owner_gpu < 0 || m->owner_gpu >= srv_gpu_count)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, srv_gpu_served);
    pthread_mutex_lock(&ipc_lock);
    struct remote_open *o = remote_opens;
    while (o && !(o->token == m->token && o->owner_gpu == m->owner_gpu))
        o = o->next;
    CUresult res = CUDA_SUCCESS;
    if (!o) {
        /* Asked without the lock (the owner's worker may take a moment); another client's open of the same
         * token meanwhile is looked for again after. */
        pthread_mutex_unlock(&ipc_lock);
        struct cumux_ipc_lease info = {0};
        int lease, fd;
        res = lease_ask(m->owner_gpu, m->token, &info, &lease, &fd);
        pthread_mutex_lock(&ipc_lock);
        for (o = remote_opens; o && !(o->token == m->token && o->owner_gpu == m->owner_gpu);)
            o = o->next;
        if (res == CUDA_SUCCESS && o) {
            close(lease); /* the other open's lease holds it */
        } else if (res == CUDA_SUCCESS) {
            bool sane = info.size && info.base >= info.chunk_base && info.chunk_size >= info.size &&
                        info.base - info.chunk_base <= info.chunk_size - info.size;
            struct remote_chunk *k = sane ? chunk_map(&info, fd, &res) : NULL;
            if (!sane)
                res = CUDA_ERROR_INVALID_VALUE;
            o = k ? calloc(1, sizeof *o) : NULL;
            if (k && !o) {
                chunk_unmap_remote(k);
                res = CUDA_ERROR_OUT_OF_MEMORY;
            }
            if (o) {
                *o = (struct remote_open){.token = m->token, .base = info.base, .size = info.size,
                                          .owner_gpu = m->owner_gpu, .lease = lease, .chunk = k, .next = remote_opens};
                remote_opens = o;
            } else {
                close(lease);
            }
        }
        if (fd >= 0)
            close(fd);
    }
    if (o && (res = range_open(c, o->base, o->size)) == CUDA_SUCCESS) {
        o->opens++;
        struct cumux_ipc_mem_handle rep = {.token = o->token, .base = o->base, .size = o->size, .owner_gpu = o->owner_gpu};
        memcpy(out, &rep, sizeof rep);
        *out_len = sizeof rep;
    }
    struct remote_open *unused = NULL;
    if (o && o->opens == 0) { /* made for this open, which failed */
        o->opens = 1;
        unused = remote_close_locked(o->base);
    }
    pthread_mutex_unlock(&ipc_lock);
    if (unused)
        remote_finish(c, unused, false);
    return res;
}

CUresult op_ipc_open_mem_handle(struct srv_client *c, const struct cumux_ipc_open_mem_handle *m, uint8_t *out,
                                uint32_t *out_len)
{
    if (m->token == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->owner_gpu != srv_gpu_served)
        return remote_open(c, m, out, out_len);
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

/* One close by c of what it opened at base: this worker's export, or another GPU's worker's. */
static void close_open(struct srv_client *c, uint64_t base)
{
    pthread_mutex_lock(&ipc_lock);
    /* The export open at this address: the one with openers (a newer export of the same address has none
     * of this client's, since this client's range still covered the address). */
    struct ipc_export **pe = &exports;
    while (*pe && !((*pe)->base == base && (*pe)->opens > 0))
        pe = &(*pe)->next;
    struct remote_open *last = NULL;
    if (*pe)
        close_once(c, pe);
    else
        last = remote_close_locked(base);
    pthread_mutex_unlock(&ipc_lock);
    if (last)
        remote_finish(c, last, true);
}

CUresult op_ipc_close_mem_handle(struct srv_client *c, const struct cumux_ipc_close_mem_handle *m)
{
    struct cumux_range *mine = (struct cumux_range *)cumux_ranges_find(&c->memory.dev_ranges, m->ptr);
    if (!mine || mine->base != m->ptr || mine->tag != RANGE_IPC)
        return CUDA_ERROR_INVALID_VALUE;
    if (--mine->extra == 0)
        cumux_ranges_remove(&c->memory.dev_ranges, m->ptr, NULL);
    close_open(c, m->ptr);
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
        for (uint64_t k = 0; k < r.extra; k++)
            close_open(c, r.base);
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

/* ---- interprocess events: one CUevent, shared by the handles of its owner and its openers ----
 * An event of another GPU's worker (another process) is the driver's interprocess event: that worker
 * hands its CUipcEventHandle over a lease (IPC_LEASE with CUMUX_LEASE_EVENT), which keeps the event there
 * while this worker holds it open; this worker opens it once, and its clients' opens share that. */
struct ipc_event {
    uint64_t token;
    int owner_gpu; /* the worker's that made it; another's: opened here through lease */
    int lease;     /* the connection to that worker (-1: made here) */
    CUevent cu;
    unsigned refs; /* handles of it, in all clients (and leases of other workers, where made here) */
    struct ipc_event *next;
};

static struct ipc_event *ipc_events;

/* Caller holds ipc_lock. */
static struct ipc_event *event_find(uint64_t token, int owner_gpu)
{
    struct ipc_event *ev = ipc_events;
    while (ev && (token == 0 || ev->token != token || ev->owner_gpu != owner_gpu))
        ev = ev->next;
    return ev;
}

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
        do {
            if (getrandom(&ev->token, sizeof ev->token, 0) != sizeof ev->token) {
                pthread_mutex_unlock(&ipc_lock);
                free(ev);
                return CUDA_ERROR_OPERATING_SYSTEM;
            }
        } while (ev->token == 0 || event_find(ev->token, srv_gpu_served));
        ev->owner_gpu = srv_gpu_served;
        ev->lease = -1;
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

/* Another GPU's worker's event, opened here; NULL and *res when it cannot be. Caller holds ipc_lock, which
 * this lets go while it asks. */
static struct ipc_event *event_open_remote(struct srv_client *c, uint64_t token, int owner_gpu, CUresult *res)
{
    pthread_mutex_unlock(&ipc_lock);
    char err[256] = "";
    struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = CUMUX_HELLO_IPC_LEASE,
                            .flags = CUMUX_LEASE_EVENT, .token = token};
    struct cumux_welcome w;
    int fd = -1;
    int s = cumux_ask_open(owner_gpu, &h, 5000, &w, &fd, err, sizeof err);
    if (fd >= 0)
        close(fd); /* none is sent with an event's */
    CUevent cu = NULL;
    *res = CUDA_SUCCESS;
    if (s < 0) {
        cumux_logf("IPC: cannot reach GPU %d's worker: %s", owner_gpu, err[0] ? err : strerror(errno));
        *res = CUDA_ERROR_INVALID_VALUE;
    } else if (w.status != 0) {
        *res = (CUresult)w.status;
    } else {
        CUipcEventHandle eh;
        _Static_assert(sizeof eh <= sizeof w.message, "a CUipcEventHandle fits a welcome");
        memcpy(&eh, w.message, sizeof eh);
        use_gpu(c, srv_gpu_served);
        *res = cuIpcOpenEventHandle(&cu, eh);
    }
    pthread_mutex_lock(&ipc_lock);
    struct ipc_event *ev = *res == CUDA_SUCCESS ? event_find(token, owner_gpu) : NULL;
    if (ev || *res != CUDA_SUCCESS) { /* failed, or another client's open got there first */
        if (cu)
            cuEventDestroy(cu);
        if (s >= 0)
            close(s);
        return ev;
    }
    ev = calloc(1, sizeof *ev);
    if (!ev) {
        cuEventDestroy(cu);
        close(s);
        *res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    *ev = (struct ipc_event){.token = token, .owner_gpu = owner_gpu, .lease = s, .cu = cu, .next = ipc_events};
    ipc_events = ev;
    return ev;
}

CUresult op_ipc_open_event_handle(struct srv_client *c, const struct cumux_ipc_open_event_handle *m,
                                  struct srv_ctx *ctx, uint8_t *out, uint32_t *out_len)
{
    if (m->owner_gpu < 0 || m->owner_gpu >= srv_gpu_count || m->token == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ipc_lock);
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    struct ipc_event *ev = event_find(m->token, m->owner_gpu);
    if (!ev && m->owner_gpu != srv_gpu_served)
        ev = event_open_remote(c, m->token, m->owner_gpu, &res);
    if (ev) {
        *e = (struct srv_event){.cu = ev->cu, .ctx = ctx, .flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
                                .ipc = ev};
        e->handle = handle_new(c, OBJ_EVENT, e);
        res = e->handle ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        if (e->handle)
            ev->refs++;
    }
    struct ipc_event *unused = ev && ev->refs == 0 ? ev : NULL; /* opened for this open, which failed */
    if (unused)
        ev->refs = 1;
    pthread_mutex_unlock(&ipc_lock);
    if (unused)
        srv_ipc_event_drop(unused);
    if (res != CUDA_SUCCESS) {
        free(e);
        return res;
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
        if (ev->lease >= 0)
            close(ev->lease); /* the owner's worker lets its event go */
        free(ev);
    }
}

CUresult srv_ipc_event_lease(uint64_t token, CUipcEventHandle *out)
{
    pthread_mutex_lock(&ipc_lock);
    struct ipc_event *ev = event_find(token, srv_gpu_served);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (ev) {
        cuCtxSetCurrent(srv_gpus[srv_gpu_served].ctx);
        r = cuIpcGetEventHandle(out, ev->cu);
        if (r == CUDA_SUCCESS)
            ev->refs++;
    }
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

void srv_ipc_event_lease_end(uint64_t token)
{
    pthread_mutex_lock(&ipc_lock);
    struct ipc_event *ev = event_find(token, srv_gpu_served); /* the lease's reference keeps it listed */
    pthread_mutex_unlock(&ipc_lock);
    if (ev)
        srv_ipc_event_drop(ev);
}

/* ---- across GPUs: the owner's worker ---- */
CUresult srv_ipc_lease(uint64_t token, struct cumux_ipc_lease *info, int *fd)
{
    *fd = -1;
    if (!token)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ipc_lock);
    struct ipc_export *e = *find(token, 0);
    CUresult r = !e || !e->owner ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && !srv_chunks_in_arena(e->base)) {
        /* Only memory in chunks can be mapped by another process at its address. */
        static _Atomic int said;
        if (!atomic_exchange(&said, 1))
            cumux_logf("IPC: memory outside chunks (CUMUX_CONTAIN=0) cannot be opened from another GPU's worker");
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    CUmemGenericAllocationHandle h = 0;
    uint64_t cb = 0, cs = 0;
    if (r == CUDA_SUCCESS) {
        cuCtxSetCurrent(srv_gpus[e->gpu].ctx);
        cb = e->chunk_base;
        cs = e->chunk_size;
        r = cs ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            r = cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)e->base);
        if (r == CUDA_SUCCESS) {
            r = cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            cuMemRelease(h);
        }
    }
    if (r == CUDA_SUCCESS) {
        *info = (struct cumux_ipc_lease){.chunk_base = cb, .chunk_size = cs, .base = e->base, .size = e->size};
        e->opens++;
    }
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

void srv_ipc_lease_end(uint64_t token)
{
    pthread_mutex_lock(&ipc_lock);
    struct ipc_export **pe = &exports;
    while (*pe && !((*pe)->token == token && (*pe)->opens > 0))
        pe = &(*pe)->next;
    struct ipc_export *e = *pe;
    if (e && --e->opens == 0 && !e->owner) {
        /* The last open was another worker's, which waited for its work first: after the owner's work
         * before its free, the memory goes, as close_once lets it. */
        cuCtxSetCurrent(srv_gpus[e->gpu].ctx);
        CUstream s = NULL;
        CUevent done = NULL;
        bool ordered = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                       (!e->freed_after || cuStreamWaitEvent(s, e->freed_after, 0) == CUDA_SUCCESS) &&
                       cuEventCreate(&done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS && cuEventRecord(done, s) == CUDA_SUCCESS;
        if (e->chunk_owner && ordered) {
            srv_chunk_free_later(e->chunk_owner, e->base, done);
            done = NULL;
        } else if (!e->chunk_owner) {
            if (done)
                cuEventSynchronize(done);
            srv_chunk_unhold(NULL, e->held);
        } /* else: no event to order it by (out of resources): it stays until its chunk's client ends */
        if (done)
            cuEventDestroy(done);
        if (s)
            cuStreamDestroy(s);
        if (e->freed_after)
            cuEventDestroy(e->freed_after);
        *pe = e->next;
        free(e);
    }
    pthread_mutex_unlock(&ipc_lock);
}
