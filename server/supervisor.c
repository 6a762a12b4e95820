/* The supervisor: cumuxd's first process holds the lock, the listening sockets and the pid file, and runs
 * the GPU work in worker processes it forks: one per GPU, each its fault domain (a fault on one GPU ends
 * only that GPU's worker; the others' clients never notice), each on a listening socket of its own
 * (cumux_gpu_socket_name). GPU 0's worker starts first and says how many GPUs the driver shows; then
 * every other GPU's starts, and `cumux start` returns once all serve. Per GPU, as follows. A worker whose context met a fatal error (fault.c: no process
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
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/sock.h"
#include "server/groups.h"
#include "server/main.h"
#include "server/supervisor.h"

#define RESTARTS_FAST 20      /* restarts within RESTART_WINDOW_S before the supervisor slows down */
#define RESTART_WINDOW_S 60
#define INIT_RETRIES 10       /* a new worker that cannot start its GPUs: tries, 1 s apart */
#define QUICK_DEATHS 3        /* workers in a row that die within 1 s of taking over: then standbys slow down */
#define STANDBY_RETRIES 5     /* standby workers that die before they are needed: then none is kept */


struct sup_msg {
    uint32_t kind;
    int32_t from; /* the worker's pid */
    int32_t gpu_count; /* SUP_SERVING: the GPUs the driver shows the worker */
    int32_t reserved;
    struct srv_fault_record rec;
    uint64_t arena_base, arena_size; /* SUP_SERVING: its arena of clients' memory (chunks.c) */
};
_Static_assert(sizeof(struct sup_msg) <= PIPE_BUF, "a report is written in one piece");


struct srv_fault_record srv_faults[SRV_FAULTS_KEPT];
uint32_t srv_nfaults;
uint32_t srv_worker_restarts;
pid_t srv_supervisor_pid;

static uint64_t initial_mem_limit[CUMUX_MAX_DEVICES]; /* before the page exists */
static int initial_priority = CUMUX_PRIORITY_NORMAL;

int srv_default_priority(void)
{
    return sup_page ? atomic_load(&sup_page->default_priority) : initial_priority;
}

void srv_set_default_priority(int cls)
{
    if (sup_page)
        atomic_store(&sup_page->default_priority, cls);
    else
        initial_priority = cls;
}

static unsigned initial_percent;

unsigned srv_default_thread_percent(void)
{
    return sup_page ? atomic_load(&sup_page->default_percent) : initial_percent;
}

void srv_set_default_thread_percent(unsigned percent)
{
    percent = percent >= 100 ? 0 : percent;
    if (sup_page)
        atomic_store(&sup_page->default_percent, percent);
    else
        initial_percent = percent;
}

uint64_t srv_default_mem_limit_of(int gpu)
{
    if (gpu < 0 || gpu >= CUMUX_MAX_DEVICES)
        return 0;
    return sup_page ? atomic_load(&sup_page->default_mem_limit[gpu]) : initial_mem_limit[gpu];
}

uint64_t srv_default_mem_limit(void)
{
    return srv_default_mem_limit_of(srv_gpu_served);
}

void srv_set_default_mem_limit(int gpu, uint64_t bytes)
{
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        if (gpu >= 0 && g != gpu)
            continue;
        if (sup_page)
            atomic_store(&sup_page->default_mem_limit[g], bytes);
        else
            initial_mem_limit[g] = bytes;
    }
}

uint32_t srv_fault_history(struct srv_fault_record *last, uint32_t *restarts, int gpu, uint32_t *gpu_faults,
                           uint32_t *gpu_restarts)
{
    uint32_t n = sup_page ? atomic_load_explicit(&sup_page->nfaults, memory_order_acquire) : srv_nfaults;
    const struct srv_fault_record *rec = sup_page ? sup_page->faults : srv_faults;
    if (last)
        for (uint32_t i = n > SRV_FAULTS_KEPT ? n - SRV_FAULTS_KEPT : 0; i < n; i++)
            last[i % SRV_FAULTS_KEPT] = rec[i % SRV_FAULTS_KEPT];
    if (restarts)
        *restarts = sup_page ? atomic_load(&sup_page->restarts) : srv_worker_restarts;
    bool in = sup_page && gpu >= 0 && gpu < CUMUX_MAX_DEVICES;
    if (gpu_faults)
        *gpu_faults = in ? atomic_load(&sup_page->gpu_faults[gpu]) : 0;
    if (gpu_restarts)
        *gpu_restarts = in ? atomic_load(&sup_page->gpu_restarts[gpu]) : 0;
    return n;
}

static int report_fd = -1; /* a worker's end of the pipe to the supervisor */
int sup_go_fd = -1;   /* a standby worker's end of its pipe from the supervisor */
static volatile sig_atomic_t sup_stop;
static struct sup_domain doms[CUMUX_MAX_DEVICES];
static int ndoms;
static int chld_pipe[2] = {-1, -1};


static void sup_on_signal(int sig)
{
    sup_stop = 1;
    for (int i = 0; i < ndoms; i++) {
        if (doms[i].active > 0)
            kill(doms[i].active, sig);
        if (doms[i].standby > 0)
            kill(doms[i].standby, sig);
    }
}

static volatile sig_atomic_t sup_reload;
void (*srv_on_reload)(void);

static void sup_on_hangup(int sig)
{
    (void)sig;
    sup_reload = 1;
    int e = errno;
    ssize_t w = write(chld_pipe[1], "h", 1);
    (void)w;
    errno = e;
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

void sup_send(uint32_t kind, const struct srv_fault_record *rec, uint64_t arena_base, uint64_t arena_size)
{
    struct sup_msg m = {.kind = kind, .from = (int32_t)getpid(), .gpu_count = srv_gpu_count,
                        .arena_base = arena_base, .arena_size = arena_size};
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
    int g = srv_gpu_served;
    if (!sup_page || !atomic_load(&sup_page->enabled) || g < 0 || g >= CUMUX_MAX_DEVICES)
        return -1;
    *pid = atomic_load(&sup_page->standby_pid[g]);
    return *pid ? atomic_load(&sup_page->standby_ready[g]) : 0;
}

static void standby_note(struct sup_domain *d, pid_t pid, bool ready)
{
    if (sup_page) {
        atomic_store(&sup_page->standby_ready[d->gpu], ready);
        atomic_store(&sup_page->standby_pid[d->gpu], (int32_t)pid);
    }
}

int srv_standby_wait(volatile sig_atomic_t *stop, const struct srv_mirror_ops *mirror)
{
    sup_send(SUP_STANDBY, NULL, 0, 0);
    struct sup_go g;
    size_t got = 0;
    while (got < sizeof g && !*stop) { /* a stop that came while the GPUs started: not a read to wait on */
        struct pollfd pf[2] = {{.fd = sup_go_fd, .events = POLLIN},
                               {.fd = sup_keep_holding() ? -1 : sup_keep_fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (pf[0].revents) { /* the word to go first: the handover follows it */
            ssize_t n = read(sup_go_fd, (char *)&g + got, sizeof g - got);
            if (n > 0)
                got += (size_t)n;
            else if (n == 0 || (errno != EINTR && errno != EAGAIN) || *stop)
                return -1; /* the supervisor is gone, or stops the server */
            continue;
        }
        if (pf[1].revents && sup_keep_take_one(mirror) < 0)
            return -1; /* the supervisor is gone */
    }
    if (got < sizeof g)
        return -1;
    close(sup_go_fd);
    sup_go_fd = -1;
    srv_nfaults = g.nfaults;
    srv_worker_restarts = g.restarts;
    memcpy(srv_faults, g.faults, sizeof srv_faults);
    return 0;
}

bool srv_worker_is_standby(void)
{
    return sup_go_fd >= 0;
}

/* Forks a worker of domain d; returns its pid in the supervisor, 0 in the worker (its GPU in
 * srv_gpu_served, its listening socket in *worker_lsock). */
static pid_t fork_worker(struct sup_domain *d, int rep[2], bool standby, int *worker_lsock)
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
        sup_keep_fd = ks[1];
        /* The supervisor's, not the worker's: every domain's sockets and kept descriptors, the other
         * domains' listening sockets. */
        for (int i = 0; i < ndoms; i++) {
            struct sup_domain *o = &doms[i];
            if (o->keep_active >= 0)
                close(o->keep_active);
            if (o->keep_standby >= 0)
                close(o->keep_standby);
            if (o->standby_go >= 0)
                close(o->standby_go);
            o->keep_active = o->keep_standby = o->standby_go = -1;
            for (size_t k = 0; k < o->nkept; k++)
                close(o->kept[k].fd);
            o->nkept = 0;
            if (o != d && o->lsock >= 0)
                close(o->lsock);
        }
        close(chld_pipe[0]);
        close(chld_pipe[1]);
        report_fd = rep[1];
        if (standby) {
            close(go[1]);
            sup_go_fd = go[0];
        }
        srv_gpu_served = d->gpu;
        srv_handle_tag = CUMUX_HANDLE_TAG(d->gpu);
        srv_arena_hint = d->arena_hint;
        srv_arena_hint_size = d->arena_hint_size;
        *worker_lsock = d->lsock;
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGHUP, SIG_IGN); /* the supervisor's: a reload (a terminal's hang-up ends the supervisor's) */
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a worker never outlives its supervisor */
        if (getppid() != srv_supervisor_pid)
            _exit(1);
        return 0; /* the worker goes on with main() */
    }
    close(ks[1]);
    fcntl(ks[0], F_SETFL, O_NONBLOCK);
    if (standby) {
        close(go[0]);
        d->standby_go = go[1];
        if (d->keep_standby >= 0)
            close(d->keep_standby);
        d->keep_standby = ks[0];
        sup_mirror_reset(d, false); /* until it is ready */
    } else {
        if (d->keep_active >= 0)
            close(d->keep_active);
        d->keep_active = ks[0];
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

/* The fault history on the shared page (srv_fault_history), for every worker to tell: record slot i of
 * srv_faults changed (a new one: d, its GPU, counts one more). */
static void publish_fault(struct sup_domain *d, uint32_t i)
{
    if (!sup_page)
        return;
    sup_page->faults[i] = srv_faults[i];
    if (d)
        atomic_fetch_add(&sup_page->gpu_faults[d->gpu], 1);
    atomic_store_explicit(&sup_page->nfaults, srv_nfaults, memory_order_release);
}

static void publish_restart(struct sup_domain *d)
{
    srv_worker_restarts++;
    if (!sup_page)
        return;
    atomic_fetch_add(&sup_page->gpu_restarts[d->gpu], 1);
    atomic_store(&sup_page->restarts, srv_worker_restarts);
}

/* The standby takes over: it is given the history and starts serving. */
static void activate_standby(struct sup_domain *d)
{
    struct sup_go g = {.nfaults = srv_nfaults, .restarts = srv_worker_restarts};
    memcpy(g.faults, srv_faults, sizeof g.faults);
    const char *p = (const char *)&g;
    for (size_t done = 0; done < sizeof g;) { /* the pipe holds it all: the standby reads it when ready */
        ssize_t n = write(d->standby_go, p + done, sizeof g - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(d->standby_go);
    d->standby_go = -1;
    sup_keep_hand_over(d, true);
    d->active = d->standby;
    d->active_since_ns = cumux_now_ns();
    d->standby = 0;
    standby_note(d, 0, false);
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
static void end_standby(struct sup_domain *d)
{
    sup_mirror_reset(d, false);
    /* Its pipe first: a standby waiting to be told to go reads the end of it and stops. */
    if (d->standby_go >= 0)
        close(d->standby_go);
    d->standby_go = -1;
    if (d->standby > 0) {
        kill(d->standby, SIGTERM);
        while (waitpid(d->standby, NULL, 0) < 0 && errno == EINTR)
            ;
        d->standby = 0;
    }
}

static int sup_dir_fd = -1;

/* The server stops (or could not start): every domain's standby, and every other serving worker, go; the
 * sockets the supervisor made go with them. */
static void end_all(pid_t except)
{
    for (int i = 0; i < ndoms; i++)
        end_standby(&doms[i]);
    for (int i = 0; i < ndoms; i++) {
        pid_t a = doms[i].active < 0 ? -doms[i].active : doms[i].active;
        if (a > 0 && a != except)
            kill(a, SIGTERM);
    }
    for (int i = 0; i < ndoms; i++) {
        pid_t a = doms[i].active < 0 ? -doms[i].active : doms[i].active;
        if (a > 0 && a != except)
            while (waitpid(a, NULL, 0) < 0 && errno == EINTR)
                ;
        doms[i].active = 0;
        char name[64];
        if (i > 0 && cumux_gpu_socket_name(i, name, sizeof name) == 0)
            unlinkat(sup_dir_fd, name, 0);
    }
}

static void domain_init(struct sup_domain *d, int gpu, int lsock)
{
    memset(d, 0, sizeof *d);
    d->gpu = gpu;
    d->lsock = lsock;
    d->keep_active = d->keep_standby = d->standby_go = -1;
    d->need_active = true;
    d->window_start = time(NULL);
}

/* GPU 0's worker said how many GPUs there are: a domain, with its socket, for each of the others. Their
 * arenas of clients' memory are asked for beside GPU 0's, so that a program's pointers of several GPUs
 * never meet. */
static int domains_add(int count)
{
    if (count > CUMUX_MAX_DEVICES)
        count = CUMUX_MAX_DEVICES;
    for (int g = ndoms; g < count; g++) {
        char path[256], name[64];
        if (cumux_gpu_socket_path(g, path, sizeof path) < 0 || cumux_gpu_socket_name(g, name, sizeof name) < 0) {
            cumux_logf("GPU %d: its socket's path is too long", g);
            return -1;
        }
        int s = cumux_sock_listen(path, 128);
        int fl = s >= 0 ? fcntl(s, F_GETFL) : -1;
        if (s < 0 || fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) < 0) {
            cumux_logf("GPU %d: cannot listen on %s: %s", g, path, strerror(errno));
            if (s >= 0)
                close(s);
            return -1;
        }
        if (fchmodat(sup_dir_fd, name, srv_access_open() ? 0666 : 0600, 0) < 0)
            cumux_logf("cannot set %s's mode: %s", path, strerror(errno));
        struct sup_domain *d = &doms[g];
        domain_init(d, g, s);
        if (doms[0].arena_hint_size)
            d->arena_hint = doms[0].arena_hint + (uint64_t)g * doms[0].arena_hint_size;
        ndoms = g + 1;
    }
    return 0;
}

static struct sup_domain *domain_of(pid_t pid)
{
    for (int i = 0; i < ndoms; i++)
        if (doms[i].active == pid || doms[i].active == -pid || doms[i].standby == pid || doms[i].failed_worker == pid)
            return &doms[i];
    return NULL;
}

static void tell_ready(int *ready_fd)
{
    if (*ready_fd < 0)
        return;
    for (int i = 0; i < ndoms; i++)
        if (!doms[i].ever_served)
            return;
    char st = 0;
    ssize_t w = write(*ready_fd, &st, 1);
    (void)w;
    close(*ready_fd);
    *ready_fd = -1;
}

/* What a worker reported. */
static void on_report(struct sup_msg *m, int *ready_fd)
{
    struct sup_domain *d = domain_of(m->from);
    if (!d)
        return;
    if (m->kind == SUP_FAULT && m->from == d->active) {
        m->rec.recovered_ms = -1;
        m->rec.clients[sizeof m->rec.clients - 1] = 0;
        m->rec.culprit[sizeof m->rec.culprit - 1] = 0;
        m->rec.why[sizeof m->rec.why - 1] = 0;
        srv_faults[srv_nfaults++ % SRV_FAULTS_KEPT] = m->rec;
        publish_fault(d, (srv_nfaults - 1) % SRV_FAULTS_KEPT);
        if (d->standby > 0 && !sup_stop) {
            publish_restart(d);
            cumux_logf("GPU %d: worker %d met a fatal GPU error: standby worker %d takes over", d->gpu,
                       (int)m->from, (int)d->standby);
            activate_standby(d);
            d->failed_worker = m->from;
            d->standby_not_before = cumux_now_ns() + standby_after_ms() * 1000000ull;
            d->serving = d->standby_ready;
            if (d->serving)
                d->ever_served = true;
        } else {
            d->active = -d->active; /* replaced when it has exited */
        }
    } else if (m->kind == SUP_SERVING && m->from == d->active) {
        d->serving = d->ever_served = true;
        if (m->arena_size && !d->arena_hint_size) { /* the first arena: every later worker's too */
            d->arena_hint = m->arena_base;
            d->arena_hint_size = m->arena_size;
        }
        d->init_failures = 0;
        /* how long its GPU's last fault took to mend, as the new worker measured it */
        for (uint32_t i = srv_nfaults; m->rec.recovered_ms > 0 && i > 0 && i + SRV_FAULTS_KEPT > srv_nfaults; i--) {
            struct srv_fault_record *f = &srv_faults[(i - 1) % SRV_FAULTS_KEPT];
            if (f->gpu != d->gpu)
                continue;
            if (f->recovered_ms < 0) {
                f->recovered_ms = m->rec.recovered_ms;
                publish_fault(NULL, (i - 1) % SRV_FAULTS_KEPT);
            }
            break;
        }
        if (d->gpu == 0 && m->gpu_count > ndoms && domains_add(m->gpu_count) < 0)
            sup_stop = 1; /* not every GPU can be served: the server does not start */
        tell_ready(ready_fd);
    } else if (m->kind == SUP_STANDBY && m->from == d->standby) {
        d->standby_ready = true;
        sup_mirror_reset(d, true);
        sup_mirror_flush(d);
        d->standby_failures = 0;
        standby_note(d, d->standby, true);
    }
}

/* A worker of domain d ended: 1 when the server stops, -1 when it cannot go on, 0 otherwise. */
static int on_exit_of(struct sup_domain *d, pid_t w, int st)
{
    char why[64];
    describe_exit(st, why, sizeof why);
    if (w == d->standby) {
        d->standby = 0;
        sup_mirror_reset(d, false);
        standby_note(d, 0, false);
        if (d->standby_go >= 0)
            close(d->standby_go), d->standby_go = -1;
        if (!sup_stop) {
            d->standby_failures++;
            cumux_logf("GPU %d: standby worker %d ended (%s)%s", d->gpu, (int)w, why,
                       d->standby_failures >= STANDBY_RETRIES ? ": no standby from now on" : "");
        }
        return 0;
    }
    if (w == d->failed_worker)
        d->failed_worker = 0, d->standby_not_before = 0; /* its context is gone: the next standby may start */
    if (w != d->active && w != -d->active) {
        cumux_logf("GPU %d: worker %d ended (%s)", d->gpu, (int)w, why); /* one the standby has replaced */
        return 0;
    }
    /* The worker that served. */
    if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || sup_stop)
        return 1; /* stopped: the worker cleaned up */
    if (!d->ever_served)
        return -1; /* the first worker could not start: `cumux start` says why */
    publish_restart(d);
    if (!d->serving && ++d->init_failures > INIT_RETRIES) {
        cumux_logf("GPU %d: worker %d ended (%s) and %u new ones could not start: stopping", d->gpu, (int)w, why,
                   INIT_RETRIES);
        return -1;
    }
    /* Workers that die within a second of taking over, again and again (a bug that ends every worker at
     * once): the next standby waits a second, so the loop neither spins the CPU nor fills the log. */
    d->quick_deaths = cumux_now_ns() - d->active_since_ns < 1000000000ull ? d->quick_deaths + 1 : 0;
    if (d->standby > 0) {
        cumux_logf("GPU %d: worker %d ended (%s): standby worker %d takes over", d->gpu, (int)w, why,
                   (int)d->standby);
        activate_standby(d);
        d->serving = d->standby_ready;
        if (d->quick_deaths > QUICK_DEATHS) {
            cumux_logf("GPU %d: %u workers in a row ended within a second of taking over: the next standby "
                       "starts in 1 s", d->gpu, d->quick_deaths);
            if (d->standby_not_before < cumux_now_ns() + 1000000000ull)
                d->standby_not_before = cumux_now_ns() + 1000000000ull;
        }
        return 0;
    }
    time_t now = time(NULL);
    if (now - d->window_start >= RESTART_WINDOW_S)
        d->window_start = now, d->in_window = 0;
    sup_keep_hand_over(d, false); /* a cold worker has no clients to give their memory back to */
    bool slow = ++d->in_window > RESTARTS_FAST || (!d->serving && d->init_failures > 0);
    cumux_logf("GPU %d: worker %d ended (%s): starting a new one%s", d->gpu, (int)w, why, slow ? " in 1 s" : "");
    if (slow)
        sleep(1);
    d->active = 0;
    d->need_active = true;
    return 0;
}

int srv_supervise(int *ready_fd, int dir_fd, int *lsock)
{
    srv_supervisor_pid = getpid();
    sup_dir_fd = dir_fd;
    int rep[2];
    if (pipe2(rep, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa = {.sa_handler = sup_on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct sigaction sc = {.sa_handler = sup_on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGCHLD, &sc, NULL);
    struct sigaction sh = {.sa_handler = sup_on_hangup, .sa_flags = SA_RESTART};
    sigaction(SIGHUP, &sh, NULL);
    const char *sb = getenv("CUMUX_STANDBY");
    bool want_standby = !(sb && !strcmp(sb, "0"));
    void *page = mmap(NULL, sizeof *sup_page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    sup_page = page == MAP_FAILED ? NULL : page;
    if (sup_page) {
        atomic_store(&sup_page->enabled, want_standby);
        for (int g = 0; g < CUMUX_MAX_DEVICES; g++)
            atomic_store(&sup_page->default_mem_limit[g], initial_mem_limit[g]);
        atomic_store(&sup_page->default_priority, initial_priority);
        atomic_store(&sup_page->default_percent, initial_percent);
        srv_groups_page_ready();
    }
    domain_init(&doms[0], 0, *lsock);
    ndoms = 1;
    for (;;) {
        uint64_t now_ns = cumux_now_ns();
        for (int i = 0; i < ndoms && !sup_stop; i++) {
            struct sup_domain *d = &doms[i];
            if (d->need_active) {
                pid_t w = fork_worker(d, rep, false, lsock);
                if (w < 0) {
                    cumux_logf("GPU %d: cannot start a worker: %s", d->gpu, strerror(errno));
                    end_all(0);
                    return -1;
                }
                if (w == 0) {
                    if (*ready_fd >= 0) /* the supervisor tells `cumux start`, once every GPU serves */
                        close(*ready_fd), *ready_fd = -1;
                    return 0;
                }
                d->active = w;
                d->active_since_ns = cumux_now_ns();
                d->serving = false;
                d->need_active = false;
            }
            if (want_standby && d->serving && d->standby <= 0 && d->standby_failures < STANDBY_RETRIES &&
                now_ns >= d->standby_not_before) {
                pid_t w = fork_worker(d, rep, true, lsock);
                if (w == 0) {
                    if (*ready_fd >= 0)
                        close(*ready_fd), *ready_fd = -1;
                    return 0;
                }
                if (w > 0) {
                    d->standby = w;
                    d->standby_ready = false;
                    standby_note(d, w, false);
                } else {
                    d->standby_failures++;
                }
            }
        }
        /* Each domain's workers' sockets; a standby's when what it must be told did not all fit. */
        struct pollfd pf[2 + 2 * CUMUX_MAX_DEVICES];
        int npf = 0;
        pf[npf++] = (struct pollfd){.fd = rep[0], .events = POLLIN};
        pf[npf++] = (struct pollfd){.fd = chld_pipe[0], .events = POLLIN};
        int wait_ms = 1000;
        for (int i = 0; i < ndoms; i++) {
            struct sup_domain *d = &doms[i];
            bool mirror_left = sup_mirror_flush(d);
            pf[npf++] = (struct pollfd){.fd = d->keep_active, .events = POLLIN};
            pf[npf++] = (struct pollfd){.fd = mirror_left ? d->keep_standby : -1, .events = POLLOUT};
            if (d->standby_not_before > now_ns && d->standby_not_before - now_ns < 1000000000ull) {
                int ms = (int)((d->standby_not_before - now_ns) / 1000000) + 1;
                wait_ms = ms < wait_ms ? ms : wait_ms;
            }
        }
        poll(pf, (nfds_t)npf, wait_ms);
        for (int i = 0; i < ndoms; i++) {
            if (doms[i].keep_active >= 0)
                sup_keep_read(&doms[i], doms[i].keep_active);
            sup_mirror_flush(&doms[i]);
        }
        char drain[64];
        while (read(chld_pipe[0], drain, sizeof drain) > 0)
            ;
        if (sup_reload) {
            sup_reload = 0;
            if (srv_on_reload)
                srv_on_reload();
            else
                cumux_logf("SIGHUP: nothing to reload");
        }
        /* Reports first: a fault is answered by the standby before the failed worker has exited. */
        struct sup_msg m;
        while (read(rep[0], &m, sizeof m) == (ssize_t)sizeof m)
            on_report(&m, ready_fd);
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
            struct sup_domain *d = domain_of(w);
            if (!d) {
                char why[64];
                describe_exit(st, why, sizeof why);
                cumux_logf("worker %d ended (%s)", (int)w, why);
                continue;
            }
            int r = on_exit_of(d, w, st);
            if (r > 0) {
                end_all(w);
                exit(0);
            }
            if (r < 0) {
                end_all(w);
                return -1;
            }
        }
        if (sup_stop) {
            bool left = false;
            for (int i = 0; i < ndoms; i++)
                left |= doms[i].active > 0 || doms[i].standby > 0;
            if (!left) {
                end_all(0);
                exit(0);
            }
        }
    }
}
