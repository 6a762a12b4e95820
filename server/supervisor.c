/* The supervisor: cumuxd's first process holds the lock, the listening socket and the pid file, and runs
 * the GPU work in a worker process it forks. A worker whose context met a fatal error (fault.c: no process
 * can use CUDA again after one) reports it here and exits; one that crashes is gone as well. Either way a
 * new worker is forked at once on the same listening socket: programs that connect meanwhile wait in its
 * backlog, none is refused, and nobody has to restart anything. The supervisor itself never touches CUDA
 * (a process that initialized CUDA cannot use it in a forked child). What happened is kept here and
 * inherited by each new worker, which shows it in `cumux status`. */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/server.h"

#define RESTARTS_FAST 20      /* restarts within RESTART_WINDOW_S before the supervisor slows down */
#define RESTART_WINDOW_S 60
#define INIT_RETRIES 10       /* a new worker that cannot start its GPUs: tries, 1 s apart */

struct sup_msg {
    uint32_t kind; /* 1: serving (rec.recovered_ms for the last fault), 2: a fatal fault (rec) */
    struct srv_fault_record rec;
};

struct srv_fault_record srv_faults[SRV_FAULTS_KEPT];
uint32_t srv_nfaults;
uint32_t srv_worker_restarts;
pid_t srv_supervisor_pid;

static int report_fd = -1; /* the worker's end of the pipe to the supervisor */
static volatile sig_atomic_t sup_stop;
static volatile pid_t sup_worker;

static void sup_on_signal(int sig)
{
    sup_stop = 1;
    if (sup_worker > 0)
        kill(sup_worker, sig);
}

int64_t srv_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sup_send(const struct sup_msg *m)
{
    if (report_fd >= 0) {
        ssize_t w = write(report_fd, m, sizeof *m); /* below PIPE_BUF: one piece */
        (void)w;
    }
}

void srv_supervisor_fault(const struct srv_fault_record *rec)
{
    struct sup_msg m = {.kind = 2, .rec = *rec};
    sup_send(&m);
}

void srv_supervisor_serving(void)
{
    struct sup_msg m = {.kind = 1};
    if (srv_nfaults) {
        struct srv_fault_record *last = &srv_faults[(srv_nfaults - 1) % SRV_FAULTS_KEPT];
        if (last->recovered_ms < 0) {
            last->recovered_ms = srv_wall_ms() - last->at_ms;
            cumux_logf("serving again %lld ms after the fault", (long long)last->recovered_ms);
        }
        m.rec = *last;
    }
    sup_send(&m);
}

static void take_reports(int fd, bool *serving)
{
    struct sup_msg m;
    while (read(fd, &m, sizeof m) == (ssize_t)sizeof m) {
        if (m.kind == 2) {
            m.rec.recovered_ms = -1;
            m.rec.clients[sizeof m.rec.clients - 1] = 0;
            srv_faults[srv_nfaults++ % SRV_FAULTS_KEPT] = m.rec;
        } else if (m.kind == 1) {
            *serving = true;
            if (srv_nfaults)
                srv_faults[(srv_nfaults - 1) % SRV_FAULTS_KEPT].recovered_ms = m.rec.recovered_ms;
        }
    }
}

int srv_supervise(int *ready_fd)
{
    srv_supervisor_pid = getpid();
    int rep[2];
    if (pipe2(rep, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa = {.sa_handler = sup_on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    bool ever_served = false;
    time_t window_start = time(NULL);
    unsigned in_window = 0, init_failures = 0;
    for (;;) {
        pid_t w = fork();
        if (w < 0) {
            cumux_logf("cannot start a worker: %s", strerror(errno));
            return -1;
        }
        if (w == 0) {
            close(rep[0]);
            report_fd = rep[1];
            signal(SIGTERM, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* a worker never outlives its supervisor */
            if (getppid() != srv_supervisor_pid)
                _exit(1);
            return 0; /* the worker goes on with main() */
        }
        sup_worker = w;
        if (*ready_fd >= 0) { /* only the first worker tells `cumux start` how it went */
            close(*ready_fd);
            *ready_fd = -1;
        }
        int st = 0;
        bool serving = false;
        while (waitpid(w, &st, 0) < 0) {
            if (errno != EINTR) {
                st = 0;
                break;
            }
        }
        sup_worker = 0;
        take_reports(rep[0], &serving);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            exit(0); /* stopped: the worker cleaned up */
        if (sup_stop)
            exit(0);
        if (!ever_served && !serving)
            return -1; /* the first worker could not start: `cumux start` says why */
        ever_served = true;
        char why[64];
        if (WIFEXITED(st) && WEXITSTATUS(st) == CUMUX_EXIT_GPU_FAULT)
            snprintf(why, sizeof why, "a fatal GPU error");
        else if (WIFSIGNALED(st))
            snprintf(why, sizeof why, "signal %d", WTERMSIG(st));
        else
            snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(st));
        srv_worker_restarts++;
        if (serving) {
            init_failures = 0;
        } else if (++init_failures > INIT_RETRIES) {
            cumux_logf("worker %d ended (%s) and %u new ones could not start: stopping", (int)w, why,
                       INIT_RETRIES);
            return -1;
        }
        time_t now = time(NULL);
        if (now - window_start >= RESTART_WINDOW_S)
            window_start = now, in_window = 0;
        bool slow = ++in_window > RESTARTS_FAST || (!serving && init_failures > 0);
        cumux_logf("worker %d ended (%s): starting a new one%s", (int)w, why, slow ? " in 1 s" : "");
        if (slow)
            sleep(1);
    }
}
