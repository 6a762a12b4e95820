#include "common/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

const char *cumux_pipe_directory(void)
{
    const char *d = getenv("CUMUX_PIPE_DIRECTORY");
    return d && *d ? d : CUMUX_DEFAULT_PIPE_DIRECTORY;
}

int cumux_socket_path(char *buf, size_t len)
{
    struct sockaddr_un sa;
    int n = snprintf(buf, len, "%s/%s", cumux_pipe_directory(), CUMUX_SOCKET_NAME);
    if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof sa.sun_path)
        return -1;
    return 0;
}

static int fill_addr(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(sa->sun_path, path);
    return 0;
}

int cumux_sock_connect(const char *path)
{
    struct sockaddr_un sa;
    if (fill_addr(&sa, path) < 0)
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

int cumux_sock_listen(const char *path, int backlog)
{
    struct sockaddr_un sa;
    if (fill_addr(&sa, path) < 0)
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    unlink(path);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, backlog) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

int cumux_sock_send(int sock, const void *buf, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)n;
        iov.iov_base = (char *)buf + done;
        iov.iov_len = len - done;
        msg.msg_control = NULL; /* the descriptor goes with the first byte only */
        msg.msg_controllen = 0;
    }
    return 0;
}

int cumux_sock_recv(int sock, void *buf, size_t len, int *fd)
{
    if (fd)
        *fd = -1;
    size_t done = 0;
    while (done < len) {
        struct iovec iov = {.iov_base = (char *)buf + done, .iov_len = len - done};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                int fds[8];
                if (nfd > 8)
                    nfd = 8;
                memcpy(fds, CMSG_DATA(c), (size_t)nfd * sizeof(int));
                for (int i = 0; i < nfd; i++) {
                    /* Keep the first descriptor if the caller wants one; never leak extras. */
                    if (fd && *fd < 0)
                        *fd = fds[i];
                    else
                        close(fds[i]);
                }
            }
        }
        done += (size_t)n;
    }
    return 0;
}
