/* server/printf.c: stdio output for stdout made in a thread bound to a client goes to that client's
 * stdout, whole lines at a time, through every interposed function (the ones the driver uses for device
 * printf); a line without its newline waits for fflush; stdout output of an unbound thread and output
 * to other streams are untouched; a stdout that takes nothing does not block the worker, and what was
 * kept arrives in order later. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"
#include "test_util.h"

static int client_pipe[2], own_pipe[2];

static size_t drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    return n;
}

static void *bound(void *arg)
{
    struct srv_client *c = arg;
    srv_printf_bind(c);
    printf("dev: a=%d ", 1);
    fputs("b=2", stdout);
    fputc(' ', stdout);
    fwrite("c=3\n", 1, 4, stdout);
    puts("dev: second");
    fprintf(stdout, "dev: partial %s", "line");
    char got[256];
    /* Nothing of the partial line may be out before fflush. */
    ssize_t r = read(client_pipe[0], got, sizeof got - 1);
    got[r > 0 ? r : 0] = 0;
    CHECK(r > 0 && !strcmp(got, "dev: a=1 b=2 c=3\ndev: second\n"), "complete lines: '%s'", got);
    fflush(stdout);
    r = read(client_pipe[0], got, sizeof got - 1);
    got[r > 0 ? r : 0] = 0;
    CHECK(r > 0 && !strcmp(got, "dev: partial line"), "after fflush: '%s'", got);
    fprintf(stderr, "%s", ""); /* another stream: glibc's */
    srv_printf_unbind();
    return NULL;
}

/* A client whose stdout is a pipe nobody reads yet: printing far more than the pipe holds returns at
 * once, and what was kept arrives, in order, once the reader reads and the worker flushes again. */
#define SLOW_LINES 4000
static int slow_pipe[2];
static int slow_read_fd;

static void *bound_slow(void *arg)
{
    struct srv_client *c = arg;
    srv_printf_bind(c);
    uint64_t t0 = (uint64_t)time(NULL);
    for (int i = 0; i < SLOW_LINES; i++)
        printf("line %05d of device output, padded to about fifty bytes\n", i);
    CHECK((uint64_t)time(NULL) - t0 < 2, "printing to a full pipe blocked");
    char want[80];
    snprintf(want, sizeof want, "line %05d of device output, padded to about fifty bytes\n", SLOW_LINES - 1);
    size_t total = (size_t)SLOW_LINES * strlen(want);
    static char got[SLOW_LINES * 64];
    size_t n = 0;
    for (int round = 0; round < 1000000 && n < total; round++) {
        ssize_t r = read(slow_read_fd, got + n, sizeof got - n);
        if (r > 0)
            n += (size_t)r;
        else
            fflush(stdout); /* the worker's flush after each command */
    }
    CHECK(n == total, "got %zu bytes of %zu", n, total);
    CHECK(n >= strlen(want) && !memcmp(got + n - strlen(want), want, strlen(want)), "the last line");
    CHECK(!memcmp(got, "line 00000 ", 11), "the first line");
    srv_printf_unbind();
    return NULL;
}

int main(void)
{
    REQUIRE(pipe(client_pipe) == 0 && pipe(own_pipe) == 0, "pipe");
    fcntl(client_pipe[0], F_SETFL, O_NONBLOCK);
    /* The test's own stdout becomes own_pipe, to see what an unbound thread's printf does. */
    int saved = dup(STDOUT_FILENO);
    REQUIRE(saved >= 0 && dup2(own_pipe[1], STDOUT_FILENO) >= 0, "dup2");
    setvbuf(stdout, NULL, _IONBF, 0);
    struct srv_client c;
    memset(&c, 0, sizeof c);
    c.stdout_fd = client_pipe[1];
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, bound, &c) == 0, "pthread_create");
    pthread_join(t, NULL);
    printf("server: own line\n");
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(own_pipe[1]);
    char own[256];
    drain(own_pipe[0], own, sizeof own);
    CHECK(!strcmp(own, "server: own line\n"), "unbound thread's stdout: '%s'", own);
    char rest[64];
    ssize_t r = read(client_pipe[0], rest, sizeof rest);
    CHECK(r < 0, "the client got more: %zd bytes", r);

    /* The same through a pipe, then through a socket with the smallest send buffer. */
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0) {
            REQUIRE(pipe(slow_pipe) == 0, "pipe");
        } else {
            REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, slow_pipe) == 0, "socketpair");
            int small = 1;
            setsockopt(slow_pipe[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        }
        fcntl(slow_pipe[0], F_SETFL, O_NONBLOCK);
        slow_read_fd = slow_pipe[0];
        struct srv_client slow;
        memset(&slow, 0, sizeof slow);
        slow.stdout_fd = slow_pipe[1];
        REQUIRE(pthread_create(&t, NULL, bound_slow, &slow) == 0, "pthread_create");
        pthread_join(t, NULL);
        close(slow_pipe[0]);
        close(slow_pipe[1]);
    }
    printf("test_printf_route: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
