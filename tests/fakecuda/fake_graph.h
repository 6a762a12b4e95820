/* fakecuda graphs, as stream capture uses them (fake_graph.c). */
#ifndef CUMUX_FAKECUDA_GRAPH_H
#define CUMUX_FAKECUDA_GRAPH_H

#include "fake.h"

struct fc_graph;
struct fc_graph *fc_graph_new(void); /* counted as a live graph */
void fc_graph_free(struct fc_graph *g);
/* A caller's graph, or NULL; whether a caller's node is one of g's (fc_graph_mu held by the caller). */
struct fc_graph *fc_graph_of(CUgraph h);
bool fc_node_of(CUgraphNode h, const struct fc_graph *g);

#endif
