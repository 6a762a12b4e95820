/* cumuxd internals: GPUs, clients and the objects each client owns. */
#ifndef CUMUX_SERVER_H
#define CUMUX_SERVER_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/sm_plan.h"
#include "common/proto.h"
#include "common/ranges.h"
#include "server/generated/release.h"
#include "server/client/conn.h"
#include "server/client/fault.h"
#include "server/client/graphs.h"
#include "server/client/group.h"
#include "server/client/hostfn.h"
#include "server/client/marks.h"
#include "server/client/memory.h"
#include "server/client/objects.h"
#include "server/client/pacing.h"
#include "server/client/placement.h"
#include "server/client/staging.h"
#include "server/client/streams.h"
#include "server/client/usage.h"
#include "server/client/vmm.h"
#include "server/client/waits.h"

/* ---- GPUs: one real (primary) context each, shared by every client ---- */
struct srv_gpu {
    CUdevice dev;
    CUcontext ctx;
    CUmemoryPool pool; /* clients' device memory: stream-ordered, so freeing waits for no other client */
    struct cumux_device_info info;
};

extern struct srv_gpu srv_gpus[CUMUX_MAX_DEVICES];
extern int srv_gpu_count; /* the GPUs this worker describes: every one the driver shows it */
/* The GPU this worker serves, its fault domain (the supervisor's domain index; -1: none). The worker holds
 * a context on it alone: a fault on another GPU is another worker's, and ends no client of this one. */
extern int srv_gpu_served;
static inline bool srv_gpu_serves(int g)
{
    return g >= 0 && g < srv_gpu_count && g == srv_gpu_served;
}
extern int srv_driver_version;

int srv_gpus_init(void); /* cuInit, primary contexts, device facts; 0 or -1 */
/* GPU g's architecture tables (export table 1734dc26..., arch_data.c) as the ARCH_DATA reply; g's context
 * must be current. */
CUresult srv_arch_data(int g, uint8_t *out, uint32_t cap, uint32_t *out_len);
void srv_gpus_fini(void);
/* chunks.c: with CUMUX_CONTAIN=1, reserve the arena of addresses for clients' memory in chunks (at
 * srv_arena_hint when the supervisor knows one); where it is (0 0: none); a failed worker's chunks mapped
 * again where they were (their descriptors closed). */
void srv_chunks_start(void);
bool srv_chunks_on(void);
struct srv_kept_chunk;
void srv_chunks_arena(uint64_t *base, uint64_t *size);
/* The failed worker's chunks (k: malloc'd, now chunks.c's), mapped at their addresses on a thread of their
 * own while this worker serves; clients coming back wait for them. */
void srv_chunks_adopt(struct srv_kept_chunk *k, size_t n);
/* While this worker is the standby: a kept chunk mapped ahead where it is (its descriptor closed), and one
 * gone since, unmapped (the supervisor's mirror calls; srv_chunks_adopt takes them over). */
void srv_chunks_mirror_add(struct srv_kept_chunk *k);
void srv_chunks_mirror_remove(uint64_t id);
/* The main thread, now and then: a failed worker's chunks that nobody took back in CUMUX_RESUME_WAIT_MS
 * (default 10000) are let go. */
void srv_chunks_expire(void);
/* A standby worker's contexts give back their per-thread stacks while it waits (half of a context's
 * memory) and take them again when it takes over (well under a millisecond). */
void srv_gpus_stand_by(void);
void srv_gpus_take_over(void);

/* ---- per-client objects, named to the client by small integer handles ---- */
#include "server/generated/kinds.h" /* enum srv_obj_type: the spec's kind lines */

struct srv_pool {
    CUmemoryPool pool;
    int gpu;
    uint32_t handle;
    bool is_default; /* the client's default pool of its GPU: not destroyed by the client */
    bool bounded;    /* made with a maximum size: the driver's pool keeps it (chunks would not) */
    /* Its allocations made in chunks (CUMUX_CONTAIN), which the driver's pool does not count: its
     * used/reserved attributes add these (pool.c). */
    struct cumux_ranges chunk_live;
    uint64_t chunk_used, chunk_used_high;
    uint64_t chunk_reserved, chunk_reserved_high; /* what it keeps after frees, as a pool keeps memory */
    struct srv_pool *next_chunked; /* the client's pools with chunk_live in use */
    bool chunked;
};

enum srv_stream_kind { STREAM_LEGACY, STREAM_BLOCKING, STREAM_NONBLOCKING };

struct srv_ctx;

struct srv_placed; /* placement.c: a green context a client's streams are in */


static inline void srv_unconfirmed_change(struct srv_unconfirmed *u, uint32_t handle, bool set)
{
    handle = CUMUX_HANDLE_INDEX(handle); /* the bits say streams by index (server_lost_streams) */
    atomic_fetch_add_explicit(&u->count, set ? 1 : -1, memory_order_relaxed);
    if (handle >= CUMUX_LOST_STREAM_WORDS * 64)
        atomic_fetch_add_explicit(&u->beyond, set ? 1 : -1, memory_order_relaxed);
    else if (set)
        atomic_fetch_or_explicit(&u->bits[handle / 64], 1ull << (handle % 64), memory_order_relaxed);
    else
        atomic_fetch_and_explicit(&u->bits[handle / 64], ~(1ull << (handle % 64)), memory_order_relaxed);
}

struct srv_stream {
    CUstream cu; /* always a real non-blocking stream: legacy semantics are emulated per client */
    struct srv_ctx *ctx;
    struct srv_placed *placed; /* the green context it is in (placement.c), NULL: the primary context */
    uint64_t placed_gen;       /* the placement generation it follows */
    int hw_priority;           /* its priority in the driver */
    uint64_t idle_gen;         /* the driver said it was idle when the client's work_gen was this (0: never):
                                * while work_gen stays there, it still is, and no driver call is needed */
    enum srv_stream_kind kind;
    uint32_t handle;
    bool dirty;          /* blocking stream: work since the legacy stream last joined it */
    bool capturing;      /* cuStreamBeginCapture on it: its work is recorded, not run */
    struct srv_graph *capture_graph; /* the capture's graph, once the client asked for it */
    uint64_t seen_epoch; /* blocking stream: the legacy epoch it already waits for */
    uint32_t hostfn_slot1;  /* 1 + its word in the client's hostfn_stream_done, 0 before its first host function */
    uint32_t hostfn_seq;    /* the number of its last host function */
    bool unconfirmed;       /* work queued on it that no synchronize or query has seen end (worker only) */
    /* Its completion mark (marks.c): 1 + its word, the number last written there behind its work, and
     * the driver stream it was written on */
    uint32_t mark_slot1, mark_seq;
    bool mark_behind; /* its mark is the last thing queued on it (cleared by before_op) */
    CUstream mark_cu;
    CUevent mark_event; /* recorded just before its mark: the client's work before it */
    uint32_t mark_word; /* its word in the client's channel (mark_word), where the same number goes */
    struct srv_stream *next_in_ctx;
};

struct srv_ctx {
    int gpu;
    uint32_t handle;
    struct srv_stream *legacy;   /* this client's legacy default stream in this context */
    struct srv_stream *streams;  /* all streams of the context, legacy included */
    uint64_t epoch;              /* bumped by every operation on the legacy stream */
    CUevent join_event;          /* recorded on a stream for another to wait on */
    CUevent epoch_event;         /* the legacy stream's position at epoch_event_epoch */
    uint64_t epoch_event_epoch;
    struct srv_stream **dirty;   /* blocking streams with work the legacy stream has not joined */
    size_t ndirty, capdirty;
    struct srv_unconfirmed *unconfirmed; /* its client's streams with unconfirmed work */
};

struct ipc_event;
struct srv_event {
    CUevent cu;
    struct srv_ctx *ctx;
    uint32_t handle;
    uint32_t flags;
    struct ipc_event *ipc; /* shared with other clients (ipc.c): the CUevent is not this event's alone */
    /* Named by a graph node (an external record or wait while captured): destroyed only once the client's
     * graphs are, never while a stale node could record into a CUevent another client got. */
    bool in_graph;
    struct srv_event *next_parked;
};

struct srv_module {
    uint32_t handle;
    uint32_t kind; /* cumux_image_kind */
    bool borrowed; /* a library's module (cuLibraryGetModule): the library unloads it */
    CUmodule mod;
    CUlibrary lib;
    /* A library's module in the GPU's context, noted (with dumps on) when a kernel of it is first looked
     * up: a dump names code by module, and after a fault the driver answers no cuLibraryGetModule. */
    CUmodule lib_module;
    int gpu;
    struct srv_ctx *ctx; /* a module's context (it goes with it); NULL for a library, which outlives contexts */
    void *image; /* the client's image, mapped from its memfd */
    size_t image_size;
    uint64_t *globals; /* device ranges of its globals that were handed to the client */
    size_t nglobals;
};

struct srv_function {
    CUfunction fn; /* for a library kernel: the CUkernel, which launches accept in its place */
    bool is_kernel;
    /* A library kernel's function in a GPU's primary context, looked up at its first launch there
     * (launch.c, CUMUX_LAUNCH_FUNCTIONS); NULL until then, and again after its library is reloaded. */
    CUfunction launch_fn;
    int launch_gpu;
    bool launch_unresolved; /* the lookup failed: launches take the kernel, as before */
    uint32_t module;
    uint32_t param_bytes;
    uint32_t nparams;
    uint32_t *param_offsets; /* to hand the driver kernelParams, its fastest launch path */
    uint32_t *param_sizes;   /* to read a graph kernel node's arguments back */
    char *name;              /* a library kernel's name: looked up again when its library is reloaded */
};

struct srv_handle {
    enum srv_obj_type type;
    void *obj;
};

extern uint32_t srv_max_handles; /* per client (dispatch.c) */
/* This worker's handles carry its GPU (CUMUX_HANDLE_TAG of srv_gpu_served; objects.c). */
extern uint32_t srv_handle_tag;

enum srv_range_tag { RANGE_ALLOC = 1, RANGE_GLOBAL = 2, RANGE_HOST = 3, RANGE_VMM = 4, RANGE_IPC = 5, RANGE_GRAPH = 6 };

/* A client: what is truly common (who it is, its channel, its worker's life) and one part per concern,
 * each defined in server/client/ beside the file that owns it, each freed by its own release step
 * (common/protocol.spec's release lines, srv_client_release_all). */
struct srv_client {
    uint32_t id;
    pid_t pid;
    uid_t uid;
    int shm_fd;
    int stdout_fd; /* the client's stdout, for device printf (printf.c); -1 if it sent none */
    struct cumux_shm *shm;
    pthread_t worker;
    _Atomic int dead;     /* hung up, protocol violation or server stopping: the worker cleans up */
    _Atomic int finished; /* the worker is done: the main thread may join and free */
    char cmd[96]; /* its command line when it connected, for the log and fault records */
    char name[64]; /* CUMUX_CLIENT_NAME (INIT): readable by others once `named` is set, never changed after */
    _Atomic bool named;

    struct srv_client_conn conn;           /* main thread */
    struct srv_client_objects obj;         /* the rest: the worker's, but where its header says */
    struct srv_client_memory memory;
    struct srv_client_vmm vmm;
    struct srv_client_hostfn hostfn;
    struct srv_client_waits waits;
    struct srv_client_staging staging;
    struct srv_client_marks marks;
    struct srv_client_usage usage;
    struct srv_client_pacing pacing;
    struct srv_client_graphs graphs;
    struct srv_client_fault fault;
    struct srv_client_streams streams;
    struct srv_client_placement placement;
    struct srv_client_group group;
    struct srv_chunks *chunks; /* its device memory in VMM chunks (chunks.c, CUMUX_CONTAIN=1) */

    struct srv_client *next;
};

/* A client as the status records and /metrics show it (status.c). */
struct srv_client_stat {
    uint32_t id, uid, streams;
    int32_t pid;
    uint64_t mem, limit, pinned, launches, gpu_ns;
    int priority;
    uint32_t sms;  /* SMs its kernels may use; 0 before its first stream */
    bool reserved; /* they are its alone */
    uint32_t percent; /* its active thread percentage, 0: none */
    char cmd[96], name[64];
    char group[CUMUX_GROUP_PATH]; /* its group (groups.c): a rule's cgroup path, or its own cgroup */
};
/* The live clients, their GPU time brought up to date: *out (malloc'd) and how many; -1 when out of
 * memory. */
ssize_t srv_clients_snapshot(struct srv_client_stat **out);
/* metrics.c: the listening socket for CUMUX_METRICS_PORT ("PORT" on 127.0.0.1, or "ADDR:PORT"), or -1
 * (logged); and the whole HTTP response to a request (every GPU's clients: GPU 0's worker asks the
 * others), NULL when out of memory. */
int srv_metrics_listen(const char *spec);
char *srv_metrics_response(const char *request, size_t len, size_t *out_len);

/* usage.c: the client's samples that ended since, into c->gpu_ns; for status requests, from any thread. */
void srv_usage_refresh(struct srv_client *c);
/* Has the client launched work not known to have ended (the candidates for a fault's culprit)? */
bool srv_usage_in_flight(struct srv_client *c);
/* A client goes: remembered a while if it had kernels in flight (srv_usage_departed_lately: those that
 * went within the last `within_ns`, described, at most max). */
void srv_usage_departed(struct srv_client *c);
size_t srv_usage_departed_lately(uint64_t within_ns, char (*out)[160], size_t max);

/* printf.c: device printf of a worker's client goes to that client's stdout */
void srv_printf_bind(struct srv_client *c); /* in the worker thread, once */
void srv_printf_flush(int all);              /* complete lines (all: everything) held by this thread */
void srv_printf_unbind(void);                /* at the worker's end: what is left, and what was dropped */

/* image.c: does everything a module image's headers point at lie within its `size` bytes? */
bool srv_image_fits(const uint8_t *p, uint64_t size);

/* channels.c: a client's channel (a sealed memfd mapped here), and those kept ready ahead of clients. */
/* The channel's pages the GPU reads and writes: the host-function words and, right after, the completion
 * marks' words (pinned as one range). */
#define SRV_GPU_WORDS_BYTES \
    (sizeof(((struct cumux_shm *)0)->hostfn_stream_done) + sizeof(((struct cumux_shm *)0)->mark_word))
struct srv_channel {
    int fd;
    struct cumux_shm *shm;
    bool staging_pinned;  /* its staging buffers pinned with the driver */
    CUdeviceptr words_dev; /* its GPU words pinned, at this device address (0: not pinned) */
};
int srv_channel_make(struct srv_channel *ch); /* a fresh one, not pinned: 0, or -1 with errno */
void srv_channel_pin(struct srv_channel *ch);  /* pins what is not yet (a GPU's context current) */
/* A fresh channel made and pinned ahead, if one is ready (a take also delays making the next). */
bool srv_channel_take_spare(struct srv_channel *ch);
/* Once the worker's context is there: keep CUMUX_SPARE_CHANNELS (default 4) channels ready. */
void srv_channel_spares_start(void);

/* client.c */
struct srv_client *srv_client_start(int sock, pid_t pid, uid_t uid, uint32_t id, int stdout_fd);
void srv_client_free(struct srv_client *c);
/* The worker's life, in parts the fuzzer (tests/fuzz) drives without a thread: begin (staging pinned,
 * staging events), then step (one command from the ring, msg at least CUMUX_MAX_MSG bytes: 1 ran one,
 * 0 the ring is empty, -1 the client broke the protocol and is now dead), then srv_client_release_all. */
void srv_worker_begin(struct srv_client *c);
/* At the worker's start (a GPU's context current): whether streams can wait on pinned host memory. */
void srv_host_waits_probe(void);
int srv_worker_step(struct srv_client *c, uint64_t *tail, void *msg);
/* A command's name (protocol.spec), "?" for a number that is none. */
const char *srv_op_name(unsigned op);
extern int srv_wake_fd; /* a worker writes here when it finishes */

/* reaper.c: calls that wait for the whole shared context, run off the clients' workers */
enum reap_kind { REAP_HOST_MEMORY, REAP_HOST_UNREGISTER, REAP_UNMAP, REAP_MODULE, REAP_LIBRARY, REAP_POOL };
void srv_reap(enum reap_kind kind, int gpu, void *ptr, size_t len, void *handle);
int srv_reaper_start(void);
void srv_reaper_stop(void);
void srv_reaper_drain(void); /* until every job queued so far is done (tests: leak checks) */

struct hostfn_job;

/* dispatch.c */
/* Run one message; -1 on a protocol violation (the client is then dropped). */
int srv_dispatch(struct srv_client *c, void *msg, uint32_t size);
/* copy.c: gives back the staging slots whose copies are done (with wait, all, waiting for them); true when
 * some are still in use (without wait). */
bool srv_staging_flush(struct srv_client *c, bool wait);

/* The GPU's kernels for stream memory operations on pool memory (memop_kernels.c); its context current. */
bool srv_memop_kernels_load(int gpu);
/* One stream memory operation (a wait or a write) on s, the GPU's context current: by the driver, or by the
 * server's kernels where the driver refuses it on pool memory. */
CUresult srv_memop_run(int gpu, CUstream s, const CUstreamBatchMemOpParams *p, bool pool);

/* ---- faults (fault.c) and the supervisor (supervisor.c) ---- */
#define CUMUX_EXIT_GPU_FAULT 70 /* a worker's exit status after a fatal GPU error */
#define SRV_FAULTS_KEPT 16
struct srv_fault_record {
    int64_t at_ms;        /* wall clock, milliseconds */
    int64_t recovered_ms; /* from the fault to a new worker serving; -1 until then */
    int32_t code;         /* the sticky CUresult */
    int32_t gpu;
    char clients[448];    /* the other clients that had the GPU then: "id pid uid command; ..." */
    char culprit[160];    /* the client that caused it, when known: "id pid uid command" */
    char why[192];        /* "fatal GPU error" (and the candidates for its culprit), or why the worker was given up */
};
extern struct srv_fault_record srv_faults[SRV_FAULTS_KEPT]; /* the last ones, by srv_nfaults % KEPT */
extern uint32_t srv_nfaults, srv_worker_restarts;
extern pid_t srv_supervisor_pid;
/* GPU coredumps (coredump.c): on from cuInit, before any context, when srv_coredump_path is set; after a
 * fault, the CUmodules whose code faulted (0 when not known). */
extern char srv_coredump_path[512];
void srv_coredump_enable(void);
size_t srv_coredump_prune(const char *dir, size_t keep); /* the newest `keep` dumps stay; how many went */
/* error: the dump's, or 0; kernel (kcap bytes): the faulting kernel's name (mangled), or "" */
size_t srv_coredump_culprits(uint64_t *modules, size_t cap, CUresult *error, char *kernel, size_t kcap);
bool srv_coredump_begun(void); /* a dump of this worker's context is being written (a fault) */
/* Whether the driver's module cu_module (as a GPU coredump names it) is one of the client's (module.c);
 * the owner of one unloaded lately (its client may have gone right after the fault): its description. */
bool srv_module_owned(struct srv_client *c, uint64_t cu_module);
void srv_library_note_module(struct srv_module *mod, CUkernel k);
bool srv_module_departed_owner(uint64_t cu_module, char *desc, size_t cap);
/* "id pid uid command" (objects.c). */
int srv_client_describe(const struct srv_client *c, char *out, size_t cap);
typedef void (*srv_fault_fn)(CUresult r, int gpu);
bool srv_fault_is_fatal(CUresult r);
/* The error to answer a call that met the fatal error r with: does not return when the failing worker
 * decided this client may come back (docs/faults.md), which it waits for (briefly) first; a client that
 * comes back is told its lost work otherwise (CUDA_ERROR_LAUNCH_FAILED). With GPU coredumps on, the
 * decided error (what the dump shows) rather than what the driver said. */
CUresult srv_fault_answer(struct srv_client *c, CUresult r);
void srv_fault_hold_if_dumping(void); /* GPU coredumps: a success told while the driver dumps a fault waits */
/* The failing worker decided for each client; code: the error every client is told (failover.c srv_worker_fails). */
void srv_fault_decided(CUresult code);
/* Watches every GPU for a sticky error; fn (which must not return) is called with the first one;
 * on_dump_begun, once, when a GPU coredump of this worker's context has begun. */
int srv_fault_watch_start(srv_fault_fn fn, void (*on_dump_begun)(void));
void srv_fault_watch_stop(void);
/* Forks workers, one per GPU and a standby behind each, until one stops the server (then exits 0); returns
 * 0 in each worker (which goes on serving its GPU, srv_gpu_served, on the listening socket *lsock), or -1
 * in the supervisor when workers cannot be had. *lsock comes in as GPU 0's; the supervisor makes the
 * others' in dir_fd once GPU 0's worker has said how many GPUs there are, and writes 0 to *ready_fd once
 * every GPU's worker serves (the workers never see it). */
int srv_supervise(int *ready_fd, int dir_fd, int *lsock);
/* What the supervisor does on SIGHUP (main.c sets it: the settings file read again, config.c). */
extern void (*srv_on_reload)(void);
/* The device memory limit of clients that ask for none or for more (CUMUX_DEFAULT_MEMORY_LIMIT, `cumux
 * control set_default_device_pinned_mem_limit`), 0 for none: kept with the supervisor, so that a worker
 * that replaces a failed one has it too. */
uint64_t srv_default_mem_limit(void); /* of the worker's GPU */
uint64_t srv_default_mem_limit_of(int gpu);
void srv_set_default_mem_limit(int gpu, uint64_t bytes); /* gpu -1: every GPU */
/* The fatal faults of every GPU as the supervisor heard them (any worker tells them all): how many so far,
 * the last SRV_FAULTS_KEPT into last (by number % SRV_FAULTS_KEPT), the workers restarted, and those of
 * one GPU. Any pointer may be NULL. */
uint32_t srv_fault_history(struct srv_fault_record *last, uint32_t *restarts, int gpu, uint32_t *gpu_faults,
                           uint32_t *gpu_restarts);
/* The priority class of clients that ask for none (CUMUX_DEFAULT_PRIORITY, `cumux control
 * set_default_client_priority`): enum cumux_priority, kept with the supervisor too. */
int srv_default_priority(void);
void srv_set_default_priority(int cls);
void srv_supervisor_fault(const struct srv_fault_record *rec); /* from a worker, before it exits */
/* From a worker, once it listens; with its arena of clients' memory (chunks.c; 0 0: none), which the
 * supervisor hands to the workers it starts after (srv_arena_hint), so that all have it at one address. */
void srv_supervisor_serving(uint64_t arena_base, uint64_t arena_size);
extern uint64_t srv_arena_hint, srv_arena_hint_size;
/* Clients' memory chunks outlive their worker (issue 10): a worker hands each chunk's descriptor to the
 * supervisor (keep), and says when it released one (drop) or when a client is gone (drop_client); at a
 * takeover the supervisor gives them all to the standby, which reads them after srv_standby_wait
 * (srv_standby_take: how many, up to cap; the descriptors are then the caller's). Before any fault the
 * supervisor also hands the ready standby each chunk as it comes (and says when one goes), so that the
 * standby maps it ahead: the `mirror` calls, made by the standby's main thread while it waits. */
struct srv_kept_chunk {
    uint32_t client;
    int32_t gpu;
    uint64_t base, size;
    uint64_t token; /* its client's resume token, pid and uid: who may take it back */
    int32_t pid;
    uint32_t uid;
    int fd;
    uint64_t id; /* the supervisor's number for it: the same chunk has the same number everywhere */
};
struct srv_mirror_ops {
    void (*add)(struct srv_kept_chunk *k); /* map it ahead (the descriptor is its to close) */
    void (*remove)(uint64_t id);           /* it went: unmap it */
};
void srv_supervisor_keep(const struct srv_kept_chunk *k);
/* For `cumux status`: the chunks of clients' memory the supervisor holds (-1: no supervisor). */
int srv_kept_memory(uint64_t *chunks, uint64_t *bytes);
void srv_supervisor_drop(uint64_t base);
void srv_supervisor_drop_client(uint32_t client);
size_t srv_standby_take(struct srv_kept_chunk *out, size_t cap, const struct srv_mirror_ops *mirror);
/* A standby worker (GPUs up, not serving) waits here until it is told to take over: 0 then, with the
 * supervisor's history of faults; -1 when the server stops first. */
bool srv_worker_is_standby(void);
/* The standby worker, for `cumux status`: -1 none kept (CUMUX_STANDBY=0); else 1 ready, 0 starting or none
 * (*pid 0). */
int srv_standby_state(pid_t *pid);
int srv_standby_wait(volatile sig_atomic_t *stop, const struct srv_mirror_ops *mirror);
int64_t srv_wall_ms(void);

/* placement.c: which SMs a client's kernels may use (reservations, thread percentages: green contexts).
 * srv_placement_want (any thread): reserve `sms` SMs for it alone (0: none) and cap it at `percent` of
 * the SMs (0: no cap); -1 when that cannot be (why says so; the old stands), 0 (why: what it got).
 * The default percentage is for clients that ask for none, from when it is set (0: none). */
int srv_placement_want(struct srv_client *c, uint32_t sms, uint32_t percent, char *why, size_t cap);
/* SMs for client group `rule` (generation gen) alone on this worker's GPU (groups.c; 0: none): -1 when that
 * cannot be (why; the old stands), 0 (why: what it holds); a request that failed before is tried again only
 * when `again`. A client's group (srv_placement_in_group, -1: none) gives its kernels those SMs, unless it
 * holds a reservation of its own. */
int srv_placement_group(int rule, uint32_t gen, uint32_t sms, bool again, char *why, size_t cap);
void srv_placement_in_group(struct srv_client *c, int rule, uint32_t gen);
unsigned srv_default_thread_percent(void);
void srv_set_default_thread_percent(unsigned percent);

#endif
