/* Modules and libraries, their functions and globals, function attributes and occupancy. */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/map.h"
#include "common/launch_attrs.h"
#include "common/jit.h"
#include "server/handlers.h"

/* ---------------------------------------------------------------- modules and functions */

/* Modules unloaded lately, with their owners: a GPU coredump read just after a fault may name the module
 * of a client that got its error and left meanwhile. */
#define DEPARTED_KEPT 256
static struct {
    uint64_t module;
    char owner[160];
} departed[DEPARTED_KEPT];
static unsigned departed_next;
static pthread_mutex_t departed_lock = PTHREAD_MUTEX_INITIALIZER;

/* The module a dump names for a library's kernel k: the module of k's function in the GPU's context. Noted
 * while the context is healthy (at the kernel's lookup, which loads it anyway under lazy loading): after a
 * fault the driver answers every call with the fault. Only with dumps on: nothing else needs it. */
void srv_library_note_module(struct srv_module *mod, CUkernel k)
{
    if (!srv_coredump_path[0] || mod->kind != CUMUX_IMAGE_LIBRARY || mod->borrowed || mod->lib_module)
        return;
    CUfunction fn;
    CUmodule m;
    if (cuKernelGetFunction(&fn, k) == CUDA_SUCCESS && cuFuncGetModule(&m, fn) == CUDA_SUCCESS)
        mod->lib_module = m;
}

static void departed_note(struct srv_client *c, const struct srv_module *mod)
{
    if (!srv_coredump_path[0])
        return; /* no dumps, no names to find */
    CUmodule m = mod->lib ? mod->lib_module : mod->mod;
    if (!m)
        return;
    pthread_mutex_lock(&departed_lock);
    unsigned i = departed_next++ % DEPARTED_KEPT;
    departed[i].module = (uint64_t)(uintptr_t)m;
    srv_client_describe(c, departed[i].owner, sizeof departed[i].owner);
    pthread_mutex_unlock(&departed_lock);
}

bool srv_module_departed_owner(uint64_t cu_module, char *desc, size_t cap)
{
    bool found = false;
    pthread_mutex_lock(&departed_lock);
    for (unsigned k = 0; k < DEPARTED_KEPT && !found; k++) {
        unsigned i = (departed_next - 1 - k) % DEPARTED_KEPT; /* the newest first: handles are reused */
        if (departed[i].module == cu_module && departed[i].owner[0]) {
            snprintf(desc, cap, "%s", departed[i].owner);
            found = true;
        }
    }
    pthread_mutex_unlock(&departed_lock);
    return found;
}

void module_free(struct srv_client *c, struct srv_module *mod)
{
    uint32_t h = mod->handle;
    use_gpu(c, mod->gpu);
    departed_note(c, mod);
    /* Its functions and globals die with it. */
    SRV_FOR_EACH_HANDLE(c, i) {
        struct srv_function *f = handle_get(c, i, OBJ_FUNCTION);
        if (f && f->module == h) {
            handle_drop(c, i);
            free(f->param_offsets);
            free(f->param_sizes);
            free(f->name);
            free(f);
        }
    }
    for (size_t i = 0; i < mod->nglobals; i++)
        cumux_ranges_remove(&c->memory.dev_ranges, mod->globals[i], NULL);
    free(mod->globals);
    /* Unloading waits for every kernel in the context: the reaper does it. */
    if (mod->borrowed)
        ; /* the library it came from owns it */
    else if (mod->kind == CUMUX_IMAGE_LIBRARY)
        srv_reap(REAP_LIBRARY, mod->gpu, mod->image, mod->image_size, mod->lib);
    else
        srv_reap(REAP_MODULE, mod->gpu, mod->image, mod->image_size, mod->mod);
    handle_drop(c, h);
    free(mod);
}

/* The client's image, read-only: exactly its `size` bytes, then zeros to the end of a page and one page
 * more. The driver reads PTX as a C string and finds a fatbin's or an ELF's length in its headers, from
 * bytes the client chose: without zeros of ours right after `size`, a strlen would run off the end of the
 * mapping (or, for an image ending on a page boundary, into the page past the end of the file: SIGBUS),
 * and the rest of a file longer than `size` would show through after it, unchecked by srv_image_fits.
 * Whole pages are mapped from the file; the last partial page is copied. */
void *srv_map_image(int fd, size_t size, size_t *map_len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t full = size / page * page, rem = size - full;
    size_t len = full + (rem ? page : 0) + page;
    uint8_t *base = cumux_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    if ((full && cumux_mmap(base, full, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) ||
        (rem && pread(fd, base + full, rem, (off_t)full) != (ssize_t)rem) ||
        mprotect(base + full, len - full, PROT_READ) < 0) {
        munmap(base, len);
        return NULL;
    }
    *map_len = len;
    return base;
}

CUresult srv_library_load(CUlibrary *lib, const void *image, CUjit_option *opts, void **vals, unsigned n)
{
    /* The image stays mapped until the library is unloaded (the reaper unloads, then unmaps): the driver
     * need not keep a copy of its own, as it does not for the runtime's images in a program's binary. */
    CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
    void *val = (void *)(uintptr_t)1;
    return cuLibraryLoadData(lib, image, n ? opts : NULL, n ? vals : NULL, n, &opt, &val, 1);
}

CUresult op_module_load(struct srv_client *c, const struct cumux_module_load *m, const uint8_t *payload,
                        uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    /* The driver parses the image while the client could still write it: forbid writes and shrinking. */
    int fd = recv_sealed_fd(c, m->size, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* JIT options: numbers only (the shim keeps the pointer ones, the logs, to itself). */
    enum { MAX_JIT_OPTIONS = 32 };
    CUjit_option opts[MAX_JIT_OPTIONS];
    void *vals[MAX_JIT_OPTIONS];
    if (m->noptions > MAX_JIT_OPTIONS || payload_len < (uint64_t)m->noptions * sizeof(struct cumux_link_option)) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (uint32_t i = 0; i < m->noptions; i++) {
        struct cumux_link_option o;
        memcpy(&o, payload + i * sizeof o, sizeof o);
        if (!cumux_jit_scalar_option(o.option)) {
            close(fd);
            return CUDA_ERROR_INVALID_VALUE;
        }
        opts[i] = (CUjit_option)o.option;
        vals[i] = (void *)(uintptr_t)o.value;
    }
    struct srv_ctx *x = handle_get(c, m->ctx, OBJ_CTX);
    if (!x || (m->kind != CUMUX_IMAGE_MODULE && m->kind != CUMUX_IMAGE_LIBRARY) || m->size == 0 ||
        m->size > (4ull << 30)) {
        close(fd);
        return x ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_INVALID_CONTEXT;
    }
    struct srv_module *mod = calloc(1, sizeof *mod);
    if (!mod) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mod->image = srv_map_image(fd, (size_t)m->size, &mod->image_size);
    close(fd);
    if (!mod->image) {
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!srv_image_fits(mod->image, m->size)) {
        munmap(mod->image, mod->image_size);
        free(mod);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    mod->kind = m->kind;
    mod->ctx = m->kind == CUMUX_IMAGE_LIBRARY ? NULL : x;
    mod->gpu = x->gpu;
    use_gpu(c, x->gpu);
    CUresult r = m->kind == CUMUX_IMAGE_LIBRARY
                     ? srv_library_load(&mod->lib, mod->image, opts, vals, m->noptions)
                     : cuModuleLoadDataEx(&mod->mod, mod->image, m->noptions, opts, vals);
    uint32_t h = 0;
    if (r == CUDA_SUCCESS) {
        mod->handle = h = handle_new(c, OBJ_MODULE, mod);
        if (!h) {
            if (m->kind == CUMUX_IMAGE_LIBRARY)
                cuLibraryUnload(mod->lib);
            else
                cuModuleUnload(mod->mod);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r != CUDA_SUCCESS) {
        munmap(mod->image, mod->image_size);
        free(mod);
        return r;
    }
    if (m->kind == CUMUX_IMAGE_MODULE) {
        /* The driver has its own copy of a module; a library may load lazily, so keep its image. */
        munmap(mod->image, mod->image_size);
        mod->image = NULL;
    }
    return reply_u64(out, out_len, h);
}

CUresult op_module_unload(struct srv_client *c, struct srv_module *module)
{
    module_free(c, module);
    return CUDA_SUCCESS;
}

/* The symbol name a MODULE_GET_* payload holds: non-empty, NUL-terminated within it and shorter than
 * CUMUX_NAME_MAX (the message is the worker's own copy: nothing rewrites it meanwhile). NULL if not. */
static const char *payload_name(const uint8_t *payload, uint32_t payload_len)
{
    const uint8_t *end = payload_len ? memchr(payload, 0, payload_len) : NULL;
    if (!end || end == payload || (size_t)(end - payload) >= CUMUX_NAME_MAX)
        return NULL;
    return (const char *)payload;
}

CUresult op_module_get_function(struct srv_client *c, struct srv_module *mod, const uint8_t *payload,
                                uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    const char *name = payload_name(payload, payload_len);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, mod->gpu);
    struct srv_function *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r;
    if (mod->kind == CUMUX_IMAGE_LIBRARY) {
        CUkernel k;
        r = cuLibraryGetKernel(&k, mod->lib, name);
        f->fn = (CUfunction)k;
        f->is_kernel = true;
        if (r == CUDA_SUCCESS)
            srv_library_note_module(mod, k);
    } else {
        r = cuModuleGetFunction(&f->fn, mod->mod, name);
    }
    if (r != CUDA_SUCCESS) {
        free(f);
        return r;
    }
    /* Parameter layout, so the client packs arguments itself and launches need no round trip. It is
     * gathered in server memory: the reply slot is shared memory the client can rewrite at any moment,
     * and launches index the client's argument buffer with these offsets. */
    uint32_t max = (uint32_t)((CUMUX_REPLY_DATA - sizeof(struct cumux_function_info)) / sizeof(struct cumux_param_layout));
    if (max > CUMUX_MAX_PARAMS)
        max = CUMUX_MAX_PARAMS;
    struct cumux_param_layout *layout = malloc(max * sizeof *layout);
    f->param_offsets = malloc((max + 1) * sizeof *f->param_offsets);
    f->param_sizes = malloc((max + 1) * sizeof *f->param_sizes);
    uint32_t n = 0, bytes = 0;
    for (; layout && f->param_offsets && f->param_sizes && n < max; n++) {
        size_t off, sz;
        CUresult q = f->is_kernel ? cuKernelGetParamInfo((CUkernel)f->fn, n, &off, &sz)
                                  : cuFuncGetParamInfo(f->fn, n, &off, &sz);
        if (q != CUDA_SUCCESS)
            break;
        uint64_t end;
        if (!cumux_add_u64(off, sz, &end) || end > UINT32_MAX) {
            n = 0;
            bytes = UINT32_MAX; /* a layout no launch can match: the function is unusable, not unsafe */
            break;
        }
        layout[n] = (struct cumux_param_layout){(uint32_t)off, (uint32_t)sz};
        f->param_offsets[n] = (uint32_t)off;
        f->param_sizes[n] = (uint32_t)sz;
        if (end > bytes)
            bytes = (uint32_t)end;
    }
    f->module = mod->handle;
    f->param_bytes = bytes;
    f->nparams = n;
    f->name = f->is_kernel ? strdup(name) : NULL;
    uint32_t h = layout && f->param_offsets && f->param_sizes && (!f->is_kernel || f->name)
                     ? handle_new(c, OBJ_FUNCTION, f)
                     : 0;
    if (!h) {
        free(layout);
        free(f->param_offsets);
        free(f->param_sizes);
        free(f->name);
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct cumux_function_info *info = (struct cumux_function_info *)out;
    *info = (struct cumux_function_info){.function = h, .nparams = n, .param_bytes = bytes};
    memcpy(info + 1, layout, n * sizeof *layout);
    free(layout);
    *out_len = (uint32_t)(sizeof *info + n * sizeof *layout);
    return CUDA_SUCCESS;
}

CUresult op_module_get_global(struct srv_client *c, struct srv_module *mod, const uint8_t *payload,
                              uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    const char *name = payload_name(payload, payload_len);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, mod->gpu);
    CUdeviceptr p;
    size_t sz;
    if (mod->kind == CUMUX_IMAGE_LIBRARY)
        CHECK(cuLibraryGetGlobal(&p, &sz, mod->lib, name));
    else
        CHECK(cuModuleGetGlobal(&p, &sz, mod->mod, name));
    /* The client may now copy to and from it. */
    if (sz && !cumux_ranges_find(&c->memory.dev_ranges, p)) {
        uint64_t *g = realloc(mod->globals, (mod->nglobals + 1) * sizeof *g);
        if (!g || cumux_ranges_add(&c->memory.dev_ranges, p, sz, RANGE_GLOBAL, (uint64_t)mod->gpu) < 0) {
            if (g)
                mod->globals = g;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        mod->globals = g;
        mod->globals[mod->nglobals++] = p;
    }
    struct cumux_global_info rep = {p, sz};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_module_function_names(struct srv_client *c, const struct cumux_function_names_query *m,
                                  struct srv_module *module, uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, module->gpu);
    unsigned int total = 0;
    CUresult r = module->kind == CUMUX_IMAGE_LIBRARY ? cuLibraryGetKernelCount(&total, module->lib)
                                                  : cuModuleGetFunctionCount(&total, module->mod);
    if (r != CUDA_SUCCESS)
        return r;
    void **fns = calloc(total ? total : 1, sizeof *fns);
    if (!fns)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (total)
        r = module->kind == CUMUX_IMAGE_LIBRARY ? cuLibraryEnumerateKernels((CUkernel *)fns, total, module->lib)
                                             : cuModuleEnumerateFunctions((CUfunction *)fns, total, module->mod);
    struct cumux_function_names *h = (struct cumux_function_names *)out;
    size_t used = sizeof *h;
    uint32_t count = 0;
    for (uint32_t i = m->first; r == CUDA_SUCCESS && i < total; i++) {
        const char *name = NULL;
        r = module->kind == CUMUX_IMAGE_LIBRARY ? cuKernelGetName(&name, (CUkernel)fns[i])
                                             : cuFuncGetName(&name, (CUfunction)fns[i]);
        if (r != CUDA_SUCCESS)
            break;
        size_t len = strlen(name) + 1;
        if (len > CUMUX_NAME_MAX || used + len > CUMUX_REPLY_DATA)
            break;
        memcpy(out + used, name, len);
        used += len;
        count++;
    }
    free(fns);
    if (r != CUDA_SUCCESS)
        return r;
    h->total = total;
    h->count = count;
    *out_len = (uint32_t)used;
    return CUDA_SUCCESS;
}

CUresult op_arch_data(struct srv_client *c, const struct cumux_arch_data_query *m, uint8_t *out,
                      uint32_t *out_len)
{
    use_gpu(c, m->device);
    return srv_arch_data(m->device, out, CUMUX_REPLY_DATA, out_len);
}

CUresult op_library_get_module(struct srv_client *c, struct srv_module *library, uint8_t *out, uint32_t *out_len)
{
    if (library->kind != CUMUX_IMAGE_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    use_gpu(c, library->gpu);
    struct srv_module *mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuLibraryGetModule(&mod->mod, library->lib);
    uint32_t h = 0;
    if (r == CUDA_SUCCESS) {
        mod->kind = CUMUX_IMAGE_MODULE;
        mod->borrowed = true;
        mod->gpu = library->gpu;
        mod->ctx = library->ctx;
        mod->handle = h = handle_new(c, OBJ_MODULE, mod);
        if (!h)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
        free(mod);
        return r;
    }
    return reply_u64(out, out_len, h);
}

CUresult op_func_occupancy(struct srv_client *c, const struct cumux_func_occupancy *m,
                           struct srv_function *function, uint8_t *out, uint32_t *out_len)
{
    struct srv_module *mod = handle_get(c, function->module, OBJ_MODULE);
    use_gpu(c, mod ? mod->gpu : 0);
    CUfunction fn = function->fn;
    if (function->is_kernel) /* occupancy queries want the kernel's function in this context */
        CHECK(cuKernelGetFunction(&fn, (CUkernel)function->fn));
    if (m->query == CUMUX_OCC_MAX_ACTIVE_BLOCKS) {
        int blocks = 0;
        CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, fn, m->a, (size_t)m->dyn_smem, m->flags));
        return reply_u64(out, out_len, (uint64_t)blocks);
    }
    if (m->query == CUMUX_OCC_AVAILABLE_DYN_SMEM) {
        size_t bytes = 0;
        CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, fn, m->a, m->b));
        return reply_u64(out, out_len, bytes);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult op_cluster_occupancy(struct srv_client *c, const struct cumux_cluster_occupancy *m,
                              struct srv_function *function, const uint8_t *payload, uint32_t payload_len,
                              uint8_t *out, uint32_t *out_len)
{
    if (m->nattrs > 16 || (uint64_t)m->nattrs * sizeof(struct cumux_launch_attr) > payload_len || m->query > 1)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_module *mod = handle_get(c, function->module, OBJ_MODULE);
    use_gpu(c, mod ? mod->gpu : 0);
    CUfunction fn = function->fn;
    if (function->is_kernel)
        CHECK(cuKernelGetFunction(&fn, (CUkernel)function->fn));
    CUlaunchAttribute attrs[16];
    const struct cumux_launch_attr *a = (const void *)payload;
    for (uint32_t i = 0; i < m->nattrs; i++) {
        if (!cumux_launch_attr_plain(a[i].id))
            return CUDA_ERROR_INVALID_VALUE;
        attrs[i].id = (CUlaunchAttributeID)a[i].id;
        memcpy(&attrs[i].value, a[i].value, sizeof attrs[i].value);
    }
    CUlaunchConfig cfg = {.gridDimX = m->grid[0], .gridDimY = m->grid[1], .gridDimZ = m->grid[2],
                          .blockDimX = m->block[0], .blockDimY = m->block[1], .blockDimZ = m->block[2],
                          .sharedMemBytes = m->shared_bytes, .attrs = attrs, .numAttrs = m->nattrs};
    int v = 0;
    if (m->query == 0)
        CHECK(cuOccupancyMaxActiveClusters(&v, fn, &cfg));
    else
        CHECK(cuOccupancyMaxPotentialClusterSize(&v, fn, &cfg));
    return reply_u64(out, out_len, (uint64_t)v);
}

/* The GPU of a function's module, made current. */
static int function_gpu(struct srv_client *c, const struct srv_function *f)
{
    struct srv_module *mod = handle_get(c, f->module, OBJ_MODULE);
    int gpu = mod ? mod->gpu : 0;
    use_gpu(c, gpu);
    return gpu;
}

/* A library kernel's setting also made on the function its launches use (launch.c), which the driver
 * derives from the kernel: set on both, they cannot differ. Should the function refuse it, launches go back
 * to the kernel, which holds the setting. cache_config >= 0: a cache preference, else attribute attr. */
static void launch_fn_follow(struct srv_function *f, int gpu, int attr, int value, int cache_config)
{
    if (!f->launch_fn)
        return;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (f->launch_gpu == gpu)
        r = cache_config >= 0 ? cuFuncSetCacheConfig(f->launch_fn, (CUfunc_cache)cache_config)
                              : cuFuncSetAttribute(f->launch_fn, (CUfunction_attribute)attr, value);
    if (r != CUDA_SUCCESS) {
        f->launch_fn = NULL;
        f->launch_unresolved = true;
    }
}

CUresult op_func_get_attribute(struct srv_client *c, const struct cumux_func_attr *m,
                               struct srv_function *function, uint8_t *out, uint32_t *out_len)
{
    struct srv_function *f = function;
    int gpu = function_gpu(c, f);
    int v = 0;
    if (f->is_kernel)
        CHECK(cuKernelGetAttribute(&v, (CUfunction_attribute)m->attr, (CUkernel)f->fn, srv_gpus[gpu].dev));
    else
        CHECK(cuFuncGetAttribute(&v, (CUfunction_attribute)m->attr, f->fn));
    return reply_u64(out, out_len, (uint64_t)(int64_t)v);
}

CUresult op_func_set_attribute(struct srv_client *c, const struct cumux_func_attr *m,
                               struct srv_function *function)
{
    struct srv_function *f = function;
    int gpu = function_gpu(c, f);
    if (f->is_kernel) {
        CUresult r = cuKernelSetAttribute((CUfunction_attribute)m->attr, m->value, (CUkernel)f->fn, srv_gpus[gpu].dev);
        if (r == CUDA_SUCCESS)
            launch_fn_follow(f, gpu, m->attr, m->value, -1);
        return r;
    }
    return cuFuncSetAttribute(f->fn, (CUfunction_attribute)m->attr, m->value);
}

CUresult op_func_set_cache_config(struct srv_client *c, const struct cumux_func_cache_config *m,
                                  struct srv_function *function)
{
    if (m->config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_function *f = function;
    int gpu = function_gpu(c, f);
    if (f->is_kernel) {
        CUresult r = cuKernelSetCacheConfig((CUkernel)f->fn, (CUfunc_cache)m->config, srv_gpus[gpu].dev);
        if (r == CUDA_SUCCESS)
            launch_fn_follow(f, gpu, 0, 0, (int)m->config);
        return r;
    }
    return cuFuncSetCacheConfig(f->fn, (CUfunc_cache)m->config);
}

bool srv_module_owned(struct srv_client *c, uint64_t cu_module)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (!mod)
            continue;
        if (mod->mod && (uint64_t)(uintptr_t)mod->mod == cu_module)
            return true;
        if (mod->lib_module && (uint64_t)(uintptr_t)mod->lib_module == cu_module)
            return true; /* noted at its kernels' lookup: the driver no longer answers once faulted */
    }
    return false;
}
