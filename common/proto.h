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
#define CUMUX_PROTO_VERSION 14u

/* ---- socket: hello and welcome ---- */
enum cumux_hello_kind {
    CUMUX_HELLO_CLIENT = 1, /* a shim: wants a channel and a worker */
    CUMUX_HELLO_STATUS = 2, /* the CLI: wants a status report as text */
    CUMUX_HELLO_STOP = 3,   /* the CLI: asks the server to stop */
    CUMUX_HELLO_KILL = 4,   /* the CLI: ends the clients of process `flags` (cumux kill PID) */
    CUMUX_HELLO_SET_MEMORY = 5, /* the CLI: the clients of process `flags` get memory limit `arg` (0: none) */
    CUMUX_HELLO_SET_DEFAULT_MEMORY = 6, /* the CLI: clients that connect from now on: limit `arg` at most, on
                                         * the server's GPU `flags` - 1 (flags 0: every GPU) */
    CUMUX_HELLO_SET_PRIORITY = 7, /* the CLI: the clients of process `flags` get priority class `arg` */
    CUMUX_HELLO_SET_DEFAULT_PRIORITY = 8, /* the CLI: clients that ask for none get class `arg` */
    CUMUX_HELLO_SET_SMS = 9, /* the CLI: the clients of process `flags` get SMs: `arg` = reserved SMs (low 32 bits,
                              * 0 none) | thread percentage << 32 (0 none); either CUMUX_SMS_KEEP: unchanged */
    CUMUX_HELLO_SET_DEFAULT_THREADS = 10, /* the CLI: clients that connect from now on: thread percentage `arg` */
    CUMUX_HELLO_RESUME = 11, /* a shim whose worker failed: as CLIENT, and `token` (its welcome's resume_token)
                              * lets it take back its memory (op RESUME_MEMORY) from the worker that took over */
    CUMUX_HELLO_IPC_LEASE = 12, /* another GPU's worker (only): opens IPC export `token` (server/ipc.c); the
                                 * welcome carries the chunk's descriptor and a struct cumux_ipc_lease in
                                 * message; the export stays open until this connection closes. With
                                 * flags CUMUX_LEASE_EVENT: interprocess event `token` instead, the
                                 * driver's CUipcEventHandle of it in message, no descriptor; the event
                                 * stays while the connection does */
    CUMUX_HELLO_VMM_FETCH = 13, /* another GPU's worker (only): the driver's descriptor of the VMM allocation
                                 * a client exported as the descriptor of device `arg`, inode `token`
                                 * (server/vmm.c), with a struct cumux_vmm_fetch in message */
    CUMUX_HELLO_RELOAD = 14, /* the CLI: the server reads its settings file again (server/config.c); the
                              * answer says what it applied, or why nothing */
    CUMUX_HELLO_SET_GROUP = 15, /* the CLI: the client group named by the struct cumux_group_name that follows
                                 * the hello gets setting `flags` (CUMUX_GROUP_*) = `arg` (server/groups.c) */
};

/* Client groups (server/groups.c): a group is a cgroup path; its programs are those at it or below. */
#define CUMUX_GROUP_PATH 256   /* a Kubernetes container's systemd cgroup path is ~190 characters */
#define CUMUX_GROUP_LABELS 128 /* "namespace=a,pod=b,container=c" */
struct cumux_group_name {
    char path[CUMUX_GROUP_PATH];     /* NUL-ended */
    char labels[CUMUX_GROUP_LABELS]; /* CUMUX_GROUP_LABELS_SET: NUL-ended; else ignored */
};
#define CUMUX_GROUP_MEMORY 1u   /* arg: the group's device memory on each GPU at most (bytes, 0 none) */
#define CUMUX_GROUP_PRIORITY 2u /* arg: its programs' class (enum cumux_priority), CUMUX_GROUP_NONE: none */
#define CUMUX_GROUP_THREADS 3u  /* arg: its programs' active thread percentage, 0 none */
#define CUMUX_GROUP_KILL 4u     /* its programs (every client whose cgroup is at or below the path) end */
#define CUMUX_GROUP_FORGET 5u   /* the group's settings and counts go (a job ended): its slot is free again */
#define CUMUX_GROUP_SMS 6u      /* arg: SMs on each GPU for its programs alone (reserved from now), 0 none */
#define CUMUX_GROUP_SMS_MAX 4096u
#define CUMUX_GROUP_LABELS_SET 7u /* the name's labels (up to 4 key=value, comma-separated) label its
                                   * programs' and its /metrics series ("": none), e.g. a pod's names */
#define CUMUX_GROUP_NONE 0xffffffffu

/* STATUS flags. Each GPU's worker answers for its GPU on that GPU's socket; GPU 0's also for the server as
 * a whole (the first line, the faults of every GPU). The CLI asks each and puts the answers together. */
#define CUMUX_STATUS_RECORDS 1u /* lines for programs (cumux control, top; /metrics), not people:
                                 * "server SUPERVISOR_PID WORKER_PID DEFAULT_LIMIT_BYTES DEFAULT_PRIORITY
                                 *  DEFAULT_PERCENT GPU_COUNT FAULTS RESTARTS" (DEFAULT_LIMIT: GPU 0's;
                                 *  FAULTS, RESTARTS: of every GPU)
                                 * "gpu INDEX WORKER_PID PCI_BUS_ID SMS USED_BYTES TOTAL_BYTES DEFAULT_LIMIT_BYTES
                                 *  FAULTS RESTARTS NAME" (the worker's GPU)
                                 * "client ID GPU PID UID DEVICE_BYTES LIMIT_BYTES PINNED_BYTES STREAMS KERNELS
                                 *  GPU_NS PRIORITY SMS RESERVED PERCENT GROUP =NAME COMMAND" (GROUP: its group's
                                 *  cgroup path, server/groups.c)
                                 * "group GPU PATH LIMIT_BYTES USED_BYTES PROGRAMS PRIORITY PERCENT GPU_NS PEAK_BYTES SMS LABELS"
                                 *  (a group with settings, what its programs on that GPU hold; PRIORITY - when
                                 *  none; GPU_NS: its programs' GPU time, those gone too; PEAK: the most held;
                                 *  SMS: SMs reserved for it on that GPU, 0 none; LABELS: k=v,k=v or -) (GPU_NS: its GPU time so
                                 *  far, estimated: server/usage.c; PRIORITY: high, normal or low; NAME: its
                                 *  CUMUX_CLIENT_NAME, no spaces, nothing after '=' when none). common/records.c
                                 *  reads them. */
#define CUMUX_STATUS_GPU_PART 2u /* the text of the worker's GPU only, without the server's first line */

struct cumux_hello {
    uint32_t magic;
    uint32_t version;
    uint32_t kind;
    uint32_t flags;
    uint64_t arg; /* CLIENT: the device memory limit the program asks for (bytes, 0: none); SET_MEMORY: the limit */
    uint64_t token; /* RESUME: the resume token its first welcome gave */
};

/* hello flags */
#define CUMUX_SMS_KEEP 0xffffffffu /* SET_SMS: this half stays as it is */
#define CUMUX_HELLO_STDOUT 1u /* CLIENT: the client's stdout comes with the hello, for device printf */
#define CUMUX_LEASE_EVENT 1u  /* IPC_LEASE: of an interprocess event */

/* IPC_LEASE's answer: the chunk (a VMM allocation, mapped whole at chunk_base in the owner's worker) that
 * holds the exported allocation [base, base + size). */
struct cumux_ipc_lease {
    uint64_t chunk_base, chunk_size, base, size;
};

/* VMM_FETCH's answer. */
struct cumux_vmm_fetch {
    uint64_t size;
};

struct cumux_welcome {
    uint32_t magic;
    uint32_t version;
    int32_t status; /* 0 or a CUresult */
    uint32_t client_id;
    uint64_t shm_size; /* the shm descriptor comes with this message */
    uint64_t text_len; /* STATUS: that many bytes of text follow */
    uint64_t resume_token; /* CLIENT: a secret to give in a RESUME hello should its worker fail (0: no resuming) */
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
#define CUMUX_HOSTFN_STREAMS 1024 /* streams of a client whose host functions hold them with a stream wait */
#define CUMUX_HOSTFN_NO_SLOT 0xffffffffu
#define CUMUX_MARK_WORDS 1024 /* completion-mark words the GPU writes into the channel (mark_word) */
#define CUMUX_LOST_STREAM_WORDS 16 /* server_lost_streams: stream handles below 1024 told one by one */
#define CUMUX_MARKS_TOLD 4    /* streams whose marks the server tells (server/marks.c SRV_MARKS_ASKED) */

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
    /* How many clients the server serves now (0: not told yet), written by it as they come and go: while
     * they are more than half the CPUs (each has a worker thread in the server too), a waiting thread of the
     * default wait mode sleeps soon rather than keep a CPU from the others (common/channel.h). */
    _Atomic uint32_t server_clients;
    alignas(64) _Atomic uint32_t stage_state[CUMUX_STAGING_SLOTS];
    _Atomic uint32_t stage_seq[CUMUX_STAGING_SLOTS]; /* bumped on every state change, futex word */
    /* Host functions (cuLaunchHostFunc): when a stream reaches one, the server posts its id here. The
     * stream then waits, on the GPU, until the client's callback thread has run it and written its number
     * into the stream's word of hostfn_stream_done (a word the GPU reads: no server thread waits, so one
     * client's slow function holds no one else's). Functions of graphs have no word (slot
     * CUMUX_HOSTFN_NO_SLOT): the server's driver thread waits for hostfn_done instead. */
    alignas(64) _Atomic uint32_t hostfn_posted; /* futex word: ids posted so far */
    _Atomic uint32_t hostfn_done;               /* futex word: ids run so far */
    uint64_t hostfn_ids[CUMUX_HOSTFN_RING];
    uint32_t hostfn_slot[CUMUX_HOSTFN_RING]; /* the stream's word, or CUMUX_HOSTFN_NO_SLOT */
    uint32_t hostfn_seq[CUMUX_HOSTFN_RING];  /* the number to write there once run */
    alignas(4096) _Atomic uint32_t hostfn_stream_done[CUMUX_HOSTFN_STREAMS];
    /* Completion marks the client reads itself (server/marks.c, shim/marks.c): the page right after the
     * host-function words (registered with them), where the GPU writes each mark's number behind a stream's
     * work, as it does in the server's own page, and what the server tells of them. A question the told
     * marks answer needs no round trip. The server never reads any of it back. */
    alignas(4096) _Atomic uint32_t mark_word[CUMUX_MARK_WORDS];
    alignas(64) struct cumux_marks_told {
        _Atomic uint32_t gen; /* odd while the server writes the rest */
        uint32_t pad;
        /* Every message up to this many ring bytes had been handled, with no error of one-way work left to
         * report, when the marks below were told (0: nothing told). Valid while the ring's head is there. */
        uint64_t handled;
        struct cumux_mark_told {
            uint32_t stream; /* the stream's handle (0: none) */
            uint32_t value;  /* the number its mark writes into mark_word[word]; 0: it was idle already */
            uint32_t word;
            uint32_t ctx;    /* its context's handle */
        } stream[CUMUX_MARKS_TOLD];
        /* Contexts all of whose streams are told here (idle already, or marked): bit i of mask for
         * stream[i]. A context's synchronize waits for those. */
        struct cumux_ctx_told {
            uint32_t ctx, mask;
        } ctx[CUMUX_MARKS_TOLD];
    } marks_told;
    /* A fatal GPU error (a sticky CUresult such as CUDA_ERROR_ILLEGAL_ADDRESS) that ended the server's GPU
     * worker, written before it lets go of the client: from then on the client's calls return it, as the
     * calls of a program whose own context faulted do, instead of a lost connection. */
    alignas(64) _Atomic int32_t server_fault;
    /* Written before server_fault: nonzero when the client may come back (hello RESUME) to the worker that
     * takes over, its memory kept (CUMUX_CONTAIN=1; not the named culprit): 1 when it lost nothing (no work
     * going), 2 when work it had going was lost. */
    _Atomic int32_t server_resumable;
    /* With it: the ring's head when the server decided. Every message before it had been handled; work the
     * client wrote after may have been taken by the failing worker and lost. */
    uint64_t server_resumable_head;
    /* With server_resumable 2, also written before it: the streams whose work was lost, by handle (bit h%64
     * of word h/64), unless server_lost_all says any stream's may have been (a message not yet handled, a
     * handle past these words). */
    uint64_t server_lost_streams[CUMUX_LOST_STREAM_WORDS];
    int32_t server_lost_all;
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

/* Constants the commands' structs use; the structs themselves and the op list are generated from
 * common/protocol.spec (tools/gen/generate.py). */
#define CUMUX_MAX_DEVICES 16
/* A handle names its worker: the server GPU whose worker made it, in bits 24-27 (GPU 0's handles are plain
 * indices), so that the shim of a program using several GPUs sends each message to the worker of the
 * handles it names. A worker takes an untagged handle as its own. */
#define CUMUX_HANDLE_GPU_SHIFT 24
#define CUMUX_HANDLE_INDEX_MAX ((1u << CUMUX_HANDLE_GPU_SHIFT) - 1)
#define CUMUX_HANDLE_INDEX(h) ((uint32_t)(h) & CUMUX_HANDLE_INDEX_MAX)
#define CUMUX_HANDLE_GPU(h) ((int)((uint32_t)(h) >> CUMUX_HANDLE_GPU_SHIFT))
#define CUMUX_HANDLE_TAG(gpu) ((uint32_t)(gpu) << CUMUX_HANDLE_GPU_SHIFT)
#define CUMUX_MAX_ATTRS 256
#define CUMUX_ATTR_MISSING INT32_MIN
/* Peer attributes in a device's description: CUdevice_P2PAttribute 1-5 toward each GPU. */
#define CUMUX_P2P_ATTRS 5
#define CUMUX_P2P_ENTRIES (CUMUX_MAX_DEVICES * CUMUX_P2P_ATTRS)
/* A symbol's name, its NUL included, is shorter than this: natively names have no limit, and C++ names
 * run past a kilobyte (cuDNN's CUTLASS kernels); one name must fit a message and a reply's data. */
#define CUMUX_NAME_MAX (16u << 10)
#define CUMUX_MAX_PARAMS 1024

/* CTX_DESTROY flags: a reset of a primary context (its libraries are loaded afresh). */
#define CUMUX_CTX_DESTROY_RESET 1u

enum cumux_image_kind { CUMUX_IMAGE_MODULE = 1, CUMUX_IMAGE_LIBRARY = 2 };

enum cumux_occupancy_query {
    CUMUX_OCC_MAX_ACTIVE_BLOCKS = 0,  /* a: block size; reply: blocks per SM */
    CUMUX_OCC_AVAILABLE_DYN_SMEM = 1, /* a: blocks per SM, b: block size; reply: bytes */
};

enum cumux_copy_kind {
    CUMUX_COPY_HTOD = 1, /* src: pinned host memory of this client (server address) */
    CUMUX_COPY_DTOH = 2, /* dst: pinned host memory of this client (server address) */
    CUMUX_COPY_DTOD = 3,
};

#include "common/generated/protocol.h"

#endif
