/* A client's graphs (graph.c): graph memory, and what is parked until the client goes. The worker's alone. */
#ifndef CUMUX_SERVER_CLIENT_GRAPHS_H
#define CUMUX_SERVER_CLIENT_GRAPHS_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

struct srv_event;

struct srv_cap_alloc {
    uint64_t capture, ptr; /* the capture's id (cuStreamGetCaptureInfo), the allocation's address */
};

struct srv_client_graphs {
    bool ever_captured;
    /* Graph memory: the address of a graph's allocation is fixed while the graph lives, and the client
     * may name it; so once the client has made one, none of its graphs is destroyed before it goes (they
     * are parked), and the allocations' starts are kept to free the live ones then. */
    bool graph_mem;
    CUgraph *parked_graphs;
    uint32_t nparked_graphs, capparked_graphs;
    uint64_t *graph_allocs;
    uint32_t ngraph_allocs, capgraph_allocs;
    struct srv_cap_alloc *cap_allocs; /* graph allocations of running captures: not the client's if one fails */
    uint32_t ncap_allocs, capcap_allocs;
    uint64_t *graph_live; /* allocated by a launch, not freed since */
    uint32_t ngraph_live, capgraph_live;
    struct srv_event *parked_events; /* destroyed by the client, kept for its graphs (srv_event.in_graph) */
    bool graphs_released;
};

#endif
