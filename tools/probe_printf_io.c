/* How does the driver write device printf output? An LD_PRELOAD interposer that notes every stdio and
 * write call carrying "devprintf" (the marker tests/runtime/printf.cu prints): the function, the fd or
 * stream, the thread. Run on a GPU:
 *   gcc -O2 -shared -fPIC tools/probe_printf_io.c -o /tmp/pio.so -ldl
 *   LD_PRELOAD=/tmp/pio.so build/tests/runtime/rt_printf_static */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static void note(const char *fn, long where, const char *buf, size_t n)
{
    if (!buf || !memmem(buf, n, "devprintf", 9))
        return;
    char line[256];
    int k = snprintf(line, sizeof line, "[pio] %s(%ld) tid %ld len %zu: %.40s\n", fn, where, (long)syscall(SYS_gettid), n, buf);
    syscall(SYS_write, 2, line, (size_t)k);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    note("write", fd, buf, n);
    return real(fd, buf, n);
}

size_t fwrite(const void *p, size_t s, size_t n, FILE *f)
{
    static size_t (*real)(const void *, size_t, size_t, FILE *);
    if (!real)
        real = (size_t(*)(const void *, size_t, size_t, FILE *))dlsym(RTLD_NEXT, "fwrite");
    note("fwrite", f == stdout ? 1 : f == stderr ? 2 : -1, p, s * n);
    return real(p, s, n, f);
}

int vfprintf(FILE *f, const char *fmt, va_list ap)
{
    char buf[4096];
    va_list c;
    va_copy(c, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, c);
    va_end(c);
    note("vfprintf", f == stdout ? 1 : f == stderr ? 2 : -1, buf, n > 0 ? (size_t)n : 0);
    note("vfprintf-fmt", 0, fmt, strlen(fmt));
    return fputs(buf, f) >= 0 ? n : -1;
}

int fprintf(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

int fputs(const char *s, FILE *f)
{
    static int (*real)(const char *, FILE *);
    if (!real)
        real = (int (*)(const char *, FILE *))dlsym(RTLD_NEXT, "fputs");
    note("fputs", f == stdout ? 1 : f == stderr ? 2 : -1, s, strlen(s));
    return real(s, f);
}

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
    (void)flag;
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

int __vfprintf_chk(FILE *f, int flag, const char *fmt, va_list ap)
{
    (void)flag;
    return vfprintf(f, fmt, ap);
}
