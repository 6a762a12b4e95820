/* The graph objects the program holds (graph.c), shared with graph_node.c (nodes) and graph_resume.c,
 * which makes graph instances again after the GPU worker failed for another program's fault. */
#ifndef CUMUX_SHIM_GRAPH_H
#define CUMUX_SHIM_GRAPH_H

#include "shim/client.h"


/* A handle 0 is no server object's: a graph, instance or node made by a worker that failed and not made
 * again has it, so that the new worker answers every call naming it CUDA_ERROR_INVALID_HANDLE. */
/* What a graph was, read back at an instantiation while the server can resume (graph_resume.c): its
 * nodes (kind, parameters, and the program's node object), its edges as pairs of node indices, and the
 * kernels' argument bytes; one allocation of `bytes`, without pointers into itself (copied with memcpy). */
struct recipe_kernel {
    CUfunction f;
    unsigned grid[3], block[3], shared;
    size_t args_at; /* offset of its argument bytes in the recipe's args */
};

struct recipe_node {
    CUgraphNode obj; /* the program's node object, taken over when its graph is made again */
    CUgraphNodeType type;
    union {
        struct recipe_kernel kernel;
        CUDA_MEMSET_NODE_PARAMS memset;
        CUDA_MEMCPY3D memcpy;
        CUDA_HOST_NODE_PARAMS host;
        CUevent event;
    } p;
};

struct shim_graph_recipe {
    size_t bytes, nodes, edges, args_len;
    /* then struct recipe_node[nodes], uint32_t[2 * edges], uint8_t[args_len] */
};

static inline struct recipe_node *recipe_nodes(const struct shim_graph_recipe *r)
{
    return (struct recipe_node *)(uintptr_t)(r + 1);
}
static inline uint32_t *recipe_edges(const struct shim_graph_recipe *r)
{
    return (uint32_t *)(recipe_nodes(r) + r->nodes);
}
static inline uint8_t *recipe_args(const struct shim_graph_recipe *r)
{
    return (uint8_t *)(recipe_edges(r) + 2 * r->edges);
}

struct CUgraph_st {
    uint32_t magic;
    uint32_t handle;
    bool body; /* a conditional node's body: its node's, not to be destroyed */
    /* As it was at its last instantiation while the server can resume; NULL once changed since: made
     * again from it after a fault (graph_resume.c). */
    struct shim_graph_recipe *recipe;
};

struct CUgraphExec_st {
    uint32_t magic;
    uint32_t handle;
    unsigned long long flags;            /* as instantiated, for cuGraphExecGetFlags */
    unsigned long long instantiate_flags; /* as given, to instantiate it again */
    struct shim_graph_recipe *recipe;    /* NULL: it cannot be made again (why_not says why) */
    const char *why_not;
};

struct CUgraphNode_st {
    uint32_t magic;
    uint32_t handle;
    struct CUgraph_st *graph;
    uint8_t *args; /* cuGraphKernelNodeGetParams's arguments, which the node owns */
    void **argv;
};

/* Set by graph_resume.c: reads g back into a recipe (NULL, with *why_not, when it cannot). Called at each
 * instantiation while the server can resume (shim.resume_token). */
extern struct shim_graph_recipe *(*shim_graph_record)(CUgraph g, const char **why_not);
/* Every graph instance made while the server can resume, dead ones marked (their recipe freed). */
extern struct shim_list shim_graph_execs;
/* After the worker failed: every graph and node object the program holds gets handle 0 (the new worker
 * does not have them). Returns how many graphs were live; *kept (malloc'd, *nkept of them): the live ones
 * with a recipe, to be made again. */
unsigned shim_graphs_forget(CUgraph **kept, size_t *nkept);
/* A graph object made again takes the new worker's handle; and a node object of it the handle of the node
 * made in its place (`made`, a fresh object of the shim's, then dropped). */
void shim_graph_adopt(CUgraph g, uint32_t handle);
void shim_graph_node_adopt(CUgraphNode obj, CUgraphNode made);
/* Any change to a graph (g) or an instance (x): its recipe no longer says what it is. */
void shim_graph_changed(CUgraphExec x, CUgraph g);

static inline bool graph_ok(CUgraph g) { return g && g->magic == SHIM_MAGIC_GRAPH; }
static inline bool exec_ok(CUgraphExec e) { return e && e->magic == SHIM_MAGIC_GRAPH_EXEC; }
static inline bool node_ok(CUgraphNode n) { return n && n->magic == SHIM_MAGIC_GRAPH_NODE; }
/* The object of a server node handle of graph g, the same each time (NULL: out of memory). */
struct CUgraphNode_st *shim_graph_node_object(uint32_t handle, struct CUgraph_st *g);
/* The object of a server graph handle, the same each time. */
CUresult shim_graph_new(uint32_t handle, CUgraph *out);
/* An instance that went with a failed worker and was not made again: CUDA_ERROR_INVALID_HANDLE, said once. */
CUresult shim_graph_exec_gone(void);
/* A change through a node: to the instance when one is named, else to the node's graph. */
static inline void changed(CUgraphExec x, CUgraphNode node)
{
    shim_graph_changed(x, x ? NULL : node->graph);
}


/* graph_resume.c, called by resume.c: every graph and graph instance with a recipe made again (the
 * program's objects, nodes too, take the new worker's handles); the others get handle 0. */
CUresult shim_graph_execs_rebind(unsigned *made, unsigned *lost, unsigned *graphs_made, unsigned *graphs_lost);

#endif
