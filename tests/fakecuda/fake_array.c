/* Arrays, texture and surface objects in the fake. An array is an allocation of the device's with its
 * rows packed (so the oracle sees every access to it), a copy with an array side is a pitched copy of
 * that memory, and texture and surface objects are small integers naming what they read, for the
 * kernels of fake_kernels.c that sample them. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define FC_MAGIC_ARRAY 0x46415252u
#define MAX_TEXTURES 4096

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static struct fc_array *array_get(CUarray h)
{
    struct fc_array *a = (struct fc_array *)h;
    return a && a->magic == FC_MAGIC_ARRAY ? a : NULL;
}

CUresult cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CHECK_RET(fc_check_init());
    if (!out || !d || d->Width == 0 || (d->Height == 0 && d->Depth != 0) ||
        (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) || !format_bytes(d->Format))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->elem = format_bytes(d->Format) * d->NumChannels;
    a->row = fc_mul_sat(d->Width, a->elem);
    a->rows = d->Height ? d->Height : 1;
    a->slices = d->Depth ? d->Depth : 1;
    CUresult r = fc_mem_alloc(fc_mul_sat(fc_mul_sat(a->row, a->rows), a->slices), FC_GLOBAL, NULL, &a->base);
    if (r != CUDA_SUCCESS) {
        free(a);
        return r;
    }
    a->magic = FC_MAGIC_ARRAY;
    atomic_fetch_add(&fc_stats.arrays, 1);
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray h)
{
    CHECK_RET(fc_check_init());
    struct fc_array *a = array_get(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_drain(); /* as cuMemFree: queued work may still use it */
    a->magic = 0;
    fc_mem_release(a->base);
    free(a);
    atomic_fetch_sub(&fc_stats.arrays, 1);
    return CUDA_SUCCESS;
}

/* An array side of a 3-D copy as device memory: its first byte, pitch and rows per slice; false when the
 * region is outside the array. */
static bool array_side(CUarray h, size_t x, size_t y, size_t z, const CUDA_MEMCPY3D *p, CUdeviceptr *dev,
                       size_t *pitch, size_t *rows)
{
    struct fc_array *a = array_get(h);
    if (!a || fc_add_sat(x, p->WidthInBytes) > a->row || fc_add_sat(y, p->Height) > a->rows ||
        fc_add_sat(z, p->Depth) > a->slices)
        return false;
    *dev = a->base;
    *pitch = (size_t)a->row;
    *rows = (size_t)a->rows;
    return true;
}

CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
    CHECK_RET(fc_check_init());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D q = *p;
    if (q.srcMemoryType == CU_MEMORYTYPE_ARRAY) {
        if (!array_side(q.srcArray, q.srcXInBytes, q.srcY, q.srcZ, p, &q.srcDevice, &q.srcPitch, &q.srcHeight))
            return CUDA_ERROR_INVALID_VALUE;
        q.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    }
    if (q.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        if (!array_side(q.dstArray, q.dstXInBytes, q.dstY, q.dstZ, p, &q.dstDevice, &q.dstPitch, &q.dstHeight))
            return CUDA_ERROR_INVALID_VALUE;
        q.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    }
    struct fc_copy c;
    fc_copy_from_3d(&c, &q);
    return fc_submit_copy("cuMemcpy3DAsync", s, &c);
}

/* ---- texture and surface objects: value = index + 1 ---- */
static struct {
    bool used;
    struct fc_texref ref;
} textures[MAX_TEXTURES];
static pthread_mutex_t tex_mu = PTHREAD_MUTEX_INITIALIZER;

static CUresult tex_new(const struct fc_texref *ref, unsigned long long *out)
{
    pthread_mutex_lock(&tex_mu);
    for (size_t i = 0; i < MAX_TEXTURES; i++) {
        if (!textures[i].used) {
            textures[i].used = true;
            textures[i].ref = *ref;
            pthread_mutex_unlock(&tex_mu);
            atomic_fetch_add(&fc_stats.textures, 1);
            *out = i + 1;
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&tex_mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult tex_drop(unsigned long long v, bool surface)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&tex_mu);
    bool ok = v >= 1 && v <= MAX_TEXTURES && textures[v - 1].used && textures[v - 1].ref.surface == surface;
    if (ok)
        textures[v - 1].used = false;
    pthread_mutex_unlock(&tex_mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_sub(&fc_stats.textures, 1);
    return CUDA_SUCCESS;
}

bool fc_texture(uint64_t v, bool surface, struct fc_texref *out)
{
    pthread_mutex_lock(&tex_mu);
    bool ok = v >= 1 && v <= MAX_TEXTURES && textures[v - 1].used && textures[v - 1].ref.surface == surface;
    if (ok)
        *out = textures[v - 1].ref;
    pthread_mutex_unlock(&tex_mu);
    return ok;
}

/* What a resource reads; the memory it names must be the device's (the server's check, asserted). */
static CUresult resource_ref(const CUDA_RESOURCE_DESC *res, struct fc_texref *ref)
{
    memset(ref, 0, sizeof *ref);
    switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
        struct fc_array *a = array_get(res->res.array.hArray);
        if (!a)
            return CUDA_ERROR_INVALID_HANDLE;
        *ref = (struct fc_texref){.base = a->base, .pitch = a->row, .width = a->row / a->elem, .height = a->rows,
                                  .elem = a->elem};
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
        uint64_t e = format_bytes(res->res.linear.format) * res->res.linear.numChannels;
        if (!e)
            return CUDA_ERROR_INVALID_VALUE;
        fc_oracle_dev("cuTexObjectCreate", res->res.linear.devPtr, res->res.linear.sizeInBytes);
        *ref = (struct fc_texref){.base = res->res.linear.devPtr, .pitch = res->res.linear.sizeInBytes,
                                  .width = res->res.linear.sizeInBytes / e, .height = 1, .elem = e};
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
        uint64_t e = format_bytes(res->res.pitch2D.format) * res->res.pitch2D.numChannels;
        uint64_t w = res->res.pitch2D.width, h = res->res.pitch2D.height, pitch = res->res.pitch2D.pitchInBytes;
        if (!e || !w || !h || pitch < fc_mul_sat(w, e))
            return CUDA_ERROR_INVALID_VALUE;
        fc_oracle_dev("cuTexObjectCreate", res->res.pitch2D.devPtr, fc_add_sat(fc_mul_sat(pitch, h - 1), w * e));
        *ref = (struct fc_texref){.base = res->res.pitch2D.devPtr, .pitch = pitch, .width = w, .height = h, .elem = e};
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                           const CUDA_RESOURCE_VIEW_DESC *view)
{
    CHECK_RET(fc_check_init());
    (void)view;
    if (!out || !res || !tex)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_texref ref;
    CHECK_RET(resource_ref(res, &ref));
    ref.mode[0] = tex->addressMode[0];
    ref.mode[1] = tex->addressMode[1];
    return tex_new(&ref, out);
}

CUresult cuTexObjectDestroy(CUtexObject t)
{
    return tex_drop(t, false);
}

CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    CHECK_RET(fc_check_init());
    if (!out || !res || res->resType != CU_RESOURCE_TYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_texref ref;
    CHECK_RET(resource_ref(res, &ref));
    ref.surface = true;
    return tex_new(&ref, out);
}

CUresult cuSurfObjectDestroy(CUsurfObject s)
{
    return tex_drop(s, true);
}
