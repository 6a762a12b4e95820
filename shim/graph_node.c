/* Graph nodes: each added from a description the server checks, their parameters set and read back, their
 * dependencies, and the generic (cuGraphAddNode) and older forms. The node objects are graph.c's. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "shim/client.h"
#include "shim/graph.h"

/* ---- nodes ---- */
struct node_msg {
    uint8_t *buf;
    size_t len, cap;
};

static int msg_put(struct node_msg *m, const void *p, size_t n)
{
    if (m->len + n > m->cap) {
        size_t cap = (m->len + n) * 2 + 256;
        uint8_t *b = realloc(m->buf, cap);
        if (!b)
            return -1;
        m->buf = b;
        m->cap = cap;
    }
    if (p)
        memcpy(m->buf + m->len, p, n);
    else
        memset(m->buf + m->len, 0, n);
    m->len += n;
    return 0;
}

/* The body (h, h_len bytes), then the dependency handles (padded to 8). */
static CUresult msg_begin(struct node_msg *m, const void *h, size_t h_len, const CUgraphNode *deps, size_t n,
                          struct CUgraph_st *g)
{
    if (n > 1024 || (n && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (msg_put(m, h, h_len) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        if (!node_ok(deps[i]) || (g && deps[i]->graph != g))
            return CUDA_ERROR_INVALID_VALUE;
        if (msg_put(m, &deps[i]->handle, 4) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return msg_put(m, NULL, (8 - m->len % 8) % 8) < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* A kernel node's parameters as the launch message carries them. */
static CUresult msg_kernel(struct node_msg *m, const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct CUfunc_st *f = p->func ? (struct CUfunc_st *)p->func : (struct CUfunc_st *)p->kern;
    if (!f || f->magic != SHIM_MAGIC_FUNCTION)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult fr = shim_function_for(f, -1, &f); /* the graph is the current context's */
    if (fr != CUDA_SUCCESS)
        return fr;
    struct cumux_launch l = {.function = f->handle, .grid = {p->gridDimX, p->gridDimY, p->gridDimZ},
                             .block = {p->blockDimX, p->blockDimY, p->blockDimZ}, .shared_bytes = p->sharedMemBytes,
                             .param_bytes = f->param_bytes};
    if (msg_put(m, &l, sizeof l) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t at = m->len;
    if (msg_put(m, NULL, f->param_bytes) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->kernelParams) {
        for (uint32_t i = 0; i < f->nparams; i++) {
            if (!p->kernelParams[i])
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(m->buf + at + f->params[i].offset, p->kernelParams[i], f->params[i].size);
        }
    } else if (p->extra) {
        const void *buf = NULL;
        size_t size = 0;
        for (int i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = p->extra[i + 1];
            else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && p->extra[i + 1])
                size = *(const size_t *)p->extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!buf || size < f->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(m->buf + at, buf, f->param_bytes);
    } else if (f->param_bytes) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult msg_send_node(uint16_t op, struct node_msg *m, CUgraph g, CUgraphNode *out)
{
    shim_graph_changed(NULL, g); /* a node or edge added or taken away */
    struct cumux_u64_reply rep;
    CUresult r = shim_call(op, m->buf, m->len, &rep, sizeof rep, NULL);
    free(m->buf);
    if (r != CUDA_SUCCESS || !out)
        return r;
    struct CUgraphNode_st *n = shim_graph_node_object((uint32_t)rep.value, g);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = n;
    return CUDA_SUCCESS;
}

/* op's body (the graph, ndeps and, for a host node, its function), the dependencies, then the node's
 * parameters: a kernel's (kp) or others (payload). */
static CUresult add_node(uint16_t op, CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                         uint64_t host_fn_id, const void *payload, size_t payload_len,
                         const CUDA_KERNEL_NODE_PARAMS *kp)
{
    if (!node || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct node_msg m = {0};
    struct cumux_graph_add_host_node h = {.graph = g->handle, .ndeps = (uint32_t)n, .host_fn_id = host_fn_id};
    _Static_assert(offsetof(struct cumux_graph_add_host_node, ndeps) == offsetof(struct cumux_graph_add_node, ndeps),
                   "a host node's body begins as every node's");
    size_t h_len = op == CUMUX_OP_GRAPH_ADD_HOST_NODE ? sizeof h : sizeof(struct cumux_graph_add_node);
    CUresult r = msg_begin(&m, &h, h_len, deps, n, g);
    if (r == CUDA_SUCCESS && kp)
        r = msg_kernel(&m, kp);
    if (r == CUDA_SUCCESS && payload && msg_put(&m, payload, payload_len) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(op, &m, g, node);
}

CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return add_node(CUMUX_OP_GRAPH_ADD_KERNEL_NODE, node, g, deps, n, 0, NULL, 0, p);
}

CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n)
{
    return add_node(CUMUX_OP_GRAPH_ADD_EMPTY_NODE, node, g, deps, n, 0, NULL, 0, NULL);
}

/* A memset node's description for the server (one row names no pitch). */
static struct cumux_memset memset_desc(const CUDA_MEMSET_NODE_PARAMS *p)
{
    return (struct cumux_memset){.elem_size = p->elementSize, .dst = p->dst, .pitch = p->height > 1 ? p->pitch : 0,
                                 .width = p->width, .height = p->height, .value = p->value};
}

CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    (void)ctx;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_memset ms = memset_desc(p);
    return add_node(CUMUX_OP_GRAPH_ADD_MEMSET_NODE, node, g, deps, n, 0, &ms, sizeof ms, NULL);
}

static CUresult set_memset(CUgraphExec x, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!node_ok(node) || !p || (x && !exec_ok(x)))
        return CUDA_ERROR_INVALID_VALUE;
    changed(x, node);
    struct {
        struct cumux_graph_set_node h;
        struct cumux_memset ms;
    } m = {.h = {.node = node->handle, .exec = x ? x->handle : 0}, .ms = memset_desc(p)};
    _Static_assert(sizeof m == sizeof m.h + sizeof m.ms, "the memset follows the body unpadded");
    return shim_call(CUMUX_OP_GRAPH_SET_MEMSET_NODE, &m, sizeof m, NULL, 0, NULL);
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p)
{
    return set_memset(NULL, node, p);
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    (void)ctx;
    return x ? set_memset(x, node, p) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult set_host(CUgraphExec x, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!node_ok(node) || !p || !p->fn || (x && !exec_ok(x)))
        return CUDA_ERROR_INVALID_VALUE;
    changed(x, node);
    uint64_t id = shim_hostfn_register(p->fn, p->userData, true);
    if (!id)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return shim_op_graph_set_host_node(node->handle, x ? x->handle : 0, id);
}

CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p) { return set_host(NULL, node, p); }

CUresult cuGraphExecHostNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_HOST_NODE_PARAMS *p)
{
    return x ? set_host(x, node, p) : CUDA_ERROR_INVALID_VALUE;
}

/* One end of a copy node: device memory, or pinned host memory by the server's address. */
static CUresult copy_end(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch, size_t span,
                         uint64_t *addr, bool *is_dev)
{
    uint64_t base;
    if (t == CU_MEMORYTYPE_UNIFIED) {
        t = shim_is_device_ptr(dev, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        host = (const void *)(uintptr_t)dev;
    }
    if (t == CU_MEMORYTYPE_DEVICE) {
        base = dev + (uint64_t)y * pitch + x;
        *is_dev = true;
        *addr = base;
        return CUDA_SUCCESS;
    }
    if (t != CU_MEMORYTYPE_HOST)
        return cumux_unsupported("graph memcpy node with a CUDA array");
    base = (uint64_t)(uintptr_t)host + (uint64_t)y * pitch + x;
    CUdeviceptr a = 0;
    /* The graph copies at every launch: only memory the server can reach then, pinned memory, will do. */
    if (cuMemHostGetDevicePointer(&a, (void *)(uintptr_t)base, 0) != CUDA_SUCCESS || span == 0)
        return cumux_unsupported("graph memcpy node with pageable host memory");
    *is_dev = false;
    *addr = a;
    return CUDA_SUCCESS;
}

/* A copy node's description for the server, from the driver's structure. */
static CUresult memcpy_desc(const CUDA_MEMCPY3D *p, struct cumux_copy_2d *c)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth > 1)
        return cumux_unsupported("graph memcpy node of more than one depth slice");
    size_t w = p->WidthInBytes, h = p->Height ? p->Height : 1;
    size_t sp = p->srcPitch ? p->srcPitch : w, dp = p->dstPitch ? p->dstPitch : w;
    uint64_t src = 0, dst = 0;
    bool sd = false, dd = false;
    CUresult r = copy_end(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, sp, sp * (h - 1) + w, &src, &sd);
    if (r == CUDA_SUCCESS)
        r = copy_end(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, dp, dp * (h - 1) + w, &dst, &dd);
    if (r != CUDA_SUCCESS)
        return r;
    if (!sd && !dd)
        return cumux_unsupported("graph memcpy node from host to host");
    *c = (struct cumux_copy_2d){.kind = sd && dd ? CUMUX_COPY_DTOD : dd ? CUMUX_COPY_HTOD : CUMUX_COPY_DTOH,
                                .dst = dst, .dst_pitch = dp, .src = src, .src_pitch = sp, .width = w, .height = h};
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, const CUDA_MEMCPY3D *p,
                              CUcontext ctx)
{
    (void)ctx;
    struct cumux_copy_2d c;
    CUresult r = memcpy_desc(p, &c);
    if (r != CUDA_SUCCESS)
        return r;
    return add_node(CUMUX_OP_GRAPH_ADD_MEMCPY_NODE, node, g, deps, n, 0, &c, sizeof c, NULL);
}

static CUresult set_memcpy(CUgraphExec x, CUgraphNode node, const CUDA_MEMCPY3D *p)
{
    if (!node_ok(node) || (x && !exec_ok(x)))
        return CUDA_ERROR_INVALID_VALUE;
    changed(x, node);
    struct {
        struct cumux_graph_set_node h;
        struct cumux_copy_2d c;
    } m = {.h = {.node = node->handle, .exec = x ? x->handle : 0}};
    _Static_assert(sizeof m == sizeof m.h + sizeof m.c, "the copy follows the body unpadded");
    CUresult r = memcpy_desc(p, &m.c);
    if (r != CUDA_SUCCESS)
        return r;
    return shim_call(CUMUX_OP_GRAPH_SET_MEMCPY_NODE, &m, sizeof m, NULL, 0, NULL);
}

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D *p) { return set_memcpy(NULL, node, p); }

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    return x ? set_memcpy(x, node, p) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphAddHostNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = shim_hostfn_register(p->fn, p->userData, true);
    if (!id)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return add_node(CUMUX_OP_GRAPH_ADD_HOST_NODE, node, g, deps, n, id, NULL, 0, NULL);
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraph child)
{
    if (!node || !graph_ok(g) || !graph_ok(child))
        return CUDA_ERROR_INVALID_VALUE;
    struct node_msg m = {0};
    struct cumux_graph_add_child body = {.graph = g->handle, .ndeps = (uint32_t)n, .child = child->handle};
    CUresult r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(CUMUX_OP_GRAPH_ADD_CHILD_NODE, &m, g, node);
}

static CUresult change_deps(uint16_t op, CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                            const CUgraphEdgeData *edges, size_t n)
{
    if (!graph_ok(g) || (n && (!from || !to)))
        return CUDA_ERROR_INVALID_VALUE;
    if (edges)
        return cumux_unsupported("cuGraphAdd/RemoveDependencies with edge data");
    struct node_msg m = {0};
    struct cumux_graph_add_deps h = {.graph = g->handle, .ndeps = (uint32_t)n};
    CUresult r = msg_put(&m, &h, sizeof h) < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    for (size_t i = 0; r == CUDA_SUCCESS && i < 2 * n; i++) {
        CUgraphNode x = i < n ? from[i] : to[i - n];
        if (!node_ok(x) || x->graph != g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (msg_put(&m, &x->handle, 4) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS && msg_put(&m, NULL, (8 - m.len % 8) % 8) < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(op, &m, g, NULL);
}

CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *edges,
                                size_t n)
{
    return change_deps(CUMUX_OP_GRAPH_ADD_DEPS, g, from, to, edges, n);
}

CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edges, size_t n)
{
    return change_deps(CUMUX_OP_GRAPH_REMOVE_DEPS, g, from, to, edges, n);
}

/* The node and its edges go; its object stays, dead (a stale handle is refused, not followed). */
CUresult cuGraphDestroyNode(CUgraphNode node)
{
    if (!node_ok(node))
        return CUDA_ERROR_INVALID_VALUE;
    changed(NULL, node);
    CUresult r = shim_op_node_destroy(node->handle);
    if (r == CUDA_SUCCESS)
        node->magic = SHIM_MAGIC_DEAD;
    return r;
}

static CUresult node_enabled(CUgraphExec x, CUgraphNode node, uint32_t set, unsigned *on)
{
    if (!exec_ok(x) || !node_ok(node))
        return CUDA_ERROR_INVALID_VALUE;
    if (set)
        shim_graph_changed(x, NULL);
    uint64_t v;
    CUresult r = shim_op_node_enabled(x->handle, node->handle, set, on && set ? *on != 0 : 0, &v);
    if (r == CUDA_SUCCESS && !set)
        *on = (unsigned)v;
    return r;
}

CUresult cuGraphNodeSetEnabled(CUgraphExec x, CUgraphNode node, unsigned int on) { return node_enabled(x, node, 1, &on); }

CUresult cuGraphNodeGetEnabled(CUgraphExec x, CUgraphNode node, unsigned int *on)
{
    return on ? node_enabled(x, node, 0, on) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult set_kernel(CUgraphExec e, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!node_ok(node) || !p || (e && !exec_ok(e)))
        return CUDA_ERROR_INVALID_VALUE;
    changed(e, node);
    struct node_msg m = {0};
    struct cumux_graph_set_kernel_node h = {.node = node->handle, .exec = e ? e->handle : 0};
    CUresult r = msg_begin(&m, &h, sizeof h, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        r = msg_kernel(&m, p);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(CUMUX_OP_GRAPH_SET_KERNEL_NODE, &m, NULL, NULL);
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    return set_kernel(NULL, node, p);
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    return set_kernel(e, node, p);
}

/* ---- capture into a graph of the program's ---- */
CUresult cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                     size_t n, CUstreamCaptureMode mode)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    if (edges)
        return cumux_unsupported("cuStreamBeginCaptureToGraph with edge data");
    shim_graph_changed(NULL, g);
    struct node_msg m = {0};
    struct cumux_capture_begin_to_graph body = {.stream = s, .graph = g->handle, .mode = (uint32_t)mode,
                                                .ndeps = (uint32_t)n};
    shim_capture_counted(1);
    r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r == CUDA_SUCCESS)
        r = shim_call(CUMUX_OP_CAPTURE_BEGIN_TO_GRAPH, m.buf, m.len, NULL, 0, NULL);
    if (r != CUDA_SUCCESS)
        shim_capture_counted(-1);
    free(m.buf);
    return r;
}

/* ---- event record and wait nodes ---- */
static bool event_ok(CUevent e) { return e && e->magic == SHIM_MAGIC_EVENT; }

static CUresult add_event_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e,
                               uint32_t wait)
{
    if (!node || !graph_ok(g) || !event_ok(e))
        return CUDA_ERROR_INVALID_VALUE;
    struct node_msg m = {0};
    struct cumux_graph_add_event_node body = {.graph = g->handle, .ndeps = (uint32_t)n, .event = e->handle,
                                              .wait = wait};
    CUresult r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(CUMUX_OP_GRAPH_ADD_EVENT_NODE, &m, g, node);
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    return add_event_node(node, g, deps, n, e, 0);
}

CUresult cuGraphAddEventWaitNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUevent e)
{
    return add_event_node(node, g, deps, n, e, 1);
}

static CUresult set_event(CUgraphExec x, CUgraphNode node, CUevent e, uint32_t wait)
{
    if (!node_ok(node) || !event_ok(e) || (x && !exec_ok(x)))
        return CUDA_ERROR_INVALID_VALUE;
    changed(x, node);
    return shim_op_node_set_event(node->handle, x ? x->handle : 0, e->handle, wait);
}

CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent e) { return set_event(NULL, node, e, 0); }
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent e) { return set_event(NULL, node, e, 1); }

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec x, CUgraphNode node, CUevent e)
{
    return x ? set_event(x, node, e, 0) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec x, CUgraphNode node, CUevent e)
{
    return x ? set_event(x, node, e, 1) : CUDA_ERROR_INVALID_VALUE;
}

/* ---- conditional nodes ---- */

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph g, CUcontext ctx,
                                        unsigned int default_value, unsigned int flags)
{
    if (!out || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx && ctx != shim_current_ctx())
        return cumux_unsupported("cuGraphConditionalHandleCreate for a context that is not the current one");
    uint64_t h;
    CUresult r = shim_op_graph_cond_handle(g->handle, default_value, flags, &h);
    if (r == CUDA_SUCCESS)
        *out = (CUgraphConditionalHandle)h;
    return r;
}

/* The node, and its body graphs in an array that lives as long as the node (CUDA's promise). */
static CUresult add_cond_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    if (!node || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->ctx && p->ctx != shim_current_ctx())
        return cumux_unsupported("a conditional node for a context that is not the current one");
    size_t max = (CUMUX_REPLY_DATA - sizeof(struct cumux_graph_cond_node_reply)) / sizeof(uint32_t);
    if (p->size == 0 || p->size > max)
        return CUDA_ERROR_INVALID_VALUE;
    struct node_msg m = {0};
    struct cumux_graph_add_cond_node body = {.graph = g->handle, .ndeps = (uint32_t)n, .cond = p->handle,
                                             .type = (uint32_t)p->type, .size = p->size};
    CUresult r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    shim_graph_changed(NULL, g);
    r = shim_call(CUMUX_OP_GRAPH_ADD_COND_NODE, m.buf, m.len, buf, sizeof buf, &len);
    free(m.buf);
    if (r != CUDA_SUCCESS)
        return r;
    struct cumux_graph_cond_node_reply rep;
    memcpy(&rep, buf, sizeof rep);
    if (len < sizeof rep || rep.count != p->size || len - sizeof rep < rep.count * sizeof(uint32_t))
        return CUDA_ERROR_UNKNOWN;
    CUgraph *bodies = calloc(rep.count, sizeof *bodies);
    struct CUgraphNode_st *nd = bodies ? shim_graph_node_object(rep.node, g) : NULL;
    for (uint32_t i = 0; nd && i < rep.count; i++) {
        uint32_t h;
        memcpy(&h, buf + sizeof rep + i * sizeof h, sizeof h);
        if (shim_graph_new(h, &bodies[i]) != CUDA_SUCCESS)
            nd = NULL;
        else
            bodies[i]->body = true;
    }
    if (!nd) {
        free(bodies);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->phGraph_out = bodies; /* kept: the node's objects are never freed */
    *node = nd;
    return CUDA_SUCCESS;
}

/* ---- the generic forms (CUDA 12.2+): cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams ----
 * Each kind goes to its own call above; a context named in the parameters must be the current one. */

static bool edges_plain(const CUgraphEdgeData *e, size_t n)
{
    static const CUgraphEdgeData plain;
    for (size_t i = 0; e && i < n; i++)
        if (memcmp(&e[i], &plain, sizeof plain))
            return false;
    return true;
}

static bool ctx_current(CUcontext ctx)
{
    return !ctx || ctx == shim_current_ctx();
}

static CUDA_KERNEL_NODE_PARAMS kernel_v2(const CUDA_KERNEL_NODE_PARAMS_v3 *k)
{
    return (CUDA_KERNEL_NODE_PARAMS){.func = k->func, .gridDimX = k->gridDimX, .gridDimY = k->gridDimY,
                                     .gridDimZ = k->gridDimZ, .blockDimX = k->blockDimX, .blockDimY = k->blockDimY,
                                     .blockDimZ = k->blockDimZ, .sharedMemBytes = k->sharedMemBytes,
                                     .kernelParams = k->kernelParams, .extra = k->extra, .kern = k->kern,
                                     .ctx = k->ctx};
}

static CUDA_MEMSET_NODE_PARAMS memset_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *m)
{
    return (CUDA_MEMSET_NODE_PARAMS){.dst = m->dst, .pitch = m->pitch, .value = m->value,
                                     .elementSize = m->elementSize, .width = m->width, .height = m->height};
}

CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n,
                        CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!edges_plain(edges, n))
        return cumux_unsupported("cuGraphAddNode with edge data other than the default");
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(node, g, deps, n);
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k = kernel_v2(&p->kernel);
        return cuGraphAddKernelNode(node, g, deps, n, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        if (!ctx_current(p->memset.ctx))
            return cumux_unsupported("cuGraphAddNode of a memset in another context");
        CUDA_MEMSET_NODE_PARAMS m = memset_v1(&p->memset);
        return cuGraphAddMemsetNode(node, g, deps, n, &m, p->memset.ctx ? p->memset.ctx : shim_current_ctx());
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        if (!ctx_current(p->memcpy.copyCtx))
            return cumux_unsupported("cuGraphAddNode of a copy in another context");
        return cuGraphAddMemcpyNode(node, g, deps, n, &p->memcpy.copyParams,
                                    p->memcpy.copyCtx ? p->memcpy.copyCtx : shim_current_ctx());
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {.fn = p->host.fn, .userData = p->host.userData};
        return cuGraphAddHostNode(node, g, deps, n, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return cumux_unsupported("cuGraphAddNode of a child graph moved into its parent");
        return cuGraphAddChildGraphNode(node, g, deps, n, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(node, g, deps, n, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(node, g, deps, n, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = p->alloc.poolProps, .accessDescs = p->alloc.accessDescs,
                                        .accessDescCount = p->alloc.accessDescCount, .bytesize = p->alloc.bytesize};
        CUresult r = cuGraphAddMemAllocNode(node, g, deps, n, &a);
        if (r == CUDA_SUCCESS)
            p->alloc.dptr = a.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(node, g, deps, n, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return add_cond_node(node, g, deps, n, &p->conditional);
    default:
        return cumux_unsupported("cuGraphAddNode of this kind (external semaphores, memory operations)");
    }
}

/* The node in its graph (x NULL) or in an instance. */
static CUresult set_node_params(CUgraphExec x, CUgraphNode node, CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k = kernel_v2(&p->kernel);
        return x ? cuGraphExecKernelNodeSetParams(x, node, &k) : cuGraphKernelNodeSetParams(node, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        if (!ctx_current(p->memset.ctx))
            return cumux_unsupported("cuGraph(Exec)NodeSetParams of a memset in another context");
        CUDA_MEMSET_NODE_PARAMS m = memset_v1(&p->memset);
        return x ? cuGraphExecMemsetNodeSetParams(x, node, &m, shim_current_ctx()) : cuGraphMemsetNodeSetParams(node, &m);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (!ctx_current(p->memcpy.copyCtx))
            return cumux_unsupported("cuGraph(Exec)NodeSetParams of a copy in another context");
        return x ? cuGraphExecMemcpyNodeSetParams(x, node, &p->memcpy.copyParams, shim_current_ctx())
                 : cuGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {.fn = p->host.fn, .userData = p->host.userData};
        return x ? cuGraphExecHostNodeSetParams(x, node, &h) : cuGraphHostNodeSetParams(node, &h);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return x ? cuGraphExecEventRecordNodeSetEvent(x, node, p->eventRecord.event)
                 : cuGraphEventRecordNodeSetEvent(node, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return x ? cuGraphExecEventWaitNodeSetEvent(x, node, p->eventWait.event)
                 : cuGraphEventWaitNodeSetEvent(node, p->eventWait.event);
    default:
        return cumux_unsupported("cuGraph(Exec)NodeSetParams of this kind of node");
    }
}

CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams *p)
{
    return set_node_params(NULL, node, p);
}

CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode node, CUgraphNodeParams *p)
{
    return x ? set_node_params(x, node, p) : CUDA_ERROR_INVALID_VALUE;
}

/* The CUDA 12 forms, without edge data. */
#undef cuGraphAddDependencies
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n);
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return cuGraphAddDependencies_v2(g, from, to, NULL, n);
}

#undef cuGraphRemoveDependencies
CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n);
CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    return cuGraphRemoveDependencies_v2(g, from, to, NULL, n);
}

#undef cuGraphNodeGetDependentNodes
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *out, size_t *num);
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode *out, size_t *num)
{
    return cuGraphNodeGetDependentNodes_v2(node, out, NULL, num);
}

#undef cuGraphGetEdges
CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *num);
CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
    return cuGraphGetEdges_v2(g, from, to, NULL, num);
}

#undef cuGraphNodeGetDependencies
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, size_t *num);
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode *deps, size_t *num)
{
    return cuGraphNodeGetDependencies_v2(node, deps, NULL, num);
}

/* Kernel node parameters of the first layout: the same fields, without the kernel and context. */
_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS, extra) == offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra),
               "the first layout is the start of the second");
static const CUDA_KERNEL_NODE_PARAMS *kernel_params_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p, CUDA_KERNEL_NODE_PARAMS *v2)
{
    if (!p)
        return NULL;
    memset(v2, 0, sizeof *v2);
    v2->func = p->func;
    v2->gridDimX = p->gridDimX, v2->gridDimY = p->gridDimY, v2->gridDimZ = p->gridDimZ;
    v2->blockDimX = p->blockDimX, v2->blockDimY = p->blockDimY, v2->blockDimZ = p->blockDimZ;
    v2->sharedMemBytes = p->sharedMemBytes;
    v2->kernelParams = p->kernelParams;
    v2->extra = p->extra;
    return v2;
}

#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p);

CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    return cuGraphAddKernelNode_v2(node, g, deps, n, kernel_params_v2(p, &v2));
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2;
    CUresult r = cuGraphKernelNodeGetParams_v2(node, &v2);
    if (r == CUDA_SUCCESS)
        memcpy(p, &v2, sizeof *p); /* the first layout is the start of the second */
    return r;
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    return cuGraphKernelNodeSetParams_v2(node, kernel_params_v2(p, &v2));
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;
    return cuGraphExecKernelNodeSetParams_v2(x, node, kernel_params_v2(p, &v2));
}

/* The graph in Graphviz's language, from what the queries answer: each node with its kind, each edge. */
CUresult cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned int flags)
{
    (void)flags; /* the detail flags add node parameters, which cumux does not hand back yet */
    if (!graph_ok(g) || !path)
        return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0, ne = 0;
    CUresult r = cuGraphGetNodes(g, NULL, &n);
    if (r == CUDA_SUCCESS)
        r = cuGraphGetEdges_v2(g, NULL, NULL, NULL, &ne);
    if (r != CUDA_SUCCESS)
        return r;
    CUgraphNode *nodes = calloc(n + 1, sizeof *nodes), *from = calloc(ne + 1, sizeof *from),
                *to = calloc(ne + 1, sizeof *to);
    FILE *f = nodes && from && to ? fopen(path, "w") : NULL;
    if (!f) {
        free(nodes);
        free(from);
        free(to);
        return nodes && from && to ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = cuGraphGetNodes(g, nodes, &n);
    if (r == CUDA_SUCCESS)
        r = cuGraphGetEdges_v2(g, from, to, NULL, &ne);
    static const char *const kinds[] = {"kernel", "memcpy", "memset", "host", "graph", "empty", "wait event",
                                        "event record", "external semaphore signal", "external semaphore wait",
                                        "memory alloc", "memory free", "batch memory op", "conditional"};
    fprintf(f, "digraph cumux_graph_%u {\n", g->handle);
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        CUgraphNodeType t;
        r = cuGraphNodeGetType(nodes[i], &t);
        const char *kind = r == CUDA_SUCCESS && (unsigned)t < sizeof kinds / sizeof kinds[0] ? kinds[t] : "?";
        fprintf(f, "  n%u [label=\"%s %u\"];\n", nodes[i]->handle, kind, nodes[i]->handle);
    }
    for (size_t i = 0; r == CUDA_SUCCESS && i < ne; i++)
        fprintf(f, "  n%u -> n%u;\n", from[i]->handle, to[i]->handle);
    fprintf(f, "}\n");
    if (fclose(f) != 0 && r == CUDA_SUCCESS)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    free(nodes);
    free(from);
    free(to);
    return r;
}

/* ---- graph memory: allocation and free nodes ---- */

CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!node || !graph_ok(g) || !p || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx = shim_current_ctx();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Memory of the current context's GPU, read-write there: the one kind cumux's server makes. */
    if (p->poolProps.location.id != ctx->device || p->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return cumux_unsupported("cuGraphAddMemAllocNode of memory on another device or with shareable handles");
    for (size_t i = 0; i < p->accessDescCount; i++) {
        const CUmemAccessDesc *d = &p->accessDescs[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id != ctx->device ||
            d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return cumux_unsupported("cuGraphAddMemAllocNode with access for another device");
    }
    struct node_msg m = {0};
    struct cumux_graph_add_mem_alloc_node body = {.graph = g->handle, .ndeps = (uint32_t)n, .bytesize = p->bytesize};
    CUresult r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    struct cumux_graph_mem_alloc_reply rep;
    shim_graph_changed(NULL, g);
    r = shim_call(CUMUX_OP_GRAPH_ADD_MEM_ALLOC_NODE, m.buf, m.len, &rep, sizeof rep, NULL);
    free(m.buf);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraphNode_st *nd = shim_graph_node_object(rep.node, g);
    if (!nd)
        return CUDA_ERROR_OUT_OF_MEMORY;
    shim_add_device_range(rep.dptr, p->bytesize, ctx, SHIM_RANGE_GRAPH);
    p->dptr = rep.dptr;
    *node = nd;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr dptr)
{
    if (!node || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct node_msg m = {0};
    struct cumux_graph_add_mem_free_node body = {.graph = g->handle, .ndeps = (uint32_t)n, .dptr = dptr};
    CUresult r = msg_begin(&m, &body, sizeof body, deps, n, g);
    if (r != CUDA_SUCCESS) {
        free(m.buf);
        return r;
    }
    return msg_send_node(CUMUX_OP_GRAPH_ADD_MEM_FREE_NODE, &m, g, node);
}

/* cuGraphAddNode of CUDA 12.2, without edge data. */
#undef cuGraphAddNode
CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p);
CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
    return cuGraphAddNode_v2(node, g, deps, NULL, n, p);
}
