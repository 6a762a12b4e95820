/* The CLI across the network (issue 45's first use of the link, docs/remote.md): `cumux gateway` runs beside
 * cumuxd, as its user, and answers the CLI's requests from other machines, over TLS with a pre-shared key
 * (common/tls_link.c) and the link's frames (common/frame.c); a CLI with CUMUX_SERVER=host:port and
 * CUMUX_KEY_FILE sends its requests there instead of to the local pipe directory. A request is one HELLO
 * frame (u32 GPU, the hello, the group name where the hello is SET_GROUP), relayed to that GPU's worker on
 * the gateway's machine as its own local request (so the worker checks it as any: the gateway's user is
 * the server's); the answer one MSG frame (i32 status, then the text). Programs do not run across it yet.
 *   cumux gateway --listen [ADDR:]PORT --key FILE
 *   cumux keygen FILE [IDENTITY] */
#include "cli/cli.h"
#include "common/proto.h"

#ifndef CUMUX_HAVE_NET
/* Built without GnuTLS: nothing crosses the network, and each of these says so. */
#include <errno.h>
#include <stdio.h>
static int no_net(void)
{
    fprintf(stderr, "cumux: built without GnuTLS (libgnutls28-dev): no network link\n");
    return 1;
}
int cli_gateway(int argc, char **argv)
{
    (void)argc, (void)argv;
    return no_net();
}
int cli_keygen(int argc, char **argv)
{
    (void)argc, (void)argv;
    return no_net();
}
int cli_remote_ask(const char *server, int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len,
                   char **text, char *err, size_t errlen)
{
    (void)server, (void)gpu, (void)h, (void)extra, (void)extra_len;
    *text = NULL;
    snprintf(err, errlen, "CUMUX_SERVER: this cumux was built without GnuTLS (libgnutls28-dev)");
    errno = ENOTSUP;
    return -1;
}
#else
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/ask.h"
#include "common/frame.h"
#include "common/sock.h"
#include "common/proto.h"
#include "common/tls_link.h"

#define CLI_GATEWAY_MAX 256
#define REQ_MAX (4 + sizeof(struct cumux_hello) + sizeof(struct cumux_group_name))

struct one_frame {
    uint32_t kind, len;
    uint8_t data[REQ_MAX];
    uint8_t *big; /* an answer past REQ_MAX (a long status text) */
    int got;
};

static int take_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct one_frame *f = ctx;
    f->kind = kind, f->len = len;
    if (len <= sizeof f->data) {
        memcpy(f->data, p, len);
    } else if ((f->big = malloc(len))) {
        memcpy(f->big, p, len);
    }
    f->got = 1;
    return 1; /* one frame is all a request or an answer is */
}

/* One frame from the link into f (a payload past REQ_MAX only when big is allowed). 0, or -1. */
static int read_frame(struct cumux_tls *t, struct one_frame *f, int big_ok)
{
    struct cumux_frame_reader r;
    memset(&r, 0, sizeof r);
    memset(f, 0, sizeof *f);
    uint8_t buf[4096];
    int rc = -1;
    while (!f->got) {
        /* One byte at a time past the head would be slow; a frame's bytes past its end are none here
         * (one request, one answer a connection), so reading blocks of any size is safe. */
        ssize_t n = cumux_tls_recv(t, buf, sizeof buf);
        if (n <= 0 || cumux_frame_feed(&r, buf, (size_t)n, take_frame, f) < 0)
            break;
    }
    if (f->got && (f->len <= sizeof f->data || (big_ok && f->big)))
        rc = 0;
    cumux_frame_reader_free(&r);
    return rc;
}

void cli_link_long_lived(struct cumux_tls *t)
{
    /* A peer gone silent ends the link in about 30 s whether we were waiting (keepalive: 15 s idle, then 3
     * probes 5 s apart) or sending (data unacknowledged for 30 s), as a killed client ends. */
    int s = cumux_tls_fd(t), one = 1, idle = 15, intvl = 5, cnt = 3;
    unsigned user_timeout_ms = 30000;
    struct timeval none = {0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(s, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(s, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The gateway's side of one connection (a child process of its own). */
static int serve_one(int fd, const char *key_file)
{
    char err[256];
    struct cumux_tls *t = cumux_tls_server(fd, key_file, err, sizeof err);
    if (!t) {
        fprintf(stderr, "cumux gateway: a connection refused: %s\n", err);
        return 1;
    }
    struct one_frame f;
    int rc = 1;
    if (read_frame(t, &f, 0) == 0 && f.kind == CUMUX_FRAME_HELLO && f.len >= 4 + sizeof(struct cumux_hello)) {
        uint32_t gpu;
        struct cumux_hello h;
        memcpy(&gpu, f.data, 4);
        memcpy(&h, f.data + 4, sizeof h);
        size_t extra = f.len - 4 - sizeof h;
        /* Only what a CLI asks; programs' hellos (a channel, descriptors) cannot cross this. */
        bool cli_kind = h.kind == CUMUX_HELLO_STATUS || h.kind == CUMUX_HELLO_KILL || h.kind == CUMUX_HELLO_SET_MEMORY ||
                        h.kind == CUMUX_HELLO_SET_DEFAULT_MEMORY || h.kind == CUMUX_HELLO_SET_PRIORITY ||
                        h.kind == CUMUX_HELLO_SET_DEFAULT_PRIORITY || h.kind == CUMUX_HELLO_SET_SMS ||
                        h.kind == CUMUX_HELLO_SET_DEFAULT_THREADS || h.kind == CUMUX_HELLO_RELOAD ||
                        h.kind == CUMUX_HELLO_SET_GROUP;
        if (h.kind == CUMUX_HELLO_CLIENT && gpu < CUMUX_MAX_DEVICES && extra == 0) {
            /* A program's channel, through a relay (cli/gateway_program.c): long-lived, so no timeout on
             * reads; a peer gone silent is found by TCP's keepalive. */
            cli_link_long_lived(t);
            rc = cli_gateway_program(t, gpu, &h);
            cumux_tls_close(t);
            return rc;
        }
        int32_t st = -1;
        char *text = NULL;
        if (gpu < CUMUX_MAX_DEVICES && cli_kind &&
            extra == (h.kind == CUMUX_HELLO_SET_GROUP ? sizeof(struct cumux_group_name) : 0)) {
            st = cumux_ask_extra((int)gpu, &h, extra ? f.data + 4 + sizeof h : NULL, extra, 10000, &text, err, sizeof err);
            if (st < 0 && !text && (text = malloc(300)))
                snprintf(text, 300, "the gateway's cumuxd did not answer: %s\n", err[0] ? err : strerror(errno));
        } else if ((text = malloc(80))) {
            snprintf(text, 80, "not a request the gateway relays\n");
        }
        rc = cumux_tls_send_frame(t, CUMUX_FRAME_MSG, &st, sizeof st, text, text ? strlen(text) : 0) == 0 ? 0 : 1;
        free(text);
    }
    cumux_tls_close(t);
    return rc;
}

static int parse_listen(const char *spec, struct sockaddr_in *sa)
{
    char addr[64] = "0.0.0.0";
    const char *colon = strrchr(spec, ':'), *port = spec;
    if (colon) {
        if ((size_t)(colon - spec) >= sizeof addr)
            return -1;
        memcpy(addr, spec, (size_t)(colon - spec));
        addr[colon - spec] = 0;
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)p);
    return *end || p < 1 || p > 65535 || inet_pton(AF_INET, addr, &sa->sin_addr) != 1 ? -1 : 0;
}

int cli_gateway(int argc, char **argv)
{
    const char *listen_at = NULL, *key = NULL;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--listen"))
            listen_at = argv[i + 1];
        else if (!strcmp(argv[i], "--key"))
            key = argv[i + 1];
    struct sockaddr_in sa;
    if (!listen_at || !key || argc != 5 || parse_listen(listen_at, &sa) < 0) {
        fprintf(stderr, "usage: cumux gateway --listen [ADDR:]PORT --key FILE   (the CLI's requests from other\n"
                        "  machines, over TLS with the key file's pre-shared key: cumux keygen makes one)\n");
        return 2;
    }
    FILE *kf = fopen(key, "re"); /* its form and mode are checked at each handshake (common/tls_link.c) */
    if (!kf) {
        fprintf(stderr, "cumux gateway: %s: %s\n", key, strerror(errno));
        return 1;
    }
    fclose(kf);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 64) < 0) {
        fprintf(stderr, "cumux gateway: cannot listen on %s: %s\n", listen_at, strerror(errno));
        return 1;
    }
    int children = 0; /* connections being served: at most CLI_GATEWAY_MAX at once (a CLI request's handshake,
                       * request and answer are bounded by timeouts; a program's lasts as long as it does), so that
                       * no one can fork the gateway without end: past it, connections wait for one to end */
    printf("cumux gateway: listening on %s for the cumuxd of %s\n", listen_at, cumux_pipe_directory());
    fflush(stdout);
    for (;;) {
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        while (children > 0 && waitpid(-1, NULL, WNOHANG) > 0)
            children--;
        if (fd >= 0 && children >= CLI_GATEWAY_MAX) {
            while (children >= CLI_GATEWAY_MAX && waitpid(-1, NULL, 0) > 0)
                children--;
        }
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "cumux gateway: accept: %s\n", strerror(errno));
            return 1;
        }
        pid_t p = fork();
        if (p == 0) {
            close(ls);
            struct timeval tv = {.tv_sec = 30};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            _exit(serve_one(fd, key));
        }
        if (p > 0)
            children++;
        close(fd);
    }
}

/* A TLS link to the gateway at server (host:port) with key file key: the link, or NULL (errno, err). */
struct cumux_tls *cli_remote_connect(const char *server, const char *key, int timeout_s, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(server, ':');
    if (!key || !*key || !colon || (size_t)(colon - server) >= sizeof host || colon == server) {
        snprintf(err, errlen, "CUMUX_SERVER=%s: wants host:port, and CUMUX_KEY_FILE the server's key file", server);
        errno = EINVAL;
        return NULL;
    }
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "%s: %s", server, gai_strerror(gai));
        errno = EHOSTUNREACH;
        return NULL;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
        struct timeval tv = {.tv_sec = timeout_s};
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        }
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", server, strerror(errno));
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* one-way messages go at once, batched by us */
    struct cumux_tls *t = cumux_tls_client(fd, key, err, errlen);
    if (!t)
        errno = EACCES;
    return t;
}

/* CUMUX_SERVER's side: a request to GPU gpu's worker there. As cumux_ask_extra: the status, -1 (errno, err). */
int cli_remote_ask(const char *server, int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len,
                   char **text, char *err, size_t errlen)
{
    *text = NULL;
    struct cumux_tls *t = cli_remote_connect(server, getenv("CUMUX_KEY_FILE"), 10, err, errlen);
    if (!t)
        return -1;
    uint8_t req[REQ_MAX];
    uint32_t g = (uint32_t)gpu;
    memcpy(req, &g, 4);
    memcpy(req + 4, h, sizeof *h);
    if (extra_len > sizeof(struct cumux_group_name))
        extra_len = 0;
    if (extra_len)
        memcpy(req + 4 + sizeof *h, extra, extra_len);
    struct one_frame f;
    int32_t st = -1;
    if (cumux_tls_send_frame(t, CUMUX_FRAME_HELLO, req, 4 + sizeof *h + extra_len, NULL, 0) == 0 && read_frame(t, &f, 1) == 0 &&
        f.kind == CUMUX_FRAME_MSG && f.len >= sizeof st) {
        const uint8_t *p = f.big ? f.big : f.data;
        memcpy(&st, p, sizeof st);
        if ((*text = malloc(f.len - sizeof st + 1))) {
            memcpy(*text, p + sizeof st, f.len - sizeof st);
            (*text)[f.len - sizeof st] = 0;
        }
        if (st < 0)
            errno = EHOSTDOWN;
    } else {
        snprintf(err, errlen, "%s: the gateway gave no answer", server);
        errno = ECONNRESET;
    }
    free(f.big);
    cumux_tls_close(t);
    return st;
}

int cli_keygen(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: cumux keygen FILE [IDENTITY]   (a new key file, mode 0600, for cumux gateway and\n"
                        "  CUMUX_KEY_FILE; IDENTITY: letters, digits and ._-, default cumux)\n");
        return 2;
    }
    if (cumux_tls_make_key(argv[1], argc == 3 ? argv[2] : "cumux") < 0) {
        fprintf(stderr, "cumux keygen: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    return 0;
}
#endif
