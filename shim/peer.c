/* Peer access between a program's GPUs. Each GPU's memory is its worker's, a process of its own, so
 * another GPU's worker reaches it only as CUDA IPC does between programs: the owner exports the allocation
 * and the other worker maps the chunk holding it at the same address, with access for its GPU (server/ipc.c).
 * A view is such an opening, made for the program itself: a copy between two GPUs' memory runs on the
 * stream's worker once the other GPU's allocation is viewed there (at peer bandwidth, no host memory
 * between), and cuCtxEnablePeerAccess views every allocation of the peer's GPU, present and future, in
 * the context's worker so that its kernels may use them. Views go before the allocation is freed. Only
 * memory in the owner's chunks (cuMemAlloc and pool memory, with containment) is viewed: VMM and graph
 * memory of another GPU is copied through host memory, and is not reachable from kernels. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "shim/client.h"

struct view {
    uint64_t base, size, token;
    int owner_gpu;     /* the server's number of the GPU whose memory it is */
    uint32_t open_on;  /* the GPUs (server's numbers) whose worker maps it */
};

static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;
static struct view *views;
static size_t nviews, capviews;
static _Atomic size_t views_live;
/* peers_on[g]: the GPUs whose memory GPU g's contexts enabled peer access to (cuCtxEnablePeerAccess). */
static _Atomic uint32_t peers_on[CUMUX_MAX_DEVICES];
static _Atomic bool peers_any; /* ever enabled: new allocations are looked at */

/* The allocation holding p, if it is plain cuMemAlloc memory, and its owner's GPU. */
static bool allocation_of(uint64_t p, uint64_t *base, uint64_t *size, int *gpu)
{
    pthread_rwlock_rdlock(&shim.ranges_lock);
    const struct cumux_range *r = cumux_ranges_find(&shim.dev_ranges, p);
    bool ok = r && !(r->tag >> 32) && r->tag >= 1 && (int)r->tag <= shim.device_count;
    if (ok) {
        *base = r->base;
        *size = r->size;
        *gpu = shim.server_gpu[(int)r->tag - 1];
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
    return ok;
}

static struct view *find_view(uint64_t base)
{
    for (size_t i = 0; i < nviews; i++)
        if (views[i].base == base)
            return &views[i];
    return NULL;
}

/* The allocation holding p viewed by GPU gpu's worker (already, or now). false: it cannot be (not
 * cuMemAlloc memory, no peer access between the GPUs, the owner's worker refused): *err says why. */
static bool view(uint64_t p, int gpu, CUresult *err)
{
    uint64_t base, size;
    int owner;
    *err = CUDA_ERROR_INVALID_VALUE;
    if (!allocation_of(p, &base, &size, &owner))
        return false;
    *err = CUDA_SUCCESS;
    if (owner == gpu)
        return true;
    struct shim_chan *och = shim_chan_of_gpu(owner), *gch = shim_chan_of_gpu(gpu);
    if (och->gpu != owner || gch->gpu != gpu) { /* no channel there (yet) */
        *err = CUDA_ERROR_INVALID_CONTEXT;
        return false;
    }
    pthread_mutex_lock(&views_lock);
    struct view *v = find_view(base);
    if (v && (v->open_on >> gpu & 1)) { /* viewed there already */
        pthread_mutex_unlock(&views_lock);
        return true;
    }
    CUresult r = CUDA_SUCCESS;
    if (!v) {
        struct cumux_ipc_get_mem_handle q = {.ptr = base};
        struct cumux_ipc_mem_handle h;
        r = shim_call_on(och, CUMUX_OP_IPC_GET_MEM_HANDLE, &q, sizeof q, &h, sizeof h, NULL);
        if (r == CUDA_SUCCESS && (h.base != base || h.size < size))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS && nviews == capviews) {
            size_t cap = capviews ? capviews * 2 : 64;
            struct view *nv = realloc(views, cap * sizeof *nv);
            if (!nv)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            else
                views = nv, capviews = cap;
        }
        if (r == CUDA_SUCCESS) {
            v = &views[nviews++];
            *v = (struct view){.base = base, .size = size, .token = h.token, .owner_gpu = owner};
            atomic_store(&views_live, nviews);
        }
    }
    if (r == CUDA_SUCCESS) {
        struct cumux_ipc_open_mem_handle o = {.token = v->token, .owner_gpu = owner};
        struct cumux_ipc_mem_handle got;
        r = shim_call_on(gch, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &o, sizeof o, &got, sizeof got, NULL);
        if (r == CUDA_SUCCESS && got.base != base) { /* not where the program has it: of no use */
            struct cumux_ipc_close_mem_handle c = {.ptr = got.base};
            shim_call_on(gch, CUMUX_OP_IPC_CLOSE_MEM_HANDLE, &c, sizeof c, NULL, 0, NULL);
            r = CUDA_ERROR_INVALID_VALUE;
        }
        if (r == CUDA_SUCCESS) {
            v->open_on |= 1u << gpu;
            cumux_debugf("GPU %d's allocation at 0x%llx (%llu bytes) viewed by GPU %d's worker (views %zu)", owner,
                         (unsigned long long)base, (unsigned long long)size, gpu, nviews);
        }
    }
    pthread_mutex_unlock(&views_lock);
    if (r != CUDA_SUCCESS)
        cumux_debugf("GPU %d's allocation at 0x%llx not viewed by GPU %d's worker (%d)", owner, (unsigned long long)base,
                     gpu, (int)r);
    *err = r;
    return r == CUDA_SUCCESS;
}

bool shim_peer_view(uint64_t p, int gpu)
{
    CUresult r;
    return view(p, gpu, &r);
}

void shim_peer_forget(uint64_t base)
{
    if (!atomic_load_explicit(&views_live, memory_order_relaxed))
        return;
    pthread_mutex_lock(&views_lock);
    struct view *v = find_view(base);
    if (v) {
        struct view gone = *v;
        *v = views[--nviews];
        atomic_store(&views_live, nviews);
        /* Each close waits for that worker's work of this program so far, as a native free waits for
         * every context's work on the memory. */
        for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
            if (!(gone.open_on >> g & 1))
                continue;
            struct cumux_ipc_close_mem_handle c = {.ptr = gone.base};
            shim_call_on(shim_chan_of_gpu(g), CUMUX_OP_IPC_CLOSE_MEM_HANDLE, &c, sizeof c, NULL, 0, NULL);
        }
    }
    pthread_mutex_unlock(&views_lock);
}

void shim_peer_allocated(uint64_t base, int gpu)
{
    if (!atomic_load_explicit(&peers_any, memory_order_relaxed))
        return;
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        CUresult r;
        if ((atomic_load_explicit(&peers_on[g], memory_order_relaxed) >> gpu & 1) && !view(base, g, &r))
            cumux_logf("peer access from GPU %d: GPU %d's new allocation at 0x%llx is not reachable (%d)", g, gpu,
                       (unsigned long long)base, (int)r);
    }
}

/* Peer access from the current context (GPU g) to peer's memory (GPU h): checked as the driver checks it,
 * and on enabling, every cuMemAlloc allocation of GPU h is viewed by GPU g's worker. */
static CUresult peer_change(CUcontext peer, bool on)
{
    struct CUctx_st *c = shim_current_ctx();
    if (!c || c->magic != SHIM_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!peer || peer->magic != SHIM_MAGIC_CTX || peer == c)
        return CUDA_ERROR_INVALID_CONTEXT;
    int g = shim.server_gpu[c->device], h = shim.server_gpu[peer->device];
    /* A context of the same device: the device cannot "access itself" as a peer (cuDeviceCanAccessPeer 0). */
    if (peer->device == c->device ||
        shim_peer_attribute(c->device, peer->device, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED) != 1)
        return on ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    uint32_t bit = 1u << h, was = atomic_load(&peers_on[g]);
    if (on && (was & bit))
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (!on && !(was & bit))
        return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    if (!on) { /* views stay until their memory is freed; new allocations are no longer viewed */
        atomic_fetch_and(&peers_on[g], ~bit);
        return CUDA_SUCCESS;
    }
    atomic_fetch_or(&peers_on[g], bit);
    atomic_store(&peers_any, true);
    /* The allocations of GPU h so far: their bases, taken under the lock, viewed after it. */
    pthread_rwlock_rdlock(&shim.ranges_lock);
    size_t n = shim.dev_ranges.n, k = 0;
    uint64_t *bases = n ? malloc(n * sizeof *bases) : NULL;
    for (size_t i = 0; bases && i < n; i++) {
        const struct cumux_range *r = &shim.dev_ranges.v[i];
        if (!(r->tag >> 32) && r->tag >= 1 && (int)r->tag <= shim.device_count && shim.server_gpu[r->tag - 1] == h)
            bases[k++] = r->base;
    }
    pthread_rwlock_unlock(&shim.ranges_lock);
    if (n && !bases) {
        atomic_fetch_and(&peers_on[g], ~bit);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < k && r == CUDA_SUCCESS; i++)
        view(bases[i], g, &r);
    free(bases);
    /* The owner's worker shares only memory in its chunks (containment, the default). */
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY)
        r = cumux_unsupported("cuCtxEnablePeerAccess of memory the peer's worker cannot share (outside its chunks: CUMUX_CONTAIN=0)");
    if (r != CUDA_SUCCESS)
        atomic_fetch_and(&peers_on[g], ~bit);
    return r;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return peer_change(peer, true);
}

CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return peer_change(peer, false);
}

void shim_peer_reset(void)
{
    pthread_mutex_init(&views_lock, NULL);
    free(views);
    views = NULL;
    nviews = capviews = 0;
    atomic_store(&views_live, 0);
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++)
        atomic_store(&peers_on[g], 0);
    atomic_store(&peers_any, false);
}
