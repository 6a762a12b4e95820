/* What the program asks of a graph: its nodes, roots, edges and dependencies, and a node's type and
 * parameters, read back from the server (the node objects are graph.c's). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"
#include "shim/graph.h"

/* ---- queries ---- */
/* A node query (GRAPH_GET_NODES, GRAPH_GET_ROOT_NODES, NODE_GET_DEPS, NODE_GET_DEPENDENTS; body m): the
 * nodes of graph g it answers. */
static CUresult query_nodes(uint16_t op, const void *m, size_t m_len, struct CUgraph_st *g, CUgraphNode *nodes,
                            size_t *num)
{
    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    CUresult r = shim_call(op, m, m_len, buf, sizeof buf, &len);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t count;
    memcpy(&count, buf, sizeof count);
    size_t have = (len - sizeof count) / sizeof(uint32_t);
    if (!nodes) {
        *num = (size_t)count;
        return CUDA_SUCCESS;
    }
    size_t i = 0;
    for (; i < *num && i < count && i < have; i++) {
        uint32_t h;
        memcpy(&h, buf + sizeof count + i * sizeof h, sizeof h);
        if (!(nodes[i] = shim_graph_node_object(h, g)))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t k = i; k < *num; k++)
        nodes[k] = NULL;
    *num = i;
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *num)
{
    if (!graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_graph_get_nodes m = {.graph = g->handle};
    return query_nodes(CUMUX_OP_GRAPH_GET_NODES, &m, sizeof m, g, nodes, num);
}

CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *num)
{
    if (!node_ok(node))
        return CUDA_ERROR_INVALID_VALUE;
    if (edges && num && deps)
        memset(edges, 0, *num * sizeof *edges); /* default edges: the only kind cumux builds */
    struct cumux_node_get_deps m = {.node = node->handle};
    return query_nodes(CUMUX_OP_NODE_GET_DEPS, &m, sizeof m, node->graph, deps, num);
}

/* ---- a node's parameters ---- */
static CUresult node_params(CUgraphNode node, CUgraphNodeType want, struct cumux_node_params_reply *rep,
                            const uint8_t **args)
{
    if (!node_ok(node))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_query q = {.node = node->handle};
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    CUresult r = cumux_unsupported_if(shim_call(CUMUX_OP_NODE_GET_PARAMS, &q, sizeof q, buf, sizeof buf, &len),
                                      "cuGraph*NodeGetParams of a node whose parameters cumux cannot read back");
    if (r != CUDA_SUCCESS)
        return r;
    if (len < sizeof *rep)
        return CUDA_ERROR_UNKNOWN;
    memcpy(rep, buf, sizeof *rep);
    if (rep->type != (uint32_t)want || len - sizeof *rep < rep->param_bytes)
        return CUDA_ERROR_INVALID_VALUE; /* a node of another kind */
    *args = buf + sizeof *rep;
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_KERNEL, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUfunc_st *f = shim_function_of(rep.function);
    if (!f || f->param_bytes != rep.param_bytes)
        return cumux_unsupported("cuGraphKernelNodeGetParams of a kernel the program never looked up itself");
    /* The arguments live in the node until its parameters are asked for again, as the driver's do. */
    uint8_t *args = malloc(rep.param_bytes ? rep.param_bytes : 1);
    void **argv = malloc((f->nparams + 1) * sizeof *argv);
    if (!args || !argv) {
        free(args);
        free(argv);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(args, packed, rep.param_bytes);
    for (uint32_t i = 0; i < f->nparams; i++)
        argv[i] = args + f->params[i].offset;
    argv[f->nparams] = NULL;
    free(node->args);
    free(node->argv);
    node->args = args;
    node->argv = argv;
    memset(p, 0, sizeof *p);
    p->func = f;
    p->gridDimX = rep.grid[0], p->gridDimY = rep.grid[1], p->gridDimZ = rep.grid[2];
    p->blockDimX = rep.block[0], p->blockDimY = rep.block[1], p->blockDimZ = rep.block[2];
    p->sharedMemBytes = rep.shared_bytes;
    p->kernelParams = argv;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_MEMSET, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    *p = (CUDA_MEMSET_NODE_PARAMS){.dst = rep.dst, .pitch = (size_t)rep.pitch, .value = rep.value,
                                   .elementSize = rep.element_size, .width = (size_t)rep.width,
                                   .height = (size_t)rep.height};
    return CUDA_SUCCESS;
}

/* A copy node's parameters: device ends as they are, pinned ends at the program's own addresses. */
CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_MEMCPY, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    bool sd = rep.copy_kind == CUMUX_COPY_DTOH || rep.copy_kind == CUMUX_COPY_DTOD;
    bool dd = rep.copy_kind == CUMUX_COPY_HTOD || rep.copy_kind == CUMUX_COPY_DTOD;
    uint64_t src = sd ? rep.src : shim_pinned_client_addr(rep.src);
    uint64_t dst = dd ? rep.dst : shim_pinned_client_addr(rep.dst);
    if (!src || !dst)
        return cumux_unsupported("cuGraphMemcpyNodeGetParams of a copy with a host end the program no longer has");
    memset(p, 0, sizeof *p);
    p->srcMemoryType = sd ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    p->dstMemoryType = dd ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (sd)
        p->srcDevice = src;
    else
        p->srcHost = (const void *)(uintptr_t)src;
    if (dd)
        p->dstDevice = dst;
    else
        p->dstHost = (void *)(uintptr_t)dst;
    p->srcPitch = (size_t)rep.src_pitch, p->dstPitch = (size_t)rep.pitch;
    p->WidthInBytes = (size_t)rep.width, p->Height = (size_t)rep.height, p->Depth = 1;
    return CUDA_SUCCESS;
}

CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_HOST, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    CUhostFn fn;
    void *data;
    if (!shim_hostfn_lookup(rep.host_fn_id, &fn, &data))
        return cumux_unsupported("cuGraphHostNodeGetParams of a host function the shim no longer knows");
    p->fn = fn;
    p->userData = data;
    return CUDA_SUCCESS;
}

static CUresult node_event(CUgraphNode node, CUgraphNodeType type, CUevent *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, type, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUevent_st *e = shim_event_of(rep.event);
    if (!e)
        return cumux_unsupported("cuGraphEvent*NodeGetEvent of an event the shim no longer knows");
    *out = e;
    return CUDA_SUCCESS;
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent *out)
{
    return node_event(node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out);
}

CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent *out)
{
    return node_event(node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out);
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    if (!node_ok(node) || !type)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t t;
    CUresult r = shim_op_node_get_type(node->handle, &t);
    if (r == CUDA_SUCCESS)
        *type = (CUgraphNodeType)t;
    return r;
}

CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode *nodes, size_t *num)
{
    if (!graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_graph_get_root_nodes m = {.graph = g->handle};
    return query_nodes(CUMUX_OP_GRAPH_GET_ROOT_NODES, &m, sizeof m, g, nodes, num);
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *out, CUgraphEdgeData *edges, size_t *num)
{
    if (!node_ok(node))
        return CUDA_ERROR_INVALID_VALUE;
    if (edges && num && out)
        memset(edges, 0, *num * sizeof *edges); /* default edges: the only kind cumux builds */
    struct cumux_node_get_dependents m = {.node = node->handle};
    return query_nodes(CUMUX_OP_NODE_GET_DEPENDENTS, &m, sizeof m, node->graph, out, num);
}

CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *num)
{
    if (!graph_ok(g) || !num || (from == NULL) != (to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    struct cumux_graph_get_edges m = {.graph = g->handle};
    CUresult r = shim_call(CUMUX_OP_GRAPH_GET_EDGES, &m, sizeof m, buf, sizeof buf, &len);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t count;
    memcpy(&count, buf, sizeof count);
    if (!from) {
        *num = (size_t)count;
        return CUDA_SUCCESS;
    }
    size_t have = (len - sizeof count) / (2 * sizeof(uint32_t)), i = 0;
    for (; i < *num && i < count && i < have; i++) {
        uint32_t pair[2];
        memcpy(pair, buf + sizeof count + i * sizeof pair, sizeof pair);
        if (!(from[i] = shim_graph_node_object(pair[0], g)) || !(to[i] = shim_graph_node_object(pair[1], g)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (edges)
            memset(&edges[i], 0, sizeof edges[i]);
    }
    for (size_t k = i; k < *num; k++)
        from[k] = to[k] = NULL;
    *num = i;
    return CUDA_SUCCESS;
}

/* Graph memory nodes: the allocation is on the current context's device, as the driver reports it. */
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &rep, &packed);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *ctx = shim_current_ctx();
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = ctx ? ctx->device : 0;
    p->bytesize = (size_t)rep.width;
    p->dptr = rep.dst;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr *dptr)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_node_params_reply rep;
    const uint8_t *packed;
    CUresult r = node_params(node, CU_GRAPH_NODE_TYPE_MEM_FREE, &rep, &packed);
    if (r == CUDA_SUCCESS)
        *dptr = rep.dst;
    return r;
}
