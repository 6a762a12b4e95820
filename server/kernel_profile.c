/* CUMUX_PROFILE=kernels: the GPU time of each kernel a client launches, summed by kernel, logged when the
 * client goes (the most time first). Under cumux a program's own profiler sees nothing (CUPTI talks to the
 * real driver, which the program does not load), so this is how its kernels' times are compared with a
 * native run's (bench/efficiency.py prints torch.profiler's table natively): the same names and counts
 * with other times say the kernels run slower here; other names say other kernels were chosen.
 *
 * Each launch is bracketed by two timed events on its stream; the elapsed time between them is the
 * kernel's, plus what the GPU spends between two kernels. Pairs wait in a ring and are read once done,
 * oldest first (the worker waits for the oldest when the ring is full). Kernels of graphs are not timed
 * one by one. The worker alone touches it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/handlers.h"

#define KPROF_RING 4096u  /* launches in flight, timed */
#define KPROF_KINDS 4096u /* kernels told apart (open addressing, a power of two) */
#define KPROF_TOP 40      /* lines logged */

struct kprof_pending {
    CUevent start, end;
    uint32_t kind; /* index in kinds */
};

/* A kernel, by the driver's handle, named when first launched (its module may be gone by the end). */
struct kprof_kind {
    void *fn;
    uint64_t n;
    double ms;
    char name[160];
};

struct srv_kprof {
    struct kprof_pending ring[KPROF_RING];
    uint32_t head, tail; /* pending: [tail, head) */
    struct kprof_kind kinds[KPROF_KINDS];
    uint64_t dropped; /* launches not timed: an event could not be made */
    double total_ms;
    uint64_t total_n;
};

bool srv_kprof_wanted(void)
{
    static _Atomic int on = -1; /* read by every worker: set once from the environment */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("CUMUX_PROFILE");
        v = e && !strcmp(e, "kernels");
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

/* The kernel's row (made at its first launch), or -1 when the table is full. */
static int kind_of(struct srv_kprof *k, const struct srv_function *f)
{
    void *fn = (void *)f->fn;
    size_t i = ((uintptr_t)fn >> 4) & (KPROF_KINDS - 1);
    for (size_t probe = 0; probe < KPROF_KINDS; probe++, i = (i + 1) & (KPROF_KINDS - 1)) {
        struct kprof_kind *d = &k->kinds[i];
        if (d->fn == fn)
            return (int)i;
        if (!d->fn) {
            const char *name = f->name;
            if (!name && (f->is_kernel ? cuKernelGetName(&name, (CUkernel)f->fn) : cuFuncGetName(&name, f->fn)) !=
                             CUDA_SUCCESS)
                name = "?";
            d->fn = fn;
            snprintf(d->name, sizeof d->name, "%s", name ? name : "?");
            return (int)i;
        }
    }
    return -1;
}

/* Reads the oldest pending pair: waiting for it when `wait`, else only if it is done. */
static bool take_oldest(struct srv_kprof *k, bool wait)
{
    if (k->tail == k->head)
        return false;
    struct kprof_pending *p = &k->ring[k->tail % KPROF_RING];
    CUresult r = wait ? cuEventSynchronize(p->end) : cuEventQuery(p->end);
    if (r == CUDA_ERROR_NOT_READY)
        return false;
    float ms = 0;
    if (r == CUDA_SUCCESS && cuEventElapsedTime(&ms, p->start, p->end) == CUDA_SUCCESS) {
        k->kinds[p->kind].n++;
        k->kinds[p->kind].ms += ms;
        k->total_ms += ms;
        k->total_n++;
    } else {
        k->dropped++;
    }
    cuEventDestroy(p->start);
    cuEventDestroy(p->end);
    k->tail++;
    return true;
}

CUevent srv_kprof_before(struct srv_client *c, struct srv_stream *s)
{
    if (!c->usage.kprof && !(c->usage.kprof = calloc(1, sizeof *c->usage.kprof)))
        return NULL;
    struct srv_kprof *k = c->usage.kprof;
    while (take_oldest(k, false))
        ;
    if (k->head - k->tail == KPROF_RING)
        take_oldest(k, true);
    CUevent e;
    if (cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return NULL;
    if (cuEventRecord(e, s->cu) != CUDA_SUCCESS) {
        cuEventDestroy(e);
        return NULL;
    }
    return e;
}

void srv_kprof_after(struct srv_client *c, struct srv_stream *s, CUevent start, const struct srv_function *fn,
                     CUresult launched)
{
    struct srv_kprof *k = c->usage.kprof;
    CUevent end = NULL;
    int kind = launched == CUDA_SUCCESS ? kind_of(k, fn) : -1;
    if (kind < 0 || cuEventCreate(&end, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        cuEventRecord(end, s->cu) != CUDA_SUCCESS) {
        if (end)
            cuEventDestroy(end);
        cuEventDestroy(start);
        k->dropped += launched == CUDA_SUCCESS;
        return;
    }
    k->ring[k->head % KPROF_RING] = (struct kprof_pending){start, end, (uint32_t)kind};
    k->head++;
}

static int by_time(const void *a, const void *b)
{
    const struct kprof_kind *x = a, *y = b;
    return (y->ms > x->ms) - (y->ms < x->ms);
}

/* The client's end, after its streams' work is done: log the table and free it. Before its functions go. */
void srv_kprof_release(struct srv_client *c)
{
    struct srv_kprof *k = c->usage.kprof;
    if (!k)
        return;
    while (take_oldest(k, true))
        ;
    size_t n = 0;
    for (size_t i = 0; i < KPROF_KINDS; i++)
        if (k->kinds[i].fn && k->kinds[i].n)
            k->kinds[n++] = k->kinds[i];
    qsort(k->kinds, n, sizeof k->kinds[0], by_time);
    cumux_logf("client %u: kernels: %llu launches timed, %.1f ms of GPU time in all, %zu kernels, %llu not timed",
               c->id, (unsigned long long)k->total_n, k->total_ms, n, (unsigned long long)k->dropped);
    for (size_t i = 0; i < n && i < KPROF_TOP; i++)
        cumux_logf("client %u: kernel %.3f ms in all, %llu launches, %.2f us each: %s", c->id, k->kinds[i].ms,
                   (unsigned long long)k->kinds[i].n,
                   k->kinds[i].n ? 1e3 * k->kinds[i].ms / (double)k->kinds[i].n : 0.0, k->kinds[i].name);
    free(k);
    c->usage.kprof = NULL;
}
