/* cuGetExportTable: the undocumented tables the CUDA runtime asks the driver for. What each slot does
 * is in docs/export-tables.md. Slots whose use is unknown log
 * their table and index once and return CUDA_ERROR_NOT_SUPPORTED, so that a trace shows what a
 * program needs next. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "shim/client.h"
#include "shim/compile_cache.h"
#include "shim/integrity.h"

/* ---- unknown slots ---- */
#define UNKNOWN_SLOT(table, idx)                                                                       \
    static CUresult unknown_##table##_##idx(void)                                                      \
    {                                                                                                  \
        return cumux_unsupported("export table " #table " slot " #idx);                               \
    }

UNKNOWN_SLOT(CUDART_INTERFACE, 3)
UNKNOWN_SLOT(CUDART_INTERFACE, 4)
UNKNOWN_SLOT(CUDART_INTERFACE, 5)
UNKNOWN_SLOT(CUDART_INTERFACE, 9)
UNKNOWN_SLOT(CUDART_INTERFACE, 10)
UNKNOWN_SLOT(CUDART_INTERFACE, 11)
UNKNOWN_SLOT(TOOLS_TLS, 1)
UNKNOWN_SLOT(TOOLS_RUNTIME_CALLBACK_HOOKS, 1)
UNKNOWN_SLOT(TOOLS_RUNTIME_CALLBACK_HOOKS, 3)
UNKNOWN_SLOT(TOOLS_RUNTIME_CALLBACK_HOOKS, 4)
UNKNOWN_SLOT(TOOLS_RUNTIME_CALLBACK_HOOKS, 5)
UNKNOWN_SLOT(CONTEXT_CHECKS, 1)
UNKNOWN_SLOT(CONTEXT_CHECKS, 4)
UNKNOWN_SLOT(CONTEXT_CHECKS, 5)
UNKNOWN_SLOT(CONTEXT_CHECKS, 6)
UNKNOWN_SLOT(CONTEXT_CHECKS, 7)
UNKNOWN_SLOT(CONTEXT_CHECKS, 8)
UNKNOWN_SLOT(CONTEXT_CHECKS, 9)
UNKNOWN_SLOT(CONTEXT_CHECKS, 10)
UNKNOWN_SLOT(CONTEXT_CHECKS, 11)
UNKNOWN_SLOT(CONTEXT_CHECKS, 12)
UNKNOWN_SLOT(CONTEXT_CHECKS, 13)
UNKNOWN_SLOT(CONTEXT_CHECKS, 14)
UNKNOWN_SLOT(INTEGRITY_CHECK, 2)

#define FN(f) ((const void *)(uintptr_t)(f))

/* ---- CUDART_INTERFACE ---- */
/* [1]: load a module from the runtime's fatbin wrapper. */
static CUresult rt_load_module(CUmodule *mod, const void *fatbin_wrapper)
{
    return cuModuleLoadData(mod, fatbin_wrapper);
}

/* [2]: the primary context of a device, neither retained nor made current. */
static CUresult rt_primary_context(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDevicePrimaryCtxRetain(pctx, dev);
    if (r != CUDA_SUCCESS)
        return r;
    /* The runtime retains it itself when it wants to: give the reference back, keeping it alive if
     * that was the only one (a zero count would destroy it). */
    pthread_mutex_lock(&shim.ctx_lock);
    if (shim.primary_refs[dev] > 1)
        shim.primary_refs[dev]--;
    pthread_mutex_unlock(&shim.ctx_lock);
    return CUDA_SUCCESS;
}

/* [6] and [8]: module loads with extra arguments the runtime passes as zero; [8] swaps the first two. */
static CUresult rt_load_module_ex(CUmodule *mod, const void *image, void *a2, void *a3, void *a4)
{
    (void)a2;
    (void)a3;
    (void)a4;
    return cuModuleLoadData(mod, image);
}

static CUresult rt_load_module_swapped(const void *image, CUmodule *mod, void *a2, void *a3, void *a4)
{
    (void)a2;
    (void)a3;
    (void)a4;
    return cuModuleLoadData(mod, image);
}

static CUresult rt_noop_size(size_t n)
{
    (void)n;
    return CUDA_SUCCESS;
}

static CUresult rt_load_compilers(void)
{
    return CUDA_SUCCESS; /* JIT compilers live in the server, which loads them itself */
}

static const void *cudart_interface[13] = {
    (const void *)(uintptr_t)(13 * sizeof(void *)),
    FN(rt_load_module),
    FN(rt_primary_context),
    FN(unknown_CUDART_INTERFACE_3),
    FN(unknown_CUDART_INTERFACE_4),
    FN(unknown_CUDART_INTERFACE_5),
    FN(rt_load_module_ex),
    FN(rt_noop_size),
    FN(rt_load_module_swapped),
    FN(unknown_CUDART_INTERFACE_9),
    FN(unknown_CUDART_INTERFACE_10),
    FN(unknown_CUDART_INTERFACE_11),
    FN(rt_load_compilers),
};

/* ---- TOOLS_TLS ---- */
/* [2]: the calling thread's current context, NULL when none (tools/probe_export_slots2.c on the real
 * driver). cuBLAS asks before every call it makes, then asks TOOLS_CONTEXT [4] for that context's id.
 * Further arguments vary and are ignored. */
static CUresult tls_current_context(CUcontext *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (cuCtxGetCurrent(out) != CUDA_SUCCESS)
        *out = NULL;
    return CUDA_SUCCESS;
}

static const void *tools_tls[3] = {
    (const void *)(uintptr_t)(3 * sizeof(void *)),
    FN(unknown_TOOLS_TLS_1),
    FN(tls_current_context),
};

/* ---- big tables: every slot an "unknown slot" function of its own, then the known ones set ---- */
/* 100 distinct unknown-slot functions per table from one line: unknown_T_0 .. unknown_T_99. */
#define UNKNOWN_10(table, d)                                                                            \
    UNKNOWN_SLOT(table, d##0) UNKNOWN_SLOT(table, d##1) UNKNOWN_SLOT(table, d##2) UNKNOWN_SLOT(table, d##3) \
    UNKNOWN_SLOT(table, d##4) UNKNOWN_SLOT(table, d##5) UNKNOWN_SLOT(table, d##6) UNKNOWN_SLOT(table, d##7) \
    UNKNOWN_SLOT(table, d##8) UNKNOWN_SLOT(table, d##9)
#define UNKNOWN_100(table)                                                                              \
    UNKNOWN_10(table, ) UNKNOWN_10(table, 1) UNKNOWN_10(table, 2) UNKNOWN_10(table, 3)                  \
    UNKNOWN_10(table, 4) UNKNOWN_10(table, 5) UNKNOWN_10(table, 6) UNKNOWN_10(table, 7)                 \
    UNKNOWN_10(table, 8) UNKNOWN_10(table, 9)
#define UNKNOWN_PTR_10(table, d)                                                                        \
    FN(unknown_##table##_##d##0), FN(unknown_##table##_##d##1), FN(unknown_##table##_##d##2),           \
    FN(unknown_##table##_##d##3), FN(unknown_##table##_##d##4), FN(unknown_##table##_##d##5),           \
    FN(unknown_##table##_##d##6), FN(unknown_##table##_##d##7), FN(unknown_##table##_##d##8),           \
    FN(unknown_##table##_##d##9)
#define UNKNOWN_PTR_100(table)                                                                          \
    UNKNOWN_PTR_10(table, ), UNKNOWN_PTR_10(table, 1), UNKNOWN_PTR_10(table, 2),                        \
    UNKNOWN_PTR_10(table, 3), UNKNOWN_PTR_10(table, 4), UNKNOWN_PTR_10(table, 5),                       \
    UNKNOWN_PTR_10(table, 6), UNKNOWN_PTR_10(table, 7), UNKNOWN_PTR_10(table, 8),                       \
    UNKNOWN_PTR_10(table, 9)

/* ---- TOOLS_CONTEXT (21318c60971432488ca641ff7324c8f2): 92 slots; cuBLAS and cuFFT use three ---- */
UNKNOWN_100(TOOLS_CONTEXT)
static const void *const tools_context_unknown[100] = {UNKNOWN_PTR_100(TOOLS_CONTEXT)};
#define TOOLS_CONTEXT_WORDS 93

/* [4]: a context's id, what cuCtxGetId answers (1 for the primary context on the real driver); 0 for
 * NULL (tools/probe_export_slots2.c). */
static CUresult info_context_id(CUcontext ctx, unsigned long long *id)
{
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) {
        *id = 0;
        return CUDA_SUCCESS;
    }
    return cuCtxGetId(ctx, id);
}

/* [51]: the object behind a stream handle, for [39]. NULL and CU_STREAM_LEGACY are the same stream. */
static CUresult info_stream_object(CUcontext ctx, CUstream stream, void **obj)
{
    (void)ctx;
    if (!obj)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long id;
    CUresult r = cuStreamGetId(stream, &id); /* validates the handle */
    if (r != CUDA_SUCCESS)
        return r;
    *obj = stream ? (void *)stream : (void *)CU_STREAM_LEGACY;
    return CUDA_SUCCESS;
}

/* [39]: that stream's id, what cuStreamGetId answers. */
static CUresult info_stream_id(CUcontext ctx, void *obj, unsigned long long *id)
{
    (void)ctx;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    return cuStreamGetId((CUstream)obj, id);
}

static const void *tools_context[TOOLS_CONTEXT_WORDS];

/* ---- TOOLS_MODULE (6e163fbeb958444d835ce182aff1991e): 98 slots; cuFFT uses one ---- */
UNKNOWN_100(TOOLS_MODULE)
static const void *const tools_module_unknown[100] = {UNKNOWN_PTR_100(TOOLS_MODULE)};
#define TOOLS_MODULE_WORDS 99

/* [7]: calls fn(arg, function, 0) for every function of a module and returns how many there were.
 * Seen on the real driver (cumux trace --native, CUMUX_TRACE_DUMP=1): cuFFT passes a callback that
 * stores its second argument through its first, and gets 1 back for its one-kernel modules. */
typedef void (*module_function_cb)(void *arg, CUfunction f, uint64_t unused);

static uint64_t module_each_function(CUcontext ctx, CUmodule mod, module_function_cb fn, void *arg)
{
    (void)ctx;
    unsigned int n = 0;
    if (cuModuleGetFunctionCount(&n, mod) != CUDA_SUCCESS || n == 0)
        return 0;
    CUfunction *fns = calloc(n, sizeof *fns);
    if (!fns)
        return 0;
    uint64_t done = 0;
    if (cuModuleEnumerateFunctions(fns, n, mod) == CUDA_SUCCESS)
        for (; done < n; done++)
            if (fn)
                fn(arg, fns[done], 0);
    free(fns);
    return done;
}

static const void *tools_module[TOOLS_MODULE_WORDS];


/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS ---- */
/* [2] and [6]: a zeroed buffer of the runtime's, for tools that are not there. */
static void hooks_buffer_2(void **buf, size_t *size)
{
    static uint8_t b[1024];
    if (buf)
        *buf = b;
    if (size)
        *size = sizeof b;
}

static void hooks_buffer_6(void **buf, size_t *size)
{
    static uint8_t b[14];
    if (buf)
        *buf = b;
    if (size)
        *size = sizeof b;
}

static const void *tools_hooks[7] = {
    (const void *)(uintptr_t)(7 * sizeof(void *)),
    FN(unknown_TOOLS_RUNTIME_CALLBACK_HOOKS_1),
    FN(hooks_buffer_2),
    FN(unknown_TOOLS_RUNTIME_CALLBACK_HOOKS_3),
    FN(unknown_TOOLS_RUNTIME_CALLBACK_HOOKS_4),
    FN(unknown_TOOLS_RUNTIME_CALLBACK_HOOKS_5),
    FN(hooks_buffer_6),
};

/* ---- CONTEXT_LOCAL_STORAGE: the runtime keeps its per-context state here (context.c keeps it) ---- */
static const void *context_local_storage[4] = {FN(shim_cls_put), FN(shim_cls_delete), FN(shim_cls_get), NULL};

/* ---- CONTEXT_CHECKS ---- */
static CUresult checks_2(CUcontext ctx, uint32_t *r1, const void **r2)
{
    (void)ctx;
    (void)r2;
    if (r1)
        *r1 = 0;
    return CUDA_SUCCESS;
}

static uint32_t checks_3(void)
{
    return 0;
}

static const void *context_checks[15] = {
    (const void *)(uintptr_t)(15 * sizeof(void *)),
    FN(unknown_CONTEXT_CHECKS_1), /* must not be NULL: cublasCreate calls it and copes with an error */
    FN(checks_2),
    FN(checks_3),
    FN(unknown_CONTEXT_CHECKS_4),
    FN(unknown_CONTEXT_CHECKS_5),
    FN(unknown_CONTEXT_CHECKS_6),
    FN(unknown_CONTEXT_CHECKS_7),
    FN(unknown_CONTEXT_CHECKS_8),
    FN(unknown_CONTEXT_CHECKS_9),
    FN(unknown_CONTEXT_CHECKS_10),
    FN(unknown_CONTEXT_CHECKS_11),
    FN(unknown_CONTEXT_CHECKS_12),
    FN(unknown_CONTEXT_CHECKS_13),
    FN(unknown_CONTEXT_CHECKS_14),
};

/* ---- INTEGRITY_CHECK ---- */
static const void *integrity_check[3];

static CUresult integrity_fn(uint32_t version, uint64_t unix_seconds, uint64_t out[2])
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    /* The facts the runtime can also see through the driver API: they must be what cumux reports. */
    struct cumux_integrity_device devs[CUMUX_MAX_DEVICES];
    int n = shim.initialized ? shim.device_count : 0;
    for (int i = 0; i < n; i++) {
        memcpy(devs[i].uuid, shim.devices[i].uuid, 16);
        devs[i].pci_domain = shim.devices[i].attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID];
        devs[i].pci_bus = shim.devices[i].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID];
        devs[i].pci_device = shim.devices[i].attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
    }
    int driver_version = 0;
    cuDriverGetVersion(&driver_version);
    cumux_integrity_answer((uint32_t)driver_version, version, (uint32_t)getpid(), (uint32_t)pthread_self(),
                           cudart_interface, integrity_check, FN(integrity_fn), unix_seconds, devs, n, out);
    return CUDA_SUCCESS;
}

static const void *integrity_check[3] = {
    (const void *)(uintptr_t)(3 * sizeof(void *)),
    FN(integrity_fn),
    FN(unknown_INTEGRITY_CHECK_2),
};

/* ---- ARCH_DATA (1734dc26800d47458726c0f1e7dd8bca): 16 slots; cuBLASLt uses two ---- */
UNKNOWN_100(ARCH_DATA)
static const void *const arch_data_unknown[100] = {UNKNOWN_PTR_100(ARCH_DATA)};
#define ARCH_DATA_WORDS 17

/* The device's two tables, from the server (server/arch_data.c), once per device. */
static struct {
    CUresult r;
    uint32_t len[2];
    uint8_t *bytes[2];
} arch_cache[CUMUX_MAX_DEVICES];
static pthread_mutex_t arch_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult arch_fetch(int dev)
{
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    int32_t gpu = dev;
    CUresult r = shim_gpu_route(&gpu);
    if (r != CUDA_SUCCESS)
        return r;
    struct cumux_arch_data_query req = {.device = gpu};
    uint32_t len = 0;
    r = shim_call(CUMUX_OP_ARCH_DATA, &req, sizeof req, buf, sizeof buf, &len);
    struct cumux_arch_data h = {{0, 0}};
    if (r == CUDA_SUCCESS && len >= sizeof h)
        memcpy(&h, buf, sizeof h);
    if (r == CUDA_SUCCESS && (len < sizeof h || (uint64_t)h.len[0] + h.len[1] + sizeof h != len))
        r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; r == CUDA_SUCCESS && i < 2; i++) {
        arch_cache[dev].len[i] = h.len[i];
        if (!(arch_cache[dev].bytes[i] = malloc(h.len[i] ? h.len[i] : 1)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            memcpy(arch_cache[dev].bytes[i], buf + sizeof h + (i ? h.len[0] : 0), h.len[i]);
    }
    return r;
}

/* [4]: two malloc'ed copies of the current context's device's tables (device 0 with no context). */
static CUresult arch_data_get(void **a, void **b)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!a || !b)
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        dev = 0;
    if (dev < 0 || dev >= shim.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&arch_lock);
    if (!arch_cache[dev].bytes[0] && arch_cache[dev].r == CUDA_SUCCESS)
        arch_cache[dev].r = arch_fetch(dev);
    CUresult r = arch_cache[dev].r;
    pthread_mutex_unlock(&arch_lock);
    if (r != CUDA_SUCCESS)
        return r;
    void *p = malloc(arch_cache[dev].len[0] ? arch_cache[dev].len[0] : 1);
    void *q = malloc(arch_cache[dev].len[1] ? arch_cache[dev].len[1] : 1);
    if (!p || !q) {
        free(p);
        free(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(p, arch_cache[dev].bytes[0], arch_cache[dev].len[0]);
    memcpy(q, arch_cache[dev].bytes[1], arch_cache[dev].len[1]);
    *a = p;
    *b = q;
    return CUDA_SUCCESS;
}

/* [13]: frees what [4] handed out. */
static CUresult arch_data_free(void *a, void *b)
{
    free(a);
    free(b);
    return CUDA_SUCCESS;
}

static const void *arch_data[ARCH_DATA_WORDS];

/* ---- the lookup ---- */
/* The big tables: unknown-slot functions everywhere, then the slots cumux knows. */
static void fill_tables(void)
{
    memcpy(tools_context, tools_context_unknown, sizeof tools_context);
    tools_context[0] = (const void *)(uintptr_t)(TOOLS_CONTEXT_WORDS * sizeof(void *));
    tools_context[4] = FN(info_context_id);
    tools_context[39] = FN(info_stream_id);
    tools_context[51] = FN(info_stream_object);
    memcpy(tools_module, tools_module_unknown, sizeof tools_module);
    tools_module[0] = (const void *)(uintptr_t)(TOOLS_MODULE_WORDS * sizeof(void *));
    tools_module[7] = FN(module_each_function);
    memcpy(arch_data, arch_data_unknown, sizeof arch_data);
    arch_data[0] = (const void *)(uintptr_t)(ARCH_DATA_WORDS * sizeof(void *));
    arch_data[4] = FN(arch_data_get);
    arch_data[13] = FN(arch_data_free);
}

static const struct {
    const char *name;
    uint8_t uuid[16];
    const void *const *table;
} tables[] = {
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     cudart_interface},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     tools_tls},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     tools_hooks},
    {"CONTEXT_LOCAL_STORAGE",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     context_local_storage},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     context_checks},
    {"INTEGRITY_CHECK", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     integrity_check},
    {"TOOLS_CONTEXT", {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     tools_context},
    {"TOOLS_MODULE", {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     tools_module},
    {"ARCH_DATA", {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca},
     arch_data},
    {"COMPILE_CACHE",
     {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
     cumux_compile_cache_table},
};

CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    if (!table || !id)
        return CUDA_ERROR_INVALID_VALUE;
    static pthread_once_t filled = PTHREAD_ONCE_INIT;
    pthread_once(&filled, fill_tables);
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        if (!memcmp(tables[i].uuid, id->bytes, 16)) {
            cumux_debugf("cuGetExportTable: %s", tables[i].name);
            *table = tables[i].table;
            return CUDA_SUCCESS;
        }
    }
    /* Unknown tables are not found, and named once in the log. f8cff951... is declined on purpose
     * (answering it would make the runtime skip its normal start-up): only a debug line. */
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->bytes[i]);
    if (!strcmp(hex, "f8cff95121468b4eb9e2fb469e7c0dd9")) {
        cumux_debugf("cuGetExportTable: %s declined on purpose: CUDA_ERROR_NOT_FOUND", hex);
        *table = NULL;
        return CUDA_ERROR_NOT_FOUND;
    }
    static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
    static char seen[32][33];
    static int nseen;
    pthread_mutex_lock(&seen_lock);
    int known = 0;
    for (int i = 0; i < nseen; i++)
        known |= !strcmp(seen[i], hex);
    if (!known && nseen < 32)
        memcpy(seen[nseen++], hex, 33);
    pthread_mutex_unlock(&seen_lock);
    if (!known)
        cumux_logf("cuGetExportTable: unknown table %s: CUDA_ERROR_NOT_FOUND", hex);
    *table = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
