/* The shim's state: its connection to the server, and the client-side objects behind CUDA handles. */
#ifndef CUMUX_SHIM_CLIENT_H
#define CUMUX_SHIM_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/channel.h"
#include "common/proto.h"
#include "common/ranges.h"
#include "shim/shim.h"
#include "shim/generated/magic.h"


/* Handles the program holds are pointers to these. The server knows each by its integer handle. */
/* What the shim knows of a stream's completion (stream.c): shim_work_seq + 1 as it was when the server last
 * found it idle (query) or synchronized it (sync; pending errors reported); 0: nothing known. While no work
 * message has been sent since, the same answer needs no round trip. */
struct shim_idle {
    _Atomic uint64_t query_seq, sync_seq;
};

/* Work lost at another program's fault (docs/faults.md): after a resume in which the server said work of
 * this program was lost, shim_lost_epoch moves on, and each stream, event and context made before says
 * CUDA_ERROR_LAUNCH_FAILED once, at its next synchronize or query; its word (the epoch it last reported,
 * or was made in) then catches up. Objects made after start caught up. */
extern _Atomic uint32_t shim_lost_epoch;
static inline bool shim_lost_pending(_Atomic uint32_t *seen)
{
    return atomic_load_explicit(seen, memory_order_relaxed) != atomic_load_explicit(&shim_lost_epoch, memory_order_relaxed);
}
/* CUDA_ERROR_LAUNCH_FAILED once per lost epoch for the object whose word this is, else CUDA_SUCCESS. */
CUresult shim_lost_report(_Atomic uint32_t *seen);
/* The object said it otherwise (a call that was in flight at the fault): caught up. */
void shim_lost_said(_Atomic uint32_t *seen);
/* Before the epoch moves on to `next`: an object that lost nothing then, and had said all it lost
 * before, stays caught up. */
void shim_lost_spare(_Atomic uint32_t *seen, uint32_t next);
/* The word of a stream as the program names it (NULL, legacy, per-thread or its own) in ctx. */
_Atomic uint32_t *shim_stream_lost_word(CUstream h, struct CUctx_st *ctx);
/* shim_lost_report for a stream as the program names it. */
CUresult shim_stream_lost(CUstream h, struct CUctx_st *ctx);

struct CUctx_st {
    uint32_t magic;
    uint32_t handle;        /* server context handle */
    uint32_t legacy_stream; /* server handle of this context's legacy default stream */
    uint64_t legacy_stream_id; /* what cuStreamGetId answers for it */
    uint32_t generation;       /* bumped by a reset of the primary context */
    int device;
    unsigned flags;
    bool primary;
    uint64_t id;
    int cache_config;
    int shmem_config;
    /* The limits the program set (cuCtxSetLimit, by CUlimit; 0: not set), set again at a comeback: the
     * new worker's context starts with the driver's defaults. */
    _Atomic uint64_t limits_set[CU_LIMIT_MAX];
    struct shim_idle legacy_idle; /* its legacy stream's */
    _Atomic uint64_t synced_seq;  /* cuCtxSynchronize's, as shim_idle.sync_seq */
    _Atomic uint32_t legacy_lost, sync_lost; /* its legacy stream's and cuCtxSynchronize's shim_lost words */
    bool legacy_spared, sync_spared; /* at a resume that lost work: its legacy stream, and all it has, lost none */
};

struct CUstream_st {
    uint32_t magic;
    uint32_t handle;
    struct CUctx_st *ctx;
    unsigned flags;
    int priority;
    uint64_t id;
    struct shim_idle idle;
    _Atomic uint32_t lost; /* shim_lost word */
    bool spared;           /* at a resume that lost work: this stream lost none */
};

struct CUevent_st {
    uint32_t magic;
    uint32_t handle;
    struct CUctx_st *ctx;
    unsigned flags;
    _Atomic uint32_t lost; /* shim_lost word */
    _Atomic uint32_t recorded_on; /* the server's handle of the stream it was last recorded on (0: none) */
    bool spared;                  /* at a resume that lost work: it was recorded on no stream that did */
};

/* A loaded image: a module (CUmodule) or a library (CUlibrary), same layout. */
struct CUmod_st {
    uint32_t magic; /* SHIM_MAGIC_MODULE or SHIM_MAGIC_LIBRARY */
    uint32_t handle;
    struct CUctx_st *ctx;
    pthread_mutex_t lock;
    struct CUfunc_st *functions; /* looked up so far, so a name costs one round trip per module */
    int image_fd;                /* its sealed image, kept to load it again after a resume; -1: not kept */
    void *load;                  /* the MODULE_LOAD request it was loaded with (module.c), for the same */
    unsigned globals_asked;      /* addresses of its globals handed out: the program cannot come back */
    /* A library is the program's on every GPU: its copies loaded in further GPUs' workers at their first
     * use there (module.c library_on_gpu), by the server's number of the GPU; a copy's origin. */
    struct CUmod_st *on_gpu[CUMUX_MAX_DEVICES];
    struct CUmod_st *origin;
    uint32_t ctx_generation; /* a copy's primary context's, at its load: a reset drops the copy */
};

/* A kernel: CUfunction, and also CUkernel (CUDA launches accept a CUkernel cast to CUfunction). */
struct CUfunc_st {
    uint32_t magic;
    uint32_t handle;
    struct CUmod_st *module;
    uint32_t nparams;
    uint32_t param_bytes;
    struct cumux_param_layout *params;
    char *name;
    struct CUfunc_st *next;
    int attr_set[8][2]; /* attributes the program set (attribute, value), made again after a resume */
    unsigned nattr_set;
    /* Attribute answers (module.c func_attr): libraries ask a function's attributes around its launches
     * (76,032 calls while a ResNet-50 training starts), each a round trip to the server, some inside spans
     * they time. attr_known[a]: the generation it was asked in plus one (high 32 bits, 0: never) and
     * the answer; valid while attr_gen is unchanged, which a set that reached the server bumps. attr_set_ok[a]: bit 32
     * and the value of a set that succeeded, which the same set again would (answered here). */
    _Atomic uint64_t attr_known[CU_FUNC_ATTRIBUTE_MAX];
    _Atomic uint64_t attr_set_ok[CU_FUNC_ATTRIBUTE_MAX];
    _Atomic uint32_t attr_gen;
    /* Cache preferences (CUfunc_cache): the function's own (cuFuncSetCacheConfig), and the one in effect
     * that the server's copy was last given (own, else its context's): launch.c sends a change. */
    _Atomic int cache_own, cache_sent;
    /* A library kernel on further GPUs: its copies there (in its library's copies), and a copy's origin. */
    struct CUfunc_st *on_gpu[CUMUX_MAX_DEVICES];
    struct CUfunc_st *origin;
};


/* A memory pool: the client's default pool of a device, or one it created. */
struct CUmemPoolHandle_st {
    uint32_t magic;
    uint32_t handle;
    int device;
    bool is_default;
    uint64_t max_size; /* as made: to make it again after a resume (pool.c) */
    /* The reuse policies and release threshold (attributes 1-4) the program set, again after a resume. */
    _Atomic uint32_t attr_set; /* bit a: attribute a was set */
    _Atomic uint64_t attr_value[5];
};

/* A channel to one GPU's worker: its socket, its shared memory (ring, reply and staging slots) and the
 * program's client there. A program has one per GPU it uses (connection.c). */
struct shim_chan {
    int gpu; /* the server's number of the GPU */
    int sock;
    struct cumux_shm *shm;
    uint32_t client_id;
    pthread_mutex_t ring_lock;
    pthread_mutex_t stage_lock;
    pthread_mutex_t sock_lock;
    unsigned stage_next;
    _Atomic int lost;         /* a second GPU's channel whose worker went: its calls fail from then on */
    uint32_t begun_size;      /* under ring_lock, from shim_send_begin to shim_send_end */
    uint16_t begun_op;
};

struct shim_state {
    bool initialized;
    /* The channel of the program's first GPU: the one that comes back after another program's fault. */
    struct shim_chan main;
    uint64_t resume_token; /* from the first welcome: to come back after the worker failed (0: cannot) */
    int driver_version;
    int device_count; /* the GPUs the program sees (CUDA_VISIBLE_DEVICES), numbered as it numbers them */
    struct cumux_device_info devices[CUMUX_MAX_DEVICES];
    int server_device_count;
    int server_gpu[CUMUX_MAX_DEVICES]; /* the server's number of each */
    /* Address ranges the shim knows, to classify pointers without asking (unified addressing). */
    pthread_rwlock_t ranges_lock;
    struct cumux_ranges dev_ranges;    /* tag: device ordinal + 1 | SHIM_RANGE_GLOBAL; extra: its context */
    struct cumux_ranges pinned_ranges; /* client address; extra: the server's address of the same memory */
    struct cumux_ranges va_reserved;   /* device address ranges held here, without access (memory.c) */
    struct CUctx_st *primary[CUMUX_MAX_DEVICES];
    int primary_refs[CUMUX_MAX_DEVICES];
    unsigned primary_flags[CUMUX_MAX_DEVICES];
    pthread_mutex_t ctx_lock;
    struct CUmemPoolHandle_st *default_pool[CUMUX_MAX_DEVICES];
    struct CUmemPoolHandle_st *current_pool[CUMUX_MAX_DEVICES];
};

extern struct shim_state shim;

/* connection.c */
CUresult shim_require_init(void);
/* Before a path that uses the ring or the staging slots directly (not shim_call / shim_send): a channel
 * whose worker failed is replaced first when it can be (a resume), else its error. */
CUresult shim_check_channel(void);
/* The worker went while a call was under way (its answer never came, or the ring or a staging slot never
 * freed): what it asked for may not have happened. A program that can come back does, and the call says
 * CUDA_ERROR_LAUNCH_FAILED, as lost work does; otherwise the fault's error (or the lost connection's). */
CUresult shim_in_flight_lost(void);
/* An answer's result as the server gave it; a fatal one is remembered: the program was told its context
 * failed, and it does not come back after the worker goes (connection.c resume). */
CUresult shim_answer(CUresult r);
/* What a resume found lost, from the failed worker's channel (connection.c): nothing unless `any`; with
 * `all`, the work of every stream; else that of the streams whose handles (the failed worker's) have their
 * bits set in `streams`: those say CUDA_ERROR_LAUNCH_FAILED once, with the events last recorded on them
 * and the contexts holding them; the rest are spared. */
struct shim_lost_work {
    bool any, all;
    uint64_t streams[CUMUX_LOST_STREAM_WORDS];
};
static inline bool shim_lost_stream(const struct shim_lost_work *lw, uint32_t handle)
{
    if (!lw->any)
        return false;
    handle = CUMUX_HANDLE_INDEX(handle); /* each channel tells its own streams by index */
    if (lw->all || handle >= CUMUX_LOST_STREAM_WORDS * 64)
        return true;
    return lw->streams[handle / 64] >> (handle % 64) & 1;
}
/* What is made again in the worker that took over after a resume (shim/resume.c registers it); it also
 * moves shim_lost_epoch on when lw->any, sparing what lost nothing. after_move: what is made again with
 * another GPU's worker when the program binds to that GPU (shim_gpu_route): what names no GPU. */
void shim_set_rebuild(CUresult (*rebuild)(const struct shim_lost_work *lw), CUresult (*after_move)(void));
/* How this thread waits for the server's answers (connection.c): as its current context's scheduling
 * flags say (context.c registers the lookup), unless CUMUX_WAIT=auto|spin|yield|block says for the whole
 * program. */
void shim_set_wait_mode_lookup(enum cumux_wait_mode (*lookup)(void));
enum cumux_wait_mode shim_wait_mode(void);
/* Before the objects get the new worker's handles: which lost work (the `spared` flags; `unclaimed`: the
 * bits of lost streams not known as the program's own or legacy streams, cleared as they are claimed:
 * those left are per-thread streams). Then, after a successful rebuild, the words of those spared catch
 * up with `next`, the epoch about to begin (a word behind from an earlier resume stays behind). */
void shim_contexts_note_lost(const struct shim_lost_work *lw, uint64_t *unclaimed);
void shim_streams_note_lost(const struct shim_lost_work *lw, uint64_t *unclaimed);
void shim_contexts_spare(uint32_t next, bool ptds_spared);
void shim_streams_spare(uint32_t next);
/* After a resume: the contexts (context.c: primary ones and the program's own) and default pools (pool.c)
 * get the new worker's handles; the streams and events (stream.c) and modules, libraries and their
 * functions (module.c) the program made are made again there. */
CUresult shim_contexts_rebind(void);
CUresult shim_pools_rebind(void);
CUresult shim_streams_rebind(unsigned *streams, unsigned *events);
CUresult shim_modules_rebind(unsigned *modules, unsigned *functions);
/* After a resume: pinned and registered host memory shared again with the new worker (memory.c). */
CUresult shim_host_rebind(unsigned *count);
/* Before a message naming GPU *gpu (the spec's `gpu` fields; the generated helpers call it): the program is
 * bound to that GPU's worker (the first time, its channel moved there if it was another's), and *gpu
 * becomes the server's number of it. CUDA_ERROR_NOT_SUPPORTED for a second GPU: one per program so far. */
CUresult shim_gpu_route(int32_t *gpu);
/* What the server's driver said of the link from program device d to peer: CUdevice_P2PAttribute attr
 * (1-5), CUMUX_ATTR_MISSING for none (device.c). */
int shim_peer_attribute(CUdevice d, CUdevice peer, int attr);
/* peer.c: the cuMemAlloc allocation holding p viewed by server GPU gpu's worker (now or before; false: it
 * cannot be); an allocation's views closed before it is freed; a new allocation of GPU gpu viewed by the
 * GPUs that enabled peer access to it; the views of a parent, forgotten in its child. */
bool shim_peer_view(uint64_t p, int gpu);
void shim_peer_forget(uint64_t base);
void shim_peer_allocated(uint64_t base, int gpu);
void shim_peer_reset(void);
/* The program's number of the server's GPU g, or -1 when the program does not see it (device.c). */
int shim_program_gpu(int g);
/* A round trip: send op with body (+payload), wait for the answer; reply data (up to cap bytes) into reply.
 * Sent to the worker the message names (shim_chan_route). */
CUresult shim_call(uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap, uint32_t *reply_len);
/* One-way: nothing comes back; an error surfaces at the next synchronizing call. */
CUresult shim_send(uint16_t op, const void *body, size_t body_len, const void *payload, size_t payload_len);
/* The same on a given channel. */
CUresult shim_call_on(struct shim_chan *ch, uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap,
                      uint32_t *reply_len);
CUresult shim_send_on(struct shim_chan *ch, uint16_t op, const void *body, size_t body_len, const void *payload,
                      size_t payload_len);
/* A descriptor, then the round trip of op, on the channel the message names (a module's image, host memory
 * to share, a link input). */
CUresult shim_call_fd(int fd, uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap,
                      uint32_t *reply_len);
/* Which channel (connection.c): a program using one GPU has only shim.main. The worker of the handles a
 * message names (shim/generated/routes.h), of its GPU field or its device address, else of the calling
 * thread's current context; of a handle, of a device address (its allocation's GPU), of a GPU (the
 * server's number), of the current context. */
struct shim_chan *shim_chan_route(uint16_t op, const void *body, size_t len);
struct shim_chan *shim_chan_of_handle(uint32_t handle);
struct shim_chan *shim_chan_of_ptr(uint64_t p);
struct shim_chan *shim_chan_of_gpu(int gpu);
struct shim_chan *shim_current_chan(void);
/* The channels of further GPUs (gpus.c opens them), by the server's number of the GPU, and their count. */
extern _Atomic int shim_extra_count;
extern _Atomic(struct shim_chan *) shim_extra_chans[CUMUX_MAX_DEVICES];
bool shim_chan_alive(struct shim_chan *ch);
/* gpus.c: whether the program has channels of further GPUs; a channel to server GPU gpu (the program's
 * program_gpu) opened, if not yet; a child's letting go of its parent's. connection.c: a new client of
 * GPU gpu's worker in *ch (its socket, shared memory and id). */
bool shim_several_gpus(void);
CUresult shim_gpu_open(int gpu, int program_gpu);
void shim_gpus_forget(void);
/* gpus.c registers these with connection.c at load (a constructor), so that the files do not call each
 * other in a circle. */
struct shim_gpus_ops {
    struct shim_chan *(*route)(uint16_t op, const void *body, size_t len);
    CUresult (*open)(int gpu, int program_gpu);
    bool (*several)(void);
    void (*forget)(void);
};
void shim_set_gpus_ops(const struct shim_gpus_ops *ops);
CUresult shim_connect_gpu(int gpu, int program_gpu, struct shim_chan *ch);
/* A new channel's first messages: INIT (its answer, at least the reply's size of it, in buf and *rep) and
 * what the program says of itself for its GPU program_gpu (CLIENT_INFO). */
CUresult shim_chan_hello(struct shim_chan *ch, int program_gpu, uint8_t *buf, uint32_t cap, struct cumux_init_reply *rep,
                         uint32_t *len);
/* requests.c: what the program says of itself to a GPU's worker (program_gpu: its number of the GPU), and
 * the device memory limit it asks for on its GPU dev (0: none; -1, logged: its variable is malformed). */
void shim_client_info(int program_gpu, struct cumux_client_info *info);
int shim_requested_memory_limit(int dev, uint64_t *bytes);
/* shim_check_channel and shim_in_flight_lost of any channel (a further GPU's does not come back), and a wait
 * for the answer in slot of a message sent there by hand. */
CUresult shim_chan_check(struct shim_chan *ch);
CUresult shim_chan_in_flight_lost(struct shim_chan *ch);
int shim_chan_reply_wait(struct shim_chan *ch, struct cumux_reply_slot *slot, uint32_t before);
/* shim_op_<op>(): both, for every op whose marshalling needs no judgement (from common/protocol.spec). */
#include "shim/generated/calls.h"
/* Room for a message in the ring, waiting while it is full; NULL (and *err) when the server is gone.
 * The caller holds ring_lock. */
void *shim_ring_reserve(uint32_t size, CUresult *err);
void *shim_ring_reserve_on(struct shim_chan *ch, uint32_t size, CUresult *err);
/* One-way message written in place: begin returns where body_len bytes go (ring lock held), end publishes. */
void *shim_send_begin(uint16_t op, size_t body_len, CUresult *err);
void *shim_send_begin_on(struct shim_chan *ch, uint16_t op, size_t body_len, CUresult *err);
/* Under ring_lock: the message of op, size bytes, is in the ring; counts it (shim_work_seq) unless it is a
 * completion question (stream query or synchronize, context synchronize), whose place among the work
 * messages this thread then finds in shim_question_seq. */
void shim_ring_commit(uint16_t op, uint32_t size);
void shim_ring_commit_on(struct shim_chan *ch, uint16_t op, uint32_t size);
extern _Atomic uint64_t shim_work_seq;
extern _Thread_local uint64_t shim_question_seq;
/* Whether the answer that set seq (shim_idle) still holds: no work sent since, the server there. */
bool shim_idle_still(uint64_t seq);
/* marks.c: whether the completion marks the server told say that a stream (by its handle), or every
 * stream of a context, has ended all its work, with nothing sent since: the question needs no round trip. */
bool shim_marks_stream_idle(uint32_t stream);
bool shim_marks_ctx_idle(uint32_t ctx);
void shim_send_end(void);
/* Send a descriptor over the socket for the next command (HOST_ALLOC, MODULE_LOAD); the caller holds
 * sock_lock from here until that command is sent. */
CUresult shim_send_fd(int fd);
/* The descriptor the server sent before answering the caller's last call, or -1 (sock_lock held). */
int shim_recv_fd_on(struct shim_chan *ch);
/* A memfd the server can seal, holding those bytes (an image, a link input); -1 on failure. */
int shim_sealable_memfd(const char *name, const void *data, size_t size);
/* Reply slot of the calling thread (for commands that need the slot for more than one answer). */
int shim_reply_slot(void);
bool shim_server_alive(void);
/* The error of a call that lost the server: the fatal GPU error it reported (shm.server_fault), if any. */
CUresult shim_lost_error(void);

/* context.c */
struct CUctx_st *shim_current_ctx(void);
/* The server stream for a CUstream of the calling thread (NULL, legacy and per-thread handles resolved). */
CUresult shim_resolve_stream(CUstream h, uint32_t *out, struct CUctx_st **ctx_out);
/* Before a launch of f in ctx: the server's copy of f is given the cache preference in effect, if that
 * changed (module.c). */
CUresult shim_cache_config_sync(struct CUfunc_st *f, const struct CUctx_st *ctx);
/* module.c: a question about f (op, message, a u64 answer) answered by the shim when asked before with f's
 * attributes and cache preference as they are now (occupancy) */
CUresult shim_function_question(struct CUfunc_st *f, uint16_t op, const void *m, size_t len, uint64_t *answer);
CUresult shim_need_ctx(struct CUctx_st **out);
/* f as it runs on the server's GPU gpu: f itself where it was made, a library kernel's copy loaded there
 * at its first use (module.c); CUDA_ERROR_INVALID_HANDLE for a module's function on another GPU. */
CUresult shim_function_on_gpu(struct CUfunc_st *f, int gpu, struct CUfunc_st **out);
/* f as program device dev has it (dev < 0: the calling thread's current context's; f itself when none is
 * current or the program uses one GPU). */
CUresult shim_function_for(struct CUfunc_st *f, int dev, struct CUfunc_st **out);
/* copy.c: a 2-D copy between host and device memory (array.c's cuMemcpy2D hands it those) */
CUresult shim_copy_2d(const CUDA_MEMCPY2D *p, CUstream hs, bool sync);
/* cuStreamGetId of the legacy or a per-thread default stream. */
CUresult shim_default_stream_id(CUstream h, unsigned long long *id);
extern _Atomic uint64_t shim_next_stream_id;

/* pcopy.c: memcpy of large blocks spread over helper threads */
void shim_memcpy(void *dst, const void *src, size_t len);

/* context.c: storage that lives as long as a context (export table CONTEXT_LOCAL_STORAGE) */
typedef void (*cls_dtor)(CUcontext ctx, void *key, void *value);
CUresult shim_cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor);
CUresult shim_cls_delete(CUcontext ctx, void *key);
CUresult shim_cls_get(void **value, CUcontext ctx, void *key);

/* hostfn.c; shim_hostfn_watch: a thread runs the host functions a further GPU's worker posts on ch */
void shim_hostfn_watch(struct shim_chan *ch);
uint64_t shim_hostfn_register(CUhostFn fn, void *data, bool persistent);
bool shim_hostfn_lookup(uint64_t id, CUhostFn *fn, void **data);
/* handle_table.c: a table of objects by server handle, grown as handles come; the caller locks it. */
struct shim_table {
    void **v;
    uint32_t cap;
};
/* The slot of `handle` (NULL when none), the table grown to hold it; NULL when memory runs out. */
void **shim_table_slot(struct shim_table *t, uint32_t handle);
/* The place of `handle` in a table's v[] (its index and its worker's GPU). */
uint32_t shim_table_key(uint32_t handle);
/* The object in the slot of `handle`, or NULL (the caller locks the table). */
void *shim_table_get(const struct shim_table *t, uint32_t handle);
/* Every object of a kind the program made, in order (objects are never freed: dead ones stay marked), to
 * make them again after a resume. shim_list_add takes the list's lock; a reader holds it while it walks. */
struct shim_list {
    void **v;
    size_t n, cap;
    pthread_mutex_t lock;
};
#define SHIM_LIST_INIT {NULL, 0, 0, PTHREAD_MUTEX_INITIALIZER}
void shim_list_add(struct shim_list *l, void *p);
/* array.c: how many arrays, texture and surface objects the program holds. They do not come back after
 * another program's fault: an array's contents are the failed worker's memory, and a texture or surface
 * object's value, which kernels take as an argument, is the failed context's. */
unsigned shim_arrays_live(void);
unsigned shim_module_globals_asked(void);
/* ipc.c: how many other programs' allocations this one holds open (cuIpcOpenMemHandle). It does not come
 * back after a fault either: the new worker knows nothing of what the failed one shared, and the owner
 * may not come back for that memory. */
unsigned shim_ipc_opened_live(void);
/* module.c: the function object of a server function handle, or NULL */
struct CUfunc_st *shim_function_of(uint32_t handle);
/* stream.c: events by server handle (event objects are never freed): remember one; the live one of a
 * handle, or NULL */
void shim_event_remember(struct CUevent_st *e);
struct CUevent_st *shim_event_of(uint32_t handle);

/* stream.c: the captures open in this process, counted by graph.c (a begin +1 before it is sent and -1 if
 * refused, an end that succeeded -1; an end that failed makes every later query ask the server). While none
 * can be open, capture queries are answered here. */
void shim_capture_counted(int delta);
void shim_capture_unsure(void);
bool shim_capture_possible(void);
CUresult shim_capture_status(uint32_t stream, CUstreamCaptureStatus *status, cuuint64_t *id);

/* answers.c: answers the server gave to questions whose answer is a pure function of the question, given
 * again by the shim (tensor maps, occupancy). kind: the question's op; key: every byte the answer depends
 * on, padding zeroed. Only successes are stored. */
enum { SHIM_ANSWER_KEY_MAX = 304, SHIM_ANSWER_VALUE_MAX = 128 };
bool shim_answer_lookup(uint16_t kind, const void *key, size_t key_len, void *value, size_t value_len);
void shim_answer_store(uint16_t kind, const void *key, size_t key_len, const void *value, size_t value_len);

/* memory.c */
bool shim_is_device_ptr(uint64_t p, uint64_t len);
/* The program's GPU of the device memory at p (its allocation's context's), or -1 when p is none known. */
int shim_ptr_device(uint64_t p);
/* The context the device memory at p was allocated in (or mapped into), or NULL. */
struct CUctx_st *shim_ptr_ctx(uint64_t p);
/* The server's address of [p, p+len) when it lies in pinned memory from the server; 0 otherwise. */
uint64_t shim_pinned_server_addr(const void *p, uint64_t len);
/* The reverse: the program's address of a server address of its pinned memory, or 0. */
uint64_t shim_pinned_client_addr(uint64_t a);
/* Take an allocation (not a module global) out of the shim's table; false when p starts none. A graph's
 * allocation stays: its address is the program's while the graph lives, freed or not. */
bool shim_forget_device_range(uint64_t p);
#define SHIM_RANGE_GLOBAL (1ull << 32) /* not cuMemFree's to free: a module global, IPC or VMM memory */
#define SHIM_RANGE_VMM (1ull << 33)    /* VMM: back-to-back mappings are one span, as in CUDA */
#define SHIM_RANGE_GRAPH (1ull << 34)  /* a graph's allocation (captured, or an allocation node) */
void shim_add_device_range(uint64_t base, uint64_t size, struct CUctx_st *ctx, uint64_t flags);
/* Device addresses held in this process (no access, no memory) so that none of its memory lands there:
 * every device range does it; a VMM reservation does it before its mappings come (memory.c). */
void shim_hold_device_va(uint64_t base, uint64_t size);

#endif
