/* Green contexts and SM resources, as cumuxd uses them to give clients SMs (server/placement.c): the
 * device's SMs split into groups of FC_SM_ALIGN, descriptors of several groups of one split, green
 * contexts over a descriptor and streams in them. The fake runs every kernel on the CPU, so SMs are only
 * bookkeeping: which SMs a stream's green context holds (fc_stream_sms, for the debug log of tests).
 * The SM set lives in the resource's padding, which the real driver keeps for itself too. */

#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define FC_SM_ALIGN 8      /* an H200's split granularity: 66 SMs asked for, 72 given */
#define FC_SM_ALIGN_FINE 2 /* with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING (a pair of SMs) */

struct fc_sm_set {
    uint64_t bits[3]; /* SM i is bit i (FC_SM_COUNT <= 192) */
    uint32_t split;   /* which split made it: 0 for the device's whole resource */
};
_Static_assert(sizeof(struct fc_sms) == sizeof(((struct fc_sm_set *)0)->bits), "the same bits");
_Static_assert(sizeof(struct fc_sm_set) <= sizeof(((CUdevResource *)0)->_internal_padding), "fits the padding");

struct fc_desc {
    struct fc_sm_set set;
    unsigned count;
};

struct fc_green {
    uint32_t magic;
    struct fc_sm_set set;
    unsigned count;
};
#define FC_MAGIC_GREEN 0x4752454eu

static _Atomic uint32_t next_split = 1;

/* The padding follows a 4-byte field: not aligned for the set, so copied in and out. */
static struct fc_sm_set set_of(const CUdevResource *r)
{
    struct fc_sm_set s;
    memcpy(&s, r->_internal_padding, sizeof s);
    return s;
}

static unsigned set_count(const struct fc_sm_set *s)
{
    unsigned n = 0;
    for (int i = 0; i < 3; i++)
        n += (unsigned)__builtin_popcountll(s->bits[i]);
    return n;
}

static void make_resource(CUdevResource *r, const struct fc_sm_set *s)
{
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    memcpy(r->_internal_padding, s, sizeof *s);
    r->sm.smCount = set_count(s);
    r->sm.minSmPartitionSize = FC_SM_ALIGN;
    r->sm.smCoscheduledAlignment = FC_SM_ALIGN;
}

CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *resource, CUdevResourceType type)
{
    CHECK_RET(fc_check_init());
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    struct fc_sm_set all = {{0}, 0};
    for (unsigned i = 0; i < FC_SM_COUNT; i++)
        all.bits[i / 64] |= 1ull << (i % 64);
    make_resource(resource, &all);
    return CUDA_SUCCESS;
}

CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups, const CUdevResource *input,
                                     CUdevResource *remaining, unsigned int useFlags, unsigned int minCount)
{
    CHECK_RET(fc_check_init());
    if (!nbGroups || !input || input->type != CU_DEV_RESOURCE_TYPE_SM ||
        (useFlags & ~(unsigned)CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) || minCount > input->sm.smCount)
        return input && input->type != CU_DEV_RESOURCE_TYPE_SM ? CUDA_ERROR_INVALID_RESOURCE_TYPE
                                                               : CUDA_ERROR_INVALID_VALUE;
    unsigned align = useFlags ? FC_SM_ALIGN_FINE : FC_SM_ALIGN;
    unsigned per = minCount < align ? align : (minCount + align - 1) / align * align;
    unsigned possible = input->sm.smCount / per;
    /* As on the H200: coscheduled groups stay within GPCs, so where the SMs do not divide evenly one more
     * group's worth is left over (132 SMs in groups of 8: 15 groups and a remainder of 12, SMs 120-131). */
    if (!useFlags && input->sm.smCount % per && possible > 1)
        possible--;
    if (!result) {
        *nbGroups = possible;
        return CUDA_SUCCESS;
    }
    unsigned n = *nbGroups < possible ? *nbGroups : possible;
    const struct fc_sm_set in_set = set_of(input), *in = &in_set;
    uint32_t split = atomic_fetch_add(&next_split, 1);
    unsigned sm = 0;
    for (unsigned g = 0; g < n; g++) {
        struct fc_sm_set s = {{0}, split};
        for (unsigned k = 0; k < per; sm++) {
            if (in->bits[sm / 64] >> (sm % 64) & 1) {
                s.bits[sm / 64] |= 1ull << (sm % 64);
                k++;
            }
        }
        make_resource(&result[g], &s);
    }
    if (remaining) {
        struct fc_sm_set s = {{0}, split};
        for (; sm < 192; sm++)
            if (in->bits[sm / 64] >> (sm % 64) & 1)
                s.bits[sm / 64] |= 1ull << (sm % 64);
        make_resource(remaining, &s);
    }
    *nbGroups = n;
    return CUDA_SUCCESS;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources, unsigned int nbResources)
{
    CHECK_RET(fc_check_init());
    if (!phDesc || !resources || nbResources == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_desc *d = calloc(1, sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < nbResources; i++) {
        const struct fc_sm_set sv = set_of(&resources[i]), *s = &sv;
        if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) {
            free(d);
            return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        }
        if (i > 0 && s->split != d->set.split) { /* as the driver: one split's outputs only */
            free(d);
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        }
        d->set.split = s->split;
        for (int w = 0; w < 3; w++)
            d->set.bits[w] |= s->bits[w];
    }
    d->count = set_count(&d->set);
    *phDesc = (CUdevResourceDesc)d; /* the fake never frees descriptors: neither does the driver's API */
    return CUDA_SUCCESS;
}

CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!phCtx || !desc || flags != CU_GREEN_CTX_DEFAULT_STREAM) /* 13.0 requires the default stream */
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_green *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const struct fc_desc *d = (const struct fc_desc *)desc;
    g->magic = FC_MAGIC_GREEN;
    g->set = d->set;
    g->count = d->count;
    atomic_fetch_add(&fc_stats.green_ctxs, 1);
    *phCtx = (CUgreenCtx)g;
    return CUDA_SUCCESS;
}

static struct fc_green *green_get(CUgreenCtx h)
{
    struct fc_green *g = (struct fc_green *)h;
    return g && g->magic == FC_MAGIC_GREEN ? g : NULL;
}

CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    CHECK_RET(fc_check_init());
    struct fc_green *g = green_get(hCtx);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    g->magic = FC_MAGIC_DEAD;
    atomic_fetch_sub(&fc_stats.green_ctxs, 1);
    free(g);
    return CUDA_SUCCESS;
}

CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority)
{
    CHECK_RET(fc_check_init());
    struct fc_green *g = green_get(greenCtx);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags != CU_STREAM_NON_BLOCKING) /* the driver requires it */
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(cuStreamCreateWithPriority(phStream, flags, priority));
    struct fc_sms sms;
    memcpy(sms.bits, g->set.bits, sizeof sms.bits);
    fc_stream_set_sms(*phStream, &sms);
    return CUDA_SUCCESS;
}
