/* Modules and libraries: the image goes to the server in a sealed memfd; kernels come back with their
 * parameter layout, so that launching one needs no round trip. */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/jit.h"
#include "shim/client.h"
#include "shim/image.h"

/* ---- the length of an image given only its address ---- */
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u

struct fatbin_wrapper {
    uint32_t magic;
    uint32_t version;
    const void *data;
    const void *filename_or_fatbins;
};

struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
};

size_t cumux_image_size(const void *image, const void **start)
{
    const uint8_t *p = image;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBIN_WRAPPER_MAGIC) {
        const struct fatbin_wrapper *w = image;
        return cumux_image_size(w->data, start);
    }
    *start = image;
    if (magic == FATBIN_MAGIC) {
        /* One container: its header says how long it is. Nothing after it may be read: the image may end
         * there (a buffer the size of a .fatbin file, or the last bytes of a mapping), and the driver is
         * handed one container per registration. */
        struct fatbin_header h;
        memcpy(&h, p, sizeof h);
        if (h.header_size < sizeof h || h.fat_size > SIZE_MAX - h.header_size)
            return 0;
        return h.header_size + h.fat_size;
    }
    if (!memcmp(p, ELFMAG, SELFMAG) && p[EI_CLASS] == ELFCLASS64) {
        Elf64_Ehdr eh;
        memcpy(&eh, p, sizeof eh);
        /* The image ends with its last table or section: the section headers may come after the program
         * headers or before them (Triton puts them first). */
        size_t end = sizeof eh;
        size_t sh_end = eh.e_shoff + (size_t)eh.e_shnum * eh.e_shentsize;
        size_t ph_end = eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize;
        if (sh_end > end)
            end = sh_end;
        if (ph_end > end)
            end = ph_end;
        for (int i = 0; i < eh.e_shnum; i++) {
            Elf64_Shdr sh;
            memcpy(&sh, p + eh.e_shoff + (size_t)i * eh.e_shentsize, sizeof sh);
            if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end)
                end = sh.sh_offset + sh.sh_size;
        }
        return end;
    }
    /* Otherwise PTX text, with its terminating NUL. */
    return strlen((const char *)p) + 1;
}

/* ---- loading ---- */
/* The JIT options a load sends: the numbers; the logs it asks for are left empty (and their used sizes
 * 0). Others (wall time, symbol tables) are not supported. */
struct jit_options {
    struct cumux_module_load m;
    struct cumux_link_option o[32];
};

static CUresult jit_options(unsigned n, CUjit_option *opts, void **vals, struct jit_options *j)
{
    if (n && (!opts || !vals))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER:
        case CU_JIT_ERROR_LOG_BUFFER:
            if (vals[i])
                *(char *)vals[i] = 0;
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            vals[i] = NULL; /* the bytes written: none */
            break;
        default:
            if (!cumux_jit_scalar_option((uint32_t)opts[i]) || j->m.noptions == 32)
                return cumux_unsupported("a JIT option that is not a number, or more than 32 of them");
            j->o[j->m.noptions++] = (struct cumux_link_option){.option = (uint32_t)opts[i],
                                                               .value = (uint64_t)(uintptr_t)vals[i]};
        }
    }
    return CUDA_SUCCESS;
}

/* Every module and library the program loaded, to load them again after a resume. */
static struct shim_list all_modules = SHIM_LIST_INIT;

static CUresult load_image(const void *image, uint32_t kind, const struct jit_options *jit, struct CUmod_st **out)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!image || !out)
        return CUDA_ERROR_INVALID_VALUE;
    const void *start;
    size_t size = cumux_image_size(image, &start);
    if (size == 0)
        return CUDA_ERROR_INVALID_IMAGE;
    int fd = shim_sealable_memfd("cumux-image", start, size);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct jit_options req = {.m = {.ctx = c->handle, .kind = kind, .size = size}};
    if (jit) {
        req.m.noptions = jit->m.noptions;
        memcpy(req.o, jit->o, jit->m.noptions * sizeof req.o[0]);
    }
    struct cumux_u64_reply rep;
    r = shim_call_fd(fd, CUMUX_OP_MODULE_LOAD, &req, sizeof req.m + req.m.noptions * sizeof req.o[0], &rep, sizeof rep,
                     NULL);
    /* Kept to load it again in the worker that takes over after a fault (when this server can resume), and
     * a library's to load it in another GPU's worker (library_on_gpu). */
    bool kept = shim.resume_token || kind == CUMUX_IMAGE_LIBRARY;
    struct jit_options *keep = kept && r == CUDA_SUCCESS ? malloc(sizeof *keep) : NULL;
    if (keep)
        *keep = req;
    else
        close(fd);
    if (r != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    m->magic = kind == CUMUX_IMAGE_LIBRARY ? SHIM_MAGIC_LIBRARY : SHIM_MAGIC_MODULE;
    m->handle = (uint32_t)rep.value;
    m->ctx = c;
    m->image_fd = keep ? fd : -1;
    m->load = keep;
    pthread_mutex_init(&m->lock, NULL);
    shim_list_add(&all_modules, m);
    *out = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return load_image(image, CUMUX_IMAGE_MODULE, NULL, (struct CUmod_st **)module);
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n, CUjit_option *opts, void **vals)
{
    struct jit_options j = {0};
    CUresult r = jit_options(n, opts, vals, &j);
    return r != CUDA_SUCCESS ? r : load_image(image, CUMUX_IMAGE_MODULE, &j, (struct CUmod_st **)module);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatbin)
{
    return cuModuleLoadData(module, fatbin);
}

static void *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (buf = malloc((size_t)st.st_size + 1))) {
        size_t done = 0;
        while (done < (size_t)st.st_size) {
            ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
            if (n <= 0)
                break;
            done += (size_t)n;
        }
        if (done != (size_t)st.st_size) {
            free(buf);
            buf = NULL;
        } else {
            buf[done] = 0; /* PTX text needs its NUL */
            *len = done;
        }
    }
    close(fd);
    return buf;
}

CUresult cuModuleLoad(CUmodule *module, const char *path)
{
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    size_t len;
    void *img = read_file(path, &len);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = cuModuleLoadData(module, img);
    free(img);
    return r;
}

static CUresult unload(struct CUmod_st *m)
{
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        struct CUmod_st *copy = m->on_gpu[g];
        if (copy && copy->magic == SHIM_MAGIC_LIBRARY)
            unload(copy); /* its GPU's worker may be gone: the library is unloaded here all the same */
    }
    CUresult r = shim_op_module_unload(m->handle);
    m->magic = SHIM_MAGIC_DEAD;
    if (m->image_fd >= 0)
        close(m->image_fd);
    m->image_fd = -1;
    free(m->load);
    m->load = NULL;
    for (struct CUfunc_st *f = m->functions; f; f = f->next)
        f->magic = SHIM_MAGIC_DEAD; /* kept allocated: stale handles fail their check */
    return r;
}

CUresult cuModuleUnload(CUmodule m)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!m || m->magic != SHIM_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    return unload(m);
}

/* Every function object by its server handle (a graph kernel node's parameters name it by handle). */
static struct shim_table functions_by_handle;
static pthread_mutex_t fn_table_lock = PTHREAD_MUTEX_INITIALIZER;

static void function_remember(struct CUfunc_st *f)
{
    pthread_mutex_lock(&fn_table_lock);
    void **slot = shim_table_slot(&functions_by_handle, f->handle);
    if (slot)
        *slot = f;
    pthread_mutex_unlock(&fn_table_lock);
}

struct CUfunc_st *shim_function_of(uint32_t handle)
{
    pthread_mutex_lock(&fn_table_lock);
    struct CUfunc_st *f = shim_table_get(&functions_by_handle, handle);
    pthread_mutex_unlock(&fn_table_lock);
    return f && f->magic == SHIM_MAGIC_FUNCTION && f->handle == handle ? f : NULL;
}

/* MODULE_GET_FUNCTION or _GLOBAL of `name` in the server's module `module`: the name goes as the payload. */
static CUresult symbol_call(uint16_t op, uint32_t module, const char *name, void *reply, uint32_t cap,
                            uint32_t *reply_len)
{
    size_t nl = strlen(name);
    if (!nl)
        return CUDA_ERROR_INVALID_VALUE; /* what the server answers an empty name */
    _Static_assert(CUMUX_NAME_MAX == 16u << 10, "the line logged below says 16 KiB");
    if (nl >= CUMUX_NAME_MAX) /* natively any length: say which call, once, rather than "not found" */
        return cumux_unsupported("a module or library symbol name of 16 KiB or more");
    struct cumux_module_symbol *req = malloc(sizeof *req + nl + 1);
    if (!req)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *req = (struct cumux_module_symbol){.module = module};
    memcpy(req + 1, name, nl + 1);
    CUresult r = shim_call(op, req, sizeof *req + nl + 1, reply, cap, reply_len);
    free(req);
    return r;
}

static CUresult get_function(struct CUmod_st *m, const char *name, struct CUfunc_st **out)
{
    if (!name || !out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&m->lock);
    for (struct CUfunc_st *f = m->functions; f; f = f->next) {
        if (!strcmp(f->name, name)) {
            *out = f;
            pthread_mutex_unlock(&m->lock);
            return CUDA_SUCCESS;
        }
    }
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    CUresult r = symbol_call(CUMUX_OP_MODULE_GET_FUNCTION, m->handle, name, buf, sizeof buf, &len);
    struct cumux_function_info info;
    if (r == CUDA_SUCCESS) {
        memcpy(&info, buf, sizeof info);
        if (len < sizeof info + (size_t)info.nparams * sizeof(struct cumux_param_layout) || info.nparams > CUMUX_MAX_PARAMS)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    struct CUfunc_st *f = NULL;
    if (r == CUDA_SUCCESS && (!(f = calloc(1, sizeof *f)) || !(f->name = strdup(name)) ||
                              !(f->params = malloc((info.nparams + 1) * sizeof *f->params)))) {
        if (f)
            free(f->name);
        free(f);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        f->magic = SHIM_MAGIC_FUNCTION;
        f->handle = info.function;
        f->module = m;
        f->nparams = info.nparams;
        f->param_bytes = info.param_bytes;
        memcpy(f->params, buf + sizeof info, info.nparams * sizeof *f->params);
        f->next = m->functions;
        m->functions = f;
        function_remember(f);
        *out = f;
    }
    pthread_mutex_unlock(&m->lock);
    return r;
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!m || m->magic != SHIM_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_function(m, name, fn);
}

/* How many functions m has (*total) and, when fns is not NULL, the first max of them, looked up by the
 * names the server lists page by page. */
static CUresult list_functions(struct CUmod_st *m, unsigned int *total, struct CUfunc_st **fns, unsigned int max)
{
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t got = 0;
    for (;;) {
        struct cumux_function_names_query req = {.module = m->handle, .first = fns ? got : UINT32_MAX};
        uint32_t len = 0;
        CUresult r = shim_call(CUMUX_OP_MODULE_FUNCTION_NAMES, &req, sizeof req, buf, sizeof buf, &len);
        if (r != CUDA_SUCCESS)
            return r;
        struct cumux_function_names h;
        if (len < sizeof h)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(&h, buf, sizeof h);
        if (total)
            *total = h.total;
        if (!fns || got >= max || got >= h.total)
            return CUDA_SUCCESS;
        if (!h.count)
            return CUDA_ERROR_INVALID_VALUE; /* a name that does not fit a reply */
        /* get_function makes round trips of its own, which reuse nothing of buf's names: copy them. */
        size_t names_len = len - sizeof h;
        char *names = malloc(names_len + 1);
        if (!names)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(names, buf + sizeof h, names_len);
        names[names_len] = 0;
        const char *p = names;
        for (uint32_t i = 0; i < h.count && got < max && r == CUDA_SUCCESS; i++) {
            if ((size_t)(p - names) >= names_len) {
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            r = get_function(m, p, &fns[got]);
            got += r == CUDA_SUCCESS;
            p += strlen(p) + 1;
        }
        free(names);
        if (r != CUDA_SUCCESS)
            return r;
    }
}

/* cuModuleGetFunctionCount / cuLibraryGetKernelCount (fns NULL), and the enumerations. */
static CUresult functions_of(void *h, uint32_t magic, unsigned int *count, struct CUfunc_st **fns, unsigned int n)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUmod_st *m = h;
    if (!m || m->magic != magic)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!fns && !count)
        return CUDA_ERROR_INVALID_VALUE;
    return list_functions(m, count, fns, n);
}

CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    return functions_of(mod, SHIM_MAGIC_MODULE, count, NULL, 0);
}

CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int n, CUmodule mod)
{
    if (!functions)
        return CUDA_ERROR_INVALID_VALUE;
    return functions_of(mod, SHIM_MAGIC_MODULE, NULL, (struct CUfunc_st **)functions, n);
}

CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    return functions_of(lib, SHIM_MAGIC_LIBRARY, count, NULL, 0);
}

CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int n, CUlibrary lib)
{
    if (!kernels)
        return CUDA_ERROR_INVALID_VALUE;
    return functions_of(lib, SHIM_MAGIC_LIBRARY, NULL, (struct CUfunc_st **)kernels, n);
}

static CUresult get_global(struct CUmod_st *m, CUdeviceptr *dptr, size_t *bytes, const char *name)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_global_info rep;
    CUresult r = symbol_call(CUMUX_OP_MODULE_GET_GLOBAL, m->handle, name, &rep, sizeof rep, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (rep.size)
        shim_add_device_range(rep.ptr, rep.size, m->ctx, SHIM_RANGE_GLOBAL);
    /* Each GPU's worker is a process of its own, whose driver places a module's globals: should two GPUs'
     * meet at one address, the program could not tell them apart (one address, one GPU, as in CUDA). */
    if (rep.size && shim_ptr_device(rep.ptr) != m->ctx->device)
        return cumux_unsupported("a module global at an address another GPU's worker gave out too");
    if (dptr && rep.size) {
        pthread_mutex_lock(&m->lock);
        m->globals_asked++;
        pthread_mutex_unlock(&m->lock);
    }
    if (dptr)
        *dptr = (CUdeviceptr)rep.ptr;
    if (bytes)
        *bytes = (size_t)rep.size;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!m || m->magic != SHIM_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(m, dptr, bytes, name);
}

/* ---- libraries (context-independent loading, CUDA 12) ---- */
/* A library belongs to no context: the driver loads it in each context that uses it. Here the program's
 * library was loaded in its GPU's worker, and a kernel or global of it asked for on another GPU is looked up
 * in a copy of it loaded there, in that GPU's primary context, at the first use (a program of the CUDA runtime
 * loads all its code as libraries, once, and runs it on every GPU it sets). */
static pthread_mutex_t copies_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult library_on_gpu(struct CUmod_st *lib, int gpu, struct CUmod_st **out)
{
    if (lib->origin)
        lib = lib->origin;
    if (CUMUX_HANDLE_GPU(lib->handle) == gpu) {
        *out = lib;
        return CUDA_SUCCESS;
    }
    int dev = shim_program_gpu(gpu);
    if (gpu < 0 || gpu >= CUMUX_MAX_DEVICES || dev < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&copies_lock);
    struct CUmod_st *copy = lib->on_gpu[gpu];
    if (copy && copy->magic == SHIM_MAGIC_LIBRARY && copy->ctx->magic == SHIM_MAGIC_CTX &&
        copy->ctx->generation == copy->ctx_generation) {
        pthread_mutex_unlock(&copies_lock);
        *out = copy;
        return CUDA_SUCCESS;
    }
    if (copy) /* its context was reset: its handles are gone with it */
        copy->magic = SHIM_MAGIC_DEAD;
    CUresult r = lib->magic != SHIM_MAGIC_LIBRARY ? CUDA_ERROR_INVALID_HANDLE
                 : lib->image_fd < 0 || !lib->load ? CUDA_ERROR_INVALID_IMAGE
                                                     : CUDA_SUCCESS;
    /* The copies' primary context of each GPU: retained once, for the program's life. */
    static CUcontext primary[CUMUX_MAX_DEVICES];
    if (r == CUDA_SUCCESS && !primary[gpu])
        r = cuDevicePrimaryCtxRetain(&primary[gpu], dev);
    CUcontext pc = primary[gpu];
    copy = r == CUDA_SUCCESS ? calloc(1, sizeof *copy) : NULL;
    if (r == CUDA_SUCCESS && !copy)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    struct cumux_u64_reply rep;
    if (r == CUDA_SUCCESS) {
        struct jit_options req = *(struct jit_options *)lib->load;
        req.m.ctx = pc->handle;
        r = shim_call_fd(lib->image_fd, CUMUX_OP_MODULE_LOAD, &req, sizeof req.m + req.m.noptions * sizeof req.o[0],
                         &rep, sizeof rep, NULL);
    }
    if (r != CUDA_SUCCESS) {
        free(copy);
        pthread_mutex_unlock(&copies_lock);
        return r;
    }
    copy->magic = SHIM_MAGIC_LIBRARY;
    copy->handle = (uint32_t)rep.value;
    copy->ctx = pc;
    copy->ctx_generation = pc->generation;
    copy->image_fd = -1;
    copy->origin = lib;
    pthread_mutex_init(&copy->lock, NULL);
    lib->on_gpu[gpu] = copy;
    pthread_mutex_unlock(&copies_lock);
    *out = copy;
    return CUDA_SUCCESS;
}

CUresult shim_function_on_gpu(struct CUfunc_st *f, int gpu, struct CUfunc_st **out)
{
    if (CUMUX_HANDLE_GPU(f->handle) == gpu) {
        *out = f;
        return CUDA_SUCCESS;
    }
    if (f->origin)
        f = f->origin;
    if (CUMUX_HANDLE_GPU(f->handle) == gpu) {
        *out = f;
        return CUDA_SUCCESS;
    }
    if (f->module->magic != SHIM_MAGIC_LIBRARY || gpu < 0 || gpu >= CUMUX_MAX_DEVICES)
        return CUDA_ERROR_INVALID_HANDLE; /* a module's function is its context's */
    struct CUfunc_st *copy = __atomic_load_n(&f->on_gpu[gpu], __ATOMIC_ACQUIRE);
    if (copy && copy->magic == SHIM_MAGIC_FUNCTION) {
        *out = copy;
        return CUDA_SUCCESS;
    }
    struct CUmod_st *lib;
    CUresult r = library_on_gpu(f->module, gpu, &lib);
    if (r == CUDA_SUCCESS)
        r = get_function(lib, f->name, &copy);
    if (r != CUDA_SUCCESS)
        return r;
    copy->origin = f;
    __atomic_store_n(&f->on_gpu[gpu], copy, __ATOMIC_RELEASE);
    *out = copy;
    return CUDA_SUCCESS;
}

/* The server's GPU of the calling thread's current context; -1: none current. */
static int current_gpu(void)
{
    struct CUctx_st *c = shim_current_ctx();
    return c && c->magic == SHIM_MAGIC_CTX && c->device >= 0 && c->device < shim.device_count
               ? shim.server_gpu[c->device]
               : -1;
}

CUresult shim_function_for(struct CUfunc_st *f, int dev, struct CUfunc_st **out)
{
    *out = f;
    if (!shim_several_gpus()) /* first: attributes are asked tens of thousands of times */
        return CUDA_SUCCESS;
    int gpu = dev >= 0 && dev < shim.device_count ? shim.server_gpu[dev] : current_gpu();
    return gpu < 0 ? CUDA_SUCCESS : shim_function_on_gpu(f, gpu, out);
}

/* A library as the current context's GPU has it. */
static CUresult library_here(struct CUmod_st *lib, struct CUmod_st **out)
{
    *out = lib;
    if (!shim_several_gpus())
        return CUDA_SUCCESS;
    int gpu = current_gpu();
    return gpu < 0 ? CUDA_SUCCESS : library_on_gpu(lib, gpu, out);
}

CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jit_opts, void **jit_vals,
                           unsigned int njit, CUlibraryOption *opts, void **vals, unsigned int nopts)
{
    (void)opts; /* library options are hints (the image is preserved: the shim's copy is the server's) */
    (void)vals;
    (void)nopts;
    if (!lib)
        return CUDA_ERROR_INVALID_VALUE;
    struct jit_options j = {0};
    CUresult jr = jit_options(njit, jit_opts, jit_vals, &j);
    if (jr != CUDA_SUCCESS)
        return jr;
    /* A library needs a context in the server: take the primary one of device 0 if none is current. */
    if (!shim_current_ctx() && shim.initialized) {
        CUcontext pc;
        CUresult r = cuDevicePrimaryCtxRetain(&pc, 0);
        if (r != CUDA_SUCCESS)
            return r;
        r = cuCtxPushCurrent(pc);
        if (r != CUDA_SUCCESS)
            return r;
        r = load_image(code, CUMUX_IMAGE_LIBRARY, &j, (struct CUmod_st **)lib);
        cuCtxPopCurrent(&pc);
        return r;
    }
    return load_image(code, CUMUX_IMAGE_LIBRARY, &j, (struct CUmod_st **)lib);
}

CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *path, CUjit_option *jit_opts, void **jit_vals,
                               unsigned int njit, CUlibraryOption *opts, void **vals, unsigned int nopts)
{
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    size_t len;
    void *img = read_file(path, &len);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = cuLibraryLoadData(lib, img, jit_opts, jit_vals, njit, opts, vals, nopts);
    free(img);
    return r;
}

CUresult cuLibraryUnload(CUlibrary lib)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUmod_st *m = (struct CUmod_st *)lib;
    if (!m || m->magic != SHIM_MAGIC_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    return unload(m);
}

CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUmod_st *m = (struct CUmod_st *)lib;
    if (!m || m->magic != SHIM_MAGIC_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_function(m, name, (struct CUfunc_st **)k);
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib, const char *name)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUmod_st *m = (struct CUmod_st *)lib;
    if (!m || m->magic != SHIM_MAGIC_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = library_here(m, &m); /* the current context's GPU's global */
    return r != CUDA_SUCCESS ? r : get_global(m, dptr, bytes, name);
}

CUresult cuKernelGetFunction(CUfunction *fn, CUkernel k)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUfunc_st *f = (struct CUfunc_st *)k;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION || !fn)
        return CUDA_ERROR_INVALID_HANDLE;
    /* A worker launches the kernel handle in its one context: the kernel is its own function there, and its
     * copy's on another GPU. */
    return shim_function_for(f, -1, (struct CUfunc_st **)fn);
}

/* The library a kernel came from (a kernel is only ever looked up in a library). */
CUresult cuKernelGetLibrary(CUlibrary *lib, CUkernel k)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUfunc_st *f = (struct CUfunc_st *)k;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION || !f->module || f->module->magic != SHIM_MAGIC_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!lib)
        return CUDA_ERROR_INVALID_VALUE;
    *lib = (CUlibrary)(f->module->origin ? f->module->origin : f->module);
    return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, CUkernel k)
{
    struct CUfunc_st *f = (struct CUfunc_st *)k;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION || !name)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char **name, CUfunction fn)
{
    return cuKernelGetName(name, (CUkernel)fn);
}

CUresult cuFuncGetModule(CUmodule *mod, CUfunction fn)
{
    if (!fn || fn->magic != SHIM_MAGIC_FUNCTION || !mod)
        return CUDA_ERROR_INVALID_HANDLE;
    if (fn->module->magic != SHIM_MAGIC_MODULE)
        return cumux_unsupported("cuFuncGetModule of a library kernel");
    *mod = fn->module;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule *pmod, CUlibrary lib)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUmod_st *l = (struct CUmod_st *)lib;
    if (!l || l->magic != SHIM_MAGIC_LIBRARY)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pmod)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult lr = library_here(l, &l);
    if (lr != CUDA_SUCCESS)
        return lr;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t handle;
    CUresult r = shim_op_library_get_module(l->handle, &handle);
    if (r != CUDA_SUCCESS) {
        free(m);
        return r;
    }
    m->magic = SHIM_MAGIC_MODULE;
    m->handle = (uint32_t)handle;
    m->ctx = l->ctx;
    m->image_fd = -1; /* the library's module: not made again after a resume (yet) */
    pthread_mutex_init(&m->lock, NULL);
    *pmod = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    /* The server loads as CUDA 13 does by default, lazily, unless told otherwise like any driver. */
    const char *e = getenv("CUDA_MODULE_LOADING");
    *mode = e && !strcmp(e, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

/* Globals whose address the program holds, in modules still loaded. Such a program does not come back
 * after another's fault: a module loaded again has its globals at new addresses, reset to the image's
 * values, and what the program wrote there or keeps pointing at is gone (docs/faults.md). */
unsigned shim_module_globals_asked(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&all_modules.lock);
    for (size_t i = 0; i < all_modules.n; i++) {
        struct CUmod_st *m = all_modules.v[i];
        if (m->magic == SHIM_MAGIC_MODULE || m->magic == SHIM_MAGIC_LIBRARY)
            n += m->globals_asked;
    }
    pthread_mutex_unlock(&all_modules.lock);
    return n;
}

CUresult shim_modules_rebind(unsigned *modules, unsigned *functions)
{
    *modules = *functions = 0;
    pthread_mutex_lock(&fn_table_lock);
    if (functions_by_handle.cap)
        memset(functions_by_handle.v, 0, functions_by_handle.cap * sizeof *functions_by_handle.v);
    pthread_mutex_unlock(&fn_table_lock);
    /* sock_lock may be this thread's own (a load that found the worker gone): try, else go on; the other
     * threads wait for the resume meanwhile. */
    bool sock_locked = pthread_mutex_trylock(&shim.main.sock_lock) == 0;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&all_modules.lock);
    for (size_t i = 0; i < all_modules.n && r == CUDA_SUCCESS; i++) {
        struct CUmod_st *m = all_modules.v[i];
        if ((m->magic != SHIM_MAGIC_MODULE && m->magic != SHIM_MAGIC_LIBRARY) || m->image_fd < 0 || !m->load)
            continue;
        if (!m->ctx || m->ctx->magic != SHIM_MAGIC_CTX) {
            m->magic = SHIM_MAGIC_DEAD; /* its context was not made again */
            continue;
        }
        struct jit_options req = *(struct jit_options *)m->load;
        req.m.ctx = m->ctx->handle;
        struct cumux_u64_reply rep;
        r = shim_send_fd(m->image_fd);
        if (r == CUDA_SUCCESS)
            r = shim_call(CUMUX_OP_MODULE_LOAD, &req, sizeof req.m + req.m.noptions * sizeof req.o[0], &rep,
                          sizeof rep, NULL);
        if (r != CUDA_SUCCESS)
            break;
        m->handle = (uint32_t)rep.value;
        (*modules)++;
        pthread_mutex_lock(&m->lock);
        for (struct CUfunc_st *f = m->functions; f && r == CUDA_SUCCESS; f = f->next) {
            if (f->magic != SHIM_MAGIC_FUNCTION)
                continue;
            static __thread uint8_t buf[CUMUX_REPLY_DATA];
            uint32_t len = 0;
            r = symbol_call(CUMUX_OP_MODULE_GET_FUNCTION, m->handle, f->name, buf, sizeof buf, &len);
            struct cumux_function_info info;
            if (r == CUDA_SUCCESS && len >= sizeof info) {
                memcpy(&info, buf, sizeof info);
                f->handle = info.function;
                function_remember(f);
                (*functions)++;
                for (unsigned a = 0; a < f->nattr_set && r == CUDA_SUCCESS; a++)
                    r = shim_op_func_set_attribute(f->handle, f->attr_set[a][0], f->attr_set[a][1]);
                atomic_store(&f->cache_sent, CU_FUNC_CACHE_PREFER_NONE); /* the new copy has none yet */
            }
        }
        pthread_mutex_unlock(&m->lock);
    }
    pthread_mutex_unlock(&all_modules.lock);
    if (sock_locked)
        pthread_mutex_unlock(&shim.main.sock_lock);
    return r;
}
