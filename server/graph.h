/* CUDA graphs in the server, in three files: graph.c (graphs, instances, graph memory), graph_node.c
 * (nodes), capture.c (stream capture); each uses only those before it. */
#ifndef CUMUX_SERVER_GRAPH_H
#define CUMUX_SERVER_GRAPH_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/server.h"

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

#define GRAPH_MAX_DEPS 1024 /* dependencies of a node a message may name */

/* graph.c */
/* A handle for obj (into *handle, when the object keeps its own), which is the reply; obj freed if none. */
CUresult graph_new_handle(struct srv_client *c, enum srv_obj_type t, void *obj, uint32_t *handle, uint8_t *out,
                          uint32_t *out_len);
/* Room for one more element in *v (n used of *cap, elements of size bytes); false when memory runs out. */
bool graph_room_for_one(void **v, uint32_t n, uint32_t *cap, size_t size);
/* A driver graph the client now owns, its handle the reply. */
CUresult graph_new(struct srv_client *c, CUgraph g, uint8_t *out, uint32_t *out_len);
/* The graph, its nodes and its conditional bodies gone (a graph with memory parked). */
void graph_free(struct srv_client *c, struct srv_graph *g);
/* [ptr, ptr + size) joins the client's graph memory. */
CUresult graph_mem_add(struct srv_client *c, uint64_t ptr, uint64_t size, int gpu);
/* The id of the capture the stream takes part in, 0 if none. */
uint64_t graph_capture_id(CUstream s);
/* A capture ended: its allocations are its graph's now (ok), or gone with it. */
void graph_capture_allocs_end(struct srv_client *c, uint64_t capture, bool ok);

/* graph_node.c */
/* The handles of a list, as driver nodes of graph `graph`. */
CUresult graph_node_list(struct srv_client *c, const uint32_t *h, uint32_t n, uint32_t graph, CUgraphNode *out);
/* The client's handle of a node just added to graph (0: out of memory). */
uint32_t graph_node_wrap(struct srv_client *c, uint32_t graph, CUgraphNode node);
/* The handle of a driver node of graph `graph`, made now if the client has not seen it (captured). */
uint32_t graph_node_handle(struct srv_client *c, uint32_t graph, CUgraphNode n);

#endif
