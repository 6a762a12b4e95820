/* The compile cache table (export table da9151d3..., shim/compile_cache.c), as cuDNN uses it, without a GPU:
 * a miss, a store, a hit with the same bytes; keys that differ in any part miss; an entry whose file name is
 * right but whose key is not (a name collision), a truncated entry and a foreign file all miss; the
 * settings (CUDA_CACHE_DISABLE, a directory others may write, CUDA_CACHE_MAXSIZE) are honoured.
 * usage: test_compile_cache SHIM_PATH */
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

typedef CUresult (*key_create_fn)(void **, int, const void *, size_t, const char *, const char *);
typedef CUresult (*key_destroy_fn)(void *);
typedef CUresult (*lookup_fn)(void *, int, void **, uint32_t *);
typedef CUresult (*store_fn)(void *, int, const void *, size_t);
typedef CUresult (*free_fn)(void *);

static key_create_fn key_create;
static key_destroy_fn key_destroy;
static lookup_fn lookup;
static store_fn store;
static free_fn free_output;
static char dir[256];

static void *key(int kind, const char *input, const char *options)
{
    void *k = NULL;
    CUresult r = key_create(&k, kind, input, strlen(input), options, "HOST64");
    CHECK(r == CUDA_SUCCESS && k, "key_create: %d", r);
    return k;
}

/* Looks k up: 1 when found with exactly `want`, 0 when not found; a failure when anything else. */
static int found(void *k, const char *want)
{
    void *out = NULL;
    uint32_t len = 0;
    CUresult r = lookup(k, 0, &out, &len);
    if (r == CUDA_ERROR_NOT_FOUND)
        return 0;
    CHECK(r == CUDA_SUCCESS, "lookup: %d", r);
    if (r != CUDA_SUCCESS)
        return -1;
    int same = want && len == strlen(want) && !memcmp(out, want, len);
    CHECK(same, "lookup gave %u bytes that are not the %zu stored", len, want ? strlen(want) : 0);
    CHECK(free_output(out) == CUDA_SUCCESS, "free_output");
    return same ? 1 : -1;
}

/* The names of the entries in the cache directory: how many, and the first. */
static int entries(char first[256])
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n++ == 0 && first)
            snprintf(first, 256, "%s", de->d_name);
    }
    closedir(d);
    return n;
}

static void clear_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0)
        fwrite(buf, 1, n, b);
    if (a)
        fclose(a);
    if (b)
        fclose(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_compile_cache SHIM_PATH\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "/tmp/cumux-cc-test.%d", (int)getpid());
    setenv("CUMUX_CACHE_PATH", dir, 1);
    unsetenv("CUDA_CACHE_DISABLE");
    unsetenv("CUDA_CACHE_MAXSIZE");
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAIL: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    CUresult (*get_table)(const void **, const CUuuid *) =
        (CUresult(*)(const void **, const CUuuid *))dlsym(lib, "cuGetExportTable");
    static const CUuuid id = {{(char)0xda, (char)0x91, 0x51, (char)0xd3, 0x3a, (char)0xe6, (char)0xcc, 0x41,
                               (char)0xa5, (char)0xc0, 0x4f, 0x26, (char)0xd5, 0x33, (char)0xe3, 0x28}};
    const void *const *t = NULL;
    CHECK(get_table && get_table((const void **)&t, &id) == CUDA_SUCCESS && t, "the table is found");
    if (!t)
        return 1;
    CHECK((uintptr_t)t[0] == 7 * sizeof(void *), "size word %zu", (size_t)(uintptr_t)t[0]);
    key_create = (key_create_fn)(uintptr_t)t[1];
    key_destroy = (key_destroy_fn)(uintptr_t)t[2];
    lookup = (lookup_fn)(uintptr_t)t[3];
    store = (store_fn)(uintptr_t)t[4];
    free_output = (free_fn)(uintptr_t)t[6];

    /* Miss, store, hit; the directory is made private. */
    void *a = key(2, "define void @k() { ret void }", "-Xopt -O3");
    CHECK(found(a, NULL) == 0, "an empty cache misses");
    CHECK(store(a, 0, "PTX-A", 5) == CUDA_SUCCESS, "store");
    CHECK(found(a, "PTX-A") == 1, "the stored output is found");
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 077) == 0, "the cache directory is private (mode %o)",
           (unsigned)st.st_mode & 0777);
    char a_name[256] = "", a_path[512];
    CHECK(entries(a_name) == 1, "one entry after one store");
    snprintf(a_path, sizeof a_path, "%s/%s", dir, a_name);
    CHECK(store(a, 0, "PTX-A2", 6) == CUDA_SUCCESS && found(a, "PTX-A2") == 1, "a second store replaces");

    /* Keys that differ in kind, options, input (same length) or target miss. */
    void *b = key(1, "define void @k() { ret void }", "-Xopt -O3");
    void *c = key(2, "define void @k() { ret void }", "-Xopt -O2");
    void *d = key(2, "define void @j() { ret void }", "-Xopt -O3");
    void *e = NULL;
    CHECK(key_create(&e, 2, "define void @k() { ret void }", 29, "-Xopt -O3", "HOST32") == CUDA_SUCCESS,
           "key_create");
    CHECK(found(b, NULL) == 0 && found(c, NULL) == 0 && found(d, NULL) == 0 && found(e, NULL) == 0,
           "keys that differ in one part miss");

    /* A name collision: d's entry under a's name is not a's. */
    CHECK(store(d, 0, "PTX-D", 5) == CUDA_SUCCESS && found(d, "PTX-D") == 1, "store d");
    char d_name[256] = "", d_path[512];
    DIR *dd = opendir(dir);
    struct dirent *de;
    while (dd && (de = readdir(dd)) != NULL)
        if (de->d_name[0] != '.' && strcmp(de->d_name, a_name) != 0)
            snprintf(d_name, sizeof d_name, "%s", de->d_name);
    if (dd)
        closedir(dd);
    snprintf(d_path, sizeof d_path, "%s/%s", dir, d_name);
    copy_file(d_path, a_path);
    CHECK(found(a, NULL) == 0, "another key's entry under this key's name misses");

    /* A truncated entry and a file that is no entry miss. */
    CHECK(store(a, 0, "PTX-A3", 6) == CUDA_SUCCESS && found(a, "PTX-A3") == 1, "store again");
    CHECK(truncate(a_path, 40) == 0 && found(a, NULL) == 0, "a truncated entry misses");
    FILE *f = fopen(a_path, "wb");
    if (f) {
        fputs("not an entry at all, but long enough to hold a header and more of it", f);
        fclose(f);
    }
    CHECK(found(a, NULL) == 0, "a foreign file misses");

    /* CUDA_CACHE_DISABLE: nothing is found, nothing is written. */
    CHECK(store(a, 0, "PTX-A4", 6) == CUDA_SUCCESS && found(a, "PTX-A4") == 1, "store again");
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    CHECK(found(a, NULL) == 0, "CUDA_CACHE_DISABLE=1: a stored entry is not used");
    clear_dir();
    CHECK(store(a, 0, "PTX-A5", 6) == CUDA_SUCCESS && entries(NULL) == 0, "CUDA_CACHE_DISABLE=1: nothing stored");
    unsetenv("CUDA_CACHE_DISABLE");

    /* A directory that others may write is not used. */
    CHECK(store(a, 0, "PTX-A6", 6) == CUDA_SUCCESS && found(a, "PTX-A6") == 1, "store again");
    chmod(dir, 0777);
    CHECK(found(a, NULL) == 0, "a directory others may write is not used");
    chmod(dir, 0700);
    CHECK(found(a, "PTX-A6") == 1, "private again: used again");

    /* CUDA_CACHE_MAXSIZE: the least recently used entries go first. */
    clear_dir();
    static char big[3000];
    memset(big, 'x', sizeof big - 1);
    CHECK(store(a, 0, big, sizeof big - 1) == CUDA_SUCCESS, "store big");
    sleep(1); /* modification times one second apart at least, whatever the file system keeps */
    CHECK(store(b, 0, big, sizeof big - 1) == CUDA_SUCCESS, "store big");
    sleep(1);
    CHECK(found(a, big) == 1, "a is used, so b is now the least recently used");
    setenv("CUDA_CACHE_MAXSIZE", "9000", 1); /* two entries fit in three quarters of it, three do not fit */
    CHECK(store(c, 0, big, sizeof big - 1) == CUDA_SUCCESS, "store big");
    CHECK(found(b, NULL) == 0 && found(a, big) == 1 && found(c, big) == 1,
           "over CUDA_CACHE_MAXSIZE, the least recently used entry went");
    unsetenv("CUDA_CACHE_MAXSIZE");

    /* Handles that are not keys; arguments that are missing. */
    int junk = 7;
    void *out;
    uint32_t len;
    CHECK(lookup(&junk, 0, &out, &len) == CUDA_ERROR_INVALID_VALUE, "a lookup with something that is no key");
    CHECK(key_destroy(&junk) == CUDA_ERROR_INVALID_VALUE, "destroying something that is no key");
    CHECK(key_create(NULL, 1, "x", 1, "", "") == CUDA_ERROR_INVALID_VALUE, "key_create without an output");
    CHECK(store(a, 0, NULL, 4) == CUDA_ERROR_INVALID_VALUE, "store of nothing");
    CHECK(store(a, 1, "x", 1) == CUDA_ERROR_NOT_SUPPORTED, "a store with flags cumux does not know");
    CHECK(lookup(a, 1, &out, &len) == CUDA_ERROR_NOT_FOUND, "a lookup with flags cumux does not know: a miss");

    void *keys[] = {a, b, c, d, e};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(key_destroy(keys[i]) == CUDA_SUCCESS, "key_destroy");
    clear_dir();
    rmdir(dir);
    printf("%s: %lu checks, %lu failed\n", test_failures ? "FAIL" : "PASS", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
