/* What the server's command handlers share (dispatch.c, graph.c): handles, the legacy-stream rule,
 * address checks, replies. */
#ifndef CUMUX_SERVER_DISPATCH_H
#define CUMUX_SERVER_DISPATCH_H

#include "server/server.h"

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS)                                                                        \
            return r_;                                                                                 \
    } while (0)

CUresult reply_u64(uint8_t *out, uint32_t *out_len, uint64_t v);
uint32_t handle_new(struct srv_client *c, enum srv_obj_type type, void *obj);
void *handle_get(struct srv_client *c, uint32_t h, enum srv_obj_type type);
void handle_drop(struct srv_client *c, uint32_t h);
void use_gpu(struct srv_client *c, int gpu);
/* Around every operation on a client stream: the legacy-default-stream rule. */
CUresult before_op(struct srv_stream *s);
void after_op(struct srv_stream *s);
/* A stream handle of this client, its context made current; NULL when it is not one. */
struct srv_stream *stream_get(struct srv_client *c, uint32_t h);
bool dev_ok(struct srv_client *c, uint64_t p, uint64_t n);
bool host_ok(struct srv_client *c, uint64_t p, uint64_t n);
uint64_t span_2d(uint64_t pitch, uint64_t width, uint64_t height);

/* Host functions: the job a trampoline runs. */
struct hostfn_job {
    struct srv_client *c;
    uint64_t id;
    bool persistent; /* in a graph: run at every launch, freed with the client */
    struct hostfn_job *next;
};
void CUDA_CB hostfn_trampoline(void *arg);

/* graph.c */
bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j);
CUresult srv_graph_op(struct srv_client *c, uint16_t op, const void *body, const uint8_t *payload,
                      uint32_t payload_len, uint8_t *out, uint32_t *out_len);
void srv_graph_release_all(struct srv_client *c);

#endif
