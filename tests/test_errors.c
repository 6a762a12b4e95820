/* Checks the shim's cuGetErrorName and cuGetErrorString: every CUresult enumerator of cuda.h (read from
 * the header here, independently of the generator) is named by its identifier and has a description;
 * nothing else is known; unknown codes and NULL pointers give CUDA_ERROR_INVALID_VALUE; a few
 * descriptions are the real driver's (580.159.04) recorded texts.
 * usage: test_errors SHIM_LIB CUDA_H */
#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

typedef CUresult (*err_fn)(CUresult, const char **);

#define UNSET ((const char *)"unset")

#include "check.h"

struct enumerator {
    char name[96];
    long value;
};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, len = 0, n;
    char *buf = malloc(cap + 1);
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* The enumerators of `typedef enum cudaError_enum { ... } CUresult;`, comments skipped. */
static int parse_enum(const char *text, struct enumerator *out, int max)
{
    const char *p = strstr(text, "typedef enum cudaError_enum");
    const char *end = p ? strstr(p, "} CUresult;") : NULL;
    if (!p || !end || !(p = strchr(p, '{')) || p > end)
        return -1;
    int n = 0;
    for (p++; p < end;) {
        if (p[0] == '/' && p[1] == '*') {
            const char *q = strstr(p + 2, "*/");
            if (!q)
                return -1;
            p = q + 2;
        } else if (p[0] == '/' && p[1] == '/') {
            p = strchr(p, '\n');
            if (!p)
                return -1;
        } else if (isalpha((unsigned char)*p) || *p == '_') {
            const char *s = p;
            while (isalnum((unsigned char)*p) || *p == '_')
                p++;
            if (n == max || (size_t)(p - s) >= sizeof out[n].name)
                return -1;
            memcpy(out[n].name, s, (size_t)(p - s));
            out[n].name[p - s] = '\0';
            while (isspace((unsigned char)*p))
                p++;
            if (*p++ != '=')
                return -1;
            char *e;
            out[n].value = strtol(p, &e, 0);
            if (e == p)
                return -1;
            p = e;
            n++;
        } else {
            p++;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHIM_LIB CUDA_H\n", argv[0]);
        return 2;
    }
    void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!shim) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 2;
    }
    err_fn get_name = (err_fn)dlsym(shim, "cuGetErrorName");
    err_fn get_string = (err_fn)dlsym(shim, "cuGetErrorString");
    if (!get_name || !get_string) {
        fprintf(stderr, "cuGetErrorName/cuGetErrorString not exported by %s\n", argv[1]);
        return 2;
    }
    char *header = read_file(argv[2]);
    static struct enumerator en[1024];
    int n = header ? parse_enum(header, en, 1024) : -1;
    free(header);
    if (n < 50) {
        fprintf(stderr, "cannot read the cudaError_enum enumerators from %s (%d)\n", argv[2], n);
        return 2;
    }

    /* Every enumerator: its own identifier, and a description. */
    for (int i = 0; i < n; i++) {
        const char *s = UNSET;
        CUresult r = get_name((CUresult)en[i].value, &s);
        CHECK(r == CUDA_SUCCESS && s && s != UNSET && !strcmp(s, en[i].name), "cuGetErrorName(%ld) = %d %s, want %s",
              en[i].value, r, s && s != UNSET ? s : "(null/unset)", en[i].name);
        s = UNSET;
        r = get_string((CUresult)en[i].value, &s);
        CHECK(r == CUDA_SUCCESS && s && s != UNSET && s[0], "cuGetErrorString(%ld) = %d, %s", en[i].value, r,
              s && s != UNSET ? "empty" : "no string");
    }

    /* Nothing else: every other code in a wide range is unknown, with *pStr set to NULL. */
    int known = 0;
    for (long c = -70000; c <= 70000; c++) {
        const char *sn = UNSET, *ss = UNSET;
        CUresult rn = get_name((CUresult)c, &sn), rs = get_string((CUresult)c, &ss);
        int is_enum = 0;
        for (int i = 0; i < n && !is_enum; i++)
            is_enum = en[i].value == c;
        known += rn == CUDA_SUCCESS;
        if (!is_enum)
            CHECK(rn == CUDA_ERROR_INVALID_VALUE && rs == CUDA_ERROR_INVALID_VALUE && !sn && !ss,
                  "code %ld: want INVALID_VALUE and NULL, got %d/%d", c, rn, rs);
    }
    CHECK(known == n, "%d known codes in [-70000, 70000], cuda.h has %d", known, n);
    const long extremes[] = {12345, -1, INT_MAX, INT_MIN, 1000, 10000};
    for (size_t i = 0; i < sizeof extremes / sizeof *extremes; i++) {
        const char *sn = UNSET, *ss = UNSET;
        CUresult rn = get_name((CUresult)extremes[i], &sn), rs = get_string((CUresult)extremes[i], &ss);
        CHECK(rn == CUDA_ERROR_INVALID_VALUE && !sn, "cuGetErrorName(%ld) = %d", extremes[i], rn);
        CHECK(rs == CUDA_ERROR_INVALID_VALUE && !ss, "cuGetErrorString(%ld) = %d", extremes[i], rs);
    }

    /* NULL output pointer (the real driver crashes): CUDA_ERROR_INVALID_VALUE, known code or not. */
    CHECK(get_name(CUDA_SUCCESS, NULL) == CUDA_ERROR_INVALID_VALUE, "cuGetErrorName(0, NULL)");
    CHECK(get_string(CUDA_SUCCESS, NULL) == CUDA_ERROR_INVALID_VALUE, "cuGetErrorString(0, NULL)");
    CHECK(get_name((CUresult)12345, NULL) == CUDA_ERROR_INVALID_VALUE, "cuGetErrorName(12345, NULL)");
    CHECK(get_string((CUresult)12345, NULL) == CUDA_ERROR_INVALID_VALUE, "cuGetErrorString(12345, NULL)");

    /* Texts the real driver 580.159.04 returned (docs/generated-code.md). */
    static const struct {
        CUresult code;
        const char *text;
    } real[] = {
        {CUDA_SUCCESS, "no error"},
        {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
        {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
        {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"},
        {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"},
        {CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"},
        {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
        {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"},
        {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
        {CUDA_ERROR_KEY_ROTATION, "an error happened during the key rotation sequence"},
        {CUDA_ERROR_UNKNOWN, "unknown error"},
    };
    for (size_t i = 0; i < sizeof real / sizeof *real; i++) {
        const char *s = NULL;
        CUresult r = get_string(real[i].code, &s);
        CHECK(r == CUDA_SUCCESS && s && !strcmp(s, real[i].text), "cuGetErrorString(%d) = \"%s\", want \"%s\"",
              (int)real[i].code, s ? s : "(null)", real[i].text);
    }

    /* Stable storage: the same pointer each time. */
    const char *a = NULL, *b = NULL;
    get_string(CUDA_ERROR_INVALID_VALUE, &a);
    get_string(CUDA_ERROR_INVALID_VALUE, &b);
    CHECK(a && a == b, "cuGetErrorString returns a different pointer each time");

    printf("test_errors: %d enumerators, %lu checks, %lu failures\n", n, checks, failures);
    return failures ? 1 : 0;
}
