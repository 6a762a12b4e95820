/* CUDA graphs in the server. Stream capture is the driver's own: the client's work is submitted to its
 * real stream, which the server put in capture mode. Explicit graphs are built from the client's
 * description of each node, checked like any other command. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/handlers.h"

struct srv_graph {
    CUgraph g;
    uint32_t handle;
    bool capture; /* a capture's graph, handed out while the capture runs: the capture owns it */
    bool into;    /* the client's own graph that a capture adds to (cuStreamBeginCaptureToGraph): it stays */
    uint32_t parent; /* a conditional node's body: the handle of the graph that holds the node (it owns it) */
    uint64_t *conds; /* its conditional handles (cuGraphConditionalHandleCreate) */
    uint32_t nconds, capconds;
};

struct srv_graph_exec {
    CUgraphExec e;
    uint32_t handle;
    /* Graph memory it allocates (mem[0..nalloc)) and frees (the nfree after), read at instantiation: a
     * launch makes the first live and the second not (graph memory below). */
    uint64_t *mem;
    uint32_t nalloc, nfree;
};

struct srv_graph_node {
    CUgraphNode n;
    uint32_t graph;
};

/* A handle for obj (into *handle, when the object keeps its own), which is the reply. */
static CUresult new_handle(struct srv_client *c, enum srv_obj_type t, void *obj, uint32_t *handle, uint8_t *out,
                           uint32_t *out_len)
{
    uint32_t h = handle_new(c, t, obj);
    if (!h) {
        free(obj);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (handle)
        *handle = h;
    return reply_u64(out, out_len, h);
}

/* Room for one more element in *v (n used of *cap, elements of size bytes); false when memory runs out. */
static bool room_for_one(void **v, uint32_t n, uint32_t *cap, size_t size)
{
    if (n < *cap)
        return true;
    if (*cap > UINT32_MAX / 2)
        return false;
    uint32_t nc = *cap ? *cap * 2 : 8;
    void *nv = realloc(*v, (size_t)nc * size);
    if (!nv)
        return false;
    *v = nv;
    *cap = nc;
    return true;
}

static CUresult graph_new(struct srv_client *c, CUgraph g, uint8_t *out, uint32_t *out_len)
{
    struct srv_graph *sg = calloc(1, sizeof *sg);
    if (!sg) {
        cuGraphDestroy(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sg->g = g;
    sg->capture = false;
    CUresult r = new_handle(c, OBJ_GRAPH, sg, &sg->handle, out, out_len);
    if (r != CUDA_SUCCESS)
        cuGraphDestroy(g);
    return r;
}

static void capture_allocs_end(struct srv_client *c, uint64_t capture, bool ok);
static uint64_t capture_id(CUstream s);
static void exec_mem_launched(struct srv_client *c, struct srv_graph_exec *e);
static CUresult exec_mem_scan(struct srv_graph_exec *e, CUgraph g);

static void graph_free(struct srv_client *c, struct srv_graph *g)
{
    /* Its conditional nodes' bodies go with it (the driver's, destroyed with the graph). */
    for (uint32_t i = 1; i <= c->nhandles; i++) {
        struct srv_graph *b = handle_get(c, i, OBJ_GRAPH);
        if (b && b->parent == g->handle)
            graph_free(c, b);
    }
    /* Its nodes go with it. */
    for (uint32_t i = 1; i <= c->nhandles; i++) {
        struct srv_graph_node *n = handle_get(c, i, OBJ_GRAPH_NODE);
        if (n && n->graph == g->handle) {
            handle_drop(c, i);
            free(n);
        }
    }
    if (!g->capture && !g->parent) {
        /* Its allocations' addresses stay reserved while the client may name them (graph memory above). */
        if (c->graph_mem) {
            if (room_for_one((void **)&c->parked_graphs, c->nparked_graphs, &c->capparked_graphs, sizeof(CUgraph)))
                c->parked_graphs[c->nparked_graphs++] = g->g;
            else
                cumux_logf("client %u: cannot keep a graph with memory: it leaks until cumuxd stops", c->id);
        } else {
            cuGraphDestroy(g->g);
        }
    }
    handle_drop(c, g->handle);
    free(g->conds);
    free(g);
}

/* ---- stream capture ---- */
CUresult op_capture_begin(struct srv_client *c, const struct cumux_capture_begin *m, struct srv_stream *stream)
{
    if (stream->kind == STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as the driver answers for the NULL stream */
    /* Always relaxed in the driver: a global or thread-local capture there would prohibit the "unsafe"
     * calls (event queries, allocations...) that the server's threads make for every other client, and
     * invalidate this one when they did. The client's mode only restricts the client itself in CUDA;
     * cumux lets its calls through (more permissive, never less). */
    if (m->mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(cuStreamBeginCapture(stream->cu, CU_STREAM_CAPTURE_MODE_RELAXED));
    stream->capturing = true;
    c->ever_captured = true;
    return CUDA_SUCCESS;
}

CUresult op_capture_end(struct srv_client *c, struct srv_stream *stream, uint8_t *out, uint32_t *out_len)
{
    CUgraph graph = NULL;
    uint64_t id = capture_id(stream->cu);
    CUresult r = cuStreamEndCapture(stream->cu, &graph);
    stream->capturing = false;
    capture_allocs_end(c, id, r == CUDA_SUCCESS);
    struct srv_graph *handed = stream->capture_graph;
    stream->capture_graph = NULL;
    if (handed && handed->into) { /* the client's graph, with what was captured into it (or not) */
        handed->capture = handed->into = false;
        return r == CUDA_SUCCESS ? reply_u64(out, out_len, handed->handle) : r;
    }
    if (handed) {
        /* The graph the client already names: now its own, the same handle (and node handles). A failed
         * capture's graph is the driver's to drop. */
        if (r == CUDA_SUCCESS && graph == handed->g) {
            handed->capture = false;
            return reply_u64(out, out_len, handed->handle);
        }
        graph_free(c, handed);
    }
    if (r != CUDA_SUCCESS)
        return r;
    return graph_new(c, graph, out, out_len);
}

CUresult op_capture_info(struct srv_client *c, struct srv_stream *stream, uint8_t *out, uint32_t *out_len)
{
    (void)c;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CHECK(cuStreamGetCaptureInfo(stream->cu, &st, &id, NULL, NULL, NULL, NULL));
    struct cumux_capture_info rep = {.status = (uint32_t)st, .id = id};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

/* ---- whole graphs ---- */
CUresult op_graph_create(struct srv_client *c, const struct cumux_graph_create *m, uint8_t *out,
                         uint32_t *out_len)
{
    CUgraph graph;
    CHECK(cuGraphCreate(&graph, m->flags));
    return graph_new(c, graph, out, out_len);
}

CUresult op_graph_destroy(struct srv_client *c, struct srv_graph *graph)
{
    if (graph->capture || graph->parent) /* the capture owns it until it ends; a body, its node */
        return CUDA_ERROR_INVALID_VALUE;
    graph_free(c, graph);
    return CUDA_SUCCESS;
}

CUresult op_graph_instantiate(struct srv_client *c, const struct cumux_graph_instantiate *m,
                              struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    /* Graphs that allocate memory on device launch are not offered yet. */
    if (m->flags & ~(uint64_t)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))
        return CUDA_ERROR_NOT_SUPPORTED;
    struct srv_graph_exec *e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = cuGraphInstantiateWithFlags(&e->e, graph->g, m->flags);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->mem = NULL;
    e->nalloc = e->nfree = 0;
    if (c->graph_mem && (r = exec_mem_scan(e, graph->g)) != CUDA_SUCCESS) {
        cuGraphExecDestroy(e->e);
        free(e->mem);
        free(e);
        return r;
    }
    return new_handle(c, OBJ_GRAPH_EXEC, e, &e->handle, out, out_len);
}

CUresult op_graph_exec_destroy(struct srv_client *c, struct srv_graph_exec *exec)
{
    cuGraphExecDestroy(exec->e);
    handle_drop(c, exec->handle);
    free(exec->mem);
    free(exec);
    return CUDA_SUCCESS;
}

/* A launch or an upload of an instance on a client stream, under the legacy-stream rule. */
static CUresult exec_on_stream(CUresult (*run)(CUgraphExec, CUstream), struct srv_graph_exec *exec,
                               struct srv_stream *stream)
{
    CHECK(before_op(stream));
    CUresult r = run(exec->e, stream->cu);
    after_op(stream);
    return r;
}

CUresult op_graph_launch(struct srv_client *c, struct srv_graph_exec *exec, struct srv_stream *stream)
{
    CHECK(before_op(stream));
    int timed = srv_usage_begin(c, stream);
    CUresult r = cuGraphLaunch(exec->e, stream->cu);
    srv_usage_end(c, stream, timed, r);
    after_op(stream);
    if (r == CUDA_SUCCESS && exec->mem)
        exec_mem_launched(c, exec);
    return r;
}

CUresult op_graph_upload(struct srv_client *c, struct srv_graph_exec *exec, struct srv_stream *stream)
{
    (void)c;
    return exec_on_stream(cuGraphUpload, exec, stream);
}

CUresult op_graph_exec_update(struct srv_client *c, struct srv_graph_exec *exec, struct srv_graph *graph,
                              uint8_t *out, uint32_t *out_len)
{
    (void)c;
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult r = cuGraphExecUpdate(exec->e, graph->g, &info);
    struct cumux_exec_update_reply rep = {.result = (uint32_t)info.result};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return r;
}

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

/* ---- adding nodes ----
 * Every addition: the graph, ndeps dependency handles at the payload's start (padded to 8 bytes), then
 * the node's own parameters; the new node gets a handle. */
struct node_add {
    CUgraphNode deps[MAX_DEPS];
    uint32_t ndeps;
    const uint8_t *params; /* what follows the dependencies */
    uint32_t params_len;
};

static CUresult node_add_begin(struct srv_client *c, struct srv_graph *graph, uint32_t ndeps, const uint8_t *payload,
                               uint32_t len, struct node_add *a)
{
    if (ndeps > MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t list_bytes = (ndeps * 4 + 7) & ~7u;
    if (list_bytes > len)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->current_gpu);
    a->ndeps = ndeps;
    a->params = payload + list_bytes;
    a->params_len = len - list_bytes;
    return node_list(c, (const uint32_t *)(const void *)payload, ndeps, graph->handle, a->deps);
}

/* The client's handle of a node just added to graph (0: out of memory). */
static uint32_t node_wrap(struct srv_client *c, uint32_t graph, CUgraphNode node)
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
    uint32_t h = node_wrap(c, graph, node);
    return h ? reply_u64(out, out_len, h) : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- graph memory ----
 * A graph's allocation has an address fixed while the graph (or an instance of it) lives; the memory
 * behind it exists from the launch that allocates it to the free (in that graph, another, or by
 * cuMemFreeAsync). The client may name the address for copies and memsets from the moment the node is
 * made: no one else can be given it while the graph lives, and its graphs are parked, not destroyed, until
 * it goes. A capture that fails takes its allocations' addresses with it. */

static bool push_u64(uint64_t **v, uint32_t *n, uint32_t *cap, uint64_t x)
{
    if (!room_for_one((void **)v, *n, cap, sizeof x))
        return false;
    (*v)[(*n)++] = x;
    return true;
}

/* [ptr, ptr + size) joins the client's graph memory, merged with the graph ranges it overlaps (a graph
 * reuses an address for allocations whose lifetimes do not meet). */
static CUresult graph_mem_add(struct srv_client *c, uint64_t ptr, uint64_t size, int gpu)
{
    uint64_t lo = ptr, hi;
    if (!ptr || !size || !cumux_add_u64(ptr, size, &hi))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->dev_ranges.n;) {
        const struct cumux_range *r = &c->dev_ranges.v[i];
        if (r->base >= hi || r->base + r->size <= lo) {
            i++;
            continue;
        }
        if (r->tag != RANGE_GRAPH) /* the driver gave an address the client already names otherwise */
            return CUDA_ERROR_INVALID_VALUE;
        lo = r->base < lo ? r->base : lo;
        hi = r->base + r->size > hi ? r->base + r->size : hi;
        cumux_ranges_remove(&c->dev_ranges, r->base, NULL);
        i = 0;
    }
    if (cumux_ranges_add(&c->dev_ranges, lo, hi - lo, RANGE_GRAPH, (uint64_t)gpu) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < c->ngraph_allocs; i++)
        if (c->graph_allocs[i] == ptr)
            return CUDA_SUCCESS;
    if (!push_u64(&c->graph_allocs, &c->ngraph_allocs, &c->capgraph_allocs, ptr))
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->graph_mem = true;
    return CUDA_SUCCESS;
}

bool srv_capture_adds_to_graph(const struct srv_stream *s)
{
    return s->capture_graph && s->capture_graph->into;
}

bool srv_graph_mem_is(struct srv_client *c, uint64_t ptr)
{
    for (uint32_t i = 0; i < c->ngraph_allocs; i++)
        if (c->graph_allocs[i] == ptr)
            return true;
    return false;
}

/* The id of the capture the stream takes part in (its own, or one it joined through an event), 0 if none. */
static uint64_t capture_id(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    if (cuStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL) != CUDA_SUCCESS ||
        st == CU_STREAM_CAPTURE_STATUS_NONE)
        return 0;
    return id;
}

CUresult srv_graph_mem_captured(struct srv_client *c, struct srv_stream *s, uint64_t ptr, uint64_t size, int gpu)
{
    /* Under the capture's id, not the stream's: a stream that joined a capture does not end it. */
    uint64_t id = capture_id(s->cu);
    if (!room_for_one((void **)&c->cap_allocs, c->ncap_allocs, &c->capcap_allocs, sizeof *c->cap_allocs))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CHECK(graph_mem_add(c, ptr, size, gpu));
    c->cap_allocs[c->ncap_allocs++] = (struct srv_cap_alloc){.capture = id, .ptr = ptr};
    return CUDA_SUCCESS;
}

/* A capture ended: its allocations are its graph's now (ok), or gone with it. */
static void capture_allocs_end(struct srv_client *c, uint64_t capture, bool ok)
{
    for (uint32_t i = 0; i < c->ncap_allocs;) {
        struct srv_cap_alloc a = c->cap_allocs[i];
        if (a.capture != capture) {
            i++;
            continue;
        }
        c->cap_allocs[i] = c->cap_allocs[--c->ncap_allocs];
        if (ok)
            continue;
        const struct cumux_range *r = cumux_ranges_find(&c->dev_ranges, a.ptr);
        if (r && r->tag == RANGE_GRAPH)
            cumux_ranges_remove(&c->dev_ranges, r->base, NULL);
        for (uint32_t j = 0; j < c->ngraph_allocs; j++) {
            if (c->graph_allocs[j] == a.ptr) {
                c->graph_allocs[j] = c->graph_allocs[--c->ngraph_allocs];
                break;
            }
        }
    }
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
    p.poolProps.location.id = srv_gpus[c->current_gpu].dev;
    p.bytesize = (size_t)m->bytesize;
    CUgraphNode node;
    CUresult r = cuGraphAddMemAllocNode(&node, graph->g, a.deps, a.ndeps, &p);
    if (r == CUDA_SUCCESS && (r = graph_mem_add(c, p.dptr, m->bytesize, c->current_gpu)) != CUDA_SUCCESS) {
        cuGraphDestroyNode(node);
        return r;
    }
    if (r != CUDA_SUCCESS)
        return r;
    uint32_t h = node_wrap(c, graph->handle, node);
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

/* Which graph allocations are live (allocated by a launch, not freed since): only those are freed at the
 * client's end (freeing one that is not is undefined in CUDA). */
static void live_remove(struct srv_client *c, uint64_t ptr)
{
    for (uint32_t i = 0; i < c->ngraph_live; i++) {
        if (c->graph_live[i] == ptr) {
            c->graph_live[i] = c->graph_live[--c->ngraph_live];
            return;
        }
    }
}

void srv_graph_mem_freed(struct srv_client *c, uint64_t ptr)
{
    live_remove(c, ptr);
}

static void exec_mem_launched(struct srv_client *c, struct srv_graph_exec *e)
{
    const uint64_t *frees = e->mem + e->nalloc;
    for (uint32_t i = 0; i < e->nfree; i++)
        live_remove(c, frees[i]);
    for (uint32_t i = 0; i < e->nalloc; i++) {
        bool freed_here = false;
        for (uint32_t j = 0; j < e->nfree && !freed_here; j++)
            freed_here = frees[j] == e->mem[i];
        bool live = false;
        for (uint32_t j = 0; j < c->ngraph_live && !live; j++)
            live = c->graph_live[j] == e->mem[i];
        if (!freed_here && !live && !push_u64(&c->graph_live, &c->ngraph_live, &c->capgraph_live, e->mem[i]))
            cumux_logf("client %u: out of memory tracking graph memory: 0x%llx leaks at its end", c->id,
                       (unsigned long long)e->mem[i]);
    }
}

/* The graph memory an instance allocates and frees, from its graph's nodes. */
static CUresult exec_mem_scan(struct srv_graph_exec *e, CUgraph g)
{
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode *v = calloc(n ? n : 1, sizeof *v);
    uint64_t *allocs = calloc(n ? n : 1, sizeof *allocs), *frees = calloc(n ? n : 1, sizeof *frees);
    CUresult r = v && allocs && frees ? cuGraphGetNodes(g, v, &n) : CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t na = 0, nf = 0;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        CUgraphNodeType t;
        if ((r = cuGraphNodeGetType(v[i], &t)) != CUDA_SUCCESS)
            break;
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof p);
            if ((r = cuGraphMemAllocNodeGetParams(v[i], &p)) == CUDA_SUCCESS)
                allocs[na++] = p.dptr;
        } else if (t == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            CUdeviceptr p = 0;
            if ((r = cuGraphMemFreeNodeGetParams(v[i], &p)) == CUDA_SUCCESS)
                frees[nf++] = p;
        }
    }
    if (r == CUDA_SUCCESS && (na || nf)) {
        e->mem = malloc((na + nf) * sizeof *e->mem);
        if (e->mem) {
            memcpy(e->mem, allocs, na * sizeof *allocs);
            memcpy(e->mem + na, frees, nf * sizeof *frees);
            e->nalloc = na;
            e->nfree = nf;
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    free(v);
    free(allocs);
    free(frees);
    return r;
}

/* At the client's end, once its streams are done and its instances gone: the allocations still live are
 * freed while their graphs still hold the addresses, then the graphs go. */
static void graph_mem_release(struct srv_client *c)
{
    for (uint32_t i = 0; i < c->ngraph_live; i++) {
        const struct cumux_range *r = cumux_ranges_find(&c->dev_ranges, c->graph_live[i]);
        CUstream ms;
        if (r && r->tag == RANGE_GRAPH && mem_stream(c, (int)r->extra, &ms) == CUDA_SUCCESS) {
            cuMemFreeAsync(c->graph_live[i], ms);
            cuStreamSynchronize(ms);
        }
    }
    free(c->graph_live);
    c->graph_live = NULL;
    c->ngraph_live = c->capgraph_live = 0;
    free(c->cap_allocs); /* of captures abandoned above: their ranges went then */
    c->cap_allocs = NULL;
    c->ncap_allocs = c->capcap_allocs = 0;
    for (size_t i = c->dev_ranges.n; i-- > 0;)
        if (c->dev_ranges.v[i].tag == RANGE_GRAPH)
            cumux_ranges_remove(&c->dev_ranges, c->dev_ranges.v[i].base, NULL);
    free(c->graph_allocs);
    c->graph_allocs = NULL;
    c->ngraph_allocs = c->capgraph_allocs = 0;
    for (uint32_t i = 0; i < c->nparked_graphs; i++)
        cuGraphDestroy(c->parked_graphs[i]);
    free(c->parked_graphs);
    c->parked_graphs = NULL;
    c->nparked_graphs = c->capparked_graphs = 0;
}

/* The device's graph memory (cuDeviceGraphMemTrim, cuDeviceGet/SetGraphMemAttribute): the driver's, shared
 * by every client of the server, as the device's memory figures are. Trimming gives back only what no
 * graph uses; a reset touches only the high watermarks. */
CUresult op_graph_mem_trim(struct srv_client *c, const struct cumux_pool_default *m)
{
    if (m->device < 0 || m->device >= srv_gpu_count)
        return CUDA_ERROR_INVALID_DEVICE;
    use_gpu(c, m->device);
    return cuDeviceGraphMemTrim(srv_gpus[m->device].dev);
}

CUresult op_graph_mem_attr(struct srv_client *c, const struct cumux_graph_mem_attr *m, uint8_t *out,
                           uint32_t *out_len)
{
    if (m->device < 0 || m->device >= srv_gpu_count)
        return CUDA_ERROR_INVALID_DEVICE;
    if (m->attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH || m->set > 1 ||
        (m->set && m->attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && m->attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, m->device);
    cuuint64_t v = 0;
    if (m->set)
        CHECK(cuDeviceSetGraphMemAttribute(srv_gpus[m->device].dev, (CUgraphMem_attribute)m->attr, &v));
    CHECK(cuDeviceGetGraphMemAttribute(srv_gpus[m->device].dev, (CUgraphMem_attribute)m->attr, &v));
    return reply_u64(out, out_len, v);
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
    if (!room_for_one((void **)&graph->conds, graph->nconds, &graph->capconds, sizeof *graph->conds))
        return CUDA_ERROR_OUT_OF_MEMORY;
    use_gpu(c, c->current_gpu);
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, graph->g, srv_gpus[c->current_gpu].ctx, m->default_value, m->flags));
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
    p.conditional.ctx = srv_gpus[c->current_gpu].ctx;
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
        if (new_handle(c, OBJ_GRAPH, b, &b->handle, out, out_len) != CUDA_SUCCESS) /* frees b */
            break;
        bodies[made] = b->handle;
    }
    uint32_t h = bodies && made == m->size ? node_wrap(c, graph->handle, node) : 0;
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
    CUresult r = cuGraphAddMemsetNode(&node, graph->g, a.deps, a.ndeps, &p, srv_gpus[c->current_gpu].ctx);
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
    CUresult r = cuGraphAddMemcpyNode(&node, graph->g, a.deps, a.ndeps, &p, srv_gpus[c->current_gpu].ctx);
    return node_add_end(c, graph->handle, r, node, out, out_len);
}

CUresult op_graph_set_memcpy_node(struct srv_client *c, struct srv_graph_node *node, struct srv_graph_exec *exec,
                                  const uint8_t *payload, uint32_t payload_len)
{
    CUDA_MEMCPY3D p;
    CHECK(memcpy_node_params(c, payload, payload_len, &p));
    use_gpu(c, c->current_gpu);
    if (!exec)
        return cuGraphMemcpyNodeSetParams(node->n, &p);
    return cuGraphExecMemcpyNodeSetParams(exec->e, node->n, &p, srv_gpus[c->current_gpu].ctx);
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
    if (m->wait > 1 || event->ctx->gpu != c->current_gpu)
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
    use_gpu(c, c->current_gpu);
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    if (type != (m->wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD) ||
        event->ctx->gpu != c->current_gpu)
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
    use_gpu(c, c->current_gpu);
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
    use_gpu(c, c->current_gpu);
    if (!exec)
        return cuGraphMemsetNodeSetParams(node->n, &p);
    return cuGraphExecMemsetNodeSetParams(exec->e, node->n, &p, srv_gpus[c->current_gpu].ctx);
}

CUresult op_graph_set_host_node(struct srv_client *c, const struct cumux_graph_set_host_node *m,
                                struct srv_graph_node *node, struct srv_graph_exec *exec)
{
    use_gpu(c, c->current_gpu);
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(host_node_params(c, m->host_fn_id, &hp));
    if (!exec)
        return cuGraphHostNodeSetParams(node->n, &hp);
    return cuGraphExecHostNodeSetParams(exec->e, node->n, &hp);
}

static CUresult change_deps(struct srv_client *c, const struct cumux_graph_add_deps *m, struct srv_graph *graph,
                            const uint8_t *payload, uint32_t payload_len, bool remove)
{
    if (m->ndeps > MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t list_bytes = (m->ndeps * 8 + 7) & ~7u;
    if (list_bytes > payload_len)
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->current_gpu);
    CUgraphNode *ends = malloc(((size_t)m->ndeps * 2 + 1) * sizeof *ends);
    if (!ends)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = node_list(c, (const uint32_t *)(const void *)payload, m->ndeps * 2, graph->handle, ends);
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
    use_gpu(c, c->current_gpu);
    /* An allocation node holds the address the client may name: it stays (graph memory above). */
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node->n, &type));
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_CONDITIONAL) /* and its bodies */
        return CUDA_ERROR_NOT_SUPPORTED;
    CHECK(cuGraphDestroyNode(node->n));
    for (uint32_t h = 1; h <= c->nhandles; h++) {
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
    use_gpu(c, c->current_gpu);
    if (m->set)
        CHECK(cuGraphNodeSetEnabled(exec->e, node->n, m->enabled ? 1 : 0));
    unsigned on = 0;
    CHECK(cuGraphNodeGetEnabled(exec->e, node->n, &on));
    return reply_u64(out, out_len, on);
}

/* ---- capture into a graph of the client's ---- */
CUresult op_capture_begin_to_graph(struct srv_client *c, const struct cumux_capture_begin_to_graph *m,
                                   struct srv_stream *stream, struct srv_graph *graph, const uint8_t *payload,
                                   uint32_t payload_len)
{
    if (stream->kind == STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (m->mode > CU_STREAM_CAPTURE_MODE_RELAXED || graph->capture || stream->capturing || m->ndeps > MAX_DEPS ||
        ((uint64_t)m->ndeps * 4 + 7) / 8 * 8 > payload_len)
        return CUDA_ERROR_INVALID_VALUE;
    static _Thread_local CUgraphNode deps[MAX_DEPS];
    CHECK(node_list(c, (const uint32_t *)(const void *)payload, m->ndeps, graph->handle, deps));
    /* Relaxed in the driver whatever the client asked, as every capture (op_capture_begin). */
    CHECK(cuStreamBeginCaptureToGraph(stream->cu, graph->g, deps, NULL, m->ndeps, CU_STREAM_CAPTURE_MODE_RELAXED));
    stream->capturing = true;
    stream->capture_graph = graph;
    graph->capture = graph->into = true; /* not destroyed while the capture adds to it */
    c->ever_captured = true;
    return CUDA_SUCCESS;
}

/* ---- queries ---- */
/* The handle of a driver node of graph `graph`, made now if the client has not seen it (captured). */
static uint32_t node_handle(struct srv_client *c, uint32_t graph, CUgraphNode n)
{
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph_node *nd = handle_get(c, h, OBJ_GRAPH_NODE);
        if (nd && nd->n == n && nd->graph == graph)
            return h;
    }
    return node_wrap(c, graph, n);
}

/* ---- clones ---- */
CUresult op_graph_clone(struct srv_client *c, struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    if (graph->capture) /* a capture's graph is not finished */
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->current_gpu);
    CUgraph clone;
    CHECK(cuGraphClone(&clone, graph->g));
    return graph_new(c, clone, out, out_len);
}

CUresult op_node_find_in_clone(struct srv_client *c, struct srv_graph_node *node, struct srv_graph *clone,
                               uint8_t *out, uint32_t *out_len)
{
    use_gpu(c, c->current_gpu);
    CUgraphNode n;
    CHECK(cuGraphNodeFindInClone(&n, node->n, clone->g));
    uint32_t h = node_handle(c, clone->handle, n);
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
        uint32_t h = node_handle(c, graph, nodes[i]);
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
        uint32_t pair[2] = {node_handle(c, graph->handle, ends[i]), node_handle(c, graph->handle, ends[n + i])};
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
        for (uint32_t h = 1; h <= c->nhandles; h++) {
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
        for (uint32_t h = 1; h <= c->nhandles && !rep.event; h++) {
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

/* The capture's graph (handed out once, as a handle of the client's) and its current dependencies. */
CUresult op_capture_graph(struct srv_client *c, struct srv_stream *stream, uint8_t *out, uint32_t *out_len)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    const CUgraphNode *deps = NULL;
    size_t n = 0;
    CHECK(cuStreamGetCaptureInfo(stream->cu, &st, &id, &g, &deps, NULL, &n));
    struct cumux_capture_graph_reply rep = {.status = (uint32_t)st, .id = id};
    if (st == CU_STREAM_CAPTURE_STATUS_ACTIVE && g) {
        if (!stream->capture_graph || stream->capture_graph->g != g) {
            struct srv_graph *sg = calloc(1, sizeof *sg);
            if (!sg)
                return CUDA_ERROR_OUT_OF_MEMORY;
            *sg = (struct srv_graph){.g = g, .capture = true};
            if (!(sg->handle = handle_new(c, OBJ_GRAPH, sg))) {
                free(sg);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            stream->capture_graph = sg;
        }
        rep.graph = stream->capture_graph->handle;
        rep.count = n;
    }
    size_t fit = (CUMUX_REPLY_DATA - sizeof rep) / sizeof(uint32_t), i = 0;
    for (; rep.graph && i < n && i < fit; i++) {
        uint32_t h = node_handle(c, rep.graph, deps[i]);
        if (!h)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(out + sizeof rep + i * sizeof h, &h, sizeof h);
    }
    memcpy(out, &rep, sizeof rep);
    *out_len = (uint32_t)(sizeof rep + i * sizeof(uint32_t));
    return CUDA_SUCCESS;
}

CUresult op_capture_update_deps(struct srv_client *c, const struct cumux_capture_update_deps *m,
                                struct srv_stream *stream, const uint8_t *payload, uint32_t payload_len)
{
    static _Thread_local CUgraphNode nodes[MAX_DEPS];
    if (!stream->capture_graph || m->count > MAX_DEPS || payload_len < (uint64_t)m->count * sizeof(uint32_t) ||
        (m->flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && m->flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES))
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(node_list(c, (const uint32_t *)(const void *)payload, m->count, stream->capture_graph->handle, nodes));
    return cuStreamUpdateCaptureDependencies(stream->cu, nodes, NULL, m->count, m->flags);
}

void srv_capture_abandon(struct srv_client *c, struct srv_stream *s)
{
    if (!s->capturing)
        return;
    use_gpu(c, s->ctx->gpu);
    CUgraph g = NULL;
    struct srv_graph *into = s->capture_graph && s->capture_graph->into ? s->capture_graph : NULL;
    capture_allocs_end(c, capture_id(s->cu), false); /* before the graph, which holds their addresses, goes */
    if (cuStreamEndCapture(s->cu, &g) == CUDA_SUCCESS && g && !into)
        cuGraphDestroy(g);
    s->capturing = false;
    if (into)
        into->capture = into->into = false; /* the client's graph: it stays the client's */
    else if (s->capture_graph)
        graph_free(c, s->capture_graph); /* its graph was the capture's: destroyed just above */
    s->capture_graph = NULL;
}

void srv_graph_release_all(struct srv_client *c)
{
    /* Captures the client left running were ended already (srv_client_release_all, before its streams were
     * waited for), their graphs destroyed. */
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph_exec *e = handle_get(c, h, OBJ_GRAPH_EXEC);
        if (e) {
            cuGraphExecDestroy(e->e);
            handle_drop(c, h);
            free(e->mem);
            free(e);
        }
    }
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_graph *g = handle_get(c, h, OBJ_GRAPH);
        if (g)
            graph_free(c, g);
    }
    graph_mem_release(c);
    while (c->graph_hostfns) {
        struct hostfn_job *j = c->graph_hostfns;
        c->graph_hostfns = j->next;
        free(j);
    }
}

/* A client's end: captures left running end first, their graphs destroyed; a synchronize of a capturing
 * stream fails at once, without waiting for the work queued before the capture began. */
void srv_captures_release(struct srv_client *c)
{
    for (uint32_t h = 1; h <= c->nhandles; h++) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s)
            srv_capture_abandon(c, s);
    }
}
