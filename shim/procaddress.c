/* cuGetProcAddress and cuGetProcAddress_v2, answered from the generated table (data/procaddress.tsv,
 * recorded from the real driver by tools/probe_procaddress.c). Behaviour copied from that recording:
 *  - flags: only the CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM bit selects (1 answers as 0, 3 as 2);
 *    any bit above those two is CUDA_ERROR_INVALID_VALUE.
 *  - cudaVersion above the driver's version: CUDA_ERROR_INVALID_VALUE. A negative one gets the newest
 *    entry point (the driver compares it unsigned).
 *  - Invalid arguments write neither *pfn nor *symbolStatus.
 *  - _v2, name unknown or version too low: *pfn = NULL, status SYMBOL_NOT_FOUND or
 *    VERSION_NOT_SUFFICIENT, and the return value is CUDA_SUCCESS.
 *  - old form: same pointer on success; otherwise CUDA_ERROR_NOT_FOUND and *pfn left as it was.
 * One deliberate difference: the real driver crashes on a NULL symbol or pfn; we return
 * CUDA_ERROR_INVALID_VALUE (after the flags and version checks, which it makes first). */
#include <stdlib.h>
#include <string.h>

#include "shim/generated/procaddress_table.h"
#include "shim/shim.h"

#define PA_EXPORT __attribute__((visibility("default")))
#define PA_FLAGS_KNOWN (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)

static int cmp_entry(const void *key, const void *elem)
{
    return strcmp(key, ((const struct cumux_pa_entry *)elem)->name);
}

/* Returns CUDA_SUCCESS with *fn and *status filled, or CUDA_ERROR_INVALID_VALUE having written nothing. */
static CUresult lookup(const char *symbol, int cudaVersion, cuuint64_t flags, cumux_pa_fn *fn,
                       CUdriverProcAddressQueryResult *status)
{
    if ((flags & ~(cuuint64_t)PA_FLAGS_KNOWN) || cudaVersion > CUMUX_PA_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    if (!symbol)
        return CUDA_ERROR_INVALID_VALUE;
    *fn = NULL;
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const struct cumux_pa_entry *e =
        bsearch(symbol, cumux_pa_entries, cumux_pa_nentries, sizeof *e, cmp_entry);
    if (!e)
        return CUDA_SUCCESS;
    int cls = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
    unsigned n = e->count[cls];
    if (!n)
        return CUDA_SUCCESS;
    const struct cumux_pa_step *s = cumux_pa_steps + e->first[cls];
    if (cudaVersion < 0) { /* unsigned comparison in the driver: the newest */
        *fn = s[n - 1].fn;
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (cudaVersion < s[0].min_version) {
        *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_SUCCESS;
    }
    while (n > 1 && s[n - 1].min_version > cudaVersion)
        n--;
    *fn = s[n - 1].fn;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

PA_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *symbolStatus)
{
    cumux_pa_fn fn;
    CUdriverProcAddressQueryResult st;
    CUresult r = lookup(symbol, cudaVersion, flags, &fn, &st);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = (void *)fn;
    if (symbolStatus)
        *symbolStatus = st;
    return CUDA_SUCCESS;
}

/* cuda.h (without __CUDA_API_VERSION_INTERNAL) maps cuGetProcAddress to _v2 and hides this one. */
#undef cuGetProcAddress
PA_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

PA_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    cumux_pa_fn fn;
    CUdriverProcAddressQueryResult st;
    CUresult r = lookup(symbol, cudaVersion, flags, &fn, &st);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (st != CU_GET_PROC_ADDRESS_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = (void *)fn;
    return CUDA_SUCCESS;
}
