/* A client that speaks the wire protocol by hand, as a hostile program would: the tests that attack
 * cumuxd (test_malformed.c, test_hostile.c) build their messages with these. Needs CUMUX_PIPE_DIRECTORY
 * naming the server's pipe directory. Header-only: each test has its own check counters (test_util.h). */
#ifndef CUMUX_TEST_RAW_CLIENT_H
#define CUMUX_TEST_RAW_CLIENT_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/sock.h"
#include "test_util.h"

/* The 8-byte body of the ops that name one handle (STREAM_SYNC, EVENT_QUERY, CTX_DESTROY...) or a device
 * (ARCH_DATA): the handle, then flags, an index or padding. */
struct handle_body {
    uint32_t handle;
    uint32_t flags;
};
_Static_assert(sizeof(struct handle_body) == sizeof(struct cumux_stream_sync) &&
                   sizeof(struct handle_body) == sizeof(struct cumux_function_names_query) &&
                   sizeof(struct handle_body) == sizeof(struct cumux_arch_data_query),
               "the one-handle bodies");

/* MODULE_GET_FUNCTION / _GLOBAL of a short name: the body, then the name as its payload. */
struct symbol_msg {
    struct cumux_module_symbol m;
    char name[16];
};
#define SYMBOL_MSG(mod, str) ((struct symbol_msg){.m = {.module = (mod)}, .name = str})

struct conn {
    int sock;
    struct cumux_shm *shm;
    uint32_t id;
};

/* A client's hello of `kind` (CLIENT, or RESUME with `token`), and its channel. */
static inline void conn_open_as(struct conn *c, uint32_t kind, uint64_t token)
{
    char path[256];
    REQUIRE(cumux_socket_path(path, sizeof path) == 0, "socket path");
    c->sock = cumux_sock_connect(path);
    REQUIRE(c->sock >= 0, "connect %s: %s", path, strerror(errno));
    struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = kind, .token = token};
    struct cumux_welcome w;
    int fd = -1;
    REQUIRE(cumux_sock_send(c->sock, &h, sizeof h, -1) == 0, "send hello: %s", strerror(errno));
    REQUIRE(cumux_sock_recv(c->sock, &w, sizeof w, &fd) == 0, "receive welcome: %s", strerror(errno));
    REQUIRE(w.magic == CUMUX_MAGIC && w.version == CUMUX_PROTO_VERSION && w.status == 0, "welcome: status %d",
            w.status);
    REQUIRE(fd >= 0 && w.shm_size == sizeof(struct cumux_shm), "welcome: fd %d, shm_size %llu", fd,
            (unsigned long long)w.shm_size);
    c->shm = mmap(NULL, sizeof(struct cumux_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(c->shm != MAP_FAILED, "mmap the channel: %s", strerror(errno));
    REQUIRE(close(fd) == 0, "close shm fd");
    REQUIRE(c->shm->magic == CUMUX_MAGIC && c->shm->version == CUMUX_PROTO_VERSION &&
                c->shm->size == sizeof(struct cumux_shm),
            "channel header");
    c->id = w.client_id;
}

static inline void conn_open(struct conn *c)
{
    conn_open_as(c, CUMUX_HELLO_CLIENT, 0);
}

static inline void conn_close(struct conn *c)
{
    REQUIRE(munmap(c->shm, sizeof(struct cumux_shm)) == 0, "munmap");
    REQUIRE(close(c->sock) == 0, "close");
    c->shm = NULL;
    c->sock = -1;
}

/* Wake the server's worker as cumux_ring_commit would, whatever head now says. */
static inline void doorbell(struct conn *c)
{
    atomic_fetch_add(&c->shm->doorbell, 1);
    cumux_futex_wake(&c->shm->doorbell, 1);
}

/* Write a message whose header says hdr_size but which moves head by `advance` bytes. */
static inline void put_raw(struct conn *c, uint16_t op, uint16_t reply, uint32_t hdr_size, const void *body, size_t body_len,
                    uint32_t advance)
{
    uint8_t *p = cumux_ring_reserve(c->shm, advance);
    REQUIRE(p != NULL, "ring full");
    memset(p, 0, advance);
    struct cumux_msg_hdr h = {.op = op, .reply = reply, .size = hdr_size};
    memcpy(p, &h, sizeof h);
    if (body_len > advance - sizeof h)
        body_len = advance - sizeof h;
    if (body_len)
        memcpy(p + sizeof h, body, body_len);
    cumux_ring_commit(c->shm, advance);
}

static inline void put_msg(struct conn *c, uint16_t op, uint16_t reply, const void *body, size_t body_len)
{
    uint32_t size = cumux_msg_size(body_len);
    put_raw(c, op, reply, size, body, body_len, size);
}

/* ---- waiting for a reply, with a deadline ---- */
static __attribute__((unused)) int wait_sock = -1;
static __attribute__((unused)) uint64_t wait_deadline;

static inline bool sock_open(int s)
{
    struct pollfd p = {.fd = s, .events = POLLRDHUP};
    return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)));
}

static inline bool alive_until_deadline(void)
{
    return sock_open(wait_sock) && cumux_now_ns() < wait_deadline;
}

/* A round trip on reply slot `slot`. Returns the CUresult, or -1 when no reply came (hang-up or 5 s). */
static inline int call_slot(struct conn *c, uint16_t slot, uint16_t op, const void *body, size_t body_len, void *out,
                     uint32_t cap, uint32_t *out_len)
{
    struct cumux_reply_slot *s = &c->shm->replies[slot];
    uint32_t before = atomic_load(&s->seq);
    put_msg(c, op, slot, body, body_len);
    wait_sock = c->sock;
    wait_deadline = cumux_now_ns() + 5000000000ull;
    if (cumux_reply_wait(s, before, alive_until_deadline) < 0)
        return -1;
    uint32_t len = s->len < cap ? s->len : cap;
    if (out && len)
        memcpy(out, s->data, len);
    if (out_len)
        *out_len = s->len;
    return s->result;
}

static inline int call(struct conn *c, uint16_t op, const void *body, size_t body_len)
{
    return call_slot(c, 0, op, body, body_len, NULL, 0, NULL);
}

static inline void send_fd_tag(struct conn *c, uint64_t tag, int fd)
{
    REQUIRE(cumux_sock_send(c->sock, &tag, sizeof tag, fd) == 0, "send descriptor: %s", strerror(errno));
}

static inline int memfd_of(size_t size)
{
    int fd = memfd_create("test-host-alloc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0, "memfd_create: %s", strerror(errno));
    REQUIRE(ftruncate(fd, (off_t)size) == 0, "ftruncate");
    return fd;
}

#endif
