/* Device-side printf reaches the client that synchronized, not the server's stdout.
 *
 * The driver empties a context's printf buffer when a thread synchronizes with it, and prints each
 * record with stdio on stdout, in that thread, one format segment per call (vfprintf, printf, fputs,
 * fputc, puts, fwrite, fflush; seen with tools/probe_printf_io.c). In cumuxd that thread is the worker of
 * the client whose call synchronized, so these functions are interposed here (the executable exports
 * them, server/printf.dynlist): output for stdout made in a worker thread is collected per thread and
 * written, whole lines at a time, to the stdout the client handed over when it connected, without
 * blocking the worker (the driver may hold its own locks while it prints). Anything else goes to glibc
 * unchanged.
 *
 * One context holds every client's kernels, so a client that synchronizes also receives lines printed by
 * another client's kernels that finished before: documented in docs/compatibility.md. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "server/server.h"

static __thread struct srv_client *printf_client;
static __thread char line_buf[8192];
static __thread size_t line_len;
/* Lines not yet taken by the client's stdout. A worker never blocks on it (a client whose stdout is a
 * full pipe must not stall its worker inside the driver): it writes only what poll says fits, keeps the
 * rest up to PENDING_MAX, and drops beyond that. */
#define PENDING_MAX (1u << 20)
static __thread char *pending;
static __thread size_t pending_len;
static __thread unsigned long long dropped;
static __thread bool out_broken;
static __thread bool out_socket;
static __thread size_t out_piece;

void srv_printf_bind(struct srv_client *c)
{
    printf_client = c;
    line_len = 0;
    pending_len = 0;
    dropped = 0;
    out_broken = false;
    /* How much one write may carry once poll has said "room": a pipe takes PIPE_BUF whole; a terminal
     * polls writable only while little is waiting in it, so small pieces go through; a socket is written
     * with MSG_DONTWAIT; a regular file does not block. Anything else gets nothing. */
    struct stat st;
    out_socket = false;
    out_piece = 0;
    if (c && c->stdout_fd >= 0 && fstat(c->stdout_fd, &st) == 0) {
        if (S_ISFIFO(st.st_mode))
            out_piece = PIPE_BUF;
        else if (S_ISSOCK(st.st_mode))
            out_piece = 4096, out_socket = true;
        else if (S_ISREG(st.st_mode))
            out_piece = 65536;
        else if (S_ISCHR(st.st_mode))
            out_piece = 256;
    }
    out_broken = out_piece == 0;
}

/* Writes what the client's stdout takes now without blocking: pieces of at most out_piece bytes, each
 * after poll says there is room. */
static void drain(struct srv_client *c)
{
    size_t done = 0;
    while (done < pending_len && !out_broken) {
        struct pollfd p = {.fd = c->stdout_fd, .events = POLLOUT};
        int n = poll(&p, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) {
            out_broken = n == 1; /* reader gone: drop from now on */
            break;
        }
        size_t k = pending_len - done < out_piece ? pending_len - done : out_piece;
        ssize_t w = out_socket ? send(c->stdout_fd, pending + done, k, MSG_DONTWAIT | MSG_NOSIGNAL)
                               : write(c->stdout_fd, pending + done, k);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0) {
            out_broken = true;
            break;
        }
        done += (size_t)w;
    }
    if (out_broken)
        done = pending_len;
    memmove(pending, pending + done, pending_len - done);
    pending_len -= done;
}

static void queue(struct srv_client *c, const char *p, size_t n)
{
    if (out_broken || c->stdout_fd < 0)
        return;
    if (!pending && !(pending = malloc(PENDING_MAX))) {
        dropped += n;
        return;
    }
    size_t k = n <= PENDING_MAX - pending_len ? n : PENDING_MAX - pending_len;
    memcpy(pending + pending_len, p, k);
    pending_len += k;
    dropped += n - k;
    drain(c);
}

/* Hands the complete lines held (everything when all is set) to the client's stdout, and tries again
 * what its stdout did not take before. */
void srv_printf_flush(int all)
{
    struct srv_client *c = printf_client;
    if (!c)
        return;
    size_t upto = line_len;
    if (!all)
        while (upto && line_buf[upto - 1] != '\n')
            upto--;
    if (upto) {
        queue(c, line_buf, upto);
        memmove(line_buf, line_buf + upto, line_len - upto);
        line_len -= upto;
    } else if (pending_len) {
        drain(c);
    }
}

void srv_printf_unbind(void)
{
    struct srv_client *c = printf_client;
    if (!c)
        return;
    srv_printf_flush(1);
    if (pending_len || dropped)
        cumux_logf("client %u: %llu bytes of device printf output dropped (its stdout did not take them)", c->id,
                   (unsigned long long)(dropped + pending_len));
    free(pending);
    pending = NULL;
    pending_len = 0;
    printf_client = NULL;
}

static void add(const char *p, size_t n)
{
    while (n) {
        size_t room = sizeof line_buf - line_len;
        if (!room) {
            srv_printf_flush(1);
            continue;
        }
        size_t k = n < room ? n : room;
        memcpy(line_buf + line_len, p, k);
        line_len += k;
        p += k;
        n -= k;
    }
    srv_printf_flush(0);
}

/* Whether this call's output goes to a client. */
static int routed(FILE *f)
{
    return f == stdout && printf_client && printf_client->stdout_fd >= 0;
}

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

int vfprintf(FILE *f, const char *fmt, va_list ap)
{
    if (!routed(f)) {
        static int (*real)(FILE *, const char *, va_list);
        if (!real)
            real = REAL("vfprintf", int (*)(FILE *, const char *, va_list));
        return real(f, fmt, ap);
    }
    char buf[4096];
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, copy);
    va_end(copy);
    if (n < 0)
        return n;
    if ((size_t)n < sizeof buf) {
        add(buf, (size_t)n);
        return n;
    }
    char *big = NULL;
    n = vasprintf(&big, fmt, ap);
    if (n >= 0)
        add(big, (size_t)n);
    free(big);
    return n;
}

int vprintf(const char *fmt, va_list ap)
{
    return vfprintf(stdout, fmt, ap);
}

int fprintf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

int printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(stdout, fmt, ap);
    va_end(ap);
    return n;
}

int fputs(const char *s, FILE *f)
{
    if (!routed(f)) {
        static int (*real)(const char *, FILE *);
        if (!real)
            real = REAL("fputs", int (*)(const char *, FILE *));
        return real(s, f);
    }
    add(s, strlen(s));
    return 1;
}

int puts(const char *s)
{
    if (!routed(stdout)) {
        static int (*real)(const char *);
        if (!real)
            real = REAL("puts", int (*)(const char *));
        return real(s);
    }
    add(s, strlen(s));
    add("\n", 1);
    return 1;
}

int fputc(int ch, FILE *f)
{
    if (!routed(f)) {
        static int (*real)(int, FILE *);
        if (!real)
            real = REAL("fputc", int (*)(int, FILE *));
        return real(ch, f);
    }
    char b = (char)ch;
    add(&b, 1);
    return (unsigned char)ch;
}

size_t fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    if (!routed(f)) {
        static size_t (*real)(const void *, size_t, size_t, FILE *);
        if (!real)
            real = REAL("fwrite", size_t(*)(const void *, size_t, size_t, FILE *));
        return real(p, size, n, f);
    }
    add(p, size * n);
    return n;
}

int fflush(FILE *f)
{
    if (routed(f) || (!f && printf_client && printf_client->stdout_fd >= 0))
        srv_printf_flush(1);
    static int (*real)(FILE *);
    if (!real)
        real = REAL("fflush", int (*)(FILE *));
    return real(f);
}
