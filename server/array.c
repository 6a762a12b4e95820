/* Arrays (CUDA arrays: the opaque layouts textures and surfaces read), texture and surface objects, and
 * the copies that have an array on a side. Arrays are the server's, named by handle; a copy names one
 * of the client's arrays and a region inside it, checked against the array's extent, and device memory
 * of the client's own on the other side. A texture over linear or pitched memory is checked like a copy
 * of that memory. An array lives until its handle is destroyed and no texture or surface uses it. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/handlers.h"

struct srv_array {
    CUarray a;
    struct srv_client *owner;
    uint64_t charged; /* bytes counted against the owner's memory limit */
    int gpu;
    uint32_t handle; /* 0 once the client destroyed it: it lives on for its textures */
    unsigned users;  /* textures and surfaces over it */
    uint64_t row_bytes, rows, slices; /* its extent: bytes per row, rows (1 for 1-D), slices (1 for 2-D) */
};

struct srv_texture {
    CUtexObject t; /* a surface's CUsurfObject too */
    uint32_t handle;
    bool surface;
    int gpu;
    struct srv_array *array; /* NULL over linear or pitched memory */
};

/* Bytes of one element; 0 for formats cumux does not take (planar video and block-compressed ones). */
static uint64_t element_bytes(uint32_t format, uint32_t channels)
{
    uint64_t b;
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: b = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: b = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: b = 4; break;
    default: return 0;
    }
    return channels == 1 || channels == 2 || channels == 4 ? b * channels : 0;
}

static void array_unref(struct srv_array *a)
{
    if (--a->users == 0 && a->handle == 0) {
        cuArrayDestroy(a->a);
        srv_mem_uncharge(a->owner, a->charged);
        free(a);
    }
}

CUresult op_array_create(struct srv_client *c, const struct cumux_array_create *m, struct srv_ctx *ctx,
                         uint8_t *out, uint32_t *out_len)
{
    uint64_t elem = element_bytes(m->format, m->channels), row;
    if (!elem)
        return m->channels == 1 || m->channels == 2 || m->channels == 4 ? CUDA_ERROR_NOT_SUPPORTED
                                                                      : CUDA_ERROR_INVALID_VALUE;
    if (m->width == 0 || (m->height == 0 && m->depth != 0) || !cumux_mul_u64(m->width, elem, &row))
        return CUDA_ERROR_INVALID_VALUE;
    /* Counted as its elements' bytes (the driver's layout may hold a little more). */
    uint64_t bytes;
    if (!cumux_mul_u64(row, m->height ? m->height : 1, &bytes) || !cumux_mul_u64(bytes, m->depth ? m->depth : 1, &bytes))
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, ctx->gpu);
    CUresult r = srv_mem_charge(c, bytes);
    if (r != CUDA_SUCCESS) {
        free(a);
        return r;
    }
    a->owner = c;
    a->charged = bytes;
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = (size_t)m->width, .Height = (size_t)m->height, .Depth = (size_t)m->depth,
                                 .Format = (CUarray_format)m->format, .NumChannels = m->channels, .Flags = m->flags};
    if ((r = cuArray3DCreate(&a->a, &d)) != CUDA_SUCCESS) {
        srv_mem_uncharge(c, bytes);
        free(a);
        return r;
    }
    a->gpu = ctx->gpu;
    a->users = 1; /* the handle */
    a->row_bytes = row;
    a->rows = m->height ? m->height : 1;
    a->slices = m->depth ? m->depth : 1;
    a->handle = handle_new(c, OBJ_ARRAY, a);
    if (!a->handle) {
        cuArrayDestroy(a->a);
        srv_mem_uncharge(c, bytes);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, a->handle);
}

CUresult op_array_destroy(struct srv_client *c, struct srv_array *array)
{
    handle_drop(c, array->handle);
    array->handle = 0;
    use_gpu(c, array->gpu);
    array_unref(array);
    return CUDA_SUCCESS;
}

/* One side of a 3-D copy into p: an array region checked against its extent, or device memory checked
 * against the client's. */
static bool copy_side(struct srv_client *c, struct srv_array *a, uint64_t ptr, uint64_t pitch, uint64_t height,
                      uint64_t x, uint64_t y, uint64_t z, const struct cumux_copy_3d *m, bool src,
                      CUDA_MEMCPY3D *p)
{
    if (a) {
        uint64_t xe, ye, ze;
        if (!cumux_add_u64(x, m->width, &xe) || xe > a->row_bytes || !cumux_add_u64(y, m->height, &ye) ||
            ye > a->rows || !cumux_add_u64(z, m->depth, &ze) || ze > a->slices)
            return false;
        if (src) {
            p->srcMemoryType = CU_MEMORYTYPE_ARRAY, p->srcArray = a->a;
            p->srcXInBytes = (size_t)x, p->srcY = (size_t)y, p->srcZ = (size_t)z;
        } else {
            p->dstMemoryType = CU_MEMORYTYPE_ARRAY, p->dstArray = a->a;
            p->dstXInBytes = (size_t)x, p->dstY = (size_t)y, p->dstZ = (size_t)z;
        }
        return true;
    }
    /* Device memory: every row of every slice, from the first byte to the last row's end. */
    uint64_t slice, span, last;
    if ((m->height > 1 || m->depth > 1) && pitch < m->width)
        return false;
    if (m->depth > 1 && height < m->height)
        return false;
    if (!cumux_mul_u64(pitch, height, &slice) || !cumux_span_2d(pitch, m->width, m->height, &span) ||
        !cumux_mul_u64(slice, m->depth - 1, &last) || !cumux_add_u64(last, span, &span) || !dev_ok(c, ptr, span))
        return false;
    if (src) {
        p->srcMemoryType = CU_MEMORYTYPE_DEVICE, p->srcDevice = ptr;
        p->srcPitch = (size_t)pitch, p->srcHeight = (size_t)height;
    } else {
        p->dstMemoryType = CU_MEMORYTYPE_DEVICE, p->dstDevice = ptr;
        p->dstPitch = (size_t)pitch, p->dstHeight = (size_t)height;
    }
    return true;
}

CUresult op_copy_3d(struct srv_client *c, const struct cumux_copy_3d *m, struct srv_stream *stream,
                    struct srv_array *src_array, struct srv_array *dst_array, bool answered)
{
    if (m->width == 0 || m->height == 0 || m->depth == 0)
        return CUDA_SUCCESS;
    if (!src_array && !dst_array) /* device to device: COPY_2D's */
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    if (!copy_side(c, src_array, m->src, m->src_pitch, m->src_height, m->src_x, m->src_y, m->src_z, m, true, &p) ||
        !copy_side(c, dst_array, m->dst, m->dst_pitch, m->dst_height, m->dst_x, m->dst_y, m->dst_z, m, false, &p))
        return CUDA_ERROR_INVALID_VALUE;
    p.WidthInBytes = (size_t)m->width;
    p.Height = (size_t)m->height;
    p.Depth = (size_t)m->depth;
    CHECK(before_op(stream));
    CUresult r = cuMemcpy3DAsync(&p, stream->cu);
    after_op(stream);
    if (r == CUDA_SUCCESS && answered)
        r = take_pending(c, cuStreamSynchronize(stream->cu));
    return r;
}

static CUresult new_object(struct srv_client *c, CUtexObject t, bool surface, int gpu, struct srv_array *a,
                           uint8_t *out, uint32_t *out_len)
{
    struct srv_texture *x = calloc(1, sizeof *x);
    uint32_t h = x ? handle_new(c, OBJ_TEXTURE, x) : 0;
    if (!h) {
        free(x);
        if (surface)
            cuSurfObjectDestroy(t);
        else
            cuTexObjectDestroy(t);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *x = (struct srv_texture){.t = t, .handle = h, .surface = surface, .gpu = gpu, .array = a};
    if (a)
        a->users++;
    struct cumux_tex_reply rep = {.handle = h, .value = t};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_tex_create(struct srv_client *c, const struct cumux_tex_create *m, struct srv_ctx *ctx,
                       struct srv_array *array, uint8_t *out, uint32_t *out_len)
{
    CUDA_RESOURCE_DESC res;
    memset(&res, 0, sizeof res);
    res.resType = (CUresourcetype)m->res_type;
    uint64_t elem = element_bytes(m->format, m->channels), span;
    switch (m->res_type) {
    case CU_RESOURCE_TYPE_ARRAY:
        if (!array)
            return CUDA_ERROR_INVALID_VALUE;
        res.res.array.hArray = array->a;
        break;
    case CU_RESOURCE_TYPE_LINEAR:
        if (!elem || m->size_bytes == 0 || !dev_ok(c, m->dev_ptr, m->size_bytes))
            return CUDA_ERROR_INVALID_VALUE;
        res.res.linear.devPtr = m->dev_ptr;
        res.res.linear.format = (CUarray_format)m->format;
        res.res.linear.numChannels = m->channels;
        res.res.linear.sizeInBytes = (size_t)m->size_bytes;
        break;
    case CU_RESOURCE_TYPE_PITCH2D: {
        uint64_t row;
        if (!elem || m->height == 0 || !cumux_mul_u64(m->width, elem, &row) ||
            !cumux_span_2d(m->pitch, row, m->height, &span) || !dev_ok(c, m->dev_ptr, span))
            return CUDA_ERROR_INVALID_VALUE;
        res.res.pitch2D.devPtr = m->dev_ptr;
        res.res.pitch2D.format = (CUarray_format)m->format;
        res.res.pitch2D.numChannels = m->channels;
        res.res.pitch2D.width = (size_t)m->width;
        res.res.pitch2D.height = (size_t)m->height;
        res.res.pitch2D.pitchInBytes = (size_t)m->pitch;
        break;
    }
    default: /* mipmapped arrays: not supported */
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUDA_TEXTURE_DESC tex;
    memset(&tex, 0, sizeof tex);
    for (int i = 0; i < 3; i++)
        tex.addressMode[i] = (CUaddress_mode)m->address_mode[i];
    tex.filterMode = (CUfilter_mode)m->filter_mode;
    tex.flags = m->flags;
    tex.maxAnisotropy = m->max_anisotropy;
    tex.mipmapFilterMode = (CUfilter_mode)m->mipmap_filter_mode;
    tex.mipmapLevelBias = m->mipmap_level_bias;
    tex.minMipmapLevelClamp = m->min_mipmap_level_clamp;
    tex.maxMipmapLevelClamp = m->max_mipmap_level_clamp;
    memcpy(tex.borderColor, m->border_color, sizeof tex.borderColor);
    CUDA_RESOURCE_VIEW_DESC view;
    memset(&view, 0, sizeof view);
    if (m->has_view) {
        view.format = (CUresourceViewFormat)m->view_format;
        view.width = (size_t)m->view_width;
        view.height = (size_t)m->view_height;
        view.depth = (size_t)m->view_depth;
        view.firstMipmapLevel = m->view_first_mip;
        view.lastMipmapLevel = m->view_last_mip;
        view.firstLayer = m->view_first_layer;
        view.lastLayer = m->view_last_layer;
    }
    int gpu = array ? array->gpu : ctx->gpu;
    use_gpu(c, gpu);
    CUtexObject t;
    CHECK(cuTexObjectCreate(&t, &res, &tex, m->has_view ? &view : NULL));
    return new_object(c, t, false, gpu, m->res_type == CU_RESOURCE_TYPE_ARRAY ? array : NULL, out, out_len);
}

CUresult op_surf_create(struct srv_client *c, struct srv_array *array, uint8_t *out, uint32_t *out_len)
{
    CUDA_RESOURCE_DESC res;
    memset(&res, 0, sizeof res);
    res.resType = CU_RESOURCE_TYPE_ARRAY;
    res.res.array.hArray = array->a;
    use_gpu(c, array->gpu);
    CUsurfObject s;
    CHECK(cuSurfObjectCreate(&s, &res));
    return new_object(c, s, true, array->gpu, array, out, out_len);
}

static void texture_free(struct srv_client *c, uint32_t h, struct srv_texture *x)
{
    handle_drop(c, h);
    use_gpu(c, x->gpu);
    if (x->surface)
        cuSurfObjectDestroy(x->t);
    else
        cuTexObjectDestroy(x->t);
    if (x->array)
        array_unref(x->array);
    free(x);
}

CUresult op_tex_destroy(struct srv_client *c, struct srv_texture *tex)
{
    texture_free(c, tex->handle, tex);
    return CUDA_SUCCESS;
}

void srv_array_release_all(struct srv_client *c)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_texture *x = handle_get(c, h, OBJ_TEXTURE);
        if (x)
            texture_free(c, h, x);
    }
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_array *a = handle_get(c, h, OBJ_ARRAY);
        if (a)
            op_array_destroy(c, a);
    }
}
