/* Graph nodes: adding them from the client's description of each (checked like any other command), their
 * parameters, dependencies and queries, each driver node named by a handle of the client's. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/graph.h"
#include "server/handlers.h"

/* ---- node parameters ---- */
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

/* The handles of a list, as driver nodes of graph g. */
CUresult graph_node_list(struct srv_client *c, const uint32_t *h, uint32_t n, uint32_t graph, CUgraphNode *out)
{
    for (uint32_t i = 0; i < n; i++) {
        struct srv_graph_node *nd = handle_get(c, h[i], OBJ_GRAPH_NODE);
        if (!nd || nd->graph != graph)
            return CUDA_ERROR_INVALID_VALUE;
        out[i] = nd->n;
    }
    return CUDA_SUCCESS;
}

/* ---- adding nodes ----
 * Every addition: the graph, ndeps dependency handles at the payload's start (padded to 8 bytes), then
 * the node's own parameters; the new node gets a handle. */
struct node_add {
    CUgraphNode deps[GRAPH_MAX_DEPS];
    uint32_t ndeps;
    const uint8_t *params; /* what follows the dependencies */
    uint32_t params_len;
};

static CUresult node_add_begin(struct srv_client *c, struct srv_graph *graph, uint32_t ndeps, const uint8_t *payload,
                               uint32_t len, struct node_add *a)
{
    if (ndeps > GRAPH_MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t list_bytes = (ndeps * 4 + 7) & ~7u;
    if (list_bytes > len)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->obj.current_gpu);
    a->ndeps = ndeps;
    a->params = payload + list_bytes;
    a->params_len = len - list_bytes;
    return graph_node_list(c, (const uint32_t *)(const void *)payload, ndeps, graph->handle, a->deps);
}

/* The client's handle of a node just added to graph (0: out of memory). */
uint32_t graph_node_wrap(struct srv_client *c, uint32_t graph, CUgraphNode node)
{
    struct srv_graph_node *nd = malloc(sizeof *nd);
    if (!nd)
        return 0;
    nd->n = node;
    nd->graph = graph;
    uint32_t h = handle_new(c, OBJ_GRAPH_NODE, nd);
    if (!h)
        free(nd);
    return h;
}

static CUresult node_add_end(struct srv_client *c, uint32_t graph, CUresult r, CUgraphNode node, uint8_t *out,
                             uint32_t *out_len)
{
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = graph_node_wrap(c, graph, node);
    return h ? reply_u64(out, out_len, h) : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult op_graph_add_mem_alloc_node(struct srv_client *c, const struct cumux_graph_add_mem_alloc_node *m,
                                     struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                     uint8_t *out, uint32_t *out_len)
{
    /* A capture's graph: its allocations would go with a failed capture unseen. */
    if (graph->capture)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (m->bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(srv_mem_fits(c, m->bytesize));
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = srv_gpus[c->obj.current_gpu].dev;
    p.bytesize = (size_t)m->bytesize;
    CUgraphNode node;
    CUresult r = cuGraphAddMemAllocNode(&node, graph->g, a.deps, a.ndeps, &p);
    if (r == CUDA_SUCCESS && (r = graph_mem_add(c, p.dptr, m->bytesize, c->obj.current_gpu)) != CUDA_SUCCESS) {
        cuGraphDestroyNode(node);
        return r;
    }
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = graph_node_wrap(c, graph->handle, node);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct cumux_graph_mem_alloc_reply rep = {.node = h, .dptr = p.dptr};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

CUresult op_graph_add_mem_free_node(struct srv_client *c, const struct cumux_graph_add_mem_free_node *m,
                                    struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                    uint8_t *out, uint32_t *out_len)
{
    if (graph->capture || !srv_graph_mem_is(c, m->dptr))
        return CUDA_ERROR_INVALID_VALUE;
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUgraphNode node;
    CUresult r = cuGraphAddMemFreeNode(&node, graph->g, a.deps, a.ndeps, m->dptr);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

/* ---- conditional nodes ----
 * The handle is the driver's value (kernels pass it to cudaGraphSetConditional); a node takes only one
 * made for its graph. The node's body graphs are the driver's, owned by the node: the client names them
 * by handles of its own, to add nodes to or capture into, and cannot destroy them; they go with the graph. */

CUresult op_graph_cond_handle(struct srv_client *c, const struct cumux_graph_cond_handle *m,
                              struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    if (m->flags & ~(uint32_t)CU_GRAPH_COND_ASSIGN_DEFAULT)
        return CUDA_ERROR_INVALID_VALUE;
    if (!graph_room_for_one((void **)&graph->conds, graph->nconds, &graph->capconds, sizeof *graph->conds))
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, c->obj.current_gpu);
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, graph->g, srv_gpus[c->obj.current_gpu].ctx, m->default_value, m->flags));
    graph->conds[graph->nconds++] = h;
    return reply_u64(out, out_len, h);
}

CUresult op_graph_add_cond_node(struct srv_client *c, const struct cumux_graph_add_cond_node *m,
                                struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                uint8_t *out, uint32_t *out_len)
{
    uint32_t max = (uint32_t)((CUMUX_REPLY_DATA - sizeof(struct cumux_graph_cond_node_reply)) / sizeof(uint32_t));
    bool known = false;
    for (uint32_t i = 0; i < graph->nconds && !known; i++)
        known = graph->conds[i] == m->cond;
    if (graph->capture || !known || m->type > CU_GRAPH_COND_TYPE_SWITCH || m->size == 0 || m->size > max)
        return CUDA_ERROR_INVALID_VALUE;
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = m->cond;
    p.conditional.type = (CUgraphConditionalNodeType)m->type;
    p.conditional.size = m->size;
    p.conditional.ctx = srv_gpus[c->obj.current_gpu].ctx;
    CUgraphNode node;
    CUresult r = cuGraphAddNode(&node, graph->g, a.deps, NULL, a.ndeps, &p);
    if (r != CUDA_SUCCESS)
        return r;
    if (!p.conditional.phGraph_out) {
        cuGraphDestroyNode(node);
        return CUDA_ERROR_UNKNOWN;
    }
    /* The bodies' handles first, then the node's: on failure, what was made goes again. */
    uint32_t *bodies = calloc(m->size, sizeof *bodies);
    uint32_t made = 0;
    for (; bodies && made < m->size; made++) {
        struct srv_graph *b = calloc(1, sizeof *b);
        if (!b)
            break;
        b->g = p.conditional.phGraph_out[made];
        b->parent = graph->handle;
        if (graph_new_handle(c, OBJ_GRAPH, b, &b->handle, out, out_len) != CUDA_SUCCESS) /* frees b */
            break;
        bodies[made] = b->handle;
    }
    uint32_t h = bodies && made == m->size ? graph_node_wrap(c, graph->handle, node) : 0;
    if (!h) {
        for (uint32_t i = 0; bodies && i < made; i++)
            graph_free(c, handle_get(c, bodies[i], OBJ_GRAPH));
        cuGraphDestroyNode(node);
        free(bodies);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct cumux_graph_cond_node_reply rep = {.node = h, .count = m->size};
    memcpy(out, &rep, sizeof rep);
    memcpy(out + sizeof rep, bodies, m->size * sizeof *bodies);
    *out_len = (uint32_t)(sizeof rep + m->size * sizeof *bodies);
    free(bodies);
    return CUDA_SUCCESS;
}

CUresult op_graph_add_empty_node(struct srv_client *c, const struct cumux_graph_add_node *m,
                                 struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                 uint8_t *out, uint32_t *out_len)
{
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUgraphNode node;
    CUresult r = cuGraphAddEmptyNode(&node, graph->g, a.deps, a.ndeps);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

CUresult op_graph_add_kernel_node(struct srv_client *c, const struct cumux_graph_add_node *m,
                                  struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                  uint8_t *out, uint32_t *out_len)
{
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUDA_KERNEL_NODE_PARAMS kp;
    void *argv[CUMUX_MAX_PARAMS];
    CHECK(kernel_params(c, a.params, a.params_len, &kp, argv));
    CUgraphNode node;
    CUresult r = cuGraphAddKernelNode(&node, graph->g, a.deps, a.ndeps, &kp);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

/* A memset node's parameters from the client's description: the span its own, computed with overflow checks. */
static CUresult memset_node_params(struct srv_client *c, const uint8_t *params, uint32_t len, CUDA_MEMSET_NODE_PARAMS *p)
{
    const struct cumux_memset *ms = (const void *)params;
    uint64_t span;
    if (len < sizeof *ms || !memset_span(ms, &span) || span == 0 || !dev_ok(c, ms->dst, span))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t row = ms->width * ms->elem_size; /* no overflow: memset_span checked it */
    *p = (CUDA_MEMSET_NODE_PARAMS){.dst = ms->dst, .pitch = (size_t)(ms->pitch ? ms->pitch : row), .value = ms->value,
                                   .elementSize = ms->elem_size, .width = (size_t)ms->width, .height = (size_t)ms->height};
    return CUDA_SUCCESS;
}

CUresult op_graph_add_memset_node(struct srv_client *c, const struct cumux_graph_add_node *m,
                                  struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                  uint8_t *out, uint32_t *out_len)
{
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUDA_MEMSET_NODE_PARAMS p;
    CHECK(memset_node_params(c, a.params, a.params_len, &p));
    CUgraphNode node;
    CUresult r = cuGraphAddMemsetNode(&node, graph->g, a.deps, a.ndeps, &p, srv_gpus[c->obj.current_gpu].ctx);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

/* A copy node's parameters from the client's description: both ends its own (device memory, or pinned
 * memory by the server's address), every span computed with overflow checks. */
static CUresult memcpy_node_params(struct srv_client *c, const uint8_t *params, uint32_t len, CUDA_MEMCPY3D *p)
{
    const struct cumux_copy_2d *cp = (const void *)params;
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
    memset(p, 0, sizeof *p);
    if (cp->kind == CUMUX_COPY_HTOD) {
        p->srcMemoryType = CU_MEMORYTYPE_HOST;
        p->srcHost = (const void *)(uintptr_t)cp->src;
    } else {
        p->srcMemoryType = CU_MEMORYTYPE_DEVICE;
        p->srcDevice = cp->src;
    }
    if (cp->kind == CUMUX_COPY_DTOH) {
        p->dstMemoryType = CU_MEMORYTYPE_HOST;
        p->dstHost = (void *)(uintptr_t)cp->dst;
    } else {
        p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
        p->dstDevice = cp->dst;
    }
    p->srcPitch = cp->src_pitch, p->dstPitch = cp->dst_pitch;
    p->WidthInBytes = cp->width, p->Height = cp->height, p->Depth = 1;
    return CUDA_SUCCESS;
}

CUresult op_graph_add_memcpy_node(struct srv_client *c, const struct cumux_graph_add_node *m,
                                  struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                  uint8_t *out, uint32_t *out_len)
{
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUDA_MEMCPY3D p;
    CHECK(memcpy_node_params(c, a.params, a.params_len, &p));
    CUgraphNode node;
    CUresult r = cuGraphAddMemcpyNode(&node, graph->g, a.deps, a.ndeps, &p, srv_gpus[c->obj.current_gpu].ctx);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

CUresult op_graph_set_memcpy_node(struct srv_client *c, struct srv_graph_node *node, struct srv_graph_exec *exec,
                                  const uint8_t *payload, uint32_t payload_len)
{
    CUDA_MEMCPY3D p;
    CHECK(memcpy_node_params(c, payload, payload_len, &p));
    use_gpu(c, c->obj.current_gpu);
    if (!exec)
        return cuGraphMemcpyNodeSetParams(node->n, &p);
    return cuGraphExecMemcpyNodeSetParams(exec->e, node->n, &p, srv_gpus[c->obj.current_gpu].ctx);
}

CUresult op_graph_add_child_node(struct srv_client *c, const struct cumux_graph_add_child *m, struct srv_graph *graph,
                                 struct srv_graph *child, const uint8_t *payload, uint32_t payload_len, uint8_t *out,
                                 uint32_t *out_len)
{
    if (child->capture || child == graph) /* a capture's graph is not finished; a graph is not its own child */
        return CUDA_ERROR_INVALID_VALUE;
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUgraphNode node;
    CUresult r = cuGraphAddChildGraphNode(&node, graph->g, a.deps, a.ndeps, child->g); /* the driver copies it */
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

/* Event record and wait nodes: the event is kept past its destruction while the client has graphs (a
 * node must never name a CUevent that another client gets since). */
CUresult op_graph_add_event_node(struct srv_client *c, const struct cumux_graph_add_event_node *m,
                                 struct srv_graph *graph, struct srv_event *event, const uint8_t *payload,
                                 uint32_t payload_len, uint8_t *out, uint32_t *out_len)
{
    if (m->wait > 1 || event->ctx->gpu != c->obj.current_gpu)
        return CUDA_ERROR_INVALID_VALUE;
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    event->in_graph = true;
    CUgraphNode node;
    CUresult r = m->wait ? cuGraphAddEventWaitNode(&node, graph->g, a.deps, a.ndeps, event->cu)
                         : cuGraphAddEventRecordNode(&node, graph->g, a.deps, a.ndeps, event->cu);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

CUresult op_node_set_event(struct srv_client *c, const struct cumux_node_set_event *m, struct srv_graph_node *node,
                           struct srv_graph_exec *exec, struct srv_event *event)
{
    use_gpu(c, c->obj.current_gpu);
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    if (type != (m->wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD) ||
        event->ctx->gpu != c->obj.current_gpu)
        return CUDA_ERROR_INVALID_VALUE;
    event->in_graph = true;
    bool record = type == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    if (!exec)
        return record ? cuGraphEventRecordNodeSetEvent(node->n, event->cu)
                      : cuGraphEventWaitNodeSetEvent(node->n, event->cu);
    return record ? cuGraphExecEventRecordNodeSetEvent(exec->e, node->n, event->cu)
                  : cuGraphExecEventWaitNodeSetEvent(exec->e, node->n, event->cu);
}

/* A graph host node's parameters: a job of the client's that lives as long as the client (instances made
 * earlier may still name an old one), run by the server's trampoline. */
static CUresult host_node_params(struct srv_client *c, uint64_t host_fn_id, CUDA_HOST_NODE_PARAMS *p)
{
    struct hostfn_job *j = malloc(sizeof *j);
    if (!j)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *j = (struct hostfn_job){.c = c, .id = host_fn_id, .persistent = true, .slot = CUMUX_HOSTFN_NO_SLOT};
    srv_keep_hostfn_job(c, j);
    *p = (CUDA_HOST_NODE_PARAMS){.fn = hostfn_trampoline, .userData = j};
    return CUDA_SUCCESS;
}

CUresult op_graph_add_host_node(struct srv_client *c, const struct cumux_graph_add_host_node *m,
                                struct srv_graph *graph, const uint8_t *payload, uint32_t payload_len,
                                uint8_t *out, uint32_t *out_len)
{
    struct node_add a;
    CHECK(node_add_begin(c, graph, m->ndeps, payload, payload_len, &a));
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(host_node_params(c, m->host_fn_id, &hp));
    CUgraphNode node;
    CUresult r = cuGraphAddHostNode(&node, graph->g, a.deps, a.ndeps, &hp);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

CUresult op_graph_set_kernel_node(struct srv_client *c, struct srv_graph_node *node,
                                  struct srv_graph_exec *exec, const uint8_t *payload, uint32_t payload_len)
{
    use_gpu(c, c->obj.current_gpu);
    CUDA_KERNEL_NODE_PARAMS kp;
    void *argv[CUMUX_MAX_PARAMS];
    CHECK(kernel_params(c, payload, payload_len, &kp, argv));
    if (!exec)
        return cuGraphKernelNodeSetParams(node->n, &kp);
    return cuGraphExecKernelNodeSetParams(exec->e, node->n, &kp);
}

CUresult op_graph_set_memset_node(struct srv_client *c, struct srv_graph_node *node, struct srv_graph_exec *exec,
                                  const uint8_t *payload, uint32_t payload_len)
{
    CUDA_MEMSET_NODE_PARAMS p;
    CHECK(memset_node_params(c, payload, payload_len, &p));
    use_gpu(c, c->obj.current_gpu);
    if (!exec)
        return cuGraphMemsetNodeSetParams(node->n, &p);
    return cuGraphExecMemsetNodeSetParams(exec->e, node->n, &p, srv_gpus[c->obj.current_gpu].ctx);
}

CUresult op_graph_set_host_node(struct srv_client *c, const struct cumux_graph_set_host_node *m,
                                struct srv_graph_node *node, struct srv_graph_exec *exec)
{
    use_gpu(c, c->obj.current_gpu);
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(host_node_params(c, m->host_fn_id, &hp));
    if (!exec)
        return cuGraphHostNodeSetParams(node->n, &hp);
    return cuGraphExecHostNodeSetParams(exec->e, node->n, &hp);
}

static CUresult change_deps(struct srv_client *c, const struct cumux_graph_add_deps *m, struct srv_graph *graph,
                            const uint8_t *payload, uint32_t payload_len, bool remove)
{
    if (m->ndeps > GRAPH_MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t list_bytes = (m->ndeps * 8 + 7) & ~7u;
    if (list_bytes > payload_len)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->obj.current_gpu);
    CUgraphNode *ends = malloc(((size_t)m->ndeps * 2 + 1) * sizeof *ends);
    if (!ends)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = graph_node_list(c, (const uint32_t *)(const void *)payload, m->ndeps * 2, graph->handle, ends);
    if (r == CUDA_SUCCESS)
        r = remove ? cuGraphRemoveDependencies(graph->g, ends, ends + m->ndeps, NULL, m->ndeps)
                   : cuGraphAddDependencies(graph->g, ends, ends + m->ndeps, NULL, m->ndeps);
    free(ends);
    return r;
}

CUresult op_graph_add_deps(struct srv_client *c, const struct cumux_graph_add_deps *m, struct srv_graph *graph,
                           const uint8_t *payload, uint32_t payload_len)
{
    return change_deps(c, m, graph, payload, payload_len, false);
}

CUresult op_graph_remove_deps(struct srv_client *c, const struct cumux_graph_add_deps *m, struct srv_graph *graph,
                              const uint8_t *payload, uint32_t payload_len)
{
    return change_deps(c, m, graph, payload, payload_len, true);
}

CUresult op_node_destroy(struct srv_client *c, struct srv_graph_node *node)
{
    struct srv_graph *graph = handle_get(c, node->graph, OBJ_GRAPH);
    if (!graph || graph->capture) /* a running capture's nodes are the capture's */
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->obj.current_gpu);
    /* An allocation node holds the address the client may name: it stays (graph memory above). */
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_CONDITIONAL) /* and its bodies */
        return CUDA_ERROR_NOT_SUPPORTED;
    CHECK(cuGraphDestroyNode(node->n));
    SRV_FOR_EACH_HANDLE(c, h) {
        if (handle_get(c, h, OBJ_GRAPH_NODE) == node) {
            handle_drop(c, h);
            break;
        }
    }
    free(node);
    return CUDA_SUCCESS;
}

CUresult op_node_enabled(struct srv_client *c, const struct cumux_node_enabled *m, struct srv_graph_exec *exec,
                         struct srv_graph_node *node, uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, c->obj.current_gpu);
    if (m->set)
        CHECK(cuGraphNodeSetEnabled(exec->e, node->n, m->enabled ? 1 : 0));
    unsigned on = 0;
    CHECK(cuGraphNodeGetEnabled(exec->e, node->n, &on));
    return reply_u64(out, out_len, on);
}

/* ---- queries ---- */
/* The handle of a driver node of graph `graph`, made now if the client has not seen it (captured). */
uint32_t graph_node_handle(struct srv_client *c, uint32_t graph, CUgraphNode n)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_graph_node *nd = handle_get(c, h, OBJ_GRAPH_NODE);
        if (nd && nd->n == n && nd->graph == graph)
            return h;
    }
    return graph_node_wrap(c, graph, n);
}

CUresult op_node_find_in_clone(struct srv_client *c, struct srv_graph_node *node, struct srv_graph *clone,
                               uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, c->obj.current_gpu);
    CUgraphNode n;
    CHECK(cuGraphNodeFindInClone(&n, node->n, clone->g));
    uint32_t h = graph_node_handle(c, clone->handle, n);
    return h ? reply_u64(out, out_len, h) : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The driver's node lists, each asked the same way: NULL for the count, then an array. */
typedef CUresult (*node_lister)(const void *of, CUgraphNode *nodes, size_t *n);
static CUresult list_nodes(const void *g, CUgraphNode *v, size_t *n) { return cuGraphGetNodes((CUgraph)g, v, n); }
static CUresult list_roots(const void *g, CUgraphNode *v, size_t *n) { return cuGraphGetRootNodes((CUgraph)g, v, n); }
static CUresult list_deps(const void *nd, CUgraphNode *v, size_t *n)
{
    return cuGraphNodeGetDependencies((CUgraphNode)nd, v, NULL, n);
}
static CUresult list_dependents(const void *nd, CUgraphNode *v, size_t *n)
{
    return cuGraphNodeGetDependentNodes((CUgraphNode)nd, v, NULL, n);
}

/* The reply of a node query: the count, then the nodes' handles (in graph `graph`), as many as fit. */
static CUresult reply_nodes(struct srv_client *c, uint32_t graph, node_lister list, const void *of, uint8_t *out,
                            uint32_t *out_len)
{
    size_t n = 0;
    CHECK(list(of, NULL, &n));
    CUgraphNode *nodes = NULL;
    if (n && !(nodes = malloc(n * sizeof *nodes)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = n ? list(of, nodes, &n) : CUDA_SUCCESS;
    uint64_t count = n;
    memcpy(out, &count, sizeof count);
    size_t fit = (CUMUX_REPLY_DATA - sizeof count) / sizeof(uint32_t), i = 0;
    for (; r == CUDA_SUCCESS && i < n && i < fit; i++) {
        uint32_t h = graph_node_handle(c, graph, nodes[i]);
        if (!h)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(out + sizeof count + i * sizeof h, &h, sizeof h);
    }
    *out_len = (uint32_t)(sizeof count + i * sizeof(uint32_t));
    free(nodes);
    return r;
}

CUresult op_graph_get_nodes(struct srv_client *c, struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    return reply_nodes(c, graph->handle, list_nodes, graph->g, out, out_len);
}

CUresult op_graph_get_root_nodes(struct srv_client *c, struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    return reply_nodes(c, graph->handle, list_roots, graph->g, out, out_len);
}

CUresult op_node_get_deps(struct srv_client *c, struct srv_graph_node *node, uint8_t *out, uint32_t *out_len)
{
    return reply_nodes(c, node->graph, list_deps, node->n, out, out_len);
}

CUresult op_node_get_dependents(struct srv_client *c, struct srv_graph_node *node, uint8_t *out, uint32_t *out_len)
{
    return reply_nodes(c, node->graph, list_dependents, node->n, out, out_len);
}

/* The count, then the edges as (from, to) handle pairs, as many as fit. */
CUresult op_graph_get_edges(struct srv_client *c, struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    size_t n = 0;
    CHECK(cuGraphGetEdges(graph->g, NULL, NULL, NULL, &n));
    CUgraphNode *ends = NULL;
    if (n && !(ends = malloc(2 * n * sizeof *ends)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = n ? cuGraphGetEdges(graph->g, ends, ends + n, NULL, &n) : CUDA_SUCCESS;
    uint64_t count = n;
    memcpy(out, &count, sizeof count);
    size_t fit = (CUMUX_REPLY_DATA - sizeof count) / (2 * sizeof(uint32_t)), i = 0;
    for (; r == CUDA_SUCCESS && i < n && i < fit; i++) {
        uint32_t pair[2] = {graph_node_handle(c, graph->handle, ends[i]), graph_node_handle(c, graph->handle, ends[n + i])};
        if (!pair[0] || !pair[1])
            r = CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(out + sizeof count + i * sizeof pair, pair, sizeof pair);
    }
    *out_len = (uint32_t)(sizeof count + i * 2 * sizeof(uint32_t));
    free(ends);
    return r;
}

/* The client's handle of a node's function. A library kernel's node may name the kernel or the kernel's
 * function in the context (how a capture of a launch of the kernel records it): either is the kernel's.
 * The kernel itself first; the driver is asked for functions only when no kernel or function matched. */
static uint32_t function_handle(struct srv_client *c, CUfunction fn, struct srv_function **out) /* or 0 */
{
    for (int pass = 0; pass < 2; pass++)
        SRV_FOR_EACH_HANDLE(c, h) {
            struct srv_function *f = handle_get(c, h, OBJ_FUNCTION);
            CUfunction in_ctx = NULL;
            if (f && (pass == 0 ? f->fn == fn
                                : f->is_kernel && cuKernelGetFunction(&in_ctx, (CUkernel)f->fn) == CUDA_SUCCESS &&
                                      in_ctx == fn)) {
                *out = f;
                return h;
            }
        }
    return 0;
}

CUresult op_node_get_params(struct srv_client *c, struct srv_graph_node *node, uint8_t *out, uint32_t *out_len)
{
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    struct cumux_node_params_reply rep = {.type = (uint32_t)type};
    uint32_t extra = 0;
    switch (type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS p;
        CHECK(cuGraphMemsetNodeGetParams(node->n, &p));
        rep.dst = p.dst, rep.pitch = p.pitch, rep.value = p.value, rep.element_size = p.elementSize;
        rep.width = p.width, rep.height = p.height;
        break;
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS p;
        CHECK(cuGraphHostNodeGetParams(node->n, &p));
        if (p.fn != hostfn_trampoline || !p.userData) /* every host function of a client's is the server's */
            return CUDA_ERROR_NOT_SUPPORTED;
        rep.host_fn_id = ((const struct hostfn_job *)p.userData)->id;
        break;
    }
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS p;
        CHECK(cuGraphKernelNodeGetParams(node->n, &p));
        struct srv_function *f = NULL;
        if (!(rep.function = function_handle(c, p.func, &f)) || !p.kernelParams ||
            f->param_bytes > CUMUX_REPLY_DATA - sizeof rep)
            return CUDA_ERROR_NOT_SUPPORTED; /* a function the client never looked up, or arguments by `extra` */
        rep.grid[0] = p.gridDimX, rep.grid[1] = p.gridDimY, rep.grid[2] = p.gridDimZ;
        rep.block[0] = p.blockDimX, rep.block[1] = p.blockDimY, rep.block[2] = p.blockDimZ;
        rep.shared_bytes = p.sharedMemBytes;
        rep.param_bytes = f->param_bytes;
        memset(out + sizeof rep, 0, f->param_bytes);
        for (uint32_t i = 0; i < f->nparams; i++) /* offset + size <= param_bytes: module.c checked */
            memcpy(out + sizeof rep + f->param_offsets[i], p.kernelParams[i], f->param_sizes[i]);
        extra = f->param_bytes;
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUDA_MEMCPY3D p;
        CHECK(cuGraphMemcpyNodeGetParams(node->n, &p));
        /* The plain copies cumux makes and captures make: no arrays, offsets or slices. */
        bool sd = p.srcMemoryType == CU_MEMORYTYPE_DEVICE || p.srcMemoryType == CU_MEMORYTYPE_UNIFIED;
        bool dd = p.dstMemoryType == CU_MEMORYTYPE_DEVICE || p.dstMemoryType == CU_MEMORYTYPE_UNIFIED;
        if ((!sd && p.srcMemoryType != CU_MEMORYTYPE_HOST) || (!dd && p.dstMemoryType != CU_MEMORYTYPE_HOST) ||
            p.srcXInBytes || p.srcY || p.srcZ || p.dstXInBytes || p.dstY || p.dstZ || p.Depth > 1)
            return CUDA_ERROR_NOT_SUPPORTED;
        rep.src = sd ? p.srcDevice : (uint64_t)(uintptr_t)p.srcHost;
        rep.dst = dd ? p.dstDevice : (uint64_t)(uintptr_t)p.dstHost;
        rep.src_pitch = p.srcPitch, rep.pitch = p.dstPitch, rep.width = p.WidthInBytes, rep.height = p.Height;
        rep.copy_kind = sd && dd ? CUMUX_COPY_DTOD : dd ? CUMUX_COPY_HTOD : sd ? CUMUX_COPY_DTOH : 0 /* host to host */;
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        CHECK(cuGraphMemAllocNodeGetParams(node->n, &p));
        rep.dst = p.dptr, rep.width = p.bytesize;
        break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
        CUdeviceptr p = 0;
        CHECK(cuGraphMemFreeNodeGetParams(node->n, &p));
        rep.dst = p;
        break;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
        CUevent ev;
        CHECK(type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? cuGraphEventRecordNodeGetEvent(node->n, &ev)
                                                      : cuGraphEventWaitNodeGetEvent(node->n, &ev));
        SRV_FOR_EACH_HANDLE(c, h) if (!rep.event) {
            struct srv_event *e = handle_get(c, h, OBJ_EVENT);
            if (e && e->cu == ev)
                rep.event = h;
        }
        if (!rep.event)
            return CUDA_ERROR_NOT_SUPPORTED; /* an event the client has destroyed since */
        break;
    }
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    memcpy(out, &rep, sizeof rep);
    *out_len = (uint32_t)sizeof rep + extra;
    return CUDA_SUCCESS;
}

CUresult op_node_get_type(struct srv_client *c, struct srv_graph_node *node, uint8_t *out, uint32_t *out_len)
{
    (void)c;
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    return reply_u64(out, out_len, (uint64_t)type);
}
