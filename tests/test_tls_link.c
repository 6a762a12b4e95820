/* The network link's framing and TLS (common/frame.c, common/tls_link.c; issue 45).
 *   test_tls_link            the unit cases: frames read in pieces of every size, malformed heads refused,
 *                            TLS over a socket pair: the right key carries frames both ways (up to the
 *                            largest), a wrong key, a wrong identity, a key file others may read and a
 *                            peer speaking no TLS are all refused
 *   test_tls_link serve PORT KEY_FILE         one connection on PORT: echoes every frame back
 *   test_tls_link connect HOST PORT KEY_FILE  frames to it, checked as they come back; "PASS link"
 *   test_tls_link throughput MIB              MIB MiB one way over TCP loopback: GB/s */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/tls_link.h"
#include "tests/check.h"


struct seen {
    unsigned n;
    uint32_t kinds[16], lens[16];
    uint64_t sums[16];
};

static int on_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct seen *s = ctx;
    if (s->n < 16) {
        uint64_t sum = 0;
        for (uint32_t i = 0; i < len; i++)
            sum = sum * 31 + p[i];
        s->kinds[s->n] = kind, s->lens[s->n] = len, s->sums[s->n] = sum;
    }
    s->n++;
    return 0;
}

static uint64_t sum_of(const uint8_t *p, size_t len)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < len; i++)
        sum = sum * 31 + p[i];
    return sum;
}

static void frames_in_pieces(void)
{
    uint8_t stream[3 * CUMUX_FRAME_HEAD + 5 + 0 + 300];
    size_t at = 0;
    uint8_t payload[300];
    for (int i = 0; i < 300; i++)
        payload[i] = (uint8_t)(i * 7);
    cumux_frame_head(stream + at, CUMUX_FRAME_HELLO, 5);
    memcpy(stream + at + CUMUX_FRAME_HEAD, "hello", 5);
    at += CUMUX_FRAME_HEAD + 5;
    cumux_frame_head(stream + at, CUMUX_FRAME_BYE, 0);
    at += CUMUX_FRAME_HEAD;
    cumux_frame_head(stream + at, CUMUX_FRAME_DATA, 300);
    memcpy(stream + at + CUMUX_FRAME_HEAD, payload, 300);
    at += CUMUX_FRAME_HEAD + 300;
    for (size_t piece = 1; piece <= at; piece++) {
        struct cumux_frame_reader r;
        memset(&r, 0, sizeof r);
        struct seen s = {0};
        for (size_t off = 0; off < at; off += piece) {
            size_t n = at - off < piece ? at - off : piece;
            CHECK(cumux_frame_feed(&r, stream + off, n, on_frame, &s) == (ssize_t)n, "piece %zu at %zu", piece, off);
        }
        CHECK(s.n == 3 && s.kinds[0] == CUMUX_FRAME_HELLO && s.lens[0] == 5 && s.sums[0] == sum_of((const uint8_t *)"hello", 5) &&
                  s.kinds[1] == CUMUX_FRAME_BYE && s.lens[1] == 0 && s.kinds[2] == CUMUX_FRAME_DATA && s.lens[2] == 300 &&
                  s.sums[2] == sum_of(payload, 300),
              "pieces of %zu: %u frames", piece, s.n);
        cumux_frame_reader_free(&r);
    }
    /* Malformed heads: the link is broken from there on. */
    const uint32_t bad[][2] = {{0, 5}, {CUMUX_FRAME_KINDS, 5}, {0xffffffffu, 0}, {CUMUX_FRAME_MSG, CUMUX_FRAME_MAX + 1},
                               {CUMUX_FRAME_MSG, 0xffffffffu}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct cumux_frame_reader r;
        memset(&r, 0, sizeof r);
        struct seen s = {0};
        uint8_t h[CUMUX_FRAME_HEAD];
        cumux_frame_head(h, bad[i][0], bad[i][1]);
        CHECK(cumux_frame_feed(&r, h, sizeof h, on_frame, &s) == -1 && s.n == 0, "kind %u length %u taken", bad[i][0], bad[i][1]);
        cumux_frame_head(h, CUMUX_FRAME_BYE, 0);
        CHECK(cumux_frame_feed(&r, h, sizeof h, on_frame, &s) == -1 && s.n == 0, "a frame taken after a malformed head");
        cumux_frame_reader_free(&r);
    }
    printf("ok: frames read in pieces of 1 to %zu bytes; 5 malformed heads refused\n", at);
}

static int send_frame(struct cumux_tls *t, uint32_t kind, const uint8_t *p, uint32_t len)
{
    return cumux_tls_send_frame(t, kind, p, len, NULL, 0);
}

struct echo {
    struct cumux_tls *t;
    int failed, bye;
};

static int echo_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct echo *e = ctx;
    if (send_frame(e->t, kind, p, len) != 0)
        e->failed = 1;
    e->bye |= kind == CUMUX_FRAME_BYE;
    return e->failed || e->bye;
}

/* The server side: every frame back until BYE. 0 when all went. */
static int serve(struct cumux_tls *t)
{
    struct cumux_frame_reader r;
    memset(&r, 0, sizeof r);
    struct echo e = {t, 0, 0};
    static uint8_t buf[1 << 16];
    while (!e.bye && !e.failed) {
        ssize_t n = cumux_tls_recv(t, buf, sizeof buf);
        if (n <= 0 || cumux_frame_feed(&r, buf, (size_t)n, echo_frame, &e) < 0)
            e.failed = 1;
    }
    cumux_frame_reader_free(&r);
    return e.failed;
}

/* The client side: frames of 0, 5, 1 MiB and CUMUX_FRAME_MAX bytes and a BYE, each checked back. */
static int talk(struct cumux_tls *t)
{
    uint8_t *big = malloc(CUMUX_FRAME_MAX);
    if (!big)
        return 1;
    for (uint32_t i = 0; i < CUMUX_FRAME_MAX; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 24);
    const uint32_t lens[] = {0, 5, 1u << 20, CUMUX_FRAME_MAX, 0};
    const uint32_t kinds[] = {CUMUX_FRAME_HELLO, CUMUX_FRAME_MSG, CUMUX_FRAME_DATA, CUMUX_FRAME_DATA, CUMUX_FRAME_BYE};
    int bad = 0;
    struct cumux_frame_reader r;
    memset(&r, 0, sizeof r);
    struct seen s = {0};
    static uint8_t buf[1 << 16];
    /* One at a time, each back before the next (the echo would block on a full socket otherwise). */
    for (unsigned i = 0; i < 5 && !bad; i++) {
        bad = send_frame(t, kinds[i], big, lens[i]);
        while (!bad && s.n < i + 1) {
            ssize_t n = cumux_tls_recv(t, buf, sizeof buf);
            if (n <= 0 || cumux_frame_feed(&r, buf, (size_t)n, on_frame, &s) < 0)
                bad = 1;
        }
    }
    for (int i = 0; !bad && i < 5; i++)
        if (s.kinds[i] != kinds[i] || s.lens[i] != lens[i] || s.sums[i] != sum_of(big, lens[i]))
            bad = 1;
    cumux_frame_reader_free(&r);
    free(big);
    return bad;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* A handshake over a socket pair with these key files (NULL server: a peer writing no TLS). */
static void pair(const char *client_key, const char *server_key, bool want_ok, const char *what)
{
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pid_t p = fork();
    if (p == 0) {
        close(sv[0]);
        if (!server_key) {
            const char junk[] = "GET / HTTP/1.0\r\n\r\n";
            ssize_t w = write(sv[1], junk, sizeof junk - 1);
            (void)w;
            sleep(1);
            _exit(0);
        }
        char err[256];
        struct cumux_tls *t = cumux_tls_server(sv[1], server_key, err, sizeof err);
        int rc = t ? serve(t) : 2;
        cumux_tls_close(t);
        _exit(rc);
    }
    close(sv[1]);
    char err[256] = "";
    struct cumux_tls *t = cumux_tls_client(sv[0], client_key, err, sizeof err);
    int talked = t ? talk(t) : 2;
    if (t)
        cumux_tls_close(t);
    else
        close(sv[0]);
    int st = 0;
    waitpid(p, &st, 0);
    bool ok = talked == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    CHECK(ok == want_ok, "%s: client %d (%s), server exit %d", what, talked, err, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    if (ok == want_ok)
        printf("ok: %s%s%s\n", what, err[0] ? ": " : "", err);
}

static int units(void)
{
    frames_in_pieces();
    char dir[] = "/tmp/cumux-tls-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char a[64], b[64], c[64], d[64];
    snprintf(a, sizeof a, "%s/a.key", dir);
    snprintf(b, sizeof b, "%s/b.key", dir);
    snprintf(c, sizeof c, "%s/c.key", dir);
    snprintf(d, sizeof d, "%s/d.key", dir);
    CHECK(cumux_tls_make_key(a, "site-1") == 0, "make a key");
    CHECK(cumux_tls_make_key(a, "site-1") == -1, "a key file made over another");
    CHECK(cumux_tls_make_key(b, "site-1") == 0, "make a second key");
    FILE *f = fopen(a, "r");
    char line[200] = "";
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
    }
    char other_id[220];
    snprintf(other_id, sizeof other_id, "site-2%s", strchr(line, ' ') ? strchr(line, ' ') : " x\n");
    write_file(c, other_id, 0600);
    write_file(d, line, 0644);
    pair(a, a, true, "the right key: frames of 0 bytes to 16 MiB both ways");
    pair(b, a, false, "a wrong key refused");
    pair(c, a, false, "a wrong identity refused");
    pair(d, a, false, "a key file others may read refused");
    pair(a, NULL, false, "a peer speaking no TLS refused");
    unlink(a), unlink(b), unlink(c), unlink(d);
    rmdir(dir);
    if (failures)
        return 1;
    printf("PASS tls_link\n");
    return 0;
}

/* What one link carries one way over TCP loopback: MIB MiB in frames of 8 MiB, read back in pieces of
 * 64 KiB as the relay and the gateway read (docs/remote.md: what bounds copies across the network). */
static int drain_frames(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    (void)kind, (void)p;
    *(uint64_t *)ctx += len;
    return 0;
}

static int throughput(uint64_t mib)
{
    char dir[] = "/tmp/tls-throughput-XXXXXX", key[64], err[256];
    if (!mkdtemp(dir) || snprintf(key, sizeof key, "%s/key", dir) >= (int)sizeof key ||
        cumux_tls_make_key(key, "bench") != 0)
        return 2;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) < 0)
        return 2;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = accept(ls, NULL, NULL);
        struct cumux_tls *t = fd >= 0 ? cumux_tls_server(fd, key, err, sizeof err) : NULL;
        struct cumux_frame_reader r;
        memset(&r, 0, sizeof r);
        static uint8_t buf[1 << 16];
        uint64_t got = 0;
        ssize_t n;
        while (t && got < mib << 20 && (n = cumux_tls_recv(t, buf, sizeof buf)) > 0 &&
               cumux_frame_feed(&r, buf, (size_t)n, drain_frames, &got) == n)
            ;
        _exit(got == mib << 20 ? 0 : 1);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return 2;
    struct cumux_tls *t = cumux_tls_client(fd, key, err, sizeof err);
    if (!t)
        return 2;
    static uint8_t chunk[8 << 20];
    memset(chunk, 0x5a, sizeof chunk);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t sent = 0; sent < mib << 20; sent += sizeof chunk)
        if (cumux_tls_send_frame(t, CUMUX_FRAME_MSG, chunk, sizeof chunk, NULL, 0) < 0)
            return 1;
    int st = 0;
    waitpid(pid, &st, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cumux_tls_close(t);
    unlink(key), rmdir(dir);
    printf("tls_throughput_gbs=%.2f mib=%llu seconds=%.3f\n", (double)(mib << 20) / s / 1e9, (unsigned long long)mib, s);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 1)
        return units();
    char err[256];
    if (argc == 4 && !strcmp(argv[1], "serve")) {
        int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
        if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 1) < 0) {
            perror("bind");
            return 2;
        }
        printf("listening\n");
        fflush(stdout);
        int fd = accept(ls, NULL, NULL);
        struct cumux_tls *t = fd >= 0 ? cumux_tls_server(fd, argv[3], err, sizeof err) : NULL;
        if (!t) {
            printf("refused: %s\n", err);
            return 1;
        }
        int rc = serve(t);
        cumux_tls_close(t);
        printf(rc ? "FAIL serve\n" : "served\n");
        return rc;
    }
    if (argc == 5 && !strcmp(argv[1], "connect")) {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
        if (getaddrinfo(argv[2], argv[3], &hints, &ai) != 0)
            return 2;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            perror("connect");
            return 2;
        }
        freeaddrinfo(ai);
        struct cumux_tls *t = cumux_tls_client(fd, argv[4], err, sizeof err);
        if (!t) {
            printf("refused: %s\n", err);
            return 1;
        }
        int rc = talk(t);
        cumux_tls_close(t);
        printf(rc ? "FAIL link\n" : "PASS link\n");
        return rc;
    }
    if (argc == 3 && !strcmp(argv[1], "throughput"))
        return throughput(strtoull(argv[2], NULL, 10));
    fprintf(stderr, "usage: test_tls_link | serve PORT KEY_FILE | connect HOST PORT KEY_FILE | throughput MIB\n");
    return 2;
}
