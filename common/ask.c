/* cumux_ask (common/ask.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/ask.h"
#include "common/sock.h"

static int ask_open(int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len, int timeout_ms,
                    struct cumux_welcome *w, int *fd, char *err, size_t errlen)
{
    if (fd)
        *fd = -1;
    char path[256];
    if (cumux_gpu_socket_path(gpu, path, sizeof path) < 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int s = cumux_connect_checked(path, err, errlen);
    if (s < 0)
        return -1;
    if (timeout_ms > 0) {
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (cumux_sock_send(s, h, sizeof *h, -1) < 0 || (extra_len && cumux_sock_send(s, extra, extra_len, -1) < 0) ||
        cumux_sock_recv(s, w, sizeof *w, fd) < 0) {
        int e = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
        if (fd && *fd >= 0)
            close(*fd), *fd = -1;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}

int cumux_ask_open(int gpu, const struct cumux_hello *h, int timeout_ms, struct cumux_welcome *w, int *fd, char *err,
                   size_t errlen)
{
    return ask_open(gpu, h, NULL, 0, timeout_ms, w, fd, err, errlen);
}

int cumux_ask(int gpu, const struct cumux_hello *h, int timeout_ms, char **text, char *err, size_t errlen)
{
    return cumux_ask_extra(gpu, h, NULL, 0, timeout_ms, text, err, errlen);
}

int cumux_ask_extra(int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len, int timeout_ms,
                    char **text, char *err, size_t errlen)
{
    if (text)
        *text = NULL;
    struct cumux_welcome w;
    int s = ask_open(gpu, h, extra, extra_len, timeout_ms, &w, NULL, err, errlen);
    if (s < 0)
        return -1;
    if (w.text_len > 0 && w.text_len < (1u << 24)) {
        char *t = malloc(w.text_len + 1);
        if (t && cumux_sock_recv(s, t, w.text_len, NULL) == 0) {
            t[w.text_len] = 0;
            if (text) {
                *text = t;
                t = NULL;
            }
        }
        free(t);
    }
    close(s);
    return w.status;
}
