/* fakecuda modules and libraries: any image loads; it has the registry's kernels and globals whose names
 * occur in its bytes (fake_kernels.c). Functions, their attributes and parameter layouts, occupancy,
 * and launches. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

struct fc_module {
    uint32_t magic;
    bool in_library; /* a library's module: the library unloads it */
    struct fc_func *funcs;
    struct fc_func *views; /* a library's: funcs[i]'s function in the context is views[i] */
    unsigned nfuncs;
    struct {
        const char *name;
        uint64_t ptr;
        size_t size;
    } globals[8];
    unsigned nglobals;
};

struct fc_library {
    uint32_t magic;
    struct fc_module *mod;
};

/* ---------------------------------------------------------------- images */

/* Whether [p, p+n) is mapped: an image's header may claim more than its caller mapped. */
static bool mapped(const void *p, size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(pg - 1);
    uintptr_t end = (uintptr_t)p + n;
    if (end < (uintptr_t)p)
        return false;
    unsigned char vec[64];
    for (uintptr_t a = first; a < end;) {
        size_t pages = (end - a + pg - 1) / pg;
        if (pages > sizeof vec)
            pages = sizeof vec;
        if (mincore((void *)a, pages * pg, vec) != 0)
            return false;
        a += pages * pg;
    }
    return true;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The bytes of an image: a fatbin (or the runtime's wrapper around one), an ELF cubin, or NUL-ended PTX. */
static int image_bytes(const void *img, const uint8_t **out, size_t *len, int depth)
{
    const uint8_t *b = img;
    if (!img || depth > 2 || !mapped(b, 16))
        return -1;
    uint32_t magic;
    memcpy(&magic, b, 4);
    if (magic == 0xba55ed50u) { /* fatbin: u32 magic, u16 version, u16 header size, u64 payload size */
        uint16_t hs;
        memcpy(&hs, b + 6, 2);
        uint64_t n = (uint64_t)hs + rd64(b + 8);
        if (n < hs || n > (4ull << 30) || !mapped(b, (size_t)n))
            return -1;
        *out = b;
        *len = (size_t)n;
        return 0;
    }
    if (magic == 0x466243b1u) { /* the runtime's wrapper: int magic, int version, const void *data */
        const void *data;
        memcpy(&data, b + 8, sizeof data);
        return image_bytes(data, out, len, depth + 1);
    }
    if (!memcmp(b, "\177ELF", 4)) {
        if (b[4] != 2 || !mapped(b, 64))
            return -1;
        uint16_t shes, shn, phes, phn;
        memcpy(&phes, b + 0x36, 2);
        memcpy(&phn, b + 0x38, 2);
        memcpy(&shes, b + 0x3a, 2);
        memcpy(&shn, b + 0x3c, 2);
        uint64_t end = fc_add_sat(rd64(b + 0x28), (uint64_t)shes * shn);
        uint64_t pend = fc_add_sat(rd64(b + 0x20), (uint64_t)phes * phn);
        if (pend > end)
            end = pend;
        if (end > (4ull << 30) || !mapped(b, (size_t)end))
            return -1;
        *out = b;
        *len = (size_t)end;
        return 0;
    }
    /* Text: PTX, read as a C string like the real driver does. Text that runs off the end of its mapping
     * would fault in the real driver (inside cumuxd): that is the oracle's to report. A page past the end
     * of a mapped file raises SIGBUS on the read itself, as it would in the real driver. */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 0;
    for (;;) {
        size_t room = pg - ((uintptr_t)(b + n) & (pg - 1));
        if (!mapped(b + n, room))
            fc_oracle_fail("cuModuleLoadData (PTX text with no NUL before the end of its mapping)",
                           (uint64_t)(uintptr_t)b, n + room);
        const uint8_t *z = memchr(b + n, 0, room);
        if (z) {
            *out = b;
            *len = (size_t)(z - b);
            /* The real driver parses it: text that is not PTX is refused. */
            return memmem(b, *len, ".version", 8) ? 0 : -2;
        }
        n += room;
    }
}

static bool ident(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

/* The name as a whole symbol in the image (".text.xform" names xform; "gt_xform" does not). */
static bool name_in(const uint8_t *b, size_t n, const char *name)
{
    size_t k = strlen(name);
    for (const uint8_t *p = b; (size_t)(p - b) + k <= n;) {
        const uint8_t *hit = memmem(p, n - (size_t)(p - b), name, k);
        if (!hit)
            return false;
        bool left = hit == b || !ident(hit[-1]);
        bool right = (size_t)(hit - b) + k == n || !ident(hit[k]);
        if (left && right)
            return true;
        p = hit + 1;
    }
    return false;
}

static void module_free(struct fc_module *m)
{
    for (unsigned i = 0; i < m->nglobals; i++)
        fc_mem_release(m->globals[i].ptr);
    for (unsigned i = 0; i < m->nfuncs; i++) {
        m->funcs[i].magic = FC_MAGIC_DEAD;
        if (m->views)
            m->views[i].magic = FC_MAGIC_DEAD;
    }
    free(m->funcs);
    free(m->views);
    m->magic = FC_MAGIC_DEAD;
    free(m);
}

static CUresult module_load(const void *img, bool in_library, struct fc_module **out)
{
    const uint8_t *b;
    size_t n;
    int kind = image_bytes(img, &b, &n, 0);
    if (kind < 0)
        return kind == -2 ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_INVALID_IMAGE;
    struct fc_module *m = calloc(1, sizeof *m);
    if (!m || !(m->funcs = calloc(fc_nkernels, sizeof *m->funcs))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = FC_MAGIC_MODULE;
    m->in_library = in_library;
    if (in_library && !(m->views = calloc(fc_nkernels, sizeof *m->views))) {
        free(m->funcs);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < fc_nkernels; i++) {
        if (!name_in(b, n, fc_kernels[i].name))
            continue;
        struct fc_func *f = &m->funcs[m->nfuncs++];
        f->magic = FC_MAGIC_FUNC;
        f->def = &fc_kernels[i];
        f->mod = m;
        f->max_dyn_smem = 49152 - fc_kernels[i].static_smem;
        f->carveout = -1;
        if (m->views)
            m->views[m->nfuncs - 1] = (struct fc_func){.magic = FC_MAGIC_FUNC, .def = f->def, .mod = m, .kernel = f};
    }
    for (size_t i = 0; i < fc_nglobals && m->nglobals < 8; i++) {
        if (!name_in(b, n, fc_globals[i].name))
            continue;
        uint64_t p;
        CUresult r = fc_mem_alloc(fc_globals[i].size, FC_GLOBAL, NULL, &p);
        if (r != CUDA_SUCCESS) {
            module_free(m);
            return r;
        }
        memset((void *)(uintptr_t)p, 0, fc_globals[i].size); /* kernels.cu's globals start at zero */
        m->globals[m->nglobals].name = fc_globals[i].name;
        m->globals[m->nglobals].ptr = p;
        m->globals[m->nglobals].size = fc_globals[i].size;
        m->nglobals++;
    }
    *out = m;
    return CUDA_SUCCESS;
}

static struct fc_module *module_get(CUmodule h)
{
    struct fc_module *m = (struct fc_module *)h;
    return m && m->magic == FC_MAGIC_MODULE ? m : NULL;
}

static struct fc_library *library_get(CUlibrary h)
{
    struct fc_library *l = (struct fc_library *)h;
    return l && l->magic == FC_MAGIC_LIBRARY ? l : NULL;
}

struct fc_func *fc_func_get(const void *h)
{
    struct fc_func *f = (struct fc_func *)h;
    if (!f || f->magic != FC_MAGIC_FUNC)
        return NULL;
    return f->kernel ? f->kernel : f;
}

uint64_t fc_module_global(const struct fc_module *m, const char *name, size_t *size)
{
    for (unsigned i = 0; i < m->nglobals; i++) {
        if (!strcmp(m->globals[i].name, name)) {
            if (size)
                *size = m->globals[i].size;
            return m->globals[i].ptr;
        }
    }
    return 0;
}

unsigned fc_param_bytes(const struct fc_kernel_def *d)
{
    return d->nparams ? d->off[d->nparams - 1] + d->size[d->nparams - 1] : 0;
}

/* ---------------------------------------------------------------- modules */

/* The module behind h, a CUmodule or (lib) a CUlibrary's, after the init check every entry point makes:
 * a library's lookups and enumeration are its module's. */
static CUresult module_of(const void *h, bool lib, struct fc_module **out)
{
    CHECK_RET(fc_check_init());
    if (lib) {
        struct fc_library *l = library_get((CUlibrary)h);
        *out = l ? l->mod : NULL;
    } else {
        *out = module_get((CUmodule)h);
    }
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Stores obj as element i of the caller's CUfunction, CUkernel or CUmodule array: all are pointers to our
 * objects, and memcpy stores one whatever the slot's pointer type. */
static void put_handle(void *slots, unsigned i, const void *obj)
{
    memcpy((char *)slots + (size_t)i * sizeof obj, &obj, sizeof obj);
}

CUresult cuModuleLoadData(CUmodule *out, const void *img)
{
    CHECK_RET(fc_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_module *m;
    CHECK_RET(module_load(img, false, &m));
    atomic_fetch_add(&fc_stats.modules, 1);
    *out = (CUmodule)m;
    return CUDA_SUCCESS;
}

/* JIT options change nothing in the fake, whose kernels are its own; they must be well formed. */
CUresult cuModuleLoadDataEx(CUmodule *out, const void *img, unsigned int n, CUjit_option *opts, void **vals)
{
    CHECK_RET(fc_check_init());
    if (n && (!opts || !vals))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadData(out, img);
}

CUresult cuModuleUnload(CUmodule h)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, false, &m));
    if (m->in_library)
        return CUDA_ERROR_INVALID_HANDLE;
    m->magic = FC_MAGIC_DEAD;
    fc_drain(); /* as the real driver: queued kernels may still use its code and globals */
    module_free(m);
    atomic_fetch_sub(&fc_stats.modules, 1);
    return CUDA_SUCCESS;
}

/* cuModuleGetFunction and cuLibraryGetKernel: one object serves as kernel and function, as launches take
 * either; a library kernel's function in the context (cuKernelGetFunction) is a view of it with a handle
 * of its own. */
static CUresult get_function(const void *h, bool lib, const char *name, void *out)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, lib, &m));
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < m->nfuncs; i++) {
        if (!strcmp(m->funcs[i].def->name, name)) {
            put_handle(out, 0, &m->funcs[i]);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

static CUresult get_global(const void *h, bool lib, CUdeviceptr *p, size_t *size, const char *name)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, lib, &m));
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    size_t sz = 0;
    uint64_t v = fc_module_global(m, name, &sz);
    if (!v)
        return CUDA_ERROR_NOT_FOUND;
    if (p)
        *p = v;
    if (size)
        *size = sz;
    return CUDA_SUCCESS;
}

static CUresult function_count(const void *h, bool lib, unsigned int *n)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, lib, &m));
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = m->nfuncs;
    return CUDA_SUCCESS;
}

static CUresult enumerate_functions(const void *h, bool lib, void *fns, unsigned int n)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, lib, &m));
    if (!fns)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n && i < m->nfuncs; i++)
        put_handle(fns, i, &m->funcs[i]);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name)
{
    return get_function(h, false, name, out);
}

CUresult cuModuleGetGlobal(CUdeviceptr *p, size_t *size, CUmodule h, const char *name)
{
    return get_global(h, false, p, size, name);
}

CUresult cuModuleGetFunctionCount(unsigned int *n, CUmodule h)
{
    return function_count(h, false, n);
}

CUresult cuModuleEnumerateFunctions(CUfunction *fns, unsigned int n, CUmodule h)
{
    return enumerate_functions(h, false, fns, n);
}

/* ---------------------------------------------------------------- libraries */

CUresult cuLibraryLoadData(CUlibrary *out, const void *code, CUjit_option *jo, void **jv, unsigned int njit,
                           CUlibraryOption *lo, void **lv, unsigned int nlib)
{
    (void)jo, (void)jv, (void)njit, (void)lo, (void)lv, (void)nlib;
    CHECK_RET(fc_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_library *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = module_load(code, true, &l->mod);
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    l->magic = FC_MAGIC_LIBRARY;
    atomic_fetch_add(&fc_stats.libraries, 1);
    *out = (CUlibrary)l;
    return CUDA_SUCCESS;
}

CUresult cuLibraryUnload(CUlibrary h)
{
    CHECK_RET(fc_check_init());
    struct fc_library *l = library_get(h);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    l->magic = FC_MAGIC_DEAD;
    fc_drain();
    module_free(l->mod);
    free(l);
    atomic_fetch_sub(&fc_stats.libraries, 1);
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary h, const char *name)
{
    return get_function(h, true, name, out);
}

CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *size, CUlibrary h, const char *name)
{
    return get_global(h, true, p, size, name);
}

CUresult cuLibraryGetModule(CUmodule *out, CUlibrary h)
{
    struct fc_module *m;
    CHECK_RET(module_of(h, true, &m));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernelCount(unsigned int *n, CUlibrary h)
{
    return function_count(h, true, n);
}

CUresult cuLibraryEnumerateKernels(CUkernel *ks, unsigned int n, CUlibrary h)
{
    return enumerate_functions(h, true, ks, n);
}

/* ---------------------------------------------------------------- functions */

/* The function behind a CUfunction or CUkernel handle (one object), after the init check every entry point
 * makes. */
static CUresult func_arg(const void *h, struct fc_func **out)
{
    CHECK_RET(fc_check_init());
    *out = fc_func_get(h);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuKernelGetFunction(CUfunction *out, CUkernel k)
{
    struct fc_func *f;
    CHECK_RET(func_arg(k, &f));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = f->mod->views ? (CUfunction)&f->mod->views[f - f->mod->funcs] : (CUfunction)f;
    return CUDA_SUCCESS;
}

/* Which handle a launch of a library kernel was given: the kernel or its function (a view). */
static void count_launch(const void *h)
{
    const struct fc_func *raw = h;
    if (raw->kernel)
        atomic_fetch_add(&fc_stats.launches_by_function, 1);
    else if (raw->mod->in_library)
        atomic_fetch_add(&fc_stats.launches_by_kernel, 1);
}

CUresult cuFuncGetModule(CUmodule *out, CUfunction fn)
{
    struct fc_func *f;
    CHECK_RET(func_arg(fn, &f));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}

static CUresult name_of(const void *h, const char **out)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = f->def->name;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **out, CUfunction f)
{
    return name_of(f, out);
}

CUresult cuKernelGetName(const char **out, CUkernel k)
{
    return name_of(k, out);
}

static CUresult param_info(const void *h, size_t i, size_t *off, size_t *size)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (i >= f->def->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = f->def->off[i];
    if (size)
        *size = f->def->size[i];
    return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size)
{
    return param_info(f, i, off, size);
}

CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t *off, size_t *size)
{
    return param_info(k, i, off, size);
}

static CUresult get_attr(const void *h, CUfunction_attribute a, int *v)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_kernel_def *d = f->def;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = d->max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = d->static_smem; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = d->num_regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = f->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *v = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *v = f->nonportable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *v = f->cluster_policy; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult set_attr(const void *h, CUfunction_attribute a, int v)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (v < 0 || v > 232448 - f->def->static_smem)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = v;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (v < -1 || v > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = v;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        f->nonportable_cluster = v != 0;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (v < 0 || v > 2)
            return CUDA_ERROR_INVALID_VALUE;
        f->cluster_policy = v;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    return get_attr(f, a, v);
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    return set_attr(f, a, v);
}

CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice dev)
{
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return get_attr(k, a, v);
}

CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice dev)
{
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return set_attr(k, a, v);
}

/* A preference the fake keeps and has no use for (its kernels are CPU code). */
static CUresult set_cache_config(const void *h, CUfunc_cache cfg)
{
    struct fc_func *f = fc_func_get(h);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((unsigned)cfg > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&f->cache_config, (int)cfg);
    return CUDA_SUCCESS;
}

CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache cfg)
{
    return set_cache_config(f, cfg);
}

CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache cfg, CUdevice dev)
{
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return set_cache_config(k, cfg);
}

/* ---------------------------------------------------------------- occupancy */

static int blocks_per_sm(const struct fc_func *f, int block, size_t dyn)
{
    if (block <= 0 || block > f->def->max_threads || dyn > (size_t)f->max_dyn_smem)
        return 0;
    int warps = (block + 31) / 32;
    int by_threads = 64 / warps;
    int by_regs = 65536 / (f->def->num_regs * 32 * warps);
    int by_smem = (int)(233472 / ((size_t)f->def->static_smem + dyn + 1024));
    int n = 32;
    if (by_threads < n)
        n = by_threads;
    if (by_regs < n)
        n = by_regs;
    if (by_smem < n)
        n = by_smem;
    return n;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction h, int block, size_t dyn,
                                                              unsigned int flags)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!n || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE))
        return CUDA_ERROR_INVALID_VALUE;
    *n = blocks_per_sm(f, block, dyn);
    return CUDA_SUCCESS;
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction h, int blocks, int block)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!bytes || blocks <= 0 || block <= 0 || block > f->def->max_threads)
        return CUDA_ERROR_INVALID_VALUE;
    long per = 233472 / blocks - 1024 - f->def->static_smem;
    long max = 232448 - f->def->static_smem;
    *bytes = per < 0 ? 0 : (size_t)(per > max ? max : per);
    return CUDA_SUCCESS;
}

static unsigned cluster_size(const CUlaunchConfig *c)
{
    for (unsigned i = 0; c->attrs && i < c->numAttrs; i++) {
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            const CUlaunchAttributeValue *v = &c->attrs[i].value;
            return v->clusterDim.x * v->clusterDim.y * v->clusterDim.z;
        }
    }
    return 1;
}

CUresult cuOccupancyMaxPotentialClusterSize(int *n, CUfunction h, const CUlaunchConfig *c)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!n || !c)
        return CUDA_ERROR_INVALID_VALUE;
    *n = f->nonportable_cluster ? 16 : 8;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction h, const CUlaunchConfig *c)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!n || !c)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned cs = cluster_size(c);
    if (cs == 0 || cs > (f->nonportable_cluster ? 16u : 8u))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    int per_sm = blocks_per_sm(f, (int)(c->blockDimX * c->blockDimY * c->blockDimZ), c->sharedMemBytes);
    *n = per_sm * FC_SM_COUNT / (int)cs;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- launches */

CUresult fc_kernel_op(struct fc_func *f, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                      void **params, void **extra, const char *call, struct fc_op **out)
{
    (void)call;
    const struct fc_kernel_def *d = f->def;
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] || grid[0] > 2147483647u ||
        grid[1] > 65535 || grid[2] > 65535 || block[0] > 1024 || block[1] > 1024 || block[2] > 64 ||
        (uint64_t)block[0] * block[1] * block[2] > (uint64_t)d->max_threads || shmem > (unsigned)f->max_dyn_smem ||
        (params && extra))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned nbytes = fc_param_bytes(d);
    uint8_t *args = calloc(nbytes ? nbytes : 1, 1);
    if (!args)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (d->nparams && params) {
        for (unsigned i = 0; i < d->nparams; i++) {
            if (!params[i]) {
                free(args);
                return CUDA_ERROR_INVALID_VALUE;
            }
            memcpy(args + d->off[i], params[i], d->size[i]);
        }
    } else if (d->nparams) {
        const void *buf = NULL;
        const size_t *size = NULL;
        for (unsigned i = 0; extra && i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = extra[i + 1];
            else
                break;
        }
        if (!buf || !size || *size < nbytes) {
            free(args);
            return CUDA_ERROR_INVALID_VALUE;
        }
        memcpy(args, buf, nbytes);
    }
    struct fc_op *op = fc_op_new(OP_KERNEL, d->call);
    if (!op) {
        free(args);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.k.fn = f;
    memcpy(op->u.k.grid, grid, sizeof op->u.k.grid);
    memcpy(op->u.k.block, block, sizeof op->u.k.block);
    op->u.k.shmem = shmem;
    op->u.k.args = args;
    *out = op;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction h, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
                        void **extra)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    struct fc_op *op;
    CHECK_RET(fc_kernel_op(f, grid, block, shmem, params, extra, "cuLaunchKernel", &op));
    count_launch(h);
    return fc_submit(s, op);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction h, void **params, void **extra)
{
    struct fc_func *f;
    CHECK_RET(func_arg(h, &f));
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
    unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute *a = &c->attrs[i];
        if (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a->value.cooperative) {
            /* Every block resident at once, or the launch is refused. */
            uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
            int per_sm = blocks_per_sm(f, (int)((uint64_t)block[0] * block[1] * block[2]), c->sharedMemBytes);
            if (blocks > (uint64_t)per_sm * FC_SM_COUNT)
                return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
        } else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            unsigned x = a->value.clusterDim.x, y = a->value.clusterDim.y, z = a->value.clusterDim.z;
            if (!x || !y || !z || grid[0] % x || grid[1] % y || grid[2] % z ||
                x * y * z > (f->nonportable_cluster ? 16u : 8u))
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
            /* A green context holds clusters only as large as its SMs scheduled together (a group of 8
             * here): the H200 refused one of PyTorch's kernels in a green context of 16 SMs. */
            if (x * y * z > 8u && fc_stream_in_green(c->hStream))
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        }
    }
    struct fc_op *op;
    CHECK_RET(fc_kernel_op(f, grid, block, c->sharedMemBytes, params, extra, "cuLaunchKernelEx", &op));
    count_launch(h);
    return fc_submit(c->hStream, op);
}

CUresult cuLaunchCooperativeKernel(CUfunction h, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)
{
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    coop.value.cooperative = 1;
    CUlaunchConfig c = {.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = bx, .blockDimY = by,
                        .blockDimZ = bz, .sharedMemBytes = shmem, .hStream = s, .attrs = &coop, .numAttrs = 1};
    return cuLaunchKernelEx(&c, h, params, NULL);
}
