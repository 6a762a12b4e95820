/* The trace's output (docs/trace.md): where its lines go (stderr, or CUMUX_TRACE_FILE), one write(2) each,
 * and the time and thread that begin each. trace.c and tables.c write through it. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "trace/trace.h"

static int tr_fd = STDERR_FILENO;
static struct timespec tr_start;
static __thread int tr_tid_cache;

void tr_output_open(void)
{
    clock_gettime(CLOCK_MONOTONIC, &tr_start);
    const char *file = getenv("CUMUX_TRACE_FILE");
    if (file && *file) {
        int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            /* Far from the low descriptors a program manages itself. */
            int high = fcntl(fd, F_DUPFD_CLOEXEC, 200);
            if (high >= 0) {
                close(fd);
                fd = high;
            }
            tr_fd = fd;
        } else {
            dprintf(STDERR_FILENO, "cumux trace: cannot open %s (%s): tracing to stderr\n", file, strerror(errno));
        }
    }
}

bool tr_output_to_file(void)
{
    return tr_fd != STDERR_FILENO;
}

void tr_output_after_fork(void)
{
    tr_tid_cache = 0;
}

uint64_t tr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)(ts.tv_sec - tr_start.tv_sec) * 1000000000u + (uint64_t)ts.tv_nsec - (uint64_t)tr_start.tv_nsec;
}

int tr_tid(void)
{
    if (!tr_tid_cache)
        tr_tid_cache = (int)syscall(SYS_gettid);
    return tr_tid_cache;
}

/* One write(2) per line, so that lines of different threads and processes do not mix. */
void tr_write(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(tr_fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* "   12.345678 4711 ": seconds since start and thread id. */
int tr_prefix(char *buf, size_t size, uint64_t t)
{
    int n = snprintf(buf, size, "%5llu.%06llu %d ", (unsigned long long)(t / 1000000000u),
                     (unsigned long long)(t / 1000u % 1000000u), tr_tid());
    return n < 0 ? 0 : ((size_t)n >= size ? (int)size - 1 : n);
}
