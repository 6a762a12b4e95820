/* Checks the shim's cuGetProcAddress_v2 and cuGetProcAddress against every answer the real driver gave
 * (data/procaddress.tsv), at the edges and inside of each version range, plus the argument checks.
 * usage: test_procaddress SHIM_LIB PROCADDRESS_TSV */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);

#define PFN_UNSET ((void *)0x5a5a5a5aUL)
#define STATUS_UNSET ((CUdriverProcAddressQueryResult)77)

struct row {
    char *name;
    int flags;
    long min_version;
    char *sym, *sym1; /* expected pointer: exported name, "-" = NULL, "!untouched" */
    int r, r1;
    int st; /* -1: untouched */
};

static void *shim;
static gpa2_fn gpa2;
static gpa1_fn gpa1;
#include "check.h"

/* Names the shim does not export (interop entry points) resolve to internal stubs: one pointer per name. */
static struct {
    char name[128];
    void *p;
} hidden[64];
static int nhidden;

static int expected_ptr(const char *sym, void *got, void **want)
{
    if (!strcmp(sym, "-")) {
        *want = NULL;
        return 1;
    }
    if (!strcmp(sym, "!untouched")) {
        *want = PFN_UNSET;
        return 1;
    }
    void *p = dlsym(shim, sym);
    if (p) {
        *want = p;
        return 1;
    }
    for (int i = 0; i < nhidden; i++)
        if (!strcmp(hidden[i].name, sym)) {
            *want = hidden[i].p;
            return 1;
        }
    /* First sight of a hidden name: any non-NULL pointer that no other name has. */
    if (!got || got == PFN_UNSET || nhidden == (int)(sizeof hidden / sizeof *hidden))
        return 0;
    for (int i = 0; i < nhidden; i++)
        if (hidden[i].p == got)
            return 0;
    Dl_info di;
    if (dladdr(got, &di) && di.dli_sname && di.dli_saddr == got && dlsym(shim, di.dli_sname) == got)
        return 0; /* an exported entry point stands for an unexported one */
    snprintf(hidden[nhidden].name, sizeof hidden[nhidden].name, "%s", sym);
    hidden[nhidden].p = got;
    nhidden++;
    *want = got;
    return 1;
}

static void check_at(const struct row *w, int ver)
{
    void *p = PFN_UNSET, *want;
    CUdriverProcAddressQueryResult st = STATUS_UNSET;
    CUresult r = gpa2(w->name, &p, ver, (cuuint64_t)w->flags, &st);
    CHECK(r == (CUresult)w->r, "v2 %s flags %d ver %d: result %d, want %d", w->name, w->flags, ver, r, w->r);
    int want_st = w->st < 0 ? (int)STATUS_UNSET : w->st;
    CHECK((int)st == want_st, "v2 %s flags %d ver %d: status %d, want %d", w->name, w->flags, ver, (int)st,
          want_st);
    CHECK(expected_ptr(w->sym, p, &want) && p == want, "v2 %s flags %d ver %d: pointer %p, want %s", w->name,
          w->flags, ver, p, w->sym);

    p = PFN_UNSET;
    r = gpa1(w->name, &p, ver, (cuuint64_t)w->flags);
    CHECK(r == (CUresult)w->r1, "v1 %s flags %d ver %d: result %d, want %d", w->name, w->flags, ver, r, w->r1);
    CHECK(expected_ptr(w->sym1, p, &want) && p == want, "v1 %s flags %d ver %d: pointer %p, want %s", w->name,
          w->flags, ver, p, w->sym1);
}

static struct row *read_rows(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 16384, k = 0;
    struct row *rows = malloc(cap * sizeof *rows);
    char line[4096];
    while (rows && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '@' || line[0] == '\n')
            continue;
        char name[256], sym[1024], st[32], sym1[1024];
        struct row w;
        if (sscanf(line, "%255s %d %ld %1023s %d %31s %d %1023s", name, &w.flags, &w.min_version, sym, &w.r, st,
                   &w.r1, sym1) != 8) {
            fprintf(stderr, "%s: bad row: %s", path, line);
            exit(2);
        }
        w.st = strcmp(st, "untouched") ? atoi(st) : -1;
        w.name = strdup(name);
        w.sym = strdup(sym);
        w.sym1 = strdup(sym1);
        if (k == cap)
            rows = realloc(rows, (cap *= 2) * sizeof *rows);
        if (rows)
            rows[k++] = w;
    }
    fclose(f);
    if (!rows)
        exit(2);
    *n = k;
    return rows;
}

static void edge_cases(void)
{
    void *p;
    CUdriverProcAddressQueryResult st;
    CUresult r;
    static const cuuint64_t bad_flags[] = {4, 5, 8, 1ULL << 32, ~0ULL};
    for (size_t i = 0; i < sizeof bad_flags / sizeof *bad_flags; i++) {
        p = PFN_UNSET;
        st = STATUS_UNSET;
        r = gpa2("cuInit", &p, 13000, bad_flags[i], &st);
        CHECK(r == CUDA_ERROR_INVALID_VALUE && p == PFN_UNSET && st == STATUS_UNSET, "flags %llx: %d",
              (unsigned long long)bad_flags[i], r);
        r = gpa1("cuInit", &p, 13000, bad_flags[i]);
        CHECK(r == CUDA_ERROR_INVALID_VALUE && p == PFN_UNSET, "v1 flags %llx: %d",
              (unsigned long long)bad_flags[i], r);
    }
    /* A NULL symbolStatus is allowed. */
    p = PFN_UNSET;
    r = gpa2("cuInit", &p, 13000, 0, NULL);
    CHECK(r == CUDA_SUCCESS && p == dlsym(shim, "cuInit"), "NULL symbolStatus, known: %d %p", r, p);
    p = PFN_UNSET;
    r = gpa2("cuNoSuchThing", &p, 13000, 0, NULL);
    CHECK(r == CUDA_SUCCESS && p == NULL, "NULL symbolStatus, unknown: %d %p", r, p);
    p = PFN_UNSET;
    r = gpa2("cuMemAdvise", &p, 2000, 0, NULL);
    CHECK(r == CUDA_SUCCESS && p == NULL, "NULL symbolStatus, version too low: %d %p", r, p);
    /* The empty name is unknown. */
    p = PFN_UNSET;
    st = STATUS_UNSET;
    r = gpa2("", &p, 0, 0, &st);
    CHECK(r == CUDA_SUCCESS && p == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "empty name: %d", r);
    p = PFN_UNSET;
    r = gpa1("", &p, 0, 0);
    CHECK(r == CUDA_ERROR_NOT_FOUND && p == PFN_UNSET, "v1 empty name: %d", r);
    /* NULL symbol or pfn: the real driver crashes; the shim refuses. Argument checks come first. */
    st = STATUS_UNSET;
    r = gpa2(NULL, &p, 13000, 0, &st);
    CHECK(r == CUDA_ERROR_INVALID_VALUE && st == STATUS_UNSET, "NULL symbol: %d", r);
    r = gpa2("cuInit", NULL, 13000, 0, &st);
    CHECK(r == CUDA_ERROR_INVALID_VALUE && st == STATUS_UNSET, "NULL pfn: %d", r);
    r = gpa1(NULL, &p, 13000, 0);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "v1 NULL symbol: %d", r);
    r = gpa1("cuInit", NULL, 13000, 0);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "v1 NULL pfn: %d", r);
    r = gpa2(NULL, NULL, 13001, 0, NULL);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "NULL everything: %d", r);
    /* cuGetProcAddress resolves to the shim's own functions. */
    p = NULL;
    r = gpa2("cuGetProcAddress", &p, 13000, 0, NULL);
    CHECK(r == CUDA_SUCCESS && p == (void *)gpa2, "cuGetProcAddress -> own _v2");
    r = gpa2("cuGetProcAddress", &p, 11030, 0, NULL);
    CHECK(r == CUDA_SUCCESS && p == (void *)gpa1, "cuGetProcAddress 11030 -> own v1");
    /* Internal stubs answer like any unimplemented entry point. */
    for (int i = 0; i < nhidden; i++) {
        CUresult (*fn)(void) = (CUresult (*)(void))hidden[i].p;
        r = fn();
        CHECK(r == CUDA_ERROR_NOT_SUPPORTED, "internal stub for %s returned %d", hidden[i].name, r);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHIM_LIB PROCADDRESS_TSV\n", argv[0]);
        return 2;
    }
    shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!shim) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    gpa2 = (gpa2_fn)dlsym(shim, "cuGetProcAddress_v2");
    gpa1 = (gpa1_fn)dlsym(shim, "cuGetProcAddress");
    if (!gpa2 || !gpa1) {
        fprintf(stderr, "shim lacks cuGetProcAddress/_v2\n");
        return 1;
    }
    size_t n;
    struct row *rows = read_rows(argv[2], &n);
    if (n < 1000) {
        fprintf(stderr, "%s: only %zu rows\n", argv[2], n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct row *w = &rows[i];
        long lo = w->min_version, hi = (long)INT_MAX + 1;
        if (i + 1 < n && !strcmp(rows[i + 1].name, w->name) && rows[i + 1].flags == w->flags) {
            hi = rows[i + 1].min_version;
            if (hi <= lo) {
                fprintf(stderr, "%s: rows out of order at %s %d %ld\n", argv[2], w->name, w->flags, lo);
                return 1;
            }
        }
        /* Both ends of the range, just inside them, a typical minor version and the middle. */
        long vs[] = {lo, lo + 1, lo + 5, lo + 10, lo + (hi - lo) / 2, hi - 10, hi - 1};
        for (size_t k = 0; k < sizeof vs / sizeof *vs; k++) {
            int dup = 0;
            for (size_t j = 0; j < k; j++)
                dup |= vs[j] == vs[k];
            if (!dup && vs[k] >= lo && vs[k] < hi)
                check_at(w, (int)vs[k]);
        }
    }
    edge_cases();
    for (size_t i = 0; i < n; i++) {
        free(rows[i].name);
        free(rows[i].sym);
        free(rows[i].sym1);
    }
    free(rows);
    printf("test_procaddress: %zu rows, %lu checks, %lu failures, %d internal stubs\n", n, checks, failures, nhidden);
    return failures ? 1 : 0;
}
