/* fakecuda: a CUDA driver that emulates GPUs (one, or CUMUX_FAKE_GPUS) in host memory, for cumuxd on machines without one
 * (docs/fake-driver.md). Internal declarations shared by the fake's files. */
#ifndef CUMUX_FAKECUDA_H
#define CUMUX_FAKECUDA_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every object handed out starts with a magic, so a wrong or stale handle is refused, not followed. */
enum {
    FC_MAGIC_STREAM = 0x5354524du,
    FC_MAGIC_EVENT = 0x4556454eu,
    FC_MAGIC_MODULE = 0x4d4f4455u,
    FC_MAGIC_LIBRARY = 0x4c494252u,
    FC_MAGIC_FUNC = 0x46554e43u,
    FC_MAGIC_POOL = 0x504f4f4cu,
    FC_MAGIC_GRAPH = 0x47524150u,
    FC_MAGIC_NODE = 0x4e4f4445u,
    FC_MAGIC_EXEC = 0x45584543u,
    FC_MAGIC_DEAD = 0xdeaddeadu,
};

#define FC_SM_COUNT 132
#define FC_CLOCK_KHZ 1980000 /* spin kernels turn cycles into time at this rate */

#define CHECK_RET(call)                                                                                \
    do {                                                                                               \
        CUresult r_ = (call);                                                                          \
        if (r_ != CUDA_SUCCESS)                                                                        \
            return r_;                                                                                 \
    } while (0)

/* ---- the oracle (fake_core.c): abort unless the range is wholly inside one live object ----
 * While work runs on a stream (fc_fault_env set by the executor), a bad access is not the server's doing:
 * a kernel follows the client's own pointers, and the client may free memory its queued work still uses
 * (even while that work runs: then the access itself faults, SIGSEGV on the freed pages). A GPU faults
 * then; so does the fake: the op stops there (siglongjmp to fc_fault_env) and the stream's next
 * synchronization reports CUDA_ERROR_ILLEGAL_ADDRESS. What a call names when it is made is checked then,
 * and a bad range there is the server's fault: abort. */
#include <setjmp.h>
extern _Thread_local sigjmp_buf *fc_fault_env;
_Noreturn void fc_oracle_fail(const char *call, uint64_t p, uint64_t n);
void fc_oracle_dev(const char *call, uint64_t p, uint64_t n);  /* device memory (allocation or global) */
void fc_oracle_host(const char *call, uint64_t p, uint64_t n); /* registered (pinned) host memory */
void fc_oracle_any(const char *call, uint64_t p, uint64_t n);  /* either: what a kernel may touch */
/* a*b and a+b saturated at UINT64_MAX: an overflowing span is out of every allocation, and says so */
uint64_t fc_mul_sat(uint64_t a, uint64_t b);
uint64_t fc_add_sat(uint64_t a, uint64_t b);

/* ---- device state (fake_core.c) ---- */
#define FC_MAX_GPUS 8
extern int fc_ngpus;          /* CUMUX_FAKE_GPUS (default 1), once cuInit has run */
bool fc_gpu_ok(int dev);      /* an ordinal of one of them */
int fc_current_device(void);  /* the current context's GPU (0 with none current) */
int fc_ctx_device(CUcontext c); /* a primary context's GPU, or -1 */
bool fc_peer_reachable(int dev); /* the current context may reach GPU dev's memory (its own, or peer access) */
int fc_mem_device(uint64_t p);   /* the GPU whose allocation holds p, or -1 */
CUresult fc_check_init(void);
bool fc_is_device_ptr(uint64_t p);
struct fc_gmem; /* a graph allocation's memory, counted (fake_graph.c) */
enum fc_alloc_kind { FC_ALLOC = 1, FC_GLOBAL = 2, FC_VMM = 3, FC_GMEM = 4 };
struct fc_pool;
CUresult fc_mem_alloc(uint64_t size, enum fc_alloc_kind kind, struct fc_pool *pool, uint64_t *out);
void fc_mem_release(uint64_t base); /* the stream reached the free: unmapped now */
CUresult fc_mem_free_begin(uint64_t base); /* a free is queued: a second one is an error */
bool fc_mem_stream_ordered(uint64_t p); /* pool memory: no stream memory operations on it */
void fc_fault_sticky(CUresult r); /* a fatal fault: every later call returns r */
struct fc_launch;
bool fc_coredump_fault(const struct fc_launch *l, uint32_t exception); /* a GPU coredump of that launch's
                                                                       * fault (an SM exception), if on */
void fc_fault_sticky_later(CUresult r, unsigned ms); /* the same, ms milliseconds from now */
/* A stream memory wait (cond: CU_STREAM_WAIT_VALUE_GEQ..NOR) and write, as a stream or a kernel runs them. */
void fc_wait_value(uint64_t addr, uint64_t want, bool wide, unsigned cond);
void fc_write_value(uint64_t addr, uint64_t v, bool wide);
/* Graph memory (fake_graph.c): an allocation node's op, made with its memory; whether ptr is graph memory
 * (freed by a free node or cuMemFreeAsync without effect: its graph holds it); a reference more or less. */
struct fc_op *fc_gmem_op(uint64_t size, CUresult *r);
/* Conditional nodes (fake_graph.c): an op's end, copy (the caller holds fc_graph_mu when op is a graph's)
 * and run; a launch's default values; a kernel's cudaGraphSetConditional (false: no such handle). */
void fc_cond_op_free(struct fc_op *op);
bool fc_cond_op_clone(struct fc_op *c, const struct fc_op *op);
void fc_cond_op_run(struct fc_op *op);
void fc_cond_launch_defaults(const struct fc_op *graph_op);
bool fc_cond_set(uint64_t handle, unsigned value);
bool fc_gmem_is(uint64_t ptr);
void fc_gmem_ref(struct fc_gmem *m);
void fc_gmem_unref(struct fc_gmem *m);
/* VMM (fake_vmm.c): device memory taken (+) or given back (-), and mapped ranges the oracle accepts. */
CUresult fc_mem_account(int dev, int64_t bytes); /* GPU dev's memory taken (bytes > 0) or given back */
/* Address space for VMM reservations, inside the device's (set at cuInit; inaccessible until mapped). */
extern uint64_t fc_vmm_va, fc_vmm_va_size;
int fc_dev_range_add(uint64_t base, uint64_t size);
void fc_dev_range_remove(uint64_t base);

/* ---- live counts, written to $CUMUX_FAKE_STATS ---- */
struct fc_stats {
    _Atomic long allocations, alloc_bytes, streams, events, modules, libraries, graphs, graph_execs,
        host_registered, pools, vmm_allocations, vmm_reservations, vmm_mappings, arrays, textures, green_ctxs;
    _Atomic long launches_by_kernel, launches_by_function; /* of library kernels (CUMUX_FAKE_LAUNCH_COUNTS) */
};
extern struct fc_stats fc_stats;
void fc_stats_start(void);

/* fake_green.c, fake_stream.c: the SMs of the green context a stream was made in (SM i is bit i); while an
 * op runs, fc_running_sms points at its stream's (NULL outside a green context: the whole device). */
struct fc_sms {
    uint64_t bits[3];
};
void fc_stream_set_sms(CUstream s, const struct fc_sms *sms);
bool fc_stream_in_green(CUstream s); /* whether s was made in a green context */
extern _Thread_local const struct fc_sms *fc_running_sms;

/* ---- work: one op per asynchronous call, run in stream order (fake_stream.c) ---- */
/* OP_EVENT_NODE: a graph's event record or wait node, made a record or a wait when the graph is launched. */
/* OP_MEMOP: one stream memory operation (a wait for a value, a write of one, a barrier).
 * OP_GMEM: a graph memory node: an allocation (its memory, shared by the copies of the node, exists from the
 * node's making until the last copy goes: an address fixed while the graph lives, as the driver's) or a
 * free (nothing to do). */
enum fc_op_kind {
    OP_KERNEL, OP_COPY, OP_MEMSET, OP_HOSTFN, OP_RECORD, OP_WAIT, OP_FREE, OP_GRAPH, OP_EMPTY, OP_EVENT_NODE, OP_MEMOP,
    OP_GMEM, OP_COND
};
/* OP_COND: a conditional node: its handle, kind and bodies: the node's own graphs in the graph's op
 * (bodies), copies of their ops in run order in an instance's (snap: OP_GRAPH ops). */
struct fc_cond;
struct fc_graph;

struct fc_func;
struct fc_event;
struct fc_stream;

struct fc_copy {
    CUmemorytype dtype, stype; /* HOST or DEVICE */
    uint64_t dst, src, dpitch, spitch;
    uint64_t dslice, sslice; /* rows per slice (3-D) */
    uint64_t width, height, depth;
};

struct fc_memset {
    uint64_t dst, pitch, width, height; /* width in elements */
    unsigned value, elem;
};

struct fc_op {
    enum fc_op_kind kind;
    const char *call; /* the driver call that made it, for the oracle's line */
    uint64_t seq;
    struct fc_op *next;
    /* Dispatch order across streams (fake_stream.c): the ticket of its submission; while it is at the
     * head of its stream it is on the order list, and holds back later tickets until it has run. */
    uint64_t ticket, ord_start;
    bool ord_in, ord_released;
    struct fc_op *ord_prev, *ord_next; /* the list is in ticket order */
    pthread_cond_t *ord_wake;          /* its executor's, while it waits for its turn */
    union {
        struct {
            struct fc_func *fn;
            unsigned grid[3], block[3], shmem;
            uint8_t *args;
        } k;
        struct fc_copy cp;
        struct fc_memset ms;
        struct {
            CUhostFn fn;
            void *data;
        } h;
        struct {
            struct fc_event *ev;
            uint64_t gen;
            uint64_t ipc; /* an interprocess event's: its record's number in the shared state (0: none) */
        } rec;
        struct {
            struct fc_stream *s; /* NULL: a wait for an interprocess event's record number seq */
            uint64_t seq;
            struct fc_event *ipc_ev; /* then that event (a reference) */
        } wait;
        struct {
            struct fc_event *ev; /* holds a reference */
            bool wait;
        } evn;
        struct {
            unsigned op, flags; /* CUstreamBatchMemOpType, its flags */
            uint64_t addr, value;
        } mem;
        uint64_t free_ptr;
        struct {
            struct fc_cond *h;
            unsigned type, size;
            struct fc_graph **bodies;
            struct fc_op **snap;
            CUgraph *out; /* the bodies as the caller names them (CUDA's array, valid with the node) */
        } cond;
        struct {
            struct fc_gmem *m; /* the allocation's (NULL in a free node) */
            uint64_t ptr, size;
        } gm;
        struct {
            struct fc_op **ops;
            size_t n;
        } graph;
    } u;
};

struct fc_op *fc_op_new(enum fc_op_kind kind, const char *call);
struct fc_op *fc_op_clone(const struct fc_op *op);
/* Event nodes (fake_stream.c): a new node's op, its event changed, its event; a launch of a graph's ops,
 * where each record node records the event at the graph's end and each wait node waits for where the
 * event was last recorded when the graph is launched (both conservative: never earlier than CUDA). */
CUresult fc_event_node_op(CUevent he, bool wait, struct fc_op **out);
CUresult fc_event_node_set(struct fc_op *op, CUevent he);
CUevent fc_event_node_event(const struct fc_op *op);
CUresult fc_submit_graph(CUstream hs, struct fc_op *graph_op);
void fc_op_free(struct fc_op *op);
void fc_op_check(const struct fc_op *op); /* the oracle on what the op will touch */
void fc_op_run(struct fc_op *op);
/* Queue an op on a stream (or record it into the stream's capture); takes the op in every case. */
CUresult fc_submit(CUstream hs, struct fc_op *op);
void fc_drain(void);
/* The running op waits (a spin kernel, a host function): later work on other streams may start. */
void fc_order_release(void);
/* The stream exists and is not capturing (work the fake cannot capture asks this); a capture is
 * invalidated, as by the real driver. */
CUresult fc_stream_usable(CUstream hs); /* wait for everything queued so far on every stream */
CUresult fc_copy_validate(const struct fc_copy *c);
CUresult fc_memset_validate(const struct fc_memset *m);
void fc_copy_from_3d(struct fc_copy *c, const CUDA_MEMCPY3D *p);
/* A copy checked as the driver checks it and queued on hs (a graph's, while it is captured). */
CUresult fc_submit_copy(const char *call, CUstream hs, const struct fc_copy *c);
/* Arrays and texture objects (fake_array.c), for the kernels that read and write them: the array's
 * memory (an allocation of the device's, rows packed) and its extent. */
struct fc_array {
    uint32_t magic;
    uint64_t base, row, rows, slices, elem;
};
struct fc_texref {
    bool surface;
    uint64_t base, pitch, width, height, elem; /* in elements; pitch in bytes */
    CUaddress_mode mode[2];
};
/* The texture or surface object `value`; false when there is none. */
bool fc_texture(uint64_t value, bool surface, struct fc_texref *out);

/* ---- graphs and capture (fake_graph.c) ---- */
struct fc_gnode;
struct fc_graph *fc_graph_new(void);
/* Add an op as a node of graph g after deps; takes the op. Caller holds fc_graph_mu. */
CUresult fc_graph_add(struct fc_graph *g, struct fc_gnode *const *deps, size_t ndeps, struct fc_op *op,
                      struct fc_gnode **out);
extern pthread_mutex_t fc_graph_mu;

/* ---- modules and kernels (fake_module.c, fake_kernels.c) ---- */
struct fc_module;
struct fc_launch {
    const struct fc_func *fn;
    const char *call;
    unsigned grid[3], block[3];
    const uint8_t *args;
};
struct fc_kernel_def {
    const char *name;
    const char *call; /* "kernel <name>", for the oracle's line */
    unsigned nparams;
    unsigned off[8], size[8];
    int max_threads, num_regs, static_smem;
    void (*run)(const struct fc_launch *l);
};
struct fc_global_def {
    const char *name;
    size_t size;
};
extern const struct fc_kernel_def fc_kernels[];
extern const size_t fc_nkernels;
extern const struct fc_global_def fc_globals[];
extern const size_t fc_nglobals;

struct fc_func {
    uint32_t magic;
    const struct fc_kernel_def *def;
    struct fc_module *mod;
    /* A library kernel's function in the context (cuKernelGetFunction): a handle of its own, as the driver's,
     * for the kernel; fc_func_get gives the kernel, whose attributes both share. NULL for the kernel. */
    struct fc_func *kernel;
    _Atomic int max_dyn_smem, carveout, nonportable_cluster, cluster_policy, cache_config;
};
struct fc_func *fc_func_get(const void *h); /* a function view's kernel */
/* A kernel op from launch arguments, checked as cuLaunchKernel checks them. */
CUresult fc_kernel_op(struct fc_func *f, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                      void **params, void **extra, const char *call, struct fc_op **out);
unsigned fc_param_bytes(const struct fc_kernel_def *d);
/* A module global's device address by name, for kernels that use one. */
uint64_t fc_module_global(const struct fc_module *m, const char *name, size_t *size);

#endif
