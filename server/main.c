/* cumuxd: owns one real CUDA context per GPU and runs every client's work in it.
 * The main thread accepts connections, answers status and stop requests, and notices clients that go
 * away (their socket closes); each client's commands run on its own worker thread (client.c). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "common/text.h"
#include "common/sock.h"
#include "server/objects.h"
#include "server/server.h"

static struct srv_client *clients;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_requested;
static time_t started_at;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
    char b = 0;
    ssize_t w = write(wake_pipe[1], &b, 1);
    (void)w;
}

/* The pipe directory must be ours and closed to others, or someone else could stand in for the server:
 * made if missing, then opened without following a link (O_NOFOLLOW: a link to a good directory is
 * refused too, since whoever made the link may change where it points) and checked through the
 * descriptor, so what was checked is what we use. Returns the directory's descriptor, or -1. */
static int open_pipe_dir(const char *path)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -1;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        int e = errno;
        if ((e == ELOOP || e == ENOTDIR) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            fprintf(stderr, "cumuxd: pipe directory %s is a symbolic link: refusing it (give a real directory)\n",
                    path);
        else if (e == ENOTDIR)
            fprintf(stderr, "cumuxd: pipe directory %s is not a directory\n", path);
        errno = e == ELOOP ? EPERM : e;
        return -1;
    }
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (st.st_uid != getuid()) {
        fprintf(stderr, "cumuxd: pipe directory %s belongs to uid %u, not to this server's uid %u\n", path,
                (unsigned)st.st_uid, (unsigned)getuid());
        close(fd);
        errno = EPERM;
        return -1;
    }
    if (st.st_mode & 077) {
        fprintf(stderr, "cumuxd: pipe directory %s has mode %04o: it must be closed to others (0700)\n", path,
                (unsigned)(st.st_mode & 07777));
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* path still names the directory open as dirfd (nobody renamed another into its place). */
static bool same_dir(int dirfd, const char *path)
{
    struct stat a, b;
    return fstat(dirfd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The log directory only has to exist. */
static int make_log_dir(const char *path)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* The status text (malloc'd), or NULL. */
static char *status_records(void);

static char *status_report(void)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    bool locked = false;
    if (!buf)
        return NULL;
#define APPEND(...)                                                                                    \
    do {                                                                                               \
        int n_;                                                                                        \
        while ((n_ = snprintf(buf + len, cap - len, __VA_ARGS__)) >= 0 && (size_t)n_ >= cap - len) {   \
            char *nb_ = realloc(buf, cap * 2);                                                         \
            if (!nb_)                                                                                  \
                goto out;                                                                              \
            buf = nb_;                                                                                 \
            cap *= 2;                                                                                  \
        }                                                                                              \
        if (n_ > 0)                                                                                    \
            len += (size_t)n_;                                                                         \
    } while (0)
    APPEND("cumuxd pid %d, up %lds, pipe directory %s, driver %d.%d\n", (int)srv_supervisor_pid,
           (long)(time(NULL) - started_at), cumux_pipe_directory(), srv_driver_version / 1000,
           (srv_driver_version % 1000) / 10);
    if (srv_nfaults || srv_worker_restarts)
        APPEND("worker pid %d; fatal GPU faults: %u; workers restarted: %u\n", (int)getpid(), srv_nfaults,
               srv_worker_restarts);
    pid_t sb_pid = 0;
    int sb = srv_standby_state(&sb_pid);
    if (sb < 0)
        APPEND("standby worker: none (CUMUX_STANDBY=0)\n");
    else if (sb_pid)
        APPEND("standby worker: pid %d, %s\n", (int)sb_pid, sb ? "ready" : "starting");
    else
        APPEND("standby worker: none yet\n");
    uint64_t kept_n = 0, kept_b = 0;
    if (srv_chunks_on() && srv_kept_memory(&kept_n, &kept_b) == 0)
        APPEND("clients' memory outside the worker: %llu chunk(s), %.1f MiB (CUMUX_CONTAIN)\n",
               (unsigned long long)kept_n, kept_b / 1048576.0);
    for (uint32_t i = srv_nfaults > 5 ? srv_nfaults - 5 : 0; i < srv_nfaults; i++) {
        const struct srv_fault_record *f = &srv_faults[i % SRV_FAULTS_KEPT];
        const char *fname = NULL;
        cuGetErrorName((CUresult)f->code, &fname);
        time_t at = (time_t)(f->at_ms / 1000);
        struct tm tm;
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&at, &tm));
        APPEND("fault %u: %s GPU %d %s (%s), serving again after %lld ms; culprit: %s; other clients then: %s\n",
               i + 1, when, f->gpu, f->why[0] ? f->why : "fatal GPU error", fname ? fname : "?",
               (long long)f->recovered_ms, f->culprit[0] ? f->culprit : "not known",
               f->clients[0] ? f->clients : "none");
    }
    for (int i = 0; i < srv_gpu_count; i++) {
        size_t f = 0, t = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        cuMemGetInfo(&f, &t);
        APPEND("GPU %d: %s, %s, %d SMs, memory %zu MiB used of %zu MiB\n", i, srv_gpus[i].info.name,
               srv_gpus[i].info.pci_bus_id, srv_gpus[i].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT],
               (t - f) >> 20, t >> 20);
    }
    pthread_mutex_lock(&clients_lock);
    locked = true;
    int n = 0;
    for (struct srv_client *c = clients; c; c = c->next)
        n += !atomic_load(&c->finished);
    APPEND("clients: %d\n", n);
    if (n)
        APPEND("%6s %8s %6s %12s %12s %12s %8s %12s %10s %8s %6s\n", "id", "pid", "uid", "device_MiB", "limit_MiB",
               "pinned_MiB", "streams", "kernels", "gpu_s", "priority", "SMs");
    for (struct srv_client *c = clients; c; c = c->next) {
        if (atomic_load(&c->finished))
            continue;
        srv_usage_refresh(c);
        char limit[24] = "-";
        uint64_t l = atomic_load(&c->mem_limit);
        if (l)
            snprintf(limit, sizeof limit, "%.1f", l / 1048576.0);
        char sms[16] = "-"; /* r: reserved for it alone */
        if (atomic_load(&c->sms_now))
            snprintf(sms, sizeof sms, "%u%s", atomic_load(&c->sms_now), atomic_load(&c->sms_reserved) ? "r" : "");
        APPEND("%6u %8d %6u %12.1f %12s %12.1f %8u %12llu %10.3f %8s %6s\n", c->id, (int)c->pid, (unsigned)c->uid,
               atomic_load(&c->mem_bytes) / 1048576.0, limit, atomic_load(&c->host_bytes) / 1048576.0,
               atomic_load(&c->nstreams), (unsigned long long)atomic_load(&c->launches),
               atomic_load(&c->gpu_ns) / 1e9, cumux_priority_name((enum cumux_priority)atomic_load(&c->priority)), sms);
    }
    pthread_mutex_unlock(&clients_lock);
    return buf;
out:
    if (locked)
        pthread_mutex_unlock(&clients_lock);
    free(buf);
    return NULL;
#undef APPEND
}

ssize_t srv_clients_snapshot(struct srv_client_stat **out)
{
    size_t n = 0, cap = 16;
    struct srv_client_stat *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    pthread_mutex_lock(&clients_lock);
    for (struct srv_client *c = clients; c; c = c->next) {
        if (atomic_load(&c->finished))
            continue;
        if (n == cap) {
            struct srv_client_stat *g = realloc(v, 2 * cap * sizeof *v);
            if (!g)
                break;
            v = g;
            cap *= 2;
        }
        srv_usage_refresh(c);
        struct srv_client_stat *s = &v[n++];
        *s = (struct srv_client_stat){.id = c->id, .uid = (uint32_t)c->uid, .streams = atomic_load(&c->nstreams),
                                      .pid = (int32_t)c->pid, .mem = atomic_load(&c->mem_bytes),
                                      .limit = atomic_load(&c->mem_limit), .pinned = atomic_load(&c->host_bytes),
                                      .launches = atomic_load(&c->launches), .gpu_ns = atomic_load(&c->gpu_ns),
                                      .priority = atomic_load(&c->priority), .sms = atomic_load(&c->sms_now),
                                      .reserved = atomic_load(&c->sms_reserved),
                                      .percent = atomic_load(&c->want_percent)};
        snprintf(s->cmd, sizeof s->cmd, "%s", c->cmd[0] ? c->cmd : "?");
        if (atomic_load(&c->named))
            snprintf(s->name, sizeof s->name, "%s", c->name);
    }
    pthread_mutex_unlock(&clients_lock);
    *out = v;
    return (ssize_t)n;
}

/* The status for programs (CUMUX_STATUS_RECORDS in common/proto.h): one record a line, sizes in bytes. */
static char *status_records(void)
{
    struct cumux_text t = cumux_text_new(1024);
    cumux_text_printf(&t, "server %d %d %llu %s %u\n", (int)srv_supervisor_pid, (int)getpid(),
              (unsigned long long)srv_default_mem_limit(), cumux_priority_name((enum cumux_priority)srv_default_priority()),
              srv_default_thread_percent() ? srv_default_thread_percent() : 100);
    for (int i = 0; i < srv_gpu_count; i++) {
        size_t f = 0, total = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        cuMemGetInfo(&f, &total);
        cumux_text_printf(&t, "gpu %d %s %d %zu %zu %s\n", i, srv_gpus[i].info.pci_bus_id[0] ? srv_gpus[i].info.pci_bus_id : "-",
                  srv_gpus[i].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], total - f, total,
                  srv_gpus[i].info.name);
    }
    struct srv_client_stat *cs = NULL;
    ssize_t n = srv_clients_snapshot(&cs);
    for (ssize_t i = 0; i < n; i++)
        cumux_text_printf(&t, "client %u %d %u %llu %llu %llu %u %llu %llu %s %u %d %u %s\n", cs[i].id, (int)cs[i].pid,
                          cs[i].uid, (unsigned long long)cs[i].mem, (unsigned long long)cs[i].limit,
                          (unsigned long long)cs[i].pinned, cs[i].streams, (unsigned long long)cs[i].launches,
                          (unsigned long long)cs[i].gpu_ns, cumux_priority_name((enum cumux_priority)cs[i].priority),
                          cs[i].sms, (int)cs[i].reserved, cs[i].percent ? cs[i].percent : 100, cs[i].cmd);
    free(cs);
    if (n < 0) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

static uint32_t next_client_id = 1;

/* ---------------------------------------------------------------- connections before they are clients
 * The main thread never blocks on a connection: each waits for its hello in the poll loop (non-blocking
 * socket) with a deadline, and replies (status, refusals) are written as the peer reads them, with a
 * deadline too. A silent, slow or non-reading peer so costs one slot and its descriptor until its
 * deadline, never anyone else's time. */
#define HELLO_DEADLINE_NS 2000000000ull /* to send the whole hello */
#define REPLY_DEADLINE_NS 5000000000ull /* to read the whole reply */
#define MAX_PENDING 1024                /* connections past it are closed at once */

struct conn {
    int fd;            /* -1: done, to be removed */
    uint64_t deadline; /* cumux_now_ns() */
    struct ucred cred;
    struct cumux_hello hello;
    size_t got;        /* bytes of the hello so far */
    int out_fd;        /* the descriptor that came with the hello (a client's stdout), or -1 */
    char *reply;       /* welcome and text being written; NULL while reading the hello */
    size_t reply_len, reply_off;
    bool http;         /* a /metrics request (metrics.c), read into req: */
    char *req;
    size_t req_len;
};
#define HTTP_REQUEST_MAX 4096

static struct conn *conns;
static size_t nconns, capconns;
static uint32_t max_clients = 256;
static int test_sndbuf; /* CUMUX_TEST_SNDBUF (tests only): SO_SNDBUF of accepted connections */
static unsigned test_welcome_delay_us; /* CUMUX_TEST_WELCOME_DELAY_MS (tests only): before each welcome */

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->out_fd >= 0)
        close(c->out_fd);
    free(c->reply);
    free(c->req);
    c->fd = c->out_fd = -1;
    c->reply = NULL;
    c->req = NULL;
}

/* Write what the peer's socket takes now; the connection is closed once all of it went, or on error. */
static void conn_flush(struct conn *c)
{
    while (c->reply_off < c->reply_len) {
        ssize_t n = send(c->fd, c->reply + c->reply_off, c->reply_len - c->reply_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->reply_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return; /* the rest when poll says it has room */
        } else {
            break;
        }
    }
    conn_close(c);
}

/* A welcome carrying status and text, written as the peer reads it. */
static void conn_reply(struct conn *c, const char *text, int status)
{
    size_t tl = strlen(text);
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = status,
                              .text_len = tl};
    c->reply = malloc(sizeof w + tl);
    if (!c->reply) {
        conn_close(c);
        return;
    }
    memcpy(c->reply, &w, sizeof w);
    memcpy(c->reply + sizeof w, text, tl);
    c->reply_len = sizeof w + tl;
    c->reply_off = 0;
    c->deadline = cumux_now_ns() + REPLY_DEADLINE_NS;
    conn_flush(c);
}

/* Clients still connected (live), and all of them, those whose worker is still freeing what a client
 * that went held included (they keep their thread and descriptors until then). */
static void client_count(uint32_t *live, uint32_t *all)
{
    *live = *all = 0;
    pthread_mutex_lock(&clients_lock);
    for (struct srv_client *c = clients; c; c = c->next) {
        ++*all;
        *live += !atomic_load(&c->dead);
    }
    pthread_mutex_unlock(&clients_lock);
}

/* A shim's hello: a channel and a worker, unless the server is full. The limit counts live clients: one
 * that was just killed must not keep its successor out while its cleanup runs. Those cleanups are bounded
 * too, so that clients that connect and vanish in a loop cannot pile up threads without end; the bound is
 * generous because a storm of kills legitimately leaves many behind for a while (in a kill -9 storm of 128
 * clients on a loaded 2-core machine under ASan, 387 were being cleaned up at once). */
#define CLEANUP_ALLOWANCE 4
static _Atomic int worker_failing; /* worker_fails has begun */

static void conn_client(struct conn *k)
{
    /* A worker that is giving up takes nobody: its listening socket is the standby's already, but a
     * connection its accept thread took meanwhile must go there too (the client tries again). */
    if (atomic_load(&worker_failing)) {
        conn_close(k);
        return;
    }
    uint32_t live, all;
    client_count(&live, &all);
    if (live >= max_clients || all - live >= CLEANUP_ALLOWANCE * (uint64_t)max_clients) {
        char text[200];
        if (live >= max_clients)
            snprintf(text, sizeof text, "cumuxd serves at most %u clients, and has that many; raise the limit with "
                     "CUMUX_MAX_CLIENTS=N or cumuxd --max-clients N", max_clients);
        else
            snprintf(text, sizeof text, "cumuxd is still cleaning up after %u clients that went; try again shortly",
                     all - live);
        cumux_logf("refused a client of pid %d: %u clients live, %u being cleaned up (limit %u)", (int)k->cred.pid,
                   live, all - live, max_clients);
        conn_reply(k, text, CUDA_ERROR_MPS_MAX_CLIENTS_REACHED);
        return;
    }
    int s = k->fd, out_fd = k->out_fd;
    struct srv_client *c = srv_client_start(s, k->cred.pid, k->cred.uid, next_client_id++, out_fd);
    if (!c) {
        conn_reply(k, "cumuxd could not set up a channel", CUDA_ERROR_OUT_OF_MEMORY);
        return;
    }
    /* Its device memory limit: what it asked for (CUMUX_MEMORY_LIMIT, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT),
     * never above the server's default for everyone. */
    uint64_t want = k->hello.arg, dflt = srv_default_mem_limit();
    atomic_store(&c->mem_limit, want && (!dflt || want < dflt) ? want : dflt);
    atomic_store(&c->priority, srv_default_priority()); /* its INIT may ask for another */
    /* Back after a worker change: the same token stays its own, since the chunks it takes back are kept
     * under it with the supervisor, for a fault after this one (claims also need its pid and uid). */
    if (k->hello.kind == CUMUX_HELLO_RESUME) {
        c->resume_claim = k->hello.token;
        if (k->hello.token && c->resume_token)
            c->resume_token = k->hello.token;
    }
    k->fd = k->out_fd = -1; /* the client owns them now */
    conn_close(k);
    /* Listed before it is welcomed, and not welcomed if this worker began to give up meanwhile: a client
     * with a channel is then one worker_fails tells (it sets worker_failing before it takes the lock), and
     * one that got no welcome tries again, at the worker taking over. */
    pthread_mutex_lock(&clients_lock);
    bool failing = atomic_load(&worker_failing);
    c->next = clients;
    clients = c;
    pthread_mutex_unlock(&clients_lock);
    if (test_welcome_delay_us) /* tests: a fault may come between the listing and the welcome */
        usleep(test_welcome_delay_us);
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = 0,
                              .client_id = c->id, .shm_size = sizeof(struct cumux_shm),
                              .resume_token = c->resume_token};
    /* Still non-blocking: a fresh socket takes a welcome at once, and if it does not, the client is
     * dropped rather than waited for. */
    if (failing || cumux_sock_send(s, &w, sizeof w, c->shm_fd) < 0) {
        atomic_store(&c->dead, 1);
        return;
    }
    /* The worker reads descriptors the client sends with blocking reads (after poll says they are
     * there): from here on the socket blocks again. */
    int fl = fcntl(s, F_GETFL);
    if (fl < 0 || fcntl(s, F_SETFL, fl & ~O_NONBLOCK) < 0)
        atomic_store(&c->dead, 1);
    uint64_t lim = atomic_load(&c->mem_limit);
    if (lim)
        cumux_logf("client %u connected: pid %d uid %u, device memory limit %.1f MiB", c->id, (int)c->pid,
                   (unsigned)c->uid, lim / 1048576.0);
    else
        cumux_logf("client %u connected: pid %d uid %u", c->id, (int)c->pid, (unsigned)c->uid);
}

static unsigned kill_clients(pid_t pid, char *text, size_t cap);
static unsigned set_memory_limit(pid_t pid, uint64_t limit, char *text, size_t cap);
static unsigned set_priority(pid_t pid, int cls, char *text, size_t cap);
static unsigned set_sms(pid_t pid, uint64_t arg, char *text, size_t cap);
static unsigned sms_refused;

/* A whole hello has come. */
static void conn_hello(struct conn *k)
{
    const struct cumux_hello *h = &k->hello;
    if (h->magic != CUMUX_MAGIC) {
        conn_close(k);
        return;
    }
    bool allowed = k->cred.uid == getuid() || k->cred.uid == 0;
    if (k->out_fd >= 0 && ((h->kind != CUMUX_HELLO_CLIENT && h->kind != CUMUX_HELLO_RESUME) ||
                           !(h->flags & CUMUX_HELLO_STDOUT) ||
                           h->version != CUMUX_PROTO_VERSION || !allowed)) {
        close(k->out_fd);
        k->out_fd = -1;
    }
    if (h->version != CUMUX_PROTO_VERSION) {
        conn_reply(k, "protocol version mismatch between the shim and cumuxd: use the same build",
                   CUDA_ERROR_MPS_CONNECTION_FAILED);
        return;
    }
    /* Only the server's own user (and root) may use it, as with MPS's default. */
    if (!allowed) {
        conn_reply(k, "permission denied: cumuxd belongs to another user", CUDA_ERROR_MPS_CONNECTION_FAILED);
        return;
    }
    switch (h->kind) {
    case CUMUX_HELLO_STATUS: {
        char *text = h->flags & CUMUX_STATUS_RECORDS ? status_records() : status_report();
        if (text)
            conn_reply(k, text, 0);
        else
            conn_close(k);
        free(text);
        return;
    }
    case CUMUX_HELLO_STOP:
        conn_reply(k, "stopping\n", 0);
        stop_requested = 1;
        return;
    case CUMUX_HELLO_KILL: {
        char text[1024];
        unsigned n = kill_clients((pid_t)h->flags, text, sizeof text);
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_DEFAULT_MEMORY: {
        srv_set_default_mem_limit(h->arg);
        char text[96] = "default device memory limit: none\n";
        if (h->arg)
            snprintf(text, sizeof text, "default device memory limit: %.1f MiB\n", h->arg / 1048576.0);
        cumux_logf("%.*s (for clients from now on)", (int)strlen(text) - 1, text);
        conn_reply(k, text, 0);
        return;
    }
    case CUMUX_HELLO_SET_DEFAULT_PRIORITY:
        if (h->arg < CUMUX_PRIORITY_LOW || h->arg > CUMUX_PRIORITY_HIGH) {
            conn_reply(k, "not a priority class\n", CUDA_ERROR_INVALID_VALUE);
            return;
        }
        srv_set_default_priority((int)h->arg);
        cumux_logf("default priority: %s (for clients that ask for none, from now on)",
                   cumux_priority_name((enum cumux_priority)h->arg));
        conn_reply(k, "default priority set\n", 0);
        return;
    case CUMUX_HELLO_SET_PRIORITY: {
        char text[1024];
        unsigned n = h->arg >= CUMUX_PRIORITY_LOW && h->arg <= CUMUX_PRIORITY_HIGH
                         ? set_priority((pid_t)h->flags, (int)h->arg, text, sizeof text)
                         : 0;
        if (h->arg < CUMUX_PRIORITY_LOW || h->arg > CUMUX_PRIORITY_HIGH)
            snprintf(text, sizeof text, "not a priority class\n");
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_MEMORY: {
        char text[1024];
        unsigned n = set_memory_limit((pid_t)h->flags, h->arg, text, sizeof text);
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_SMS: {
        char text[1024];
        if ((h->arg >> 32) > 100 && (h->arg >> 32) != CUMUX_SMS_KEEP) {
            conn_reply(k, "not a percentage\n", CUDA_ERROR_INVALID_VALUE);
            return;
        }
        unsigned n = set_sms((pid_t)h->flags, h->arg, text, sizeof text);
        conn_reply(k, text, !n ? CUDA_ERROR_NOT_FOUND : sms_refused ? CUDA_ERROR_INVALID_VALUE : 0);
        return;
    }
    case CUMUX_HELLO_SET_DEFAULT_THREADS: {
        if (h->arg > 100) {
            conn_reply(k, "not a percentage\n", CUDA_ERROR_INVALID_VALUE);
            return;
        }
        srv_set_default_thread_percent((unsigned)h->arg);
        char text[96];
        snprintf(text, sizeof text, "default active thread percentage: %u\n",
                 h->arg && h->arg < 100 ? (unsigned)h->arg : 100);
        cumux_logf("%.*s (for clients from now on)", (int)strlen(text) - 1, text);
        conn_reply(k, text, 0);
        return;
    }
    case CUMUX_HELLO_CLIENT:
    case CUMUX_HELLO_RESUME: /* which memory it may take back is checked when it asks (chunks.c) */
        conn_client(k);
        return;
    default:
        conn_close(k);
        return;
    }
}

/* A /metrics request: read until its headers end, then answered (and closed) whatever it asked. */
static void http_read(struct conn *k)
{
    if (!k->req && !(k->req = malloc(HTTP_REQUEST_MAX + 1))) {
        conn_close(k);
        return;
    }
    ssize_t n = recv(k->fd, k->req + k->req_len, HTTP_REQUEST_MAX - k->req_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        conn_close(k);
        return;
    }
    k->req_len += (size_t)n;
    k->req[k->req_len] = 0;
    if (!strstr(k->req, "\r\n\r\n") && k->req_len < HTTP_REQUEST_MAX)
        return;
    struct srv_client_stat *cs = NULL;
    ssize_t n_cs = srv_clients_snapshot(&cs);
    k->reply = srv_metrics_response(k->req, k->req_len, cs, n_cs, &k->reply_len);
    free(cs);
    if (!k->reply) {
        conn_close(k);
        return;
    }
    k->reply_off = 0;
    k->deadline = cumux_now_ns() + REPLY_DEADLINE_NS;
    conn_flush(k);
}

/* The socket is readable: take what there is of the hello. */
static void conn_read(struct conn *k)
{
    if (k->http) {
        http_read(k);
        return;
    }
    ssize_t n = cumux_sock_recv_some(k->fd, (char *)&k->hello + k->got, sizeof k->hello - k->got, &k->out_fd);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        conn_close(k);
        return;
    }
    k->got += (size_t)n;
    if (k->got == sizeof k->hello)
        conn_hello(k);
}

static uint64_t accept_paused_until; /* out of descriptors: the listening socket waits a little */

static void accept_all(int lsock, bool http)
{
    for (int i = 0; i < 64; i++) {
        int s = accept4(lsock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                cumux_logf("cannot accept a connection: %s", strerror(errno));
                accept_paused_until = cumux_now_ns() + 100000000ull;
            }
            return;
        }
        struct ucred cred = {0};
        socklen_t cl = sizeof cred;
        if (atomic_load(&worker_failing) || nconns >= MAX_PENDING || (!http && getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)) {
            close(s);
            continue;
        }
        if (nconns == capconns) {
            size_t cap = capconns ? capconns * 2 : 64;
            struct conn *nc = realloc(conns, cap * sizeof *nc);
            if (!nc) {
                close(s);
                continue;
            }
            conns = nc;
            capconns = cap;
        }
        if (test_sndbuf > 0)
            setsockopt(s, SOL_SOCKET, SO_SNDBUF, &test_sndbuf, sizeof test_sndbuf);
        conns[nconns++] = (struct conn){.fd = s, .deadline = cumux_now_ns() + HELLO_DEADLINE_NS, .cred = cred,
                                        .out_fd = -1, .http = http};
    }
}

/* Connections done or past their deadline go. */
static void conns_sweep(void)
{
    uint64_t now = cumux_now_ns();
    size_t j = 0;
    for (size_t i = 0; i < nconns; i++) {
        struct conn *k = &conns[i];
        /* The deadline is the peer's, not ours: while this thread welcomed others (a crowd of programs
         * starting at once on a loaded machine), a hello may have arrived unread, or a reply's reader made
         * room. Take it, or write, before judging. */
        if (k->fd >= 0 && now >= k->deadline) {
            if (k->reply)
                conn_flush(k);
            else
                conn_read(k);
            now = cumux_now_ns();
        }
        if (k->fd >= 0 && now >= k->deadline) {
            cumux_debugf("connection of pid %d closed: %s within its deadline", (int)k->cred.pid,
                         k->reply ? "did not read its reply" : "no complete hello");
            conn_close(k);
        }
        if (k->fd >= 0)
            conns[j++] = *k;
    }
    nconns = j;
}

static void mark_dead(struct srv_client *c)
{
    atomic_store(&c->dead, 1);
    atomic_fetch_add(&c->shm->doorbell, 1);
    cumux_futex_wake(&c->shm->doorbell, 1);
}

static void reap_finished(void)
{
    pthread_mutex_lock(&clients_lock);
    for (struct srv_client **p = &clients; *p;) {
        struct srv_client *c = *p;
        if (atomic_load(&c->finished)) {
            *p = c->next;
            srv_client_free(c);
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&clients_lock);
}

/* A thread stuck in the driver may hold the client list's lock when the worker must give up: wait for it
 * a little, then go on without. */
static bool lock_clients_briefly(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000;
    if (until.tv_nsec >= 1000000000)
        until.tv_sec++, until.tv_nsec -= 1000000000;
    return pthread_mutex_timedlock(&clients_lock, &until) == 0;
}

static int listen_sock = -1; /* the serving worker's copy of the listening socket */
static int metrics_sock = -1; /* CUMUX_METRICS_PORT's listening socket (the supervisor's), or -1 */

/* This worker cannot serve any more: its context met a fatal error (fault.c's watch thread), or a killed
 * client's kernels never ended. Every client gets `code` in its channel (its calls return it once the
 * connection is gone, as the calls of a program whose own context failed do), the supervisor gets a
 * record, and the worker exits at once: the standby worker (supervisor.c) takes new clients. The clients
 * of this worker lose their work, as every client of a faulted MPS server does; with containment
 * (CUMUX_CONTAIN=1) all but the culprit come back to the standby with their memory. `culprit`: the id of the
 * client known to have caused it, or 0 (the driver's API does not say whose kernel faulted:
 * docs/faults.md); `culprit_desc`: one known only by its description (it has gone). */
static _Noreturn void worker_fails(CUresult code, int gpu, uint32_t culprit, const char *culprit_desc,
                                   const char *why)
{
    /* This worker accepts nobody more: the socket is the standby's now (the supervisor's and the other
     * workers' copies stay open; only this descriptor is replaced). */
    atomic_store(&worker_failing, 1);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul >= 0 && listen_sock >= 0)
        dup2(nul, listen_sock);
    if (nul >= 0 && metrics_sock >= 0)
        dup2(nul, metrics_sock);
    struct srv_fault_record rec = {.at_ms = srv_wall_ms(), .recovered_ms = -1, .code = (int32_t)code,
                                   .gpu = gpu};
    bool locked = lock_clients_briefly();
    size_t len = 0;
    unsigned n = 0;
    for (struct srv_client *c = clients; c; c = c->next) {
        if (c->id == culprit) {
            srv_client_describe(c, rec.culprit, sizeof rec.culprit);
            int32_t none = 0; /* a killed client has its own error already */
            if (c->shm) {
                atomic_compare_exchange_strong(&c->shm->server_fault, &none, (int32_t)code);
                cumux_shm_wake_waiters(c->shm);
            }
            continue;
        }
        if (atomic_load(&c->finished))
            continue;
        /* Every client but the named culprit may come back with its memory (docs/faults.md). It lost nothing
         * (1) when it had no kernel in flight, no stream with work it has not seen end, and no message half
         * handled: every message up to the ring's head handled to the end (read in this order: a message
         * taken meanwhile was written before the head read here). The head is told to the client: work it
         * wrote after (the worker may still take it, on a context that has failed) was lost too. */
        uint64_t done = atomic_load_explicit(&c->ring_done, memory_order_acquire);
        uint64_t head = c->shm ? atomic_load_explicit(&c->shm->head, memory_order_acquire) : 0;
        if (c->shm && c->resume_token) {
            /* One that had work going lost it (a kernel cut off may have written half its output): it comes
             * back too, and its streams and events say so once each (2; shim/resume.c). */
            bool in_flight = srv_usage_in_flight(c), unconfirmed = atomic_load(&c->unconfirmed.count) != 0;
            bool idle = done == head && !in_flight && !unconfirmed;
            atomic_store(&c->resumable, 1);
            c->shm->server_resumable_head = head;
            /* Which streams lost work: those with work not seen to end; any of them while a message was
             * not handled yet (its stream is not known here), kernels in flight on no such stream, or a stream
             * past the words. */
            for (unsigned w = 0; w < CUMUX_LOST_STREAM_WORDS; w++)
                c->shm->server_lost_streams[w] = atomic_load(&c->unconfirmed.bits[w]);
            c->shm->server_lost_all = done != head || (in_flight && !unconfirmed) ||
                                      atomic_load(&c->unconfirmed.beyond) != 0;
            atomic_store(&c->shm->server_resumable, idle ? 1 : 2);
        }
        if (c->shm) {
            atomic_store(&c->shm->server_fault, (int32_t)code);
            cumux_shm_wake_waiters(c->shm); /* its threads waiting for an answer learn it now */
        }
        int k = snprintf(rec.clients + len, sizeof rec.clients - len, "%s", n ? "; " : "");
        if (k > 0 && (size_t)k < sizeof rec.clients - len)
            len += (size_t)k;
        k = srv_client_describe(c, rec.clients + len, sizeof rec.clients - len);
        if (k > 0 && (size_t)k < sizeof rec.clients - len)
            len += (size_t)k;
        n++;
    }
    if (locked)
        pthread_mutex_unlock(&clients_lock);
    if (!rec.culprit[0] && culprit_desc)
        snprintf(rec.culprit, sizeof rec.culprit, "%s", culprit_desc);
    snprintf(rec.why, sizeof rec.why, "%s", why);
    const char *name = NULL;
    cuGetErrorName(code, &name);
    cumux_logf("GPU %d: %s (%s); culprit: %s; the %u other client(s) %s: %s; the standby worker takes over", gpu,
               why, name ? name : "?", rec.culprit[0] ? rec.culprit : "not known", n,
               srv_chunks_on() ? "may come back, told what work they lost" : "lose their work",
               n ? rec.clients : "none");
    srv_fault_decided(code);
    srv_supervisor_fault(&rec);
    _exit(CUMUX_EXIT_GPU_FAULT);
}

/* A GPU coredump has begun: the driver may let faulted streams go on while it writes it, so no program may
 * answer its questions from completion marks any more (marks.c). */
static _Atomic uint64_t dump_begun_ns; /* when the fault watch saw the dump begin */

static void on_dump_begun(void)
{
    atomic_store(&dump_begun_ns, cumux_now_ns());
    srv_marks_stop_telling();
    bool locked = lock_clients_briefly();
    for (struct srv_client *c = locked ? clients : NULL; c; c = c->next)
        srv_marks_withdraw(c);
    if (locked)
        pthread_mutex_unlock(&clients_lock);
    cumux_logf("a GPU coredump has begun: programs ask the worker from now on (completion marks withdrawn)");
}

static void on_gpu_fault(CUresult r, int gpu)
{
    /* The culprit: the client whose module holds the faulting code, from the GPU coredump (coredump.c). */
    uint64_t mods[8];
    CUresult dumped;
    char kernel[96];
    size_t nm = srv_coredump_culprits(mods, 8, &dumped, kernel, sizeof kernel);
    if (dumped == CUDA_ERROR_ASSERT && dumped != r) {
        /* With dumps on the driver says less than the fault was for an assert (a launch failure, on the
         * H200): the programs are told what the dump shows, as the driver tells it without dumps. Only that
         * case: for others the driver's own error is what a program gets natively (a trap's dump shows an
         * SM exception too, yet natively it is CUDA_ERROR_LAUNCH_FAILED). */
        cumux_logf("GPU %d: the driver said %d, the GPU coredump shows %d: told %d", gpu, (int)r, (int)dumped,
                   (int)dumped);
        r = dumped;
    }
    uint32_t culprit = 0;
    unsigned owners = 0;
    if (nm && lock_clients_briefly()) {
        for (struct srv_client *c = clients; c; c = c->next) {
            bool owns = false;
            for (size_t i = 0; i < nm && !owns; i++)
                owns = srv_module_owned(c, mods[i]);
            if (owns) {
                culprit = c->id;
                owners++;
            }
        }
        pthread_mutex_unlock(&clients_lock);
    }
    char gone[192] = "";
    if (owners > 1)
        culprit = 0; /* kernels of several clients faulted at once: no one name */
    else if (!owners && nm && srv_module_departed_owner(mods[0], gone, sizeof gone - 16))
        strcat(gone, " (gone)"); /* it had its error and left before the dump was read */
    /* Without a dump: a fault comes from a kernel that was running, so the clients with launches not known
     * to have ended are the candidates; when there is one, it is the culprit. */
    char why[sizeof ((struct srv_fault_record *)0)->why] = "fatal GPU error";
    if (kernel[0] && (culprit || gone[0])) /* the dump's faulting kernel, of the client it names */
        snprintf(why, sizeof why, "fatal GPU error in kernel %s", kernel);
    if (!culprit && !gone[0] && lock_clients_briefly()) {
        unsigned cands = 0, nlive = 0, unsure = 0;
        char only_desc[160] = "";
        uint32_t only = 0, live_id[8];
        int live_pid[8];
        size_t len = strlen(why);
        /* With dumps on, launches seen to end since shortly before the dump began may have been the
         * culprit's, answered with success while the driver wrote it (fault.c). */
        uint64_t begun = atomic_load(&dump_begun_ns), now = cumux_now_ns();
        uint64_t base = begun ? begun : now, since = base > 2000000000ull ? base - 2000000000ull : 0;
        for (struct srv_client *c = clients; c; c = c->next) {
            /* Launches not known to have ended, unless its own marks said they have (a program that
             * answered its questions itself from them did not tell the server). */
            if (atomic_load(&c->finished))
                continue;
            bool in_flight = srv_usage_in_flight(c);
            if (!in_flight || srv_marks_client_done(c)) {
                if (in_flight || atomic_load(&c->ended_ns) >= since)
                    unsure++;
                continue;
            }
            only = c->id;
            if (!cands) /* its name, should it leave the list before the record is made */
                srv_client_describe(c, only_desc, sizeof only_desc);
            if (nlive < 8) {
                live_id[nlive] = c->id;
                live_pid[nlive++] = (int)c->pid;
            }
            int k = snprintf(why + len, sizeof why - len, "%s%u pid %d", cands ? ", " : "; kernels in flight: ",
                             c->id, (int)c->pid);
            if (k > 0 && (size_t)k < sizeof why - len)
                len += (size_t)k;
            cands++;
        }
        pthread_mutex_unlock(&clients_lock);
        /* And those that went with kernels in flight just before (within 2 s). */
        char went[4][160];
        size_t nw = srv_usage_departed_lately(2000000000ull, went, 4), kept = 0;
        for (size_t i = 0; i < nw; i++) {
            /* One that is leaving is both: its worker recorded its going before it left the list. */
            unsigned id = 0;
            int pid = 0;
            bool listed = false;
            if (sscanf(went[i], "%u pid %d", &id, &pid) == 2)
                for (unsigned j = 0; j < nlive && !listed; j++)
                    listed = live_id[j] == id && live_pid[j] == pid;
            if (listed)
                continue;
            if (kept != i)
                memcpy(went[kept], went[i], sizeof went[i]);
            kept++;
            int k = snprintf(why + len, sizeof why - len, "%s%.40s (gone)", cands ? ", " : "; kernels in flight: ",
                             went[i]);
            if (k > 0 && (size_t)k < sizeof why - len)
                len += (size_t)k;
            cands++;
        }
        /* With dumps on, only when no other client's launches were seen to end lately (nor said to by its
         * marks): the driver may have answered the culprit's synchronize with success before the fault
         * showed (fault.c), which ended its launches here, leaving a busy bystander the only candidate
         * (12-03, a runtime assert beside one). The dump names a culprit when it can; a trap's dump on the
         * H200 once named no one (12-04), its program the only one with kernels in flight. */
        if (cands == 1 && (!srv_coredump_path[0] || !unsure)) {
            culprit = only; /* 0 when the one candidate has gone: named by its description */
            if (!only)
                snprintf(gone, sizeof gone, "%.150s (gone)", went[0]);
            else
                snprintf(gone, sizeof gone, "%.150s", only_desc);
            snprintf(why, sizeof why, "fatal GPU error (culprit: the only client with kernels in flight)");
        }
    }
    worker_fails(r, gpu, culprit, gone[0] ? gone : NULL, why);
}

/* ---------------------------------------------------------------- cumux kill
 * Like MPS's terminate_client: the client's calls fail from now on with CUDA_ERROR_MPS_CLIENT_TERMINATED
 * and everything it held is freed. Its worker first waits for the work it queued; work that never ends
 * (a kernel in an endless loop) cannot be taken off a shared context, so after a grace period
 * (CUMUX_KILL_GRACE_MS, default 500) the whole worker is replaced, naming the killed client. */

static uint64_t kill_grace_ms(void)
{
    const char *e = getenv("CUMUX_KILL_GRACE_MS");
    long v = e && *e ? atol(e) : 500;
    return v > 0 ? (uint64_t)v : 500;
}

static _Atomic int kills_pending; /* killed clients whose work has not drained yet */

struct kill_watch {
    uint32_t id;
    uint64_t grace_ms;
};

static void *kill_watch_main(void *arg)
{
    struct kill_watch kw = *(struct kill_watch *)arg;
    free(arg);
    uint64_t end = cumux_now_ns() + kw.grace_ms * 1000000ull;
    for (;;) {
        pthread_mutex_lock(&clients_lock);
        struct srv_client *c = clients;
        while (c && c->id != kw.id)
            c = c->next;
        bool gone = !c || atomic_load(&c->finished);
        pthread_mutex_unlock(&clients_lock);
        if (gone) {
            atomic_fetch_sub(&kills_pending, 1);
            char b = 1;
            ssize_t w = write(srv_wake_fd, &b, 1); /* the accept loop takes new clients again */
            (void)w;
            return NULL;
        }
        if (cumux_now_ns() >= end)
            break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    char why[96];
    snprintf(why, sizeof why, "a killed client's work did not end within %llu ms", (unsigned long long)kw.grace_ms);
    worker_fails(CUDA_ERROR_CONTEXT_IS_DESTROYED, 0, kw.id, NULL, why);
}

/* A line more of a reply's text (cap bytes, *len used), logged too. */
static void reply_line(char *text, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_line(char *text, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(text + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0 && (size_t)k < cap - *len) {
        cumux_logf("%.*s", k - 1, text + *len); /* without its newline */
        *len += (size_t)k;
    }
}

/* `cumux set PID ...` and `cumux kill PID`: each client of process pid changed by `apply`, which says how
 * in `what`; the reply has a line a client, or `none` (a format taking the pid). Returns how many. */
static unsigned change_clients(pid_t pid, uint64_t arg, void (*apply)(struct srv_client *, uint64_t, char *, size_t),
                               const char *none, char *text, size_t cap)
{
    unsigned n = 0;
    size_t len = 0;
    text[0] = 0;
    pthread_mutex_lock(&clients_lock);
    for (struct srv_client *c = clients; c; c = c->next) {
        if (c->pid != pid || atomic_load(&c->dead))
            continue;
        char who[160], what[256];
        apply(c, arg, what, sizeof what);
        n++;
        srv_client_describe(c, who, sizeof who);
        reply_line(text, cap, &len, "client %s: %s\n", who, what);
    }
    pthread_mutex_unlock(&clients_lock);
    if (!n)
        snprintf(text, cap, none, (int)pid);
    return n;
}

#define NO_CLIENT_OF_PROCESS "no client of process %d\n"

/* --memory SIZE: that limit (0: none) from its next allocation on; what it holds already stays its own,
 * even past it. */
static void apply_memory_limit(struct srv_client *c, uint64_t limit, char *what, size_t cap)
{
    atomic_store(&c->mem_limit, limit);
    if (limit)
        snprintf(what, cap, "device memory limit %.1f MiB, %.1f MiB held (cumux set)", limit / 1048576.0,
                 atomic_load(&c->mem_bytes) / 1048576.0);
    else
        snprintf(what, cap, "device memory limit none, %.1f MiB held (cumux set)",
                 atomic_load(&c->mem_bytes) / 1048576.0);
}

static unsigned set_memory_limit(pid_t pid, uint64_t limit, char *text, size_t cap)
{
    return change_clients(pid, limit, apply_memory_limit, NO_CLIENT_OF_PROCESS, text, cap);
}

/* --priority CLASS: the streams it makes from now on run in that class's band (a stream's priority is
 * fixed when it is made). */
static void apply_priority(struct srv_client *c, uint64_t cls, char *what, size_t cap)
{
    atomic_store(&c->priority, (int)cls);
    snprintf(what, cap, "priority %s for its new streams (cumux set)", cumux_priority_name((enum cumux_priority)cls));
}

static unsigned set_priority(pid_t pid, int cls, char *text, size_t cap)
{
    return change_clients(pid, (uint64_t)cls, apply_priority, NO_CLIENT_OF_PROCESS, text, cap);
}

/* --sms N / --threads P: its kernels from their next operation on run on N SMs of their own and at most P%
 * of the SMs (placement.c); a reservation that cannot be had leaves the old one, and says why. */
/* sms_refused: by the last set_sms (change_clients runs on this thread alone) */
static void apply_sms(struct srv_client *c, uint64_t arg, char *what, size_t cap)
{
    char why[200];
    uint32_t sms = (uint32_t)arg, pct = (uint32_t)(arg >> 32);
    if (sms == CUMUX_SMS_KEEP)
        sms = atomic_load(&c->want_sms);
    if (pct == CUMUX_SMS_KEEP)
        pct = atomic_load(&c->want_percent);
    if (srv_placement_want(c, sms, pct, why, sizeof why) != 0) {
        sms_refused++;
        snprintf(what, cap, "unchanged: %s", why);
    } else {
        snprintf(what, cap, "%s (cumux set)", why);
    }
    cumux_logf("client %u: SMs: %s", c->id, what);
}

static unsigned set_sms(pid_t pid, uint64_t arg, char *text, size_t cap)
{
    sms_refused = 0;
    return change_clients(pid, arg, apply_sms, NO_CLIENT_OF_PROCESS, text, cap);
}

/* Ends the clients of process pid; the reply text says what was done. Returns how many. */
/* One client killed: its calls fail from now on, and a watch gives its work `grace` ms to drain. */
static void apply_kill(struct srv_client *c, uint64_t grace, char *what, size_t cap)
{
    atomic_store(&c->shm->server_fault, (int32_t)CUDA_ERROR_MPS_CLIENT_TERMINATED);
    shutdown(c->sock, SHUT_RDWR); /* its shim sees the server gone, and returns the error above */
    mark_dead(c);
    snprintf(what, cap, "terminated by cumux kill");
    struct kill_watch *kw = malloc(sizeof *kw);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (kw) {
        *kw = (struct kill_watch){.id = c->id, .grace_ms = grace};
        atomic_fetch_add(&kills_pending, 1);
        if (pthread_create(&t, &a, kill_watch_main, kw) != 0) {
            atomic_fetch_sub(&kills_pending, 1);
            free(kw);
        }
    }
    pthread_attr_destroy(&a);
}

static unsigned kill_clients(pid_t pid, char *text, size_t cap)
{
    return change_clients(pid, kill_grace_ms(), apply_kill, "no client of cumuxd has pid %d\n", text, cap);
}

static int serve(int lsock)
{
    struct pollfd *fds = NULL;
    struct srv_client **owners = NULL;
    size_t cap = 0;
    int rc = 0;
    while (!stop_requested) {
        pthread_mutex_lock(&clients_lock);
        size_t n = 3 + nconns;
        uint32_t live = 0; /* how many share the server: a client's waits spin while they are at most half the CPUs */
        for (struct srv_client *c = clients; c; c = c->next) {
            n++;
            live += !atomic_load(&c->dead);
        }
        if (n > cap) {
            size_t ncap = n * 2;
            struct pollfd *nf = realloc(fds, ncap * sizeof *fds);
            if (nf)
                fds = nf;
            struct srv_client **no = nf ? realloc(owners, ncap * sizeof *owners) : NULL;
            if (no)
                owners = no;
            if (!nf || !no) {
                pthread_mutex_unlock(&clients_lock);
                rc = -1;
                break;
            }
            cap = ncap;
        }
        uint64_t now = cumux_now_ns();
        /* While a killed client's work drains, new programs wait in the backlog: if the work never ends,
         * the standby worker takes them, and none starts here only to lose its context. */
        bool accepting = now >= accept_paused_until && atomic_load(&kills_pending) == 0;
        fds[0] = (struct pollfd){.fd = accepting ? lsock : -1, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = wake_pipe[0], .events = POLLIN};
        fds[2] = (struct pollfd){.fd = accepting ? metrics_sock : -1, .events = POLLIN};
        /* Connections before they are clients: reading their hello, or writing a reply. */
        int timeout = accepting ? 1000 : 100;
        size_t nk = nconns;
        for (size_t i = 0; i < nk; i++) {
            fds[3 + i] = (struct pollfd){.fd = conns[i].fd, .events = conns[i].reply ? POLLOUT : POLLIN};
            uint64_t left_ms = conns[i].deadline > now ? (conns[i].deadline - now) / 1000000 + 1 : 0;
            if (left_ms < (uint64_t)timeout)
                timeout = (int)left_ms;
        }
        size_t k = 3 + nk;
        for (struct srv_client *c = clients; c; c = c->next) {
            if (c->clients_told != live && !atomic_load(&c->dead)) {
                atomic_store_explicit(&c->shm->server_clients, live, memory_order_relaxed);
                c->clients_told = live;
            }
            if (c->hup_seen)
                continue;
            /* Only the hang-up: descriptors the client sends are read by its worker. */
            fds[k] = (struct pollfd){.fd = c->sock, .events = POLLRDHUP};
            owners[k++] = c;
        }
        pthread_mutex_unlock(&clients_lock);
        int r = poll(fds, k, timeout);
        srv_chunks_expire();
        if (r < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        if (r > 0) {
            /* Hang-ups first: reaping below frees clients that owners[] still points to. */
            for (size_t i = 3 + nk; i < k; i++) {
                if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                    pthread_mutex_lock(&clients_lock);
                    owners[i]->hup_seen = true;
                    mark_dead(owners[i]);
                    pthread_mutex_unlock(&clients_lock);
                }
            }
            if (fds[1].revents) {
                char buf[64];
                ssize_t rd = read(wake_pipe[0], buf, sizeof buf);
                (void)rd;
                reap_finished();
            }
            for (size_t i = 0; i < nk && !stop_requested; i++) {
                short ev = fds[3 + i].revents;
                if (!ev || conns[i].fd < 0)
                    continue;
                if (conns[i].reply)
                    conn_flush(&conns[i]); /* an error or hang-up shows as a failed send */
                else
                    conn_read(&conns[i]);  /* likewise as a failed or empty read */
            }
            if (fds[0].revents & POLLIN)
                accept_all(lsock, false);
            if (fds[2].revents & POLLIN)
                accept_all(metrics_sock, true);
        }
        conns_sweep();
    }
    for (size_t i = 0; i < nconns; i++)
        conn_close(&conns[i]);
    nconns = 0;
    free(conns);
    conns = NULL;
    capconns = 0;
    free(fds);
    free(owners);
    return rc;
}

/* A limit from the command line or the environment: 1..max, else -1. */
/* A limit from the environment or the command line (`from` names which), into *out when given; false
 * (after saying why) when it is not a number from 1 to max. */
static bool parse_limit(const char *text, const char *from, long max, uint32_t *out)
{
    if (!text || !*text)
        return true;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 0);
    if (errno || end == text || *end || v < 1 || v > max) {
        fprintf(stderr, "cumuxd: %s must be a number from 1 to %ld, not \"%s\"\n", from, max, text);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

#define MAX_CLIENTS_CAP 65536L
#define MAX_HANDLES_CAP (1L << 24) /* handle_new's table never grows past it anyway */

/* NAME in the pipe directory (checked to be ours: see main) holds this process's pid. */
static void write_pid_file(int dir_fd, const char *name)
{
    int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    char line[32];
    int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

int main(int argc, char **argv)
{
    bool foreground = false;
    const char *max_clients_arg = getenv("CUMUX_MAX_CLIENTS"), *max_handles_arg = getenv("CUMUX_MAX_HANDLES");
    const char *max_clients_from = "CUMUX_MAX_CLIENTS", *max_handles_from = "CUMUX_MAX_HANDLES";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--foreground") || !strcmp(argv[i], "-f")) {
            foreground = true;
        } else if (!strcmp(argv[i], "--max-clients") && i + 1 < argc) {
            max_clients_arg = argv[++i];
            max_clients_from = "--max-clients";
        } else if (!strcmp(argv[i], "--max-handles") && i + 1 < argc) {
            max_handles_arg = argv[++i];
            max_handles_from = "--max-handles";
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: cumuxd [--foreground] [--max-clients N] [--max-handles N]\n"
                   "  --max-clients N   clients served at once (default 256; also CUMUX_MAX_CLIENTS)\n"
                   "  --max-handles N   handles (contexts, streams, events, modules...) per client (default "
                   "1048576; also CUMUX_MAX_HANDLES)\n"
                   "Environment: CUMUX_PIPE_DIRECTORY (default %s), CUMUX_LOG_DIRECTORY (default: the pipe "
                   "directory), CUMUX_DEFAULT_MEMORY_LIMIT (each client's device memory at most: 4G, or "
                   "0=4G as in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), CUMUX_DEBUG.\nUsually started by `cumux start` or `cumux run`.\n",
                   CUMUX_DEFAULT_PIPE_DIRECTORY);
            return 0;
        } else {
            fprintf(stderr, "cumuxd: unknown argument %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (!parse_limit(max_clients_arg, max_clients_from, MAX_CLIENTS_CAP, &max_clients) ||
        !parse_limit(max_handles_arg, max_handles_from, MAX_HANDLES_CAP, &srv_max_handles))
        return 2;
    const char *dml = getenv("CUMUX_DEFAULT_MEMORY_LIMIT");
    uint64_t dml_bytes = 0;
    if (dml && *dml && !cumux_parse_device_limits(dml, 0, &dml_bytes)) {
        fprintf(stderr, "cumuxd: CUMUX_DEFAULT_MEMORY_LIMIT=%s: not a size (4G, 512M) nor 0=SIZE,1=SIZE\n", dml);
        return 2;
    }
    srv_set_default_mem_limit(dml_bytes);
    const char *dp = getenv("CUMUX_DEFAULT_PRIORITY");
    enum cumux_priority dprio = CUMUX_PRIORITY_NORMAL;
    if (dp && *dp && !cumux_priority_parse(dp, &dprio)) {
        fprintf(stderr, "cumuxd: CUMUX_DEFAULT_PRIORITY=%s: not high, normal or low\n", dp);
        return 2;
    }
    srv_set_default_priority((int)dprio);
    const char *sndbuf = getenv("CUMUX_TEST_SNDBUF");
    test_sndbuf = sndbuf ? atoi(sndbuf) : 0;
    const char *welcome_delay = getenv("CUMUX_TEST_WELCOME_DELAY_MS");
    int delay_ms = welcome_delay ? atoi(welcome_delay) : 0;
    test_welcome_delay_us = delay_ms > 0 && delay_ms <= 1000 ? (unsigned)delay_ms * 1000 : 0;
    /* Each client holds about three descriptors (socket, channel, stdout): use all we are allowed. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    cumux_log_init("cumuxd");
    umask(077);
    const char *pipe_dir = cumux_pipe_directory();
    const char *log_dir = getenv("CUMUX_LOG_DIRECTORY");
    if (!log_dir || !*log_dir)
        log_dir = pipe_dir;
    char sock_path[256], log_path[512];
    int dir_fd = open_pipe_dir(pipe_dir);
    if (dir_fd < 0 || make_log_dir(log_dir) < 0 || cumux_socket_path(sock_path, sizeof sock_path) < 0) {
        fprintf(stderr, "cumuxd: cannot use pipe directory %s or log directory %s: %s\n", pipe_dir, log_dir,
                strerror(errno));
        return 1;
    }
    snprintf(log_path, sizeof log_path, "%s/cumuxd.log", log_dir);
    static char log_dir_abs[PATH_MAX]; /* the daemon's working directory becomes / */
    if (!realpath(log_dir, log_dir_abs))
        log_dir_abs[0] = 0;
    /* The socket, the lock and the pid file are made in the pipe directory, which open_pipe_dir checked
     * is a real directory of ours, mode 0700: no other user can create, rename or remove anything in it,
     * so the names we use there are ours (root aside, who is trusted anyway). The lock and pid files are
     * made relative to the checked descriptor; bind() needs a path, so after it we check that the path
     * still leads to that same directory (its parent might let someone rename it away). */
    /* One server per pipe directory, even when several `cumux run` start one at the same moment: the lock
     * is held for the server's life (the daemon inherits it). */
    int lock_fd = openat(dir_fd, "cumuxd.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "cumuxd: a server already runs for %s\n", pipe_dir);
        return 1;
    }
    char err[512];
    int probe = cumux_connect_checked(sock_path, err, sizeof err);
    if (probe >= 0) {
        close(probe);
        fprintf(stderr, "cumuxd: a server already listens on %s\n", sock_path);
        return 1;
    }
    if (errno == EPERM) {
        fprintf(stderr, "cumuxd: another user's process listens in the pipe directory: %s\n", err);
        return 1;
    }

    int ready[2] = {-1, -1};
    if (!foreground) {
        /* Daemon: the parent returns once the child reports that the GPUs are up (or why not). */
        if (pipe(ready) < 0)
            return 1;
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid > 0) {
            close(ready[1]);
            char st = 1;
            if (read(ready[0], &st, 1) != 1)
                st = 1;
            if (st != 0)
                fprintf(stderr, "cumuxd: failed to start; see %s\n", log_path);
            return st;
        }
        close(ready[0]);
        setsid();
        if (fork() > 0)
            _exit(0);
        int lf = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (lf >= 0) {
            dup2(lf, STDOUT_FILENO);
            dup2(lf, STDERR_FILENO);
            close(lf);
        }
        if (nul >= 0) {
            dup2(nul, STDIN_FILENO);
            close(nul);
        }
        if (chdir("/") < 0) {
            /* nothing relies on the working directory */
        }
    }
    started_at = time(NULL);
    /* Many clients, each with its own streams: more hardware queues avoid false dependencies. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    char st = 1;
    int lsock = -1;
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        goto out;
    srv_wake_fd = wake_pipe[1];
    /* The socket, the pid file and the lock belong to the supervisor, which outlives the workers. */
    lsock = cumux_sock_listen(sock_path, 128);
    if (lsock < 0) {
        cumux_logf("cannot listen on %s: %s", sock_path, strerror(errno));
        goto out;
    }
    /* accept_all takes connections until none is left: it must not block then. */
    int lfl = fcntl(lsock, F_GETFL);
    if (lfl < 0 || fcntl(lsock, F_SETFL, lfl | O_NONBLOCK) < 0) {
        cumux_logf("cannot make %s non-blocking: %s", sock_path, strerror(errno));
        goto out;
    }
    if (!same_dir(dir_fd, pipe_dir)) {
        cumux_logf("the pipe directory %s was replaced while the server started: stopping", pipe_dir);
        goto out;
    }
    const char *metrics = getenv("CUMUX_METRICS_PORT");
    if (metrics && *metrics && (metrics_sock = srv_metrics_listen(metrics)) < 0)
        goto out;
    if (fchmodat(dir_fd, CUMUX_SOCKET_NAME, 0600, 0) < 0)
        cumux_logf("cannot make %s owner-only: %s (the directory still is)", sock_path, strerror(errno));
    write_pid_file(dir_fd, "cumuxd.pid");
    signal(SIGPIPE, SIG_IGN);
    /* From here on this is a worker; the supervisor stays in srv_supervise until the server stops. */
    if (srv_supervise(&ready[1]) < 0) {
        unlinkat(dir_fd, CUMUX_SOCKET_NAME, 0);
        unlinkat(dir_fd, "cumuxd.pid", 0);
        goto out;
    }
    prctl(PR_SET_NAME, "cumuxd-gpu"); /* the worker, beside its supervisor "cumuxd" */
    /* Where the driver writes a GPU coredump if a kernel faults: it names the culprit (coredump.c). */
    if (log_dir_abs[0]) {
        int n = snprintf(srv_coredump_path, sizeof srv_coredump_path, "%s/cumuxd-gpu.%d.core", log_dir_abs,
                         (int)getpid());
        if (n < 0 || (size_t)n >= sizeof srv_coredump_path) {
            srv_coredump_path[0] = 0; /* no dumps: a cut path would name another file */
            cumux_logf("the log directory's path is too long for a GPU coredump's: faults will not be dumped");
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (srv_gpus_init() < 0) {
        /* Tests of the transport and of the server's life cycle run on machines without a GPU. */
        const char *allow = getenv("CUMUX_ALLOW_NO_GPU");
        if (!allow || strcmp(allow, "1") != 0) {
            cumux_logf("cannot start: no usable GPU");
            goto out;
        }
        cumux_logf("no usable GPU: serving with none (CUMUX_ALLOW_NO_GPU=1)");
        srv_gpu_count = 0;
    }
    if (srv_reaper_start() < 0 || srv_fault_watch_start(on_gpu_fault, on_dump_begun) < 0)
        goto out;
    srv_chunks_start();
    if (srv_gpu_count > 0) {
        cuCtxSetCurrent(srv_gpus[0].ctx);
        srv_marks_init();
        srv_host_waits_probe();
        srv_channel_spares_start(); /* a standby's are there for the programs coming back to it */
    }
    if (srv_worker_is_standby()) {
        srv_gpus_stand_by();
        cumux_logf("standby worker ready: it takes over if the serving worker fails");
        static const struct srv_mirror_ops mirror = {srv_chunks_mirror_add, srv_chunks_mirror_remove};
        if (srv_standby_wait(&stop_requested, &mirror) < 0) {
            srv_fault_watch_stop();
            srv_reaper_stop();
            srv_gpus_fini();
            st = 0;
            goto out;
        }
        srv_gpus_take_over();
        cumux_logf("standby worker takes over");
        enum { KEPT_MAX = 65536 };
        struct srv_kept_chunk *kept = calloc(KEPT_MAX, sizeof *kept);
        size_t nk = kept ? srv_standby_take(kept, KEPT_MAX, &mirror) : 0;
        srv_chunks_adopt(kept, nk); /* chunks.c's now: mapped on a thread of their own */
    }
    listen_sock = lsock;
    /* The worker's pid, for whoever must tell a new worker from the old one (tests, monitoring): there
     * before `cumux start` returns. */
    write_pid_file(dir_fd, "cumuxd-gpu.pid");
    cumux_logf("listening on %s with %d GPU(s)", sock_path, srv_gpu_count);
    st = 0;
    if (ready[1] >= 0) {
        ssize_t w = write(ready[1], &st, 1);
        (void)w;
        close(ready[1]);
        ready[1] = -1;
    }
    uint64_t arena_base, arena_size;
    srv_chunks_arena(&arena_base, &arena_size);
    srv_supervisor_serving(arena_base, arena_size);
    serve(lsock);
    cumux_logf("stopping: disconnecting clients");
    close(lsock);
    unlinkat(dir_fd, CUMUX_SOCKET_NAME, 0);
    pthread_mutex_lock(&clients_lock);
    for (struct srv_client *c = clients; c; c = c->next) {
        shutdown(c->sock, SHUT_RDWR);
        mark_dead(c);
    }
    pthread_mutex_unlock(&clients_lock);
    for (;;) {
        pthread_mutex_lock(&clients_lock);
        struct srv_client *c = clients;
        if (c)
            clients = c->next;
        pthread_mutex_unlock(&clients_lock);
        if (!c)
            break;
        srv_client_free(c);
    }
    unlinkat(dir_fd, "cumuxd.pid", 0);
    unlinkat(dir_fd, "cumuxd-gpu.pid", 0);
    srv_fault_watch_stop();
    srv_reaper_stop();
    srv_gpus_fini();
    cumux_logf("stopped");
out:
    if (ready[1] >= 0) {
        ssize_t w = write(ready[1], &st, 1);
        (void)w;
    }
    return st;
}
