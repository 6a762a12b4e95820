/* Running a client's commands: validation of every message, the table from command to handler, handles,
 * the legacy-stream rule, and the cleanup of a client that is gone. The handlers are in one file per
 * concern: context.c, memory.c, copy.c, module.c, launch.c, graph.c. */

#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/log.h"
#include "server/dispatch.h"
#include "server/server.h"

CUresult reply_u64(uint8_t *out, uint32_t *out_len, uint64_t v)
{
    struct cumux_u64_reply rep = {v};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- handles */

/* Handles one client may hold at once (CUMUX_MAX_HANDLES, cumuxd --max-handles): without a bound, one
 * client could grow the server's memory without end. Past it, handle_new returns 0, which every caller
 * answers with CUDA_ERROR_OUT_OF_MEMORY. */
uint32_t srv_max_handles = 1u << 20;

uint32_t handle_new(struct srv_client *c, enum srv_obj_type type, void *obj)
{
    for (uint32_t i = c->free_hint; i < c->nhandles; i++) {
        if (c->handles[i].type == OBJ_NONE) {
            c->handles[i] = (struct srv_handle){type, obj};
            c->free_hint = i + 1;
            return i + 1;
        }
    }
    /* No free slot: the table holds as many live handles as it has entries. */
    if (c->nhandles >= srv_max_handles)
        return 0;
    if (c->nhandles == c->caphandles) {
        uint32_t cap = c->caphandles ? c->caphandles * 2 : 64;
        if (cap > (1u << 24))
            return 0;
        struct srv_handle *h = realloc(c->handles, cap * sizeof *h);
        if (!h)
            return 0;
        c->handles = h;
        c->caphandles = cap;
    }
    c->handles[c->nhandles] = (struct srv_handle){type, obj};
    c->free_hint = c->nhandles + 1;
    return ++c->nhandles;
}

/* The object behind a handle of this client, if it has that type; otherwise NULL. */
void *handle_get(struct srv_client *c, uint32_t h, enum srv_obj_type type)
{
    if (h == 0 || h > c->nhandles || c->handles[h - 1].type != type)
        return NULL;
    return c->handles[h - 1].obj;
}

void handle_drop(struct srv_client *c, uint32_t h)
{
    c->handles[h - 1] = (struct srv_handle){OBJ_NONE, NULL};
    if (h - 1 < c->free_hint)
        c->free_hint = h - 1;
}

void use_gpu(struct srv_client *c, int gpu)
{
    if (c->current_gpu != gpu && gpu < srv_gpu_count) {
        cuCtxSetCurrent(srv_gpus[gpu].ctx);
        c->current_gpu = gpu;
    }
}

/* ---------------------------------------------------------------- legacy-stream emulation
 * Every real stream is non-blocking, so clients never meet on the real NULL stream. Within a client
 * context, an operation on the legacy stream first waits for the work of each blocking stream that has
 * had any since it last did, and a blocking stream first waits for the legacy stream's last operation
 * (CUDA's "legacy default stream" rule). Costs nothing while a client uses a single stream. */

CUresult before_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    if (s->capturing)
        return CUDA_SUCCESS; /* captured work is not run now: it takes no part in the legacy rule */
    if (s->kind == STREAM_LEGACY) {
        for (size_t i = 0; i < x->ndirty; i++) {
            struct srv_stream *b = x->dirty[i];
            CHECK(cuEventRecord(x->join_event, b->cu));
            CHECK(cuStreamWaitEvent(x->legacy->cu, x->join_event, 0));
            b->dirty = false;
        }
        x->ndirty = 0;
    } else if (s->kind == STREAM_BLOCKING && s->seen_epoch != x->epoch) {
        if (x->epoch_event_epoch != x->epoch) {
            CHECK(cuEventRecord(x->epoch_event, x->legacy->cu));
            x->epoch_event_epoch = x->epoch;
        }
        CHECK(cuStreamWaitEvent(s->cu, x->epoch_event, 0));
        s->seen_epoch = x->epoch;
    }
    return CUDA_SUCCESS;
}

void after_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    if (s->capturing)
        return;
    if (s->kind == STREAM_LEGACY) {
        x->epoch++;
    } else if (s->kind == STREAM_BLOCKING && !s->dirty) {
        if (x->ndirty == x->capdirty) {
            size_t cap = x->capdirty ? x->capdirty * 2 : 8;
            struct srv_stream **d = realloc(x->dirty, cap * sizeof *d);
            if (!d) {
                /* Without room to remember it, make the stream safe now: the legacy stream waits. */
                cuEventRecord(x->join_event, s->cu);
                cuStreamWaitEvent(x->legacy->cu, x->join_event, 0);
                return;
            }
            x->dirty = d;
            x->capdirty = cap;
        }
        x->dirty[x->ndirty++] = s;
        s->dirty = true;
    }
}

/* Look up a stream handle and make its context current. */
struct srv_stream *stream_get(struct srv_client *c, uint32_t h)
{
    struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
    if (s)
        use_gpu(c, s->ctx->gpu);
    return s;
}

CUresult take_pending(struct srv_client *c, CUresult r)
{
    if (r == CUDA_SUCCESS && c->pending_error != CUDA_SUCCESS) {
        r = c->pending_error;
        c->pending_error = CUDA_SUCCESS;
    }
    return r;
}

/* ---------------------------------------------------------------- init */

static CUresult op_init(struct srv_client *c, uint8_t *out, uint32_t *out_len)
{
    struct cumux_init_reply rep = {.driver_version = srv_driver_version, .device_count = srv_gpu_count,
                                   .client_id = c->id};
    memcpy(out, &rep, sizeof rep);
    for (int i = 0; i < srv_gpu_count; i++)
        memcpy(out + sizeof rep + (size_t)i * sizeof(struct cumux_device_info), &srv_gpus[i].info,
               sizeof(struct cumux_device_info));
    *out_len = (uint32_t)(sizeof rep + (size_t)srv_gpu_count * sizeof(struct cumux_device_info));
    return CUDA_SUCCESS;
}

_Static_assert(sizeof(struct cumux_init_reply) + CUMUX_MAX_DEVICES * sizeof(struct cumux_device_info) <= CUMUX_REPLY_DATA,
               "init reply must fit a reply slot");

/* ---------------------------------------------------------------- dispatch */

static const struct {
    uint32_t body;
    uint8_t oneway;
} op_shape[CUMUX_OP_COUNT] = {
#define CUMUX_OP_SHAPE(name, body_t, ow) [CUMUX_OP_##name] = {sizeof(struct body_t), ow},
    CUMUX_OPS(CUMUX_OP_SHAPE)
#undef CUMUX_OP_SHAPE
};

/* Which handler runs each command, and what it is given: one line per command. The commands' bodies and
 * one-way rules are CUMUX_OPS in common/proto.h; this list must name every one of them but PAD exactly
 * once (a missing one fails the assertion below, a repeated one the switch in srv_dispatch). */
#define SRV_HANDLERS(X)                                                                                \
    X(INIT, op_init, OUT)                                                                              \
    X(CTX_CREATE, op_ctx_create, BODY_OUT)                                                             \
    X(CTX_DESTROY, op_ctx_destroy, BODY)                                                               \
    X(CTX_SYNC, op_ctx_sync, BODY)                                                                     \
    X(CTX_LIMIT, op_ctx_limit, BODY_OUT)                                                               \
    X(MEM_ALLOC, op_mem_alloc, BODY_OUT)                                                               \
    X(MEM_FREE, op_mem_free, BODY)                                                                     \
    X(MEM_INFO, op_mem_info, BODY_OUT)                                                                 \
    X(HOST_ALLOC, op_host_alloc, BODY_OUT)                                                             \
    X(HOST_FREE, op_host_free, BODY)                                                                   \
    X(MODULE_LOAD, op_module_load, BODY_OUT)                                                           \
    X(MODULE_UNLOAD, op_module_unload, BODY)                                                           \
    X(MODULE_GET_FUNCTION, op_module_get_function, BODY_OUT)                                           \
    X(MODULE_GET_GLOBAL, op_module_get_global, BODY_OUT)                                               \
    X(LIBRARY_GET_MODULE, op_library_get_module, BODY_OUT)                                             \
    X(MODULE_FUNCTION_NAMES, op_module_function_names, BODY_OUT)                                       \
    X(ARCH_DATA, op_arch_data, BODY_OUT)                                                               \
    X(FUNC_GET_ATTRIBUTE, op_func_get_attribute, BODY_OUT)                                             \
    X(FUNC_SET_ATTRIBUTE, op_func_set_attribute, BODY_OUT)                                             \
    X(FUNC_OCCUPANCY, op_func_occupancy, BODY_OUT)                                                     \
    X(FUNC_CLUSTER_OCCUPANCY, op_cluster_occupancy, BODY_PAYLOAD_OUT)                                  \
    X(STREAM_CREATE, op_stream_create, BODY_OUT)                                                       \
    X(STREAM_DESTROY, op_stream_destroy, BODY)                                                         \
    X(STREAM_SYNC, op_stream_sync, BODY)                                                               \
    X(STREAM_QUERY, op_stream_query, BODY)                                                             \
    X(STREAM_WAIT_EVENT, op_stream_wait_event, BODY)                                                   \
    X(EVENT_CREATE, op_event_create, BODY_OUT)                                                         \
    X(EVENT_DESTROY, op_event_destroy, BODY)                                                           \
    X(EVENT_RECORD, op_event_record, BODY)                                                             \
    X(EVENT_QUERY, op_event_query, BODY)                                                               \
    X(EVENT_SYNC, op_event_sync, BODY)                                                                 \
    X(EVENT_ELAPSED, op_event_elapsed, BODY_OUT)                                                       \
    X(COPY, op_copy, BODY_ANSWERED)                                                                    \
    X(COPY_2D, op_copy_2d, BODY_ANSWERED)                                                              \
    X(COPY_HTOD_STAGED, op_copy_htod_staged, BODY)                                                     \
    X(COPY_DTOH_STAGED, op_copy_dtoh_staged, BODY)                                                     \
    X(MEMSET, op_memset, BODY)                                                                         \
    X(LAUNCH, op_launch, BODY_PAYLOAD)                                                                 \
    X(POOL_DEFAULT, op_pool, OP_BODY_OUT)                                                              \
    X(POOL_CREATE, op_pool, OP_BODY_OUT)                                                               \
    X(POOL_DESTROY, op_pool, OP_BODY_OUT)                                                              \
    X(POOL_ATTRIBUTE, op_pool, OP_BODY_OUT)                                                            \
    X(POOL_TRIM, op_pool, OP_BODY_OUT)                                                                 \
    X(MEM_ALLOC_ASYNC, op_mem_alloc_async, BODY_OUT)                                                   \
    X(MEM_FREE_ASYNC, op_mem_free_async, BODY)                                                         \
    X(HOST_FUNC, op_host_func, BODY)                                                                   \
    X(CAPTURE_BEGIN, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                \
    X(CAPTURE_END, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                  \
    X(CAPTURE_INFO, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                 \
    X(GRAPH_CREATE, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                 \
    X(GRAPH_DESTROY, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                \
    X(GRAPH_INSTANTIATE, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                            \
    X(GRAPH_EXEC_DESTROY, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                           \
    X(GRAPH_LAUNCH, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                 \
    X(GRAPH_UPLOAD, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                                 \
    X(GRAPH_EXEC_UPDATE, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                            \
    X(GRAPH_ADD_NODE, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                               \
    X(GRAPH_SET_NODE, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                               \
    X(GRAPH_ADD_DEPS, srv_graph_op, OP_BODY_PAYLOAD_OUT)                                               \
    X(GRAPH_QUERY, srv_graph_op, OP_BODY_PAYLOAD_OUT)

/* The argument lists a handler takes (the shape column above). */
#define SRV_CALL_OUT(fn) fn(c, out, &out_len)
#define SRV_CALL_BODY(fn) fn(c, body)
#define SRV_CALL_BODY_OUT(fn) fn(c, body, out, &out_len)
#define SRV_CALL_BODY_ANSWERED(fn) fn(c, body, answered)
#define SRV_CALL_BODY_PAYLOAD(fn) fn(c, body, payload, payload_len)
#define SRV_CALL_BODY_PAYLOAD_OUT(fn) fn(c, body, payload, payload_len, out, &out_len)
#define SRV_CALL_OP_BODY_OUT(fn) fn(c, hdr->op, body, out, &out_len)
#define SRV_CALL_OP_BODY_PAYLOAD_OUT(fn) fn(c, hdr->op, body, payload, payload_len, out, &out_len)

#define SRV_COUNT(name, fn, shape) +1
_Static_assert(0 SRV_HANDLERS(SRV_COUNT) == CUMUX_OP_COUNT - 1, "every command but PAD needs a handler");
#undef SRV_COUNT

int srv_dispatch(struct srv_client *c, void *msg, uint32_t size)
{
    const struct cumux_msg_hdr *hdr = msg;
    if (hdr->op == CUMUX_OP_PAD || hdr->op >= CUMUX_OP_COUNT)
        return -1;
    uint32_t body_len = size - (uint32_t)sizeof *hdr;
    if (body_len < op_shape[hdr->op].body)
        return -1;
    bool answered = hdr->reply != CUMUX_NO_REPLY;
    if (answered && hdr->reply >= CUMUX_REPLY_SLOTS)
        return -1;
    if ((op_shape[hdr->op].oneway == 1 && answered) || (op_shape[hdr->op].oneway == 0 && !answered))
        return -1;
    const void *body = hdr + 1;
    const uint8_t *payload = (const uint8_t *)body + op_shape[hdr->op].body;
    uint32_t payload_len = body_len - op_shape[hdr->op].body;

    /* Handlers write their reply here, in server memory, never straight into the reply slot: the slot is
     * shared memory the client may rewrite while a handler runs, so nothing there may be read back. */
    static __thread uint8_t scratch[CUMUX_REPLY_DATA];
    struct cumux_reply_slot *slot = answered ? &c->shm->replies[hdr->reply] : NULL;
    uint8_t *out = scratch;
    uint32_t out_len = 0;
    CUresult r;
    switch ((enum cumux_op)hdr->op) {
#define SRV_CASE(name, fn, shape) case CUMUX_OP_##name: r = SRV_CALL_##shape(fn); break;
        SRV_HANDLERS(SRV_CASE)
#undef SRV_CASE
    default: return -1;
    }
    if (slot) {
        if (r != CUDA_SUCCESS)
            out_len = 0;
        cumux_reply_post(slot, r, out, out_len);
    } else if (r != CUDA_SUCCESS && c->pending_error == CUDA_SUCCESS) {
        c->pending_error = r; /* reported by the next synchronizing call (invariant 2) */
    }
    return 0;
}

/* ---------------------------------------------------------------- cleanup */

void srv_client_release_all(struct srv_client *c)
{
    srv_staging_flush(c);
    /* Let in-flight work finish first: it may still use the memory freed below. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s) {
            use_gpu(c, s->ctx->gpu);
            cuStreamSynchronize(s->cu);
        }
    }
    srv_graph_release_all(c); /* graphs name the client's kernels and memory: before those go */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_module *mod = handle_get(c, h, OBJ_MODULE);
        if (mod)
            module_free(c, h, mod);
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_ctx *x = handle_get(c, h, OBJ_CTX);
        if (x)
            ctx_free(c, x);
    }
    while (c->dev_ranges.n) {
        struct cumux_range r = c->dev_ranges.v[c->dev_ranges.n - 1];
        cumux_ranges_remove(&c->dev_ranges, r.base, NULL);
        if (r.tag == RANGE_ALLOC) {
            CUstream ms;
            if (mem_stream(c, (int)r.extra, &ms) == CUDA_SUCCESS)
                cuMemFreeAsync(r.base, ms);
            atomic_fetch_sub(&c->mem_bytes, r.size);
        }
    }
    cumux_ranges_free(&c->dev_ranges);
    for (int g = 0; g < srv_gpu_count; g++) {
        if (c->mem_stream[g]) {
            use_gpu(c, g);
            cuStreamSynchronize(c->mem_stream[g]);
            cuStreamDestroy(c->mem_stream[g]);
            /* Give the freed memory back to the device now, not at the pool's leisure. */
            if (c->default_pool[g])
                cuMemPoolTrimTo(c->default_pool[g]->pool, 0);
        }
    }
    if (c->mem_event)
        cuEventDestroy(c->mem_event);
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_pool *p = handle_get(c, h, OBJ_POOL);
        if (p)
            pool_free(c, p);
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        if (c->handles[h - 1].type != OBJ_NONE) /* anything left is a bug: say so rather than leak quietly */
            cumux_logf("client %u: handle %u of type %d left after cleanup", c->id, h, c->handles[h - 1].type);
    }
    free(c->handles);
    c->handles = NULL;
    c->nhandles = c->caphandles = 0;
    while (c->host_ranges.n)
        host_release(c, c->host_ranges.v[0].base);
    cumux_ranges_free(&c->host_ranges);
    use_gpu(c, 0);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        if (c->stage_event[i])
            cuEventDestroy(c->stage_event[i]);
    /* The staging buffers stay mapped until the reaper has unregistered them (srv_client_free). */
}

