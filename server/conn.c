/* The main thread's loop: connections before they are clients (hellos, status and control requests,
 * /metrics), clients' hang-ups, and the reaping of clients whose worker is done. */
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
#include "server/groups.h"
#include "server/handlers.h"
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"
#include "server/supervisor.h"

volatile sig_atomic_t srv_stop_requested;
int srv_wake_pipe[2] = {-1, -1};

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
    struct cumux_group_name group; /* SET_GROUP: after the hello */
    size_t group_got;
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
uint32_t srv_max_clients = 256;
int srv_test_sndbuf; /* CUMUX_TEST_SNDBUF (tests only): SO_SNDBUF of accepted connections */
unsigned srv_test_welcome_delay_us; /* CUMUX_TEST_WELCOME_DELAY_MS (tests only): before each welcome */

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

/* ---- leases: another GPU's worker holding an IPC export of this one's open (ipc.c) ---- */
struct lease {
    int fd;
    uint64_t token;
    bool event; /* of an interprocess event, not memory */
};
static struct lease *leases;
static size_t nleases, capleases;

/* Is pid another worker of this server (a child of its supervisor)? Only they take leases: a lease
 * hands out a descriptor of device memory. */
static bool sibling_worker(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    int ppid = 0;
    char state;
    return p && sscanf(p + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)srv_supervisor_pid && pid != getpid();
}

static void conn_lease(struct conn *k)
{
    if (!sibling_worker(k->cred.pid)) {
        conn_reply(k, "IPC leases are for cumuxd's workers\n", CUDA_ERROR_NOT_PERMITTED);
        return;
    }
    if (nleases == capleases) {
        size_t cap = capleases ? capleases * 2 : 16;
        struct lease *nl = realloc(leases, cap * sizeof *nl);
        if (!nl) {
            conn_reply(k, "out of memory\n", CUDA_ERROR_OUT_OF_MEMORY);
            return;
        }
        leases = nl;
        capleases = cap;
    }
    bool event = k->hello.flags & CUMUX_LEASE_EVENT;
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = 0};
    struct cumux_ipc_lease info;
    CUipcEventHandle eh;
    int fd = -1;
    CUresult r = event ? srv_ipc_event_lease(k->hello.token, &eh) : srv_ipc_lease(k->hello.token, &info, &fd);
    if (r != CUDA_SUCCESS) {
        conn_reply(k, "no such IPC export\n", r);
        return;
    }
    _Static_assert(sizeof info <= sizeof w.message && sizeof eh <= sizeof w.message, "fits a welcome");
    if (event)
        memcpy(w.message, &eh, sizeof eh);
    else
        memcpy(w.message, &info, sizeof info);
    /* A small message on a fresh socket: it goes at once, or the peer is gone. */
    int sent = cumux_sock_send_now(k->fd, &w, sizeof w, fd);
    if (fd >= 0)
        close(fd);
    if (sent < 0) {
        (event ? srv_ipc_event_lease_end : srv_ipc_lease_end)(k->hello.token);
        conn_close(k);
        return;
    }
    leases[nleases++] = (struct lease){.fd = k->fd, .token = k->hello.token, .event = event};
    k->fd = -1; /* the lease's now */
    conn_close(k);
}

static void conn_vmm_fetch(struct conn *k)
{
    if (!sibling_worker(k->cred.pid)) {
        conn_reply(k, "VMM fetches are for cumuxd's workers\n", CUDA_ERROR_NOT_PERMITTED);
        return;
    }
    struct cumux_vmm_fetch info = {0};
    int fd = srv_vmm_fetch(k->hello.arg, k->hello.token, &info);
    if (fd < 0) {
        conn_reply(k, "no such VMM export\n", CUDA_ERROR_INVALID_VALUE);
        return;
    }
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = 0};
    memcpy(w.message, &info, sizeof info);
    cumux_sock_send_now(k->fd, &w, sizeof w, fd); /* gone or not, nothing is held for it */
    close(fd);
    conn_close(k);
}

/* A shim's hello: a channel and a worker, unless the server is full. The limit counts live clients: one
 * that was just killed must not keep its successor out while its cleanup runs. Those cleanups are bounded
 * too, so that clients that connect and vanish in a loop cannot pile up threads without end; the bound is
 * generous because a storm of kills legitimately leaves many behind for a while (in a kill -9 storm of 128
 * clients on a loaded 2-core machine under ASan, 387 were being cleaned up at once). */
#define CLEANUP_ALLOWANCE 4

static void conn_client(struct conn *k)
{
    /* A worker that is giving up takes nobody: its listening socket is the standby's already, but a
     * connection its accept thread took meanwhile must go there too (the client tries again). */
    if (atomic_load(&srv_worker_failing)) {
        conn_close(k);
        return;
    }
    uint32_t live, all;
    srv_clients_count(&live, &all);
    if (live >= srv_max_clients || all - live >= CLEANUP_ALLOWANCE * (uint64_t)srv_max_clients) {
        char text[200];
        if (live >= srv_max_clients)
            snprintf(text, sizeof text, "cumuxd serves at most %u clients, and has that many; raise the limit with "
                     "CUMUX_MAX_CLIENTS=N or cumuxd --max-clients N", srv_max_clients);
        else
            snprintf(text, sizeof text, "cumuxd is still cleaning up after %u clients that went; try again shortly",
                     all - live);
        cumux_logf("refused a client of pid %d: %u clients live, %u being cleaned up (limit %u)", (int)k->cred.pid,
                   live, all - live, srv_max_clients);
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
    srv_group_join(c); /* before its welcome: nothing of it runs before */
    uint64_t want = k->hello.arg, dflt = srv_default_mem_limit();
    atomic_store(&c->memory.mem_limit, want && (!dflt || want < dflt) ? want : dflt);
    atomic_store(&c->streams.priority, srv_default_priority()); /* its INIT may ask for another */
    /* Back after a worker change: the same token stays its own, since the chunks it takes back are kept
     * under it with the supervisor, for a fault after this one (claims also need its pid and uid). */
    if (k->hello.kind == CUMUX_HELLO_RESUME) {
        c->fault.resume_claim = k->hello.token;
        if (k->hello.token && c->fault.resume_token)
            c->fault.resume_token = k->hello.token;
    }
    k->fd = k->out_fd = -1; /* the client owns them now */
    conn_close(k);
    /* Listed before it is welcomed, and not welcomed if this worker began to give up meanwhile: a client
     * with a channel is then one srv_worker_fails tells (it sets srv_worker_failing before it takes the lock), and
     * one that got no welcome tries again, at the worker taking over. */
    pthread_mutex_lock(&srv_clients_lock);
    bool failing = atomic_load(&srv_worker_failing);
    c->next = srv_clients;
    srv_clients = c;
    pthread_mutex_unlock(&srv_clients_lock);
    if (srv_test_welcome_delay_us) /* tests: a fault may come between the listing and the welcome */
        usleep(srv_test_welcome_delay_us);
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = 0,
                              .client_id = c->id, .shm_size = sizeof(struct cumux_shm),
                              .resume_token = c->fault.resume_token};
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
    uint64_t lim = atomic_load(&c->memory.mem_limit);
    if (lim)
        cumux_logf("client %u connected: pid %d uid %u, device memory limit %.1f MiB", c->id, (int)c->pid,
                   (unsigned)c->uid, lim / 1048576.0);
    else
        cumux_logf("client %u connected: pid %d uid %u", c->id, (int)c->pid, (unsigned)c->uid);
}

/* `cumux reload`: the supervisor reads the settings file again (it does on SIGHUP, as from systemctl
 * reload); its outcome, once its page says it has one. A second of waiting at most: the supervisor answers
 * within its loop's next turn. */
static void conn_reload(struct conn *k)
{
    if (!sup_page) {
        conn_reply(k, "this cumuxd has no supervisor to reload its settings\n", CUDA_ERROR_NOT_SUPPORTED);
        return;
    }
    uint32_t before = atomic_load_explicit(&sup_page->reloads, memory_order_acquire);
    if (kill(srv_supervisor_pid, SIGHUP) < 0) {
        conn_reply(k, "cannot signal the supervisor\n", CUDA_ERROR_OPERATING_SYSTEM);
        return;
    }
    for (int i = 0; i < 200 && atomic_load_explicit(&sup_page->reloads, memory_order_acquire) == before; i++)
        usleep(10000);
    if (atomic_load_explicit(&sup_page->reloads, memory_order_acquire) == before) {
        conn_reply(k, "the supervisor did not answer within 2 s; see the server's log\n", CUDA_ERROR_TIMEOUT);
        return;
    }
    char text[sizeof sup_page->reload_text + 2];
    snprintf(text, sizeof text, "%.*s\n", (int)sizeof sup_page->reload_text - 1, sup_page->reload_text);
    conn_reply(k, text, atomic_load(&sup_page->reload_failed) ? CUDA_ERROR_INVALID_VALUE : 0);
}

/* A whole hello has come. */
static void conn_hello(struct conn *k)
{
    const struct cumux_hello *h = &k->hello;
    if (h->magic != CUMUX_MAGIC) {
        conn_close(k);
        return;
    }
    /* The server's own user and root may do anything; users CUMUX_USERS lets in only run programs and read
     * the status (access.c). */
    bool admin = k->cred.uid == getuid() || k->cred.uid == 0;
    bool allowed = admin || srv_access_may_use(k->cred.uid, k->cred.gid, k->cred.pid);
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
    /* Only the server's own user (and root) may use it, as with MPS's default, unless CUMUX_USERS says. */
    if (!allowed) {
        conn_reply(k, "permission denied: cumuxd belongs to another user (its CUMUX_USERS does not name you)",
                   CUDA_ERROR_MPS_CONNECTION_FAILED);
        return;
    }
    if (!admin && h->kind != CUMUX_HELLO_CLIENT && h->kind != CUMUX_HELLO_RESUME && h->kind != CUMUX_HELLO_STATUS) {
        conn_reply(k, "permission denied: only cumuxd's user and root may change the server or its clients",
                   CUDA_ERROR_NOT_PERMITTED);
        return;
    }
    switch (h->kind) {
    case CUMUX_HELLO_STATUS: {
        char *text = h->flags & CUMUX_STATUS_RECORDS ? srv_status_records()
                                                     : srv_status_report(h->flags & CUMUX_STATUS_GPU_PART);
        if (text)
            conn_reply(k, text, 0);
        else
            conn_close(k);
        free(text);
        return;
    }
    case CUMUX_HELLO_STOP:
        conn_reply(k, "stopping\n", 0);
        srv_stop_requested = 1;
        return;
    case CUMUX_HELLO_KILL: {
        char text[1024];
        unsigned n = srv_kill_clients((pid_t)h->flags, text, sizeof text);
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_DEFAULT_MEMORY: {
        /* flags: the server's GPU + 1, or 0 for every GPU */
        int gpu = (int)h->flags - 1;
        if (h->flags > (uint32_t)srv_gpu_count) {
            conn_reply(k, "no such GPU\n", CUDA_ERROR_INVALID_DEVICE);
            return;
        }
        srv_set_default_mem_limit(gpu, h->arg);
        char text[96] = "default device memory limit: none", on[32] = "";
        if (h->arg)
            snprintf(text, sizeof text, "default device memory limit: %.1f MiB", h->arg / 1048576.0);
        if (gpu >= 0)
            snprintf(on, sizeof on, " on GPU %d", gpu);
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s\n", on);
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
                         ? srv_set_priority((pid_t)h->flags, (int)h->arg, text, sizeof text)
                         : 0;
        if (h->arg < CUMUX_PRIORITY_LOW || h->arg > CUMUX_PRIORITY_HIGH)
            snprintf(text, sizeof text, "not a priority class\n");
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_MEMORY: {
        char text[1024];
        unsigned n = srv_set_memory_limit((pid_t)h->flags, h->arg, text, sizeof text);
        conn_reply(k, text, n ? 0 : CUDA_ERROR_NOT_FOUND);
        return;
    }
    case CUMUX_HELLO_SET_SMS: {
        char text[1024];
        if ((h->arg >> 32) > 100 && (h->arg >> 32) != CUMUX_SMS_KEEP) {
            conn_reply(k, "not a percentage\n", CUDA_ERROR_INVALID_VALUE);
            return;
        }
        unsigned refused = 0;
        unsigned n = srv_set_sms((pid_t)h->flags, h->arg, text, sizeof text, &refused);
        conn_reply(k, text, !n ? CUDA_ERROR_NOT_FOUND : refused ? CUDA_ERROR_INVALID_VALUE : 0);
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
    case CUMUX_HELLO_RELOAD:
        conn_reload(k);
        return;
    case CUMUX_HELLO_SET_GROUP: {
        char text[512];
        k->group.path[sizeof k->group.path - 1] = 0;
        int r = srv_set_group(k->group.path, k->group.labels, h->flags, h->arg, text, sizeof text);
        conn_reply(k, text, r == 0 ? 0 : CUDA_ERROR_INVALID_VALUE);
        return;
    }
    case CUMUX_HELLO_IPC_LEASE:
        conn_lease(k);
        return;
    case CUMUX_HELLO_VMM_FETCH:
        conn_vmm_fetch(k);
        return;
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
    k->reply = srv_metrics_response(k->req, k->req_len, &k->reply_len);
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
    bool more = k->got == sizeof k->hello; /* SET_GROUP's name after the hello */
    ssize_t n = more ? cumux_sock_recv_some(k->fd, (char *)&k->group + k->group_got, sizeof k->group - k->group_got, NULL)
                     : cumux_sock_recv_some(k->fd, (char *)&k->hello + k->got, sizeof k->hello - k->got, &k->out_fd);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        conn_close(k);
        return;
    }
    if (more)
        k->group_got += (size_t)n;
    else
        k->got += (size_t)n;
    if (k->got == sizeof k->hello && (k->hello.kind != CUMUX_HELLO_SET_GROUP || k->group_got == sizeof k->group))
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
        if (atomic_load(&srv_worker_failing) || nconns >= MAX_PENDING || (!http && getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)) {
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
        if (srv_test_sndbuf > 0)
            setsockopt(s, SOL_SOCKET, SO_SNDBUF, &srv_test_sndbuf, sizeof srv_test_sndbuf);
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

int srv_serve(int lsock, int metrics_sock)
{
    struct pollfd *fds = NULL;
    struct srv_client **owners = NULL;
    size_t cap = 0;
    int rc = 0;
    while (!srv_stop_requested) {
        pthread_mutex_lock(&srv_clients_lock);
        size_t n = 3 + nconns + nleases;
        uint32_t live = 0; /* how many share the server: a client's waits spin while they are at most half the CPUs */
        for (struct srv_client *c = srv_clients; c; c = c->next) {
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
                pthread_mutex_unlock(&srv_clients_lock);
                rc = -1;
                break;
            }
            cap = ncap;
        }
        uint64_t now = cumux_now_ns();
        /* While a killed client's work drains, new programs wait in the backlog: if the work never ends,
         * the standby worker takes them, and none starts here only to lose its context. */
        bool accepting = now >= accept_paused_until && srv_kills_pending() == 0;
        fds[0] = (struct pollfd){.fd = accepting ? lsock : -1, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = srv_wake_pipe[0], .events = POLLIN};
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
        size_t nl = nleases; /* leases: only their end is watched (room counted in n) */
        for (size_t i = 0; i < nl; i++)
            fds[k + i] = (struct pollfd){.fd = leases[i].fd, .events = POLLRDHUP};
        k += nl;
        for (struct srv_client *c = srv_clients; c; c = c->next) {
            if (c->conn.clients_told != live && !atomic_load(&c->dead)) {
                atomic_store_explicit(&c->shm->server_clients, live, memory_order_relaxed);
                c->conn.clients_told = live;
            }
            if (c->conn.hup_seen)
                continue;
            /* Only the hang-up: descriptors the client sends are read by its worker. */
            fds[k] = (struct pollfd){.fd = c->conn.sock, .events = POLLRDHUP};
            owners[k++] = c;
        }
        pthread_mutex_unlock(&srv_clients_lock);
        int r = poll(fds, k, timeout);
        srv_chunks_expire();
        srv_groups_follow();
        if (r < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        if (r > 0) {
            /* A lease's connection gone (or anything read on it: a lease carries nothing): its open ends. */
            size_t j = 0;
            for (size_t i = 0; i < nl; i++) {
                if (fds[3 + nk + i].revents) {
                    (leases[i].event ? srv_ipc_event_lease_end : srv_ipc_lease_end)(leases[i].token);
                    close(leases[i].fd);
                } else {
                    leases[j++] = leases[i];
                }
            }
            if (nleases > nl) /* leases is NULL while none was ever taken */
                memmove(leases + j, leases + nl, (nleases - nl) * sizeof *leases);
            nleases = j + (nleases - nl);
            /* Hang-ups first: reaping below frees clients that owners[] still points to. */
            for (size_t i = 3 + nk + nl; i < k; i++) {
                if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                    pthread_mutex_lock(&srv_clients_lock);
                    owners[i]->conn.hup_seen = true;
                    srv_client_mark_dead(owners[i]);
                    pthread_mutex_unlock(&srv_clients_lock);
                }
            }
            if (fds[1].revents) {
                char buf[64];
                ssize_t rd = read(srv_wake_pipe[0], buf, sizeof buf);
                (void)rd;
                srv_clients_reap_finished();
            }
            for (size_t i = 0; i < nk && !srv_stop_requested; i++) {
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
