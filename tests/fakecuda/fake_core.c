/* fakecuda core: the device, its primary context, device memory in one reserved host region, memory
 * pools, registered host memory, the oracle, error names, the export table cumuxd asks for, and the
 * live counts file. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/map.h"
#include "fake.h"

struct fc_stats fc_stats;

/* ---------------------------------------------------------------- the oracle */

uint64_t fc_mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t fc_add_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

_Thread_local sigjmp_buf *fc_fault_env;
static struct sigaction prev_segv, prev_bus;
static uint64_t region, region_size; /* the devices' address space (one reservation) */
/* Each GPU's allocations in a window of its own, as one process's pointers of two GPUs never meet under
 * unified addressing (and cumuxd's worker of each GPU, a process of its own, gets that GPU's); a cursor
 * in each. */
static uint64_t window_size, cursor[FC_MAX_GPUS];
static uint64_t vmm_span;                      /* after it, in the same reservation: VMM's (fc_vmm_va) */
uint64_t fc_vmm_va, fc_vmm_va_size;

/* A fault inside the device region while a stream runs work: a GPU fault (see fake.h). Anything else
 * goes to whoever handled the signal before (a sanitizer, or the default: die). */
static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    if (fc_fault_env && a - region < region_size + vmm_span) {
        static const char msg[] = "FAKECUDA FAULT: access to freed device memory while running (a GPU fault: "
                                  "reported at the stream's next synchronization)\n";
        (void)!write(2, msg, sizeof msg - 1);
        siglongjmp(*fc_fault_env, 1);
    }
    const struct sigaction *prev = sig == SIGSEGV ? &prev_segv : &prev_bus;
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, si, ctx);
    } else if (prev->sa_handler != SIG_IGN && prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig);
    } else {
        /* No one else handles it: abort, which a fuzzer catches and saves the input for (dying of the
         * signal itself left libFuzzer's fork mode with no input to show). */
        char line[128];
        int len = snprintf(line, sizeof line, "fakecuda: signal %d at %p outside the device's running work\n", sig,
                           si->si_addr);
        if (len > 0)
            (void)!write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
        abort();
    }
}

void fc_oracle_fail(const char *call, uint64_t p, uint64_t n)
{
    if (fc_fault_env) {
        fprintf(stderr, "FAKECUDA FAULT: %s: access [0x%llx,+%llu) outside any allocation while running (a GPU "
                        "fault: reported at the stream's next synchronization)\n",
                call, (unsigned long long)p, (unsigned long long)n);
        siglongjmp(*fc_fault_env, 1);
    }
    /* One line, written at once (no stdio buffering), then abort: the server is wrong. */
    char line[256];
    int len = snprintf(line, sizeof line, "FAKECUDA ORACLE: %s: access [0x%llx,+%llu) outside any allocation\n", call,
                       (unsigned long long)p, (unsigned long long)n);
    if (len > 0)
        (void)!write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    abort();
}

/* Sorted tables of ranges: device objects (allocations, globals) and registered host memory. */
struct range {
    uint64_t base, size; /* size as asked: what may be touched */
    uint64_t mapped;     /* bytes made accessible (pages), device only */
    int kind;
    bool freeing;
    bool stream_ordered; /* from a pool: stream memory operations refused, as the driver does */
    struct fc_pool *pool;
    int dev; /* the GPU whose memory it is (the current context's when it was made) */
};
struct fc_pool {
    uint32_t magic;
    bool is_default;
    uint64_t used, used_high, release_threshold; /* under dev_lock */
    int reuse[3];
    int dev; /* the GPU it allocates on */
};

struct table {
    struct range *v;
    size_t n, cap;
};

static pthread_rwlock_t dev_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct table dev_tab;
static pthread_rwlock_t host_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct table host_tab;

/* Index of the range containing p, or -1. */
static ptrdiff_t table_find(const struct table *t, uint64_t p)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const struct range *r = &t->v[lo - 1];
    return p - r->base < r->size ? (ptrdiff_t)(lo - 1) : -1;
}

static bool table_covers(const struct table *t, uint64_t p, uint64_t n)
{
    ptrdiff_t i = table_find(t, p);
    return i >= 0 && n <= t->v[i].size - (p - t->v[i].base);
}

static int table_insert(struct table *t, struct range r)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct range *v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    size_t i = t->n;
    while (i > 0 && t->v[i - 1].base > r.base)
        i--;
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = r;
    t->n++;
    return 0;
}

static void table_remove(struct table *t, size_t i)
{
    memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
    t->n--;
}

/* Device memory: one allocation, or VMM mappings that lie back to back (one span, as in CUDA). Caller
 * holds dev_lock. */
static bool dev_covers(uint64_t p, uint64_t n)
{
    if (table_covers(&dev_tab, p, n))
        return true;
    ptrdiff_t i = table_find(&dev_tab, p);
    uint64_t end = fc_add_sat(p, n);
    if (i < 0 || dev_tab.v[i].kind != FC_VMM || end == UINT64_MAX)
        return false;
    while (end - dev_tab.v[i].base > dev_tab.v[i].size) {
        uint64_t next = dev_tab.v[i].base + dev_tab.v[i].size;
        if ((size_t)i + 1 >= dev_tab.n || dev_tab.v[i + 1].base != next || dev_tab.v[i + 1].kind != FC_VMM)
            return false;
        i++;
    }
    return true;
}

void fc_oracle_dev(const char *call, uint64_t p, uint64_t n)
{
    if (n == 0)
        return;
    pthread_rwlock_rdlock(&dev_lock);
    bool ok = dev_covers(p, n);
    pthread_rwlock_unlock(&dev_lock);
    if (!ok)
        fc_oracle_fail(call, p, n);
}

void fc_oracle_host(const char *call, uint64_t p, uint64_t n)
{
    if (n == 0)
        return;
    pthread_rwlock_rdlock(&host_lock);
    bool ok = table_covers(&host_tab, p, n);
    pthread_rwlock_unlock(&host_lock);
    if (!ok)
        fc_oracle_fail(call, p, n);
}

void fc_oracle_any(const char *call, uint64_t p, uint64_t n)
{
    if (n == 0)
        return;
    pthread_rwlock_rdlock(&dev_lock);
    bool ok = dev_covers(p, n);
    pthread_rwlock_unlock(&dev_lock);
    if (!ok) {
        pthread_rwlock_rdlock(&host_lock);
        ok = table_covers(&host_tab, p, n);
        pthread_rwlock_unlock(&host_lock);
    }
    if (!ok)
        fc_oracle_fail(call, p, n);
}

bool fc_is_device_ptr(uint64_t p)
{
    pthread_rwlock_rdlock(&dev_lock);
    bool ok = table_find(&dev_tab, p) >= 0;
    pthread_rwlock_unlock(&dev_lock);
    return ok;
}

/* ---------------------------------------------------------------- init */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static bool initialized;
static uint64_t total_mem; /* each GPU's */
static uint64_t used_mem[FC_MAX_GPUS]; /* under dev_lock */
int fc_ngpus = 1;
static size_t page;

static void init_device(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    /* CUMUX_FAKE_INIT_DELAY_MS: cuInit takes that long, as a real driver's does (hundreds of ms), so that
     * tests meet a worker still starting its GPU. */
    const char *delay = getenv("CUMUX_FAKE_INIT_DELAY_MS");
    if (delay && *delay)
        usleep((useconds_t)atoi(delay) * 1000u);
    uint64_t mb = 1024;
    const char *e = getenv("CUMUX_FAKE_MEMORY_MB");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end || v == 0 || v > (1ull << 22)) {
            fprintf(stderr, "fakecuda: CUMUX_FAKE_MEMORY_MB=%s is not a size in MiB\n", e);
            init_result = CUDA_ERROR_INVALID_VALUE;
            return;
        }
        mb = v;
    }
    total_mem = mb << 20;
    /* CUMUX_FAKE_GPUS=N: N GPUs alike but for their identity (UUID, PCI bus), each with that memory. */
    const char *g = getenv("CUMUX_FAKE_GPUS");
    if (g && *g) {
        char *end;
        long n = strtol(g, &end, 10);
        if (*end || n < 1 || n > FC_MAX_GPUS) {
            fprintf(stderr, "fakecuda: CUMUX_FAKE_GPUS=%s is not a number from 1 to %d\n", g, FC_MAX_GPUS);
            init_result = CUDA_ERROR_INVALID_VALUE;
            return;
        }
        fc_ngpus = (int)n;
    }
    /* Address space only (nothing is committed until an allocation makes its pages accessible); room
     * for the memory, a guard page per allocation and a cursor that moves on, so that a stale pointer
     * lands on unmapped pages for as long as possible. */
    region_size = total_mem * 4 * (uint64_t)fc_ngpus + (1ull << 30);
    /* Then as much again for VMM reservations (fake_vmm.c): device address space too, so that a stream's
     * access to a range unmapped under it is a GPU fault, as for freed memory, not the process's death. */
    vmm_span = total_mem * 4 * (uint64_t)fc_ngpus + (1ull << 30);
    /* At the same place in every process when it is free, as the real driver's device addresses come out
     * alike in processes that do the same: cumuxd's workers reserve their arena at the same address. */
    /* Plain mmap, not cumux_mmap: clearing the ASan shadow of all of it (tens of GiB of address space)
     * would commit an eighth of that in shadow pages; each allocation clears its own range instead. */
    void *p = mmap((void *)(uintptr_t)0x200000000000ull, region_size + vmm_span, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && (uintptr_t)p != 0x200000000000ull) { /* old kernels ignore MAP_FIXED_NOREPLACE */
        munmap(p, region_size + vmm_span);
        p = MAP_FAILED;
    }
    if (p == MAP_FAILED)
        p = mmap(NULL, region_size + vmm_span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "fakecuda: cannot reserve %llu bytes of address space: %s\n",
                (unsigned long long)(region_size + vmm_span), strerror(errno));
        init_result = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    region = (uint64_t)(uintptr_t)p;
    window_size = (region_size / (uint64_t)fc_ngpus) & ~(uint64_t)0xfffff;
    for (int d = 0; d < fc_ngpus; d++)
        cursor[d] = region + (uint64_t)d * window_size;
    fc_vmm_va = region + region_size;
    fc_vmm_va_size = vmm_span;
    struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &prev_segv);
    sigaction(SIGBUS, &sa, &prev_bus);
    initialized = true;
    init_result = CUDA_SUCCESS;
    fc_stats_start();
}

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&init_once, init_device);
    return init_result;
}

/* A fatal fault (the fault_store kernel): as the driver does, every later call of the process returns it. */
static _Atomic int sticky_error;

void fc_fault_sticky(CUresult r)
{
    int none = 0;
    atomic_compare_exchange_strong(&sticky_error, &none, (int)r);
}

struct sticky_later {
    CUresult r;
    unsigned ms;
};

static void *sticky_later_main(void *arg)
{
    struct sticky_later w = *(struct sticky_later *)arg;
    free(arg);
    nanosleep(&(struct timespec){w.ms / 1000, (long)(w.ms % 1000) * 1000000L}, NULL);
    fc_fault_sticky(w.r);
    return NULL;
}

void fc_fault_sticky_later(CUresult r, unsigned ms)
{
    struct sticky_later *w = malloc(sizeof *w);
    pthread_t t;
    if (!w) {
        fc_fault_sticky(r);
        return;
    }
    *w = (struct sticky_later){r, ms};
    if (pthread_create(&t, NULL, sticky_later_main, w) != 0) {
        free(w);
        fc_fault_sticky(r);
        return;
    }
    pthread_detach(t);
}

CUresult fc_check_init(void)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return (CUresult)atomic_load(&sticky_error);
}

#define INIT_OR_RETURN()                                                                               \
    do {                                                                                               \
        CUresult init_r_ = fc_check_init();                                                            \
        if (init_r_ != CUDA_SUCCESS)                                                                   \
            return init_r_;                                                                            \
    } while (0)

CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- device memory */

static void fc_pool_account(struct fc_pool *p, int64_t delta);

/* Start of a free stretch of `need` bytes at or after `from`; 0 if none. Caller holds dev_lock. */
static uint64_t va_find(uint64_t from, uint64_t end, uint64_t need)
{
    uint64_t start = from;
    ptrdiff_t i = 0;
    /* The first object whose reserved stretch (mapped pages and a guard page) ends after start. */
    while ((size_t)i < dev_tab.n && dev_tab.v[i].base + dev_tab.v[i].mapped + page <= start)
        i++;
    for (;;) {
        if ((size_t)i < dev_tab.n && dev_tab.v[i].base < start + need) {
            uint64_t next = dev_tab.v[i].base + dev_tab.v[i].mapped + page;
            if (next > start)
                start = next;
            i++;
            continue;
        }
        if (start + need > end)
            return 0;
        return start;
    }
}

CUresult fc_mem_alloc(uint64_t size, enum fc_alloc_kind kind, struct fc_pool *pool, uint64_t *out)
{
    if (size == 0 || size > total_mem)
        return size ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    uint64_t mapped = (size + page - 1) & ~(uint64_t)(page - 1);
    int dev = pool ? pool->dev : fc_current_device();
    pthread_rwlock_wrlock(&dev_lock);
    if (used_mem[dev] + mapped > total_mem) {
        pthread_rwlock_unlock(&dev_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t need = mapped + page; /* and its guard page */
    uint64_t window = region + (uint64_t)dev * window_size, window_end = window + window_size;
    uint64_t at = va_find(cursor[dev], window_end, need);
    if (!at)
        at = va_find(window, window_end, need);
    if (!at || mprotect((void *)(uintptr_t)at, mapped, PROT_READ | PROT_WRITE) != 0) {
        pthread_rwlock_unlock(&dev_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cumux_unpoison((void *)(uintptr_t)at, mapped);
    struct range r = {.base = at, .size = size, .mapped = mapped, .kind = kind, .pool = pool, .dev = dev};
    if (table_insert(&dev_tab, r) < 0) {
        mprotect((void *)(uintptr_t)at, mapped, PROT_NONE);
        pthread_rwlock_unlock(&dev_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cursor[dev] = at + need;
    used_mem[dev] += mapped;
    if (pool)
        fc_pool_account(pool, (int64_t)mapped);
    pthread_rwlock_unlock(&dev_lock);
    atomic_fetch_add(&fc_stats.allocations, 1);
    atomic_fetch_add(&fc_stats.alloc_bytes, (long)size);
    *out = at;
    return CUDA_SUCCESS;
}

static void mark_stream_ordered(uint64_t base)
{
    pthread_rwlock_wrlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, base);
    if (i >= 0)
        dev_tab.v[i].stream_ordered = true;
    pthread_rwlock_unlock(&dev_lock);
}

bool fc_mem_stream_ordered(uint64_t p)
{
    pthread_rwlock_rdlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, p);
    bool r = i >= 0 && dev_tab.v[i].stream_ordered;
    pthread_rwlock_unlock(&dev_lock);
    return r;
}

CUresult fc_mem_free_begin(uint64_t base)
{
    pthread_rwlock_wrlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, base);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && dev_tab.v[i].base == base && dev_tab.v[i].kind == FC_ALLOC && !dev_tab.v[i].freeing) {
        dev_tab.v[i].freeing = true;
        r = CUDA_SUCCESS;
    }
    pthread_rwlock_unlock(&dev_lock);
    return r;
}

void fc_mem_release(uint64_t base)
{
    pthread_rwlock_wrlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, base);
    if (i < 0 || dev_tab.v[i].base != base) {
        pthread_rwlock_unlock(&dev_lock);
        return;
    }
    struct range r = dev_tab.v[i];
    table_remove(&dev_tab, (size_t)i);
    /* Inaccessible again, and its pages given back: a stale pointer faults, freed memory is visible. */
    mprotect((void *)(uintptr_t)r.base, r.mapped, PROT_NONE);
    madvise((void *)(uintptr_t)r.base, r.mapped, MADV_DONTNEED);
    used_mem[r.dev] -= r.mapped;
    if (r.pool)
        fc_pool_account(r.pool, -(int64_t)r.mapped);
    pthread_rwlock_unlock(&dev_lock);
    atomic_fetch_sub(&fc_stats.allocations, 1);
    atomic_fetch_sub(&fc_stats.alloc_bytes, (long)r.size);
}

/* VMM (fake_vmm.c): memory taken and given back, and mapped ranges made accessible or not. */
CUresult fc_mem_account(int dev, int64_t bytes)
{
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_rwlock_wrlock(&dev_lock);
    bool ok = bytes < 0 || used_mem[dev] + (uint64_t)bytes <= total_mem;
    if (ok)
        used_mem[dev] += (uint64_t)bytes;
    pthread_rwlock_unlock(&dev_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

int fc_dev_range_add(uint64_t base, uint64_t size)
{
    pthread_rwlock_wrlock(&dev_lock);
    int r = table_insert(&dev_tab, (struct range){.base = base, .size = size, .mapped = size, .kind = FC_VMM});
    pthread_rwlock_unlock(&dev_lock);
    return r;
}

void fc_dev_range_remove(uint64_t base)
{
    pthread_rwlock_wrlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, base);
    if (i >= 0 && dev_tab.v[i].base == base && dev_tab.v[i].kind == FC_VMM)
        table_remove(&dev_tab, (size_t)i);
    pthread_rwlock_unlock(&dev_lock);
}

CUresult cuMemGetInfo(size_t *free_out, size_t *total_out)
{
    INIT_OR_RETURN();
    if (!free_out || !total_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_rdlock(&dev_lock);
    *free_out = (size_t)(total_mem - used_mem[fc_current_device()]);
    *total_out = (size_t)total_mem;
    pthread_rwlock_unlock(&dev_lock);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- memory pools
 * Memory goes back to the device when freed (no caching), so trimming has nothing to do; the pool keeps
 * its attributes and what is allocated from it. */

#define DEFAULT_POOL(d) {.magic = FC_MAGIC_POOL, .is_default = true, .reuse = {1, 1, 1}, .dev = d}
static struct fc_pool default_pools[FC_MAX_GPUS] = {DEFAULT_POOL(0), DEFAULT_POOL(1), DEFAULT_POOL(2), DEFAULT_POOL(3),
                                                    DEFAULT_POOL(4), DEFAULT_POOL(5), DEFAULT_POOL(6), DEFAULT_POOL(7)};
_Static_assert(FC_MAX_GPUS == 8, "a default pool per GPU");

static void fc_pool_account(struct fc_pool *p, int64_t delta)
{
    p->used += (uint64_t)delta;
    if (p->used > p->used_high)
        p->used_high = p->used;
}

static struct fc_pool *pool_get(CUmemoryPool h)
{
    struct fc_pool *p = (struct fc_pool *)h;
    return p && p->magic == FC_MAGIC_POOL ? p : NULL;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *out = (CUmemoryPool)&default_pools[dev];
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    INIT_OR_RETURN();
    if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_gpu_ok(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    struct fc_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = FC_MAGIC_POOL;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->dev = props->location.id;
    atomic_fetch_add(&fc_stats.pools, 1);
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool h)
{
    INIT_OR_RETURN();
    struct fc_pool *p = pool_get(h);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    /* Allocations still out outlive their pool (as in CUDA, they are freed later): forget it in them. */
    pthread_rwlock_wrlock(&dev_lock);
    for (size_t i = 0; i < dev_tab.n; i++)
        if (dev_tab.v[i].pool == p)
            dev_tab.v[i].pool = NULL;
    pthread_rwlock_unlock(&dev_lock);
    p->magic = FC_MAGIC_DEAD;
    free(p);
    atomic_fetch_sub(&fc_stats.pools, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t keep)
{
    (void)keep;
    INIT_OR_RETURN();
    return pool_get(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    INIT_OR_RETURN();
    struct fc_pool *p = pool_get(h);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_rwlock_wrlock(&dev_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            r = CUDA_ERROR_INVALID_VALUE; /* only a reset to 0 is allowed */
        else
            p->used_high = p->used;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_rwlock_unlock(&dev_lock);
    return r;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    INIT_OR_RETURN();
    struct fc_pool *p = pool_get(h);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_rwlock_rdlock(&dev_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->release_threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_rwlock_unlock(&dev_lock);
    return r;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t size, CUmemoryPool h, CUstream s)
{
    INIT_OR_RETURN();
    struct fc_pool *p = pool_get(h);
    if (!out || !p || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Made at once: usable in stream order is the weaker promise. Under capture the real driver would
     * make an allocation node, which the fake does not have. */
    CUresult r = fc_stream_usable(s);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t ptr;
    CHECK_RET(fc_mem_alloc(size, FC_ALLOC, p, &ptr));
    mark_stream_ordered(ptr);
    *out = ptr;
    return CUDA_SUCCESS;
}

/* Captured: a graph allocation node (fake_graph.c); otherwise made at once, as cuMemAllocFromPoolAsync. */
CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream s)
{
    INIT_OR_RETURN();
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(cuStreamIsCapturing(s, &st));
    if (st == CU_STREAM_CAPTURE_STATUS_NONE) {
        uint64_t ptr;
        CHECK_RET(fc_mem_alloc(size, FC_ALLOC, NULL, &ptr));
        mark_stream_ordered(ptr);
        *out = ptr;
        return CUDA_SUCCESS;
    }
    CUresult r;
    struct fc_op *op = fc_gmem_op(size, &r);
    if (!op)
        return r;
    uint64_t ptr = op->u.gm.ptr;
    CHECK_RET(fc_submit(s, op));
    *out = ptr;
    return CUDA_SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream s)
{
    INIT_OR_RETURN();
    if (fc_gmem_is(ptr)) { /* graph memory: a free node when captured; its graph holds the memory */
        struct fc_op *op = fc_op_new(OP_GMEM, "cuMemFreeAsync of graph memory");
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.gm.ptr = ptr;
        return fc_submit(s, op);
    }
    CHECK_RET(fc_stream_usable(s));
    CHECK_RET(fc_mem_free_begin(ptr));
    struct fc_op *op = fc_op_new(OP_FREE, "cuMemFreeAsync");
    if (!op) {
        fc_mem_release(ptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.free_ptr = ptr;
    return fc_submit(s, op);
}

/* ---------------------------------------------------------------- registered host memory */

CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags)
{
    INIT_OR_RETURN();
    if (!p || size == 0 || (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                                CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = (uint64_t)(uintptr_t)p;
    if (base + size < base)
        return CUDA_ERROR_INVALID_VALUE;
    /* The real driver pins the pages: memory that is not mapped cannot be registered. */
    uint64_t first = base & ~(uint64_t)(page - 1);
    size_t npages = (size_t)((base + size - first + page - 1) / page);
    unsigned char vec[256];
    for (size_t done = 0; done < npages;) {
        size_t chunk = npages - done < sizeof vec ? npages - done : sizeof vec;
        if (mincore((void *)(uintptr_t)(first + done * page), chunk * page, vec) != 0)
            return CUDA_ERROR_INVALID_VALUE;
        done += chunk;
    }
    pthread_rwlock_wrlock(&host_lock);
    for (size_t i = 0; i < host_tab.n; i++) {
        const struct range *r = &host_tab.v[i];
        if (base < r->base + r->size && r->base < base + size) {
            pthread_rwlock_unlock(&host_lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    }
    int rc = table_insert(&host_tab, (struct range){.base = base, .size = size});
    pthread_rwlock_unlock(&host_lock);
    if (rc < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&fc_stats.host_registered, 1);
    return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p)
{
    INIT_OR_RETURN();
    uint64_t base = (uint64_t)(uintptr_t)p;
    pthread_rwlock_rdlock(&host_lock);
    ptrdiff_t i = table_find(&host_tab, base);
    bool ok = i >= 0 && host_tab.v[i].base == base;
    pthread_rwlock_unlock(&host_lock);
    if (!ok)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    /* As the real driver: wait for the device, whose queued copies may still use the pages. */
    fc_drain();
    pthread_rwlock_wrlock(&host_lock);
    i = table_find(&host_tab, base);
    ok = i >= 0 && host_tab.v[i].base == base;
    if (ok)
        table_remove(&host_tab, (size_t)i);
    pthread_rwlock_unlock(&host_lock);
    if (!ok)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    atomic_fetch_sub(&fc_stats.host_registered, 1);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the device */

#define FC_NATTRS 148
static const int attr_values[FC_NATTRS] = {
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = 49152,
    [CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = 65536,
    [CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32,
    [CU_DEVICE_ATTRIBUTE_MAX_PITCH] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = 65536,
    [CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = FC_CLOCK_KHZ,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = 1,
    [CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = FC_SM_COUNT,
    [CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT] = 0,
    [CU_DEVICE_ATTRIBUTE_INTEGRATED] = 0,
    [CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_MODE] = CU_COMPUTEMODE_DEFAULT,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = 1,
    [CU_DEVICE_ATTRIBUTE_ECC_ENABLED] = 1,
    [CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = 0x1b,
    [CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = 0,
    [CU_DEVICE_ATTRIBUTE_TCC_DRIVER] = 0,
    [CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = 2619000,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = 6144,
    [CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 62914560,
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048,
    [CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = 5,
    [CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE] = 32768,
    [CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = 0,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = 32,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH] = 268435456,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT] = 65000,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH] = 2097120,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = 233472,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = 65536,
    [CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD] = 0,
    [CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = 2,
    [CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 1,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1] = 0,
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH] = 0,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = 232448,
    [CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0,
    [CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = 0,
    [CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = 32,
    [CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE] = 82837504,
    [CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE] = 134213632,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING] = 0,
    [CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = 9,
    [CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = 0,
    [CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT] = 4,
    [CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS] = 1,
    [CU_DEVICE_ATTRIBUTE_NUMA_CONFIG] = 0,
    [CU_DEVICE_ATTRIBUTE_NUMA_ID] = -1,
    [CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_MPS_ENABLED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID] = 0,
    [CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK] = 0,
    [CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH] = 0,
    [CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = 0x233d10de,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID] = 0x17e110de,
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED] = 0,
    [CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED] = 0,
};
_Static_assert(CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED == FC_NATTRS - 1,
               "cuda.h has new device attributes: give them values");

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    /* Every enumerator of cuda.h has a value; numbers that name no attribute are refused, as the real
     * driver refuses them. */
    if ((int)a < 1 || (int)a >= FC_NATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    *v = attr_values[a];
    if (a == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
        *v += dev; /* each GPU on a bus of its own */
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
    INIT_OR_RETURN();
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = fc_ngpus;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    INIT_OR_RETURN();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", "cumux fake GPU");
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)total_mem;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    char id[17]; /* GPUs differ in the first byte: the beginning of a UUID names one (CUDA_VISIBLE_DEVICES) */
    snprintf(id, sizeof id, "%x-cumux-fake-gpu", (unsigned)dev);
    memcpy(uuid->bytes, id, 16);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(id, (size_t)len, "%04X:%02X:%02X.0", attr_values[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             attr_values[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] + dev, attr_values[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the primary context */

/* One primary context per GPU; a CUcontext is the address of its GPU's. */
struct fc_pctx {
    int refs;
    pthread_mutex_t mu;
    size_t limits[CU_LIMIT_MAX];
    bool limits_set;
    unsigned flags;
    int dev;
    bool peer[FC_MAX_GPUS]; /* peer access to that GPU's memory enabled (cuCtxEnablePeerAccess) */
};
static struct fc_pctx pctxs[FC_MAX_GPUS];
static pthread_once_t pctx_once = PTHREAD_ONCE_INIT;
static _Thread_local CUcontext current;

static void pctx_init(void)
{
    for (int i = 0; i < FC_MAX_GPUS; i++) {
        pthread_mutex_init(&pctxs[i].mu, NULL);
        pctxs[i].dev = i;
    }
}

static struct fc_pctx *pctx_of(CUcontext c) /* NULL: not a primary context of ours */
{
    for (int i = 0; i < fc_ngpus; i++)
        if (c == (CUcontext)&pctxs[i])
            return &pctxs[i];
    return NULL;
}

bool fc_gpu_ok(int dev)
{
    return dev >= 0 && dev < fc_ngpus;
}

int fc_ctx_device(CUcontext c)
{
    struct fc_pctx *p = c ? pctx_of(c) : NULL;
    return p ? p->dev : -1;
}

int fc_current_device(void)
{
    struct fc_pctx *p = current ? pctx_of(current) : NULL;
    return p ? p->dev : 0;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev)
{
    INIT_OR_RETURN();
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_once(&pctx_once, pctx_init);
    struct fc_pctx *x = &pctxs[dev];
    pthread_mutex_lock(&x->mu);
    x->refs++;
    pthread_mutex_unlock(&x->mu);
    *out = (CUcontext)x;
    return CUDA_SUCCESS;
}

/* The server sets how its context waits (CUMUX_SYNC); the fake keeps the flags for GetState to show,
 * with no waiting of its own to change. */
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    INIT_OR_RETURN();
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if ((flags & CU_CTX_SCHED_MASK) > CU_CTX_SCHED_BLOCKING_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&pctx_once, pctx_init);
    pthread_mutex_lock(&pctxs[dev].mu);
    pctxs[dev].flags = flags;
    pthread_mutex_unlock(&pctxs[dev].mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    INIT_OR_RETURN();
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&pctx_once, pctx_init);
    pthread_mutex_lock(&pctxs[dev].mu);
    *flags = pctxs[dev].flags;
    *active = pctxs[dev].refs > 0;
    pthread_mutex_unlock(&pctxs[dev].mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    INIT_OR_RETURN();
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_once(&pctx_once, pctx_init);
    struct fc_pctx *x = &pctxs[dev];
    pthread_mutex_lock(&x->mu);
    CUresult r = x->refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (x->refs > 0)
        x->refs--;
    pthread_mutex_unlock(&x->mu);
    return r;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
    INIT_OR_RETURN();
    if (c && !pctx_of(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

static void limits_default(struct fc_pctx *x)
{
    if (x->limits_set)
        return;
    x->limits[CU_LIMIT_STACK_SIZE] = 1024;
    x->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    x->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    x->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    x->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    x->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    x->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
    x->limits_set = true;
}

CUresult cuCtxGetLimit(size_t *v, CUlimit limit)
{
    INIT_OR_RETURN();
    if (!v || (unsigned)limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_pctx *x = current ? pctx_of(current) : NULL;
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&x->mu);
    limits_default(x);
    *v = x->limits[limit];
    pthread_mutex_unlock(&x->mu);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t v)
{
    INIT_OR_RETURN();
    if ((unsigned)limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_pctx *x = current ? pctx_of(current) : NULL;
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&x->mu);
    limits_default(x);
    x->limits[limit] = v;
    pthread_mutex_unlock(&x->mu);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *out)
{
    INIT_OR_RETURN();
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_pctx *x = current ? pctx_of(current) : NULL;
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = x->dev;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- peers
 * Every pair of the fake's GPUs can reach each other's memory (one host address space behind them all);
 * a context must enable it first, as on GPUs joined by NVLink or PCIe peer-to-peer. */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    INIT_OR_RETURN();
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(dev) || !fc_gpu_ok(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can = dev != peer;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
    INIT_OR_RETURN();
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_gpu_ok(src) || !fc_gpu_ok(dst) || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *v = 0;
        return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *v = 1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* Peer access from the current context to peer's memory; the driver's errors for each misuse. */
static CUresult peer_change(CUcontext peer, bool on)
{
    struct fc_pctx *x = current ? pctx_of(current) : NULL, *p = pctx_of(peer);
    if (!x || !p || p == x) /* none current, no such peer, or the current one itself (cuda.h) */
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&x->mu);
    CUresult r = CUDA_SUCCESS;
    if (on && x->peer[p->dev])
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else if (!on && !x->peer[p->dev])
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        x->peer[p->dev] = on;
    pthread_mutex_unlock(&x->mu);
    return r;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    INIT_OR_RETURN();
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return peer_change(peer, true);
}

CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    INIT_OR_RETURN();
    return peer_change(peer, false);
}

/* Whether the current context may reach GPU dev's memory: its own, or a peer's it enabled. */
bool fc_peer_reachable(int dev)
{
    struct fc_pctx *x = current ? pctx_of(current) : NULL;
    if (!x || x->dev == dev)
        return true;
    pthread_mutex_lock(&x->mu);
    bool on = x->peer[dev];
    pthread_mutex_unlock(&x->mu);
    return on;
}

/* The GPU whose memory p is (its allocation's), or -1. */
int fc_mem_device(uint64_t p)
{
    pthread_rwlock_rdlock(&dev_lock);
    ptrdiff_t i = table_find(&dev_tab, p);
    int d = i >= 0 ? dev_tab.v[i].dev : -1;
    pthread_rwlock_unlock(&dev_lock);
    return d;
}

CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    INIT_OR_RETURN();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- errors */

static const struct {
    CUresult r;
    const char *name;
} error_names[] = {
#define E(x) {x, #x}
    E(CUDA_SUCCESS), E(CUDA_ERROR_INVALID_VALUE), E(CUDA_ERROR_OUT_OF_MEMORY), E(CUDA_ERROR_NOT_INITIALIZED),
    E(CUDA_ERROR_DEINITIALIZED), E(CUDA_ERROR_NO_DEVICE), E(CUDA_ERROR_INVALID_DEVICE),
    E(CUDA_ERROR_INVALID_IMAGE), E(CUDA_ERROR_INVALID_CONTEXT), E(CUDA_ERROR_INVALID_HANDLE),
    E(CUDA_ERROR_NOT_FOUND), E(CUDA_ERROR_NOT_READY), E(CUDA_ERROR_ILLEGAL_ADDRESS),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), E(CUDA_ERROR_NOT_SUPPORTED), E(CUDA_ERROR_ILLEGAL_STATE),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED), E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE), E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED),
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED), E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE),
    E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), E(CUDA_ERROR_INVALID_CLUSTER_SIZE),
    E(CUDA_ERROR_MPS_CONNECTION_FAILED), E(CUDA_ERROR_UNKNOWN), E(CUDA_ERROR_ASSERT), E(CUDA_ERROR_LAUNCH_FAILED),
#undef E
};

CUresult cuGetErrorName(CUresult r, const char **out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++) {
        if (error_names[i].r == r) {
            *out = error_names[i].name;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- export tables
 * Only the architecture-data table (server/arch_data.c): slot 4 hands out two malloc'd 64-byte tables,
 * slot 13 frees them. Contents are the fake's own: nothing reads them but cuBLASLt, which needs a GPU. */
static CUresult CUDAAPI arch_get(void **a, void **b)
{
    if (!a || !b)
        return CUDA_ERROR_INVALID_VALUE;
    *a = malloc(64);
    *b = malloc(64);
    if (!*a || !*b) {
        free(*a);
        free(*b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(*a, 0x90, 64);
    memset(*b, 0x09, 64);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI arch_free(void *a, void *b)
{
    free(a);
    free(b);
    return CUDA_SUCCESS;
}

static const void *arch_table[14] = {(const void *)(uintptr_t)sizeof arch_table};

static const unsigned char arch_uuid[16] = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                            0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};

CUresult cuGetExportTable(const void **out, const CUuuid *id)
{
    if (!out || !id)
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(id->bytes, arch_uuid, 16) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    arch_table[4] = (const void *)(uintptr_t)arch_get;
    arch_table[13] = (const void *)(uintptr_t)arch_free;
    *out = arch_table;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- the counts file */

static const char *stats_path, *launches_path;

/* FILE replaced by TEXT: written to a temporary, then renamed (readers see the old file or the new one,
 * never half of one). */
static void replace_file(const char *path, const char *text)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid()) >= (int)sizeof tmp)
        return;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}

static void stats_write(void)
{
    char text[1024];
    /* CUMUX_FAKE_LAUNCH_COUNTS=FILE: how the server named the library kernels it launched (counts that only
     * grow, kept apart from the live counts, which must come back to their baseline). */
    if (launches_path) {
        snprintf(text, sizeof text, "launches_by_kernel %ld\nlaunches_by_function %ld\n",
                 atomic_load(&fc_stats.launches_by_kernel), atomic_load(&fc_stats.launches_by_function));
        replace_file(launches_path, text);
    }
    if (!stats_path)
        return;
    snprintf(text, sizeof text,
             "allocations %ld\nalloc_bytes %ld\nstreams %ld\nevents %ld\nmodules %ld\nlibraries %ld\n"
             "graphs %ld\ngraph_execs %ld\nhost_registered %ld\npools %ld\nvmm_allocations %ld\n"
             "vmm_reservations %ld\nvmm_mappings %ld\narrays %ld\ntextures %ld\ngreen_ctxs %ld\n",
             atomic_load(&fc_stats.allocations), atomic_load(&fc_stats.alloc_bytes), atomic_load(&fc_stats.streams),
             atomic_load(&fc_stats.events), atomic_load(&fc_stats.modules), atomic_load(&fc_stats.libraries),
             atomic_load(&fc_stats.graphs), atomic_load(&fc_stats.graph_execs),
             atomic_load(&fc_stats.host_registered), atomic_load(&fc_stats.pools),
             atomic_load(&fc_stats.vmm_allocations), atomic_load(&fc_stats.vmm_reservations),
             atomic_load(&fc_stats.vmm_mappings), atomic_load(&fc_stats.arrays), atomic_load(&fc_stats.textures),
             atomic_load(&fc_stats.green_ctxs));
    replace_file(stats_path, text);
}

static void *stats_main(void *arg)
{
    (void)arg;
    for (;;) {
        stats_write();
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

void fc_stats_start(void)
{
    const char *p = getenv("CUMUX_FAKE_STATS"), *l = getenv("CUMUX_FAKE_LAUNCH_COUNTS");
    stats_path = p && *p ? p : NULL;
    launches_path = l && *l ? l : NULL;
    if (!stats_path && !launches_path)
        return;
    stats_write();
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, stats_main, NULL) != 0)
        fprintf(stderr, "fakecuda: no thread for CUMUX_FAKE_STATS\n");
    pthread_attr_destroy(&a);
}

/* A dma-buf stands in as a memfd of the range's size: what the fake can give for memory in one allocation. */
CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size, CUmemRangeHandleType type,
                                       unsigned long long flags)
{
    INIT_OR_RETURN();
    if (!handle || !size || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_rdlock(&dev_lock);
    bool ok = dev_covers(p, size);
    pthread_rwlock_unlock(&dev_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)handle = fd;
    return CUDA_SUCCESS;
}

/* Unified addressing: registered host memory has the same address on the device. */
CUresult cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    INIT_OR_RETURN();
    if (!dptr || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_rdlock(&host_lock);
    bool ok = table_find(&host_tab, (uint64_t)(uintptr_t)p) >= 0;
    pthread_rwlock_unlock(&host_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
