/* cuGetErrorName and cuGetErrorString: answered locally from the generated table (cuda.h's enumerators,
 * the real driver's descriptions), before or after cuInit, like the real driver. */
#include <stddef.h>
#include <stdlib.h>

#include <cuda.h>

#include "shim/generated/errors_table.h"
#include "shim/shim.h"

#define CUMUX_EXPORT __attribute__((visibility("default")))

static int cmp_code(const void *key, const void *elem)
{
    int a = *(const int *)key, b = ((const struct cumux_err_entry *)elem)->code;
    return (a > b) - (a < b);
}

static const struct cumux_err_entry *find(CUresult error)
{
    int code = (int)error;
    return bsearch(&code, cumux_err_entries, cumux_err_nentries, sizeof cumux_err_entries[0], cmp_code);
}

/* An unknown code: CUDA_ERROR_INVALID_VALUE with *pStr = NULL, as the real driver does. A NULL pStr
 * crashes the real driver; the shim returns CUDA_ERROR_INVALID_VALUE instead. */
CUMUX_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct cumux_err_entry *e = find(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUMUX_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct cumux_err_entry *e = find(error);
    *pStr = e ? e->string : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
