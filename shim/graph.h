/* The graph objects the program holds (graph.c), shared with graph_resume.c, which makes graph instances
 * again after the GPU worker failed for another program's fault. */
#ifndef CUMUX_SHIM_GRAPH_H
#define CUMUX_SHIM_GRAPH_H

#include "shim/client.h"

#define SHIM_MAGIC_GRAPH 0x47524131u
#define SHIM_MAGIC_GRAPH_EXEC 0x47455831u
#define SHIM_MAGIC_GRAPH_NODE 0x474e4431u

/* A handle 0 is no server object's: a graph, instance or node made by a worker that failed and not made
 * again has it, so that the new worker answers every call naming it CUDA_ERROR_INVALID_HANDLE. */
struct CUgraph_st {
    uint32_t magic;
    uint32_t handle;
    bool body; /* a conditional node's body: its node's, not to be destroyed */
};

/* What a graph instance was made from, read back at its instantiation while the server can resume
 * (graph_resume.c); one allocation. */
struct shim_graph_recipe;

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
 * does not have them); returns how many graphs were live. */
unsigned shim_graphs_forget(void);

/* graph_resume.c, called by resume.c: every graph instance with a recipe made again (its handle the new
 * worker's); the others get handle 0. */
CUresult shim_graph_execs_rebind(unsigned *made, unsigned *lost, unsigned *graphs_lost);

#endif
