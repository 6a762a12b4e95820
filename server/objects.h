/* The client's objects as every handler sees them (objects.c): handles, the current GPU, the legacy-stream
 * rule, pending errors, and the checks of what a client names. */
#ifndef CUMUX_SERVER_OBJECTS_H
#define CUMUX_SERVER_OBJECTS_H

#include "server/server.h"

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS)                                                                        \
            return r_;                                                                                 \
    } while (0)

CUresult reply_u64(uint8_t *out, uint32_t *out_len, uint64_t v);
/* Every handle slot of the client, h being each one's handle as this worker gives it out. */
#define SRV_FOR_EACH_HANDLE(c, h) \
    for (uint32_t h = srv_handle_tag | 1; CUMUX_HANDLE_INDEX(h) <= (c)->obj.nhandles; h++)
uint32_t handle_new(struct srv_client *c, enum srv_obj_type type, void *obj);
void *handle_get(struct srv_client *c, uint32_t h, enum srv_obj_type type);
void handle_drop(struct srv_client *c, uint32_t h);
void use_gpu(struct srv_client *c, int gpu);
/* Around every operation on a client stream: the legacy-default-stream rule. */
CUresult before_op(struct srv_stream *s);
void after_op(struct srv_stream *s);
/* A stream handle of this client, its context made current; NULL when it is not one. */
struct srv_stream *stream_get(struct srv_client *c, uint32_t h);
/* The stream a client's frees are ordered on, for one GPU. */
CUresult mem_stream(struct srv_client *c, int gpu, CUstream *out);
/* The stream of the client's cuMemAlloc calls on a GPU: nothing else is queued there. */
CUresult alloc_stream(struct srv_client *c, int gpu, CUstream *out);
/* That stream, made to wait for everything the client has queued so far on its streams of that GPU. */
CUresult after_client_work(struct srv_client *c, int gpu, CUstream *out);
/* r, or the error a one-way command left for the next synchronizing call (invariant 2). */
CUresult take_pending(struct srv_client *c, CUresult r);
/* Whether [p, p+n) lies in one of the client's device allocations or globals / pinned host allocations. */
bool dev_ok(struct srv_client *c, uint64_t p, uint64_t n);
bool host_ok(struct srv_client *c, uint64_t p, uint64_t n);
/* The device bytes a memset (or memset node) touches from m->dst; false when its shape is invalid or
 * overflows. width 0 or height 0 is a valid empty memset (span 0). */
bool memset_span(const struct cumux_memset *m, uint64_t *span);
/* stream.c: s was found idle and no command of its client since could have queued work on it. */
bool srv_stream_known_idle(struct srv_client *c, struct srv_stream *s);
/* Whether work sent to s now would be captured into a graph rather than run. */
bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s);
/* A descriptor the client sent over the socket just before the command that needs it; -1 if none. */
int recv_client_fd(struct srv_client *c, uint64_t min_size);
/* The same, sealed with `seals` before its size is checked: a file shrunk between a check and the seal
 * would leave the server's mapping past its end (SIGBUS). -1 when it cannot be sealed or is too short. */
int recv_sealed_fd(struct srv_client *c, uint64_t min_size, int seals);

/* placement.c (srv_placement_want in server.h): a stream is made with srv_place_new_stream and, before each operation on it, srv_place_stream moves it
 * where its client's kernels now belong; srv_place_stream_gone after cuStreamDestroy; srv_placement_release
 * at the client's end, after its streams. */
extern _Atomic uint64_t srv_placement_gen;
CUresult srv_place_new_stream(struct srv_client *c, int gpu, int hw_priority, CUstream *out,
                              struct srv_placed **where, uint64_t *gen);
void srv_place_stream_slow(struct srv_client *c, struct srv_stream *s);
static inline void srv_place_stream(struct srv_client *c, struct srv_stream *s)
{
    if (s->placed_gen != atomic_load_explicit(&srv_placement_gen, memory_order_acquire))
        srv_place_stream_slow(c, s);
}
void srv_place_stream_gone(struct srv_stream *s);
/* A launch the stream's green context refused for its thread-block clusters runs in the primary context:
 * srv_place_outside gives a stream there that starts after s's work (NULL: none to be had), and
 * srv_place_outside_end has s's next work wait for what was queued on it. */
CUstream srv_place_outside(struct srv_client *c, struct srv_stream *s);
void srv_place_outside_end(struct srv_stream *s, CUstream outside);
void srv_placement_release(struct srv_client *c);

/* marks.c: completion marks, so that a question about a stream the client keeps asking about needs no
 * driver call. srv_marks_asked notes a question that the worker could not answer from what it knew;
 * srv_marks_idle answers it from the stream's mark where that says all its work has ended (and then
 * notes the stream idle); srv_marks_write, when the worker has nothing to do, writes marks behind the
 * work of the streams asked about lately, and tells the client which of its questions they answer (its
 * channel's marks_told); srv_marks_stream_gone gives back a destroyed stream's word. */
void srv_marks_asked(struct srv_client *c, struct srv_stream *s);
bool srv_marks_idle(struct srv_client *c, struct srv_stream *s);
void srv_marks_write(struct srv_client *c, uint64_t handled); /* handled: ring bytes handled so far */
/* Where s's last work is a mark, the driver's answer about the client's work before it (the mark's own
 * landing aside); CUDA_ERROR_NOT_FOUND: no such mark, ask about the stream. */
CUresult srv_marks_query(struct srv_client *c, struct srv_stream *s);
void srv_marks_init(void);
/* Whether the marks told last say that all the client's launched work has ended (callable from any thread:
 * the fault watch, for the culprit's candidates). */
bool srv_marks_client_done(struct srv_client *c);
/* A GPU coredump has begun (the fault watch): what was told to client c stops answering its questions, and
 * nothing more is told by this worker. */
void srv_marks_stop_telling(void);
void srv_marks_withdraw(struct srv_client *c);
void srv_marks_stream_gone(struct srv_stream *s);

#endif
