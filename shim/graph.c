/* CUDA graphs. Stream capture happens in the server, on the client's real stream; explicit graphs are
 * described node by node (graph_node.c). Graph objects live in the server; the program holds small
 * handles, one object per handle (this file's tables). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "shim/client.h"
#include "shim/graph.h"

static __thread CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* One object per server node handle, so that the same node is always the same CUgraphNode. */
static struct shim_table nodes_by_handle;
static pthread_mutex_t node_lock = PTHREAD_MUTEX_INITIALIZER;

struct CUgraphNode_st *shim_graph_node_object(uint32_t handle, struct CUgraph_st *g)
{
    pthread_mutex_lock(&node_lock);
    void **slot = shim_table_slot(&nodes_by_handle, handle);
    struct CUgraphNode_st *n = slot ? *slot : NULL;
    if (slot && (!n || n->graph != g || n->magic != SHIM_MAGIC_GRAPH_NODE)) {
        n = calloc(1, sizeof *n);
        if (n) {
            n->magic = SHIM_MAGIC_GRAPH_NODE;
            n->handle = handle;
            n->graph = g;
            *slot = n;
        }
    }
    pthread_mutex_unlock(&node_lock);
    return n;
}

/* One object per server graph handle, so that a capture's graph handed out while it runs is the object
 * cuStreamEndCapture returns. A destroyed graph's object stays dead; its handle, reused, gets a new one. */
static struct shim_table graphs_by_handle;

CUresult shim_graph_new(uint32_t handle, CUgraph *out)
{
    pthread_mutex_lock(&node_lock);
    void **slot = shim_table_slot(&graphs_by_handle, handle);
    struct CUgraph_st *g = slot ? *slot : NULL;
    if (slot && (!g || g->magic != SHIM_MAGIC_GRAPH)) {
        if ((g = calloc(1, sizeof *g))) {
            g->magic = SHIM_MAGIC_GRAPH;
            g->handle = handle;
            *slot = g;
        }
    }
    pthread_mutex_unlock(&node_lock);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = g;
    return CUDA_SUCCESS;
}

/* ---- stream capture ---- */
CUresult cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    shim_capture_counted(1);
    r = shim_op_capture_begin(s, (uint32_t)mode);
    if (r != CUDA_SUCCESS)
        shim_capture_counted(-1);
    return r;
}

#undef cuStreamBeginCapture
CUresult cuStreamBeginCapture(CUstream h); /* the first form: global mode */
CUresult cuStreamBeginCapture(CUstream h)
{
    return cuStreamBeginCapture_v2(h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamEndCapture(CUstream h, CUgraph *graph)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t handle;
    r = shim_op_capture_end(s, &handle);
    if (r != CUDA_SUCCESS) {
        shim_capture_unsure(); /* ended or not, with its joined streams or not: the server knows */
        return r;
    }
    shim_capture_counted(-1);
    return shim_graph_new((uint32_t)handle, graph);
}

/* The capture's state, with its graph and the nodes the next captured work will depend on. The node array
 * is the calling thread's, valid until its next call of this (CUDA: until the next call on the stream). */
CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL; /* every edge is a default one */
    if (ndeps)
        *ndeps = 0;
    if ((!graph && !deps && !ndeps) || !shim_capture_possible())
        return shim_capture_status(s, status, id);
    struct cumux_capture_query q = {.stream = s};
    static __thread uint8_t buf[CUMUX_REPLY_DATA];
    static __thread CUgraphNode *nodes;
    static __thread size_t nodes_cap;
    uint32_t len = 0;
    if ((r = shim_call(CUMUX_OP_CAPTURE_GRAPH, &q, sizeof q, buf, sizeof buf, &len)) != CUDA_SUCCESS)
        return r;
    struct cumux_capture_graph_reply rep;
    if (len < sizeof rep)
        return CUDA_ERROR_UNKNOWN;
    memcpy(&rep, buf, sizeof rep);
    *status = (CUstreamCaptureStatus)rep.status;
    if (id)
        *id = rep.id;
    if (!rep.graph)
        return CUDA_SUCCESS;
    if ((len - sizeof rep) / sizeof(uint32_t) < rep.count) {
        return cumux_unsupported("cuStreamGetCaptureInfo of more dependencies than one reply holds");
    }
    CUgraph g;
    if ((r = shim_graph_new(rep.graph, &g)) != CUDA_SUCCESS)
        return r;
    if (rep.count > nodes_cap) {
        CUgraphNode *v = realloc(nodes, rep.count * sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        nodes = v, nodes_cap = rep.count;
    }
    for (uint64_t i = 0; i < rep.count; i++) {
        uint32_t nh;
        memcpy(&nh, buf + sizeof rep + i * sizeof nh, sizeof nh);
        if (!(nodes[i] = shim_graph_node_object(nh, g)))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (graph)
        *graph = g;
    if (deps)
        *deps = nodes;
    if (ndeps)
        *ndeps = (size_t)rep.count;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *ndeps);
CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                   const CUgraphNode **deps, size_t *ndeps)
{
    return cuStreamGetCaptureInfo_v3(h, status, id, graph, deps, NULL, ndeps);
}

CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *nodes, const CUgraphEdgeData *edges, size_t n,
                                           unsigned int flags)
{
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    if ((n && !nodes) || n > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (edges) { /* edge data other than the default: not supported */
        static const CUgraphEdgeData none;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&edges[i], &none, sizeof none) != 0)
                return cumux_unsupported("cuStreamUpdateCaptureDependencies with edge data other than the default");
    }
    struct {
        struct cumux_capture_update_deps m;
        uint32_t h[1024];
    } msg = {.m = {.stream = s, .flags = flags, .count = (uint32_t)n}};
    for (size_t i = 0; i < n; i++) {
        if (!node_ok(nodes[i]))
            return CUDA_ERROR_INVALID_VALUE;
        msg.h[i] = nodes[i]->handle;
    }
    size_t len = sizeof msg.m + ((n * sizeof(uint32_t) + 7) & ~(size_t)7);
    return shim_call(CUMUX_OP_CAPTURE_UPDATE_DEPS, &msg, len, NULL, 0, NULL);
}

/* The first form, with no edge data. */
#undef cuStreamUpdateCaptureDependencies
CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *nodes, size_t n, unsigned int flags);
CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *nodes, size_t n, unsigned int flags)
{
    return cuStreamUpdateCaptureDependencies_v2(h, nodes, NULL, n, flags);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- graphs and their instances ---- */
CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!graph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t handle;
    CUresult r = shim_op_graph_create(flags, &handle);
    return r == CUDA_SUCCESS ? shim_graph_new((uint32_t)handle, graph) : r;
}

CUresult cuGraphDestroy(CUgraph g)
{
    if (!graph_ok(g) || g->body)
        return CUDA_ERROR_INVALID_VALUE;
    shim_graph_changed(NULL, g); /* its recipe freed */
    g->magic = SHIM_MAGIC_DEAD;
    if (!g->handle)
        return CUDA_SUCCESS; /* it went with a failed worker: nothing is left to free */
    return shim_op_graph_destroy(g->handle);
}

struct shim_graph_recipe *(*shim_graph_record)(CUgraph g, const char **why_not);
struct shim_list shim_graph_execs = SHIM_LIST_INIT;

void shim_graph_changed(CUgraphExec x, CUgraph g)
{
    if (!(x && x->recipe) && !(g && g->recipe))
        return;
    pthread_mutex_lock(&shim_graph_execs.lock);
    if (x && x->recipe) {
        free(x->recipe);
        x->recipe = NULL;
        x->why_not = "it was changed after its instantiation";
    }
    if (g) {
        free(g->recipe);
        g->recipe = NULL;
    }
    pthread_mutex_unlock(&shim_graph_execs.lock);
}

unsigned shim_graphs_forget(CUgraph **kept, size_t *nkept)
{
    unsigned live = 0;
    size_t n = 0;
    pthread_mutex_lock(&node_lock);
    CUgraph *k = calloc(graphs_by_handle.cap + 1, sizeof *k);
    for (uint32_t i = 0; i < graphs_by_handle.cap; i++) {
        struct CUgraph_st *g = graphs_by_handle.v[i];
        if (g) {
            bool alive = g->magic == SHIM_MAGIC_GRAPH && !g->body;
            live += alive;
            if (alive && g->recipe && k)
                k[n++] = g;
            g->handle = 0;
            graphs_by_handle.v[i] = NULL;
        }
    }
    for (uint32_t i = 0; i < nodes_by_handle.cap; i++) {
        struct CUgraphNode_st *n = nodes_by_handle.v[i];
        if (n) {
            n->handle = 0;
            nodes_by_handle.v[i] = NULL;
        }
    }
    pthread_mutex_unlock(&node_lock);
    *kept = k;
    *nkept = n;
    return live;
}

void shim_graph_adopt(CUgraph g, uint32_t handle)
{
    pthread_mutex_lock(&node_lock);
    void **slot = shim_table_slot(&graphs_by_handle, handle);
    if (slot) {
        g->handle = handle;
        *slot = g;
    }
    pthread_mutex_unlock(&node_lock);
}

void shim_graph_node_adopt(CUgraphNode obj, CUgraphNode made)
{
    pthread_mutex_lock(&node_lock);
    void **slot = shim_table_slot(&nodes_by_handle, made->handle);
    if (slot && *slot == made) {
        obj->handle = made->handle;
        obj->graph = made->graph;
        obj->magic = SHIM_MAGIC_GRAPH_NODE;
        *slot = obj;
        free(made->args);
        free(made->argv);
        free(made);
    }
    pthread_mutex_unlock(&node_lock);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
    if (!exec || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t handle;
    CUresult r = shim_op_graph_instantiate(g->handle, flags, &handle);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->magic = SHIM_MAGIC_GRAPH_EXEC;
    e->handle = (uint32_t)handle;
    /* What the driver reports back (probed on the H200): USE_NODE_PRIORITY is not among them. */
    e->flags = flags & (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH);
    e->instantiate_flags = flags;
    if (shim.resume_token && shim_graph_record) {
        /* Read back now, while this worker has the graph: a worker taking over after a fault makes the
         * instance again from it (graph_resume.c). */
        e->recipe = shim_graph_record(g, &e->why_not);
        shim_list_add(&shim_graph_execs, e);
        /* The graph, unchanged from now on, can be made again from the same recipe. */
        struct shim_graph_recipe *copy = e->recipe ? malloc(e->recipe->bytes) : NULL;
        if (copy)
            memcpy(copy, e->recipe, e->recipe->bytes);
        pthread_mutex_lock(&shim_graph_execs.lock);
        free(g->recipe);
        g->recipe = copy;
        pthread_mutex_unlock(&shim_graph_execs.lock);
    }
    *exec = e;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecGetFlags(CUgraphExec x, cuuint64_t *flags)
{
    if (!exec_ok(x) || !flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = x->flags;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    /* Uploading is the instance's first cuGraphUpload, on the stream given. */
    bool upload = params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    CUresult r = cuGraphInstantiateWithFlags(exec, g, params->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    if (r == CUDA_SUCCESS && upload) {
        r = cuGraphUpload(*exec, params->hUploadStream);
        if (r != CUDA_SUCCESS) {
            cuGraphExecDestroy(*exec);
            *exec = NULL;
        }
    }
    params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    params->hErrNode_out = NULL;
    return r;
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
    if (!exec_ok(e))
        return CUDA_ERROR_INVALID_VALUE;
    shim_graph_changed(e, NULL); /* its recipe freed */
    e->magic = SHIM_MAGIC_DEAD;
    if (!e->handle)
        return CUDA_SUCCESS; /* it went with a failed worker: nothing is left to free */
    return shim_op_graph_exec_destroy(e->handle);
}

/* An instance that went with a failed worker and was not made again (graph_resume.c): said at once, not
 * at the next synchronize, since the shim knows. */
CUresult shim_graph_exec_gone(void)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        cumux_logf("a graph instance made before the GPU worker failed, not made again, was launched: "
                   "CUDA_ERROR_INVALID_HANDLE");
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream h)
{
    if (!exec_ok(e))
        return CUDA_ERROR_INVALID_VALUE;
    if (!e->handle)
        return shim_graph_exec_gone();
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    return r == CUDA_SUCCESS ? shim_op_graph_launch(e->handle, s) : r;
}

CUresult cuGraphUpload(CUgraphExec e, CUstream h)
{
    if (!exec_ok(e))
        return CUDA_ERROR_INVALID_VALUE;
    if (!e->handle)
        return shim_graph_exec_gone();
    uint32_t s;
    CUresult r = shim_resolve_stream(h, &s, NULL);
    return r == CUDA_SUCCESS ? shim_op_graph_upload(e->handle, s) : r;
}

CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    if (!exec_ok(e) || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_exec_update_reply rep = {0};
    shim_graph_changed(e, NULL);
    CUresult r = shim_op_graph_exec_update(e->handle, g->handle, &rep);
    if (info) {
        memset(info, 0, sizeof *info);
        info->result = (CUgraphExecUpdateResult)rep.result;
    }
    return r;
}

/* ---- clones ---- */
CUresult cuGraphClone(CUgraph *out, CUgraph g)
{
    if (!out || !graph_ok(g))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h;
    CUresult r = shim_op_graph_clone(g->handle, &h);
    if (r != CUDA_SUCCESS)
        return r;
    return shim_graph_new((uint32_t)h, out);
}

CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode node, CUgraph clone)
{
    if (!out || !node_ok(node) || !graph_ok(clone))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t h;
    CUresult r = shim_op_node_find_in_clone(node->handle, clone->handle, &h);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUgraphNode_st *n = shim_graph_node_object((uint32_t)h, clone);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = n;
    return CUDA_SUCCESS;
}

/* ---- the device's graph memory ---- */

CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return shim_op_graph_mem_trim(dev);
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    CUresult r = shim_op_graph_mem_attr(dev, (uint32_t)attr, 0, &v);
    if (r == CUDA_SUCCESS)
        *(cuuint64_t *)value = v;
    return r;
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    if (!shim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!value || *(const cuuint64_t *)value != 0) /* only a reset to 0, as CUDA allows */
        return CUDA_ERROR_INVALID_VALUE;
    return shim_op_graph_mem_attr(dev, (uint32_t)attr, 1, NULL);
}

/* The CUDA 11 forms that programs built against CUDA 11 still ask cuGetProcAddress for. */
#undef cuGraphInstantiate
#undef cuGraphInstantiate_v2
CUresult cuGraphInstantiate(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log, size_t log_size);
CUresult cuGraphInstantiate_v2(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log, size_t log_size);

CUresult cuGraphInstantiate_v2(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log, size_t log_size)
{
    CUresult r = cuGraphInstantiateWithFlags(x, g, 0);
    if (err)
        *err = NULL;
    if (log && log_size)
        log[0] = 0;
    return r;
}

CUresult cuGraphInstantiate(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log, size_t log_size)
{
    return cuGraphInstantiate_v2(x, g, err, log, log_size);
}

#undef cuGraphExecUpdate
CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *err, CUgraphExecUpdateResult *result);
CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *err, CUgraphExecUpdateResult *result)
{
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult r = cuGraphExecUpdate_v2(x, g, &info);
    if (err)
        *err = info.errorNode;
    if (result)
        *result = info.result;
    return r;
}

