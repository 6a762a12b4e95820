/* JIT linking (cuLink*), done by the server's driver (server/link.c). The shim keeps what the driver would
 * write into the program's memory: the log buffers it was given (filled from the server's logs after each
 * call) and the linked image (read back once, owned by the state, as the driver's is). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/jit.h"
#include "shim/client.h"


struct CUlinkState_st {
    uint32_t magic;
    uint32_t handle;
    char *info, *error;             /* the program's log buffers, or NULL */
    size_t info_size, error_size;
    /* The program's size options, where the driver reports the bytes it wrote: the arrays given to
     * cuLinkCreate must stay valid for the state's life when they hold output options. */
    void **info_used, **error_used;
    void *image;
    size_t image_size;
};

static struct CUlinkState_st *link_of(CUlinkState s)
{
    return s && s->magic == SHIM_MAGIC_LINK ? s : NULL;
}

/* The server's logs into the program's buffers (NUL-terminated, as the driver writes them). */
static void copy_logs(struct CUlinkState_st *l)
{
    if (!l->info && !l->error)
        return;
    struct cumux_link_ref m = {.link = l->handle};
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    struct cumux_link_logs_reply rep;
    if (shim_call(CUMUX_OP_LINK_LOGS, &m, sizeof m, buf, sizeof buf, &len) != CUDA_SUCCESS || len < sizeof rep)
        return;
    memcpy(&rep, buf, sizeof rep);
    if ((uint64_t)rep.info_len + rep.error_len > len - sizeof rep)
        return;
    const char *text[2] = {(const char *)buf + sizeof rep, (const char *)buf + sizeof rep + rep.info_len};
    size_t n[2] = {rep.info_len, rep.error_len};
    char *dst[2] = {l->info, l->error};
    size_t cap[2] = {l->info_size, l->error_size};
    void **used[2] = {l->info_used, l->error_used};
    for (int i = 0; i < 2; i++) {
        if (!dst[i] || !cap[i])
            continue;
        size_t k = n[i] < cap[i] - 1 ? n[i] : cap[i] - 1;
        memcpy(dst[i], text[i], k);
        dst[i][k] = 0;
        if (used[i])
            *used[i] = (void *)(uintptr_t)k;
    }
}

CUresult cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (n && (!opts || !vals)) || n > 32)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUlinkState_st *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct {
        struct cumux_link_create m;
        struct cumux_link_option o[32];
    } msg = {.m = {.ctx = c->handle}};
    for (unsigned i = 0; i < n; i++) {
        switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER: l->info = vals[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER: l->error = vals[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            l->info_size = (size_t)(uintptr_t)vals[i], l->info_used = &vals[i];
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            l->error_size = (size_t)(uintptr_t)vals[i], l->error_used = &vals[i];
            break;
        default:
            if (!cumux_jit_scalar_option((uint32_t)opts[i])) {
                free(l);
                return cumux_unsupported("cuLinkCreate with a JIT option that is not a number (wall time, symbols)");
            }
            msg.o[msg.m.count++] = (struct cumux_link_option){.option = (uint32_t)opts[i],
                                                              .value = (uint64_t)(uintptr_t)vals[i]};
        }
    }
    uint64_t h;
    r = shim_call(CUMUX_OP_LINK_CREATE, &msg, sizeof msg.m + msg.m.count * sizeof msg.o[0], &h, sizeof h, NULL);
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    l->magic = SHIM_MAGIC_LINK;
    l->handle = (uint32_t)h;
    *out = l;
    return CUDA_SUCCESS;
}

CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name,
                       unsigned int n, CUjit_option *opts, void **vals)
{
    (void)opts;
    (void)vals;
    struct CUlinkState_st *l = link_of(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n) {
        return cumux_unsupported("cuLinkAddData with options of one input");
    }
    struct cumux_link_add m = {.link = l->handle, .type = (uint32_t)type, .size = size};
    if (name)
        strncpy(m.name, name, sizeof m.name - 1);
    int fd = shim_sealable_memfd("cumux-link", data, size);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = shim_call_fd(fd, CUMUX_OP_LINK_ADD, &m, sizeof m, NULL, 0, NULL);
    close(fd);
    copy_logs(l);
    return r;
}

CUresult cuLinkAddFile(CUlinkState s, CUjitInputType type, const char *path, unsigned int n, CUjit_option *opts,
                       void **vals)
{
    if (!link_of(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b, cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    buf[len] = 0; /* PTX is text: the driver reads it to its NUL */
    CUresult r = cuLinkAddData(s, type, buf, type == CU_JIT_INPUT_PTX ? len + 1 : len, path, n, opts, vals);
    free(buf);
    return r;
}

CUresult cuLinkComplete(CUlinkState s, void **image, size_t *size)
{
    struct CUlinkState_st *l = link_of(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!image || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (!l->image) {
        uint64_t n;
        CUresult r = shim_op_link_complete(l->handle, &n);
        copy_logs(l);
        if (r != CUDA_SUCCESS)
            return r;
        int fd = memfd_create("cumux-linked", MFD_CLOEXEC);
        void *img = n ? malloc((size_t)n) : NULL;
        if (fd < 0 || !img) {
            if (fd >= 0)
                close(fd);
            free(img);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        struct cumux_link_read rd = {.link = l->handle, .size = n};
        r = shim_call_fd(fd, CUMUX_OP_LINK_READ, &rd, sizeof rd, NULL, 0, NULL);
        if (r == CUDA_SUCCESS && pread(fd, img, (size_t)n, 0) != (ssize_t)n)
            r = CUDA_ERROR_UNKNOWN;
        close(fd);
        if (r != CUDA_SUCCESS) {
            free(img);
            return r;
        }
        l->image = img;
        l->image_size = (size_t)n;
    }
    *image = l->image;
    *size = l->image_size;
    return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState s)
{
    struct CUlinkState_st *l = link_of(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = shim_op_link_destroy(l->handle);
    l->magic = SHIM_MAGIC_DEAD;
    free(l->image);
    l->image = NULL;
    return r;
}
