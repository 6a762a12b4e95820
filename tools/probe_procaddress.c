/* Records how the real driver's cuGetProcAddress_v2 answers, for every requestable name, flags value
 * and cudaVersion, so that the shim's table can be generated from measurements rather than guesses.
 *
 * Runs on a machine with the real driver (not in CI):
 *   gcc -O2 -Wall -Wextra -o /tmp/probe tools/probe_procaddress.c -ldl
 *   /tmp/probe data/stub-symbols.txt data/cudart13-proc-lookups.txt [real-symbols.txt] > procaddress.tsv
 * real-symbols.txt: `nm -D --defined-only` of the real libcuda.so.1 (its names are probed too, and
 * returned pointers are named from it). Output: one row per transition (see the header it prints).
 * Self-contained (no cuda.h) so that it builds wherever a driver is installed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef CUresult (*gpa2_fn)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*ver_fn)(int *);

#define STATUS_UNSET 77                 /* sentinel: shows whether the driver writes symbolStatus */
#define PFN_UNSET ((void *)0x5a5a5a5aUL) /* sentinel: shows whether the driver writes *pfn */
#define VMAX 20000                      /* scan range; releases so far are below 14000 */
#define STEP 10                         /* coarse step; each change is refined to the exact version */

static gpa2_fn gpa2;
static gpa1_fn gpa1;
static void *lib;

/* ---- name list ---- */
static char **names;
static size_t nnames, capnames;

static void add_name(const char *s)
{
    if (!*s)
        return;
    if (nnames == capnames) {
        capnames = capnames ? capnames * 2 : 1024;
        names = realloc(names, capnames * sizeof *names);
        if (!names)
            abort();
    }
    names[nnames++] = strdup(s);
}

static int cmpstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds s and every shorter form a caller could ask for: strip _ptds/_ptsz, then _vN. */
static void add_with_bases(const char *s)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    add_name(buf);
    size_t n = strlen(buf);
    if (n > 5 && (!strcmp(buf + n - 5, "_ptds") || !strcmp(buf + n - 5, "_ptsz"))) {
        buf[n - 5] = 0;
        add_name(buf);
        n -= 5;
    }
    char *u = strrchr(buf, '_');
    if (u && u[1] == 'v' && u[2]) {
        const char *p = u + 2;
        while (*p >= '0' && *p <= '9')
            p++;
        if (!*p) {
            *u = 0;
            add_name(buf);
        }
    }
}

/* Reads a file of names: first whitespace-separated token of each line starting with "cu".
 * nm format ("ADDR T name") is recognised by its three columns. */
static void read_names(const char *path, int nm_format)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "probe: cannot open %s: %s\n", path, strerror(errno));
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char a[512], b[512], c[512];
        int k = sscanf(line, "%511s %511s %511s", a, b, c);
        const char *nm = NULL;
        if (nm_format) {
            if (k == 3)
                nm = c;
            else if (k == 2)
                nm = b;
        } else if (k >= 1) {
            nm = a;
        }
        if (nm && !strncmp(nm, "cu", 2)) {
            char *at = strchr(nm, '@'); /* versioned nm output, if the real library has versions */
            if (at)
                *at = 0;
            add_with_bases(nm);
        }
    }
    fclose(f);
}

/* ---- pointer -> exported name map, from the real library's symbol list ---- */
struct sym {
    void *addr;
    char *name;
};
static struct sym *syms;
static size_t nsyms;

static int cmpsym(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void build_symmap(void)
{
    syms = calloc(nnames, sizeof *syms);
    for (size_t i = 0; i < nnames; i++) {
        void *p = dlsym(lib, names[i]);
        if (p) {
            syms[nsyms].addr = p;
            syms[nsyms].name = names[i];
            nsyms++;
        }
    }
    qsort(syms, nsyms, sizeof *syms, cmpsym);
}

/* All exported names at p, comma-separated; else what dladdr says, prefixed by '?'. */
static void name_of(void *p, char *out, size_t outsz)
{
    if (!p) {
        snprintf(out, outsz, "-");
        return;
    }
    size_t lo = 0, hi = nsyms;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (syms[mid].addr < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t len = 0;
    out[0] = 0;
    for (size_t i = lo; i < nsyms && syms[i].addr == p; i++)
        len += snprintf(out + len, len < outsz ? outsz - len : 0, "%s%s", len ? "," : "", syms[i].name);
    if (len)
        return;
    Dl_info di;
    if (dladdr(p, &di) && di.dli_fname) {
        const char *base = strrchr(di.dli_fname, '/');
        base = base ? base + 1 : di.dli_fname;
        if (di.dli_sname)
            snprintf(out, outsz, "?%s:%s+0x%lx", base, di.dli_sname,
                     (unsigned long)((char *)p - (char *)di.dli_saddr));
        else
            snprintf(out, outsz, "?%s+0x%lx", base, (unsigned long)((char *)p - (char *)di.dli_fbase));
    } else {
        snprintf(out, outsz, "?%p", p);
    }
}

/* ---- queries ---- */
struct res {
    void *p;
    CUresult r;
    int st;
    void *p1; /* the old cuGetProcAddress (no symbolStatus) asked the same */
    CUresult r1;
};

static unsigned long long ncalls;

static struct res ask(const char *name, unsigned long long flags, int ver)
{
    struct res x = {PFN_UNSET, -1, STATUS_UNSET, PFN_UNSET, -1};
    x.r = gpa2(name, &x.p, ver, flags, &x.st);
    x.r1 = gpa1(name, &x.p1, ver, flags);
    ncalls += 2;
    return x;
}

static int same(struct res a, struct res b)
{
    return a.p == b.p && a.r == b.r && a.st == b.st && a.p1 == b.p1 && a.r1 == b.r1;
}

static void emit(const char *name, unsigned long long flags, int ver, struct res x)
{
    char nb[2048];
    if (x.p == PFN_UNSET)
        snprintf(nb, sizeof nb, "!untouched");
    else
        name_of(x.p, nb, sizeof nb);
    char st[16];
    if (x.st == STATUS_UNSET)
        snprintf(st, sizeof st, "untouched");
    else
        snprintf(st, sizeof st, "%d", x.st);
    char nb1[2048];
    if (x.p1 == PFN_UNSET)
        snprintf(nb1, sizeof nb1, "!untouched");
    else
        name_of(x.p1, nb1, sizeof nb1);
    printf("%s\t%llu\t%d\t%s\t%d\t%s\t%d\t%s\n", name, flags, ver, nb, x.r, st, x.r1, nb1);
}

/* ---- edge cases, each in a child so that a crash is recorded, not fatal ---- */
static void edge(const char *label, const char *name, int null_pfn, int ver, unsigned long long flags,
                 int null_status, int use_v1)
{
    int fd[2];
    if (pipe(fd))
        return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm(10);
        void *p = PFN_UNSET;
        int st = STATUS_UNSET;
        CUresult r = use_v1 ? gpa1(name, null_pfn ? NULL : &p, ver, flags)
                            : gpa2(name, null_pfn ? NULL : &p, ver, flags, null_status ? NULL : &st);
        char nb[1024];
        if (p == PFN_UNSET)
            snprintf(nb, sizeof nb, "!untouched");
        else
            name_of(p, nb, sizeof nb);
        char line[1400], sb[16];
        if (st == STATUS_UNSET)
            snprintf(sb, sizeof sb, "untouched");
        else
            snprintf(sb, sizeof sb, "%d", st);
        int n = snprintf(line, sizeof line, "%d\t%s\t%s", r, sb, nb);
        if (write(fd[1], line, (size_t)n) < 0)
            _exit(2);
        _exit(0);
    }
    close(fd[1]);
    char buf[1500] = {0};
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    if (n > 0)
        printf("@edge\t%s\t%s\n", label, buf);
    else if (WIFSIGNALED(ws))
        printf("@edge\t%s\tcrash signal %d\n", label, WTERMSIG(ws));
    else
        printf("@edge\t%s\tno result, status %d\n", label, ws);
}

static void edges(const char *when)
{
    char l[128];
#define E(lbl, ...)                                                                                    \
    do {                                                                                               \
        snprintf(l, sizeof l, "%s:%s", when, lbl);                                                     \
        edge(l, __VA_ARGS__);                                                                          \
    } while (0)
    /* label, name, null_pfn, ver, flags, null_status, use_v1 */
    E("cuInit/2000/0", "cuInit", 0, 2000, 0, 0, 0);
    E("cuMemAlloc/13000/0", "cuMemAlloc", 0, 13000, 0, 0, 0);
    E("empty/0/0", "", 0, 0, 0, 0, 0);
    E("empty/13000/0", "", 0, 13000, 0, 0, 0);
    E("NULLsym/13000/0", NULL, 0, 13000, 0, 0, 0);
    E("NULLpfn/cuInit/13000/0", "cuInit", 1, 13000, 0, 0, 0);
    E("NULLpfn/unknown/13000/0", "cuNoSuchThing", 1, 13000, 0, 0, 0);
    E("NULLstatus/cuInit/13000/0", "cuInit", 0, 13000, 0, 1, 0);
    E("NULLstatus/unknown/13000/0", "cuNoSuchThing", 0, 13000, 0, 1, 0);
    E("NULLstatus/cuMemAdvise/2000/0", "cuMemAdvise", 0, 2000, 0, 1, 0);
    E("flags5/cuInit/13000", "cuInit", 0, 13000, 5, 0, 0);
    E("flags2^32/cuInit/13000", "cuInit", 0, 13000, 1ULL << 32, 0, 0);
    E("flagsAll/cuInit/13000", "cuInit", 0, 13000, ~0ULL, 0, 0);
    E("flags4/unknown/13000", "cuNoSuchThing", 0, 13000, 4, 0, 0);
    E("verHigh/unknown", "cuNoSuchThing", 0, 13001, 0, 0, 0);
    E("v1/verHigh/cuInit", "cuInit", 0, 13001, 0, 0, 1);
    E("NULLpfn/verHigh/cuInit", "cuInit", 1, 13001, 0, 0, 0);
    E("NULLpfn/flags4/cuInit", "cuInit", 1, 13000, 4, 0, 0);
    E("NULLsym/flags4", NULL, 0, 13000, 4, 0, 0);
    E("NULLsym/verHigh", NULL, 0, 13001, 0, 0, 0);
    E("flags4/cuInit/13000", "cuInit", 0, 13000, 4, 0, 0);
    E("flags4/cuMemcpyHtoD/13000", "cuMemcpyHtoD", 0, 13000, 4, 0, 0);
    E("flags8/cuInit/13000", "cuInit", 0, 13000, 8, 0, 0);
    E("flagsHigh/cuInit/13000", "cuInit", 0, 13000, 1ULL << 40, 0, 0);
    E("verNeg/cuInit/0", "cuInit", 0, -1, 0, 0, 0);
    E("verIntMax/cuInit/0", "cuInit", 0, 0x7fffffff, 0, 0, 0);
    E("verIntMax/cuCtxSynchronize/0", "cuCtxSynchronize", 0, 0x7fffffff, 0, 0, 0);
    E("v1/NULLsym/13000/0", NULL, 0, 13000, 0, 0, 1);
    E("v1/NULLpfn/cuInit/13000/0", "cuInit", 1, 13000, 0, 0, 1);
    E("v1/unknown/13000/0", "cuNoSuchThing", 0, 13000, 0, 0, 1);
    E("v1/cuMemAdvise/2000/0", "cuMemAdvise", 0, 2000, 0, 0, 1);
    E("v1/flags4/cuInit/13000", "cuInit", 0, 13000, 4, 0, 1);
    E("v1/empty/0/0", "", 0, 0, 0, 0, 1);
#undef E
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s stub-symbols.txt cudart-lookups.txt [real-nm.txt]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "probe: dlopen: %s\n", dlerror());
        return 1;
    }
    gpa2 = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    gpa1 = (gpa1_fn)dlsym(lib, "cuGetProcAddress");
    init_fn init = (init_fn)dlsym(lib, "cuInit");
    ver_fn dver = (ver_fn)dlsym(lib, "cuDriverGetVersion");
    if (!gpa2 || !gpa1 || !init || !dver) {
        fprintf(stderr, "probe: missing entry points in libcuda.so.1\n");
        return 1;
    }

    read_names(argv[1], 0);
    read_names(argv[2], 0);
    if (argc > 3)
        read_names(argv[3], 1);
    /* Names no driver knows, to record the not-found behaviour (and case/suffix sensitivity). */
    /* Declared in the toolkit's headers but exported by no Linux driver (EGL sync, Windows GL). */
    add_name("cuEventCreateFromEGLSync");
    add_name("cuWGLGetDevice");
    static const char *unknown[] = {"cuNoSuchThing", "cumemalloc", "cuMemAllo", "cuMemAlloc_v9", "cuInit_v2",
                                    "cuInit_ptsz", "cuMemcpyHtoD_ptds", "cuLaunchKernel_ptds", "cuMemAlloc_v2x"};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++)
        add_name(unknown[i]);
    qsort(names, nnames, sizeof *names, cmpstr);
    size_t w = 0;
    for (size_t i = 0; i < nnames; i++)
        if (!w || strcmp(names[w - 1], names[i]))
            names[w++] = names[i];
    nnames = w;
    build_symmap();

    Dl_info di;
    dladdr((void *)gpa2, &di);
    printf("# cuGetProcAddress_v2 of the real driver, recorded by tools/probe_procaddress.c\n");
    printf("# library: %s\n", di.dli_fname ? di.dli_fname : "?");
    time_t t = time(NULL);
    char tb[64];
    strftime(tb, sizeof tb, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    printf("# date: %s\n", tb);

    edges("preinit");
    CUresult ir = init(0);
    int dv = 0;
    CUresult vr = dver(&dv);
    printf("# cuInit(0) = %d; cuDriverGetVersion = %d (result %d)\n", ir, dv, vr);
    edges("init");

    /* Alias groups: several exported names at one address. */
    for (size_t i = 0; i + 1 < nsyms; i++)
        if (syms[i].addr == syms[i + 1].addr && (i == 0 || syms[i - 1].addr != syms[i].addr)) {
            char nb[2048];
            name_of(syms[i].addr, nb, sizeof nb);
            printf("# alias\t%s\n", nb);
        }

    printf("# %zu names probed, flags 0..3, cudaVersion over the whole int range: every %d in [-%d, %d], powers of\n"
           "# two beyond; each change bisected to the exact first version\n", nnames, STEP, VMAX, VMAX);
    printf("# columns: name flags min_version result_symbol cuda_result query_status v1_cuda_result v1_result_symbol\n");
    printf("# (v1_*: the old cuGetProcAddress without symbolStatus, asked the same)\n");
    printf("# result_symbol: exported name(s) at the returned pointer, comma-separated when aliased; '-' = NULL;\n");
    printf("#   '?lib:sym+0xoff' = not an exported entry point (dladdr's nearest symbol)\n");
    printf("# a row holds from min_version up to the next row's min_version (same name and flags)\n");

    double t0 = now();
    static int pts[200];
    int npts = 0;
    pts[npts++] = INT_MIN;
    for (int k = 30; k >= 15; k--)
        pts[npts++] = -(1 << k);
    int dense_lo = npts;
    pts[npts++] = -VMAX; /* dense range: every STEP from here */
    int dense_hi = npts;
    pts[npts++] = VMAX;
    for (int k = 15; k <= 30; k++)
        pts[npts++] = 1 << k;
    pts[npts++] = INT_MAX;
    (void)dense_hi;
    for (size_t i = 0; i < nnames; i++) {
        for (unsigned long long fl = 0; fl <= 3; fl++) {
            const char *nm = names[i];
            struct res prev = ask(nm, fl, INT_MIN);
            emit(nm, fl, INT_MIN, prev);
            long lastv = INT_MIN;
            for (int k = 1; k < npts; k++) {
                long a = lastv, b = pts[k];
                /* visit a..b: dense walk inside [-VMAX, VMAX], else one jump */
                long stepv = (k > dense_lo && b <= VMAX) ? STEP : b - a;
                for (long v = a + stepv; v <= b; v += stepv) {
                    struct res cur = ask(nm, fl, (int)v);
                    if (same(cur, prev))
                        continue;
                    /* bisect (v - stepv, v] for the first version with a new answer (one change assumed) */
                    long lo = v - stepv + 1, hi = v;
                    struct res at = cur;
                    while (lo < hi) {
                        long mid = lo + (hi - lo) / 2;
                        struct res y = ask(nm, fl, (int)mid);
                        if (same(y, prev))
                            lo = mid + 1;
                        else {
                            hi = mid;
                            at = y;
                        }
                    }
                    emit(nm, fl, (int)lo, at);
                    if (!same(at, cur)) {
                        printf("# several changes inside (%ld, %ld]\n", v - stepv, v);
                        emit(nm, fl, (int)v, cur);
                    }
                    prev = cur;
                }
                lastv = b;
            }
        }
        fflush(stdout);
        if (now() - t0 > 200) { /* stay inside the run's limit: keep what was recorded */
            printf("# INCOMPLETE: stopped after %zu of %zu names\n", i + 1, nnames);
            break;
        }
        if (i == 9)
            fprintf(stderr, "probe: first 10 names in %.2f s (%llu calls)\n", now() - t0, ncalls);
    }
    printf("# %llu calls in %.2f s\n", ncalls, now() - t0);
    fprintf(stderr, "probe: %zu names, %llu calls in %.2f s\n", nnames, ncalls, now() - t0);
    fflush(stdout);
    return 0;
}
