/* libFuzzer harness over the server: the decoder (the ring), every handler, and the cleanup of a client
 * that goes, all in one process with the fake driver (tests/fakecuda) linked in, whose oracle aborts on
 * any device access outside one allocation. ASan and UBSan catch the rest; a hang (no reply in 10 s) and
 * device memory left behind after the client goes are findings too.
 *
 * A client lives for CLIENT_INPUTS inputs (or until it breaks the protocol), then goes; its cleanup must
 * free everything. The harness plays both sides in one thread for speed: it writes a
 * command into the client's ring, then runs the worker's own step (srv_worker_step: decode, validate,
 * dispatch) until the ring is empty; a helper thread does what the client's other threads would (run host
 * functions, empty staging slots). Every client first gets a few objects to aim at (a context, two device
 * buffers, pinned host memory, the test kernels, a stream), then the input's records play:
 *   0 op reply len16 body...   a message with a well-formed header (the harness sets its size); reply bit 0:
 *                              answered (the harness waits), else one-way. Any 8-byte body word whose high
 *                              32 bits are 0xcafef00d is an address: bits 24-31 pick a target (0: the
 *                              4 KiB buffer, 1: the 1 MiB buffer, 2: pinned host memory; 3: not an
 *                              address but the kernels' image's size, for MODULE_LOAD; others: modulo 3),
 *                              bits 0-23 an offset from 2^23 below its start.
 *   1 len16 bytes...           raw bytes into the ring, header and all (the decoder's own input)
 *   2 kind size32              a descriptor over the socket before the next message: kind 0 the test
 *                              kernels' image, 1 a memfd of `size` bytes (at most 16 MiB) of 'A'
 *   3 slot state               a staging slot's state word, as the client would set it
 *   other                      stop
 * After each input: one answered INIT (the client must still be served, unless it was dropped for a
 * protocol violation). When a client goes (srv_client_release_all, as its worker does), everything it held
 * must be freed. A finding's input may need the inputs before it (the same client): rerun the corpus.
 *
 * FUZZ_TRACE=1 prints each message and its result; FUZZ_HISTORY=FILE writes, at a finding, the client's inputs
 * as one input that replays them (with FUZZ_CLIENT_INPUTS=1, so that the replay's client ends and is checked).
 *
 * Build: cmake -DCMAKE_C_COMPILER=clang -DCUMUX_FUZZ=ON; run: tests/fuzz/run.sh. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/sock.h"
#include "server/server.h"

#define HOST_BYTES (64u << 10)
#define MAX_FD_BYTES (16u << 20)

static uint8_t *fatbin;
static size_t fatbin_size;
static size_t baseline_free;
static uint32_t next_id = 1;
static struct cumux_shm *shm;   /* one channel, reused by every client */
static CUdeviceptr hostfn_words; /* its host-function words, registered once */
static void *msg_buf;           /* the worker's copy of a command */

/* The current client's inputs as played, one after another with the INIT that follows each: an input that
 * replays them all in a new client. FUZZ_HISTORY=FILE writes it there at a finding, since a finding may need
 * the client's earlier inputs, which libFuzzer does not keep. */
static uint8_t history[40u << 12];
static size_t history_len;
static bool history_full;

static void history_add(const void *p, size_t n)
{
    if (history_full || n > sizeof history - history_len) {
        history_full = true;
        return;
    }
    memcpy(history + history_len, p, n);
    history_len += n;
}

static void write_history(void)
{
    const char *path = getenv("FUZZ_HISTORY");
    FILE *out = path ? fopen(path, "wb") : NULL;
    if (out) {
        fwrite(history, 1, history_len, out);
        fclose(out);
        fprintf(stderr, "FUZZ FINDING: the client's inputs, replayable as one input: %s (%zu bytes%s)\n", path,
                history_len, history_full ? ", cut: too long" : "");
    }
}

static _Noreturn void finding(const char *what)
{
    fprintf(stderr, "FUZZ FINDING: %s\n", what);
    write_history();
    abort();
}

static void *client_helper(void *arg);

static size_t device_free(void)
{
    size_t f = 0, t = 0;
    cuCtxSetCurrent(srv_gpus[0].ctx);
    if (cuMemGetInfo(&f, &t) != CUDA_SUCCESS)
        finding("cuMemGetInfo failed");
    return f;
}

/* A sanitizer's report ends the process without finding(): the history is written then too. */
#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define FUZZ_DEATH_CALLBACK 1
#endif
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
#ifdef FUZZ_DEATH_CALLBACK
    __sanitizer_set_death_callback(write_history);
#endif
    cumux_log_init("fuzz_server");
    setenv("CUMUX_FAKE_ORDER", "0", 0); /* the fake's emulated dispatch order only slows fuzzing down */
    /* A stream wait for a value nobody writes holds only the client's own stream, as on a GPU; here it
     * would be a hang, so the fake gives such waits up after a while. */
    setenv("CUMUX_FAKE_WAIT_LIMIT_MS", "50", 0);
    const char *path = getenv("FUZZ_FATBIN");
    if (!path)
        path = FUZZ_DEFAULT_FATBIN;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_server: cannot open the kernels' image %s (set FUZZ_FATBIN)\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    fatbin_size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    fatbin = malloc(fatbin_size);
    if (!fatbin || fread(fatbin, 1, fatbin_size, f) != fatbin_size)
        exit(2);
    fclose(f);
    int wake[2];
    if (srv_gpus_init() < 0 || srv_gpu_count != 1 || pipe2(wake, O_CLOEXEC | O_NONBLOCK) < 0 || srv_reaper_start() < 0) {
        fprintf(stderr, "fuzz_server: the fake driver did not come up\n");
        exit(2);
    }
    srv_wake_fd = wake[1]; /* workers say they finished here; nobody needs to read it */
    shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    msg_buf = malloc(CUMUX_MAX_MSG);
    static pthread_t helper;
    if (shm == MAP_FAILED || !msg_buf || pthread_create(&helper, NULL, client_helper, NULL) != 0)
        exit(2);
    /* The host-function words, registered once for every client of this channel (as srv_worker_begin does). */
    cuCtxSetCurrent(srv_gpus[0].ctx);
    if (cuMemHostRegister((void *)shm->hostfn_stream_done, sizeof shm->hostfn_stream_done,
                          CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS ||
        cuMemHostGetDevicePointer(&hostfn_words, (void *)shm->hostfn_stream_done, 0) != CUDA_SUCCESS)
        exit(2);
    cuCtxSetCurrent(srv_gpus[0].ctx);
    if (cuMemHostRegister(shm->staging, sizeof shm->staging, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS)
        exit(2);
    baseline_free = device_free();
    return 0;
}

/* ---- the client side ---- */
struct fclient {
    struct srv_client *c;
    int sock;      /* our end of the socket pair */
    uint64_t tail; /* the worker's */
    uint64_t targets[3];
};

static bool dropped(struct fclient *f)
{
    return atomic_load(&f->c->dead) != 0;
}

/* What the client's own threads do: run host functions (acknowledge them) and empty staging slots the
 * server filled; without it, a host function or a device-to-host staged copy would wait until the end. */
static void *client_helper(void *arg)
{
    (void)arg;
    uint32_t seen[CUMUX_STAGING_SLOTS] = {0};
    for (;;) {
        /* Each posted function "runs": its stream's word gets its number (hostfn.c), then the count. */
        uint32_t done = atomic_load(&shm->hostfn_done), now = atomic_load(&shm->hostfn_posted);
        for (uint32_t k = done; k != now; k++) {
            uint32_t slot = shm->hostfn_slot[k % CUMUX_HOSTFN_RING];
            if (slot < CUMUX_HOSTFN_STREAMS)
                atomic_store(&shm->hostfn_stream_done[slot], shm->hostfn_seq[k % CUMUX_HOSTFN_RING]);
        }
        atomic_store(&shm->hostfn_done, now);
        cumux_futex_wake(&shm->hostfn_done, 1);
        /* A slot the server filled is emptied at once. One the input left in another state (FULL for a
         * copy that never came, or garbage) is freed when it is still so a millisecond later: a server
         * worker waiting for it (a device-to-host staged copy) is waiting for its own client only, as it
         * must, and the harness would wait with it. */
        for (int i = 0; i < CUMUX_STAGING_SLOTS; i++) {
            uint32_t st = atomic_load(&shm->stage_state[i]), seq = atomic_load(&shm->stage_seq[i]);
            bool stuck = st != CUMUX_STAGE_FREE && seen[i] == seq + 1;
            seen[i] = seq + 1;
            if ((st == CUMUX_STAGE_READY || stuck) &&
                atomic_compare_exchange_strong(&shm->stage_state[i], &st, CUMUX_STAGE_FREE)) {
                atomic_fetch_add(&shm->stage_seq[i], 1);
                cumux_futex_wake(&shm->stage_seq[i], 1);
            }
        }
        /* Until something is posted (or 1 ms, for the staging slots). */
        uint32_t posted = atomic_load(&shm->hostfn_posted);
        if (atomic_load(&shm->hostfn_done) == posted)
            cumux_futex_wait(&shm->hostfn_posted, posted, 1000000);
    }
    return NULL;
}

/* The worker's turn: every command now in the ring. */
static void run_worker(struct fclient *f)
{
    while (!dropped(f) && srv_worker_step(f->c, &f->tail, msg_buf) > 0) {
    }
}

/* FUZZ_TRACE=1: each message of the input and its result on stderr, to read a finding's steps (a finding
 * may need the client's inputs before it: replay its FUZZ_HISTORY file). */
static void trace(uint16_t op, bool answered, size_t len, int result, const struct cumux_reply_slot *slot)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("FUZZ_TRACE");
        on = e && e[0] == '1';
    }
    if (!on)
        return;
    uint64_t first = 0; /* the reply's first word: the handle or address a command made */
    if (slot && slot->len >= sizeof first)
        memcpy(&first, slot->data, sizeof first);
    fprintf(stderr, "fuzz: %s (%u) %s, %zu bytes: %d%s", srv_op_name(op), op, answered ? "answered" : "one-way", len,
            result, slot ? "" : "\n");
    if (slot)
        fprintf(stderr, ", reply %u bytes, first word 0x%llx\n", slot->len, (unsigned long long)first);
}

/* Put one message; when answered, wait for its reply. Returns the result, or -1 when the client was
 * dropped. */
static int send_msg(struct fclient *f, uint16_t op, bool answered, const void *body, size_t len, void *out,
                    size_t cap)
{
    if (dropped(f))
        return -1;
    uint32_t size = cumux_msg_size(len);
    uint8_t *p = cumux_ring_reserve(shm, size);
    if (!p) {
        run_worker(f); /* only one-way commands pile up: the worker makes room */
        if (dropped(f) || !(p = cumux_ring_reserve(shm, size)))
            return -1;
    }
    struct cumux_reply_slot *slot = &shm->replies[0];
    uint32_t before = atomic_load(&slot->seq);
    struct cumux_msg_hdr h = {.op = op, .reply = answered ? 0 : CUMUX_NO_REPLY, .size = size};
    memcpy(p, &h, sizeof h);
    memset(p + sizeof h, 0, size - sizeof h);
    if (len)
        memcpy(p + sizeof h, body, len);
    cumux_ring_commit(shm, size);
    if (!answered) {
        trace(op, false, len, 0, NULL); /* its error, if any, comes with a later answer */
        return 0;
    }
    run_worker(f);
    if (dropped(f)) {
        trace(op, true, len, -1, NULL);
        return -1;
    }
    if (atomic_load(&slot->seq) == before)
        finding("an answered command got no reply");
    if (out) {
        uint32_t n = slot->len < cap ? slot->len : (uint32_t)cap;
        memcpy(out, slot->data, n);
    }
    trace(op, true, len, (int)slot->result, slot);
    return slot->result;
}

static void send_fd(struct fclient *f, int kind, uint32_t size)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        finding("memfd_create");
    if (kind == 0) {
        if (pwrite(fd, fatbin, fatbin_size, 0) != (ssize_t)fatbin_size)
            finding("write the image");
    } else {
        size = size % MAX_FD_BYTES;
        if (ftruncate(fd, size) < 0)
            finding("ftruncate");
        void *m = size ? mmap(NULL, size, PROT_WRITE, MAP_SHARED, fd, 0) : NULL;
        if (m && m != MAP_FAILED) {
            memset(m, 'A', size);
            munmap(m, size);
        }
    }
    /* Non-blocking: descriptors that no command takes pile up in the socket until it is full, and then a
     * real client blocks itself (the server is not held up). The harness plays all clients in one
     * thread, so it drops the descriptor instead (a fuzzing run once timed out here). */
    uint64_t tag = CUMUX_MAGIC;
    int flags = fcntl(f->sock, F_GETFL);
    fcntl(f->sock, F_SETFL, flags | O_NONBLOCK);
    cumux_sock_send(f->sock, &tag, sizeof tag, fd);
    fcntl(f->sock, F_SETFL, flags);
    close(fd);
}

static uint64_t answer_u64(struct fclient *f, uint16_t op, const void *body, size_t len)
{
    struct cumux_u64_reply rep = {0};
    if (send_msg(f, op, true, body, len, &rep, sizeof rep) != CUDA_SUCCESS)
        finding("a setup command failed");
    return rep.value;
}

/* The objects every input starts with. Handles: 1 context, 2 its legacy stream, then (in order) the
 * module, vec_add, a stream; see the corpus generator for the exact numbers. */
static void setup(struct fclient *f)
{
    struct cumux_ctx_create cc = {.device = 0};
    struct cumux_ctx_reply cr;
    if (send_msg(f, CUMUX_OP_CTX_CREATE, true, &cc, sizeof cc, &cr, sizeof cr) != CUDA_SUCCESS)
        finding("CTX_CREATE failed");
    struct cumux_mem_alloc ma = {.ctx = cr.ctx, .size = 4096};
    f->targets[0] = answer_u64(f, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma);
    ma.size = 1 << 20;
    f->targets[1] = answer_u64(f, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma);
    send_fd(f, 1, HOST_BYTES);
    struct cumux_host_alloc ha = {.size = HOST_BYTES};
    f->targets[2] = answer_u64(f, CUMUX_OP_HOST_ALLOC, &ha, sizeof ha);
    send_fd(f, 0, 0);
    struct cumux_module_load ml = {.ctx = cr.ctx, .kind = CUMUX_IMAGE_MODULE, .size = fatbin_size};
    uint64_t mod = answer_u64(f, CUMUX_OP_MODULE_LOAD, &ml, sizeof ml);
    struct {
        struct cumux_module_symbol m;
        char name[8];
    } sym = {.m = {.module = (uint32_t)mod}, .name = "vec_add"};
    uint8_t info[sizeof(struct cumux_function_info)];
    if (send_msg(f, CUMUX_OP_MODULE_GET_FUNCTION, true, &sym, sizeof sym, info, sizeof info) != CUDA_SUCCESS)
        finding("vec_add not found");
    struct cumux_stream_create sc = {.ctx = cr.ctx};
    struct cumux_ctx_reply sr;
    if (send_msg(f, CUMUX_OP_STREAM_CREATE, true, &sc, sizeof sc, &sr, sizeof sr) != CUDA_SUCCESS)
        finding("STREAM_CREATE failed");
    /* The seeds name these handles (tests/fuzz/make_corpus.py: CTX, LEGACY, DEFAULT_POOL, MODULE, VEC_ADD,
     * STREAM): a seed whose handles drifted would only try the handle checks. */
    struct cumux_function_info fi;
    memcpy(&fi, info, sizeof fi);
    if (cr.ctx != 1 || cr.legacy_stream != 2 || mod != 4 || fi.function != 5 || sr.ctx != 6)
        finding("setup's handles are not those tests/fuzz/make_corpus.py names");
}

static void fix_addresses(struct fclient *f, uint8_t *body, size_t len)
{
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, body + i, 8);
        if (w >> 32 != 0xcafef00dull)
            continue;
        unsigned t = (unsigned)(w >> 24) & 0xff;
        uint64_t base = t == 3 ? fatbin_size : f->targets[t % 3];
        w = base + (w & 0xffffff) - (1u << 23);
        memcpy(body + i, &w, 8);
    }
}

static void play(struct fclient *f, const uint8_t *d, size_t n)
{
    static uint8_t body[CUMUX_MAX_MSG];
    size_t i = 0;
    while (i < n && !dropped(f)) {
        uint8_t kind = d[i++];
        if (kind == 0 && i + 4 <= n) {
            uint16_t op = d[i], len;
            bool answered = d[i + 1] & 1;
            memcpy(&len, d + i + 2, 2);
            i += 4;
            if (len > n - i)
                len = (uint16_t)(n - i);
            if (len > CUMUX_MAX_MSG - sizeof(struct cumux_msg_hdr))
                len = CUMUX_MAX_MSG - sizeof(struct cumux_msg_hdr);
            memcpy(body, d + i, len);
            i += len;
            uint8_t rec[5] = {0, (uint8_t)op, answered, (uint8_t)len, (uint8_t)(len >> 8)};
            history_add(rec, sizeof rec);
            history_add(body, len);
            fix_addresses(f, body, len);
            send_msg(f, op, answered, body, len, NULL, 0);
        } else if (kind == 1 && i + 2 <= n) {
            uint16_t len;
            memcpy(&len, d + i, 2);
            i += 2;
            if (len > n - i)
                len = (uint16_t)(n - i);
            len &= (uint16_t)~7u;
            uint8_t rec[3] = {1, (uint8_t)len, (uint8_t)(len >> 8)};
            history_add(rec, sizeof rec);
            history_add(d + i, len);
            uint8_t *p = len ? cumux_ring_reserve(shm, len) : NULL;
            if (p) {
                memcpy(p, d + i, len);
                cumux_ring_commit(shm, len);
                run_worker(f);
            }
            i += len;
        } else if (kind == 2 && i + 5 <= n) {
            uint32_t size;
            memcpy(&size, d + i + 1, 4);
            history_add(d + i - 1, 6);
            send_fd(f, d[i] & 1, size);
            i += 5;
        } else if (kind == 3 && i + 2 <= n) {
            atomic_store(&shm->stage_state[d[i] % CUMUX_STAGING_SLOTS], d[i + 1] % 4);
            history_add(d + i - 1, 3);
            i += 2;
        } else {
            break;
        }
    }
}

/* A client's start, as srv_client_start and its worker's first steps make it, on the reused channel. The
 * staging buffers stay pinned across clients (pinned once, at start), which the server's cleanup leaves
 * to srv_client_free: not part of what is fuzzed, and pinning 32 MiB per client would halve the speed. */
static void client_new(struct fclient *f)
{
    memset(f, 0, sizeof *f);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        finding("socketpair");
    f->sock = sv[1];
    struct srv_client *c = calloc(1, sizeof *c);
    if (!c)
        finding("calloc");
    c->id = next_id++;
    c->pid = getpid();
    c->uid = getuid();
    c->conn.sock = sv[0];
    c->shm_fd = -1;
    c->stdout_fd = -1;
    c->shm = shm;
    pthread_mutex_init(&c->hostfn.hostfn_lock, NULL);
    cumux_shm_init(shm);
    f->c = c;
    cuCtxSetCurrent(srv_gpus[0].ctx);
    c->obj.current_gpu = 0;
    c->staging.staging_registered = true;
    memset((void *)shm->hostfn_stream_done, 0, sizeof shm->hostfn_stream_done);
    c->hostfn.hostfn_words = hostfn_words;
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        if (cuEventCreate(&c->staging.stage_event[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            finding("staging events");
    setup(f);
    run_worker(f);
}

/* The client goes: what its worker does when it hangs up, then srv_client_free's part. Everything it held
 * must be back: the device memory the driver reports free is what it was before any client. */
static void client_end(struct fclient *f)
{
    struct srv_client *c = f->c;
    atomic_store(&c->dead, 1);
    srv_client_release_all(c);
    pthread_mutex_destroy(&c->hostfn.hostfn_lock);
    close(c->conn.sock);
    close(f->sock);
    free(c->hostfn.hostfn_last);
    free(c);
    f->c = NULL;
    srv_reaper_drain();
    size_t now_free = device_free();
    if (now_free != baseline_free) {
        fprintf(stderr, "device memory free: %zu before the client, %zu after it went\n", baseline_free, now_free);
        finding("device memory leaked by a client's cleanup");
    }
}

/* One client lives for up to CLIENT_INPUTS inputs (or until it breaks the protocol): its objects pile
 * up across them, so that commands meet the state earlier ones made, and its cleanup has plenty to free.
 * FUZZ_CLIENT_INPUTS=N changes it (1: a client per input, to replay a FUZZ_HISTORY file with its cleanup). */
#define CLIENT_INPUTS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fclient f;
    static unsigned inputs, per_client;
    if (!per_client) {
        const char *e = getenv("FUZZ_CLIENT_INPUTS");
        per_client = e && atoi(e) > 0 ? (unsigned)atoi(e) : CLIENT_INPUTS;
    }
    if (!f.c) {
        client_new(&f);
        history_len = 0;
        history_full = false;
    }
    play(&f, data, size);
    run_worker(&f);
    if (!dropped(&f)) {
        struct cumux_none none = {0};
        uint8_t rec[5] = {0, CUMUX_OP_INIT, 1, sizeof none, 0};
        history_add(rec, sizeof rec);
        history_add(&none, sizeof none);
        if (send_msg(&f, CUMUX_OP_INIT, true, &none, sizeof none, NULL, 0) != CUDA_SUCCESS && !dropped(&f))
            finding("INIT failed after the input");
    }
    if (dropped(&f) || ++inputs % per_client == 0)
        client_end(&f);
    return 0;
}
