#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_component = "cumux";
int cumux_debug_enabled;

void cumux_log_init(const char *component)
{
    log_component = component;
    const char *d = getenv("CUMUX_DEBUG");
    cumux_debug_enabled = d && *d && strcmp(d, "0") != 0;
}

static void vlog(const char *fmt, va_list ap)
{
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s[%d]: ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, log_component, (int)getpid());
    if (n < 0)
        return;
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = strlen(line);
    if (len == 0 || line[len - 1] != '\n')
        line[len++] = '\n';
    /* One write(2) per line so lines of concurrent threads and processes do not interleave. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void cumux_logf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void cumux_debugf(const char *fmt, ...)
{
    if (!cumux_debug_enabled)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}
