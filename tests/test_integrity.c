/* The runtime's integrity check and the export tables, without a GPU: MD2 against RFC 1319's test
 * suite, HMAC-MD2's construction, the two fixed answers, and cuGetExportTable's tables as the runtime
 * finds them (size words, slots present, unknown tables not found).
 * usage: test_integrity SHIM_PATH */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/integrity.h"

static int failures, checks;

#define EXPECT(cond, ...)                                                                              \
    do {                                                                                               \
        checks++;                                                                                      \
        if (!(cond)) {                                                                                 \
            failures++;                                                                                \
            printf("FAIL: " __VA_ARGS__);                                                              \
            printf("\n");                                                                              \
        }                                                                                              \
    } while (0)

static void hex(const uint8_t *d, char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void md2_vectors(void)
{
    static const char *const v[][2] = {
        {"", "8350e5a3e24c153df2275c9f80692773"},
        {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
        {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
        {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
        {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "da33def2a42df13975352846c30338cd"},
        {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
         "d5976f79d83d3a0dc9806c3c66f3efd8"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t d[16];
        char h[33];
        cumux_md2((const uint8_t *)v[i][0], strlen(v[i][0]), d);
        hex(d, h);
        EXPECT(!strcmp(h, v[i][1]), "MD2(\"%s\") = %s, RFC 1319 says %s", v[i][0], h, v[i][1]);
    }
}

/* HMAC from its definition, with MD2 as the hash: H((K^opad) || H((K^ipad) || m)). */
static void hmac_construction(void)
{
    uint8_t key[16], msg[100], mac[16], want[16], inner[16], buf[16 + 100];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(i * 37 + 5);
    for (int i = 0; i < 100; i++)
        msg[i] = (uint8_t)(i * 11 + 3);
    for (int i = 0; i < 16; i++)
        buf[i] = key[i] ^ 0x36;
    memcpy(buf + 16, msg, 100);
    cumux_md2(buf, sizeof buf, inner);
    uint8_t outer[32];
    for (int i = 0; i < 16; i++)
        outer[i] = key[i] ^ 0x5c;
    memcpy(outer + 16, inner, 16);
    cumux_md2(outer, sizeof outer, want);
    cumux_hmac_md2(key, 16, msg, 100, mac);
    EXPECT(!memcmp(mac, want, 16), "HMAC-MD2 differs from its definition");
    /* A short key is zero-padded to the block. */
    uint8_t padded[16] = {1, 2, 3}, mac2[16];
    cumux_hmac_md2(padded, 3, msg, 10, mac);
    cumux_hmac_md2(padded, 16, msg, 10, mac2);
    EXPECT(!memcmp(mac, mac2, 16), "HMAC-MD2 with a 3-byte key differs from the zero-padded key");
}

static void integrity_answers(void)
{
    uint64_t out[2];
    struct cumux_integrity_device dev = {{1, 2, 3}, 0, 0x65, 0};
    cumux_integrity_answer(13000, 130, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000000, &dev, 1, out);
    EXPECT(out[0] == 0x3341181C03CB675CULL && out[1] == 0x8ED383AA1F4CD1E8ULL, "fixed answer for version %% 10 == 0");
    cumux_integrity_answer(13000, 131, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000000, &dev, 1, out);
    EXPECT(out[0] == 0x1841181C03CB675CULL && out[1] == 0x8ED383AA1F4CD1E8ULL, "fixed answer for version %% 10 == 1");
    /* Otherwise every fact enters the digest. */
    uint64_t a[2], b[2];
    cumux_integrity_answer(13000, 132, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000000, &dev, 1, a);
    cumux_integrity_answer(13000, 132, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000000, &dev, 1, b);
    EXPECT(a[0] == b[0] && a[1] == b[1], "the digest is not a function of its facts");
    cumux_integrity_answer(13000, 132, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000001, &dev, 1, b);
    EXPECT(a[0] != b[0] || a[1] != b[1], "the time does not enter the digest");
    dev.pci_bus = 0x66;
    cumux_integrity_answer(13000, 132, 1, 2, (void *)0x1000, (void *)0x2000, (void *)0x3000, 1700000000, &dev, 1, b);
    EXPECT(a[0] != b[0] || a[1] != b[1], "the device does not enter the digest");
}

static void export_tables(const char *shim_path)
{
    void *h = dlopen(shim_path, RTLD_NOW | RTLD_LOCAL);
    EXPECT(h != NULL, "dlopen %s: %s", shim_path, dlerror());
    if (!h)
        return;
    CUresult (*get)(const void **, const CUuuid *) = (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable");
    EXPECT(get != NULL, "no cuGetExportTable");
    if (!get)
        return;
    static const struct {
        const char *uuid;
        int size_word; /* table length in pointers when it starts with a size word, else 0 */
        int slots;     /* pointers before the end (NULL-terminated tables); -1: size word only, slots empty */
    } t[] = {
        {"6bd5fb6c5bf4e74a8987d93912fd9df9", 13, 0}, {"42d85a8123f6cb478298f6e78a3aecdc", 3, 0},
        {"a094798c2e742e7493f20800200c0a66", 7, 0},  {"c693336e1121df11a8c368f355d89593", 0, 3},
        {"263e88607cd2614392f6bbd5006dfa7e", 15, 0}, {"d4082055bde6704b8d34ba123c66e1f2", 3, 0},
        {"21318c60971432488ca641ff7324c8f2", 93, 0}, {"6e163fbeb958444d835ce182aff1991e", 99, 0},
        {"1734dc26800d47458726c0f1e7dd8bca", 17, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        CUuuid id;
        for (int k = 0; k < 16; k++)
            sscanf(t[i].uuid + 2 * k, "%2hhx", (unsigned char *)&id.bytes[k]);
        const void **table = NULL;
        CUresult r = get((const void **)&table, &id);
        EXPECT(r == CUDA_SUCCESS && table, "table %s: %d", t[i].uuid, (int)r);
        if (r != CUDA_SUCCESS || !table)
            continue;
        if (t[i].size_word) {
            EXPECT((uintptr_t)table[0] == (uintptr_t)t[i].size_word * sizeof(void *), "table %s: size word %zu",
                   t[i].uuid, (size_t)(uintptr_t)table[0]);
            for (int k = 1; k < t[i].size_word; k++)
                EXPECT(t[i].slots < 0 ? table[k] == NULL : table[k] != NULL, "table %s: slot %d is %s", t[i].uuid, k,
                       t[i].slots < 0 ? "not empty" : "NULL");
        } else {
            for (int k = 0; k < t[i].slots; k++)
                EXPECT(table[k] != NULL, "table %s: slot %d is NULL", t[i].uuid, k);
            EXPECT(table[t[i].slots] == NULL, "table %s: not NULL-terminated", t[i].uuid);
        }
    }
    /* The integrity function answers through the table as cumux_integrity_answer does for versions 0/1. */
    CUuuid ic;
    for (int k = 0; k < 16; k++)
        sscanf("d4082055bde6704b8d34ba123c66e1f2" + 2 * k, "%2hhx", (unsigned char *)&ic.bytes[k]);
    const void **itable = NULL;
    if (get((const void **)&itable, &ic) == CUDA_SUCCESS) {
        CUresult (*fn)(uint32_t, uint64_t, uint64_t *) = (CUresult(*)(uint32_t, uint64_t, uint64_t *))(uintptr_t)itable[1];
        uint64_t out[2] = {0, 0};
        EXPECT(fn(13010, 1700000000, out) == CUDA_SUCCESS && out[0] == 0x3341181C03CB675CULL,
               "integrity slot 1 through the table");
    }
    /* The slots cuBLAS and cuFFT use, before cuInit (no server): what the real driver answers then. */
    const void **tls = NULL, **tctx = NULL, **tmod = NULL, **arch = NULL;
    static const char *const names[4] = {"42d85a8123f6cb478298f6e78a3aecdc", "21318c60971432488ca641ff7324c8f2",
                                         "6e163fbeb958444d835ce182aff1991e", "1734dc26800d47458726c0f1e7dd8bca"};
    const void ***dst[4] = {&tls, &tctx, &tmod, &arch};
    for (int i = 0; i < 4; i++) {
        CUuuid id;
        for (int k = 0; k < 16; k++)
            sscanf(names[i] + 2 * k, "%2hhx", (unsigned char *)&id.bytes[k]);
        get((const void **)dst[i], &id);
    }
    if (tls && tctx && tmod && arch) {
        void *ctx = (void *)1;
        EXPECT(((CUresult(*)(void **))(uintptr_t)tls[2])(&ctx) == CUDA_SUCCESS && ctx == NULL,
               "TOOLS_TLS [2] without a context: %p", ctx);
        unsigned long long cid = 7;
        EXPECT(((CUresult(*)(void *, unsigned long long *))(uintptr_t)tctx[4])(NULL, &cid) == CUDA_SUCCESS && cid == 0,
               "TOOLS_CONTEXT [4] of no context: %llu", cid);
        EXPECT(((CUresult(*)(void))(uintptr_t)tctx[5])() == CUDA_ERROR_NOT_SUPPORTED, "an unknown slot");
        EXPECT(((uint64_t(*)(void *, void *, void *, void *))(uintptr_t)tmod[7])(NULL, NULL, NULL, NULL) == 0,
               "TOOLS_MODULE [7] of no module");
        void *a = NULL, *b = NULL;
        EXPECT(((CUresult(*)(void **, void **))(uintptr_t)arch[4])(&a, &b) == CUDA_ERROR_NOT_INITIALIZED && !a && !b,
               "ARCH_DATA [4] before cuInit");
        EXPECT(((CUresult(*)(void *, void *))(uintptr_t)arch[13])(malloc(64), malloc(64)) == CUDA_SUCCESS,
               "ARCH_DATA [13] frees");
    }
    /* Unknown tables, and the one that must stay unanswered, are not found. */
    CUuuid unknown = {{0}}, skip;
    for (int k = 0; k < 16; k++)
        sscanf("f8cff95121468b4eb9e2fb469e7c0dd9" + 2 * k, "%2hhx", (unsigned char *)&skip.bytes[k]);
    const void *p = (const void *)1;
    EXPECT(get(&p, &unknown) == CUDA_ERROR_NOT_FOUND && p == NULL, "an unknown table is not CUDA_ERROR_NOT_FOUND");
    EXPECT(get(&p, &skip) == CUDA_ERROR_NOT_FOUND, "table f8cff951... must not be found");
    EXPECT(get(NULL, &unknown) == CUDA_ERROR_INVALID_VALUE, "NULL table pointer");
    dlclose(h);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SHIM_PATH\n", argv[0]);
        return 2;
    }
    md2_vectors();
    hmac_construction();
    integrity_answers();
    export_tables(argv[1]);
    printf("test_integrity: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
