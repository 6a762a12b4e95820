/* Graph instances after the GPU worker failed for another program's fault (docs/faults.md, issue 10).
 *
 * Graphs live in the worker, which takes them with it when it fails. So while the server can resume
 * (shim.resume_token), each instantiation reads its graph back, through the shim's own calls (nodes, their
 * kinds and parameters, edges), into a recipe kept with the instance; a few round trips a node, once. When
 * the program comes back to the worker taking over, each instance with a recipe is made again from it (the
 * nodes added without dependencies, then every edge, then instantiated with the flags first given), and
 * keeps its CUgraphExec. Its functions, events, pinned host memory and device memory are already back at
 * that point (resume.c makes them first), at the same addresses, so the same parameters mean the same work.
 *
 * A graph (CUgraph) unchanged since its last such instantiation is made again from the same recipe, and
 * keeps its object and its nodes' objects.
 *
 * Not made again, and answered CUDA_ERROR_INVALID_HANDLE from then on (destroying them succeeds): a graph
 * never instantiated, or changed since (a node or edge added or taken away, a node's parameters set), and
 * its nodes; an instance changed after its instantiation (cuGraphExec*SetParams, cuGraphExecUpdate,
 * cuGraphNodeSetEnabled); a graph or instance holding a node of a kind other than kernel, memset, copy,
 * host function, event record or wait, or empty (memory allocation and free nodes, whose memory is the
 * driver's, child graphs, conditional nodes...). */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "shim/client.h"
#include "shim/graph.h"

struct node_index {
    CUgraphNode node;
    uint32_t i;
};

static int by_node(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct node_index *)a)->node, y = (uintptr_t)((const struct node_index *)b)->node;
    return x < y ? -1 : x > y;
}

static bool index_of(const struct node_index *ix, size_t n, CUgraphNode node, uint32_t *out)
{
    struct node_index key = {.node = node};
    const struct node_index *hit = bsearch(&key, ix, n, sizeof *ix, by_node);
    if (hit)
        *out = hit->i;
    return hit != NULL;
}

/* One node's kind and parameters; the kernel's argument bytes appended to *args. */
static const char *read_node(CUgraphNode node, struct recipe_node *rn, uint8_t **args, size_t *args_len)
{
    if (cuGraphNodeGetType(node, &rn->type) != CUDA_SUCCESS)
        return "a node's kind could not be read back";
    switch (rn->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return NULL;
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k;
        if (cuGraphKernelNodeGetParams(node, &k) != CUDA_SUCCESS)
            return "a kernel node's parameters could not be read back";
        const struct CUfunc_st *f = k.func;
        uint8_t *grown = realloc(*args, *args_len + f->param_bytes + 1);
        if (!grown)
            return "out of memory";
        *args = grown;
        memcpy(grown + *args_len, node->args, f->param_bytes); /* what cuGraphKernelNodeGetParams left there */
        rn->p.kernel = (struct recipe_kernel){.f = k.func, .grid = {k.gridDimX, k.gridDimY, k.gridDimZ},
                                             .block = {k.blockDimX, k.blockDimY, k.blockDimZ},
                                             .shared = k.sharedMemBytes, .args_at = *args_len};
        *args_len += f->param_bytes;
        return NULL;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return cuGraphMemsetNodeGetParams(node, &rn->p.memset) == CUDA_SUCCESS ? NULL
                                                                                : "a memset node could not be read back";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphMemcpyNodeGetParams(node, &rn->p.memcpy) == CUDA_SUCCESS ? NULL
                                                                                : "a copy node could not be read back";
    case CU_GRAPH_NODE_TYPE_HOST:
        return cuGraphHostNodeGetParams(node, &rn->p.host) == CUDA_SUCCESS ? NULL
                                                                            : "a host node could not be read back";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphEventRecordNodeGetEvent(node, &rn->p.event) == CUDA_SUCCESS
                   ? NULL
                   : "an event record node could not be read back";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphEventWaitNodeGetEvent(node, &rn->p.event) == CUDA_SUCCESS
                   ? NULL
                   : "an event wait node could not be read back";
    default:
        return "it holds a node of a kind cumux does not make again (memory allocation or free, child graph, "
               "conditional, ...)";
    }
}

static struct shim_graph_recipe *record(CUgraph g, const char **why_not)
{
    size_t n = 0, ne = 0, args_len = 0;
    CUgraphNode *nodes = NULL, *from = NULL, *to = NULL;
    struct recipe_node *rn = NULL;
    struct node_index *ix = NULL;
    uint8_t *args = NULL;
    struct shim_graph_recipe *r = NULL;
    const char *why = NULL;
    if (cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || cuGraphGetEdges(g, NULL, NULL, NULL, &ne) != CUDA_SUCCESS) {
        why = "its nodes could not be read back";
        goto out;
    }
    if (n > UINT32_MAX || ne > SIZE_MAX / (2 * sizeof(uint32_t)) / 2) {
        why = "it is too large";
        goto out;
    }
    nodes = calloc(n + 1, sizeof *nodes);
    rn = calloc(n + 1, sizeof *rn);
    ix = calloc(n + 1, sizeof *ix);
    from = calloc(ne + 1, sizeof *from);
    to = calloc(ne + 1, sizeof *to);
    if (!nodes || !rn || !ix || !from || !to) {
        why = "out of memory";
        goto out;
    }
    size_t got = n, got_edges = ne;
    if (cuGraphGetNodes(g, nodes, &got) != CUDA_SUCCESS || got != n ||
        cuGraphGetEdges(g, from, to, NULL, &got_edges) != CUDA_SUCCESS || got_edges != ne) {
        why = "its nodes could not be read back";
        goto out;
    }
    for (size_t i = 0; i < n && !why; i++) {
        why = read_node(nodes[i], &rn[i], &args, &args_len);
        rn[i].obj = nodes[i];
        ix[i] = (struct node_index){nodes[i], (uint32_t)i};
    }
    if (why)
        goto out;
    qsort(ix, n, sizeof *ix, by_node);
    size_t node_bytes = n * sizeof *rn, edge_bytes = 2 * ne * sizeof(uint32_t);
    size_t bytes = sizeof *r + node_bytes + edge_bytes + args_len;
    r = malloc(bytes);
    if (!r) {
        why = "out of memory";
        goto out;
    }
    *r = (struct shim_graph_recipe){.bytes = bytes, .nodes = n, .edges = ne, .args_len = args_len};
    if (node_bytes)
        memcpy(recipe_nodes(r), rn, node_bytes);
    if (args_len)
        memcpy(recipe_args(r), args, args_len);
    uint32_t *edge = recipe_edges(r);
    for (size_t i = 0; i < ne && !why; i++)
        if (!index_of(ix, n, from[i], &edge[2 * i]) || !index_of(ix, n, to[i], &edge[2 * i + 1]))
            why = "an edge names a node the graph does not list";
    if (why) {
        free(r);
        r = NULL;
    }
out:
    free(nodes);
    free(rn);
    free(ix);
    free(from);
    free(to);
    free(args);
    *why_not = why;
    return r;
}

__attribute__((constructor)) static void register_record(void)
{
    shim_graph_record = record;
}

static CUresult add_node(CUgraph g, const struct shim_graph_recipe *r, const struct recipe_node *rn, CUgraphNode *out)
{
    switch (rn->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(out, g, NULL, 0);
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const struct CUfunc_st *f = rn->p.kernel.f;
        void **argv = calloc(f->nparams + 1, sizeof *argv);
        if (!argv)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (uint32_t i = 0; i < f->nparams; i++)
            argv[i] = recipe_args(r) + rn->p.kernel.args_at + f->params[i].offset;
        CUDA_KERNEL_NODE_PARAMS k = {.func = rn->p.kernel.f,
                                     .gridDimX = rn->p.kernel.grid[0],
                                     .gridDimY = rn->p.kernel.grid[1],
                                     .gridDimZ = rn->p.kernel.grid[2],
                                     .blockDimX = rn->p.kernel.block[0],
                                     .blockDimY = rn->p.kernel.block[1],
                                     .blockDimZ = rn->p.kernel.block[2],
                                     .sharedMemBytes = rn->p.kernel.shared,
                                     .kernelParams = argv};
        CUresult res = cuGraphAddKernelNode(out, g, NULL, 0, &k);
        free(argv);
        return res;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return cuGraphAddMemsetNode(out, g, NULL, 0, &rn->p.memset, NULL);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphAddMemcpyNode(out, g, NULL, 0, &rn->p.memcpy, NULL);
    case CU_GRAPH_NODE_TYPE_HOST:
        return cuGraphAddHostNode(out, g, NULL, 0, &rn->p.host);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(out, g, NULL, 0, rn->p.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(out, g, NULL, 0, rn->p.event);
    default:
        return CUDA_ERROR_NOT_SUPPORTED; /* never recorded */
    }
}

/* The recipe's nodes and edges added to g (empty); the nodes made, in the recipe's order, in made. */
static CUresult build(CUgraph g, const struct shim_graph_recipe *r, CUgraphNode *made)
{
    enum { EDGE_BATCH = 512 };
    const struct recipe_node *rn = recipe_nodes(r);
    const uint32_t *edge = recipe_edges(r);
    CUgraphNode *from = calloc(EDGE_BATCH, sizeof *from), *to = calloc(EDGE_BATCH, sizeof *to);
    CUresult res = from && to ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; res == CUDA_SUCCESS && i < r->nodes; i++)
        res = add_node(g, r, &rn[i], &made[i]);
    for (size_t i = 0; res == CUDA_SUCCESS && i < r->edges; i += EDGE_BATCH) {
        size_t k = r->edges - i < EDGE_BATCH ? r->edges - i : EDGE_BATCH;
        for (size_t j = 0; j < k; j++) {
            from[j] = made[edge[2 * (i + j)]];
            to[j] = made[edge[2 * (i + j) + 1]];
        }
        res = cuGraphAddDependencies(g, from, to, NULL, k);
    }
    free(from);
    free(to);
    return res;
}

/* An instance made again from its recipe, through a graph of its own; its handle in *handle. */
static CUresult make_instance(const struct shim_graph_recipe *r, unsigned long long flags, uint32_t *handle)
{
    CUgraph g;
    CUresult res = cuGraphCreate(&g, 0);
    if (res != CUDA_SUCCESS)
        return res;
    CUgraphNode *made = calloc(r->nodes + 1, sizeof *made);
    res = made ? build(g, r, made) : CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t h = 0;
    if (res == CUDA_SUCCESS)
        res = shim_op_graph_instantiate(g->handle, flags, &h);
    if (res == CUDA_SUCCESS)
        *handle = (uint32_t)h;
    cuGraphDestroy(g); /* the instance keeps what it needs, as in CUDA */
    free(made);
    return res;
}

/* The program's graph object made again, with its node objects. */
static CUresult make_graph(CUgraph g)
{
    uint64_t h;
    CUresult res = shim_op_graph_create(0, &h);
    if (res != CUDA_SUCCESS)
        return res;
    shim_graph_adopt(g, (uint32_t)h);
    struct shim_graph_recipe *r = g->recipe;
    g->recipe = NULL; /* adding the nodes counts as changing the graph: the recipe is put back after */
    CUgraphNode *made = calloc(r->nodes + 1, sizeof *made);
    res = made ? build(g, r, made) : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; res == CUDA_SUCCESS && i < r->nodes; i++)
        shim_graph_node_adopt(recipe_nodes(r)[i].obj, made[i]);
    free(made);
    g->recipe = r; /* for the next fault; freed by the caller when this one failed */
    return res;
}

CUresult shim_graph_execs_rebind(unsigned *made, unsigned *lost, unsigned *graphs_made, unsigned *graphs_lost)
{
    *made = *lost = *graphs_made = 0;
    CUgraph *kept = NULL;
    size_t nkept = 0;
    unsigned live = shim_graphs_forget(&kept, &nkept); /* before any new graph takes a handle the old ones had */
    for (size_t i = 0; i < nkept; i++) {
        CUgraph g = kept[i];
        if (make_graph(g) == CUDA_SUCCESS) {
            (*graphs_made)++;
            continue;
        }
        if (g->handle) /* made in part: what was made is let go, and the graph is gone */
            shim_op_graph_destroy(g->handle);
        g->handle = 0;
        shim_graph_changed(NULL, g);
    }
    free(kept);
    *graphs_lost = live - *graphs_made;
    const char *first_why = NULL;
    pthread_mutex_lock(&shim_graph_execs.lock);
    for (size_t i = 0; i < shim_graph_execs.n; i++) {
        struct CUgraphExec_st *e = shim_graph_execs.v[i];
        if (e->magic != SHIM_MAGIC_GRAPH_EXEC)
            continue;
        e->handle = 0;
        uint32_t h;
        CUresult res = e->recipe ? make_instance(e->recipe, e->instantiate_flags, &h) : CUDA_ERROR_NOT_SUPPORTED;
        if (res == CUDA_SUCCESS) {
            e->handle = h;
            (*made)++;
            continue;
        }
        if (e->recipe) {
            free(e->recipe);
            e->recipe = NULL;
            e->why_not = "making it again failed";
        }
        if (!first_why)
            first_why = e->why_not ? e->why_not : "?";
        (*lost)++;
    }
    pthread_mutex_unlock(&shim_graph_execs.lock);
    if (*lost || *graphs_lost)
        cumux_logf("after the worker failed: %u graph instance(s) and %u graph(s) not made again (calls naming "
                   "them return CUDA_ERROR_INVALID_HANDLE; a graph is made again only as it was at an "
                   "instantiation)%s%s",
                   *lost, *graphs_lost, first_why ? "; an instance because " : "", first_why ? first_why : "");
    return CUDA_SUCCESS;
}
