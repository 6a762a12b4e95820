/* CUDA graphs in the server. Stream capture is the driver's own: the client's work is submitted to its
 * real stream, which the server put in capture mode. Explicit graphs are built from the client's
 * description of each node, checked like any other command. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/dispatch.h"

struct srv_graph {
    CUgraph g;
};

struct srv_graph_exec {
    CUgraphExec e;
};

struct srv_graph_node {
    CUgraphNode n;
    uint32_t graph;
};

bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s)
{
    if (s->capturing)
        return true;
    if (!c->ever_captured)
        return false;
    /* Other streams join a capture through events: ask the driver. */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return cuStreamIsCapturing(s->cu, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j)
{
    pthread_mutex_lock(&c->hostfn_lock);
    j->next = c->graph_hostfns;
    c->graph_hostfns = j;
    pthread_mutex_unlock(&c->hostfn_lock);
}

static CUresult new_handle(struct srv_client *c, enum srv_obj_type t, void *obj, uint8_t *out, uint32_t *out_len)
{
    uint32_t h = handle_new(c, t, obj);
    if (!h) {
        free(obj);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return reply_u64(out, out_len, h);
}

static CUresult graph_new(struct srv_client *c, CUgraph g, uint8_t *out, uint32_t *out_len)
{
    struct srv_graph *sg = malloc(sizeof *sg);
    if (!sg) {
        cuGraphDestroy(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sg->g = g;
    CUresult r = new_handle(c, OBJ_GRAPH, sg, out, out_len);
    if (r != CUDA_SUCCESS)
        cuGraphDestroy(g);
    return r;
}

static void graph_free(struct srv_client *c, uint32_t h, struct srv_graph *g)
{
    /* Its nodes go with it. */
    for (uint32_t i = 1; i <= c->nhandles; i++) {
        struct srv_graph_node *n = handle_get(c, i, OBJ_GRAPH_NODE);
        if (n && n->graph == h) {
            handle_drop(c, i);
            free(n);
        }
    }
    cuGraphDestroy(g->g);
    handle_drop(c, h);
    free(g);
}

/* ---- stream capture and whole graphs ---- */
static CUresult graph_op(struct srv_client *c, uint16_t op, const struct cumux_graph_op *m, uint8_t *out,
                         uint32_t *out_len)
{
    struct srv_stream *s = NULL;
    struct srv_graph *g = NULL;
    struct srv_graph_exec *e = NULL;
    switch (op) {
    case CUMUX_OP_CAPTURE_BEGIN:
        if (!(s = stream_get(c, m->stream)))
            return CUDA_ERROR_INVALID_HANDLE;
        if (s->kind == STREAM_LEGACY)
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as the driver answers for the NULL stream */
        CHECK(cuStreamBeginCapture(s->cu, (CUstreamCaptureMode)m->mode));
        s->capturing = true;
        c->ever_captured = true;
        return CUDA_SUCCESS;
    case CUMUX_OP_CAPTURE_END: {
        if (!(s = stream_get(c, m->stream)))
            return CUDA_ERROR_INVALID_HANDLE;
        CUgraph graph = NULL;
        CUresult r = cuStreamEndCapture(s->cu, &graph);
        s->capturing = false;
        if (r != CUDA_SUCCESS)
            return r;
        return graph_new(c, graph, out, out_len);
    }
    case CUMUX_OP_CAPTURE_INFO: {
        if (!(s = stream_get(c, m->stream)))
            return CUDA_ERROR_INVALID_HANDLE;
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        cuuint64_t id = 0;
        CHECK(cuStreamGetCaptureInfo(s->cu, &st, &id, NULL, NULL, NULL, NULL));
        struct cumux_capture_info rep = {.status = (uint32_t)st, .id = id};
        memcpy(out, &rep, sizeof rep);
        *out_len = sizeof rep;
        return CUDA_SUCCESS;
    }
    case CUMUX_OP_GRAPH_CREATE: {
        CUgraph graph;
        CHECK(cuGraphCreate(&graph, (unsigned)m->flags));
        return graph_new(c, graph, out, out_len);
    }
    case CUMUX_OP_GRAPH_DESTROY:
        if (!(g = handle_get(c, m->graph, OBJ_GRAPH)))
            return CUDA_ERROR_INVALID_HANDLE;
        graph_free(c, m->graph, g);
        return CUDA_SUCCESS;
    case CUMUX_OP_GRAPH_INSTANTIATE: {
        if (!(g = handle_get(c, m->graph, OBJ_GRAPH)))
            return CUDA_ERROR_INVALID_HANDLE;
        /* Graphs that allocate memory on device launch are not offered yet. */
        if (m->flags & ~(uint64_t)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
            return CUDA_ERROR_NOT_SUPPORTED;
        e = malloc(sizeof *e);
        if (!e)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = cuGraphInstantiateWithFlags(&e->e, g->g, m->flags);
        if (r != CUDA_SUCCESS) {
            free(e);
            return r;
        }
        r = new_handle(c, OBJ_GRAPH_EXEC, e, out, out_len);
        return r;
    }
    case CUMUX_OP_GRAPH_EXEC_DESTROY:
        if (!(e = handle_get(c, m->exec, OBJ_GRAPH_EXEC)))
            return CUDA_ERROR_INVALID_HANDLE;
        cuGraphExecDestroy(e->e);
        handle_drop(c, m->exec);
        free(e);
        return CUDA_SUCCESS;
    case CUMUX_OP_GRAPH_LAUNCH:
    case CUMUX_OP_GRAPH_UPLOAD: {
        if (!(e = handle_get(c, m->exec, OBJ_GRAPH_EXEC)) || !(s = stream_get(c, m->stream)))
            return CUDA_ERROR_INVALID_HANDLE;
        CHECK(before_op(s));
        CUresult r = op == CUMUX_OP_GRAPH_LAUNCH ? cuGraphLaunch(e->e, s->cu) : cuGraphUpload(e->e, s->cu);
        after_op(s);
        return r;
    }
    case CUMUX_OP_GRAPH_EXEC_UPDATE: {
        if (!(e = handle_get(c, m->exec, OBJ_GRAPH_EXEC)) || !(g = handle_get(c, m->graph, OBJ_GRAPH)))
            return CUDA_ERROR_INVALID_HANDLE;
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof info);
        CUresult r = cuGraphExecUpdate(e->e, g->g, &info);
        struct cumux_capture_info rep = {.status = (uint32_t)info.result};
        memcpy(out, &rep, sizeof rep);
        *out_len = sizeof rep;
        return r;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ---- nodes ---- */
static CUresult kernel_params(struct srv_client *c, const uint8_t *payload, uint32_t len, CUDA_KERNEL_NODE_PARAMS *kp,
                              void **argv)
{
    const struct cumux_launch *l = (const void *)payload;
    if (len < sizeof *l || l->nattrs != 0 || l->param_bytes > len - sizeof *l)
        return CUDA_ERROR_INVALID_VALUE;
    struct srv_function *f = handle_get(c, l->function, OBJ_FUNCTION);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (l->param_bytes != f->param_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *params = payload + sizeof *l;
    for (uint32_t i = 0; i < f->nparams; i++)
        argv[i] = (void *)(params + f->param_offsets[i]);
    memset(kp, 0, sizeof *kp);
    if (f->is_kernel) {
        struct srv_module *mod = handle_get(c, f->module, OBJ_MODULE);
        kp->kern = (CUkernel)f->fn;
        kp->ctx = srv_gpus[mod ? mod->gpu : 0].ctx;
    } else {
        kp->func = f->fn;
    }
    kp->gridDimX = l->grid[0], kp->gridDimY = l->grid[1], kp->gridDimZ = l->grid[2];
    kp->blockDimX = l->block[0], kp->blockDimY = l->block[1], kp->blockDimZ = l->block[2];
    kp->sharedMemBytes = l->shared_bytes;
    kp->kernelParams = f->nparams ? argv : NULL;
    return CUDA_SUCCESS;
}

static CUresult add_node(struct srv_client *c, const struct cumux_graph_node *m, const CUgraphNode *deps,
                         const uint8_t *payload, uint32_t len, CUgraph g, CUgraphNode *node)
{
    switch (m->kind) {
    case CUMUX_NODE_EMPTY:
        return cuGraphAddEmptyNode(node, g, deps, m->ndeps);
    case CUMUX_NODE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS kp;
        void *argv[CUMUX_MAX_PARAMS];
        CHECK(kernel_params(c, payload, len, &kp, argv));
        return cuGraphAddKernelNode(node, g, deps, m->ndeps, &kp);
    }
    case CUMUX_NODE_MEMSET: {
        const struct cumux_memset *ms = (const void *)payload;
        uint64_t span;
        if (len < sizeof *ms || !memset_span(ms, &span) || span == 0 || !dev_ok(c, ms->dst, span))
            return CUDA_ERROR_INVALID_VALUE;
        uint64_t row = ms->width * ms->elem_size; /* no overflow: memset_span checked it */
        CUDA_MEMSET_NODE_PARAMS p = {.dst = ms->dst, .pitch = (size_t)(ms->pitch ? ms->pitch : row), .value = ms->value,
                                     .elementSize = ms->elem_size, .width = (size_t)ms->width, .height = (size_t)ms->height};
        return cuGraphAddMemsetNode(node, g, deps, m->ndeps, &p, srv_gpus[c->current_gpu].ctx);
    }
    case CUMUX_NODE_MEMCPY: {
        const struct cumux_copy_2d *cp = (const void *)payload;
        if (len < sizeof *cp)
            return CUDA_ERROR_INVALID_VALUE;
        uint64_t ds, ss;
        bool ok = cumux_span_2d(cp->dst_pitch, cp->width, cp->height, &ds) &&
                  cumux_span_2d(cp->src_pitch, cp->width, cp->height, &ss) &&
                  (cp->kind == CUMUX_COPY_HTOD   ? host_ok(c, cp->src, ss) && dev_ok(c, cp->dst, ds)
                   : cp->kind == CUMUX_COPY_DTOH ? dev_ok(c, cp->src, ss) && host_ok(c, cp->dst, ds)
                   : cp->kind == CUMUX_COPY_DTOD ? dev_ok(c, cp->src, ss) && dev_ok(c, cp->dst, ds)
                                                 : false);
        if (!ok)
            return CUDA_ERROR_INVALID_VALUE;
        CUDA_MEMCPY3D p;
        memset(&p, 0, sizeof p);
        if (cp->kind == CUMUX_COPY_HTOD) {
            p.srcMemoryType = CU_MEMORYTYPE_HOST;
            p.srcHost = (const void *)(uintptr_t)cp->src;
        } else {
            p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            p.srcDevice = cp->src;
        }
        if (cp->kind == CUMUX_COPY_DTOH) {
            p.dstMemoryType = CU_MEMORYTYPE_HOST;
            p.dstHost = (void *)(uintptr_t)cp->dst;
        } else {
            p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            p.dstDevice = cp->dst;
        }
        p.srcPitch = cp->src_pitch, p.dstPitch = cp->dst_pitch;
        p.WidthInBytes = cp->width, p.Height = cp->height, p.Depth = 1;
        return cuGraphAddMemcpyNode(node, g, deps, m->ndeps, &p, srv_gpus[c->current_gpu].ctx);
    }
    case CUMUX_NODE_HOST: {
        struct hostfn_job *j = malloc(sizeof *j);
        if (!j)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *j = (struct hostfn_job){.c = c, .id = m->host_fn_id, .persistent = true};
        srv_keep_hostfn_job(c, j);
        CUDA_HOST_NODE_PARAMS hp = {.fn = hostfn_trampoline, .userData = j};
        return cuGraphAddHostNode(node, g, deps, m->ndeps, &hp);
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The handles of a list, as driver nodes of graph g. */
static CUresult node_list(struct srv_client *c, const uint32_t *h, uint32_t n, uint32_t graph, CUgraphNode *out)
{
    for (uint32_t i = 0; i < n; i++) {
        struct srv_graph_node *nd = handle_get(c, h[i], OBJ_GRAPH_NODE);
        if (!nd || nd->graph != graph)
            return CUDA_ERROR_INVALID_VALUE;
        out[i] = nd->n;
    }
    return CUDA_SUCCESS;
}

#define MAX_DEPS 1024

/* The handle of a driver node of graph `graph`, made now if the client has not seen it (captured). */
static uint32_t node_handle(struct srv_client *c, uint32_t graph, CUgraphNode n)
{
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph_node *nd = handle_get(c, h, OBJ_GRAPH_NODE);
        if (nd && nd->n == n && nd->graph == graph)
            return h;
    }
    struct srv_graph_node *nd = malloc(sizeof *nd);
    if (!nd)
        return 0;
    nd->n = n;
    nd->graph = graph;
    uint32_t h = handle_new(c, OBJ_GRAPH_NODE, nd);
    if (!h)
        free(nd);
    return h;
}

static CUresult graph_query(struct srv_client *c, const struct cumux_graph_node *m, uint8_t *out, uint32_t *out_len)
{
    size_t n = 0;
    CUgraphNode *nodes = NULL;
    uint32_t graph;
    CUresult r;
    if (m->kind == 0) {
        struct srv_graph *g = handle_get(c, m->graph, OBJ_GRAPH);
        if (!g)
            return CUDA_ERROR_INVALID_HANDLE;
        graph = m->graph;
        CHECK(cuGraphGetNodes(g->g, NULL, &n));
        if (n && !(nodes = malloc(n * sizeof *nodes)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        r = n ? cuGraphGetNodes(g->g, nodes, &n) : CUDA_SUCCESS;
    } else {
        struct srv_graph_node *nd = handle_get(c, m->node, OBJ_GRAPH_NODE);
        if (!nd)
            return CUDA_ERROR_INVALID_HANDLE;
        graph = nd->graph;
        CHECK(cuGraphNodeGetDependencies(nd->n, NULL, NULL, &n));
        if (n && !(nodes = malloc(n * sizeof *nodes)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        r = n ? cuGraphNodeGetDependencies(nd->n, nodes, NULL, &n) : CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS) {
        uint64_t count = n;
        memcpy(out, &count, sizeof count);
        size_t fit = (CUMUX_REPLY_DATA - sizeof count) / sizeof(uint32_t);
        for (size_t i = 0; i < n && i < fit; i++) {
            uint32_t h = node_handle(c, graph, nodes[i]);
            if (!h) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            memcpy(out + sizeof count + i * sizeof h, &h, sizeof h);
        }
        *out_len = (uint32_t)(sizeof count + (n < fit ? n : fit) * sizeof(uint32_t));
    }
    free(nodes);
    return r;
}

static CUresult node_op(struct srv_client *c, uint16_t op, const struct cumux_graph_node *m, const uint8_t *payload,
                        uint32_t len, uint8_t *out, uint32_t *out_len)
{
    uint32_t lists = op == CUMUX_OP_GRAPH_ADD_DEPS ? 2 : 1;
    if (m->ndeps > MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t list_bytes = ((uint64_t)m->ndeps * 4 * lists + 7) & ~7ull;
    if (list_bytes > len)
        return CUDA_ERROR_INVALID_VALUE;
    const uint32_t *handles = (const void *)payload;
    const uint8_t *rest = payload + list_bytes;
    uint32_t rest_len = len - (uint32_t)list_bytes;
    use_gpu(c, c->current_gpu);
    if (op == CUMUX_OP_GRAPH_SET_NODE) {
        struct srv_graph_node *nd = handle_get(c, m->node, OBJ_GRAPH_NODE);
        if (!nd || m->kind != CUMUX_NODE_KERNEL)
            return CUDA_ERROR_INVALID_VALUE;
        CUDA_KERNEL_NODE_PARAMS kp;
        void *argv[CUMUX_MAX_PARAMS];
        CHECK(kernel_params(c, rest, rest_len, &kp, argv));
        if (!m->exec)
            return cuGraphKernelNodeSetParams(nd->n, &kp);
        struct srv_graph_exec *e = handle_get(c, m->exec, OBJ_GRAPH_EXEC);
        if (!e)
            return CUDA_ERROR_INVALID_HANDLE;
        return cuGraphExecKernelNodeSetParams(e->e, nd->n, &kp);
    }
    struct srv_graph *g = handle_get(c, m->graph, OBJ_GRAPH);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    CUgraphNode *deps = malloc(((size_t)m->ndeps * lists + 1) * sizeof *deps);
    if (!deps)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = node_list(c, handles, m->ndeps * lists, m->graph, deps);
    if (r == CUDA_SUCCESS && op == CUMUX_OP_GRAPH_ADD_DEPS) {
        r = cuGraphAddDependencies(g->g, deps, deps + m->ndeps, NULL, m->ndeps);
    } else if (r == CUDA_SUCCESS) {
        CUgraphNode node;
        r = add_node(c, m, deps, rest, rest_len, g->g, &node);
        if (r == CUDA_SUCCESS) {
            struct srv_graph_node *nd = malloc(sizeof *nd);
            if (!nd) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                nd->n = node;
                nd->graph = m->graph;
                r = new_handle(c, OBJ_GRAPH_NODE, nd, out, out_len);
            }
        }
    }
    free(deps);
    return r;
}

CUresult srv_graph_op(struct srv_client *c, uint16_t op, const void *body, const uint8_t *payload, uint32_t payload_len,
                      uint8_t *out, uint32_t *out_len)
{
    if (op == CUMUX_OP_GRAPH_QUERY)
        return graph_query(c, body, out, out_len);
    if (op == CUMUX_OP_GRAPH_ADD_NODE || op == CUMUX_OP_GRAPH_SET_NODE || op == CUMUX_OP_GRAPH_ADD_DEPS)
        return node_op(c, op, body, payload, payload_len, out, out_len);
    return graph_op(c, op, body, out, out_len);
}

void srv_graph_release_all(struct srv_client *c)
{
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph_exec *e = handle_get(c, h, OBJ_GRAPH_EXEC);
        if (e) {
            cuGraphExecDestroy(e->e);
            handle_drop(c, h);
            free(e);
        }
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph *g = handle_get(c, h, OBJ_GRAPH);
        if (g)
            graph_free(c, h, g);
    }
    while (c->graph_hostfns) {
        struct hostfn_job *j = c->graph_hostfns;
        c->graph_hostfns = j->next;
        free(j);
    }
}
