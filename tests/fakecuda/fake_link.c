/* JIT linking in the fake: PTX must look like PTX (a .version directive), or the link fails with a line in
 * the error log as the driver's does; the "linked image" is the first input's bytes, which the fake's
 * module loader takes (its kernels are the ones it knows by name). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define FC_MAGIC_LINK 0x464c4e4bu

struct fc_link {
    uint32_t magic;
    char *info, *error;
    size_t info_size, error_size;
    unsigned ninputs;
    void *first;
    size_t first_size;
};

static void log_to(char *buf, size_t cap, const char *text)
{
    if (buf && cap)
        snprintf(buf, cap, "%s", text);
}

CUresult cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
    CHECK_RET(fc_check_init());
    if (!out || (n && (!opts || !vals)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_link *l = calloc(1, sizeof *l);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < n; i++) {
        switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER: l->info = vals[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER: l->error = vals[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: l->info_size = (size_t)(uintptr_t)vals[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: l->error_size = (size_t)(uintptr_t)vals[i]; break;
        default: break;
        }
    }
    l->magic = FC_MAGIC_LINK;
    *out = (CUlinkState)l;
    return CUDA_SUCCESS;
}

static struct fc_link *link_get(CUlinkState s)
{
    struct fc_link *l = (struct fc_link *)s;
    return l && l->magic == FC_MAGIC_LINK ? l : NULL;
}

CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name,
                       unsigned int n, CUjit_option *opts, void **vals)
{
    (void)name, (void)n, (void)opts, (void)vals;
    CHECK_RET(fc_check_init());
    struct fc_link *l = link_get(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || !size || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_JIT_INPUT_PTX && !memmem(data, size, ".version", 8)) {
        log_to(l->error, l->error_size, "ptxas fatal   : no .version directive in the input");
        return CUDA_ERROR_INVALID_PTX;
    }
    if (!l->first) {
        if (!(l->first = malloc(size)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(l->first, data, size);
        l->first_size = size;
    }
    l->ninputs++;
    return CUDA_SUCCESS;
}

CUresult cuLinkComplete(CUlinkState s, void **image, size_t *size)
{
    CHECK_RET(fc_check_init());
    struct fc_link *l = link_get(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!image || !size || !l->first)
        return CUDA_ERROR_INVALID_VALUE;
    char line[64];
    snprintf(line, sizeof line, "fakecuda: linked %u input(s)", l->ninputs);
    log_to(l->info, l->info_size, line);
    *image = l->first;
    *size = l->first_size;
    return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState s)
{
    CHECK_RET(fc_check_init());
    struct fc_link *l = link_get(s);
    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    l->magic = 0;
    free(l->first);
    free(l);
    return CUDA_SUCCESS;
}
