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
#include "server/config.h"
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"

static int metrics_sock = -1; /* CUMUX_METRICS_PORT's listening socket (the supervisor's), or -1 */

static void on_signal(int sig)
{
    (void)sig;
    srv_stop_requested = 1;
    char b = 0;
    ssize_t w = write(srv_wake_pipe[1], &b, 1);
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
    /* Writable by no one else: nobody can put, rename or remove anything in it. Closed to others too unless
     * the server serves other users (CUMUX_USERS; then its sockets are open and connections checked), who
     * must be able to reach its sockets: a private directory is opened to them (0755). */
    if (srv_access_open() && !(st.st_mode & 077) && fchmod(fd, (st.st_mode & 07777) | 055) == 0)
        st.st_mode |= 055;
    if (st.st_mode & (srv_access_open() ? 022 : 077)) {
        fprintf(stderr, "cumuxd: pipe directory %s has mode %04o: it must be closed to others (0700; 0755 "
                "where CUMUX_USERS lets other users in)\n", path, (unsigned)(st.st_mode & 07777));
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
    const char *max_clients_arg = NULL, *max_handles_arg = NULL, *config = getenv("CUMUX_CONFIG");
    const char *max_clients_from = "CUMUX_MAX_CLIENTS", *max_handles_from = "CUMUX_MAX_HANDLES";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--foreground") || !strcmp(argv[i], "-f")) {
            foreground = true;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strcmp(argv[i], "--max-clients") && i + 1 < argc) {
            max_clients_arg = argv[++i];
            max_clients_from = "--max-clients";
        } else if (!strcmp(argv[i], "--max-handles") && i + 1 < argc) {
            max_handles_arg = argv[++i];
            max_handles_from = "--max-handles";
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: cumuxd [--foreground] [--config FILE] [--max-clients N] [--max-handles N]\n"
                   "  --config FILE     CUMUX_* settings, VARIABLE=value a line, over the environment; read again\n"
                   "                    on SIGHUP (`cumux reload`) for the defaults that can change live (also\n"
                   "                    CUMUX_CONFIG)\n"
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
    if (!srv_config_start(config && *config ? config : NULL) || !srv_access_parse(getenv("CUMUX_USERS")))
        return 2;
    srv_on_reload = srv_config_reload;
    if (!max_clients_arg)
        max_clients_arg = getenv("CUMUX_MAX_CLIENTS");
    if (!max_handles_arg)
        max_handles_arg = getenv("CUMUX_MAX_HANDLES");
    if (!parse_limit(max_clients_arg, max_clients_from, MAX_CLIENTS_CAP, &srv_max_clients) ||
        !parse_limit(max_handles_arg, max_handles_from, MAX_HANDLES_CAP, &srv_max_handles))
        return 2;
    const char *sndbuf = getenv("CUMUX_TEST_SNDBUF");
    srv_test_sndbuf = sndbuf ? atoi(sndbuf) : 0;
    const char *welcome_delay = getenv("CUMUX_TEST_WELCOME_DELAY_MS");
    int delay_ms = welcome_delay ? atoi(welcome_delay) : 0;
    srv_test_welcome_delay_us = delay_ms > 0 && delay_ms <= 1000 ? (unsigned)delay_ms * 1000 : 0;
    /* Each client holds about three descriptors (socket, channel, stdout): use all we are allowed. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Started with a standard descriptor closed (a Slurm prolog's cumux start had no stdin), the pipe
     * directory's descriptor would be 0, and the daemon's dup2 of /dev/null onto 0 would replace it:
     * every one of 0-2 is open before anything else is. */
    int null_fd;
    while ((null_fd = open("/dev/null", O_RDWR)) >= 0 && null_fd <= 2) {
    }
    if (null_fd > 2)
        close(null_fd);
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
    srv_started_at = time(NULL);
    /* Many clients, each with its own streams: more hardware queues avoid false dependencies. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    char st = 1;
    int lsock = -1;
    if (pipe2(srv_wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        goto out;
    srv_wake_fd = srv_wake_pipe[1];
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
    if (fchmodat(dir_fd, CUMUX_SOCKET_NAME, srv_access_open() ? 0666 : 0600, 0) < 0)
        cumux_logf("cannot set %s's mode: %s", sock_path, strerror(errno));
    write_pid_file(dir_fd, "cumuxd.pid");
    signal(SIGPIPE, SIG_IGN);
    /* From here on this is a worker; the supervisor stays in srv_supervise until the server stops. */
    if (srv_supervise(&ready[1], dir_fd, &lsock) < 0) {
        unlinkat(dir_fd, CUMUX_SOCKET_NAME, 0);
        unlinkat(dir_fd, "cumuxd.pid", 0);
        goto out;
    }
    prctl(PR_SET_NAME, "cumuxd-gpu"); /* the worker, beside its supervisor "cumuxd" */
    /* This worker's GPU: its socket and pid file (GPU 0's also take status, control and the metrics). */
    char my_sock[64], my_pid[64];
    int my_gpu = srv_gpu_served; /* -1 after a start without a GPU (CUMUX_ALLOW_NO_GPU) */
    if (cumux_gpu_socket_name(srv_gpu_served, my_sock, sizeof my_sock) < 0 ||
        cumux_gpu_pid_name(srv_gpu_served, my_pid, sizeof my_pid) < 0)
        goto out;
    snprintf(sock_path, sizeof sock_path, "%s/%s", pipe_dir, my_sock);
    if (srv_gpu_served != 0 && metrics_sock >= 0) {
        close(metrics_sock);
        metrics_sock = -1;
    }
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
        srv_gpu_count = 0, srv_gpu_served = -1;
    }
    if (srv_reaper_start() < 0 || srv_fault_watch_start(srv_on_gpu_fault, srv_on_dump_begun) < 0)
        goto out;
    srv_chunks_start();
    if (srv_gpu_served >= 0) {
        cuCtxSetCurrent(srv_gpus[srv_gpu_served].ctx);
        srv_marks_init();
        srv_host_waits_probe();
        srv_channel_spares_start(); /* a standby's are there for the programs coming back to it */
    }
    if (srv_worker_is_standby()) {
        srv_gpus_stand_by();
        cumux_logf("standby worker ready: it takes over if the serving worker fails");
        static const struct srv_mirror_ops mirror = {srv_chunks_mirror_add, srv_chunks_mirror_remove};
        if (srv_standby_wait(&srv_stop_requested, &mirror) < 0) {
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
    srv_failover_sockets(lsock, metrics_sock);
    /* The worker's pid, for whoever must tell a new worker from the old one (tests, monitoring): there
     * before `cumux start` returns. */
    write_pid_file(dir_fd, my_pid);
    cumux_logf("listening on %s for GPU %d (of %d)", sock_path, my_gpu, srv_gpu_count);
    st = 0;
    uint64_t arena_base, arena_size;
    srv_chunks_arena(&arena_base, &arena_size);
    srv_supervisor_serving(arena_base, arena_size);
    srv_serve(lsock, metrics_sock);
    cumux_logf("stopping: disconnecting clients");
    close(lsock);
    unlinkat(dir_fd, my_sock, 0);
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        shutdown(c->conn.sock, SHUT_RDWR);
        srv_client_mark_dead(c);
    }
    pthread_mutex_unlock(&srv_clients_lock);
    for (;;) {
        pthread_mutex_lock(&srv_clients_lock);
        struct srv_client *c = srv_clients;
        if (c)
            srv_clients = c->next;
        pthread_mutex_unlock(&srv_clients_lock);
        if (!c)
            break;
        srv_client_free(c);
    }
    if (my_gpu == 0)
        unlinkat(dir_fd, "cumuxd.pid", 0);
    unlinkat(dir_fd, my_pid, 0);
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
