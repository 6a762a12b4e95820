/* The cumux wire protocol: what travels between a client's shim and the server.
 *
 * Two paths per client:
 *  - the Unix socket: the hello/welcome exchange at connect time, and file descriptors (shared memory of
 *    pinned host allocations, module images) that accompany some commands. Its closing tells the server
 *    that the client is gone.
 *  - the shared-memory channel (struct cumux_shm, made by the server): a ring of commands written by the
 *    client and read by the client's worker thread in the server, one reply slot per client thread, and
 *    staging buffers for copies of pageable memory.
 * Every command is a struct cumux_msg_hdr followed by the body of its op. Ops whose hdr.reply is
 * CUMUX_NO_REPLY are one-way (invariant 2); the others are answered in reply slot hdr.reply.
 * The server copies each message out of the ring before reading it, and checks its size and every
 * field: the client is not trusted (invariant 3). */
#ifndef CUMUX_PROTO_H
#define CUMUX_PROTO_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#define CUMUX_MAGIC 0x584d5543u /* "CUMX" */
#define CUMUX_PROTO_VERSION 1u

/* ---- socket: hello and welcome ---- */
enum cumux_hello_kind {
    CUMUX_HELLO_CLIENT = 1, /* a shim: wants a channel and a worker */
    CUMUX_HELLO_STATUS = 2, /* the CLI: wants a status report as text */
    CUMUX_HELLO_STOP = 3,   /* the CLI: asks the server to stop */
};

struct cumux_hello {
    uint32_t magic;
    uint32_t version;
    uint32_t kind;
    uint32_t flags;
};

/* hello flags */
#define CUMUX_HELLO_STDOUT 1u /* CLIENT: the client's stdout comes with the hello, for device printf */

struct cumux_welcome {
    uint32_t magic;
    uint32_t version;
    int32_t status; /* 0 or a CUresult */
    uint32_t client_id;
    uint64_t shm_size; /* the shm descriptor comes with this message */
    uint64_t text_len; /* STATUS: that many bytes of text follow */
    char message[192];
};

/* ---- shared memory layout ---- */
#define CUMUX_RING_BYTES (4u << 20)
#define CUMUX_MAX_MSG (64u << 10)
#define CUMUX_REPLY_SLOTS 128
#define CUMUX_REPLY_DATA (32u << 10)
#define CUMUX_STAGING_SLOTS 4
#define CUMUX_STAGING_BYTES (8u << 20)
#define CUMUX_NO_REPLY 0xffffu
#define CUMUX_HOSTFN_RING 256

/* Staging slot states (futex words). H2D: FREE -> (client fills) FULL -> (server's DMA done) FREE.
 * D2H: FREE -> (server's DMA done) READY -> (client copied out) FREE. */
enum { CUMUX_STAGE_FREE = 0, CUMUX_STAGE_FULL = 1, CUMUX_STAGE_READY = 2 };

struct cumux_reply_slot {
    _Atomic uint32_t seq;     /* futex word: the server adds one when the reply is complete */
    _Atomic uint32_t waiting; /* the client thread sleeps on seq: the server must wake it */
    int32_t result;           /* CUresult */
    uint32_t len;             /* bytes of data */
    alignas(16) uint8_t data[CUMUX_REPLY_DATA];
};

struct cumux_shm {
    uint32_t magic;
    uint32_t version;
    uint64_t size;
    alignas(64) _Atomic uint64_t head; /* bytes the client has written into the ring */
    alignas(64) _Atomic uint64_t tail; /* bytes the server has taken out */
    alignas(64) _Atomic uint32_t doorbell;        /* futex word the worker sleeps on */
    _Atomic uint32_t server_sleeping;             /* set while it sleeps: the client rings */
    alignas(64) _Atomic uint32_t stage_state[CUMUX_STAGING_SLOTS];
    _Atomic uint32_t stage_seq[CUMUX_STAGING_SLOTS]; /* bumped on every state change, futex word */
    /* Host functions (cuLaunchHostFunc): when a stream reaches one, the server posts its id here and
     * waits until the client's callback thread has run it. */
    alignas(64) _Atomic uint32_t hostfn_posted; /* futex word: ids posted so far */
    _Atomic uint32_t hostfn_done;               /* futex word: ids run so far */
    uint64_t hostfn_ids[CUMUX_HOSTFN_RING];
    alignas(64) struct cumux_reply_slot replies[CUMUX_REPLY_SLOTS];
    alignas(4096) uint8_t ring[CUMUX_RING_BYTES];
    alignas(4096) uint8_t staging[CUMUX_STAGING_SLOTS][CUMUX_STAGING_BYTES];
};

/* ---- commands ---- */
struct cumux_msg_hdr {
    uint16_t op;
    uint16_t reply; /* reply slot, or CUMUX_NO_REPLY */
    uint32_t size;  /* header + body (+ payload), a multiple of 8 */
};

/* Every op: name, body struct, one-way or answered. The server's dispatch table and its size checks
 * come from this list, so an op cannot be added without its validation. */
#define CUMUX_OPS(X)                                                                                   \
    X(PAD, cumux_none, 1)                                                                              \
    X(INIT, cumux_none, 0)                                                                             \
    X(CTX_CREATE, cumux_ctx_create, 0)                                                                 \
    X(CTX_DESTROY, cumux_handle_arg, 0)                                                                \
    X(CTX_SYNC, cumux_handle_arg, 0)                                                                   \
    X(CTX_LIMIT, cumux_ctx_limit, 0)                                                                   \
    X(MEM_ALLOC, cumux_mem_alloc, 0)                                                                   \
    X(MEM_FREE, cumux_mem_free, 0)                                                                     \
    X(MEM_INFO, cumux_handle_arg, 0)                                                                   \
    X(HOST_ALLOC, cumux_host_alloc, 0)                                                                 \
    X(HOST_FREE, cumux_mem_free, 0)                                                                    \
    X(MODULE_LOAD, cumux_module_load, 0)                                                               \
    X(MODULE_UNLOAD, cumux_handle_arg, 0)                                                              \
    X(MODULE_GET_FUNCTION, cumux_module_symbol, 0)                                                     \
    X(MODULE_GET_GLOBAL, cumux_module_symbol, 0)                                                       \
    X(LIBRARY_GET_MODULE, cumux_module_symbol, 0)                                                      \
    X(MODULE_FUNCTION_NAMES, cumux_handle_arg, 0)                                                      \
    X(ARCH_DATA, cumux_handle_arg, 0)                                                                  \
    X(FUNC_GET_ATTRIBUTE, cumux_func_attr, 0)                                                          \
    X(FUNC_SET_ATTRIBUTE, cumux_func_attr, 0)                                                          \
    X(FUNC_OCCUPANCY, cumux_func_occupancy, 0)                                                         \
    X(FUNC_CLUSTER_OCCUPANCY, cumux_launch, 0)                                                         \
    X(STREAM_CREATE, cumux_stream_create, 0)                                                           \
    X(STREAM_DESTROY, cumux_handle_arg, 1)                                                             \
    X(STREAM_SYNC, cumux_handle_arg, 0)                                                                \
    X(STREAM_QUERY, cumux_handle_arg, 0)                                                               \
    X(STREAM_WAIT_EVENT, cumux_stream_wait_event, 1)                                                   \
    X(EVENT_CREATE, cumux_event_create, 0)                                                             \
    X(EVENT_DESTROY, cumux_handle_arg, 1)                                                              \
    X(EVENT_RECORD, cumux_event_record, 1)                                                             \
    X(EVENT_QUERY, cumux_handle_arg, 0)                                                                \
    X(EVENT_SYNC, cumux_handle_arg, 0)                                                                 \
    X(EVENT_ELAPSED, cumux_event_elapsed, 0)                                                           \
    X(COPY, cumux_copy, 2)                                                                             \
    X(COPY_2D, cumux_copy_2d, 2)                                                                       \
    X(COPY_HTOD_STAGED, cumux_copy_staged, 1)                                                          \
    X(COPY_DTOH_STAGED, cumux_copy_staged, 0)                                                          \
    X(MEMSET, cumux_memset, 1)                                                                         \
    X(LAUNCH, cumux_launch, 1)                                                                         \
    X(POOL_DEFAULT, cumux_pool_op, 0)                                                                  \
    X(POOL_CREATE, cumux_pool_op, 0)                                                                   \
    X(POOL_DESTROY, cumux_pool_op, 0)                                                                  \
    X(POOL_ATTRIBUTE, cumux_pool_op, 0)                                                                \
    X(POOL_TRIM, cumux_pool_op, 0)                                                                     \
    X(MEM_ALLOC_ASYNC, cumux_mem_alloc_async, 0)                                                       \
    X(MEM_FREE_ASYNC, cumux_mem_free_async, 1)                                                        \
    X(HOST_FUNC, cumux_host_func, 1)                                                                   \
    X(CAPTURE_BEGIN, cumux_graph_op, 0)                                                                \
    X(CAPTURE_END, cumux_graph_op, 0)                                                                  \
    X(CAPTURE_INFO, cumux_graph_op, 0)                                                                 \
    X(GRAPH_CREATE, cumux_graph_op, 0)                                                                 \
    X(GRAPH_DESTROY, cumux_graph_op, 1)                                                                \
    X(GRAPH_INSTANTIATE, cumux_graph_op, 0)                                                            \
    X(GRAPH_EXEC_DESTROY, cumux_graph_op, 1)                                                           \
    X(GRAPH_LAUNCH, cumux_graph_op, 1)                                                                 \
    X(GRAPH_UPLOAD, cumux_graph_op, 1)                                                                 \
    X(GRAPH_EXEC_UPDATE, cumux_graph_op, 0)                                                            \
    X(GRAPH_ADD_NODE, cumux_graph_node, 0)                                                             \
    X(GRAPH_SET_NODE, cumux_graph_node, 0)                                                             \
    X(GRAPH_ADD_DEPS, cumux_graph_node, 0)                                                             \
    X(GRAPH_QUERY, cumux_graph_node, 0)

/* oneway: 1 = must be one-way, 0 = must be answered, 2 = either (a synchronous copy is answered). */

enum cumux_op {
#define CUMUX_OP_ENUM(name, body, oneway) CUMUX_OP_##name,
    CUMUX_OPS(CUMUX_OP_ENUM)
#undef CUMUX_OP_ENUM
    CUMUX_OP_COUNT
};

struct cumux_none {
    uint64_t unused_;
};

/* Handles are small integers, per client, chosen by the server; 0 is never valid. */
struct cumux_handle_arg {
    uint32_t handle;
    uint32_t flags;
};

/* CTX_DESTROY flags: a reset of a primary context (its libraries are loaded afresh). */
#define CUMUX_CTX_DESTROY_RESET 1u

struct cumux_ctx_create {
    int32_t device;
    uint32_t flags;
};

struct cumux_ctx_limit {
    uint32_t ctx;
    uint32_t limit; /* CUlimit */
    uint32_t set;
    uint32_t pad;
    uint64_t value;
};

struct cumux_mem_alloc {
    uint32_t ctx;
    uint32_t pad;
    uint64_t size;
};

struct cumux_mem_free {
    uint64_t ptr;
};

/* Memory pools: each client has its own default pool per device, so that its attributes (release
 * threshold...) and its memory are its own. */
struct cumux_pool_op {
    uint32_t pool;   /* handle; DEFAULT/CREATE: unused */
    int32_t device;  /* DEFAULT/CREATE */
    int32_t attr;    /* ATTRIBUTE: CUmemPool_attribute */
    uint32_t set;    /* ATTRIBUTE: 1 to set */
    uint64_t value;  /* ATTRIBUTE: the value; TRIM: bytes to keep; CREATE: maximum size (0: default) */
};

struct cumux_mem_alloc_async {
    uint32_t stream;
    uint32_t pool;
    uint64_t size;
};

struct cumux_mem_free_async {
    uint32_t stream;
    uint32_t pad;
    uint64_t ptr;
};

/* A host function to run in the client when the stream reaches this point. */
struct cumux_host_func {
    uint32_t stream;
    uint32_t pad;
    uint64_t id; /* the client's own number for the function and its argument */
};

/* CUDA graphs: built and run in the server (stream capture happens there, on the client's real stream). */
struct cumux_graph_op {
    uint32_t graph;
    uint32_t exec;
    uint32_t stream;
    uint32_t mode; /* CAPTURE_BEGIN: CUstreamCaptureMode */
    uint64_t flags;
};

struct cumux_capture_info {
    uint32_t status; /* CUstreamCaptureStatus */
    uint32_t pad;
    uint64_t id;
};

enum cumux_node_kind {
    CUMUX_NODE_EMPTY = 0,
    CUMUX_NODE_KERNEL = 1, /* payload: struct cumux_launch (stream unused) and the packed arguments */
    CUMUX_NODE_MEMSET = 2, /* payload: struct cumux_memset (stream unused) */
    CUMUX_NODE_MEMCPY = 3, /* payload: struct cumux_copy_2d (stream unused), pinned host by server address */
    CUMUX_NODE_HOST = 4,   /* host_fn_id */
};

/* GRAPH_QUERY: kind 0, the nodes of graph; kind 1, the dependencies of node. The reply is a count (u64)
 * followed by that many u32 node handles (as many as fit). */
/* ADD_NODE: ndeps dependency handles follow, then the kind's payload. SET_NODE: a kernel node's new
 * parameters, in its graph (exec 0) or in an instantiated graph. ADD_DEPS: ndeps "from" handles, then
 * ndeps "to" handles. Handle lists are padded to 8 bytes. */
struct cumux_graph_node {
    uint32_t graph;
    uint32_t exec;
    uint32_t node;
    uint32_t kind; /* cumux_node_kind */
    uint32_t ndeps;
    uint32_t pad;
    uint64_t host_fn_id;
};

struct cumux_host_alloc {
    uint64_t size; /* the memfd comes over the socket just before this command */
    uint32_t flags; /* CU_MEMHOSTALLOC_* */
    uint32_t pad;
    uint64_t client_addr; /* where the client mapped it (a hint for the same address) */
};

enum cumux_image_kind { CUMUX_IMAGE_MODULE = 1, CUMUX_IMAGE_LIBRARY = 2 };

struct cumux_module_load {
    uint32_t ctx;
    uint32_t kind; /* cumux_image_kind */
    uint64_t size; /* the image's memfd comes over the socket just before this command */
};

#define CUMUX_NAME_MAX 1024
struct cumux_module_symbol {
    uint32_t module;
    uint32_t ctx;
    char name[CUMUX_NAME_MAX]; /* NUL-terminated */
};

#define CUMUX_MAX_PARAMS 1024
/* Reply to MODULE_GET_FUNCTION: the kernel's handle and its parameter layout, so launches need no
 * further round trip. Followed by nparams (offset, size) pairs. */
struct cumux_function_info {
    uint32_t function;
    uint32_t nparams;
    uint32_t param_bytes;
    uint32_t pad;
};

struct cumux_param_layout {
    uint32_t offset;
    uint32_t size;
};

/* Reply to MODULE_FUNCTION_NAMES (handle: the module, flags: the index of the first name wanted): how
 * many functions (kernels, for a library) the module has, then `count` NUL-terminated names from that
 * index on, as many as fit. */
struct cumux_function_names {
    uint32_t total;
    uint32_t count;
};

/* Reply to ARCH_DATA (handle: a device ordinal): the lengths of the device's two architecture tables
 * (export table 1734dc26..., server/arch_data.c), then their bytes. */
struct cumux_arch_data {
    uint32_t len[2];
};

struct cumux_global_info {
    uint64_t ptr;
    uint64_t size;
};

struct cumux_func_attr {
    uint32_t function;
    int32_t attr;
    int32_t value;
    uint32_t pad;
};

enum cumux_occupancy_query {
    CUMUX_OCC_MAX_ACTIVE_BLOCKS = 0,  /* a: block size; reply: blocks per SM */
    CUMUX_OCC_AVAILABLE_DYN_SMEM = 1, /* a: blocks per SM, b: block size; reply: bytes */
};

struct cumux_func_occupancy {
    uint32_t function;
    uint32_t query; /* cumux_occupancy_query */
    int32_t a;
    int32_t b;
    uint64_t dyn_smem;
    uint32_t flags;
    uint32_t pad;
};

struct cumux_stream_create {
    uint32_t ctx;
    uint32_t flags;
    int32_t priority;
    uint32_t pad;
};

struct cumux_stream_wait_event {
    uint32_t stream;
    uint32_t event;
    uint32_t flags;
    uint32_t pad;
};

struct cumux_event_create {
    uint32_t ctx;
    uint32_t flags;
};

struct cumux_event_record {
    uint32_t event;
    uint32_t stream;
    uint32_t flags;
    uint32_t pad;
};

struct cumux_event_elapsed {
    uint32_t start;
    uint32_t end;
};

enum cumux_copy_kind {
    CUMUX_COPY_HTOD = 1, /* src: pinned host memory of this client (server address) */
    CUMUX_COPY_DTOH = 2, /* dst: pinned host memory of this client (server address) */
    CUMUX_COPY_DTOD = 3,
};

struct cumux_copy {
    uint32_t kind;
    uint32_t stream;
    uint64_t dst;
    uint64_t src;
    uint64_t size;
};

struct cumux_copy_staged {
    uint32_t stream;
    uint32_t slot; /* HTOD: the staging slot that holds the data */
    uint64_t dev;  /* HTOD: destination, DTOH: source */
    uint64_t size; /* HTOD: at most CUMUX_STAGING_BYTES */
    /* 2-D copies: rows of `width` bytes, `pitch` apart on the device, packed in the staging slots.
     * width 0: a 1-D copy. */
    uint64_t width;
    uint64_t pitch;
};

/* A 2-D copy between device memory and device or pinned host memory (cuMemcpy2D). */
struct cumux_copy_2d {
    uint32_t kind; /* cumux_copy_kind */
    uint32_t stream;
    uint64_t dst;
    uint64_t dst_pitch;
    uint64_t src;
    uint64_t src_pitch;
    uint64_t width; /* bytes per row */
    uint64_t height;
};

struct cumux_memset {
    uint32_t stream;
    uint32_t elem_size; /* 1, 2 or 4 */
    uint64_t dst;
    uint64_t pitch; /* bytes between rows; 0 for 1-D */
    uint64_t width; /* elements per row */
    uint64_t height;
    uint32_t value;
    uint32_t pad;
};

/* LAUNCH: this body, then attrs[nattrs], then the packed parameter buffer (param_bytes). */
struct cumux_launch {
    uint32_t function;
    uint32_t stream;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;
    uint32_t param_bytes;
    uint32_t nattrs; /* cuLaunchKernelEx attributes that carry plain values */
    uint32_t query;  /* FUNC_CLUSTER_OCCUPANCY: 0 max active clusters, 1 max potential cluster size */
};

struct cumux_launch_attr {
    uint32_t id; /* CUlaunchAttributeID */
    uint32_t pad;
    uint8_t value[64]; /* CUlaunchAttributeValue */
};

/* ---- replies ---- */
#define CUMUX_MAX_DEVICES 16
#define CUMUX_MAX_ATTRS 256
#define CUMUX_ATTR_MISSING INT32_MIN

struct cumux_device_info {
    char name[256];
    uint8_t uuid[16];
    uint64_t total_mem;
    int32_t attrs[CUMUX_MAX_ATTRS]; /* by CUdevice_attribute; CUMUX_ATTR_MISSING where the driver refused */
    char pci_bus_id[32];
    int32_t stream_priority_least;
    int32_t stream_priority_greatest;
};

struct cumux_init_reply {
    int32_t driver_version;
    int32_t device_count;
    uint32_t client_id;
    uint32_t pad;
    /* device_count struct cumux_device_info follow */
};

struct cumux_ctx_reply {
    uint32_t ctx;
    uint32_t legacy_stream;
};

struct cumux_mem_info {
    uint64_t free;
    uint64_t total;
};

struct cumux_u64_reply {
    uint64_t value;
};

#endif
