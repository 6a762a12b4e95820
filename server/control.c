/* `cumux set PID ...` and `cumux kill PID`, as the main thread answers them: each client of the process
 * changed, a line each in the reply.
 * `cumux kill` is like MPS's terminate_client: the client's calls fail from now on with
 * CUDA_ERROR_MPS_CLIENT_TERMINATED and everything it held is freed. Its worker first waits for the work it
 * queued; work that never ends (a kernel in an endless loop) cannot be taken off a shared context, so after
 * a grace period (CUMUX_KILL_GRACE_MS, default 500) the whole worker is replaced, naming the killed client. */
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
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"

static uint64_t kill_grace_ms(void)
{
    const char *e = getenv("CUMUX_KILL_GRACE_MS");
    long v = e && *e ? atol(e) : 500;
    return v > 0 ? (uint64_t)v : 500;
}

static _Atomic int kills_pending; /* killed clients whose work has not drained yet */

int srv_kills_pending(void)
{
    return atomic_load(&kills_pending);
}

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
        pthread_mutex_lock(&srv_clients_lock);
        struct srv_client *c = srv_clients;
        while (c && c->id != kw.id)
            c = c->next;
        bool gone = !c || atomic_load(&c->finished);
        pthread_mutex_unlock(&srv_clients_lock);
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
    srv_worker_fails(CUDA_ERROR_CONTEXT_IS_DESTROYED, 0, kw.id, NULL, why);
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
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        if (c->pid != pid || atomic_load(&c->dead))
            continue;
        char who[160], what[256];
        apply(c, arg, what, sizeof what);
        n++;
        srv_client_describe(c, who, sizeof who);
        reply_line(text, cap, &len, "client %s: %s\n", who, what);
    }
    pthread_mutex_unlock(&srv_clients_lock);
    if (!n)
        snprintf(text, cap, none, (int)pid);
    return n;
}

#define NO_CLIENT_OF_PROCESS "no client of process %d\n"

/* --memory SIZE: that limit (0: none) from its next allocation on; what it holds already stays its own,
 * even past it. */
static void apply_memory_limit(struct srv_client *c, uint64_t limit, char *what, size_t cap)
{
    atomic_store(&c->memory.mem_limit, limit);
    if (limit)
        snprintf(what, cap, "device memory limit %.1f MiB, %.1f MiB held (cumux set)", limit / 1048576.0,
                 atomic_load(&c->memory.mem_bytes) / 1048576.0);
    else
        snprintf(what, cap, "device memory limit none, %.1f MiB held (cumux set)",
                 atomic_load(&c->memory.mem_bytes) / 1048576.0);
}

unsigned srv_set_memory_limit(pid_t pid, uint64_t limit, char *text, size_t cap)
{
    return change_clients(pid, limit, apply_memory_limit, NO_CLIENT_OF_PROCESS, text, cap);
}

/* --priority CLASS: the streams it makes from now on run in that class's band (a stream's priority is
 * fixed when it is made). */
static void apply_priority(struct srv_client *c, uint64_t cls, char *what, size_t cap)
{
    atomic_store(&c->streams.priority, (int)cls);
    snprintf(what, cap, "priority %s for its new streams (cumux set)", cumux_priority_name((enum cumux_priority)cls));
}

unsigned srv_set_priority(pid_t pid, int cls, char *text, size_t cap)
{
    return change_clients(pid, (uint64_t)cls, apply_priority, NO_CLIENT_OF_PROCESS, text, cap);
}

/* --sms N / --threads P: its kernels from their next operation on run on N SMs of their own and at most P%
 * of the SMs (placement.c); a reservation that cannot be had leaves the old one, and says why. */
static unsigned sms_refused; /* by the last srv_set_sms (change_clients runs on this thread alone) */
static void apply_sms(struct srv_client *c, uint64_t arg, char *what, size_t cap)
{
    char why[200];
    uint32_t sms = (uint32_t)arg, pct = (uint32_t)(arg >> 32);
    if (sms == CUMUX_SMS_KEEP)
        sms = atomic_load(&c->placement.want_sms);
    if (pct == CUMUX_SMS_KEEP)
        pct = atomic_load(&c->placement.want_percent);
    if (srv_placement_want(c, sms, pct, why, sizeof why) != 0) {
        sms_refused++;
        snprintf(what, cap, "unchanged: %s", why);
    } else {
        snprintf(what, cap, "%s (cumux set)", why);
    }
    cumux_logf("client %u: SMs: %s", c->id, what);
}

unsigned srv_set_sms(pid_t pid, uint64_t arg, char *text, size_t cap, unsigned *refused)
{
    sms_refused = 0;
    unsigned n = change_clients(pid, arg, apply_sms, NO_CLIENT_OF_PROCESS, text, cap);
    *refused = sms_refused;
    return n;
}

/* Ends the clients of process pid; the reply text says what was done. Returns how many. */
/* One client killed: its calls fail from now on, and a watch gives its work `grace` ms to drain. */
static void apply_kill(struct srv_client *c, uint64_t grace, char *what, size_t cap)
{
    atomic_store(&c->shm->server_fault, (int32_t)CUDA_ERROR_MPS_CLIENT_TERMINATED);
    shutdown(c->conn.sock, SHUT_RDWR); /* its shim sees the server gone, and returns the error above */
    srv_client_mark_dead(c);
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

unsigned srv_kill_clients(pid_t pid, char *text, size_t cap)
{
    return change_clients(pid, kill_grace_ms(), apply_kill, "no client of cumuxd has pid %d\n", text, cap);
}

/* cumux set --group PATH ...: the group's rule, then this worker's clients regrouped (a new rule may take
 * programs from a shallower one), its members given a priority or thread percentage at once. */
int srv_set_group(const char *path, const char *labels, uint32_t what, uint64_t value, char *text, size_t cap)
{
    if (what == CUMUX_GROUP_LABELS_SET)
        return srv_group_rule_labels(path, labels, text, cap);
    int rule = srv_group_rule_set(path, what, value, text, cap);
    if (rule == -2) { /* cumux kill --group: every program of it here ends */
        unsigned n = 0;
        pthread_mutex_lock(&srv_clients_lock);
        for (struct srv_client *c = srv_clients; c; c = c->next) {
            if (atomic_load(&c->dead) || !srv_group_contains(path, c))
                continue;
            char what_done[256];
            apply_kill(c, kill_grace_ms(), what_done, sizeof what_done);
            n++;
        }
        pthread_mutex_unlock(&srv_clients_lock);
        snprintf(text, cap, "GPU %d: group %s: %u program(s) ended\n", srv_gpu_served, path, n);
        cumux_logf("%.*s (cumux kill --group)", (int)strcspn(text, "\n"), text);
        return 0;
    }
    if (rule == -3) /* forgotten, or there was none */
        return 0;
    if (rule < 0)
        return -1;
    unsigned members = 0;
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client *c = srv_clients; c; c = c->next)
        if (!atomic_load(&c->dead) && !atomic_load(&c->finished))
            members += srv_group_regroup(c, rule, what);
    pthread_mutex_unlock(&srv_clients_lock);
    srv_group_describe(path, what, value, members, text, cap);
    return 0;
}
