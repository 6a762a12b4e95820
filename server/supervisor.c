/* The supervisor: cumuxd's first process holds the lock, the listening socket and the pid file, and runs
 * the GPU work in a worker process it forks. A worker whose context met a fatal error (fault.c: no process
 * can use CUDA again after one) reports it here and exits; one that crashes is gone as well. Either way
 * another worker takes over on the same listening socket: programs that connect meanwhile wait in its
 * backlog, none is refused, and nobody has to restart anything.
 *
 * Starting a worker means cuInit and a context per GPU: hundreds of milliseconds on a real GPU. So once
 * the first worker serves, a standby worker is forked that starts its GPUs and then waits; a failing
 * worker is replaced by the standby in about a millisecond (it is told to go as soon as the fault is
 * reported, before the failed process has even exited), and a new standby is started behind it. The
 * standby's context costs GPU memory; CUMUX_STANDBY=0 turns it off (then a new worker starts cold). A stop
 * reaches a standby by its pipe's end (and a signal), whenever it comes.
 *
 * The supervisor itself never touches CUDA (a process that initialized CUDA cannot use it in a forked
 * child). What happened is kept here and handed to each worker that starts serving, which shows it in
 * `cumux status`. */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/sock.h"
#include "server/server.h"

#define RESTARTS_FAST 20      /* restarts within RESTART_WINDOW_S before the supervisor slows down */
#define RESTART_WINDOW_S 60
#define INIT_RETRIES 10       /* a new worker that cannot start its GPUs: tries, 1 s apart */
#define STANDBY_RETRIES 5     /* standby workers that die before they are needed: then none is kept */

enum sup_kind {
    SUP_SERVING = 1, /* a worker serves (rec.recovered_ms: for the last fault) */
    SUP_FAULT = 2,   /* a worker's GPU met a fatal error (rec); it exits next */
    SUP_STANDBY = 3, /* a standby worker's GPUs are up: it waits to be told to go */
};

struct sup_msg {
    uint32_t kind;
    int32_t from; /* the worker's pid */
    struct srv_fault_record rec;
    uint64_t arena_base, arena_size; /* SUP_SERVING: its arena of clients' memory (chunks.c) */
};
_Static_assert(sizeof(struct sup_msg) <= PIPE_BUF, "a report is written in one piece");

/* What a standby is given when it goes: the history it shows in `cumux status`. */
struct sup_go {
    uint32_t nfaults, restarts;
    struct srv_fault_record faults[SRV_FAULTS_KEPT];
};

struct srv_fault_record srv_faults[SRV_FAULTS_KEPT];
uint32_t srv_nfaults;
uint32_t srv_worker_restarts;
pid_t srv_supervisor_pid;

/* What the supervisor knows of its standby, on a page every worker shares (for `cumux status`). */
struct sup_shared {
    _Atomic int32_t enabled;
    _Atomic int32_t standby_pid; /* 0: none */
    _Atomic int32_t standby_ready;
    _Atomic uint64_t default_mem_limit; /* srv_default_mem_limit: set by whichever worker is told */
    _Atomic int32_t default_priority;   /* srv_default_priority: likewise */
    _Atomic uint32_t default_percent;   /* srv_default_thread_percent: likewise */
    _Atomic uint64_t kept_chunks, kept_bytes; /* clients' memory chunks whose descriptors the supervisor holds */
};
static struct sup_shared *shared;
static uint64_t initial_mem_limit; /* before the page exists */
static int initial_priority = CUMUX_PRIORITY_NORMAL;

int srv_default_priority(void)
{
    return shared ? atomic_load(&shared->default_priority) : initial_priority;
}

void srv_set_default_priority(int cls)
{
    if (shared)
        atomic_store(&shared->default_priority, cls);
    else
        initial_priority = cls;
}

static unsigned initial_percent;

unsigned srv_default_thread_percent(void)
{
    return shared ? atomic_load(&shared->default_percent) : initial_percent;
}

void srv_set_default_thread_percent(unsigned percent)
{
    percent = percent >= 100 ? 0 : percent;
    if (shared)
        atomic_store(&shared->default_percent, percent);
    else
        initial_percent = percent;
}

uint64_t srv_default_mem_limit(void)
{
    return shared ? atomic_load(&shared->default_mem_limit) : initial_mem_limit;
}

void srv_set_default_mem_limit(uint64_t bytes)
{
    if (shared)
        atomic_store(&shared->default_mem_limit, bytes);
    else
        initial_mem_limit = bytes;
}

static int report_fd = -1; /* a worker's end of the pipe to the supervisor */
static int keep_fd = -1;   /* a worker's end of its socket of kept descriptors */
static int go_fd = -1;     /* a standby worker's end of its pipe from the supervisor */
static volatile sig_atomic_t sup_stop;
static volatile pid_t sup_active, sup_standby;
static int chld_pipe[2] = {-1, -1};

static void sup_on_signal(int sig)
{
    sup_stop = 1;
    if (sup_active > 0)
        kill(sup_active, sig);
    if (sup_standby > 0)
        kill(sup_standby, sig);
}

static void sup_on_child(int sig)
{
    (void)sig;
    int e = errno;
    ssize_t w = write(chld_pipe[1], "c", 1);
    (void)w;
    errno = e;
}

int64_t srv_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sup_send(uint32_t kind, const struct srv_fault_record *rec, uint64_t arena_base, uint64_t arena_size)
{
    struct sup_msg m = {.kind = kind, .from = (int32_t)getpid(), .arena_base = arena_base, .arena_size = arena_size};
    if (rec)
        m.rec = *rec;
    if (report_fd >= 0) {
        ssize_t w = write(report_fd, &m, sizeof m); /* below PIPE_BUF: one piece */
        (void)w;
    }
}

void srv_supervisor_fault(const struct srv_fault_record *rec)
{
    sup_send(SUP_FAULT, rec, 0, 0);
}

void srv_supervisor_serving(uint64_t arena_base, uint64_t arena_size)
{
    const struct srv_fault_record *last = NULL;
    if (srv_nfaults) {
        struct srv_fault_record *f = &srv_faults[(srv_nfaults - 1) % SRV_FAULTS_KEPT];
        if (f->recovered_ms < 0) {
            f->recovered_ms = srv_wall_ms() - f->at_ms;
            cumux_logf("serving again %lld ms after the fault", (long long)f->recovered_ms);
        }
        last = f;
    }
    sup_send(SUP_SERVING, last, arena_base, arena_size);
}

int srv_standby_state(pid_t *pid)
{
    if (!shared || !atomic_load(&shared->enabled))
        return -1;
    *pid = atomic_load(&shared->standby_pid);
    return *pid ? atomic_load(&shared->standby_ready) : 0;
}

static void standby_note(pid_t pid, bool ready)
{
    if (shared) {
        atomic_store(&shared->standby_ready, ready);
        atomic_store(&shared->standby_pid, (int32_t)pid);
    }
}

bool srv_worker_is_standby(void)
{
    return go_fd >= 0;
}

/* ---- kept descriptors of clients' memory chunks ---- */

enum keep_kind { KEEP_CHUNK = 1, KEEP_DROP, KEEP_DROP_CLIENT, KEEP_TAKE, KEEP_TAKE_END, KEEP_MIRROR, KEEP_UNMIRROR };

struct keep_msg {
    uint32_t kind;
    uint32_t client;
    int32_t gpu;
    int32_t pid;
    uint64_t base, size, token;
    uint32_t uid;
    uint32_t reserved;
    uint64_t id;
};

uint64_t srv_arena_hint, srv_arena_hint_size;
static struct srv_kept_chunk *kept; /* the supervisor's: every chunk a worker handed over, not yet dropped */
static bool *kept_mirrored;         /* kept[i] was handed to the standby to map ahead */
static size_t nkept, capkept;
static uint64_t next_kept_id;
static uint64_t *unmirror;          /* chunks the standby mapped ahead that went since: to tell it */
static size_t nunmirror, capunmirror;
static bool mirror_on;              /* the standby is ready: chunks go to it as they come */
static int keep_active = -1, keep_standby = -1; /* the supervisor's ends of the workers' sockets */

static void keep_send(const struct keep_msg *m, int fd)
{
    if (keep_fd >= 0 && cumux_sock_send(keep_fd, m, sizeof *m, fd) < 0)
        cumux_logf("the supervisor was not told of a chunk at 0x%llx: %s", (unsigned long long)m->base, strerror(errno));
}

static struct keep_msg keep_msg_of(uint32_t kind, const struct srv_kept_chunk *k)
{
    return (struct keep_msg){.kind = kind, .client = k->client, .gpu = k->gpu, .pid = k->pid, .base = k->base,
                             .size = k->size, .token = k->token, .uid = k->uid, .id = k->id};
}

static struct srv_kept_chunk kept_of(const struct keep_msg *m, int fd)
{
    return (struct srv_kept_chunk){.client = m->client, .gpu = m->gpu, .base = m->base, .size = m->size,
                                   .token = m->token, .pid = m->pid, .uid = m->uid, .fd = fd, .id = m->id};
}

/* A chunk to map ahead, or one that went, as the standby reads them (waiting, or taking over). */
static void mirror_message(const struct keep_msg *m, int fd, const struct srv_mirror_ops *mirror)
{
    if (m->kind == KEEP_MIRROR && fd >= 0 && mirror) {
        struct srv_kept_chunk k = kept_of(m, fd);
        mirror->add(&k);
        return;
    }
    if (fd >= 0)
        close(fd);
    if (m->kind == KEEP_UNMIRROR && mirror)
        mirror->remove(m->id);
}

/* A message the waiting standby read that is not about mapping ahead (the handover's first, should it
 * come before the word to go), for srv_standby_take. */
static struct keep_msg held_msg;
static int held_fd = -1;
static bool held;

int srv_standby_wait(volatile sig_atomic_t *stop, const struct srv_mirror_ops *mirror)
{
    sup_send(SUP_STANDBY, NULL, 0, 0);
    struct sup_go g;
    size_t got = 0;
    while (got < sizeof g && !*stop) { /* a stop that came while the GPUs started: not a read to wait on */
        struct pollfd pf[2] = {{.fd = go_fd, .events = POLLIN}, {.fd = held ? -1 : keep_fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (pf[0].revents) { /* the word to go first: the handover follows it */
            ssize_t n = read(go_fd, (char *)&g + got, sizeof g - got);
            if (n > 0)
                got += (size_t)n;
            else if (n == 0 || (errno != EINTR && errno != EAGAIN) || *stop)
                return -1; /* the supervisor is gone, or stops the server */
            continue;
        }
        if (pf[1].revents) {
            struct keep_msg m;
            int fd = -1;
            if (cumux_sock_recv(keep_fd, &m, sizeof m, &fd) < 0)
                return -1; /* the supervisor is gone */
            if (m.kind == KEEP_MIRROR || m.kind == KEEP_UNMIRROR) {
                mirror_message(&m, fd, mirror);
            } else {
                held_msg = m;
                held_fd = fd;
                held = true;
            }
        }
    }
    if (got < sizeof g)
        return -1;
    close(go_fd);
    go_fd = -1;
    srv_nfaults = g.nfaults;
    srv_worker_restarts = g.restarts;
    memcpy(srv_faults, g.faults, sizeof srv_faults);
    return 0;
}

void srv_supervisor_keep(const struct srv_kept_chunk *k)
{
    struct keep_msg m = keep_msg_of(KEEP_CHUNK, k);
    keep_send(&m, k->fd);
}

void srv_supervisor_drop(uint64_t base)
{
    struct keep_msg m = {.kind = KEEP_DROP, .base = base};
    keep_send(&m, -1);
}

void srv_supervisor_drop_client(uint32_t client)
{
    struct keep_msg m = {.kind = KEEP_DROP_CLIENT, .client = client};
    keep_send(&m, -1);
}

#define HAND_OVER_WAIT_MS 5000 /* the most the standby waits for the handover's next message */

size_t srv_standby_take(struct srv_kept_chunk *out, size_t cap, const struct srv_mirror_ops *mirror)
{
    size_t n = 0;
    for (;;) {
        struct keep_msg m;
        int fd = -1;
        /* A supervisor that stopped sending (gone, or it could not) leaves the rest: never waited for
         * without end, since no client is served meanwhile. */
        struct pollfd p = {.fd = keep_fd, .events = POLLIN};
        if (!held && keep_fd >= 0 && poll(&p, 1, HAND_OVER_WAIT_MS) <= 0) {
            cumux_logf("the supervisor stopped handing over chunks after %zu: going on without the rest", n);
            return n;
        }
        bool got;
        if (held) {
            m = held_msg, fd = held_fd, got = true;
            held = false;
        } else {
            got = keep_fd >= 0 && cumux_sock_recv(keep_fd, &m, sizeof m, &fd) == 0;
        }
        if (got && (m.kind == KEEP_MIRROR || m.kind == KEEP_UNMIRROR)) { /* sent before the takeover */
            mirror_message(&m, fd, mirror);
            continue;
        }
        if (!got || m.kind != KEEP_TAKE) {
            if (fd >= 0)
                close(fd);
            return n;
        }
        if (n < cap && fd >= 0) {
            out[n++] = kept_of(&m, fd);
        } else {
            if (fd >= 0)
                close(fd);
            srv_supervisor_drop(m.base); /* no room here: the supervisor lets it go */
        }
    }
}

int srv_kept_memory(uint64_t *chunks, uint64_t *bytes)
{
    if (!shared)
        return -1;
    *chunks = atomic_load(&shared->kept_chunks);
    *bytes = atomic_load(&shared->kept_bytes);
    return 0;
}

/* The count `cumux status` shows (the supervisor's table changed). */
static void kept_note(void)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < nkept; i++)
        bytes += kept[i].size;
    if (shared) {
        atomic_store(&shared->kept_chunks, nkept);
        atomic_store(&shared->kept_bytes, bytes);
    }
}

static void unmirror_later(uint64_t id);

/* Supervisor: what a worker said of its chunks. */
static void keep_read(int sock)
{
    for (bool changed = false;; changed = true) {
        struct keep_msg m;
        int fd = -1;
        if (cumux_sock_recv_some(sock, &m, sizeof m, &fd) != (ssize_t)sizeof m) {
            if (fd >= 0)
                close(fd);
            if (changed)
                kept_note();
            return;
        }
        if (m.kind == KEEP_CHUNK && fd >= 0) {
            if (nkept == capkept) {
                size_t nc = capkept ? capkept * 2 : 64;
                struct srv_kept_chunk *nv = realloc(kept, nc * sizeof *nv);
                if (nv)
                    kept = nv;
                bool *nm = nv ? realloc(kept_mirrored, nc * sizeof *nm) : NULL;
                if (!nm) {
                    close(fd);
                    cumux_logf("no memory to keep a chunk's descriptor: it will not outlive its worker");
                    continue;
                }
                kept_mirrored = nm;
                capkept = nc;
            }
            kept[nkept] = kept_of(&m, fd);
            kept[nkept].id = ++next_kept_id;
            kept_mirrored[nkept++] = false;
            continue;
        }
        if (fd >= 0)
            close(fd);
        for (size_t i = 0; i < nkept;) {
            if ((m.kind == KEEP_DROP && kept[i].base == m.base) ||
                (m.kind == KEEP_DROP_CLIENT && kept[i].client == m.client)) {
                if (kept_mirrored[i])
                    unmirror_later(kept[i].id);
                close(kept[i].fd);
                kept[i] = kept[--nkept];
                kept_mirrored[i] = kept_mirrored[nkept];
            } else {
                i++;
            }
        }
    }
}

/* ---- mapping ahead in the standby ----
 * Mapping a chunk costs the worker taking over milliseconds each (65 ms for 8 on the H200), and its
 * clients wait for theirs before they come back: so the ready standby gets each chunk as it comes and
 * maps it at once, and is told when one goes. Sent without waiting: what does not fit now goes at the
 * next round of the supervisor's loop; a chunk not mapped ahead is mapped at the takeover, as before. */

static void unmirror_later(uint64_t id)
{
    if (nunmirror == capunmirror) {
        size_t nc = capunmirror ? capunmirror * 2 : 64;
        uint64_t *nv = realloc(unmirror, nc * sizeof *nv);
        if (!nv) { /* the standby keeps a stale mapping until it takes over (it unmaps it then) */
            mirror_on = false;
            return;
        }
        unmirror = nv;
        capunmirror = nc;
    }
    unmirror[nunmirror++] = id;
}

/* A new standby (or none): nothing of the old one's is mapped there. */
static void mirror_reset(bool ready)
{
    for (size_t i = 0; i < nkept; i++)
        kept_mirrored[i] = false;
    nunmirror = 0;
    mirror_on = ready;
}

/* What the standby has not been told yet; true while some is left. */
static bool mirror_flush(void)
{
    if (!mirror_on || keep_standby < 0)
        return false;
    size_t sent = 0;
    for (; sent < nunmirror; sent++) {
        struct keep_msg m = {.kind = KEEP_UNMIRROR, .id = unmirror[sent]};
        if (cumux_sock_send_now(keep_standby, &m, sizeof m, -1) < 0)
            break;
    }
    if (sent) {
        memmove(unmirror, unmirror + sent, (nunmirror - sent) * sizeof *unmirror);
        nunmirror -= sent;
    }
    if (nunmirror)
        return true;
    for (size_t i = 0; i < nkept; i++) {
        if (kept_mirrored[i])
            continue;
        struct keep_msg m = keep_msg_of(KEEP_MIRROR, &kept[i]);
        if (cumux_sock_send_now(keep_standby, &m, sizeof m, kept[i].fd) < 0)
            return true;
        kept_mirrored[i] = true;
    }
    return false;
}

/* To the standby taking over, which reads them as they come: its socket (non-blocking here) holds a few
 * hundred messages, so a full one is waited on, up to the deadline. */
static int send_to_standby(const struct keep_msg *m, int fd, uint64_t deadline_ns)
{
    for (;;) {
        if (cumux_sock_send_now(keep_standby, m, sizeof *m, fd) == 0)
            return 0;
        uint64_t now = cumux_now_ns();
        if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) || now >= deadline_ns)
            return -1;
        struct pollfd p = {.fd = keep_standby, .events = POLLOUT};
        uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
        poll(&p, 1, left_ms < 100 ? (int)left_ms : 100);
    }
}

/* Supervisor: the chunks go to the standby that takes over (their descriptors stay here too, until the
 * new worker drops them); without one, they are let go. */
static void keep_hand_over(bool to_standby)
{
    if (keep_active >= 0)
        keep_read(keep_active); /* what the failed worker said last */
    size_t handed = 0;
    /* In all, time for a standby still mapping ahead what it was sent before (milliseconds a chunk). */
    uint64_t deadline = cumux_now_ns() + 4 * HAND_OVER_WAIT_MS * 1000000ull;
    for (size_t i = 0; to_standby && keep_standby >= 0 && i < nkept; i++) {
        struct keep_msg m = keep_msg_of(KEEP_TAKE, &kept[i]);
        handed += send_to_standby(&m, kept[i].fd, deadline) == 0;
    }
    if (to_standby && keep_standby >= 0) {
        struct keep_msg end = {.kind = KEEP_TAKE_END};
        send_to_standby(&end, -1, deadline);
    }
    if (nkept && to_standby && handed < nkept)
        cumux_logf("clients' memory: %zu of %zu chunk(s) handed to the worker taking over (it stopped taking them)",
                   handed, nkept);
    else if (nkept)
        cumux_logf("clients' memory: %zu chunk(s) %s", nkept, to_standby ? "handed to the worker taking over" : "let go");
    if (!to_standby) {
        for (size_t i = 0; i < nkept; i++)
            close(kept[i].fd);
        nkept = 0;
    }
    for (size_t i = 0; i < nkept; i++)
        kept[i].client = UINT32_MAX; /* the old worker's ids: the new worker drops these by address */
    mirror_reset(false); /* the next standby maps them anew */
    kept_note();
    if (keep_active >= 0)
        close(keep_active);
    keep_active = to_standby ? keep_standby : -1;
    keep_standby = -1;
}

/* Forks a worker; returns its pid in the supervisor, 0 in the worker. A standby's pipe: *go_out. */
static pid_t fork_worker(int rep[2], bool standby, int *go_out)
{
    int go[2] = {-1, -1}, ks[2] = {-1, -1};
    if (standby && pipe2(go, O_CLOEXEC) < 0)
        return -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ks) < 0) {
        if (standby)
            close(go[0]), close(go[1]);
        return -1;
    }
    pid_t w = fork();
    if (w < 0) {
        if (standby)
            close(go[0]), close(go[1]);
        close(ks[0]), close(ks[1]);
        return -1;
    }
    if (w == 0) {
        close(rep[0]);
        close(ks[0]);
        keep_fd = ks[1];
        if (keep_active >= 0)
            close(keep_active);
        if (keep_standby >= 0)
            close(keep_standby);
        keep_active = keep_standby = -1;
        for (size_t i = 0; i < nkept; i++) /* the supervisor's, not the worker's */
            close(kept[i].fd);
        nkept = 0;
        close(chld_pipe[0]);
        close(chld_pipe[1]);
        report_fd = rep[1];
        if (standby) {
            close(go[1]);
            go_fd = go[0];
        }
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a worker never outlives its supervisor */
        if (getppid() != srv_supervisor_pid)
            _exit(1);
        return 0; /* the worker goes on with main() */
    }
    close(ks[1]);
    fcntl(ks[0], F_SETFL, O_NONBLOCK);
    if (standby) {
        close(go[0]);
        *go_out = go[1];
        if (keep_standby >= 0)
            close(keep_standby);
        keep_standby = ks[0];
        mirror_reset(false); /* until it is ready */
    } else {
        if (keep_active >= 0)
            close(keep_active);
        keep_active = ks[0];
    }
    return w;
}

/* How long after a takeover the next standby may wait for the failed worker to exit (CUMUX_STANDBY_AFTER_MS,
 * default 1000; 0: it starts at once). */
static uint64_t standby_after_ms(void)
{
    const char *e = getenv("CUMUX_STANDBY_AFTER_MS");
    char *end;
    unsigned long v = e ? strtoul(e, &end, 10) : 1000;
    return e && (*end || v > 60000) ? 1000 : v;
}

/* The standby takes over: it is given the history and starts serving. */
static void activate_standby(int *standby_go)
{
    struct sup_go g = {.nfaults = srv_nfaults, .restarts = srv_worker_restarts};
    memcpy(g.faults, srv_faults, sizeof g.faults);
    const char *p = (const char *)&g;
    for (size_t done = 0; done < sizeof g;) { /* the pipe holds it all: the standby reads it when ready */
        ssize_t n = write(*standby_go, p + done, sizeof g - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(*standby_go);
    *standby_go = -1;
    keep_hand_over(true);
    sup_active = sup_standby;
    sup_standby = 0;
    standby_note(0, false);
}

static void describe_exit(int st, char *why, size_t len)
{
    if (WIFEXITED(st) && WEXITSTATUS(st) == CUMUX_EXIT_GPU_FAULT)
        snprintf(why, len, "a fatal GPU error");
    else if (WIFSIGNALED(st))
        snprintf(why, len, "signal %d", WTERMSIG(st));
    else
        snprintf(why, len, "exit status %d", WEXITSTATUS(st));
}

/* Stopping: the standby goes too, and the supervisor waits for it. */
static void end_standby(int *standby_go)
{
    mirror_reset(false);
    /* Its pipe first: a standby waiting to be told to go reads the end of it and stops. */
    if (*standby_go >= 0)
        close(*standby_go);
    *standby_go = -1;
    if (sup_standby > 0) {
        kill(sup_standby, SIGTERM);
        while (waitpid(sup_standby, NULL, 0) < 0 && errno == EINTR)
            ;
        sup_standby = 0;
    }
}

int srv_supervise(int *ready_fd)
{
    srv_supervisor_pid = getpid();
    int rep[2];
    if (pipe2(rep, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa = {.sa_handler = sup_on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction sc = {.sa_handler = sup_on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGCHLD, &sc, NULL);
    const char *sb = getenv("CUMUX_STANDBY");
    bool want_standby = !(sb && !strcmp(sb, "0"));
    void *page = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared = page == MAP_FAILED ? NULL : page;
    if (shared) {
        atomic_store(&shared->enabled, want_standby);
        atomic_store(&shared->default_mem_limit, initial_mem_limit);
        atomic_store(&shared->default_priority, initial_priority);
        atomic_store(&shared->default_percent, initial_percent);
    }
    bool ever_served = false, serving = false, standby_ready = false;
    time_t window_start = time(NULL);
    unsigned in_window = 0, init_failures = 0, standby_failures = 0;
    int standby_go = -1;
    bool need_active = true;
    /* After a takeover the next standby waits until the failed worker has exited (at most a second): a new
     * process's start of the GPU competes with the driver calls of the programs coming back, which are
     * then slow (on the H200 their comeback took 220-400 ms while the new standby started beside them). */
    pid_t failed_worker = 0;
    uint64_t standby_not_before = 0;
    for (;;) {
        if (need_active) {
            pid_t w = fork_worker(rep, false, NULL);
            if (w < 0) {
                cumux_logf("cannot start a worker: %s", strerror(errno));
                end_standby(&standby_go);
                return -1;
            }
            if (w == 0)
                return 0;
            sup_active = w;
            serving = false;
            need_active = false;
            if (*ready_fd >= 0) { /* only the first worker tells `cumux start` how it went */
                close(*ready_fd);
                *ready_fd = -1;
            }
        }
        uint64_t now_ns = cumux_now_ns();
        if (want_standby && serving && sup_standby <= 0 && standby_failures < STANDBY_RETRIES && !sup_stop &&
            now_ns >= standby_not_before) {
            pid_t w = fork_worker(rep, true, &standby_go);
            if (w == 0)
                return 0;
            if (w > 0) {
                sup_standby = w;
                standby_ready = false;
                standby_note(w, false);
            } else {
                standby_failures++;
            }
        }
        /* The standby's socket when what it must be told did not all fit. */
        bool mirror_left = mirror_flush();
        struct pollfd pf[4] = {{.fd = rep[0], .events = POLLIN},
                               {.fd = chld_pipe[0], .events = POLLIN},
                               {.fd = keep_active, .events = POLLIN},
                               {.fd = mirror_left ? keep_standby : -1, .events = POLLOUT}};
        int wait_ms = 1000;
        if (standby_not_before > now_ns && standby_not_before - now_ns < 1000000000ull)
            wait_ms = (int)((standby_not_before - now_ns) / 1000000) + 1;
        poll(pf, 4, wait_ms);
        if (keep_active >= 0)
            keep_read(keep_active);
        mirror_flush();
        char drain[64];
        while (read(chld_pipe[0], drain, sizeof drain) > 0)
            ;
        /* Reports first: a fault is answered by the standby before the failed worker has exited. */
        struct sup_msg m;
        while (read(rep[0], &m, sizeof m) == (ssize_t)sizeof m) {
            if (m.kind == SUP_FAULT && m.from == sup_active) {
                m.rec.recovered_ms = -1;
                m.rec.clients[sizeof m.rec.clients - 1] = 0;
                m.rec.culprit[sizeof m.rec.culprit - 1] = 0;
                m.rec.why[sizeof m.rec.why - 1] = 0;
                srv_faults[srv_nfaults++ % SRV_FAULTS_KEPT] = m.rec;
                if (sup_standby > 0 && !sup_stop) {
                    srv_worker_restarts++;
                    cumux_logf("worker %d met a fatal GPU error: standby worker %d takes over", (int)m.from,
                               (int)sup_standby);
                    activate_standby(&standby_go);
                    failed_worker = m.from;
                    standby_not_before = cumux_now_ns() + standby_after_ms() * 1000000ull;
                    serving = standby_ready;
                    if (serving)
                        ever_served = true;
                } else {
                    sup_active = -sup_active; /* replaced when it has exited */
                }
            } else if (m.kind == SUP_SERVING && m.from == sup_active) {
                serving = ever_served = true;
                if (m.arena_size && !srv_arena_hint_size) { /* the first arena: every later worker's too */
                    srv_arena_hint = m.arena_base;
                    srv_arena_hint_size = m.arena_size;
                }
                init_failures = 0;
                if (srv_nfaults)
                    srv_faults[(srv_nfaults - 1) % SRV_FAULTS_KEPT].recovered_ms = m.rec.recovered_ms;
            } else if (m.kind == SUP_STANDBY && m.from == sup_standby) {
                standby_ready = true;
                mirror_reset(true);
                mirror_flush();
                standby_failures = 0;
                standby_note(sup_standby, true);
            }
        }
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
            char why[64];
            describe_exit(st, why, sizeof why);
            if (w == sup_standby) {
                sup_standby = 0;
                mirror_reset(false);
                standby_note(0, false);
                if (standby_go >= 0)
                    close(standby_go), standby_go = -1;
                if (!sup_stop) {
                    standby_failures++;
                    cumux_logf("standby worker %d ended (%s)%s", (int)w, why,
                               standby_failures >= STANDBY_RETRIES ? ": no standby from now on" : "");
                }
                continue;
            }
            if (w == failed_worker)
                failed_worker = 0, standby_not_before = 0; /* its context is gone: the next standby may start */
            if (w != sup_active && w != -sup_active) {
                cumux_logf("worker %d ended (%s)", (int)w, why); /* one the standby has replaced */
                continue;
            }
            /* The worker that served. */
            if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || sup_stop) {
                end_standby(&standby_go);
                exit(0); /* stopped: the worker cleaned up */
            }
            if (!ever_served) {
                end_standby(&standby_go);
                return -1; /* the first worker could not start: `cumux start` says why */
            }
            srv_worker_restarts++;
            if (!serving && ++init_failures > INIT_RETRIES) {
                cumux_logf("worker %d ended (%s) and %u new ones could not start: stopping", (int)w, why,
                           INIT_RETRIES);
                end_standby(&standby_go);
                return -1;
            }
            if (sup_standby > 0) {
                cumux_logf("worker %d ended (%s): standby worker %d takes over", (int)w, why, (int)sup_standby);
                activate_standby(&standby_go);
                serving = standby_ready;
                continue;
            }
            time_t now = time(NULL);
            if (now - window_start >= RESTART_WINDOW_S)
                window_start = now, in_window = 0;
            keep_hand_over(false); /* a cold worker has no clients to give their memory back to */
            bool slow = ++in_window > RESTARTS_FAST || (!serving && init_failures > 0);
            cumux_logf("worker %d ended (%s): starting a new one%s", (int)w, why, slow ? " in 1 s" : "");
            if (slow)
                sleep(1);
            need_active = true;
        }
        if (sup_stop && sup_active <= 0 && sup_standby <= 0)
            exit(0);
    }
}
