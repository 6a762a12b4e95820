/* Arrays, texture and surface objects, and the 2-D and 3-D copies, which may name arrays (the server's
 * side: server/array.c). The server copies only between device memory and arrays: a copy between an
 * array and host memory goes through device memory the shim takes from the stream-ordered allocator for
 * it. A copy with no array is copy.c's (shim_copy_2d), slice by slice. */
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"


struct CUarray_st {
    uint32_t magic;
    uint32_t handle;
    CUDA_ARRAY3D_DESCRIPTOR desc;
};

/* Arrays the program holds: they do not come back after another program's fault (shim_arrays_live). */
static _Atomic unsigned live_arrays;

static struct CUarray_st *array_of(CUarray a)
{
    return a && a->magic == SHIM_MAGIC_ARRAY ? a : NULL;
}

/* ---- arrays ---- */
CUresult cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !d)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t h = 0;
    r = cumux_unsupported_if(shim_op_array_create(c->handle, (uint32_t)d->Format, d->NumChannels, d->Flags, d->Width,
                                                  d->Height, d->Depth, &h),
                             "cuArray3DCreate of a format other than 8/16/32-bit integers, half or float");
    if (r != CUDA_SUCCESS) {
        free(a);
        return r;
    }
    a->magic = SHIM_MAGIC_ARRAY;
    a->handle = (uint32_t)h;
    a->desc = *d;
    live_arrays++;
    *out = a;
    return CUDA_SUCCESS;
}

CUresult cuArrayCreate(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Format = d->Format,
                                  .NumChannels = d->NumChannels};
    return cuArray3DCreate(out, &d3);
}

CUresult cuArrayDestroy(CUarray h)
{
    struct CUarray_st *a = array_of(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = shim_op_array_destroy(a->handle);
    if (r == CUDA_SUCCESS) {
        a->magic = SHIM_MAGIC_DEAD; /* kept: a stale handle is refused, not followed */
        live_arrays--;
    }
    return r;
}

CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
    struct CUarray_st *a = array_of(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    *d = a->desc;
    return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
    struct CUarray_st *a = array_of(h);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (a->desc.Depth) /* a 3-D array has no 2-D descriptor */
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUDA_ARRAY_DESCRIPTOR){.Width = a->desc.Width, .Height = a->desc.Height, .Format = a->desc.Format,
                                 .NumChannels = a->desc.NumChannels};
    return CUDA_SUCCESS;
}

/* ---- copies ---- */
enum side_kind { SIDE_HOST, SIDE_DEVICE, SIDE_ARRAY };

struct side {
    enum side_kind kind;
    struct CUarray_st *array;
    uint64_t first;        /* host or device: the region's first byte */
    uint64_t pitch, rows;  /* host or device: bytes per row, rows per slice */
    uint64_t x, y, z;      /* array: where the region starts */
};

static CUresult side_of(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t x, size_t y, size_t z,
                        size_t pitch, size_t rows, const CUDA_MEMCPY3D *p, struct side *s)
{
    memset(s, 0, sizeof *s);
    if (t == CU_MEMORYTYPE_ARRAY) {
        if (!(s->array = array_of(arr)))
            return CUDA_ERROR_INVALID_HANDLE;
        s->kind = SIDE_ARRAY, s->x = x, s->y = y, s->z = z;
        return CUDA_SUCCESS;
    }
    uint64_t base;
    if (t == CU_MEMORYTYPE_HOST) {
        s->kind = SIDE_HOST, base = (uint64_t)(uintptr_t)host;
    } else if (t == CU_MEMORYTYPE_DEVICE) {
        s->kind = SIDE_DEVICE, base = dev;
    } else if (t == CU_MEMORYTYPE_UNIFIED) {
        base = dev;
        s->kind = shim_is_device_ptr(dev, 1) ? SIDE_DEVICE : SIDE_HOST;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    s->pitch = pitch ? pitch : p->WidthInBytes;
    s->rows = rows ? rows : p->Height;
    s->first = base + (z * s->rows + y) * s->pitch + x;
    return CUDA_SUCCESS;
}

/* Slice k of a host or device side as one side of a 2-D copy. */
static void side_2d(const struct side *s, uint64_t k, CUmemorytype *t, const void **host, CUdeviceptr *dev,
                    size_t *pitch)
{
    uint64_t a = s->first + k * s->rows * s->pitch;
    *t = s->kind == SIDE_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    if (s->kind == SIDE_HOST)
        *host = (const void *)(uintptr_t)a;
    else
        *dev = a;
    *pitch = (size_t)s->pitch;
}

/* Host or device to host or device, slice by slice. */
static CUresult copy_slices(const struct side *src, const struct side *dst, uint64_t w, uint64_t h, uint64_t d,
                            CUstream hs, bool sync)
{
    for (uint64_t k = 0; k < d; k++) {
        CUDA_MEMCPY2D m;
        memset(&m, 0, sizeof m);
        const void *dh = NULL;
        side_2d(src, k, &m.srcMemoryType, &m.srcHost, &m.srcDevice, &m.srcPitch);
        side_2d(dst, k, &m.dstMemoryType, &dh, &m.dstDevice, &m.dstPitch);
        m.dstHost = (void *)(uintptr_t)dh;
        m.WidthInBytes = (size_t)w;
        m.Height = (size_t)h;
        CUresult r = shim_copy_2d(&m, hs, sync);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Device memory and arrays only: the server's copy. */
static CUresult copy_server(uint32_t stream, const struct side *src, const struct side *dst, uint64_t w, uint64_t h,
                            uint64_t d, bool sync)
{
    struct cumux_copy_3d m = {.stream = stream, .width = w, .height = h, .depth = d};
    if (src->kind == SIDE_ARRAY)
        m.src_array = src->array->handle, m.src_x = src->x, m.src_y = src->y, m.src_z = src->z;
    else
        m.src = src->first, m.src_pitch = src->pitch, m.src_height = src->rows;
    if (dst->kind == SIDE_ARRAY)
        m.dst_array = dst->array->handle, m.dst_x = dst->x, m.dst_y = dst->y, m.dst_z = dst->z;
    else
        m.dst = dst->first, m.dst_pitch = dst->pitch, m.dst_height = dst->rows;
    if (sync)
        return shim_call(CUMUX_OP_COPY_3D, &m, sizeof m, NULL, 0, NULL);
    return shim_send(CUMUX_OP_COPY_3D, &m, sizeof m, NULL, 0);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream hs, bool sync)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t stream;
    CUresult r = shim_resolve_stream(hs, &stream, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    struct side src, dst;
    if ((r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ,
                     p->srcPitch, p->srcHeight, p, &src)) ||
        (r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
                     p->dstPitch, p->dstHeight, p, &dst)))
        return r;
    uint64_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
    if (w == 0 || h == 0 || d == 0)
        return CUDA_SUCCESS;
    if (src.kind != SIDE_ARRAY && dst.kind != SIDE_ARRAY)
        return copy_slices(&src, &dst, w, h, d, hs, sync);
    if (src.kind != SIDE_HOST && dst.kind != SIDE_HOST)
        return copy_server(stream, &src, &dst, w, h, d, sync);
    /* An array and host memory: through device memory of the stream's, packed. */
    uint64_t n;
    if (__builtin_mul_overflow(w, h, &n) || __builtin_mul_overflow(n, d, &n))
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr tmp;
    if ((r = cuMemAllocAsync(&tmp, (size_t)n, hs)) != CUDA_SUCCESS)
        return r;
    struct side mid = {.kind = SIDE_DEVICE, .first = tmp, .pitch = w, .rows = h};
    if (src.kind == SIDE_HOST) {
        r = copy_slices(&src, &mid, w, h, d, hs, false);
        if (r == CUDA_SUCCESS)
            r = copy_server(stream, &mid, &dst, w, h, d, false);
    } else {
        r = copy_server(stream, &src, &mid, w, h, d, false);
        if (r == CUDA_SUCCESS)
            r = copy_slices(&mid, &dst, w, h, d, hs, sync);
    }
    CUresult f = cuMemFreeAsync(tmp, hs);
    if (r == CUDA_SUCCESS && sync)
        r = cuStreamSynchronize(hs);
    return r != CUDA_SUCCESS ? r : f;
}

CUresult cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
    return copy_3d(p, NULL, true);
}

CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
    return copy_3d(p, s, false);
}

/* A 2-D copy: copy.c's, unless it names an array. */
static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream hs, bool sync)
{
    if (!p || (p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->dstMemoryType != CU_MEMORYTYPE_ARRAY))
        return shim_copy_2d(p, hs, sync);
    CUDA_MEMCPY3D m = {.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType,
                       .srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray,
                       .srcPitch = p->srcPitch, .dstXInBytes = p->dstXInBytes, .dstY = p->dstY,
                       .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
                       .dstArray = p->dstArray, .dstPitch = p->dstPitch, .WidthInBytes = p->WidthInBytes,
                       .Height = p->Height, .Depth = 1};
    return copy_3d(&m, hs, sync);
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
    return copy_2d(p, NULL, true);
}

CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *p)
{
    return copy_2d(p, NULL, true);
}

CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    return copy_2d(p, s, false);
}

/* The 1-D forms: a byte offset into the array, as rows when the array has several. */
static CUresult copy_1d(CUarray arr, size_t off, bool to_array, CUmemorytype t, const void *host, CUdeviceptr dev,
                        size_t n, CUstream hs, bool sync)
{
    struct CUarray_st *a = array_of(arr);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    CUDA_MEMCPY3D m;
    memset(&m, 0, sizeof m);
    size_t row = a->desc.Width;
    size_t elem = 0;
    switch (a->desc.Format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: elem = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: elem = 2; break;
    default: elem = 4; break;
    }
    row *= elem * a->desc.NumChannels;
    size_t x = off, y = 0, w = n, h = 1;
    if (a->desc.Height > 1) {
        if (row == 0 || off % row || n % row)
            return cumux_unsupported("a 1-D array copy (cuMemcpy*A*) across rows of a 2-D array that starts or ends inside a row");
        x = 0, y = off / row, w = row, h = n / row;
    }
    if (to_array) {
        m.dstMemoryType = CU_MEMORYTYPE_ARRAY, m.dstArray = arr, m.dstXInBytes = x, m.dstY = y;
        m.srcMemoryType = t, m.srcHost = host, m.srcDevice = dev, m.srcPitch = w;
    } else {
        m.srcMemoryType = CU_MEMORYTYPE_ARRAY, m.srcArray = arr, m.srcXInBytes = x, m.srcY = y;
        m.dstMemoryType = t, m.dstHost = (void *)(uintptr_t)host, m.dstDevice = dev, m.dstPitch = w;
    }
    m.WidthInBytes = w, m.Height = h, m.Depth = 1;
    return copy_3d(&m, hs, sync);
}

CUresult cuMemcpyHtoA(CUarray dst, size_t off, const void *src, size_t n)
{
    return copy_1d(dst, off, true, CU_MEMORYTYPE_HOST, src, 0, n, NULL, true);
}

CUresult cuMemcpyHtoAAsync(CUarray dst, size_t off, const void *src, size_t n, CUstream s)
{
    return copy_1d(dst, off, true, CU_MEMORYTYPE_HOST, src, 0, n, s, false);
}

CUresult cuMemcpyAtoH(void *dst, CUarray src, size_t off, size_t n)
{
    return copy_1d(src, off, false, CU_MEMORYTYPE_HOST, dst, 0, n, NULL, true);
}

CUresult cuMemcpyAtoHAsync(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
    return copy_1d(src, off, false, CU_MEMORYTYPE_HOST, dst, 0, n, s, false);
}

CUresult cuMemcpyDtoA(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return copy_1d(dst, off, true, CU_MEMORYTYPE_DEVICE, NULL, src, n, NULL, true);
}

CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return copy_1d(src, off, false, CU_MEMORYTYPE_DEVICE, NULL, dst, n, NULL, true);
}

/* ---- texture and surface objects ---- */
struct tex_entry {
    uint64_t value;
    uint32_t handle;
    bool surface, has_view;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
};
static struct tex_entry *texes;
static size_t ntex, captex;
static pthread_mutex_t tex_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult tex_remember(const struct tex_entry *e)
{
    pthread_mutex_lock(&tex_lock);
    if (ntex == captex) {
        size_t cap = captex ? 2 * captex : 16;
        struct tex_entry *v = realloc(texes, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&tex_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        texes = v, captex = cap;
    }
    texes[ntex++] = *e;
    pthread_mutex_unlock(&tex_lock);
    return CUDA_SUCCESS;
}

/* Copies out the entry of `value` of that kind; with `forget`, takes it out. */
static bool tex_find(uint64_t value, bool surface, bool forget, struct tex_entry *out)
{
    bool found = false;
    pthread_mutex_lock(&tex_lock);
    for (size_t i = 0; i < ntex && !found; i++) {
        if (texes[i].value == value && texes[i].surface == surface) {
            found = true;
            *out = texes[i];
            if (forget)
                texes[i] = texes[--ntex];
        }
    }
    pthread_mutex_unlock(&tex_lock);
    return found;
}

CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                           const CUDA_RESOURCE_VIEW_DESC *view)
{
    struct CUctx_st *c;
    CUresult r = shim_need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !res || !tex)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tex_create m = {.ctx = c->handle, .res_type = (uint32_t)res->resType};
    switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
        struct CUarray_st *a = array_of(res->res.array.hArray);
        if (!a)
            return CUDA_ERROR_INVALID_HANDLE;
        m.array = a->handle;
        break;
    }
    case CU_RESOURCE_TYPE_LINEAR:
        m.dev_ptr = res->res.linear.devPtr, m.format = (uint32_t)res->res.linear.format;
        m.channels = res->res.linear.numChannels, m.size_bytes = res->res.linear.sizeInBytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        m.dev_ptr = res->res.pitch2D.devPtr, m.format = (uint32_t)res->res.pitch2D.format;
        m.channels = res->res.pitch2D.numChannels, m.width = res->res.pitch2D.width;
        m.height = res->res.pitch2D.height, m.pitch = res->res.pitch2D.pitchInBytes;
        break;
    default:
        return cumux_unsupported("cuTexObjectCreate over a mipmapped array");
    }
    for (int i = 0; i < 3; i++)
        m.address_mode[i] = (uint32_t)tex->addressMode[i];
    m.filter_mode = (uint32_t)tex->filterMode;
    m.flags = tex->flags;
    m.max_anisotropy = tex->maxAnisotropy;
    m.mipmap_filter_mode = (uint32_t)tex->mipmapFilterMode;
    m.mipmap_level_bias = tex->mipmapLevelBias;
    m.min_mipmap_level_clamp = tex->minMipmapLevelClamp;
    m.max_mipmap_level_clamp = tex->maxMipmapLevelClamp;
    memcpy(m.border_color, tex->borderColor, sizeof m.border_color);
    if (view) {
        m.has_view = 1;
        m.view_format = (uint32_t)view->format;
        m.view_width = view->width, m.view_height = view->height, m.view_depth = view->depth;
        m.view_first_mip = view->firstMipmapLevel, m.view_last_mip = view->lastMipmapLevel;
        m.view_first_layer = view->firstLayer, m.view_last_layer = view->lastLayer;
    }
    struct cumux_tex_reply rep;
    r = shim_call(CUMUX_OP_TEX_CREATE, &m, sizeof m, &rep, sizeof rep, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    struct tex_entry e = {.value = rep.value, .handle = rep.handle, .res = *res, .tex = *tex, .has_view = view != NULL};
    if (view)
        e.view = *view;
    if ((r = tex_remember(&e)) != CUDA_SUCCESS) {
        shim_op_tex_destroy(rep.handle);
        return r;
    }
    *out = rep.value;
    return CUDA_SUCCESS;
}

static CUresult object_destroy(uint64_t value, bool surface)
{
    struct tex_entry e;
    if (!tex_find(value, surface, true, &e))
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_tex_destroy(e.handle);
}

CUresult cuTexObjectDestroy(CUtexObject t)
{
    return object_destroy(t, false);
}

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject t)
{
    struct tex_entry e;
    if (!res || !tex_find(t, false, false, &e))
        return CUDA_ERROR_INVALID_VALUE;
    *res = e.res;
    return CUDA_SUCCESS;
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *tex, CUtexObject t)
{
    struct tex_entry e;
    if (!tex || !tex_find(t, false, false, &e))
        return CUDA_ERROR_INVALID_VALUE;
    *tex = e.tex;
    return CUDA_SUCCESS;
}

CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *view, CUtexObject t)
{
    struct tex_entry e;
    if (!view || !tex_find(t, false, false, &e) || !e.has_view)
        return CUDA_ERROR_INVALID_VALUE;
    *view = e.view;
    return CUDA_SUCCESS;
}

CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !res || res->resType != CU_RESOURCE_TYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = array_of(res->res.array.hArray);
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    struct cumux_tex_reply rep;
    if ((r = shim_op_surf_create(a->handle, &rep)) != CUDA_SUCCESS)
        return r;
    struct tex_entry e = {.value = rep.value, .handle = rep.handle, .surface = true, .res = *res};
    if ((r = tex_remember(&e)) != CUDA_SUCCESS) {
        shim_op_tex_destroy(rep.handle);
        return r;
    }
    *out = rep.value;
    return CUDA_SUCCESS;
}

CUresult cuSurfObjectDestroy(CUsurfObject s)
{
    return object_destroy(s, true);
}

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUsurfObject s)
{
    struct tex_entry e;
    if (!res || !tex_find(s, true, false, &e))
        return CUDA_ERROR_INVALID_VALUE;
    *res = e.res;
    return CUDA_SUCCESS;
}

unsigned shim_arrays_live(void)
{
    pthread_mutex_lock(&tex_lock);
    unsigned n = atomic_load(&live_arrays) + (unsigned)ntex;
    pthread_mutex_unlock(&tex_lock);
    return n;
}
