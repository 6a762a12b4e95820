/* Stream capture, the driver's own: the client's work is submitted to its real stream, which the server
 * put in capture mode (relaxed, whatever the client asked). A capture's graph is handed to the client as a
 * handle once it asks; a capture the client leaves running ends with it. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/graph.h"
#include "server/handlers.h"

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
    c->graphs.ever_captured = true;
    return CUDA_SUCCESS;
}

CUresult op_capture_end(struct srv_client *c, struct srv_stream *stream, uint8_t *out, uint32_t *out_len)
{
    CUgraph graph = NULL;
    uint64_t id = graph_capture_id(stream->cu);
    CUresult r = cuStreamEndCapture(stream->cu, &graph);
    stream->capturing = false;
    graph_capture_allocs_end(c, id, r == CUDA_SUCCESS);
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

/* ---- capture into a graph of the client's ---- */
CUresult op_capture_begin_to_graph(struct srv_client *c, const struct cumux_capture_begin_to_graph *m,
                                   struct srv_stream *stream, struct srv_graph *graph, const uint8_t *payload,
                                   uint32_t payload_len)
{
    if (stream->kind == STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (m->mode > CU_STREAM_CAPTURE_MODE_RELAXED || graph->capture || stream->capturing || m->ndeps > GRAPH_MAX_DEPS ||
        ((uint64_t)m->ndeps * 4 + 7) / 8 * 8 > payload_len)
        return CUDA_ERROR_INVALID_VALUE;
    static _Thread_local CUgraphNode deps[GRAPH_MAX_DEPS];
    CHECK(graph_node_list(c, (const uint32_t *)(const void *)payload, m->ndeps, graph->handle, deps));
    /* Relaxed in the driver whatever the client asked, as every capture (op_capture_begin). */
    CHECK(cuStreamBeginCaptureToGraph(stream->cu, graph->g, deps, NULL, m->ndeps, CU_STREAM_CAPTURE_MODE_RELAXED));
    stream->capturing = true;
    stream->capture_graph = graph;
    graph->capture = graph->into = true; /* not destroyed while the capture adds to it */
    c->graphs.ever_captured = true;
    return CUDA_SUCCESS;
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
        uint32_t h = graph_node_handle(c, rep.graph, deps[i]);
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
    static _Thread_local CUgraphNode nodes[GRAPH_MAX_DEPS];
    if (!stream->capture_graph || m->count > GRAPH_MAX_DEPS || payload_len < (uint64_t)m->count * sizeof(uint32_t) ||
        (m->flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && m->flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES))
        return CUDA_ERROR_INVALID_VALUE;
    CHECK(graph_node_list(c, (const uint32_t *)(const void *)payload, m->count, stream->capture_graph->handle, nodes));
    return cuStreamUpdateCaptureDependencies(stream->cu, nodes, NULL, m->count, m->flags);
}

void srv_capture_abandon(struct srv_client *c, struct srv_stream *s)
{
    if (!s->capturing)
        return;
    use_gpu(c, s->ctx->gpu);
    CUgraph g = NULL;
    struct srv_graph *into = s->capture_graph && s->capture_graph->into ? s->capture_graph : NULL;
    graph_capture_allocs_end(c, graph_capture_id(s->cu), false); /* before the graph, which holds their addresses, goes */
    if (cuStreamEndCapture(s->cu, &g) == CUDA_SUCCESS && g && !into)
        cuGraphDestroy(g);
    s->capturing = false;
    if (into)
        into->capture = into->into = false; /* the client's graph: it stays the client's */
    else if (s->capture_graph)
        graph_free(c, s->capture_graph); /* its graph was the capture's: destroyed just above */
    s->capture_graph = NULL;
}

bool srv_capture_adds_to_graph(const struct srv_stream *s)
{
    return s->capture_graph && s->capture_graph->into;
}

/* A client's end: captures left running end first, their graphs destroyed; a synchronize of a capturing
 * stream fails at once, without waiting for the work queued before the capture began. */
void srv_captures_release(struct srv_client *c)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        if (s)
            srv_capture_abandon(c, s);
    }
}
