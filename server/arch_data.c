/* The per-architecture data the driver hands out through export table 1734dc26800d47458726c0f1e7dd8bca
 * (ARCH_DATA in docs/export-tables.md). cuBLASLt asks for it before loading its nvjet kernels and
 * crashes without it. Slot 4 `CUresult f(void **a, void **b)` mallocs two buffers and fills them with
 * two tables of the current context's device; slot 13 `CUresult f(void *a, void *b)` frees them
 * (tools/probe_export_1734.c). They are constants of the device, so the server asks the real driver once
 * per GPU and clients get copies. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/server.h"

static const unsigned char arch_data_uuid[16] = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                                                 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};

#define ARCH_DATA_MAX 4096 /* per table; 64 bytes on an H200 */

static struct {
    int done;
    CUresult r;
    uint32_t len[2];
    uint8_t bytes[2][ARCH_DATA_MAX];
} cache[CUMUX_MAX_DEVICES];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*get_fn)(void **a, void **b);
typedef CUresult (*free_fn)(void *a, void *b);

/* Fills the cache entry of GPU g; the caller holds cache_lock and has g's context current. */
static void fetch(int g)
{
    const void *const *table = NULL;
    CUuuid id;
    memcpy(id.bytes, arch_data_uuid, sizeof id.bytes);
    CUresult r = cuGetExportTable((const void **)&table, &id);
    if (r == CUDA_SUCCESS && (!table || (uintptr_t)table[0] < 14 * sizeof(void *) || !table[4] || !table[13]))
        r = CUDA_ERROR_NOT_SUPPORTED;
    void *a = NULL, *b = NULL;
    if (r == CUDA_SUCCESS)
        r = ((get_fn)(uintptr_t)table[4])(&a, &b);
    if (r == CUDA_SUCCESS && a && b) {
        /* The driver does not say how long the tables are (64 bytes each on an H200). glibc's usable
         * size is the length asked for rounded up to 8 more than a multiple of 16; for a length that is a
         * multiple of 16 (64 on the H200; assumed elsewhere, to be checked on other GPUs) rounding it
         * down to 16 gives the length back, and no leftover heap bytes of the server reach a client. */
        void *ab[2] = {a, b};
        for (int i = 0; i < 2; i++) {
            size_t n = malloc_usable_size(ab[i]) & ~(size_t)15;
            cache[g].len[i] = (uint32_t)(n < ARCH_DATA_MAX ? n : ARCH_DATA_MAX);
            memcpy(cache[g].bytes[i], ab[i], cache[g].len[i]);
        }
        ((free_fn)(uintptr_t)table[13])(a, b);
    } else if (r == CUDA_SUCCESS) {
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    cache[g].r = r;
    cache[g].done = 1;
    if (r != CUDA_SUCCESS)
        cumux_logf("GPU %d: the driver's architecture data (export table 1734dc26...): error %d", g, (int)r);
}

CUresult srv_arch_data(int g, uint8_t *out, uint32_t cap, uint32_t *out_len)
{
    if (!srv_gpu_serves(g))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cache_lock);
    if (!cache[g].done)
        fetch(g);
    CUresult r = cache[g].r;
    uint32_t need = 2 * sizeof(uint32_t) + cache[g].len[0] + cache[g].len[1];
    if (r == CUDA_SUCCESS && need > cap)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        memcpy(out, cache[g].len, sizeof cache[g].len);
        memcpy(out + sizeof cache[g].len, cache[g].bytes[0], cache[g].len[0]);
        memcpy(out + sizeof cache[g].len + cache[g].len[0], cache[g].bytes[1], cache[g].len[1]);
        *out_len = need;
    }
    pthread_mutex_unlock(&cache_lock);
    return r;
}
