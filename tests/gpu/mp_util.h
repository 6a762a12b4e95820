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

/* Two clients, B then A, for "does B wait for A?" tests. B runs b(wfd, go_fd) and sends 'R' once set up,
 * then waits for a byte on go_fd; A runs a(wfd) and sends a_tag once what B must not wait for has begun;
 * then B is told to go. Fills B's and A's next messages (b_tag, a_end) and fails the test when a client
 * hangs, fails or exits non-zero; a_first gets A's first message. */
static inline void mp_two_clients(void (*b)(int, int), void (*a)(int), char a_tag, char b_tag, char a_end, mp_msg *a_first,
                                  mp_msg *b_msg, mp_msg *a_msg)
{
    int pa[2], pb[2], pg[2];
    if (pipe(pa) || pipe(pb) || pipe(pg))
        gt_fail("pipe: %s", strerror(errno));
    pid_t bp = mp_fork();
    if (bp == 0) {
        close(pb[0]);
        close(pg[1]);
        b(pb[1], pg[0]);
        exit(0);
    }
    close(pb[1]);
    close(pg[0]);
    mp_msg rb;
    if (mp_recv(pb[0], &rb, 60000) || rb.tag != 'R') {
        mp_kill_wait(bp);
        gt_fail("client B did not get ready");
    }
    pid_t ap = mp_fork();
    if (ap == 0) {
        close(pa[0]);
        a(pa[1]);
        exit(0);
    }
    close(pa[1]);
    if (mp_recv(pa[0], a_first, 60000) || a_first->tag != a_tag) {
        mp_kill_wait(ap);
        mp_kill_wait(bp);
        gt_fail("client A did not get to the point B must not wait for");
    }
    if (write(pg[1], "g", 1) != 1)
        gt_fail("pipe write: %s", strerror(errno));
    int b_ok = mp_recv(pb[0], b_msg, 60000) == 0 && b_msg->tag == b_tag;
    int a_ok = mp_recv(pa[0], a_msg, 60000) == 0 && a_msg->tag == a_end;
    if (!b_ok || !a_ok) {
        mp_kill_wait(ap);
        mp_kill_wait(bp);
        gt_fail("client %s failed or hung", !b_ok ? "B" : "A");
    }
    int sa = mp_wait(ap), sb = mp_wait(bp);
    if (sa != 0 || sb != 0)
        gt_fail("clients exited with %d (A) and %d (B)", sa, sb);
}

#endif
