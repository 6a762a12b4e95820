/* fakecuda graphs: nodes hold the same ops as streams (kernels, copies, memsets, host functions; an
 * empty node holds none); instantiation copies them in an order that respects every dependency, and a
 * launch queues a copy of that list on the stream as one op. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"
#include "fake_graph.h"

struct fc_gnode {
    uint32_t magic;
    struct fc_graph *g;
    struct fc_op *op; /* NULL: an empty node */
    struct fc_gnode **deps;
    size_t ndeps, capdeps;
    void **argv; /* cuGraphKernelNodeGetParams's pointers into the op's arguments */
    const struct fc_gnode *orig; /* in a clone: the node it was copied from (cuGraphNodeFindInClone) */
};

struct fc_graph {
    uint32_t magic;
    struct fc_gnode **nodes;
    size_t n, cap;
};

struct fc_exec {
    uint32_t magic;
    pthread_mutex_t mu;
    struct fc_op **ops;      /* in run order; NULL for empty nodes */
    struct fc_gnode **src;   /* the node of the instantiated graph each came from */
    bool *off;               /* turned off by cuGraphNodeSetEnabled: not run */
    size_t n;
};

struct fc_graph *fc_graph_new(void)
{
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = FC_MAGIC_GRAPH;
    atomic_fetch_add(&fc_stats.graphs, 1);
    return g;
}

static void conds_free(const struct fc_graph *g);

void fc_graph_free(struct fc_graph *g)
{
    conds_free(g);
    for (size_t i = 0; i < g->n; i++) {
        struct fc_gnode *nd = g->nodes[i];
        fc_op_free(nd->op);
        free(nd->deps);
        free(nd->argv);
        nd->magic = FC_MAGIC_DEAD;
        free(nd);
    }
    free(g->nodes);
    g->magic = FC_MAGIC_DEAD;
    free(g);
    atomic_fetch_sub(&fc_stats.graphs, 1);
}

static struct fc_graph *graph_get(CUgraph h)
{
    struct fc_graph *g = (struct fc_graph *)h;
    return g && g->magic == FC_MAGIC_GRAPH ? g : NULL;
}

static struct fc_gnode *node_get(CUgraphNode h)
{
    struct fc_gnode *n = (struct fc_gnode *)h;
    return n && n->magic == FC_MAGIC_NODE ? n : NULL;
}

static struct fc_exec *exec_get(CUgraphExec h)
{
    struct fc_exec *e = (struct fc_exec *)h;
    return e && e->magic == FC_MAGIC_EXEC ? e : NULL;
}

static int add_dep(struct fc_gnode *n, struct fc_gnode *d)
{
    if (n->ndeps == n->capdeps) {
        size_t cap = n->capdeps ? n->capdeps * 2 : 4;
        struct fc_gnode **v = realloc(n->deps, cap * sizeof *v);
        if (!v)
            return -1;
        n->deps = v;
        n->capdeps = cap;
    }
    n->deps[n->ndeps++] = d;
    return 0;
}

CUresult fc_graph_add(struct fc_graph *g, struct fc_gnode *const *deps, size_t ndeps, struct fc_op *op,
                      struct fc_gnode **out)
{
    for (size_t i = 0; i < ndeps; i++) {
        if (!deps[i] || deps[i]->magic != FC_MAGIC_NODE || deps[i]->g != g) {
            fc_op_free(op);
            return CUDA_ERROR_INVALID_VALUE;
        }
        for (size_t j = 0; j < i; j++) {
            if (deps[j] == deps[i]) {
                fc_op_free(op);
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
    }
    struct fc_gnode *n = calloc(1, sizeof *n);
    if (!n || (g->n == g->cap && !(g->nodes = realloc(g->nodes, (g->cap = g->cap ? g->cap * 2 : 8) * sizeof *g->nodes)))) {
        /* realloc failing loses the array: only under memory exhaustion, where the fake gives up anyway */
        free(n);
        fc_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->magic = FC_MAGIC_NODE;
    n->g = g;
    n->op = op;
    for (size_t i = 0; i < ndeps; i++) {
        if (add_dep(n, deps[i]) < 0) {
            free(n->deps);
            free(n);
            fc_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    g->nodes[g->n++] = n;
    *out = n;
    return CUDA_SUCCESS;
}

/* Public entry points: the graph lock around fc_graph_add, handles checked. */
static CUresult add_public(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, struct fc_op *op)
{
    CUresult r = fc_check_init();
    struct fc_graph *g = graph_get(hg);
    if (r == CUDA_SUCCESS && (!out || !g || (ndeps && !deps)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        fc_op_free(op);
        return r;
    }
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *n;
    r = fc_graph_add(g, (struct fc_gnode *const *)deps, ndeps, op, &n);
    pthread_mutex_unlock(&fc_graph_mu);
    if (r == CUDA_SUCCESS)
        *out = (CUgraphNode)n;
    return r;
}

CUresult cuGraphCreate(CUgraph *out, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    if (!out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *g = fc_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hg)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    if (g)
        fc_graph_free(g);
    pthread_mutex_unlock(&fc_graph_mu);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps)
{
    return add_public(out, g, deps, ndeps, NULL);
}

static CUresult host_node_op(const CUDA_HOST_NODE_PARAMS *p, struct fc_op **out)
{
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_HOSTFN, "graph host node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.h.fn = p->fn;
    op->u.h.data = p->userData;
    *out = op;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                            const CUDA_HOST_NODE_PARAMS *p)
{
    struct fc_op *op;
    CHECK_RET(host_node_op(p, &op));
    return add_public(out, g, deps, ndeps, op);
}

static CUresult kernel_node_op(const CUDA_KERNEL_NODE_PARAMS *p, const char *call, struct fc_op **op)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_func *f = fc_func_get(p->func ? (const void *)p->func : (const void *)p->kern);
    if (!f)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    return fc_kernel_op(f, grid, block, p->sharedMemBytes, p->kernelParams, p->extra, call, op);
}

CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct fc_op *op;
    CHECK_RET(kernel_node_op(p, "cuGraphAddKernelNode", &op));
    return add_public(out, g, deps, ndeps, op);
}

static CUresult memcpy_node_op(const CUDA_MEMCPY3D *p, struct fc_op **out)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    for (int side = 0; side < 2; side++) {
        CUmemorytype t = side ? p->dstMemoryType : p->srcMemoryType;
        if (t != CU_MEMORYTYPE_HOST && t != CU_MEMORYTYPE_DEVICE && t != CU_MEMORYTYPE_UNIFIED)
            return CUDA_ERROR_INVALID_VALUE; /* arrays: not emulated */
    }
    struct fc_op *op = fc_op_new(OP_COPY, "graph memcpy node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fc_copy_from_3d(&op->u.cp, p);
    CUresult r = fc_copy_validate(&op->u.cp);
    if (r == CUDA_SUCCESS && (!p->WidthInBytes || !p->Height || !p->Depth))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        fc_op_free(op);
        return r;
    }
    fc_op_check(op); /* when added, and again when run */
    *out = op;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    struct fc_op *op;
    CHECK_RET(memcpy_node_op(p, &op));
    return add_public(out, g, deps, ndeps, op);
}

static CUresult memset_node_op(const CUDA_MEMSET_NODE_PARAMS *p, struct fc_op **out)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->width || !p->height)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_MEMSET, "graph memset node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.ms = (struct fc_memset){.dst = p->dst, .pitch = p->pitch, .width = p->width, .height = p->height,
                                  .value = p->value, .elem = p->elementSize};
    CUresult r = fc_memset_validate(&op->u.ms);
    if (r != CUDA_SUCCESS) {
        fc_op_free(op);
        return r;
    }
    fc_op_check(op);
    *out = op;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    (void)ctx;
    struct fc_op *op;
    CHECK_RET(memset_node_op(p, &op));
    return add_public(out, g, deps, ndeps, op);
}

CUresult cuGraphAddDependencies(CUgraph hg, const CUgraphNode *from, const CUgraphNode *to,
                                const CUgraphEdgeData *edges, size_t n)
{
    (void)edges;
    CHECK_RET(fc_check_init());
    if (n && (!from || !to))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    CUresult r = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        struct fc_gnode *a = node_get(from[i]), *b = node_get(to[i]);
        if (!a || !b || a->g != g || b->g != g || a == b) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        for (size_t j = 0; j < b->ndeps; j++)
            if (b->deps[j] == a)
                r = CUDA_ERROR_INVALID_VALUE; /* the edge exists already */
        if (r == CUDA_SUCCESS && add_dep(b, a) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

/* The node list protocol of cuGraphGetNodes and friends: NULL asks for the count; otherwise up to *n. */
static void node_list(struct fc_gnode *const *v, size_t count, CUgraphNode *out, size_t *n)
{
    if (!out) {
        *n = count;
        return;
    }
    size_t k = *n < count ? *n : count;
    for (size_t i = 0; i < *n; i++)
        out[i] = i < k ? (CUgraphNode)v[i] : NULL;
    *n = k;
}

CUresult cuGraphGetNodes(CUgraph hg, CUgraphNode *nodes, size_t *n)
{
    CHECK_RET(fc_check_init());
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    if (g)
        node_list(g->nodes, g->n, nodes, n);
    pthread_mutex_unlock(&fc_graph_mu);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphNodeGetDependencies(CUgraphNode hn, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n)
{
    CHECK_RET(fc_check_init());
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    if (nd) {
        size_t want = *n;
        node_list(nd->deps, nd->ndeps, deps, n);
        if (deps && edges)
            memset(edges, 0, want * sizeof *edges);
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphGetRootNodes(CUgraph hg, CUgraphNode *nodes, size_t *n)
{
    CHECK_RET(fc_check_init());
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    if (g) {
        struct fc_gnode **roots = malloc((g->n + 1) * sizeof *roots);
        size_t k = 0;
        for (size_t i = 0; roots && i < g->n; i++)
            if (g->nodes[i]->ndeps == 0)
                roots[k++] = g->nodes[i];
        node_list(roots, k, nodes, n);
        free(roots);
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode hn, CUgraphNode *out, CUgraphEdgeData *edges, size_t *n)
{
    CHECK_RET(fc_check_init());
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    if (nd) {
        struct fc_graph *g = nd->g;
        struct fc_gnode **dep = malloc((g->n + 1) * sizeof *dep);
        size_t k = 0, want = *n;
        for (size_t i = 0; dep && i < g->n; i++)
            for (size_t j = 0; j < g->nodes[i]->ndeps; j++)
                if (g->nodes[i]->deps[j] == nd) {
                    dep[k++] = g->nodes[i];
                    break;
                }
        node_list(dep, k, out, n);
        if (out && edges)
            memset(edges, 0, want * sizeof *edges);
        free(dep);
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphGetEdges(CUgraph hg, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges, size_t *n)
{
    CHECK_RET(fc_check_init());
    if (!n || (from == NULL) != (to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    if (g) {
        size_t k = 0;
        for (size_t i = 0; i < g->n; i++)
            for (size_t j = 0; j < g->nodes[i]->ndeps; j++) {
                if (from && k < *n) {
                    from[k] = (CUgraphNode)g->nodes[i]->deps[j];
                    to[k] = (CUgraphNode)g->nodes[i];
                    if (edges)
                        memset(&edges[k], 0, sizeof edges[k]);
                }
                k++;
            }
        if (!from || k < *n)
            *n = k;
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphNodeGetType(CUgraphNode hn, CUgraphNodeType *type)
{
    CHECK_RET(fc_check_init());
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    if (nd) {
        switch (nd->op ? nd->op->kind : OP_EMPTY) {
        case OP_KERNEL: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
        case OP_MEMSET: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
        case OP_COPY: *type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
        case OP_HOSTFN: *type = CU_GRAPH_NODE_TYPE_HOST; break;
        case OP_GRAPH: *type = CU_GRAPH_NODE_TYPE_GRAPH; break;
        case OP_GMEM: *type = nd->op->u.gm.m ? CU_GRAPH_NODE_TYPE_MEM_ALLOC : CU_GRAPH_NODE_TYPE_MEM_FREE; break;
        case OP_COND: *type = CU_GRAPH_NODE_TYPE_CONDITIONAL; break;
        case OP_EVENT_NODE:
            *type = nd->op->u.evn.wait ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : CU_GRAPH_NODE_TYPE_EVENT_RECORD;
            break;
        default: *type = CU_GRAPH_NODE_TYPE_EMPTY; break;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The node of that kind, under fc_graph_mu (the caller unlocks); NULL for another kind. */
static struct fc_gnode *node_of_kind(CUgraphNode hn, enum fc_op_kind kind)
{
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    return nd && nd->op && nd->op->kind == kind ? nd : NULL;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode hn, CUDA_KERNEL_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *nd = node_of_kind(hn, OP_KERNEL);
    CUresult r = nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (nd) {
        const struct fc_op *op = nd->op;
        const struct fc_kernel_def *d = op->u.k.fn->def;
        void **argv = realloc(nd->argv, (d->nparams + 1) * sizeof *argv);
        if (!argv) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            nd->argv = argv;
            for (unsigned i = 0; i < d->nparams; i++)
                argv[i] = op->u.k.args + d->off[i];
            argv[d->nparams] = NULL;
            memset(p, 0, sizeof *p);
            p->func = (CUfunction)op->u.k.fn;
            p->gridDimX = op->u.k.grid[0], p->gridDimY = op->u.k.grid[1], p->gridDimZ = op->u.k.grid[2];
            p->blockDimX = op->u.k.block[0], p->blockDimY = op->u.k.block[1], p->blockDimZ = op->u.k.block[2];
            p->sharedMemBytes = op->u.k.shmem;
            p->kernelParams = argv;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode hn, CUDA_MEMSET_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *nd = node_of_kind(hn, OP_MEMSET);
    if (nd) {
        const struct fc_memset *m = &nd->op->u.ms;
        *p = (CUDA_MEMSET_NODE_PARAMS){.dst = m->dst, .pitch = (size_t)m->pitch, .value = m->value,
                                       .elementSize = m->elem, .width = (size_t)m->width, .height = (size_t)m->height};
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphHostNodeGetParams(CUgraphNode hn, CUDA_HOST_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *nd = node_of_kind(hn, OP_HOSTFN);
    if (nd) {
        p->fn = nd->op->u.h.fn;
        p->userData = nd->op->u.h.data;
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* op (of kind) in place of the node's own, in its graph (he NULL) or in an instance; op is consumed. */
static CUresult replace_op(CUgraphExec he, CUgraphNode hn, enum fc_op_kind kind, struct fc_op *op)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (!he) {
        pthread_mutex_lock(&fc_graph_mu);
        struct fc_gnode *nd = node_get(hn);
        if (nd && nd->op && nd->op->kind == kind) {
            fc_op_free(nd->op);
            nd->op = op;
            op = NULL;
            r = CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&fc_graph_mu);
    } else {
        struct fc_exec *e = exec_get(he);
        if (e) {
            pthread_mutex_lock(&e->mu);
            for (size_t i = 0; i < e->n; i++) {
                if ((CUgraphNode)e->src[i] == hn && e->ops[i] && e->ops[i]->kind == kind) {
                    fc_op_free(e->ops[i]);
                    e->ops[i] = op;
                    op = NULL;
                    r = CUDA_SUCCESS;
                    break;
                }
            }
            pthread_mutex_unlock(&e->mu);
        }
    }
    fc_op_free(op);
    return r;
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op;
    CHECK_RET(kernel_node_op(p, "cuGraphKernelNodeSetParams", &op));
    return replace_op(NULL, hn, OP_KERNEL, op);
}

/* ---------------------------------------------------------------- executable graphs */

/* The graph's nodes, each after all of its dependencies (earliest added first); -1 on a cycle. */
static int run_order(const struct fc_graph *g, struct fc_gnode **order)
{
    bool *placed = calloc(g->n ? g->n : 1, sizeof *placed);
    if (!placed)
        return -1;
    size_t done = 0;
    while (done < g->n) {
        size_t before = done;
        for (size_t i = 0; i < g->n; i++) {
            if (placed[i])
                continue;
            bool ready = true;
            for (size_t d = 0; ready && d < g->nodes[i]->ndeps; d++) {
                size_t j = 0;
                while (j < g->n && g->nodes[j] != g->nodes[i]->deps[d])
                    j++;
                ready = j < g->n && placed[j];
            }
            if (ready) {
                placed[i] = true;
                order[done++] = g->nodes[i];
            }
        }
        if (done == before) {
            free(placed);
            return -1;
        }
    }
    free(placed);
    return 0;
}

static void exec_ops_free(struct fc_op **ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fc_op_free(ops[i]);
    free(ops);
}

/* Copies of a graph's ops in run order; the caller holds fc_graph_mu. */
static CUresult snapshot(const struct fc_graph *g, struct fc_op ***ops_out, struct fc_gnode ***src_out)
{
    struct fc_gnode **order = calloc(g->n ? g->n : 1, sizeof *order);
    struct fc_op **ops = calloc(g->n ? g->n : 1, sizeof *ops);
    if (!order || !ops) {
        free(order);
        free(ops);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (run_order(g, order) < 0) {
        free(order);
        free(ops);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < g->n; i++) {
        if (order[i]->op && !(ops[i] = fc_op_clone(order[i]->op))) {
            exec_ops_free(ops, i);
            free(order);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    *ops_out = ops;
    *src_out = order;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUgraph hchild)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *child = graph_get(hchild);
    struct fc_op **ops = NULL;
    struct fc_gnode **order = NULL;
    CUresult r = child ? snapshot(child, &ops, &order) : CUDA_ERROR_INVALID_VALUE;
    size_t n = child ? child->n : 0;
    pthread_mutex_unlock(&fc_graph_mu);
    free(order);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_op *op = fc_op_new(OP_GRAPH, "cuGraphAddChildGraphNode");
    if (!op) {
        exec_ops_free(ops, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.graph.ops = ops; /* the child as it is now, in an order that respects its dependencies */
    op->u.graph.n = n;
    return add_public(out, hg, deps, ndeps, op);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph hg, unsigned long long flags)
{
    CHECK_RET(fc_check_init());
    if (!out || (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                               CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_exec *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    CUresult r = g ? snapshot(g, &e->ops, &e->src) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        e->n = g->n;
        if (!(e->off = calloc(e->n ? e->n : 1, sizeof *e->off))) {
            exec_ops_free(e->ops, e->n);
            free(e->src);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&fc_graph_mu);
    if (r != CUDA_SUCCESS) {
        free(e);
        return r;
    }
    e->magic = FC_MAGIC_EXEC;
    pthread_mutex_init(&e->mu, NULL);
    atomic_fetch_add(&fc_stats.graph_execs, 1);
    *out = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec he)
{
    CHECK_RET(fc_check_init());
    struct fc_exec *e = exec_get(he);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    /* Launches already queued hold their own copies of the ops. */
    e->magic = FC_MAGIC_DEAD;
    exec_ops_free(e->ops, e->n);
    free(e->src);
    free(e->off);
    pthread_mutex_destroy(&e->mu);
    free(e);
    atomic_fetch_sub(&fc_stats.graph_execs, 1);
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec he, CUstream s)
{
    CHECK_RET(fc_check_init());
    struct fc_exec *e = exec_get(he);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_GRAPH, "cuGraphLaunch");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&e->mu);
    /* A copy per launch: parameters changed in the instance later apply to later launches only. */
    op->u.graph.ops = calloc(e->n ? e->n : 1, sizeof *op->u.graph.ops);
    CUresult r = op->u.graph.ops ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; r == CUDA_SUCCESS && i < e->n; i++) {
        if (e->ops[i] && !e->off[i] && !(op->u.graph.ops[i] = fc_op_clone(e->ops[i])))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        op->u.graph.n = i + 1;
    }
    pthread_mutex_unlock(&e->mu);
    if (r != CUDA_SUCCESS) {
        fc_op_free(op);
        return r;
    }
    return fc_submit_graph(s, op);
}

CUresult cuGraphUpload(CUgraphExec he, CUstream s)
{
    CHECK_RET(fc_check_init());
    if (!exec_get(he))
        return CUDA_ERROR_INVALID_VALUE;
    return fc_stream_usable(s) == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    if (!exec_get(he))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op;
    CHECK_RET(kernel_node_op(p, "cuGraphExecKernelNodeSetParams", &op));
    return replace_op(he, hn, OP_KERNEL, op);
}

CUresult cuGraphExecUpdate(CUgraphExec he, CUgraph hg, CUgraphExecUpdateResultInfo *info)
{
    CHECK_RET(fc_check_init());
    struct fc_exec *e = exec_get(he);
    if (!e || !info)
        return CUDA_ERROR_INVALID_VALUE;
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    struct fc_op **ops = NULL;
    struct fc_gnode **src = NULL;
    CUresult r = g ? snapshot(g, &ops, &src) : CUDA_ERROR_INVALID_VALUE;
    size_t n = g ? g->n : 0;
    pthread_mutex_unlock(&fc_graph_mu);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&e->mu);
    /* The same topology: as many nodes, of the same kinds, in the same order. */
    bool same = n == e->n;
    for (size_t i = 0; same && i < n; i++)
        same = (!ops[i] && !e->ops[i]) ||
               (ops[i] && e->ops[i] && ops[i]->kind == e->ops[i]->kind &&
                (ops[i]->kind != OP_KERNEL || ops[i]->u.k.fn == e->ops[i]->u.k.fn));
    if (same) {
        struct fc_op **old = e->ops;
        e->ops = ops;
        ops = old;
        info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    } else {
        info->result = n == e->n ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                                 : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    pthread_mutex_unlock(&e->mu);
    exec_ops_free(ops, n);
    free(src);
    return r;
}

/* ---------------------------------------------------------------- event record and wait nodes */

static CUresult add_event_node(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUevent ev,
                               bool wait)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op;
    CHECK_RET(fc_event_node_op(ev, wait, &op));
    return add_public(out, hg, deps, ndeps, op);
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUevent ev)
{
    return add_event_node(out, hg, deps, ndeps, ev, false);
}

CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUevent ev)
{
    return add_event_node(out, hg, deps, ndeps, ev, true);
}

static CUresult node_event(CUgraphNode hn, bool wait, CUevent *out)
{
    CHECK_RET(fc_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *nd = node_of_kind(hn, OP_EVENT_NODE);
    bool ok = nd && nd->op->u.evn.wait == wait;
    if (ok)
        *out = fc_event_node_event(nd->op);
    pthread_mutex_unlock(&fc_graph_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hn, CUevent *out) { return node_event(hn, false, out); }
CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hn, CUevent *out) { return node_event(hn, true, out); }

static CUresult node_set_event(CUgraphNode hn, bool wait, CUevent ev)
{
    CHECK_RET(fc_check_init());
    struct fc_gnode *nd = node_of_kind(hn, OP_EVENT_NODE);
    CUresult r = nd && nd->op->u.evn.wait == wait ? fc_event_node_set(nd->op, ev) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hn, CUevent ev) { return node_set_event(hn, false, ev); }
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hn, CUevent ev) { return node_set_event(hn, true, ev); }

static CUresult exec_set_event(CUgraphExec he, CUgraphNode hn, bool wait, CUevent ev)
{
    CHECK_RET(fc_check_init());
    struct fc_exec *e = exec_get(he);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n; i++) {
        struct fc_op *op = e->ops[i];
        if ((CUgraphNode)e->src[i] == hn && op && op->kind == OP_EVENT_NODE && op->u.evn.wait == wait) {
            r = fc_event_node_set(op, ev);
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return r;
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec he, CUgraphNode hn, CUevent ev)
{
    return exec_set_event(he, hn, false, ev);
}

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec he, CUgraphNode hn, CUevent ev)
{
    return exec_set_event(he, hn, true, ev);
}

/* ---------------------------------------------------------------- memset, host and copy node parameters */

/* A node's new op, which made built (or failed to), in its graph or, for exec, in the instance he. */
static CUresult set_node(bool exec, CUgraphExec he, CUgraphNode hn, enum fc_op_kind kind, CUresult made, struct fc_op *op)
{
    if (made != CUDA_SUCCESS)
        return made;
    if (exec && !he) {
        fc_op_free(op);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return replace_op(exec ? he : NULL, hn, kind, op);
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode hn, const CUDA_MEMSET_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = memset_node_op(p, &op);
    return set_node(false, NULL, hn, OP_MEMSET, made, op);
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    (void)ctx;
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = memset_node_op(p, &op);
    return set_node(true, he, hn, OP_MEMSET, made, op);
}

CUresult cuGraphHostNodeSetParams(CUgraphNode hn, const CUDA_HOST_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = host_node_op(p, &op);
    return set_node(false, NULL, hn, OP_HOSTFN, made, op);
}

CUresult cuGraphExecHostNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_HOST_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = host_node_op(p, &op);
    return set_node(true, he, hn, OP_HOSTFN, made, op);
}

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hn, const CUDA_MEMCPY3D *p)
{
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = memcpy_node_op(p, &op);
    return set_node(false, NULL, hn, OP_COPY, made, op);
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    (void)ctx;
    CHECK_RET(fc_check_init());
    struct fc_op *op = NULL;
    CUresult made = memcpy_node_op(p, &op);
    return set_node(true, he, hn, OP_COPY, made, op);
}

/* A copy node as the driver gives it back: its two ends, pitches and extent (no offsets: folded in). */
CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hn, CUDA_MEMCPY3D *p)
{
    CHECK_RET(fc_check_init());
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_gnode *nd = node_of_kind(hn, OP_COPY);
    if (nd) {
        const struct fc_copy *c = &nd->op->u.cp;
        memset(p, 0, sizeof *p);
        p->srcMemoryType = c->stype, p->dstMemoryType = c->dtype;
        if (c->stype == CU_MEMORYTYPE_HOST)
            p->srcHost = (const void *)(uintptr_t)c->src;
        else
            p->srcDevice = c->src;
        if (c->dtype == CU_MEMORYTYPE_HOST)
            p->dstHost = (void *)(uintptr_t)c->dst;
        else
            p->dstDevice = c->dst;
        p->srcPitch = c->spitch, p->dstPitch = c->dpitch, p->srcHeight = c->sslice, p->dstHeight = c->dslice;
        p->WidthInBytes = c->width, p->Height = c->height, p->Depth = c->depth;
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- nodes turned off, removed; edges removed */

/* Kernel, copy and memset nodes can be turned off in an instance, as in CUDA. */
static CUresult exec_node_enabled(CUgraphExec he, CUgraphNode hn, const unsigned *set, unsigned *get)
{
    CHECK_RET(fc_check_init());
    struct fc_exec *e = exec_get(he);
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n; i++) {
        const struct fc_op *op = e->ops[i];
        if ((CUgraphNode)e->src[i] != hn)
            continue;
        if (op && (op->kind == OP_KERNEL || op->kind == OP_COPY || op->kind == OP_MEMSET)) {
            if (set)
                e->off[i] = !*set;
            if (get)
                *get = !e->off[i];
            r = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&e->mu);
    return r;
}

CUresult cuGraphNodeSetEnabled(CUgraphExec he, CUgraphNode hn, unsigned int on)
{
    return exec_node_enabled(he, hn, &on, NULL);
}

CUresult cuGraphNodeGetEnabled(CUgraphExec he, CUgraphNode hn, unsigned int *on)
{
    return on ? exec_node_enabled(he, hn, NULL, on) : CUDA_ERROR_INVALID_VALUE;
}

static void drop_dep(struct fc_gnode *n, const struct fc_gnode *d)
{
    for (size_t j = 0; j < n->ndeps; j++) {
        if (n->deps[j] == d) {
            memmove(&n->deps[j], &n->deps[j + 1], (n->ndeps - j - 1) * sizeof *n->deps);
            n->ndeps--;
            return;
        }
    }
}

CUresult cuGraphDestroyNode(CUgraphNode hn)
{
    CHECK_RET(fc_check_init());
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    if (!nd) {
        pthread_mutex_unlock(&fc_graph_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fc_graph *g = nd->g;
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i] == nd) {
            memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
            g->n--;
            i--;
        } else {
            drop_dep(g->nodes[i], nd);
        }
    }
    fc_op_free(nd->op);
    free(nd->deps);
    free(nd->argv);
    nd->magic = FC_MAGIC_DEAD;
    free(nd);
    pthread_mutex_unlock(&fc_graph_mu);
    return CUDA_SUCCESS;
}

CUresult cuGraphRemoveDependencies(CUgraph hg, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edges, size_t n)
{
    (void)edges;
    CHECK_RET(fc_check_init());
    if (n && (!from || !to))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    CUresult r = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        struct fc_gnode *a = node_get(from[i]), *b = node_get(to[i]);
        size_t before = b ? b->ndeps : 0;
        if (!a || !b || a->g != g || b->g != g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (drop_dep(b, a), b->ndeps == before)
            r = CUDA_ERROR_INVALID_VALUE; /* no such edge */
    }
    pthread_mutex_unlock(&fc_graph_mu);
    return r;
}

struct fc_graph *fc_graph_of(CUgraph h)
{
    return graph_get(h);
}

bool fc_node_of(CUgraphNode h, const struct fc_graph *g)
{
    struct fc_gnode *nd = node_get(h);
    return nd && nd->g == g;
}

/* ---------------------------------------------------------------- clones */

CUresult cuGraphClone(CUgraph *out, CUgraph horig)
{
    CHECK_RET(fc_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(horig), *c = g ? fc_graph_new() : NULL;
    CUresult r = !g ? CUDA_ERROR_INVALID_VALUE : !c ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    /* Nodes are kept in the order they were added, so each one's dependencies are copied before it. */
    for (size_t i = 0; r == CUDA_SUCCESS && i < g->n; i++) {
        const struct fc_gnode *o = g->nodes[i];
        struct fc_gnode **deps = calloc(o->ndeps ? o->ndeps : 1, sizeof *deps);
        struct fc_op *op = o->op ? fc_op_clone(o->op) : NULL;
        if (!deps || (o->op && !op)) {
            free(deps);
            fc_op_free(op);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        for (size_t d = 0; d < o->ndeps; d++)
            for (size_t k = 0; k < c->n; k++)
                if (c->nodes[k]->orig == o->deps[d])
                    deps[d] = c->nodes[k];
        struct fc_gnode *n;
        r = fc_graph_add(c, deps, o->ndeps, op, &n);
        free(deps);
        if (r == CUDA_SUCCESS)
            n->orig = o;
    }
    if (r != CUDA_SUCCESS && c)
        fc_graph_free(c);
    pthread_mutex_unlock(&fc_graph_mu);
    if (r == CUDA_SUCCESS)
        *out = (CUgraph)c;
    return r;
}

CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode horig, CUgraph hclone)
{
    CHECK_RET(fc_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *c = graph_get(hclone);
    struct fc_gnode *o = node_get(horig), *found = NULL;
    for (size_t i = 0; c && o && i < c->n && !found; i++)
        if (c->nodes[i]->orig == o)
            found = c->nodes[i];
    pthread_mutex_unlock(&fc_graph_mu);
    if (!found)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUgraphNode)found;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- graph memory */

struct fc_gmem {
    _Atomic int refs; /* the allocation node's op and its copies (instances, clones, launches) */
    uint64_t ptr, size;
    struct fc_gmem *next;
};
static pthread_mutex_t gmem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_gmem *gmem_all;
static uint64_t gmem_used, gmem_high; /* bytes of graph memory, under gmem_mu (reserved = used here) */

struct fc_op *fc_gmem_op(uint64_t size, CUresult *r)
{
    struct fc_gmem *m = calloc(1, sizeof *m);
    struct fc_op *op = fc_op_new(OP_GMEM, "graph memory allocation node");
    *r = m && op ? fc_mem_alloc(size, FC_GMEM, NULL, &m->ptr) : CUDA_ERROR_OUT_OF_MEMORY;
    if (*r != CUDA_SUCCESS) {
        free(m);
        free(op);
        return NULL;
    }
    atomic_store(&m->refs, 1);
    op->u.gm.m = m;
    op->u.gm.ptr = m->ptr;
    op->u.gm.size = size;
    m->size = size;
    pthread_mutex_lock(&gmem_mu);
    m->next = gmem_all;
    gmem_all = m;
    gmem_used += size;
    if (gmem_used > gmem_high)
        gmem_high = gmem_used;
    pthread_mutex_unlock(&gmem_mu);
    return op;
}

bool fc_gmem_is(uint64_t ptr)
{
    pthread_mutex_lock(&gmem_mu);
    struct fc_gmem *m = gmem_all;
    while (m && m->ptr != ptr)
        m = m->next;
    pthread_mutex_unlock(&gmem_mu);
    return m != NULL;
}

void fc_gmem_ref(struct fc_gmem *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void fc_gmem_unref(struct fc_gmem *m)
{
    if (atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    pthread_mutex_lock(&gmem_mu);
    for (struct fc_gmem **p = &gmem_all; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            break;
        }
    }
    gmem_used -= m->size;
    pthread_mutex_unlock(&gmem_mu);
    fc_mem_release(m->ptr);
    free(m);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    CHECK_RET(fc_check_init());
    if (!p || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_gpu_ok(p->poolProps.location.id))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    struct fc_op *op = fc_gmem_op(p->bytesize, &r);
    if (!op)
        return r;
    uint64_t ptr = op->u.gm.ptr;
    r = add_public(out, g, deps, ndeps, op);
    if (r == CUDA_SUCCESS)
        p->dptr = ptr;
    return r;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr)
{
    CHECK_RET(fc_check_init());
    if (!fc_gmem_is(dptr))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_GMEM, "graph memory free node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.gm.ptr = dptr;
    return add_public(out, g, deps, ndeps, op);
}

static CUresult gmem_node(CUgraphNode hn, bool alloc, struct fc_op *copy)
{
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_gnode *nd = node_get(hn);
    bool ok = nd && nd->op && nd->op->kind == OP_GMEM && (nd->op->u.gm.m != NULL) == alloc;
    if (ok)
        *copy = *nd->op;
    pthread_mutex_unlock(&fc_graph_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hn, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct fc_op op;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(gmem_node(hn, true, &op));
    memset(p, 0, sizeof *p);
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->bytesize = op.u.gm.size;
    p->dptr = op.u.gm.ptr;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hn, CUdeviceptr *dptr)
{
    struct fc_op op;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CHECK_RET(gmem_node(hn, false, &op));
    *dptr = op.u.gm.ptr;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    CHECK_RET(fc_check_init());
    return fc_gpu_ok(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; /* nothing is kept beyond what graphs hold */
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    CHECK_RET(fc_check_init());
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmem_mu);
    bool high = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH;
    *(cuuint64_t *)value = high ? gmem_high : gmem_used;
    pthread_mutex_unlock(&gmem_mu);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    CHECK_RET(fc_check_init());
    if (!fc_gpu_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value || *(const cuuint64_t *)value != 0 ||
        (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmem_mu);
    gmem_high = gmem_used;
    pthread_mutex_unlock(&gmem_mu);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- conditional nodes */

struct fc_cond {
    _Atomic unsigned value;
    unsigned dflt;
    bool assign; /* CU_GRAPH_COND_ASSIGN_DEFAULT: the default at every launch */
    const struct fc_graph *g;
    struct fc_cond *next;
};
static pthread_mutex_t cond_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_cond *cond_all;

static struct fc_cond *cond_find(uint64_t h)
{
    struct fc_cond *c = cond_all;
    while (c && (uint64_t)(uintptr_t)c != h)
        c = c->next;
    return c;
}

/* A graph's handles go with it. */
static void conds_free(const struct fc_graph *g)
{
    pthread_mutex_lock(&cond_mu);
    for (struct fc_cond **p = &cond_all; *p;) {
        struct fc_cond *c = *p;
        if (c->g == g) {
            *p = c->next;
            free(c);
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&cond_mu);
}

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph hg, CUcontext ctx,
                                        unsigned int dflt, unsigned int flags)
{
    CHECK_RET(fc_check_init());
    (void)ctx;
    if (!out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_graph_mu);
    struct fc_graph *g = graph_get(hg);
    pthread_mutex_unlock(&fc_graph_mu);
    struct fc_cond *c = g ? calloc(1, sizeof *c) : NULL;
    if (!c)
        return g ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    atomic_store(&c->value, dflt);
    c->dflt = dflt;
    c->assign = flags & CU_GRAPH_COND_ASSIGN_DEFAULT;
    c->g = g;
    pthread_mutex_lock(&cond_mu);
    c->next = cond_all;
    cond_all = c;
    pthread_mutex_unlock(&cond_mu);
    *out = (CUgraphConditionalHandle)(uintptr_t)c;
    return CUDA_SUCCESS;
}

bool fc_cond_set(uint64_t h, unsigned value)
{
    pthread_mutex_lock(&cond_mu);
    struct fc_cond *c = cond_find(h);
    if (c)
        atomic_store(&c->value, value);
    pthread_mutex_unlock(&cond_mu);
    return c != NULL;
}

/* Only conditional nodes: the server makes every other kind with its own call. */
CUresult cuGraphAddNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                        size_t ndeps, CUgraphNodeParams *p)
{
    CHECK_RET(fc_check_init());
    if (!p || edges)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUDA_CONDITIONAL_NODE_PARAMS *cp = &p->conditional;
    unsigned type = (unsigned)cp->type;
    if (type > CU_GRAPH_COND_TYPE_SWITCH || cp->size == 0 || (type == CU_GRAPH_COND_TYPE_WHILE && cp->size != 1) ||
        (type == CU_GRAPH_COND_TYPE_IF && cp->size > 2))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cond_mu);
    struct fc_cond *h = cond_find(cp->handle);
    bool ok = h && h->g == graph_get(hg);
    pthread_mutex_unlock(&cond_mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = fc_op_new(OP_COND, "conditional node");
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.cond.h = h;
    op->u.cond.type = type;
    op->u.cond.size = cp->size;
    op->u.cond.bodies = calloc(cp->size, sizeof *op->u.cond.bodies);
    op->u.cond.out = calloc(cp->size, sizeof *op->u.cond.out);
    for (unsigned i = 0; op->u.cond.bodies && op->u.cond.out && i < cp->size; i++) {
        if (!(op->u.cond.bodies[i] = fc_graph_new())) {
            fc_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        op->u.cond.out[i] = (CUgraph)op->u.cond.bodies[i];
    }
    if (!op->u.cond.bodies || !op->u.cond.out) {
        fc_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUgraph *bodies = op->u.cond.out;
    CUresult r = add_public(out, hg, deps, ndeps, op);
    if (r == CUDA_SUCCESS)
        cp->phGraph_out = bodies;
    return r;
}

void fc_cond_op_free(struct fc_op *op)
{
    for (unsigned i = 0; op->u.cond.bodies && i < op->u.cond.size; i++) {
        if (op->u.cond.bodies[i]) {
            conds_free(op->u.cond.bodies[i]);
            fc_graph_free(op->u.cond.bodies[i]);
        }
    }
    for (unsigned i = 0; op->u.cond.snap && i < op->u.cond.size; i++)
        fc_op_free(op->u.cond.snap[i]);
    free(op->u.cond.bodies);
    free(op->u.cond.snap);
    free(op->u.cond.out);
}

bool fc_cond_op_clone(struct fc_op *c, const struct fc_op *op)
{
    c->u.cond.bodies = NULL;
    c->u.cond.out = NULL;
    c->u.cond.snap = calloc(op->u.cond.size, sizeof *c->u.cond.snap);
    for (unsigned i = 0; c->u.cond.snap && i < op->u.cond.size; i++) {
        struct fc_op *s = NULL;
        if (op->u.cond.bodies) { /* the graph's node: its bodies as they are now */
            struct fc_op **ops = NULL;
            struct fc_gnode **order = NULL;
            const struct fc_graph *b = op->u.cond.bodies[i];
            if (snapshot(b, &ops, &order) == CUDA_SUCCESS && (s = fc_op_new(OP_GRAPH, "conditional body"))) {
                s->u.graph.ops = ops;
                s->u.graph.n = b->n;
            } else if (ops) {
                exec_ops_free(ops, b->n);
            }
            free(order);
        } else {
            s = fc_op_clone(op->u.cond.snap[i]);
        }
        if (!s) {
            c->u.cond.size = i;
            fc_cond_op_free(c);
            return false;
        }
        c->u.cond.snap[i] = s;
    }
    return c->u.cond.snap != NULL;
}

void fc_cond_launch_defaults(const struct fc_op *graph_op)
{
    for (size_t i = 0; i < graph_op->u.graph.n; i++) {
        const struct fc_op *o = graph_op->u.graph.ops[i];
        if (o && o->kind == OP_COND && o->u.cond.h->assign)
            atomic_store(&o->u.cond.h->value, o->u.cond.h->dflt);
    }
}

/* Runs in an instance (snap): IF the first body when the value is not 0 (else the second, if any),
 * WHILE the body as long as it is not 0, SWITCH the body the value names. */
void fc_cond_op_run(struct fc_op *op)
{
    if (!op->u.cond.snap)
        return; /* a graph's own node, never run as such */
    struct fc_cond *h = op->u.cond.h;
    unsigned v = atomic_load(&h->value);
    switch (op->u.cond.type) {
    case CU_GRAPH_COND_TYPE_IF:
        if (v)
            fc_op_run(op->u.cond.snap[0]);
        else if (op->u.cond.size == 2)
            fc_op_run(op->u.cond.snap[1]);
        break;
    case CU_GRAPH_COND_TYPE_WHILE:
        for (unsigned long k = 0; atomic_load(&h->value) && k < 10000000ul; k++)
            fc_op_run(op->u.cond.snap[0]);
        break;
    default: /* SWITCH */
        if (v < op->u.cond.size)
            fc_op_run(op->u.cond.snap[v]);
        break;
    }
}
