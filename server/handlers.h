/* The command handlers, one file per concern (context.c, stream.c, memory.c, pool.c, vmm.c, ipc.c,
 * copy.c, module.c, launch.c, hostfn.c, graph.c). Their prototypes and the routing from op to handler are
 * generated from common/protocol.spec (server/generated/routes.h); what they share is objects.c. Below:
 * what dispatch.c needs of them to clean up after a client, and the few things one handler file needs of
 * another. */
#ifndef CUMUX_SERVER_HANDLERS_H
#define CUMUX_SERVER_HANDLERS_H

#include "server/generated/routes.h"
#include "server/objects.h"

/* context.c */
void ctx_free(struct srv_client *c, struct srv_ctx *x);
/* The shared context's limits back down to what the remaining clients asked for (context.c). */
void srv_limits_release(struct srv_client *c);
/* Pool allocations made in chunks, counted in the pool's attributes (pool.c). */
void srv_pool_chunk_alloc(struct srv_client *c, struct srv_pool *p, uint64_t ptr, uint64_t size);
void srv_pool_chunk_forget(struct srv_client *c, uint64_t ptr);

/* stream.c: the context's streams */
struct srv_stream *stream_new(struct srv_client *c, struct srv_ctx *x, enum srv_stream_kind kind, int priority,
                              CUresult *res);
void stream_free(struct srv_client *c, struct srv_stream *s);
/* At the client's end: waits for the work of the streams it destroyed (their tails), and forgets them. */
void srv_stream_tails_wait(struct srv_client *c);
/* An event and its handle (its CUevent too, unless others share it through IPC). */
void event_free(struct srv_client *c, struct srv_event *e);
/* The client's graphs are gone: the events kept for them go now, and later ones at once. */
void srv_events_unpark(struct srv_client *c);

/* memory.c */
void host_release(struct srv_client *c, uint64_t base);


/* ipc.c: before an allocation's owner frees it (stream: the free's, or NULL for a synchronous free).
 * True when others still have it open: the memory then stays until the last of them closes it, and the
 * owner only forgets it. */
/* usage.c: a launch (kernel or graph) on s may be timed: srv_usage_begin before it (a slot, or -1: not
 * timed), srv_usage_end after it with its result. srv_usage_release at the client's end. */
int srv_usage_begin(struct srv_client *c, struct srv_stream *s);
void srv_usage_end(struct srv_client *c, struct srv_stream *s, int slot, CUresult launched);
/* The launches after a timing event's record that get no completion mark before them (stream.c sets
 * c->timing_quiet, usage.c counts it down, marks.c obeys it). */
#define SRV_TIMING_QUIET_LAUNCHES 8
void srv_usage_release(struct srv_client *c);
/* kernel_profile.c (CUMUX_PROFILE=kernels): a launch on s is bracketed by srv_kprof_before (an event
 * recorded, or NULL: not timed) and srv_kprof_after with the launch's result; srv_kprof_release logs the
 * client's kernels once its work is done. */
bool srv_kprof_wanted(void);
CUevent srv_kprof_before(struct srv_client *c, struct srv_stream *s);
void srv_kprof_after(struct srv_client *c, struct srv_stream *s, CUevent start, const struct srv_function *fn,
                     CUresult launched);
void srv_kprof_release(struct srv_client *c);
/* The client's context or a stream of it synchronized: its launches so far have ended (for a stream: taken
 * as so; most programs that time their work use one). */
void srv_usage_synced(struct srv_client *c);

/* chunks.c (CUMUX_CONTAIN=1): clients' cuMemAlloc and default-pool memory in VMM chunks of an arena of
 * addresses reserved at the worker's start (srv_chunks_start, after the GPUs), so that it can outlive the
 * worker (srv_chunks_start: server.h). srv_chunk_free orders the reuse after `after`'s work (NULL: after all
 * the client's work). */
bool srv_chunks_in_arena(uint64_t p);
CUresult srv_chunk_alloc(struct srv_client *c, int gpu, uint64_t size, uint64_t *out);
CUresult srv_chunk_free(struct srv_client *c, uint64_t ptr, CUstream after);
void srv_chunks_trim(struct srv_client *c, int gpu);
void srv_chunks_release_all(struct srv_client *c);
/* CUDA IPC of memory in chunks (ipc.c): memory others hold open when its owner frees it stays allocated in
 * the owner's chunk. The last close frees it: srv_chunk_free_later (any thread, while the owner lives: its
 * worker frees it once `done` has completed, and destroys the event); at the owner's end each chunk holding
 * memory still open leaves the owner (srv_chunk_hold, its worker: counted once per hold) and is unmapped at
 * the last srv_chunk_unhold (any thread, c: whose context is used), after the work before it. */
struct chunk;
void srv_chunk_free_later(struct srv_client *owner, uint64_t ptr, CUevent done);
struct chunk *srv_chunk_hold(struct srv_client *c, uint64_t ptr);
void srv_chunk_unhold(struct srv_client *c, struct chunk *ch);
/* The chunk holding c's allocation at ptr: where it is mapped (0, or -1 when ptr starts none). */
int srv_chunk_extent(struct srv_client *c, uint64_t ptr, uint64_t *base, uint64_t *size);

/* objects.c: a synchronize or query saw all of s's work end (its client's count of streams with work not
 * seen to end goes down: server/failover.c makes only a client with none resumable at a fault). */
void srv_stream_confirmed(struct srv_stream *s);

/* pacing.c: before a kernel launch on s, while many clients launch and this one's kernels are long, waits
 * (bounded) for s's earlier work, so that hardware queues shared between clients' streams keep runnable
 * heads. On unless CUMUX_PACE=0. */
void srv_pace_launch(struct srv_client *c, struct srv_stream *s);

/* mem_limit.c: `size` more bytes of device memory held by the client, counted against its limit:
 * CUDA_ERROR_OUT_OF_MEMORY past it (nothing counted). srv_mem_uncharge gives them back. */
CUresult srv_mem_charge(struct srv_client *c, uint64_t size);
void srv_mem_uncharge(struct srv_client *c, uint64_t size);
/* Would `size` more bytes fit under the limit? For graph memory, which a graph holds from its first launch
 * on and is not counted: one allocation past what the client has left is refused. */
CUresult srv_mem_fits(struct srv_client *c, uint64_t size);
bool srv_ipc_defer_free(struct srv_client *c, uint64_t base, int gpu, CUstream stream);
/* A client that goes: what it opened is closed, what it exported and others hold is left to them. */
void srv_ipc_release_all(struct srv_client *c);
/* Another GPU's worker opens export `token` (IPC_LEASE): one more open, the chunk's descriptor and where
 * it and the allocation are; srv_ipc_lease_end when that worker's connection goes (main thread). */
CUresult srv_ipc_lease(uint64_t token, struct cumux_ipc_lease *info, int *fd);
void srv_ipc_lease_end(uint64_t token);
/* vmm.c: another GPU's worker asks for the allocation a client exported as descriptor (dev, ino): the
 * driver's descriptor of it (info: its size), or -1 when no export is known by it (main thread). */
int srv_vmm_fetch(uint64_t dev, uint64_t ino, struct cumux_vmm_fetch *info);
/* One holder of a shared event lets go: the last one destroys the CUevent. */
void srv_ipc_event_drop(struct ipc_event *ev);
/* Another GPU's worker opens interprocess event `token` (IPC_LEASE, CUMUX_LEASE_EVENT): the driver's handle
 * of it, held until srv_ipc_event_lease_end (main thread). */
CUresult srv_ipc_event_lease(uint64_t token, CUipcEventHandle *out);
void srv_ipc_event_lease_end(uint64_t token);

/* pool.c */
CUresult default_pool(struct srv_client *c, int gpu, struct srv_pool **out);
void pool_free(struct srv_client *c, struct srv_pool *p);

/* vmm.c */
void srv_vmm_release_all(struct srv_client *c);

/* array.c: the client's textures, surfaces and arrays go */
void srv_array_release_all(struct srv_client *c);

/* module.c */
void module_free(struct srv_client *c, struct srv_module *mod);
/* The client's image in fd, read-only: its `size` bytes, then zeros to a page past them (module.c says
 * why); NULL on failure. Unmap *map_len bytes. */
void *srv_map_image(int fd, size_t size, size_t *map_len);
/* cuLibraryLoadData of an image the server keeps mapped until the library is unloaded, with n JIT options. */
CUresult srv_library_load(CUlibrary *lib, const void *image, CUjit_option *opts, void **vals, unsigned n);

/* link.c: the client's link states go */
void srv_link_release_all(struct srv_client *c);

/* hostfn.c: the job the driver's host-function thread runs for a client's host function */
struct hostfn_job {
    struct srv_client *c;
    uint64_t id;
    bool persistent; /* in a graph: run at every launch, freed with the client */
    uint32_t slot, seq; /* the stream's word and number (CUMUX_HOSTFN_NO_SLOT: the trampoline waits) */
    struct hostfn_job *next;
};
void CUDA_CB hostfn_trampoline(void *arg);
/* At a client's end: every stream's host-function word gets its last number, so no stream waits on. */
void srv_hostfn_release(struct srv_client *c);
/* A graph's host function job lives as long as the client. */
void srv_keep_hostfn_job(struct srv_client *c, struct hostfn_job *j);

/* waits.c: a stream memory wait is noted by address (refused when no value can satisfy it); at the
 * client's end each one still on its memory is satisfied, so that none of its streams waits forever. */
CUresult srv_wait_note(struct srv_client *c, int gpu, uint64_t address, uint8_t size, uint64_t value, uint32_t flags);
void srv_waits_release(struct srv_client *c);

/* graph.c */
/* Graph memory: a captured allocation (memory.c) joins the client's memory and the capture's list; whether
 * ptr is one of the client's graph allocations (a free of it keeps the address the client's). */
CUresult srv_graph_mem_captured(struct srv_client *c, struct srv_stream *s, uint64_t ptr, uint64_t size, int gpu);
bool srv_graph_mem_is(struct srv_client *c, uint64_t ptr);
/* A graph allocation freed outside a graph: no longer live. */
void srv_graph_mem_freed(struct srv_client *c, uint64_t ptr);
/* Whether the stream's capture adds to one of the client's graphs (cuStreamBeginCaptureToGraph). */
bool srv_capture_adds_to_graph(const struct srv_stream *s);
void srv_graph_release_all(struct srv_client *c);
/* A stream's capture that will never be ended by its client (the stream or the client goes): ended, and
 * its graph freed. */
void srv_capture_abandon(struct srv_client *c, struct srv_stream *s);

#endif
