/* Helpers of the tests that talk to a running cumuxd: counted checks, and `cumux status` as data. */
#ifndef CUMUX_TEST_UTIL_H
#define CUMUX_TEST_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Unused in tests that only REQUIRE. */
__attribute__((unused)) static unsigned long test_checks, test_failures;

/* A failed CHECK is reported and counted; the test goes on to show what else fails. */
#define CHECK(cond, ...)                                                                               \
    do {                                                                                               \
        test_checks++;                                                                                 \
        if (!(cond)) {                                                                                 \
            test_failures++;                                                                           \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                            \
            fprintf(stderr, __VA_ARGS__);                                                              \
            fputc('\n', stderr);                                                                       \
        }                                                                                              \
    } while (0)

/* Setup that later checks depend on: stop the program. */
#define REQUIRE(cond, ...)                                                                             \
    do {                                                                                               \
        test_checks++;                                                                                 \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                            \
            fprintf(stderr, __VA_ARGS__);                                                              \
            fputc('\n', stderr);                                                                       \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static inline void test_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        REQUIRE(errno == EINTR, "nanosleep: %s", strerror(errno));
}

/* Runs `CLI status` (the environment says which server); returns its exit status, and the number after
 * "clients: " in *clients (-1 when absent). */
static inline int test_cumux_status(const char *cli, int *clients)
{
    int pfd[2];
    REQUIRE(pipe(pfd) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        if (dup2(pfd[1], STDOUT_FILENO) < 0 || close(pfd[0]) != 0 || close(pfd[1]) != 0)
            _exit(126);
        execl(cli, "cumux", "status", (char *)NULL);
        _exit(127);
    }
    REQUIRE(close(pfd[1]) == 0, "close");
    char text[8192];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof text - 1 && (n = read(pfd[0], text + len, sizeof text - 1 - len)) > 0)
        len += (size_t)n;
    text[len] = 0;
    REQUIRE(close(pfd[0]) == 0, "close");
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    const char *p = strstr(text, "clients: ");
    *clients = p ? atoi(p + strlen("clients: ")) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Polls `cumux status` for up to timeout_ms until it shows `want` clients; returns the last count. */
static inline int test_wait_clients(const char *cli, int want, int timeout_ms)
{
    int n = -1;
    for (int waited = 0;; waited += 50) {
        if (test_cumux_status(cli, &n) == 0 && n == want)
            return n;
        if (waited >= timeout_ms)
            return n;
        test_sleep_ms(50);
    }
}

#endif
