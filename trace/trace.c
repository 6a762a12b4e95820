/* The tracing libcuda.so.1 (docs/trace.md): loads the traced library (the cumux shim or the real
 * driver) with RTLD_LOCAL, forwards every entry point to it, and writes one line per call and a
 * summary at exit. The wrappers are generated (trace/generated/trace_wrappers.c); this file has what
 * they call: start-up, the line format, the per-function counters and cuGetProcAddress's pointers; where
 * lines go is output.c's. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/generated/errors_table.h"
#include "trace/trace.h"

/* Room kept at the end of a line for ") = RESULT (duration) [note]". */
#define TR_TAIL_ROOM 320

static tr_fn tr_real[TR_NSYMS];
static void *tr_handle;
static char tr_target[PATH_MAX];
static uintptr_t tr_target_lo, tr_target_hi; /* where the traced library is mapped */
static atomic_int tr_ready;
static pthread_once_t tr_once = PTHREAD_ONCE_INIT;
static __thread int tr_in_init;

static atomic_ullong tr_calls[TR_NSYMS], tr_errors[TR_NSYMS], tr_ns[TR_NSYMS];

/* Entry points by address, sorted, to name the pointers cuGetProcAddress hands out. */
struct tr_addr {
    uintptr_t addr;
    unsigned idx;
};
static struct tr_addr tr_by_target[TR_NSYMS], tr_by_own[TR_NSYMS];
static unsigned tr_n_target, tr_n_own;

static void tr_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tr_say(const char *fmt, ...)
{
    char line[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        tr_write(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* ---- start-up ---- */

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = ((const struct tr_addr *)a)->addr, y = ((const struct tr_addr *)b)->addr;
    return x < y ? -1 : x > y;
}

static int find_addr(const struct tr_addr *v, unsigned n, const void *p)
{
    struct tr_addr key = {(uintptr_t)p, 0};
    const struct tr_addr *e = bsearch(&key, v, n, sizeof *v, cmp_addr);
    return e ? (int)e->idx : -1;
}

struct tr_range_query {
    uintptr_t base;
    const char *name;
    uintptr_t lo, hi;
};

static int range_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct tr_range_query *q = arg;
    if (info->dlpi_addr != q->base || !info->dlpi_name || strcmp(info->dlpi_name, q->name))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!q->lo || lo < q->lo)
            q->lo = lo;
        if (hi > q->hi)
            q->hi = hi;
    }
    return 1;
}

/* The traced library: $CUMUX_TRACE_TARGET, else the shim beside this library's directory
 * (build/lib/trace/../libcuda.so.1). */
static void target_path(void)
{
    const char *e = getenv("CUMUX_TRACE_TARGET");
    if (e && *e) {
        snprintf(tr_target, sizeof tr_target, "%s", e);
        return;
    }
    Dl_info di;
    if (dladdr((const void *)(uintptr_t)&target_path, &di) && di.dli_fname) {
        const char *slash = strrchr(di.dli_fname, '/');
        int dir = slash ? (int)(slash - di.dli_fname) : 1;
        snprintf(tr_target, sizeof tr_target, "%.*s/../libcuda.so.1", dir, slash ? di.dli_fname : ".");
    }
}

static void tr_after_fork_child(void)
{
    tr_output_after_fork();
    for (unsigned i = 0; i < TR_NSYMS; i++) {
        atomic_store_explicit(&tr_calls[i], 0, memory_order_relaxed);
        atomic_store_explicit(&tr_errors[i], 0, memory_order_relaxed);
        atomic_store_explicit(&tr_ns[i], 0, memory_order_relaxed);
    }
    tr_tables_after_fork();
}

static void tr_init(void)
{
    tr_in_init = 1;
    tr_output_open();
    const char *tables = getenv("CUMUX_TRACE_EXPORT_TABLES");
    tr_tables_enabled = !(tables && !strcmp(tables, "0"));
    const char *dump = getenv("CUMUX_TRACE_DUMP");
    tr_tables_dump = dump && !strcmp(dump, "1");

    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    target_path();
    tr_handle = tr_target[0] ? dlopen(tr_target, RTLD_NOW | RTLD_LOCAL) : NULL;
    const char *why = tr_handle ? NULL : (tr_target[0] ? dlerror() : "no target");
    if (tr_handle) {
        for (unsigned i = 0; i < TR_NSYMS; i++) {
            void *p = dlsym(tr_handle, tr_names[i]);
            if (p == (void *)tr_wrappers[i]) { /* CUMUX_TRACE_TARGET names this library */
                why = "it is the tracing library itself";
                break;
            }
            tr_real[i] = (tr_fn)p;
            if (p)
                tr_by_target[tr_n_target++] = (struct tr_addr){(uintptr_t)p, i};
            tr_by_own[tr_n_own++] = (struct tr_addr){(uintptr_t)tr_wrappers[i], i};
        }
        if (why) {
            memset(tr_real, 0, sizeof tr_real);
            tr_n_target = tr_n_own = 0;
            tr_handle = NULL; /* not closed: it is this library */
        }
    }
    if (tr_handle) {
        qsort(tr_by_target, tr_n_target, sizeof tr_by_target[0], cmp_addr);
        qsort(tr_by_own, tr_n_own, sizeof tr_by_own[0], cmp_addr);
        struct link_map *lm = NULL;
        if (dlinfo(tr_handle, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
            struct tr_range_query q = {lm->l_addr, lm->l_name, 0, 0};
            dl_iterate_phdr(range_cb, &q);
            tr_target_lo = q.lo;
            tr_target_hi = q.hi;
        }
        tr_say("cumux trace: pid %d (%s) tracing %s (%u of %d entry points)\n", (int)getpid(), exe, tr_target,
               tr_n_target, TR_NSYMS);
    } else {
        tr_say("cumux trace: pid %d (%s): cannot load %s: %s; every call fails with "
               "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED\n", (int)getpid(), exe, tr_target, why);
        if (tr_output_to_file())
            dprintf(STDERR_FILENO, "cumux trace: cannot load %s: %s\n", tr_target, why);
    }
    pthread_atfork(NULL, NULL, tr_after_fork_child);
    tr_in_init = 0;
    atomic_store_explicit(&tr_ready, 1, memory_order_release);
}

__attribute__((constructor)) static void tr_constructor(void)
{
    pthread_once(&tr_once, tr_init);
}

/* ---- one call ---- */

int tr_begin(struct tr_call *c, unsigned idx, const void *return_address)
{
    c->idx = idx;
    c->note = NULL;
    if (!atomic_load_explicit(&tr_ready, memory_order_acquire)) {
        if (tr_in_init) { /* the traced library's constructors, while it loads: nothing to call yet */
            c->fn = NULL;
            return 0;
        }
        pthread_once(&tr_once, tr_init);
    }
    c->fn = tr_real[idx];
    /* The traced library calling its own exported names: they bind to ours (we come first in the global
     * scope), so e.g. the shim's cuMemcpy_ptds calling cuMemcpy lands here. Forward, do not log. */
    uintptr_t ra = (uintptr_t)return_address;
    if (ra >= tr_target_lo && ra < tr_target_hi)
        return 0;
    c->t0 = tr_now();
    return 1;
}

CUresult tr_missing(struct tr_call *c)
{
    c->note = tr_handle ? "[not in the traced library]" : "[no traced library]";
    return tr_handle ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
}

void tr_end(struct tr_call *c, CUresult r)
{
    c->saved_errno = errno;
    c->t1 = tr_now();
    c->result = r;
    c->ok = r == CUDA_SUCCESS;
    c->nargs = 0;
    c->len = (size_t)tr_prefix(c->buf, sizeof c->buf, c->t0);
    c->len += (size_t)snprintf(c->buf + c->len, sizeof c->buf - c->len, "%s(", tr_names[c->idx]);
}

static void put(struct tr_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct tr_call *c, const char *fmt, ...)
{
    size_t limit = sizeof c->buf - TR_TAIL_ROOM;
    if (c->len >= limit)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->buf + c->len, limit - c->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= limit - c->len) { /* cut: mark it */
        c->len = limit - 1;
        memcpy(c->buf + c->len - 3, "...", 3);
    } else {
        c->len += (size_t)n;
    }
}

static void arg(struct tr_call *c, const char *name)
{
    put(c, "%s%s=", c->nargs++ ? ", " : "", name);
}

static void ptr(struct tr_call *c, const void *p)
{
    if (p)
        put(c, "%#lx", (unsigned long)(uintptr_t)p);
    else
        put(c, "NULL");
}

static void str(struct tr_call *c, const char *s, long long max)
{
    char q[256];
    size_t n = 0;
    q[n++] = '"';
    long long i = 0;
    for (; i < max && s[i] && n < sizeof q - 8; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            n += (size_t)snprintf(q + n, sizeof q - n, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            n += (size_t)snprintf(q + n, sizeof q - n, "\\x%02x", ch);
        else
            q[n++] = (char)ch;
    }
    q[n++] = '"';
    q[n] = 0;
    put(c, "%s%s", q, i < max && s[i] ? "..." : "");
}

static void uuid(struct tr_call *c, const CUuuid *u)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)u->bytes[i]);
    put(c, "{%s}", hex);
}

void tr_a_i(struct tr_call *c, const char *name, long long v)
{
    arg(c, name);
    put(c, "%lld", v);
}

void tr_a_u(struct tr_call *c, const char *name, unsigned long long v)
{
    arg(c, name);
    put(c, "%llu", v);
}

void tr_a_x(struct tr_call *c, const char *name, unsigned long long v)
{
    arg(c, name);
    put(c, "0x%llx", v);
}

void tr_a_f(struct tr_call *c, const char *name, double v)
{
    arg(c, name);
    put(c, "%g", v);
}

void tr_a_p(struct tr_call *c, const char *name, const void *p)
{
    arg(c, name);
    ptr(c, p);
}

void tr_a_s(struct tr_call *c, const char *name, const char *s)
{
    arg(c, name);
    if (s)
        str(c, s, 200);
    else
        put(c, "NULL");
}

void tr_a_uuid(struct tr_call *c, const char *name, const CUuuid *u)
{
    arg(c, name);
    ptr(c, u);
    if (u)
        uuid(c, u);
}

void tr_a_agg(struct tr_call *c, const char *name, size_t size)
{
    arg(c, name);
    put(c, "{%zu bytes}", size);
}

/* An output: the pointer, and "->value" when the call succeeded. */
static int out(struct tr_call *c, const char *name, const void *p)
{
    arg(c, name);
    ptr(c, p);
    if (!c->ok || !p)
        return 0;
    put(c, "->");
    return 1;
}

void tr_o_i(struct tr_call *c, const char *name, const void *p, long long v)
{
    if (out(c, name, p))
        put(c, "%lld", v);
}

void tr_o_u(struct tr_call *c, const char *name, const void *p, unsigned long long v)
{
    if (out(c, name, p))
        put(c, "%llu", v);
}

void tr_o_x(struct tr_call *c, const char *name, const void *p, unsigned long long v)
{
    if (out(c, name, p))
        put(c, "0x%llx", v);
}

void tr_o_f(struct tr_call *c, const char *name, const void *p, double v)
{
    if (out(c, name, p))
        put(c, "%g", v);
}

void tr_o_p(struct tr_call *c, const char *name, const void *p, const void *v)
{
    if (out(c, name, p))
        ptr(c, v);
}

void tr_o_s(struct tr_call *c, const char *name, const void *p, const char *v)
{
    if (!out(c, name, p))
        return;
    if (v)
        str(c, v, 200);
    else
        put(c, "NULL");
}

void tr_o_str(struct tr_call *c, const char *name, const char *buf, long long len)
{
    if (out(c, name, buf) && len > 0)
        str(c, buf, len < 200 ? len : 200);
}

void tr_o_uuid(struct tr_call *c, const char *name, const CUuuid *u)
{
    if (out(c, name, u))
        uuid(c, u);
}

static int cmp_err(const void *key, const void *elem)
{
    int k = *(const int *)key, c = ((const struct cumux_err_entry *)elem)->code;
    return k < c ? -1 : k > c;
}

/* The result's name: from the table generated from cuda.h (the same names as the driver's; it needs no
 * call into the traced library, which answers nothing once deinitialised at exit), else from the traced
 * library's own cuGetErrorName (called directly: not traced), for codes newer than the table. */
static const char *result_name(CUresult r)
{
    int code = (int)r;
    const struct cumux_err_entry *e = bsearch(&code, cumux_err_entries, cumux_err_nentries, sizeof *e, cmp_err);
    if (e)
        return e->name;
    const char *s = NULL;
    tr_fn f = tr_real[TR_IDX_cuGetErrorName];
    if (f && ((CUresult(*)(CUresult, const char **))f)(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "?";
}

void tr_finish(struct tr_call *c)
{
    uint64_t dt = c->t1 - c->t0;
    char dur[32];
    if (dt < 1000000u)
        snprintf(dur, sizeof dur, "%.1f us", (double)dt / 1e3);
    else if (dt < 1000000000u)
        snprintf(dur, sizeof dur, "%.3f ms", (double)dt / 1e6);
    else
        snprintf(dur, sizeof dur, "%.3f s", (double)dt / 1e9);
    int n = snprintf(c->buf + c->len, sizeof c->buf - c->len, ") = %d %.64s (%s)%s%.200s\n", (int)c->result,
                     result_name(c->result), dur, c->note ? " " : "", c->note ? c->note : "");
    if (n > 0)
        c->len += (size_t)n < sizeof c->buf - c->len ? (size_t)n : sizeof c->buf - c->len - 1;
    tr_write(c->buf, c->len);
    atomic_fetch_add_explicit(&tr_calls[c->idx], 1, memory_order_relaxed);
    if (!c->ok)
        atomic_fetch_add_explicit(&tr_errors[c->idx], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tr_ns[c->idx], dt, memory_order_relaxed);
    errno = c->saved_errno;
}

/* ---- cuGetProcAddress ---- */

void tr_hook_procaddress(struct tr_call *c, void **pfn)
{
    if (!c->ok || !pfn || !*pfn)
        return;
    int i = find_addr(tr_by_own, tr_n_own, *pfn); /* the shim's table binds to our names already */
    if (i < 0) {
        i = find_addr(tr_by_target, tr_n_target, *pfn);
        if (i >= 0)
            *pfn = (void *)tr_wrappers[i];
    }
    if (i >= 0) {
        snprintf(c->note_buf, sizeof c->note_buf, "[pfn: %s, traced]", tr_names[i]);
    } else {
        Dl_info di;
        const char *name = dladdr(*pfn, &di) && di.dli_sname ? di.dli_sname : "an unnamed function";
        snprintf(c->note_buf, sizeof c->note_buf, "[pfn: %s, not traced: not an exported entry point]", name);
    }
    c->note = c->note_buf;
}

/* ---- the summary at exit ---- */

static int cmp_total(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    unsigned long long tx = atomic_load(&tr_ns[x]), ty = atomic_load(&tr_ns[y]);
    if (tx != ty)
        return tx > ty ? -1 : 1;
    return strcmp(tr_names[x], tr_names[y]);
}

__attribute__((destructor)) static void tr_summary(void)
{
    if (!atomic_load(&tr_ready))
        return;
    static unsigned order[TR_NSYMS];
    unsigned n = 0;
    unsigned long long calls = 0, errors = 0, ns = 0;
    for (unsigned i = 0; i < TR_NSYMS; i++) {
        if (!atomic_load(&tr_calls[i]))
            continue;
        order[n++] = i;
        calls += atomic_load(&tr_calls[i]);
        errors += atomic_load(&tr_errors[i]);
        ns += atomic_load(&tr_ns[i]);
    }
    qsort(order, n, sizeof order[0], cmp_total);
    tr_say("cumux trace: summary of pid %d: %llu calls of %u functions, %llu errors, %.6f s in calls\n",
           (int)getpid(), calls, n, errors, (double)ns / 1e9);
    tr_say("  %-48s %10s %8s %12s %12s\n", "function", "calls", "errors", "total s", "mean us");
    for (unsigned k = 0; k < n; k++) {
        unsigned i = order[k];
        unsigned long long cn = atomic_load(&tr_calls[i]), t = atomic_load(&tr_ns[i]);
        tr_say("  %-48s %10llu %8llu %12.6f %12.3f\n", tr_names[i], cn, atomic_load(&tr_errors[i]), (double)t / 1e9,
               (double)t / 1e3 / (double)cn);
    }
    tr_tables_summary();
}
