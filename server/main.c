/* cumuxd: owns one real CUDA context per GPU and runs every client's work in it.
 * The main thread accepts connections, answers status and stop requests, and notices clients that go
 * away (their socket closes); each client's commands run on its own worker thread (client.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/sock.h"
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

/* The pipe directory (private_dir) must be ours and closed to others, or someone else could stand in
 * for the server; the log directory only has to exist. */
static int make_dir(const char *path, bool private_dir)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return -1;
    if (private_dir && (st.st_uid != getuid() || (st.st_mode & 077) != 0)) {
        fprintf(stderr, "cumuxd: %s must belong to uid %u and be closed to others (mode 0700)\n", path,
                (unsigned)getuid());
        errno = EPERM;
        return -1;
    }
    return 0;
}

static void send_text(int sock, const char *text, int status)
{
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = status,
                              .text_len = strlen(text)};
    if (cumux_sock_send(sock, &w, sizeof w, -1) == 0)
        cumux_sock_send(sock, text, strlen(text), -1);
}

static void status_report(int sock)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return;
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
    APPEND("cumuxd pid %d, up %lds, pipe directory %s, driver %d.%d\n", (int)getpid(),
           (long)(time(NULL) - started_at), cumux_pipe_directory(), srv_driver_version / 1000,
           (srv_driver_version % 1000) / 10);
    for (int i = 0; i < srv_gpu_count; i++) {
        size_t f = 0, t = 0;
        cuCtxSetCurrent(srv_gpus[i].ctx);
        cuMemGetInfo(&f, &t);
        APPEND("GPU %d: %s, %s, %d SMs, memory %zu MiB used of %zu MiB\n", i, srv_gpus[i].info.name,
               srv_gpus[i].info.pci_bus_id, srv_gpus[i].info.attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT],
               (t - f) >> 20, t >> 20);
    }
    pthread_mutex_lock(&clients_lock);
    int n = 0;
    for (struct srv_client *c = clients; c; c = c->next)
        n += !atomic_load(&c->finished);
    APPEND("clients: %d\n", n);
    if (n)
        APPEND("%6s %8s %6s %12s %12s %8s %12s\n", "id", "pid", "uid", "device_MiB", "pinned_MiB", "streams",
               "kernels");
    for (struct srv_client *c = clients; c; c = c->next) {
        if (atomic_load(&c->finished))
            continue;
        APPEND("%6u %8d %6u %12.1f %12.1f %8u %12llu\n", c->id, (int)c->pid, (unsigned)c->uid,
               atomic_load(&c->mem_bytes) / 1048576.0, atomic_load(&c->host_bytes) / 1048576.0,
               atomic_load(&c->nstreams), (unsigned long long)atomic_load(&c->launches));
    }
    pthread_mutex_unlock(&clients_lock);
    send_text(sock, buf, 0);
out:
    free(buf);
#undef APPEND
}

static uint32_t next_client_id = 1;

static void accept_one(int lsock)
{
    int s = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        return;
    /* A connection that says nothing must not stall the server. */
    struct timeval tv = {.tv_usec = 500000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct ucred cred;
    socklen_t cl = sizeof cred;
    struct cumux_hello h;
    int out_fd = -1; /* a client's stdout may come with its hello */
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cumux_sock_recv(s, &h, sizeof h, &out_fd) < 0 ||
        h.magic != CUMUX_MAGIC) {
        if (out_fd >= 0)
            close(out_fd);
        close(s);
        return;
    }
    if (out_fd >= 0 && (h.kind != CUMUX_HELLO_CLIENT || !(h.flags & CUMUX_HELLO_STDOUT) ||
                        h.version != CUMUX_PROTO_VERSION || (cred.uid != getuid() && cred.uid != 0))) {
        close(out_fd);
        out_fd = -1;
    }
    if (h.version != CUMUX_PROTO_VERSION) {
        send_text(s, "protocol version mismatch between the shim and cumuxd: use the same build", 
                  CUDA_ERROR_MPS_CONNECTION_FAILED);
        close(s);
        return;
    }
    /* Only the server's own user (and root) may use it, as with MPS's default. */
    if (cred.uid != getuid() && cred.uid != 0) {
        send_text(s, "permission denied: cumuxd belongs to another user", CUDA_ERROR_MPS_CONNECTION_FAILED);
        close(s);
        return;
    }
    switch (h.kind) {
    case CUMUX_HELLO_STATUS:
        status_report(s);
        close(s);
        return;
    case CUMUX_HELLO_STOP:
        send_text(s, "stopping\n", 0);
        close(s);
        stop_requested = 1;
        return;
    case CUMUX_HELLO_CLIENT:
        break;
    default:
        close(s);
        return;
    }
    tv.tv_sec = 0;
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct srv_client *c = srv_client_start(s, cred.pid, cred.uid, next_client_id++, out_fd);
    if (!c) {
        if (out_fd >= 0)
            close(out_fd);
        send_text(s, "cumuxd could not set up a channel", CUDA_ERROR_OUT_OF_MEMORY);
        close(s);
        return;
    }
    struct cumux_welcome w = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .status = 0,
                              .client_id = c->id, .shm_size = sizeof(struct cumux_shm)};
    if (cumux_sock_send(s, &w, sizeof w, c->shm_fd) < 0)
        atomic_store(&c->dead, 1);
    pthread_mutex_lock(&clients_lock);
    c->next = clients;
    clients = c;
    pthread_mutex_unlock(&clients_lock);
    cumux_logf("client %u connected: pid %d uid %u", c->id, (int)c->pid, (unsigned)c->uid);
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

static int serve(int lsock)
{
    struct pollfd *fds = NULL;
    struct srv_client **owners = NULL;
    size_t cap = 0;
    while (!stop_requested) {
        pthread_mutex_lock(&clients_lock);
        size_t n = 2;
        for (struct srv_client *c = clients; c; c = c->next)
            n++;
        if (n > cap) {
            cap = n * 2;
            fds = realloc(fds, cap * sizeof *fds);
            owners = realloc(owners, cap * sizeof *owners);
            if (!fds || !owners) {
                pthread_mutex_unlock(&clients_lock);
                return -1;
            }
        }
        fds[0] = (struct pollfd){.fd = lsock, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = wake_pipe[0], .events = POLLIN};
        size_t k = 2;
        for (struct srv_client *c = clients; c; c = c->next) {
            if (c->hup_seen)
                continue;
            /* Only the hang-up: descriptors the client sends are read by its worker. */
            fds[k] = (struct pollfd){.fd = c->sock, .events = POLLRDHUP};
            owners[k++] = c;
        }
        pthread_mutex_unlock(&clients_lock);
        int r = poll(fds, k, 1000);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        /* Hang-ups first: reaping below frees clients that owners[] still points to. */
        for (size_t i = 2; i < k; i++) {
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
        if (fds[0].revents & POLLIN)
            accept_one(lsock);
    }
    free(fds);
    free(owners);
    return 0;
}

int main(int argc, char **argv)
{
    bool foreground = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--foreground") || !strcmp(argv[i], "-f")) {
            foreground = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: cumuxd [--foreground]\n"
                   "Environment: CUMUX_PIPE_DIRECTORY (default %s), CUMUX_LOG_DIRECTORY (default: the pipe "
                   "directory), CUMUX_DEBUG.\nUsually started by `cumux start` or `cumux run`.\n",
                   CUMUX_DEFAULT_PIPE_DIRECTORY);
            return 0;
        } else {
            fprintf(stderr, "cumuxd: unknown argument %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    cumux_log_init("cumuxd");
    umask(077);
    const char *pipe_dir = cumux_pipe_directory();
    const char *log_dir = getenv("CUMUX_LOG_DIRECTORY");
    if (!log_dir || !*log_dir)
        log_dir = pipe_dir;
    char sock_path[256], pid_path[512], log_path[512];
    if (make_dir(pipe_dir, true) < 0 || make_dir(log_dir, false) < 0 || cumux_socket_path(sock_path, sizeof sock_path) < 0) {
        fprintf(stderr, "cumuxd: cannot use pipe directory %s or log directory %s: %s\n", pipe_dir, log_dir,
                strerror(errno));
        return 1;
    }
    snprintf(pid_path, sizeof pid_path, "%s/cumuxd.pid", pipe_dir);
    snprintf(log_path, sizeof log_path, "%s/cumuxd.log", log_dir);
    /* One server per pipe directory, even when several `cumux run` start one at the same moment: the lock
     * is held for the server's life (the daemon inherits it). */
    char lock_path[512];
    snprintf(lock_path, sizeof lock_path, "%s/cumuxd.lock", pipe_dir);
    int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "cumuxd: a server already runs for %s\n", pipe_dir);
        return 1;
    }
    int probe = cumux_sock_connect(sock_path);
    if (probe >= 0) {
        close(probe);
        fprintf(stderr, "cumuxd: a server already listens on %s\n", sock_path);
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
        int lf = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
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
    srv_wake_fd = wake_pipe[1];
    if (srv_reaper_start() < 0)
        goto out;
    lsock = cumux_sock_listen(sock_path, 128);
    if (lsock < 0) {
        cumux_logf("cannot listen on %s: %s", sock_path, strerror(errno));
        goto out;
    }
    chmod(sock_path, 0600);
    FILE *pf = fopen(pid_path, "w");
    if (pf) {
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    cumux_logf("listening on %s with %d GPU(s)", sock_path, srv_gpu_count);
    st = 0;
    if (ready[1] >= 0) {
        ssize_t w = write(ready[1], &st, 1);
        (void)w;
        close(ready[1]);
        ready[1] = -1;
    }
    serve(lsock);
    cumux_logf("stopping: disconnecting clients");
    close(lsock);
    unlink(sock_path);
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
    unlink(pid_path);
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
