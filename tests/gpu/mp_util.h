/* Helpers for the multi-process tests: the parent stays CUDA-free, children report over pipes. */
#ifndef CUMUX_GPU_MP_UTIL_H
#define CUMUX_GPU_MP_UTIL_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test.h"

typedef struct {
    char tag;
    int ok;
    double v[4];
} mp_msg;

static inline void mp_send(int fd, char tag, double v0, double v1, double v2, double v3)
{
    mp_msg m;
    memset(&m, 0, sizeof m);
    m.tag = tag;
    m.ok = 1;
    m.v[0] = v0;
    m.v[1] = v1;
    m.v[2] = v2;
    m.v[3] = v3;
    if (write(fd, &m, sizeof m) != (ssize_t)sizeof m)
        gt_fail("pipe write: %s", strerror(errno));
}

/* Reads one message within timeout_ms; 0 on success, -1 on EOF/timeout (child died or hung). */
static inline int mp_recv(int fd, mp_msg *m, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    ssize_t n;
    do
        n = read(fd, m, sizeof *m);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *m ? 0 : -1;
}

static inline pid_t mp_fork(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        gt_fail("fork: %s", strerror(errno));
    return pid;
}

/* Exit status of a child, or -1 when it did not exit normally. */
static inline int mp_wait(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline void mp_kill_wait(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGKILL);
        mp_wait(pid);
    }
}

#endif
