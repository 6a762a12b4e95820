/* What the server's command handlers share (dispatch.c, context.c, memory.c, copy.c, launch.c, module.c,
 * graph.c): handles, the legacy-stream rule, address checks, replies, and the handlers themselves. */
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
/* The device bytes a memset (or memset node) touches from m->dst; false when its shape is invalid or
 * overflows. width 0 or height 0 is a valid empty memset (span 0). */
bool memset_span(const struct cumux_memset *m, uint64_t *span);

/* Host functions: the job a trampoline runs. */
struct hostfn_job {
    struct srv_client *c;
    uint64_t id;
    bool persistent; /* in a graph: run at every launch, freed with the client */
    struct hostfn_job *next;
};
void CUDA_CB hostfn_trampoline(void *arg);

/* The command handlers (op_*), one file per concern: their prototypes and the routing from op to handler
 * are generated from common/protocol.spec. What the handler files share besides: */
#include "server/generated/routes.h"

/* context.c */
void ctx_free(struct srv_client *c, struct srv_ctx *x);

/* memory.c: device memory, pools, pinned host memory */
CUresult mem_stream(struct srv_client *c, int gpu, CUstream *out);
CUresult default_pool(struct srv_client *c, int gpu, struct srv_pool **out);
void pool_free(struct srv_client *c, struct srv_pool *p);
int recv_client_fd(struct srv_client *c, uint64_t min_size);
void host_release(struct srv_client *c, uint64_t base);

/* module.c */
void module_free(struct srv_client *c, uint32_t h, struct srv_module *mod);

/* dispatch.c */
CUresult take_pending(struct srv_client *c, CUresult r);
/* graph.c */
bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j);
void srv_graph_release_all(struct srv_client *c);

#endif
