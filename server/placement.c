/* Which SMs a client's kernels run on (issue 11): reserved SMs, MPS's active thread percentage, through
 * green contexts. The device's SMs are split once into groups (common/sm_plan.h); a client whose kernels
 * may not use every SM gets a green context over its groups, and its streams are made there. Clients
 * with no reservation and no cap stay in the primary context, as before, while no reservation exists;
 * once one does, they move to a green context over the SMs it leaves (else their kernels would still
 * reach the reserved SMs). A green context shares the primary context's memory and code: a client's
 * streams move, nothing else does.
 *
 * A change (a reservation, a cap, a client with a reservation leaving) bumps srv_placement_gen; each
 * worker notices at its client's next operation on a stream, makes the new green context, and moves the
 * stream there: the new stream first waits for the old one's work, so the order of the client's work is
 * kept and nothing waits on the CPU. A context left behind is destroyed when the client goes (changes are
 * rare; streams not used again stay where they were). CUMUX_GREEN_QUEUES=1 gives every client a green
 * context of its own even with no reservation (for the many-clients measurements, issue 13). */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/sm_plan.h"
#include "server/handlers.h"
#include "server/supervisor.h"

_Atomic uint64_t srv_placement_gen = 1;

struct srv_placed {
    int gpu;
    struct cumux_sm_set mask; /* its SM groups */
    CUgreenCtx green;
    unsigned streams; /* the client's streams in it */
    /* For launches it refuses (srv_place_outside): a stream of the primary context, made at the first */
    CUstream outside;
    CUevent to_outside, from_outside;
    struct srv_placed *next_retired;
};

/* The device's SM groups, made at the first need and never changed. */
static struct layout {
    _Atomic int state; /* 0 not made yet, 1 ready, -1 the driver cannot partition */
    unsigned n, per, total;
    struct cumux_sm_set full, all; /* the whole groups; all groups (the last may be the rest) */
    unsigned sms[CUMUX_SM_MAX_GROUPS];
    CUdevResource res[CUMUX_SM_MAX_GROUPS];
    char why[128]; /* state -1: why */
} layouts[CUMUX_MAX_DEVICES];

static pthread_mutex_t place_mu = PTHREAD_MUTEX_INITIALIZER; /* layouts' making, reserved[] */
static struct cumux_sm_set reserved[CUMUX_MAX_DEVICES];      /* every client's reserved groups */
static int queues_of_own = -1;                                /* CUMUX_GREEN_QUEUES */

/* SMs reserved for a client group (`cumux set --group PATH --sms N`, groups.c), by its rule's slot: held
 * from the setting on, members or not (a job's SMs are its own from its start), until the rule lets go
 * or is forgotten (another generation); its members' kernels run there, no one else's. Under place_mu. */
static struct group_reservation {
    uint32_t gen, sms;
    uint32_t failed; /* the SMs last asked for at this generation that could not be had; 0 none */
    struct cumux_sm_set set[CUMUX_MAX_DEVICES];
} group_res[SRV_GROUPS_MAX];

static const char *errname(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "unknown error";
}

/* CUMUX_SM_GROUPS=fine: groups as small as the driver makes them when SMs need not be coscheduled (an
 * exact 66 + 66 on an H200, at the cost of large thread-block clusters inside a reservation); default
 * "coscheduled": the driver's usual granularity. */
static bool fine_groups(void)
{
    const char *e = getenv("CUMUX_SM_GROUPS");
    return e && strcmp(e, "fine") == 0;
}

/* Under place_mu. */
static struct layout *layout_locked(int gpu)
{
    struct layout *L = &layouts[gpu];
    if (atomic_load(&L->state) != 0)
        return atomic_load(&L->state) > 0 ? L : NULL;
    CUdevResource whole, rest;
    memset(&rest, 0, sizeof rest);
    unsigned flags = fine_groups() ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0, per = 0, n = 0;
    CUresult r = cuDeviceGetDevResource(srv_gpus[gpu].dev, &whole, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) {
        /* The smallest group the driver gives: asked for 1 SM, it rounds up to its granularity. */
        CUdevResource one[1];
        unsigned k = 1;
        r = cuDevSmResourceSplitByCount(one, &k, &whole, NULL, flags, 1);
        per = r == CUDA_SUCCESS && k == 1 ? one[0].sm.smCount : 0;
        if (r == CUDA_SUCCESS && per == 0)
            r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r == CUDA_SUCCESS) {
        n = whole.sm.smCount / per;
        if (n > CUMUX_SM_MAX_GROUPS - 1)
            n = CUMUX_SM_MAX_GROUPS - 1;
        if (n < 2)
            r = CUDA_ERROR_NOT_SUPPORTED; /* nothing to share out */
    }
    if (r == CUDA_SUCCESS)
        r = cuDevSmResourceSplitByCount(L->res, &n, &whole, &rest, flags, per);
    if (r != CUDA_SUCCESS || n < 2) {
        snprintf(L->why, sizeof L->why, "this GPU's SMs cannot be partitioned (green contexts: %s)",
                 r != CUDA_SUCCESS ? errname(r) : "fewer than two groups");
        cumux_logf("GPU %d: %s", gpu, L->why);
        atomic_store(&L->state, -1);
        return NULL;
    }
    L->per = per;
    L->total = 0;
    for (unsigned i = 0; i < n; i++)
        L->total += L->sms[i] = L->res[i].sm.smCount;
    L->full = cumux_sm_first(n);
    if (rest.sm.smCount && n < CUMUX_SM_MAX_GROUPS) {
        L->res[n] = rest;
        L->total += L->sms[n] = rest.sm.smCount;
        n++;
    }
    L->n = n;
    L->all = cumux_sm_first(n);
    cumux_logf("GPU %d: SMs in %u groups of %u for reservations (%u SMs%s)", gpu, n, per, L->total,
               flags ? ", not coscheduled" : "");
    atomic_store(&L->state, 1);
    return L;
}

static struct layout *layout(int gpu)
{
    struct layout *L = &layouts[gpu];
    int st = atomic_load(&L->state);
    if (st)
        return st > 0 ? L : NULL;
    pthread_mutex_lock(&place_mu);
    L = layout_locked(gpu);
    pthread_mutex_unlock(&place_mu);
    return L;
}

static bool own_queues(void)
{
    if (queues_of_own < 0) {
        const char *e = getenv("CUMUX_GREEN_QUEUES");
        queues_of_own = e && strcmp(e, "1") == 0;
    }
    return queues_of_own;
}

/* The lowest free whole groups holding sms SMs on GPU g (empty: not to be had, why says so). Under place_mu. */
static struct cumux_sm_set reserve_locked(int g, const struct layout *L, unsigned sms, char *why, size_t cap)
{
    struct cumux_sm_set pick = cumux_sm_reserve(L->full, reserved[g], cumux_sm_groups_for(sms, L->per));
    if (cumux_sm_empty(pick)) {
        unsigned free_sms = cumux_sm_count(cumux_sm_minus(L->full, reserved[g]), L->sms, L->n);
        snprintf(why, cap, "%u SMs cannot be reserved on GPU %d: %u SMs in whole groups of %u are free of "
                 "reservations", sms, g, free_sms, L->per);
    }
    return pick;
}

int srv_placement_want(struct srv_client *c, uint32_t sms, uint32_t percent, char *why, size_t cap)
{
    if (percent >= 100)
        percent = 0;
    int rc = 0;
    pthread_mutex_lock(&place_mu);
    if (c->placement.placement_closed) { /* gone meanwhile (cumux set races its exit): nothing may be held for it */
        pthread_mutex_unlock(&place_mu);
        snprintf(why, cap, "the client is going away");
        return -1;
    }
    struct cumux_sm_set before[CUMUX_MAX_DEVICES];
    memcpy(before, c->placement.sm_reserved, sizeof before);
    for (int g = 0; g < srv_gpu_count; g++) {
        reserved[g] = cumux_sm_minus(reserved[g], c->placement.sm_reserved[g]);
        c->placement.sm_reserved[g] = (struct cumux_sm_set){{0}};
    }
    for (int g = 0; g < srv_gpu_count && (sms || percent); g++) {
        if (!srv_gpu_serves(g))
            continue;
        struct layout *L = layout_locked(g);
        if (!L) {
            snprintf(why, cap, "%s", layouts[g].why);
            rc = -1;
            break;
        }
        if (!sms)
            continue;
        struct cumux_sm_set pick = reserve_locked(g, L, sms, why, cap);
        if (cumux_sm_empty(pick)) {
            rc = -1;
            break;
        }
        c->placement.sm_reserved[g] = pick;
        reserved[g] = cumux_sm_or(reserved[g], pick);
    }
    if (rc != 0) { /* all or nothing: the old reservation stands */
        for (int g = 0; g < srv_gpu_count; g++) {
            reserved[g] = cumux_sm_or(cumux_sm_minus(reserved[g], c->placement.sm_reserved[g]), before[g]);
            c->placement.sm_reserved[g] = before[g];
        }
    } else {
        atomic_store(&c->placement.want_sms, sms);
        atomic_store(&c->placement.want_percent, percent);
        if (sms && srv_gpu_served >= 0) {
            char text[160];
            int g = srv_gpu_served;
            cumux_sm_format(c->placement.sm_reserved[g], layouts[g].sms, layouts[g].n, text, sizeof text);
            snprintf(why, cap, "SMs %s of GPU %d reserved (%u asked for)", text, g, sms);
        } else if (percent) {
            snprintf(why, cap, "its kernels may use %u%% of the SMs", percent);
        } else {
            snprintf(why, cap, "every SM no reservation holds");
        }
    }
    atomic_fetch_add(&srv_placement_gen, 1);
    pthread_mutex_unlock(&place_mu);
    return rc;
}

int srv_placement_group(int rule, uint32_t gen, uint32_t sms, bool again, char *why, size_t cap)
{
    if (rule < 0 || rule >= SRV_GROUPS_MAX) {
        snprintf(why, cap, "no such group");
        return -1;
    }
    int g = srv_gpu_served, rc = 0;
    pthread_mutex_lock(&place_mu);
    struct group_reservation *G = &group_res[rule], before = *G;
    if (G->gen == gen && G->sms == sms) { /* held already (another worker's request, a member's arrival) */
        pthread_mutex_unlock(&place_mu);
        snprintf(why, cap, sms ? "%u SMs reserved already" : "no SMs reserved", sms);
        return 0;
    }
    if (!again && G->gen == gen && G->failed == sms) {
        pthread_mutex_unlock(&place_mu);
        snprintf(why, cap, "%u SMs could not be had", sms);
        return -2; /* said already */
    }
    for (int d = 0; d < CUMUX_MAX_DEVICES; d++) {
        reserved[d] = cumux_sm_minus(reserved[d], G->set[d]);
        G->set[d] = (struct cumux_sm_set){{0}};
    }
    struct layout *L = sms && srv_gpu_serves(g) ? layout_locked(g) : NULL;
    if (sms && srv_gpu_serves(g) && !L) {
        snprintf(why, cap, "%s", layouts[g].why);
        rc = -1;
    } else if (L) {
        struct cumux_sm_set pick = reserve_locked(g, L, sms, why, cap);
        if (cumux_sm_empty(pick)) {
            rc = -1;
        } else {
            G->set[g] = pick;
            reserved[g] = cumux_sm_or(reserved[g], pick);
            char text[160];
            cumux_sm_format(pick, L->sms, L->n, text, sizeof text);
            snprintf(why, cap, "SMs %s reserved (%u asked for)", text, sms);
        }
    } else {
        snprintf(why, cap, "no SMs reserved");
    }
    if (rc != 0 && before.gen == gen) { /* all or nothing: the old reservation of this generation stands */
        for (int d = 0; d < CUMUX_MAX_DEVICES; d++)
            reserved[d] = cumux_sm_or(reserved[d], before.set[d]);
        *G = before;
    } else if (rc != 0) {
        G->gen = gen;
        G->sms = 0;
    } else {
        G->gen = gen;
        G->sms = sms;
    }
    G->failed = rc != 0 ? sms : 0;
    atomic_fetch_add(&srv_placement_gen, 1);
    pthread_mutex_unlock(&place_mu);
    return rc;
}

void srv_placement_in_group(struct srv_client *c, int rule, uint32_t gen)
{
    pthread_mutex_lock(&place_mu);
    int slot = rule >= 0 && rule < SRV_GROUPS_MAX ? rule + 1 : 0;
    bool moved = c->placement.group_slot != slot || c->placement.group_gen != gen;
    c->placement.group_slot = slot;
    c->placement.group_gen = gen;
    if (moved) /* its streams find their SMs again at its next operation */
        atomic_fetch_add(&srv_placement_gen, 1);
    pthread_mutex_unlock(&place_mu);
}

/* The groups the client's kernels may use on gpu now (worker); *held: they are reserved for it or its
 * group. */
static struct cumux_sm_set target(struct srv_client *c, int gpu, const struct layout *L, bool *held)
{
    pthread_mutex_lock(&place_mu);
    struct cumux_sm_set mine = c->placement.sm_reserved[gpu], shared = cumux_sm_minus(L->all, reserved[gpu]);
    int slot = c->placement.group_slot;
    if (cumux_sm_empty(mine) && slot > 0 && group_res[slot - 1].gen == c->placement.group_gen)
        mine = group_res[slot - 1].set[gpu];
    pthread_mutex_unlock(&place_mu);
    *held = !cumux_sm_empty(mine);
    if (*held)
        return mine;
    if (cumux_sm_empty(shared)) {
        /* Reservations hold every SM: the others run anywhere rather than not at all (said). */
        cumux_logf("client %u: every SM of GPU %d is reserved: its kernels run on reserved SMs", c->id, gpu);
        shared = L->all;
    }
    unsigned pct = atomic_load(&c->placement.want_percent);
    if (pct == 0 || pct >= 100)
        return shared;
    /* Capped clients spread over the shared SMs, each starting where its id puts it. */
    unsigned k = cumux_sm_groups_for_percent(pct, L->total, L->per);
    return cumux_sm_window_percent(shared, L->sms, L->n, pct, L->total, L->per, c->id * k);
}

static struct srv_placed *placed_new(int gpu, const struct layout *L, struct cumux_sm_set mask)
{
    CUdevResource *pick = malloc(L->n * sizeof *pick); /* up to 256 x 144 bytes: not on a worker's stack */
    unsigned n = 0;
    for (unsigned i = 0; pick && i < L->n; i++)
        if (cumux_sm_has(&mask, i))
            pick[n++] = L->res[i];
    CUdevResourceDesc desc;
    struct srv_placed *p = pick ? calloc(1, sizeof *p) : NULL;
    CUresult r = p ? cuDevResourceGenerateDesc(&desc, pick, n) : CUDA_ERROR_OUT_OF_MEMORY;
    free(pick);
    if (r == CUDA_SUCCESS)
        r = cuGreenCtxCreate(&p->green, desc, srv_gpus[gpu].dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) {
        char text[160];
        cumux_sm_format(mask, L->sms, L->n, text, sizeof text);
        cumux_logf("GPU %d: a green context over SMs %s: %s", gpu, text, errname(r));
        free(p);
        return NULL;
    }
    p->gpu = gpu;
    p->mask = mask;
    return p;
}

/* Worker: where the client's streams on gpu go from now on. */
static void retarget(struct srv_client *c, int gpu)
{
    struct layout *L = atomic_load(&layouts[gpu].state) > 0 ? &layouts[gpu] : NULL;
    if (!L && own_queues())
        L = layout(gpu);
    if (!L) {
        atomic_store(&c->placement.sms_now, (uint32_t)srv_gpus[gpu].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT]);
        return; /* nobody partitioned anything: the primary context */
    }
    bool held;
    struct cumux_sm_set mask = target(c, gpu, L, &held);
    bool primary = cumux_sm_equal(mask, L->all) && !own_queues();
    struct srv_placed *cur = c->placement.placed[gpu];
    atomic_store(&c->placement.sms_now, cumux_sm_count(mask, L->sms, L->n));
    atomic_store(&c->placement.sms_reserved, held);
    if ((primary && !cur) || (cur && cumux_sm_equal(cur->mask, mask)))
        return;
    struct srv_placed *p = NULL;
    if (!primary && !(p = placed_new(gpu, L, mask)))
        return; /* stays where it is (logged) */
    if (cur) {
        cur->next_retired = c->placement.retired;
        c->placement.retired = cur;
    }
    c->placement.placed[gpu] = p;
    char text[160];
    cumux_sm_format(mask, L->sms, L->n, text, sizeof text);
    cumux_debugf("client %u: its streams on GPU %d now run on SMs %s (%s)", c->id, gpu, text,
                 !cumux_sm_empty(c->placement.sm_reserved[gpu]) ? "reserved" : p ? "shared, green context" : "primary context");
}

static CUresult stream_in(struct srv_placed *p, int hw_priority, CUstream *out)
{
    return p ? cuGreenCtxStreamCreate(out, p->green, CU_STREAM_NON_BLOCKING, hw_priority)
             : cuStreamCreateWithPriority(out, CU_STREAM_NON_BLOCKING, hw_priority);
}

CUresult srv_place_new_stream(struct srv_client *c, int gpu, int hw_priority, CUstream *out,
                              struct srv_placed **where, uint64_t *gen)
{
    uint64_t g = atomic_load(&srv_placement_gen);
    if (c->placement.placed_gen[gpu] != g) {
        retarget(c, gpu);
        c->placement.placed_gen[gpu] = g;
    }
    CUresult r = stream_in(c->placement.placed[gpu], hw_priority, out);
    if (r == CUDA_SUCCESS && c->placement.placed[gpu])
        c->placement.placed[gpu]->streams++;
    *where = c->placement.placed[gpu];
    *gen = g;
    return r;
}

void srv_place_stream_slow(struct srv_client *c, struct srv_stream *s)
{
    int gpu = s->ctx->gpu;
    uint64_t g = atomic_load(&srv_placement_gen);
    if (c->placement.placed_gen[gpu] != g) {
        retarget(c, gpu);
        c->placement.placed_gen[gpu] = g;
    }
    if (s->capturing)
        return; /* its work is being recorded, not run: it moves once the capture ends */
    if (s->placed != c->placement.placed[gpu]) {
        CUstream n;
        CUresult r = stream_in(c->placement.placed[gpu], s->hw_priority, &n);
        if (r != CUDA_SUCCESS) {
            cumux_logf("client %u: a stream could not move to its SMs: %s", c->id, errname(r));
        } else {
            /* The new stream starts where the old one ends; the old one goes when its work is done. */
            cuEventRecord(s->ctx->join_event, s->cu);
            cuStreamWaitEvent(n, s->ctx->join_event, 0);
            cuStreamDestroy(s->cu);
            s->cu = n;
            if (s->placed)
                s->placed->streams--;
            s->placed = c->placement.placed[gpu];
            if (s->placed)
                s->placed->streams++;
        }
    }
    s->placed_gen = g;
}

void srv_place_stream_gone(struct srv_stream *s)
{
    if (s->placed)
        s->placed->streams--;
    s->placed = NULL;
}

/* A green context holds thread-block clusters only as large as its SMs that can be scheduled together: on
 * the H200 a ResNet-18 under PyTorch, given 16 SMs, had a kernel refused (CUDA_ERROR_INVALID_CLUSTER_SIZE)
 * that the whole GPU takes; a library chooses its kernels for the device it is told of, all SMs. Such a
 * launch runs in the primary context instead, over every SM, in the stream's order (events: no wait on
 * the CPU), rather than fail a program that runs natively. Said once per client. */
CUstream srv_place_outside(struct srv_client *c, struct srv_stream *s)
{
    struct srv_placed *p = s->placed;
    if (!p || s->capturing)
        return NULL;
    if (!p->outside) {
        CUresult r = cuStreamCreateWithPriority(&p->outside, CU_STREAM_NON_BLOCKING, s->hw_priority);
        if (r == CUDA_SUCCESS)
            r = cuEventCreate(&p->to_outside, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS)
            r = cuEventCreate(&p->from_outside, CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            cumux_logf("client %u: no stream outside its SMs for a kernel they cannot hold: %s", c->id, errname(r));
            return NULL;
        }
        cumux_logf("client %u: a kernel's thread-block clusters do not fit its %u SMs: such kernels run on "
                   "every SM", c->id, (unsigned)atomic_load(&c->placement.sms_now));
    }
    if (cuEventRecord(p->to_outside, s->cu) != CUDA_SUCCESS ||
        cuStreamWaitEvent(p->outside, p->to_outside, 0) != CUDA_SUCCESS)
        return NULL;
    return p->outside;
}

void srv_place_outside_end(struct srv_stream *s, CUstream outside)
{
    struct srv_placed *p = s->placed;
    if (p && outside == p->outside && cuEventRecord(p->from_outside, outside) == CUDA_SUCCESS)
        cuStreamWaitEvent(s->cu, p->from_outside, 0);
}

/* A green context's own: its streams' work is done (the client's end waited for it). */
static void placed_free(struct srv_placed *p)
{
    if (p->outside) {
        cuStreamDestroy(p->outside);
        cuEventDestroy(p->to_outside);
        cuEventDestroy(p->from_outside);
    }
    cuGreenCtxDestroy(p->green);
    free(p);
}

void srv_placement_release(struct srv_client *c)
{
    pthread_mutex_lock(&place_mu);
    c->placement.placement_closed = true;
    bool had = false;
    for (int g = 0; g < srv_gpu_count; g++) {
        had |= !cumux_sm_empty(c->placement.sm_reserved[g]);
        reserved[g] = cumux_sm_minus(reserved[g], c->placement.sm_reserved[g]);
        c->placement.sm_reserved[g] = (struct cumux_sm_set){{0}};
    }
    if (had) /* the others may use those SMs again */
        atomic_fetch_add(&srv_placement_gen, 1);
    pthread_mutex_unlock(&place_mu);
    /* Its streams are gone (and their work done: srv_client_release_all waited for it). */
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        struct srv_placed *p = c->placement.placed[g];
        if (p) {
            if (p->streams)
                cumux_logf("client %u: %u streams left in its green context", c->id, p->streams);
            placed_free(p);
            c->placement.placed[g] = NULL;
        }
    }
    while (c->placement.retired) {
        struct srv_placed *p = c->placement.retired;
        c->placement.retired = p->next_retired;
        placed_free(p);
    }
}
