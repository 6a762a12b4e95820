/* The driver's compile cache (export table da9151d33ae6cc41a5c04f26d533e328, COMPILE_CACHE here). NVIDIA
 * libraries that compile code at run time (cuDNN's fused kernels: NVVM IR to PTX, then PTX to a cubin)
 * ask it for the output of a compilation done before and store what they compile; the real driver keeps
 * the entries in its ComputeCache. Without the table they compile again at every start: a PyTorch
 * ResNet-50 training made 122 such compilations, 35 s more to its first step than natively.
 *
 * cumux keeps its own entries on disk, per user: one file per key holding the whole key (kind, options,
 * target, input) and the output. A lookup compares the whole key, so a name collision is a miss, never a
 * wrong cubin. No GPU and no server are involved: this is the program's own cache. docs/export-tables.md
 * gives the slots as the driver's use of them showed them; docs/compatibility.md the settings
 * (CUDA_CACHE_DISABLE, CUDA_CACHE_MAXSIZE, CUMUX_CACHE_PATH). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "shim/compile_cache.h"
#include "shim/shim.h"

#define KEY_MAGIC 0x434d584bu      /* a live key */
#define ENTRY_MAGIC "cumuxcc1"      /* an entry file's first 8 bytes */
#define CC_MAX_BYTES ((size_t)1 << 30) /* larger inputs or outputs are not cached */
#define MAX_TEXT 65536              /* options and target strings */

struct cc_key {
    uint32_t magic;
    int32_t kind;
    char *options, *target;
    void *input;
    size_t input_len;
    uint64_t hash;
};

/* The file header; the options, target, input and output follow, in that order. */
struct entry_header {
    char magic[8];
    int32_t kind;
    uint32_t options_len, target_len, pad;
    uint64_t input_len, output_len;
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static bool env_true(const char *name)
{
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

/* The cache's directory, created (0700) when missing; false when caching is off or the directory is
 * not safe: another user able to write it could put code into this program's kernels. */
static bool cache_dir(char *out, size_t cap)
{
    if (env_true("CUDA_CACHE_DISABLE"))
        return false;
    const char *e;
    int n;
    if ((e = getenv("CUMUX_CACHE_PATH")) && *e)
        n = snprintf(out, cap, "%s", e);
    else if ((e = getenv("CUDA_CACHE_PATH")) && *e)
        n = snprintf(out, cap, "%s/cumux", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e)
        n = snprintf(out, cap, "%s/cumux/compile", e);
    else if ((e = getenv("HOME")) && *e)
        n = snprintf(out, cap, "%s/.cache/cumux/compile", e);
    else
        return false;
    if (n <= 0 || (size_t)n >= cap)
        return false;
    /* mkdir -p, each new level private. */
    for (char *p = out + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(out, 0700) < 0 && errno != EEXIST) {
            *p = '/';
            return false;
        }
        *p = '/';
    }
    if (mkdir(out, 0700) < 0 && errno != EEXIST)
        return false;
    struct stat st;
    if (lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            cumux_logf("compile cache %s is not a directory of this user's that only it can write: not used", out);
        return false;
    }
    return true;
}

static bool entry_path(const struct cc_key *k, char *out, size_t cap)
{
    char dir[4096];
    if (!cache_dir(dir, sizeof dir))
        return false;
    int n = snprintf(out, cap, "%s/%016llx", dir, (unsigned long long)k->hash);
    return n > 0 && (size_t)n < cap;
}

static bool read_all(int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, (char *)p + done, n - done);
        if (r <= 0)
            return false;
        done += (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0)
            return false;
        done += (size_t)w;
    }
    return true;
}

/* Whether the next n bytes of fd equal p (read in pieces: inputs run to megabytes). */
static bool same_bytes(int fd, const void *p, size_t n)
{
    char buf[16384];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        if (!read_all(fd, buf, k) || memcmp(buf, (const char *)p + done, k) != 0)
            return false;
        done += k;
    }
    return true;
}

static struct cc_key *key_of(void *p)
{
    struct cc_key *k = p;
    return k && k->magic == KEY_MAGIC ? k : NULL;
}

static char *dup_text(const char *s)
{
    if (!s)
        return strdup("");
    size_t n = strnlen(s, MAX_TEXT + 1);
    return n > MAX_TEXT ? NULL : strndup(s, n);
}

/* [1] (key **out, int kind, const void *input, size_t input_len, const char *options, const char *target):
 * kind 2 was NVVM IR to PTX, kind 1 PTX to a cubin for the target "HOST64". */
static CUresult cc_key_create(void **out, int kind, const void *input, size_t input_len, const char *options,
                              const char *target)
{
    if (!out || (!input && input_len) || input_len > CC_MAX_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    struct cc_key *k = calloc(1, sizeof *k);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    k->kind = kind;
    k->options = dup_text(options);
    k->target = dup_text(target);
    k->input = malloc(input_len ? input_len : 1);
    if (!k->options || !k->target || !k->input) {
        free(k->options), free(k->target), free(k->input), free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (input_len)
        memcpy(k->input, input, input_len);
    k->input_len = input_len;
    /* The driver answering may differ from one run to the next (its version is in the options of kind 1
     * only): it is part of the name, with everything else. */
    uint64_t h = 0xcbf29ce484222325ull;
    int version = 0;
    cuDriverGetVersion(&version);
    h = fnv1a(h, &version, sizeof version);
    h = fnv1a(h, &k->kind, sizeof k->kind);
    h = fnv1a(h, k->options, strlen(k->options) + 1);
    h = fnv1a(h, k->target, strlen(k->target) + 1);
    k->hash = fnv1a(h, k->input, input_len);
    k->magic = KEY_MAGIC;
    *out = k;
    return CUDA_SUCCESS;
}

/* [2] (key *): the key goes. */
static CUresult cc_key_destroy(void *p)
{
    struct cc_key *k = key_of(p);
    if (!k)
        return CUDA_ERROR_INVALID_VALUE;
    k->magic = 0;
    free(k->options), free(k->target), free(k->input), free(k);
    return CUDA_SUCCESS;
}

/* [3] (key *, int 0, void **output, uint32_t *output_len): a malloc'ed copy of the stored output, freed
 * with [6]; CUDA_ERROR_NOT_FOUND when there is none. */
static CUresult cc_lookup(void *p, int flags, void **output, uint32_t *output_len)
{
    struct cc_key *k = key_of(p);
    if (!k || !output || !output_len)
        return CUDA_ERROR_INVALID_VALUE;
    char path[4200];
    if (flags != 0) { /* never seen: named once, and a miss (the caller compiles) */
        cumux_unsupported("export table COMPILE_CACHE slot 3 with flags");
        return CUDA_ERROR_NOT_FOUND;
    }
    if (!entry_path(k, path, sizeof path))
        return CUDA_ERROR_NOT_FOUND;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return CUDA_ERROR_NOT_FOUND;
    struct entry_header h;
    struct stat st;
    void *data = NULL;
    size_t ol = strlen(k->options), tl = strlen(k->target);
    bool ok = fstat(fd, &st) == 0 && read_all(fd, &h, sizeof h) && !memcmp(h.magic, ENTRY_MAGIC, 8) &&
              h.kind == k->kind && h.options_len == ol && h.target_len == tl && h.input_len == k->input_len &&
              h.output_len > 0 && h.output_len <= CC_MAX_BYTES &&
              (uint64_t)st.st_size == sizeof h + ol + tl + h.input_len + h.output_len &&
              same_bytes(fd, k->options, ol) && same_bytes(fd, k->target, tl) &&
              same_bytes(fd, k->input, k->input_len);
    if (ok && (data = malloc(h.output_len)) != NULL && read_all(fd, data, h.output_len)) {
        close(fd);
        utimensat(AT_FDCWD, path, NULL, 0); /* recently used: kept longest when the cache is trimmed */
        *output = data;
        *output_len = (uint32_t)h.output_len;
        return CUDA_SUCCESS;
    }
    free(data);
    close(fd);
    return CUDA_ERROR_NOT_FOUND;
}

struct aged {
    char name[32];
    struct timespec used;
    off_t size;
};

static int older_first(const void *a, const void *b)
{
    const struct aged *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return (x->used.tv_nsec > y->used.tv_nsec) - (x->used.tv_nsec < y->used.tv_nsec);
}

/* Least recently used entries go until the cache holds at most three quarters of CUDA_CACHE_MAXSIZE
 * (default 1 GiB, as the driver's). */
static void trim(const char *dir)
{
    uint64_t cap = (uint64_t)1 << 30;
    const char *e = getenv("CUDA_CACHE_MAXSIZE");
    if (e && *e)
        cap = strtoull(e, NULL, 10);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct aged *v = NULL;
    size_t n = 0, capn = 0;
    uint64_t total = 0;
    struct dirent *de;
    time_t now = time(NULL);
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        size_t len = strlen(de->d_name);
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        /* A store that never finished (its process died) is gone after an hour. */
        if (len > 4 && !strcmp(de->d_name + len - 4, ".tmp") && now - st.st_mtim.tv_sec > 3600) {
            unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (len != 16)
            continue;
        if (n == capn) {
            struct aged *nv = realloc(v, (capn = capn ? 2 * capn : 64) * sizeof *v);
            if (!nv)
                break;
            v = nv;
        }
        memcpy(v[n].name, de->d_name, len + 1); /* 16 characters and the end: the name's room holds them */
        v[n].used = st.st_mtim;
        v[n].size = st.st_size;
        total += (uint64_t)st.st_size;
        n++;
    }
    if (total > cap) {
        qsort(v, n, sizeof *v, older_first);
        for (size_t i = 0; i < n && total > cap / 4 * 3; i++)
            if (unlinkat(dirfd(d), v[i].name, 0) == 0)
                total -= (uint64_t)v[i].size;
    }
    closedir(d);
    free(v);
}

/* [4] (key *, int 0, const void *output, size_t output_len): the output is kept for the key. Best effort,
 * as a cache is: a disk that refuses changes nothing for the program. */
static CUresult cc_store(void *p, int flags, const void *output, size_t output_len)
{
    struct cc_key *k = key_of(p);
    if (!k || !output || output_len == 0)
        return CUDA_ERROR_INVALID_VALUE;
    char path[4200], tmp[4300];
    if (flags != 0)
        return cumux_unsupported("export table COMPILE_CACHE slot 4 with flags");
    if (output_len > CC_MAX_BYTES || !entry_path(k, path, sizeof path))
        return CUDA_SUCCESS; /* not kept (too large, or caching off): a cache may always forget */
    static _Atomic unsigned stores; /* a name of its own per store: threads may store the same key at once */
    snprintf(tmp, sizeof tmp, "%s.%d.%u.tmp", path, (int)getpid(), atomic_fetch_add(&stores, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return CUDA_SUCCESS;
    struct entry_header h = {.kind = k->kind,
                             .options_len = (uint32_t)strlen(k->options),
                             .target_len = (uint32_t)strlen(k->target),
                             .input_len = k->input_len,
                             .output_len = output_len};
    memcpy(h.magic, ENTRY_MAGIC, 8);
    bool ok = write_all(fd, &h, sizeof h) && write_all(fd, k->options, h.options_len) &&
              write_all(fd, k->target, h.target_len) && write_all(fd, k->input, k->input_len) &&
              write_all(fd, output, output_len);
    ok = close(fd) == 0 && ok;
    /* Readers see the old entry or the whole new one, never a part. */
    if (!ok || rename(tmp, path) < 0) {
        unlink(tmp);
        return CUDA_SUCCESS;
    }
    char *slash = strrchr(path, '/');
    *slash = 0;
    trim(path);
    return CUDA_SUCCESS;
}

/* [5]: never seen called. */
static CUresult cc_unknown_5(void)
{
    return cumux_unsupported("export table COMPILE_CACHE slot 5");
}

/* [6] (void *output): frees what [3] gave. */
static CUresult cc_free_output(void *output)
{
    free(output);
    return CUDA_SUCCESS;
}

#define FN(f) ((const void *)(uintptr_t)(f))
const void *const cumux_compile_cache_table[7] = {
    (const void *)(uintptr_t)(7 * sizeof(void *)),
    FN(cc_key_create),
    FN(cc_key_destroy),
    FN(cc_lookup),
    FN(cc_store),
    FN(cc_unknown_5),
    FN(cc_free_output),
};
