#include "common/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

int cumux_gpu_socket_name(int gpu, char *buf, size_t len)
{
    int n = gpu == 0 ? snprintf(buf, len, "%s", CUMUX_SOCKET_NAME) : snprintf(buf, len, "cumuxd-gpu%d.sock", gpu);
    return gpu < 0 || n < 0 || (size_t)n >= len ? -1 : 0;
}

int cumux_gpu_pid_name(int gpu, char *buf, size_t len)
{
    int n = gpu == 0 ? snprintf(buf, len, "cumuxd-gpu.pid") : snprintf(buf, len, "cumuxd-gpu%d.pid", gpu);
    return gpu < 0 || n < 0 || (size_t)n >= len ? -1 : 0;
}

int cumux_gpu_socket_path(int gpu, char *buf, size_t len)
{
    char name[64];
    struct sockaddr_un sa;
    if (cumux_gpu_socket_name(gpu, name, sizeof name) < 0)
        return -1;
    int n = snprintf(buf, len, "%s/%s", cumux_pipe_directory(), name);
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

static int send_with(int sock, const void *buf, size_t len, int fd, int flags)
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
        ssize_t n = sendmsg(sock, &msg, flags);
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

int cumux_sock_send(int sock, const void *buf, size_t len, int fd)
{
    return send_with(sock, buf, len, fd, MSG_NOSIGNAL);
}

int cumux_sock_send_now(int sock, const void *buf, size_t len, int fd)
{
    return send_with(sock, buf, len, fd, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The descriptors that came with a message: the first into *fd if the caller wants one and has none yet;
 * never leak the others. */
static void take_fds(struct msghdr *msg, int *fd)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int fds[8];
            if (nfd > 8)
                nfd = 8;
            memcpy(fds, CMSG_DATA(c), (size_t)nfd * sizeof(int));
            for (int i = 0; i < nfd; i++) {
                if (fd && *fd < 0)
                    *fd = fds[i];
                else
                    close(fds[i]);
            }
        }
    }
}

ssize_t cumux_sock_recv_some(int sock, void *buf, size_t len, int *fd)
{
    for (;;) {
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        union {
            char buf[CMSG_SPACE(8 * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n >= 0)
            take_fds(&msg, fd);
        return n;
    }
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
        take_fds(&msg, fd);
        done += (size_t)n;
    }
    return 0;
}

int cumux_check_pipe_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    uid_t me = geteuid();
    if (lstat(dir, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "pipe directory %s: %s", dir, strerror(e));
        errno = e;
        return -1;
    }
    const char *why = NULL;
    if (S_ISLNK(st.st_mode))
        why = "is a symbolic link";
    else if (!S_ISDIR(st.st_mode))
        why = "is not a directory";
    else if (st.st_uid != me && st.st_uid != 0)
        why = "belongs to another user";
    else if (st.st_mode & 022)
        why = "is writable by others";
    if (why) {
        snprintf(err, errlen, "the pipe directory %s %s (uid %u, mode %04o); cumuxd keeps it owned by its user "
                 "(uid %u or root) and mode 0700", dir, why, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                 (unsigned)me);
        errno = EPERM;
        return -1;
    }
    return 0;
}

int cumux_check_peer(int sock, const char *path, char *err, size_t errlen)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot learn who listens (SO_PEERCRED): %s", path, strerror(e));
        errno = e;
        return -1;
    }
    if (cred.uid != geteuid() && cred.uid != 0) {
        snprintf(err, errlen, "%s is held by a process of uid %u (pid %d), not by cumuxd of uid %u or root; "
                 "nothing was sent to it", path, (unsigned)cred.uid, (int)cred.pid, (unsigned)geteuid());
        errno = EPERM;
        return -1;
    }
    return 0;
}

int cumux_connect_checked(const char *path, char *err, size_t errlen)
{
    char dir[sizeof ((struct sockaddr_un *)0)->sun_path];
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    if (dl >= sizeof dir) {
        snprintf(err, errlen, "%s: path too long", path);
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, path, dl);
    dir[dl] = 0;
    if (dl && cumux_check_pipe_dir(dir, err, errlen) < 0)
        return -1;
    int s = cumux_sock_connect(path);
    if (s < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    if (cumux_check_peer(s, path, err, errlen) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}
