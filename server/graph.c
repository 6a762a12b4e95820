/* CUDA graphs in the server: whole graphs and their instances, graph memory, and a client's graphs at its
 * end. Nodes are graph_node.c's, stream capture capture.c's (server/graph.h). */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/graph.h"
#include "server/handlers.h"

/* A handle for obj (into *handle, when the object keeps its own), which is the reply. */
CUresult graph_new_handle(struct srv_client *c, enum srv_obj_type t, void *obj, uint32_t *handle, uint8_t *out,
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
bool graph_room_for_one(void **v, uint32_t n, uint32_t *cap, size_t size)
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

CUresult graph_new(struct srv_client *c, CUgraph g, uint8_t *out, uint32_t *out_len)
{
    struct srv_graph *sg = calloc(1, sizeof *sg);
    if (!sg) {
        cuGraphDestroy(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sg->g = g;
    sg->capture = false;
    CUresult r = graph_new_handle(c, OBJ_GRAPH, sg, &sg->handle, out, out_len);
    if (r != CUDA_SUCCESS)
        cuGraphDestroy(g);
    return r;
}

static void exec_mem_launched(struct srv_client *c, struct srv_graph_exec *e);
static CUresult exec_mem_scan(struct srv_graph_exec *e, CUgraph g);

void graph_free(struct srv_client *c, struct srv_graph *g)
{
    /* Its conditional nodes' bodies go with it (the driver's, destroyed with the graph). */
    SRV_FOR_EACH_HANDLE(c, i) {
        struct srv_graph *b = handle_get(c, i, OBJ_GRAPH);
        if (b && b->parent == g->handle)
            graph_free(c, b);
    }
    /* Its nodes go with it. */
    SRV_FOR_EACH_HANDLE(c, i) {
        struct srv_graph_node *n = handle_get(c, i, OBJ_GRAPH_NODE);
        if (n && n->graph == g->handle) {
            handle_drop(c, i);
            free(n);
        }
    }
    if (!g->capture && !g->parent) {
        /* Its allocations' addresses stay reserved while the client may name them (graph memory above). */
        if (c->graphs.graph_mem) {
            if (graph_room_for_one((void **)&c->graphs.parked_graphs, c->graphs.nparked_graphs, &c->graphs.capparked_graphs, sizeof(CUgraph)))
                c->graphs.parked_graphs[c->graphs.nparked_graphs++] = g->g;
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
    if (c->graphs.graph_mem && (r = exec_mem_scan(e, graph->g)) != CUDA_SUCCESS) {
        cuGraphExecDestroy(e->e);
        free(e->mem);
        free(e);
        return r;
    }
    return graph_new_handle(c, OBJ_GRAPH_EXEC, e, &e->handle, out, out_len);
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

/* ---- graph memory ----
 * A graph's allocation has an address fixed while the graph (or an instance of it) lives; the memory
 * behind it exists from the launch that allocates it to the free (in that graph, another, or by
 * cuMemFreeAsync). The client may name the address for copies and memsets from the moment the node is
 * made: no one else can be given it while the graph lives, and its graphs are parked, not destroyed, until
 * it goes. A capture that fails takes its allocations' addresses with it. */

static bool push_u64(uint64_t **v, uint32_t *n, uint32_t *cap, uint64_t x)
{
    if (!graph_room_for_one((void **)v, *n, cap, sizeof x))
        return false;
    (*v)[(*n)++] = x;
    return true;
}

/* [ptr, ptr + size) joins the client's graph memory, merged with the graph ranges it overlaps (a graph
 * reuses an address for allocations whose lifetimes do not meet). */
CUresult graph_mem_add(struct srv_client *c, uint64_t ptr, uint64_t size, int gpu)
{
    uint64_t lo = ptr, hi;
    if (!ptr || !size || !cumux_add_u64(ptr, size, &hi))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->memory.dev_ranges.n;) {
        const struct cumux_range *r = &c->memory.dev_ranges.v[i];
        if (r->base >= hi || r->base + r->size <= lo) {
            i++;
            continue;
        }
        if (r->tag != RANGE_GRAPH) /* the driver gave an address the client already names otherwise */
            return CUDA_ERROR_INVALID_VALUE;
        lo = r->base < lo ? r->base : lo;
        hi = r->base + r->size > hi ? r->base + r->size : hi;
        cumux_ranges_remove(&c->memory.dev_ranges, r->base, NULL);
        i = 0;
    }
    if (cumux_ranges_add(&c->memory.dev_ranges, lo, hi - lo, RANGE_GRAPH, (uint64_t)gpu) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < c->graphs.ngraph_allocs; i++)
        if (c->graphs.graph_allocs[i] == ptr)
            return CUDA_SUCCESS;
    if (!push_u64(&c->graphs.graph_allocs, &c->graphs.ngraph_allocs, &c->graphs.capgraph_allocs, ptr))
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->graphs.graph_mem = true;
    return CUDA_SUCCESS;
}

bool srv_graph_mem_is(struct srv_client *c, uint64_t ptr)
{
    for (uint32_t i = 0; i < c->graphs.ngraph_allocs; i++)
        if (c->graphs.graph_allocs[i] == ptr)
            return true;
    return false;
}

/* The id of the capture the stream takes part in (its own, or one it joined through an event), 0 if none. */
uint64_t graph_capture_id(CUstream s)
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
    uint64_t id = graph_capture_id(s->cu);
    if (!graph_room_for_one((void **)&c->graphs.cap_allocs, c->graphs.ncap_allocs, &c->graphs.capcap_allocs, sizeof *c->graphs.cap_allocs))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CHECK(graph_mem_add(c, ptr, size, gpu));
    c->graphs.cap_allocs[c->graphs.ncap_allocs++] = (struct srv_cap_alloc){.capture = id, .ptr = ptr};
    return CUDA_SUCCESS;
}

/* A capture ended: its allocations are its graph's now (ok), or gone with it. */
void graph_capture_allocs_end(struct srv_client *c, uint64_t capture, bool ok)
{
    for (uint32_t i = 0; i < c->graphs.ncap_allocs;) {
        struct srv_cap_alloc a = c->graphs.cap_allocs[i];
        if (a.capture != capture) {
            i++;
            continue;
        }
        c->graphs.cap_allocs[i] = c->graphs.cap_allocs[--c->graphs.ncap_allocs];
        if (ok)
            continue;
        const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, a.ptr);
        if (r && r->tag == RANGE_GRAPH)
            cumux_ranges_remove(&c->memory.dev_ranges, r->base, NULL);
        for (uint32_t j = 0; j < c->graphs.ngraph_allocs; j++) {
            if (c->graphs.graph_allocs[j] == a.ptr) {
                c->graphs.graph_allocs[j] = c->graphs.graph_allocs[--c->graphs.ngraph_allocs];
                break;
            }
        }
    }
}

/* Which graph allocations are live (allocated by a launch, not freed since): only those are freed at the
 * client's end (freeing one that is not is undefined in CUDA). */
static void live_remove(struct srv_client *c, uint64_t ptr)
{
    for (uint32_t i = 0; i < c->graphs.ngraph_live; i++) {
        if (c->graphs.graph_live[i] == ptr) {
            c->graphs.graph_live[i] = c->graphs.graph_live[--c->graphs.ngraph_live];
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
        for (uint32_t j = 0; j < c->graphs.ngraph_live && !live; j++)
            live = c->graphs.graph_live[j] == e->mem[i];
        if (!freed_here && !live && !push_u64(&c->graphs.graph_live, &c->graphs.ngraph_live, &c->graphs.capgraph_live, e->mem[i]))
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
    for (uint32_t i = 0; i < c->graphs.ngraph_live; i++) {
        const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, c->graphs.graph_live[i]);
        CUstream ms;
        if (r && r->tag == RANGE_GRAPH && mem_stream(c, (int)r->extra, &ms) == CUDA_SUCCESS) {
            cuMemFreeAsync(c->graphs.graph_live[i], ms);
            cuStreamSynchronize(ms);
        }
    }
    free(c->graphs.graph_live);
    c->graphs.graph_live = NULL;
    c->graphs.ngraph_live = c->graphs.capgraph_live = 0;
    free(c->graphs.cap_allocs); /* of captures abandoned above: their ranges went then */
    c->graphs.cap_allocs = NULL;
    c->graphs.ncap_allocs = c->graphs.capcap_allocs = 0;
    for (size_t i = c->memory.dev_ranges.n; i-- > 0;)
        if (c->memory.dev_ranges.v[i].tag == RANGE_GRAPH)
            cumux_ranges_remove(&c->memory.dev_ranges, c->memory.dev_ranges.v[i].base, NULL);
    free(c->graphs.graph_allocs);
    c->graphs.graph_allocs = NULL;
    c->graphs.ngraph_allocs = c->graphs.capgraph_allocs = 0;
    for (uint32_t i = 0; i < c->graphs.nparked_graphs; i++)
        cuGraphDestroy(c->graphs.parked_graphs[i]);
    free(c->graphs.parked_graphs);
    c->graphs.parked_graphs = NULL;
    c->graphs.nparked_graphs = c->graphs.capparked_graphs = 0;
}

/* The device's graph memory (cuDeviceGraphMemTrim, cuDeviceGet/SetGraphMemAttribute): the driver's, shared
 * by every client of the server, as the device's memory figures are. Trimming gives back only what no
 * graph uses; a reset touches only the high watermarks. */
CUresult op_graph_mem_trim(struct srv_client *c, const struct cumux_pool_default *m)
{
    use_gpu(c, m->device);
    return cuDeviceGraphMemTrim(srv_gpus[m->device].dev);
}

CUresult op_graph_mem_attr(struct srv_client *c, const struct cumux_graph_mem_attr *m, uint8_t *out,
                           uint32_t *out_len)
{
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

/* ---- clones ---- */
CUresult op_graph_clone(struct srv_client *c, struct srv_graph *graph, uint8_t *out, uint32_t *out_len)
{
    if (graph->capture) /* a capture's graph is not finished */
        return CUDA_ERROR_INVALID_VALUE;
    use_gpu(c, c->obj.current_gpu);
    CUgraph clone;
    CHECK(cuGraphClone(&clone, graph->g));
    return graph_new(c, clone, out, out_len);
}

void srv_graph_release_all(struct srv_client *c)
{
    /* Captures the client left running were ended already (srv_client_release_all, before its streams were
     * waited for), their graphs destroyed. */
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_graph_exec *e = handle_get(c, h, OBJ_GRAPH_EXEC);
        if (e) {
            cuGraphExecDestroy(e->e);
            handle_drop(c, h);
            free(e->mem);
            free(e);
        }
    }
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_graph *g = handle_get(c, h, OBJ_GRAPH);
        if (g)
            graph_free(c, g);
    }
    graph_mem_release(c);
    while (c->hostfn.graph_hostfns) {
        struct hostfn_job *j = c->hostfn.graph_hostfns;
        c->hostfn.graph_hostfns = j->next;
        free(j);
    }
}

