/* A stand-in driver for the trace tests (test_trace_tables.c, test_trace.sh --native): a few entry
 * points, and export tables whose slots have known signatures (six integer and a double argument, stack
 * arguments, nine doubles, varargs, a struct returned in memory) and a data slot. Linked with
 * -Bsymbolic, like a driver that binds its own names: the pointers it hands out are its own. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>

#define EXPORT __attribute__((visibility("default")))

struct fake_big {
    uint64_t v[4];
};

static uint64_t mix(uint64_t h, uint64_t x)
{
    return (h ^ x) * 0x100000001b3ull;
}

static uint64_t f6d(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f, double x)
{
    return mix(mix(mix(mix(mix(mix(mix(1, a), b), c), d), e), f), (uint64_t)(x * 1024.0));
}

static uint64_t f6d_b(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f, double x)
{
    return f6d(a, b, c, d, e, f, x) ^ 0xb;
}

static uint64_t f8(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f, uint64_t g, uint64_t h)
{
    return mix(mix(f6d(a, b, c, d, e, f, 0), g), h);
}

static double f9d(double a, double b, double c, double d, double e, double f, double g, double h, double i)
{
    return a + 2 * b + 4 * c + 8 * d + 16 * e + 32 * f + 64 * g + 128 * h + 256 * i;
}

static double fvar(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int k = 0; k < n; k++)
        s += va_arg(ap, double) * (k + 1);
    va_end(ap);
    return s;
}

static struct fake_big fbig(uint64_t x)
{
    struct fake_big r = {{x, x * 2, x * 3, x * 4}};
    return r;
}

static CUresult fint(uint32_t version, uint64_t t, uint64_t out[2])
{
    out[0] = version;
    out[1] = t;
    return CUDA_SUCCESS;
}

static CUresult hidden(int *v)
{
    *v = 777;
    return CUDA_SUCCESS;
}

static int fake_data[4] = {1, 2, 3, 4};

/* Writes two words behind its first argument and one behind its second, returns 0x2a. */
static uint64_t writer(uint64_t *out, uint64_t *out2, uint64_t v)
{
    out[1] = v;
    out[3] = v + 1;
    *out2 = 0;
    return 0x2a;
}

#define FN(f) ((const void *)(uintptr_t)(f))

/* A: a size word (bytes), in read-only memory after relocation. */
static const void *const table_a[7] = {(const void *)(uintptr_t)(7 * sizeof(void *)), FN(f6d), FN(f8), FN(f9d),
                                       FN(fvar), FN(fbig), fake_data};
/* B: writable, no size word, ends with NULL. */
static const void *table_b[4] = {FN(f6d_b), FN(f8), FN(writer), NULL};

/* The integrity table's layout: its slot 1 must stay as it is. */
static const void *const table_i[3] = {(const void *)(uintptr_t)(3 * sizeof(void *)), FN(fint), FN(f6d)};

static const unsigned char uuid_a[16] = {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                                         0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11};
static const unsigned char uuid_b[16] = {0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
                                         0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22};
static const unsigned char uuid_i[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                         0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};

EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    if (!table || !id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!memcmp(id->bytes, uuid_a, 16))
        *table = table_a;
    else if (!memcmp(id->bytes, uuid_b, 16))
        *table = table_b;
    else if (!memcmp(id->bytes, uuid_i, 16))
        *table = table_i;
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 12345;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
    static const struct {
        CUresult r;
        const char *s;
    } names[] = {{CUDA_SUCCESS, "CUDA_SUCCESS"},
                 {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
                 {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
                 {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (names[i].r == r) {
            *s = names[i].s;
            return CUDA_SUCCESS;
        }
    }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    (void)version;
    (void)flags;
    void *p = NULL;
    if (!strcmp(symbol, "cuDriverGetVersion"))
        p = (void *)(uintptr_t)cuDriverGetVersion;
    else if (!strcmp(symbol, "cuFakeHidden"))
        p = (void *)(uintptr_t)hidden;
    *pfn = p;
    if (status)
        *status = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

/* For the test: 0 table A, 1 table B, 2 integrity table, 3 the data slot, 4 the hidden function,
 * 5 the integrity function, 6.. the functions of table A's slots 1 to 5. */
EXPORT const void *trace_fake_info(int what)
{
    const void *v[] = {table_a, table_b, table_i, fake_data, FN(hidden), FN(fint),
                       FN(f6d), FN(f8), FN(f9d), FN(fvar), FN(fbig)};
    return what >= 0 && what < (int)(sizeof v / sizeof v[0]) ? v[what] : NULL;
}
