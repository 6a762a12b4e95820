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

/* The command handlers, one file per concern; dispatch.c calls them (op_*) by command. */
/* context.c: contexts, streams, events */
CUresult op_ctx_create(struct srv_client *c, const struct cumux_ctx_create *m, uint8_t *out, uint32_t *out_len);
void ctx_free(struct srv_client *c, struct srv_ctx *x);
CUresult op_ctx_destroy(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_ctx_sync(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_ctx_limit(struct srv_client *c, const struct cumux_ctx_limit *m, uint8_t *out, uint32_t *out_len);
CUresult op_stream_create(struct srv_client *c, const struct cumux_stream_create *m, uint8_t *out, uint32_t *out_len);
CUresult op_stream_destroy(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_stream_sync(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_stream_query(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_stream_wait_event(struct srv_client *c, const struct cumux_stream_wait_event *m);
CUresult op_event_create(struct srv_client *c, const struct cumux_event_create *m, uint8_t *out, uint32_t *out_len);
CUresult op_event_destroy(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_event_record(struct srv_client *c, const struct cumux_event_record *m);
CUresult op_event_query(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_event_sync(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_event_elapsed(struct srv_client *c, const struct cumux_event_elapsed *m, uint8_t *out, uint32_t *out_len);

/* memory.c: device memory, pools, pinned host memory */
CUresult mem_stream(struct srv_client *c, int gpu, CUstream *out);
CUresult default_pool(struct srv_client *c, int gpu, struct srv_pool **out);
void pool_free(struct srv_client *c, struct srv_pool *p);
CUresult op_pool(struct srv_client *c, uint16_t op, const struct cumux_pool_op *m, uint8_t *out, uint32_t *out_len);
CUresult op_mem_alloc_async(struct srv_client *c, const struct cumux_mem_alloc_async *m, uint8_t *out,
                            uint32_t *out_len);
CUresult op_mem_free_async(struct srv_client *c, const struct cumux_mem_free_async *m);
CUresult op_mem_alloc(struct srv_client *c, const struct cumux_mem_alloc *m, uint8_t *out, uint32_t *out_len);
CUresult op_mem_free(struct srv_client *c, const struct cumux_mem_free *m);
CUresult op_mem_info(struct srv_client *c, const struct cumux_handle_arg *m, uint8_t *out, uint32_t *out_len);
int recv_client_fd(struct srv_client *c, uint64_t min_size);
CUresult op_host_alloc(struct srv_client *c, const struct cumux_host_alloc *m, uint8_t *out, uint32_t *out_len);
void host_release(struct srv_client *c, uint64_t base);
CUresult op_host_free(struct srv_client *c, const struct cumux_mem_free *m);

/* copy.c: copies and memsets */
CUresult op_copy(struct srv_client *c, const struct cumux_copy *m, bool sync);
CUresult op_copy_2d(struct srv_client *c, const struct cumux_copy_2d *m, bool sync);
CUresult op_copy_htod_staged(struct srv_client *c, const struct cumux_copy_staged *m);
CUresult op_copy_dtoh_staged(struct srv_client *c, const struct cumux_copy_staged *m);
CUresult op_memset(struct srv_client *c, const struct cumux_memset *m);

/* launch.c: launches and host functions */
CUresult op_host_func(struct srv_client *c, const struct cumux_host_func *m);
CUresult op_launch(struct srv_client *c, const struct cumux_launch *m, const uint8_t *payload, uint32_t payload_len);

/* module.c: modules, functions, occupancy */
void module_free(struct srv_client *c, uint32_t h, struct srv_module *mod);
CUresult op_module_load(struct srv_client *c, const struct cumux_module_load *m, uint8_t *out, uint32_t *out_len);
CUresult op_module_unload(struct srv_client *c, const struct cumux_handle_arg *m);
CUresult op_module_get_function(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                                uint32_t *out_len);
CUresult op_module_get_global(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                              uint32_t *out_len);
CUresult op_module_function_names(struct srv_client *c, const struct cumux_handle_arg *a, uint8_t *out,
                                  uint32_t *out_len);
CUresult op_arch_data(struct srv_client *c, const struct cumux_handle_arg *a, uint8_t *out, uint32_t *out_len);
CUresult op_library_get_module(struct srv_client *c, const struct cumux_module_symbol *m, uint8_t *out,
                               uint32_t *out_len);
CUresult op_func_occupancy(struct srv_client *c, const struct cumux_func_occupancy *m, uint8_t *out, uint32_t *out_len);
CUresult op_cluster_occupancy(struct srv_client *c, const struct cumux_launch *m, const uint8_t *payload,
                              uint32_t payload_len, uint8_t *out, uint32_t *out_len);
CUresult op_func_get_attribute(struct srv_client *c, const struct cumux_func_attr *m, uint8_t *out,
                               uint32_t *out_len);
CUresult op_func_set_attribute(struct srv_client *c, const struct cumux_func_attr *m, uint8_t *out,
                               uint32_t *out_len);

/* dispatch.c */
CUresult take_pending(struct srv_client *c, CUresult r);
/* graph.c */
bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j);
CUresult srv_graph_op(struct srv_client *c, uint16_t op, const void *body, const uint8_t *payload,
                      uint32_t payload_len, uint8_t *out, uint32_t *out_len);
void srv_graph_release_all(struct srv_client *c);

#endif
