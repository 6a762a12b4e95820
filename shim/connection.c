/* The shim's connection to cumuxd: cuInit, and the two ways a call travels (round trip or one way). */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/map.h"
#include "common/channel.h"
#include "common/fatal.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/visible.h"
#include "shim/client.h"

struct shim_state shim = {
    .main = {.sock = -1,
             .ring_lock = PTHREAD_MUTEX_INITIALIZER,
             .stage_lock = PTHREAD_MUTEX_INITIALIZER,
             .sock_lock = PTHREAD_MUTEX_INITIALIZER},
    .ranges_lock = PTHREAD_RWLOCK_INITIALIZER,
    .ctx_lock = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;

/* ---- reply slots: one per client thread, given back when the thread ends ---- */
static _Atomic uint64_t slot_used[CUMUX_REPLY_SLOTS / 64];
static pthread_key_t slot_key;
static __thread int tls_slot = -1;

static void slot_release(void *arg)
{
    int s = (int)(intptr_t)arg - 1;
    if (s >= 0)
        atomic_fetch_and(&slot_used[s / 64], ~(1ull << (s % 64)));
}

int shim_reply_slot(void)
{
    if (tls_slot >= 0)
        return tls_slot;
    for (;;) {
        for (int w = 0; w < CUMUX_REPLY_SLOTS / 64; w++) {
            uint64_t v = atomic_load(&slot_used[w]);
            while (~v) {
                int b = __builtin_ctzll(~v);
                if (atomic_compare_exchange_weak(&slot_used[w], &v, v | (1ull << b))) {
                    tls_slot = w * 64 + b;
                    pthread_setspecific(slot_key, (void *)(intptr_t)(tls_slot + 1));
                    return tls_slot;
                }
            }
        }
        /* More threads talk to the GPU at once than there are slots: wait for one to end. */
        sched_yield();
    }
}

bool shim_chan_alive(struct shim_chan *ch)
{
    /* A worker that gives up says so here before it goes (and wakes our waiters): no answer will come. */
    if (ch->shm && atomic_load(&ch->shm->server_fault))
        return false;
    struct pollfd p = {.fd = ch->sock, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        return false;
    return true;
}

bool shim_server_alive(void)
{
    return shim_chan_alive(&shim.main);
}

/* The channel this thread waits on (cumux_reply_wait_as takes a function without arguments). */
static __thread struct shim_chan *tls_wait_chan;
static bool wait_chan_alive(void)
{
    return shim_chan_alive(tls_wait_chan ? tls_wait_chan : &shim.main);
}

/* The fault's error, kept when coming back failed after the new worker took the program: every call
 * returns it from then on, as after a fault without a way back. */
static _Atomic int32_t gave_up_error;

CUresult shim_lost_error(void)
{
    int32_t g = atomic_load(&gave_up_error);
    if (g)
        return (CUresult)g;
    int32_t f = shim.main.shm ? atomic_load(&shim.main.shm->server_fault) : 0;
    return f ? (CUresult)f : CUDA_ERROR_MPS_CONNECTION_FAILED;
}

static _Atomic int lost; /* the connection to the server is gone */

/* The GPU whose worker holds the channel (cumuxd has a worker per GPU, each its fault domain), and the GPU
 * the program is bound to (-1: none yet). cuInit connects to GPU 0's; the program's first message that
 * names a GPU (a context made on it, its pool, its memory: the spec's `gpu` fields) binds it, moving the
 * channel to that GPU's worker first if it is another's (shim_gpu_route). */
static int conn_gpu;
static _Atomic int bound_gpu = -1;
static int limit_gpu; /* the program's GPU whose memory limit the last hello carried */

static void server_lost(void)
{
    static _Atomic int said;
    atomic_store(&lost, 1);
    if (!atomic_exchange(&said, 1))
        cumux_logf("lost the connection to cumuxd: every further CUDA call fails");
}

/* Work lost at the fault (shim_lost_report in client.h): the epoch moves on at each such resume. */
_Atomic uint32_t shim_lost_epoch;

CUresult shim_lost_report(_Atomic uint32_t *seen)
{
    if (!shim_lost_pending(seen))
        return CUDA_SUCCESS;
    uint32_t e = atomic_load(&shim_lost_epoch);
    return atomic_exchange(seen, e) != e ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

void shim_lost_said(_Atomic uint32_t *seen)
{
    atomic_store(seen, atomic_load(&shim_lost_epoch));
}

void shim_lost_spare(_Atomic uint32_t *seen, uint32_t next)
{
    uint32_t caught_up = next - 1;
    atomic_compare_exchange_strong(seen, &caught_up, next);
}

/* ---- coming back after the worker failed (docs/faults.md; a server with CUMUX_CONTAIN=1) ----
 * When the worker serving this program fails for another program's fault, the server marks the channel
 * resumable when all its work had been seen to end. The first call that finds the channel broken (in
 * shim_call, shim_send, shim_send_begin, or shim_check_channel for paths of their own) connects again
 * (hello RESUME with the token of its first welcome), says hello as at cuInit, and has what the program
 * held made again (the rebuild that shim/resume.c registers); meanwhile other threads' calls wait for it.
 * One that had work going is told it was lost (shim_lost_report). The named culprit, and a program that was
 * answered a fatal error, keep their error, as under CUDA. */
static pthread_mutex_t resume_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int told_fatal; /* a call answered a fatal error (the culprit, typically): it stays so */
static _Atomic int resuming;
static __thread bool tls_resuming;
static CUresult (*rebuild_after_resume)(const struct shim_lost_work *lw);
static CUresult (*rebuild_after_move)(void);
static CUresult handshake(bool first);
struct conn;
static CUresult connect_server(uint32_t kind, uint64_t token, struct conn *conn, bool *unanswered);
static void use_connection(const struct conn *conn);

static enum cumux_wait_mode (*wait_mode_lookup)(void);
static int wait_mode_env = -2; /* -2: not read yet, -1: not set */

void shim_set_wait_mode_lookup(enum cumux_wait_mode (*lookup)(void))
{
    wait_mode_lookup = lookup;
}

/* The programs sharing the server (as it last told) are more than half the CPUs, each with a worker thread
 * in the server besides: waiting threads of the default mode then sleep soon, as natively AUTO yields once
 * contexts outnumber CPUs. */
static bool crowded(void)
{
    static long cpus;
    long n = __atomic_load_n(&cpus, __ATOMIC_RELAXED);
    if (!n) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
            n = 1;
        __atomic_store_n(&cpus, n, __ATOMIC_RELAXED);
    }
    struct cumux_shm *m = shim.main.shm;
    return m && 2 * (uint64_t)atomic_load_explicit(&m->server_clients, memory_order_relaxed) > (uint64_t)n;
}

enum cumux_wait_mode shim_wait_mode(void)
{
    int e = __atomic_load_n(&wait_mode_env, __ATOMIC_RELAXED);
    if (e == -2) {
        const char *v = getenv("CUMUX_WAIT");
        e = !v ? -1 : !strcmp(v, "auto") ? CUMUX_WAIT_AUTO : !strcmp(v, "spin") ? CUMUX_WAIT_SPIN
                : !strcmp(v, "yield") ? CUMUX_WAIT_YIELD : !strcmp(v, "block") ? CUMUX_WAIT_BLOCK : -1;
        if (v && e < 0)
            cumux_logf("CUMUX_WAIT=%s: not auto, spin, yield or block; the contexts' flags decide", v);
        __atomic_store_n(&wait_mode_env, e, __ATOMIC_RELAXED);
    }
    if (e >= 0)
        return (enum cumux_wait_mode)e;
    enum cumux_wait_mode m = wait_mode_lookup ? wait_mode_lookup() : CUMUX_WAIT_AUTO;
    return m == CUMUX_WAIT_AUTO && crowded() ? CUMUX_WAIT_AUTO_CROWDED : m;
}

void shim_set_rebuild(CUresult (*rebuild)(const struct shim_lost_work *lw), CUresult (*after_move)(void))
{
    rebuild_after_resume = rebuild;
    rebuild_after_move = after_move;
}

static bool channel_failed(void)
{
    struct cumux_shm *m = shim.main.shm;
    return m && (atomic_load_explicit(&lost, memory_order_relaxed) ||
                 atomic_load_explicit(&m->server_fault, memory_order_relaxed));
}

/* On every send: two plain loads in the common case; the thread-local flag (a call in a shared library)
 * only once something is wrong. */
static bool broken(void)
{
    return (atomic_load_explicit(&resuming, memory_order_relaxed) || channel_failed()) && !tls_resuming;
}

static CUresult resume(void);

/* A call that finds the worker gone after it looked at its objects (a synchronize that found its stream
 * had lost nothing, say): if work was lost in the coming back, the call says so and does nothing, since what
 * it was about may be part of it. */
static CUresult come_back(void)
{
    uint32_t before = atomic_load(&shim_lost_epoch);
    CUresult r = resume();
    if (r != CUDA_SUCCESS)
        return r;
    return atomic_load(&shim_lost_epoch) != before ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

CUresult shim_in_flight_lost(void)
{
    server_lost();
    CUresult e = tls_resuming ? shim_lost_error() : resume();
    return e == CUDA_SUCCESS ? CUDA_ERROR_LAUNCH_FAILED : e;
}

CUresult shim_answer(CUresult r)
{
    if (cumux_error_is_fatal(r)) /* its context failed, as far as the program knows: no coming back */
        atomic_store_explicit(&told_fatal, 1, memory_order_relaxed);
    return r;
}

CUresult shim_check_channel(void)
{
    return broken() ? resume() : CUDA_SUCCESS;
}

/* ---- channels: the main one (which comes back after a fault) and those of further GPUs ---- */
/* What shim/gpus.c registers (it calls this file, not the other way): a program's further GPUs. */
static struct shim_gpus_ops gpus;

void shim_set_gpus_ops(const struct shim_gpus_ops *ops)
{
    gpus = *ops;
}

_Atomic int shim_extra_count;
_Atomic(struct shim_chan *) shim_extra_chans[CUMUX_MAX_DEVICES];

struct shim_chan *shim_chan_of_gpu(int gpu)
{
    if (gpu < 0 || gpu >= CUMUX_MAX_DEVICES || gpu == shim.main.gpu)
        return &shim.main;
    struct shim_chan *ch = atomic_load_explicit(&shim_extra_chans[gpu], memory_order_acquire);
    return ch ? ch : &shim.main; /* none there: the main worker refuses what names that GPU */
}

struct shim_chan *shim_chan_of_handle(uint32_t handle)
{
    if (!atomic_load_explicit(&shim_extra_count, memory_order_relaxed))
        return &shim.main;
    return shim_chan_of_gpu(CUMUX_HANDLE_GPU(handle));
}

static struct shim_chan *route(uint16_t op, const void *body, size_t len)
{
    return gpus.route ? gpus.route(op, body, len) : &shim.main;
}


static bool chan_is_lost(struct shim_chan *ch)
{
    return ch == &shim.main ? atomic_load(&lost) != 0 : atomic_load(&ch->lost) != 0;
}

static void chan_lost(struct shim_chan *ch)
{
    if (ch == &shim.main) {
        server_lost();
    } else if (!atomic_exchange(&ch->lost, 1)) {
        cumux_logf("lost the connection to GPU %d's worker: every further CUDA call there fails", ch->gpu);
    }
}

static CUresult chan_error(struct shim_chan *ch)
{
    if (ch == &shim.main)
        return shim_lost_error();
    int32_t f = ch->shm ? atomic_load(&ch->shm->server_fault) : 0;
    return f ? (CUresult)f : CUDA_ERROR_MPS_CONNECTION_FAILED;
}

/* Before a message on ch: the main channel comes back when its worker failed and it can; a further GPU's
 * channel whose worker went stays failed (its program does not come back: docs/faults.md). */
CUresult shim_chan_check(struct shim_chan *ch)
{
    if (ch == &shim.main)
        return broken() ? come_back() : CUDA_SUCCESS;
    if (atomic_load_explicit(&ch->lost, memory_order_relaxed) ||
        atomic_load_explicit(&ch->shm->server_fault, memory_order_relaxed))
        return chan_error(ch);
    return CUDA_SUCCESS;
}

CUresult shim_chan_in_flight_lost(struct shim_chan *ch)
{
    if (ch == &shim.main)
        return shim_in_flight_lost();
    chan_lost(ch);
    return chan_error(ch);
}

int shim_chan_reply_wait(struct shim_chan *ch, struct cumux_reply_slot *slot, uint32_t before)
{
    struct shim_chan *was = tls_wait_chan;
    tls_wait_chan = ch;
    int w = cumux_reply_wait_as(slot, before, wait_chan_alive, shim_wait_mode());
    tls_wait_chan = was;
    return w;
}

/* ---- the ring ---- */
void *shim_ring_reserve_on(struct shim_chan *ch, uint32_t size, CUresult *err)
{
    void *p;
    unsigned n = 0;
    while (!(p = cumux_ring_reserve(ch->shm, size))) {
        /* Full: the server is behind. Wait for it, and make sure it is still there. */
        if ((++n & 1023u) == 0 && !shim_chan_alive(ch)) {
            chan_lost(ch);
            *err = chan_error(ch);
            return NULL;
        }
        sched_yield();
    }
    return p;
}

void *shim_ring_reserve(uint32_t size, CUresult *err)
{
    return shim_ring_reserve_on(&shim.main, size, err);
}

_Atomic uint64_t shim_work_seq;
_Thread_local uint64_t shim_question_seq;
/* Where the last work message (not a question) ends in the ring (under ring_lock): at a resume, work the
 * server had not handled when it decided is lost work. */
static uint64_t work_end;

/* A work message counts once it is in the ring (before the call that sent it returns), and a question
 * reads the count under the same lock: the count a question saw is exactly the work ahead of it. */
void shim_ring_commit_on(struct shim_chan *ch, uint16_t op, uint32_t size)
{
    if (cumux_op_question(op))
        shim_question_seq = atomic_load_explicit(&shim_work_seq, memory_order_relaxed);
    cumux_ring_commit(ch->shm, size);
    if (!cumux_op_question(op)) {
        atomic_fetch_add_explicit(&shim_work_seq, 1, memory_order_release);
        if (ch == &shim.main)
            work_end = atomic_load_explicit(&ch->shm->head, memory_order_relaxed);
    }
}

void shim_ring_commit(uint16_t op, uint32_t size)
{
    shim_ring_commit_on(&shim.main, op, size);
}

bool shim_idle_still(uint64_t seq)
{
    return seq != 0 && seq == atomic_load_explicit(&shim_work_seq, memory_order_acquire) + 1 &&
           !atomic_load_explicit(&lost, memory_order_relaxed) && atomic_load(&shim.main.shm->server_fault) == 0;
}

static __thread struct shim_chan *begun_chan; /* from shim_send_begin to shim_send_end (ring_lock held) */

void *shim_send_begin_on(struct shim_chan *ch, uint16_t op, size_t body_len, CUresult *err)
{
    if ((*err = shim_chan_check(ch)) != CUDA_SUCCESS)
        return NULL;
    uint32_t size = cumux_msg_size(body_len);
    if (size > CUMUX_MAX_MSG) {
        *err = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    pthread_mutex_lock(&ch->ring_lock);
    struct cumux_msg_hdr *h = shim_ring_reserve_on(ch, size, err);
    if (!h) {
        pthread_mutex_unlock(&ch->ring_lock);
        if (chan_is_lost(ch))
            *err = shim_chan_in_flight_lost(ch);
        return NULL;
    }
    h->op = op;
    h->reply = CUMUX_NO_REPLY;
    h->size = size;
    ch->begun_size = size;
    ch->begun_op = op;
    begun_chan = ch;
    return h + 1;
}

void *shim_send_begin(uint16_t op, size_t body_len, CUresult *err)
{
    return shim_send_begin_on(&shim.main, op, body_len, err);
}

void shim_send_end(void)
{
    struct shim_chan *ch = begun_chan;
    shim_ring_commit_on(ch, ch->begun_op, ch->begun_size);
    pthread_mutex_unlock(&ch->ring_lock);
}

static CUresult put(struct shim_chan *ch, uint16_t op, uint16_t reply, const void *body, size_t body_len,
                    const void *payload, size_t payload_len)
{
    uint32_t size = cumux_msg_size(body_len + payload_len);
    if (size > CUMUX_MAX_MSG)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&ch->ring_lock);
    struct cumux_msg_hdr *h = shim_ring_reserve_on(ch, size, &err);
    if (!h) {
        pthread_mutex_unlock(&ch->ring_lock);
        return err;
    }
    h->op = op;
    h->reply = reply;
    h->size = size;
    memcpy(h + 1, body, body_len);
    if (payload_len)
        memcpy((char *)(h + 1) + body_len, payload, payload_len);
    shim_ring_commit_on(ch, op, size);
    pthread_mutex_unlock(&ch->ring_lock);
    return CUDA_SUCCESS;
}

CUresult shim_send_on(struct shim_chan *ch, uint16_t op, const void *body, size_t body_len, const void *payload,
                      size_t payload_len)
{
    CUresult e = shim_chan_check(ch);
    if (e != CUDA_SUCCESS)
        return e;
    CUresult r = put(ch, op, CUMUX_NO_REPLY, body, body_len, payload, payload_len);
    return r != CUDA_SUCCESS && chan_is_lost(ch) ? shim_chan_in_flight_lost(ch) : r;
}

CUresult shim_send(uint16_t op, const void *body, size_t body_len, const void *payload, size_t payload_len)
{
    return shim_send_on(route(op, body, body_len), op, body, body_len, payload, payload_len);
}

CUresult shim_call_on(struct shim_chan *ch, uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap,
                      uint32_t *reply_len)
{
    CUresult e = shim_chan_check(ch); /* before the reply slot is looked up: it is the new channel's after */
    if (e != CUDA_SUCCESS)
        return e;
    int s = shim_reply_slot();
    struct cumux_reply_slot *slot = &ch->shm->replies[s];
    uint32_t before = atomic_load(&slot->seq);
    CUresult r = put(ch, op, (uint16_t)s, body, body_len, NULL, 0);
    if (r != CUDA_SUCCESS)
        return chan_is_lost(ch) ? shim_chan_in_flight_lost(ch) : r;
    if (shim_chan_reply_wait(ch, slot, before) < 0)
        return shim_chan_in_flight_lost(ch);
    uint32_t len = slot->len <= CUMUX_REPLY_DATA ? slot->len : CUMUX_REPLY_DATA;
    if (reply) {
        if (len > cap)
            len = cap;
        memcpy(reply, slot->data, len);
    }
    if (reply_len)
        *reply_len = len;
    return shim_answer((CUresult)slot->result);
}

CUresult shim_call(uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap, uint32_t *reply_len)
{
    return shim_call_on(route(op, body, body_len), op, body, body_len, reply, cap, reply_len);
}

CUresult shim_send_fd_on(struct shim_chan *ch, int fd)
{
    uint64_t tag = CUMUX_MAGIC;
    return cumux_sock_send(ch->sock, &tag, sizeof tag, fd) == 0 ? CUDA_SUCCESS : chan_error(ch);
}

CUresult shim_send_fd(int fd)
{
    return shim_send_fd_on(&shim.main, fd);
}

CUresult shim_call_fd(int fd, uint16_t op, const void *body, size_t body_len, void *reply, uint32_t cap,
                      uint32_t *reply_len)
{
    struct shim_chan *ch = route(op, body, body_len);
    /* The descriptor and the command reach the server in the same order as other threads' pairs. */
    pthread_mutex_lock(&ch->sock_lock);
    CUresult r = shim_send_fd_on(ch, fd);
    if (r == CUDA_SUCCESS)
        r = shim_call_on(ch, op, body, body_len, reply, cap, reply_len);
    pthread_mutex_unlock(&ch->sock_lock);
    return r;
}

/* The descriptor ch's worker sent just before answering the call the caller made (ch's sock_lock held). */
int shim_recv_fd_on(struct shim_chan *ch)
{
    struct pollfd p = {.fd = ch->sock, .events = POLLIN};
    uint64_t tag = 0;
    int fd = -1;
    if (poll(&p, 1, 1000) != 1 || cumux_sock_recv(ch->sock, &tag, sizeof tag, &fd) < 0 || tag != CUMUX_MAGIC) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* ---- cuInit ---- */
static void after_fork_child(void)
{
    /* The child has no channel of its own: it may call cuInit again and gets a new one. */
    shim.initialized = false;
    init_result = CUDA_ERROR_NOT_INITIALIZED;
    /* Let go of the parent's channel: holding its socket would keep the parent's client alive. */
    if (shim.main.sock >= 0)
        close(shim.main.sock);
    if (shim.main.shm)
        munmap(shim.main.shm, sizeof(struct cumux_shm));
    shim.main.sock = -1;
    shim.main.shm = NULL;
    if (gpus.forget)
        gpus.forget(); /* and the parent's channels of further GPUs */
    conn_gpu = 0;
    limit_gpu = 0;
    atomic_store(&bound_gpu, -1);
    tls_slot = -1;
    for (int i = 0; i < CUMUX_REPLY_SLOTS / 64; i++)
        atomic_store(&slot_used[i], 0);
    pthread_mutex_init(&shim.main.ring_lock, NULL);
    pthread_mutex_init(&shim.main.stage_lock, NULL);
    pthread_mutex_init(&shim.main.sock_lock, NULL);
    pthread_mutex_init(&shim.ctx_lock, NULL);
    pthread_mutex_init(&init_lock, NULL);
    memset(shim.primary, 0, sizeof shim.primary);
    memset(shim.default_pool, 0, sizeof shim.default_pool);
    memset(shim.current_pool, 0, sizeof shim.current_pool);
    memset(shim.primary_refs, 0, sizeof shim.primary_refs);
}

/* Connects and says hello (CLIENT, or RESUME with the token of the first welcome): the socket, the
 * channel and the client id into *conn. *unanswered (when not NULL): the server took the connection and
 * closed it with no answer (a worker handing over to its standby does that; worth another try). */
struct conn {
    int sock;
    struct cumux_shm *shm;
    uint32_t client_id;
    uint64_t resume_token;
};

static CUresult connect_server_to(int gpu, int limit_dev, uint32_t kind, uint64_t token, struct conn *conn,
                                  bool *unanswered)
{
    bool unanswered_here;
    if (!unanswered)
        unanswered = &unanswered_here;
    *unanswered = false;
    char path[256];
    if (cumux_gpu_socket_path(gpu, path, sizeof path) < 0) {
        cumux_logf("pipe directory %s: path too long", cumux_pipe_directory());
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    /* Who listens is checked before our hello (and our stdout with it) goes out. */
    char err[512];
    int s = cumux_connect_checked(path, err, sizeof err);
    if (s < 0 && errno == EPERM) {
        cumux_logf("refusing cumuxd at %s: %s", path, err);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    if (s < 0) {
        cumux_logf("cannot reach cumuxd at %s (%s): start the server with `cumux start`, or run the program "
                   "with `cumux run -- PROGRAM`; set CUMUX_PIPE_DIRECTORY if it uses another pipe directory",
                   path, strerror(errno));
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = kind, .token = token};
    if (shim_requested_memory_limit(limit_dev, &h.arg) < 0) {
        close(s);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* Our stdout goes with the hello: the server writes our kernels' printf output to it. */
    int out = fcntl(STDOUT_FILENO, F_GETFD) >= 0 ? STDOUT_FILENO : -1;
    if (out >= 0)
        h.flags |= CUMUX_HELLO_STDOUT;
    struct cumux_welcome w;
    int fd = -1;
    if (cumux_sock_send(s, &h, sizeof h, out) < 0 || cumux_sock_recv(s, &w, sizeof w, &fd) < 0 ||
        w.magic != CUMUX_MAGIC) {
        *unanswered = true;
        close(s);
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    if (w.status != 0 || fd < 0 || w.shm_size != sizeof(struct cumux_shm)) {
        char text[256] = "";
        if (w.text_len && w.text_len < sizeof text)
            cumux_sock_recv(s, text, w.text_len, NULL);
        cumux_logf("cumuxd refused the connection: %s", text[0] ? text : "channel size mismatch (different builds?)");
        close(s);
        if (fd >= 0)
            close(fd);
        return w.status ? (CUresult)w.status : CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    void *m = cumux_mmap(NULL, sizeof(struct cumux_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        close(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *conn = (struct conn){.sock = s, .shm = m, .client_id = w.client_id, .resume_token = w.resume_token};
    return CUDA_SUCCESS;
}

CUresult shim_connect_gpu(int gpu, int program_gpu, struct shim_chan *ch)
{
    struct conn conn;
    bool unanswered = false;
    CUresult r = CUDA_ERROR_MPS_CONNECTION_FAILED;
    for (int i = 0; i < 5; i++) { /* a connection closed unanswered: the worker was handing over, again */
        if (i)
            nanosleep(&(struct timespec){0, 20000000L * i}, NULL);
        r = connect_server_to(gpu, program_gpu, CUMUX_HELLO_CLIENT, 0, &conn, &unanswered);
        if (r == CUDA_SUCCESS || !unanswered)
            break;
    }
    if (r == CUDA_SUCCESS) {
        ch->sock = conn.sock;
        ch->shm = conn.shm;
        ch->client_id = conn.client_id;
    }
    return r;
}

static CUresult connect_server(uint32_t kind, uint64_t token, struct conn *conn, bool *unanswered)
{
    return connect_server_to(conn_gpu, limit_gpu, kind, token, conn, unanswered);
}

static void use_connection(const struct conn *conn)
{
    shim.main.sock = conn->sock;
    shim.main.shm = conn->shm;
    shim.main.client_id = conn->client_id;
    shim.main.gpu = conn_gpu;
    if (conn->resume_token)
        shim.resume_token = conn->resume_token;
}

static CUresult resume(void)
{
    pthread_mutex_lock(&resume_lock);
    if (!channel_failed()) { /* another thread has done it meanwhile */
        pthread_mutex_unlock(&resume_lock);
        return CUDA_SUCCESS;
    }
    /* Work written after the server decided (the ring's head then) may have been taken by the failing worker
     * and lost: then this program lost work, as one with work in flight did. A question lost nothing. */
    int resumable = atomic_load(&shim.main.shm->server_resumable); /* the head was written before it */
    pthread_mutex_lock(&shim.main.ring_lock);
    bool sent_after = work_end > shim.main.shm->server_resumable_head;
    pthread_mutex_unlock(&shim.main.ring_lock);
    bool told = atomic_load(&told_fatal);
    if (gpus.several && gpus.several()) {
        /* What it made on its other GPUs lives in their workers, which the rebuild does not know. */
        static _Atomic int said_extra;
        if (!atomic_exchange(&said_extra, 1))
            cumux_logf("GPU %d's worker failed (%d): this program uses several GPUs and does not come back",
                       conn_gpu, (int)shim_lost_error());
        pthread_mutex_unlock(&resume_lock);
        return shim_lost_error();
    }
    if (!shim.resume_token || !resumable || told) {
        static _Atomic int said;
        if (shim.resume_token && resumable && told && !atomic_exchange(&said, 1))
            cumux_logf("the GPU worker failed (%d): this program was told its context failed, as a program whose "
                       "kernel faulted is: it does not come back", (int)shim_lost_error());
        pthread_mutex_unlock(&resume_lock);
        return shim_lost_error();
    }
    bool lost_work = resumable == 2 || sent_after;
    /* Which streams lost it, as the server said (written before server_resumable). */
    struct shim_lost_work lw = {.any = lost_work, .all = sent_after};
    if (resumable == 2) {
        memcpy(lw.streams, shim.main.shm->server_lost_streams, sizeof lw.streams);
        lw.all |= shim.main.shm->server_lost_all != 0;
    }
    CUresult fault = shim_lost_error();
    uint64_t t_begin = cumux_now_ns(), t_connected = 0;
    atomic_store(&resuming, 1);
    tls_resuming = true;
    CUresult r;
    const char *step = NULL; /* where it failed, for the log */
    int attempt = 0;
    for (;; attempt++) {
        step = "reaching the worker";
        /* The worker taking over serves within milliseconds (a cold one within about a second); until then
         * the connection waits in the listening socket's backlog. */
        struct conn conn;
        r = CUDA_ERROR_MPS_CONNECTION_FAILED;
        for (int i = 0; i < 50 && r != CUDA_SUCCESS; i++) {
            r = connect_server(CUMUX_HELLO_RESUME, shim.resume_token, &conn, NULL); /* any failure: again */
            if (r != CUDA_SUCCESS) /* soon at first: the failing worker may have taken the connection */
                nanosleep(&(struct timespec){0, i < 10 ? 5000000 : 100000000}, NULL);
        }
        if (r == CUDA_SUCCESS) {
            t_connected = cumux_now_ns();
            pthread_mutex_lock(&shim.main.ring_lock);
            int old_sock = shim.main.sock;
            struct cumux_shm *old_shm = shim.main.shm;
            use_connection(&conn); /* the old channel stays mapped: a thread may still be looking at it */
            work_end = 0;           /* the new ring's */
            atomic_store(&lost, 0);
            pthread_mutex_unlock(&shim.main.ring_lock);
            close(old_sock);
            cumux_futex_wake(&old_shm->hostfn_posted, INT32_MAX); /* the host-function thread moves over */
            atomic_fetch_add(&shim_work_seq, 1); /* what was known idle was the old worker's */
            step = "its first messages";
            r = handshake(false);
            if (r == CUDA_SUCCESS && rebuild_after_resume) {
                step = "making again what it held";
                r = rebuild_after_resume(&lw);
            }
        }
        if (r == CUDA_SUCCESS || attempt == 4)
            break;
        /* The worker it came back to failed too (another fault meanwhile): again, if that one lets it. */
        if (!channel_failed() || atomic_load(&told_fatal) || !atomic_load(&shim.main.shm->server_resumable))
            break;
        lost_work = lw.any = lw.all = true; /* what was made again may be partly lost: said, to be safe */
    }
    /* How long it took, and where: reaching the worker that took over, then making again what it held. */
    uint64_t t_end = cumux_now_ns();
    char took[96];
    snprintf(took, sizeof took, " (in %.1f ms: connected after %.1f, made again in %.1f)", (t_end - t_begin) / 1e6,
             (t_connected - t_begin) / 1e6, (t_end - t_connected) / 1e6);
    if (r == CUDA_SUCCESS && lost_work) {
        /* Each stream that lost work, the events recorded there and the contexts holding it say
         * CUDA_ERROR_LAUNCH_FAILED once (shim_lost_report; the rebuild moved the epoch on). */
        if (!rebuild_after_resume)
            atomic_fetch_add(&shim_lost_epoch, 1);
        cumux_logf("the GPU worker failed (%d, another program's fault): back as client %u of the worker that took "
                   "over%s; work it had going was lost: the streams that had it, their events and contexts say "
                   "CUDA_ERROR_LAUNCH_FAILED once each",
                   (int)fault, shim.main.client_id, took);
    } else if (r == CUDA_SUCCESS) {
        cumux_logf("the GPU worker failed (%d, another program's fault): back as client %u of the worker that took "
                   "over%s", (int)fault, shim.main.client_id, took);
    } else {
        cumux_logf("the GPU worker failed (%d, another program's fault), and coming back failed (%d) at %s, "
                   "attempt %d, %.1f ms after it began", (int)fault, (int)r, step, attempt + 1,
                   (t_end - t_begin) / 1e6);
        if (t_connected) {
            /* The new worker has the program, with some of what it held made again and some not: no call
             * may go there (a handle not made again may name another object). It fails as without a way
             * back, for good, and the worker lets go of it. */
            atomic_store(&gave_up_error, (int32_t)fault);
            atomic_store(&told_fatal, 1);
            server_lost();
            shutdown(shim.main.sock, SHUT_RDWR);
        }
    }
    tls_resuming = false;
    atomic_store(&resuming, 0);
    pthread_mutex_unlock(&resume_lock);
    return r == CUDA_SUCCESS ? CUDA_SUCCESS : fault;
}

/* The program's first message naming a GPU other than the one whose worker holds its channel: what the
 * program made so far that names no GPU (libraries, graphs: a program binds at its first context, its
 * pool or memory, none of which exists before) is made again with that GPU's worker, as after a resume,
 * and the old channel goes. Other threads' calls wait meanwhile (resuming), as during a resume. */
static CUresult move_to_gpu(int gpu, int program_gpu)
{
    pthread_mutex_lock(&resume_lock);
    int was = conn_gpu, was_limit = limit_gpu;
    limit_gpu = program_gpu; /* its hello carries that GPU's memory limit */
    atomic_store(&resuming, 1);
    tls_resuming = true;
    conn_gpu = gpu;
    struct conn conn;
    bool unanswered = false;
    CUresult r = CUDA_ERROR_MPS_CONNECTION_FAILED;
    for (int i = 0; i < 5; i++) {
        if (i)
            nanosleep(&(struct timespec){0, 20000000L * i}, NULL);
        r = connect_server(CUMUX_HELLO_CLIENT, 0, &conn, &unanswered);
        if (r == CUDA_SUCCESS || !unanswered)
            break;
    }
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&shim.main.ring_lock);
        int old_sock = shim.main.sock;
        struct cumux_shm *old_shm = shim.main.shm;
        use_connection(&conn); /* the old channel stays mapped: a thread may still be looking at it */
        shim.resume_token = conn.resume_token; /* the old worker's token means nothing to this one */
        work_end = 0;
        atomic_store(&lost, 0);
        pthread_mutex_unlock(&shim.main.ring_lock);
        close(old_sock);
        cumux_futex_wake(&old_shm->hostfn_posted, INT32_MAX); /* the host-function thread moves over */
        atomic_fetch_add(&shim_work_seq, 1);
        r = handshake(false);
        if (r == CUDA_SUCCESS && rebuild_after_move)
            r = rebuild_after_move();
        if (r != CUDA_SUCCESS) {
            /* Half moved: nothing may go on, as after a failed comeback. */
            cumux_logf("moving to GPU %d's worker failed (%d): every further CUDA call fails", gpu, (int)r);
            atomic_store(&gave_up_error, (int32_t)r);
            atomic_store(&told_fatal, 1);
            server_lost();
            shutdown(shim.main.sock, SHUT_RDWR);
        } else {
            cumux_debugf("moved from GPU %d's worker to GPU %d's, as client %u", was, gpu, shim.main.client_id);
        }
    } else {
        conn_gpu = was; /* the old channel stands */
        limit_gpu = was_limit;
    }
    tls_resuming = false;
    atomic_store(&resuming, 0);
    pthread_mutex_unlock(&resume_lock);
    return r;
}

CUresult shim_gpu_route(int32_t *gpu)
{
    int g = *gpu;
    if (g < 0 || g >= shim.device_count)
        return CUDA_SUCCESS; /* a GPU that is none: the server refuses it, as the driver does */
    *gpu = shim.server_gpu[g];
    if (atomic_load_explicit(&bound_gpu, memory_order_acquire) == g || tls_resuming)
        return CUDA_SUCCESS; /* a comeback's messages go where it is */
    static pthread_mutex_t bind_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&bind_lock);
    int b = atomic_load(&bound_gpu);
    CUresult r = CUDA_SUCCESS;
    if (b >= 0 && b != g) {
        r = gpus.open ? gpus.open(*gpu, g) : CUDA_ERROR_NOT_SUPPORTED; /* its own channel (gpus.c) */
    } else if (b < 0) {
        /* Another GPU's worker, or the right one told another GPU's memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
         * of several entries): a new channel, whose hello says this GPU's. */
        uint64_t want = 0, told = 0;
        bool limit_differs = shim_requested_memory_limit(g, &want) == 0 && shim_requested_memory_limit(limit_gpu, &told) == 0 &&
                             want != told;
        if (*gpu != conn_gpu || limit_differs)
            r = move_to_gpu(*gpu, g);
        if (r == CUDA_SUCCESS)
            atomic_store_explicit(&bound_gpu, g, memory_order_release);
    }
    pthread_mutex_unlock(&bind_lock);
    return r;
}

/* The first messages of a connection: INIT (the devices: taken the first time, the same ones after a
 * resume) and what the program says of itself (its name, priority class and SMs), before any stream. */
CUresult shim_chan_hello(struct shim_chan *ch, int program_gpu, uint8_t *buf, uint32_t cap, struct cumux_init_reply *rep,
                         uint32_t *len)
{
    struct cumux_none none = {0};
    CUresult r = shim_call_on(ch, CUMUX_OP_INIT, &none, sizeof none, buf, cap, len);
    struct cumux_client_info info;
    shim_client_info(program_gpu, &info);
    if (r == CUDA_SUCCESS)
        r = shim_send_on(ch, CUMUX_OP_CLIENT_INFO, &info, sizeof info, NULL, 0);
    if (r == CUDA_SUCCESS && *len < sizeof *rep)
        r = CUDA_ERROR_MPS_CONNECTION_FAILED;
    if (r == CUDA_SUCCESS)
        memcpy(rep, buf, sizeof *rep);
    return r;
}

static CUresult handshake(bool first)
{
    static uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    struct cumux_init_reply rep;
    CUresult r = shim_chan_hello(&shim.main, limit_gpu, buf, sizeof buf, &rep, &len);
    if (r != CUDA_SUCCESS)
        return r;
    if (rep.device_count < 0 || rep.device_count > CUMUX_MAX_DEVICES ||
        len < sizeof rep + (size_t)rep.device_count * sizeof(struct cumux_device_info))
        return CUDA_ERROR_MPS_CONNECTION_FAILED;
    static struct cumux_device_info all[CUMUX_MAX_DEVICES];
    memcpy(all, buf + sizeof rep, (size_t)rep.device_count * sizeof(struct cumux_device_info));
    if (!first) {
        if (rep.device_count != shim.server_device_count)
            return CUDA_ERROR_MPS_CONNECTION_FAILED;
        /* The sizes a memory limit gives (the hello of a program moving to its GPU's worker says that GPU's). */
        for (int i = 0; i < shim.device_count; i++)
            shim.devices[i].total_mem = all[shim.server_gpu[i]].total_mem;
        return CUDA_SUCCESS;
    }
    /* The program sees the server's GPUs that its CUDA_VISIBLE_DEVICES names, numbered from 0 in that
     * order (as the driver does for its own GPUs; the server's are those its own environment showed). */
    uint8_t uuids[CUMUX_MAX_DEVICES][16];
    for (int g = 0; g < rep.device_count; g++)
        memcpy(uuids[g], all[g].uuid, 16);
    int map[CUMUX_MAX_DEVICES];
    int n = cumux_visible_gpus(getenv("CUDA_VISIBLE_DEVICES"), (const uint8_t (*)[16])uuids, rep.device_count, map,
                               CUMUX_MAX_DEVICES);
    if (n == 0 && rep.device_count > 0)
        return CUDA_ERROR_NO_DEVICE; /* as the driver says when CUDA_VISIBLE_DEVICES hides every GPU */
    shim.driver_version = rep.driver_version;
    shim.server_device_count = rep.device_count;
    shim.device_count = n;
    for (int i = 0; i < n; i++) {
        shim.devices[i] = all[map[i]];
        shim.server_gpu[i] = map[i];
    }
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&init_lock);
    if (!shim.initialized) {
        static bool once;
        if (!once) {
            once = true;
            cumux_log_init("cumux");
            pthread_key_create(&slot_key, slot_release);
            pthread_atfork(NULL, NULL, after_fork_child);
        }
        struct conn conn;
        /* A connection closed unanswered is tried again a few times: the worker may have been handing
         * over to its standby just then. */
        bool unanswered = false;
        for (int i = 0; i < 5; i++) {
            if (i)
                nanosleep(&(struct timespec){0, 20000000L * i}, NULL);
            init_result = connect_server(CUMUX_HELLO_CLIENT, 0, &conn, &unanswered);
            if (!unanswered)
                break;
        }
        char path[256];
        if (unanswered && cumux_gpu_socket_path(conn_gpu, path, sizeof path) == 0)
            cumux_logf("cumuxd at %s did not answer (5 tries)", path);
        if (init_result == CUDA_SUCCESS)
            use_connection(&conn);
        if (init_result == CUDA_SUCCESS) {
            shim.initialized = true; /* shim_call needs the channel */
            init_result = handshake(true);
            if (init_result != CUDA_SUCCESS) {
                shim.initialized = false;
                munmap(shim.main.shm, sizeof(struct cumux_shm));
                close(shim.main.sock);
                shim.main.shm = NULL;
                shim.main.sock = -1;
            } else {
                cumux_debugf("connected to cumuxd as client %u, %d device(s)", shim.main.client_id, shim.device_count);
            }
        }
    }
    CUresult r = init_result;
    pthread_mutex_unlock(&init_lock);
    return r;
}

CUresult shim_require_init(void)
{
    return shim.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}
