/* JIT linking (cuLinkCreate, cuLinkAddData, cuLinkComplete): numba and others link PTX with the driver.
 * The link state is the server's; each input comes as a sealed memfd, mapped like a module image (so PTX
 * ends in zeros of ours) and kept until the state goes, since the driver may read it until the link
 * completes. The driver's logs go to buffers of the server's, which the client reads with LINK_LOGS;
 * the linked image goes back by pwrite(2) into a descriptor of the client's, never by a mapping the
 * client could shrink under the server. Options are scalars only: the shim handles the pointer ones. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/jit.h"
#include "server/handlers.h"

#define LINK_LOG 8192
#define LINK_MAX_OPTIONS 32
#define LINK_MAX_INPUTS 4096

struct link_input {
    void *map;
    size_t len;
};

struct srv_link {
    CUlinkState s;
    int gpu;
    uint32_t handle;
    char info[LINK_LOG], error[LINK_LOG];
    /* The driver keeps the option arrays and writes the log sizes through them at cuLinkComplete:
     * they live as long as the state (on the handler's stack they crashed cumuxd on the H200). */
    CUjit_option opt[LINK_MAX_OPTIONS + 4];
    void *val[LINK_MAX_OPTIONS + 4];
    struct link_input *inputs;
    size_t ninputs;
    void *image; /* the driver's, after cuLinkComplete; lives as long as the state */
    size_t image_size;
};

static void link_free(struct srv_client *c, struct srv_link *l)
{
    handle_drop(c, l->handle);
    use_gpu(c, l->gpu);
    cuLinkDestroy(l->s);
    for (size_t i = 0; i < l->ninputs; i++)
        munmap(l->inputs[i].map, l->inputs[i].len);
    free(l->inputs);
    free(l);
}

CUresult op_link_create(struct srv_client *c, const struct cumux_link_create *m, struct srv_ctx *ctx,
                        const uint8_t *payload, uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    if (m->count > LINK_MAX_OPTIONS || payload_len < (uint64_t)m->count * sizeof(struct cumux_link_option))
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUjit_option *opt = l->opt;
    void **val = l->val;
    unsigned n = 0;
    for (uint32_t i = 0; i < m->count; i++) {
        struct cumux_link_option o;
        memcpy(&o, payload + i * sizeof o, sizeof o);
        if (!cumux_jit_scalar_option(o.option)) {
            free(l);
            return CUDA_ERROR_INVALID_VALUE;
        }
        opt[n] = (CUjit_option)o.option;
        val[n++] = (void *)(uintptr_t)o.value;
    }
    opt[n] = CU_JIT_INFO_LOG_BUFFER, val[n++] = l->info;
    opt[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, val[n++] = (void *)(uintptr_t)LINK_LOG;
    opt[n] = CU_JIT_ERROR_LOG_BUFFER, val[n++] = l->error;
    opt[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, val[n++] = (void *)(uintptr_t)LINK_LOG;
    use_gpu(c, ctx->gpu);
    CUresult r = cuLinkCreate(n, opt, val, &l->s);
    if (r != CUDA_SUCCESS) {
        free(l);
        return r;
    }
    l->gpu = ctx->gpu;
    if (!(l->handle = handle_new(c, OBJ_LINK, l))) {
        cuLinkDestroy(l->s);
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, l->handle);
}

CUresult op_link_add(struct srv_client *c, const struct cumux_link_add *m)
{
    /* taken first, whatever else is wrong; sealed as a module image is */
    int fd = recv_sealed_fd(c, m->size, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
    struct srv_link *l = handle_get(c, m->link, OBJ_LINK);
    CUresult r = CUDA_SUCCESS;
    if (fd < 0 || m->size == 0 || m->size > (1ull << 30))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!l)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (m->type >= CU_JIT_NUM_INPUT_TYPES || !memchr(m->name, 0, sizeof m->name) || l->image)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (l->ninputs == LINK_MAX_INPUTS)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        if (fd >= 0)
            close(fd);
        return r;
    }
    struct link_input in = {0};
    in.map = srv_map_image(fd, (size_t)m->size, &in.len);
    close(fd);
    struct link_input *v = in.map ? realloc(l->inputs, (l->ninputs + 1) * sizeof *v) : NULL;
    if (!v) {
        if (in.map)
            munmap(in.map, in.len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->inputs = v;
    l->inputs[l->ninputs++] = in;
    use_gpu(c, l->gpu);
    return cuLinkAddData(l->s, (CUjitInputType)m->type, in.map, (size_t)m->size, m->name, 0, NULL, NULL);
}

CUresult op_link_complete(struct srv_client *c, struct srv_link *link, uint8_t *out, uint32_t *out_len)
{
    if (!link->image) {
        use_gpu(c, link->gpu);
        void *img = NULL;
        size_t size = 0;
        CHECK(cuLinkComplete(link->s, &img, &size));
        link->image = img;
        link->image_size = size;
    }
    return reply_u64(out, out_len, link->image_size);
}

CUresult op_link_read(struct srv_client *c, const struct cumux_link_read *m)
{
    int fd = recv_client_fd(c, 0);
    struct srv_link *l = handle_get(c, m->link, OBJ_LINK);
    CUresult r = fd < 0 ? CUDA_ERROR_INVALID_VALUE : !l ? CUDA_ERROR_INVALID_HANDLE
                 : !l->image || m->size != l->image_size ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    for (size_t done = 0; r == CUDA_SUCCESS && done < l->image_size;) {
        ssize_t w = pwrite(fd, (const char *)l->image + done, l->image_size - done, (off_t)done);
        if (w <= 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            done += (size_t)w;
    }
    if (fd >= 0)
        close(fd);
    return r;
}

CUresult op_link_logs(struct srv_client *c, struct srv_link *link, uint8_t *out, uint32_t *out_len)
{
    (void)c;
    struct cumux_link_logs_reply rep;
    size_t room = CUMUX_REPLY_DATA - sizeof rep;
    size_t info = strnlen(link->info, sizeof link->info), error = strnlen(link->error, sizeof link->error);
    if (error > room)
        error = room;
    if (info > room - error)
        info = room - error;
    rep.info_len = (uint32_t)info;
    rep.error_len = (uint32_t)error;
    memcpy(out, &rep, sizeof rep);
    memcpy(out + sizeof rep, link->info, info);
    memcpy(out + sizeof rep + info, link->error, error);
    *out_len = (uint32_t)(sizeof rep + info + error);
    return CUDA_SUCCESS;
}

CUresult op_link_destroy(struct srv_client *c, struct srv_link *link)
{
    link_free(c, link);
    return CUDA_SUCCESS;
}

void srv_link_release_all(struct srv_client *c)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_link *l = handle_get(c, h, OBJ_LINK);
        if (l)
            link_free(c, l);
    }
}
