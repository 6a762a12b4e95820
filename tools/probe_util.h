/* What the probes share: a monotonic clock in milliseconds, a CUresult's name, a call that must succeed. */
#ifndef CUMUX_PROBE_UTIL_H
#define CUMUX_PROBE_UTIL_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline const char *ename(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

/* A driver call that must succeed: else the line, the call and its error, and the probe ends. */
#define CK(x)                                                                                          \
    do {                                                                                               \
        CUresult r_ = (x);                                                                             \
        if (r_) {                                                                                      \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #x, ename(r_));                               \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

/* Device 0's primary context, made current, where most probes run; *dev gets the device. */
static inline CUcontext probe_primary_context(CUdevice *dev)
{
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
    CK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* A whole file (a fatbin, say) in memory, NUL-terminated; the probe ends if it cannot be read. */
static inline char *probe_read_file(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", p);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        printf("FAIL cannot read %s\n", p);
        exit(1);
    }
    b[n] = 0;
    fclose(f);
    return b;
}

/* Descriptor passing between a probe's processes (those that include <sys/socket.h> first, with
 * _GNU_SOURCE): a message with a descriptor (fd >= 0) or without. */
#ifdef SCM_RIGHTS
#include <string.h>
static inline void probe_send_fd(int sock, int fd, const void *data, size_t len)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec io = {.iov_base = (void *)data, .iov_len = len};
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(cbuf, 0, sizeof cbuf);
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof cbuf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    if (sendmsg(sock, &msg, 0) < 0)
        perror("sendmsg");
}

/* A message of exactly len bytes and the descriptor that came with it: -1 none, -2 the peer is gone. */
static inline int probe_recv_fd(int sock, void *data, size_t len)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec io = {.iov_base = data, .iov_len = len};
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)len)
        return -2;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}
#endif

#endif
