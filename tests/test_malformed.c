/* A hostile client against a running cumuxd (any GPU count; CI runs it with none): it connects like the
 * shim, then writes malformed messages into its ring. The server must drop that client (its socket
 * reaches EOF) and keep serving everyone else; well-formed messages that name bad handles must get
 * CUDA errors instead. Needs CUMUX_PIPE_DIRECTORY naming the server's pipe directory; when
 * CUMUX_TEST_DEVICE_COUNT is set, the device count the server must report.
 * usage: test_malformed CUMUX_CLI [CASE...]   (no CASE: all but the known-bug cases; "list" lists them) */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda.h>

#include "common/channel.h"
#include "common/sock.h"
#include "raw_client.h"
#include "tests/generated/malformed_cases.h"
#include "test_util.h"

static const char *cli;
/* INIT must work and describe this server: 0 result, a well-formed reply naming our client id. */
static void check_init(struct conn *c, const char *when)
{
    static uint8_t buf[CUMUX_REPLY_DATA];
    uint32_t len = 0;
    struct cumux_none none = {0};
    int r = call_slot(c, 7, CUMUX_OP_INIT, &none, sizeof none, buf, sizeof buf, &len);
    CHECK(r == CUDA_SUCCESS, "%s: INIT returned %d", when, r);
    if (r != CUDA_SUCCESS)
        return;
    struct cumux_init_reply rep;
    CHECK(len >= sizeof rep, "%s: INIT reply of %u bytes", when, len);
    if (len < sizeof rep)
        return;
    memcpy(&rep, buf, sizeof rep);
    CHECK(rep.client_id == c->id, "%s: INIT says client %u, welcome said %u", when, rep.client_id, c->id);
    CHECK(rep.device_count >= 0 && rep.device_count <= CUMUX_MAX_DEVICES &&
              len == sizeof rep + (size_t)rep.device_count * sizeof(struct cumux_device_info),
          "%s: INIT reply: %d devices in %u bytes", when, rep.device_count, len);
    const char *want = getenv("CUMUX_TEST_DEVICE_COUNT");
    if (want)
        CHECK(rep.device_count == atoi(want), "%s: %d devices, expected %s", when, rep.device_count, want);
}

/* ---- the server as the CLI sees it ---- */
static int status(int *clients)
{
    return test_cumux_status(cli, clients);
}

static int baseline_clients;

/* The server still answers the CLI and serves a new, well-behaved client. */
static void check_server_ok(const char *when)
{
    int n = -1;
    int st = status(&n);
    CHECK(st == 0 && n >= 0, "%s: cumux status exited %d (clients %d)", when, st, n);
    struct conn c;
    conn_open(&c);
    check_init(&c, when);
    conn_close(&c);
}

/* The server hangs up on this client within 10 s. */
static void expect_dropped(struct conn *c, const char *what)
{
    uint64_t end = cumux_now_ns() + 10000000000ull;
    bool eof = false;
    while (!eof && cumux_now_ns() < end) {
        struct pollfd p = {.fd = c->sock, .events = POLLIN | POLLRDHUP};
        int r = poll(&p, 1, 100);
        REQUIRE(r >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        if (r > 0) {
            char b;
            ssize_t n = recv(c->sock, &b, 1, MSG_DONTWAIT);
            CHECK(n <= 0, "%s: the server sent data after the welcome", what);
            eof = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
        }
    }
    CHECK(eof, "%s: the server did not drop the client within 10 s", what);
    conn_close(c);
    check_server_ok(what);
}

/* Status shows the count from before the case again (the dropped client's resources are gone). */
static void expect_clients_back(const char *what)
{
    int n = test_wait_clients(cli, baseline_clients, 5000);
    CHECK(n == baseline_clients, "%s: %d clients, expected %d", what, n, baseline_clients);
}

/* ---- cases that must get the client dropped ---- */
static void drop_header(uint16_t op, uint16_t reply, uint32_t hdr_size, uint32_t advance, const char *what)
{
    struct conn c;
    conn_open(&c);
    uint8_t body[64] = {0};
    put_raw(&c, op, reply, hdr_size, body, sizeof body, advance);
    expect_dropped(&c, what);
}

static void drop_head(uint64_t head_from_tail, bool after_one, const char *what)
{
    struct conn c;
    conn_open(&c);
    if (after_one)
        check_init(&c, what); /* so that tail is not 0 */
    uint64_t tail = atomic_load(&c.shm->tail);
    atomic_store(&c.shm->head, tail + head_from_tail);
    doorbell(&c);
    expect_dropped(&c, what);
}

static void cases_dropped(void)
{
    drop_header(CUMUX_OP_COUNT, 0, 16, 16, "op one past the last");
    drop_header(0xffff, 0, 16, 16, "op 0xffff");
    drop_header(0xffff, CUMUX_NO_REPLY, 16, 16, "op 0xffff, one-way");
    drop_header(CUMUX_OP_PAD, CUMUX_NO_REPLY, 16, 16, "padding in the middle of the ring");
    drop_header(CUMUX_OP_INIT, 0, 0, 16, "size 0");
    drop_header(CUMUX_OP_INIT, 0, 4, 16, "size smaller than the header");
    drop_header(CUMUX_OP_INIT, 0, 12, 16, "size not a multiple of 8");
    drop_header(CUMUX_OP_INIT, 0, 20, 24, "size 20");
    drop_header(CUMUX_OP_INIT, 0, 64, 16, "size larger than what was committed");
    drop_header(CUMUX_OP_INIT, 0, CUMUX_MAX_MSG + 8, CUMUX_MAX_MSG + 8, "size over CUMUX_MAX_MSG");
    /* Bodies shorter than the op's struct. */
    drop_header(CUMUX_OP_INIT, 0, 8, 8, "INIT without a body");
    drop_header(CUMUX_OP_CTX_CREATE, 0, 8, 8, "CTX_CREATE without a body");
    drop_header(CUMUX_OP_MEM_ALLOC, 0, 16, 16, "MEM_ALLOC with half a body");
    drop_header(CUMUX_OP_MODULE_GET_FUNCTION, 0, 8, 8, "MODULE_GET_FUNCTION without a body");
    drop_header(CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, 16, 16, "LAUNCH with a short body");
    drop_header(CUMUX_OP_COPY, CUMUX_NO_REPLY, 16, 16, "COPY with a short body");
    /* One-way ops sent with a reply slot, answered ops sent without one. */
    drop_header(CUMUX_OP_LAUNCH, 0, cumux_msg_size(sizeof(struct cumux_launch)),
                cumux_msg_size(sizeof(struct cumux_launch)), "LAUNCH with a reply slot");
    drop_header(CUMUX_OP_STREAM_DESTROY, 3, 16, 16, "STREAM_DESTROY with a reply slot");
    drop_header(CUMUX_OP_EVENT_RECORD, 3, 24, 24, "EVENT_RECORD with a reply slot");
    drop_header(CUMUX_OP_INIT, CUMUX_NO_REPLY, 16, 16, "INIT one-way");
    drop_header(CUMUX_OP_STREAM_SYNC, CUMUX_NO_REPLY, 16, 16, "STREAM_SYNC one-way");
    drop_header(CUMUX_OP_MEM_ALLOC, CUMUX_NO_REPLY, 24, 24, "MEM_ALLOC one-way");
    /* Reply slots that do not exist. */
    drop_header(CUMUX_OP_INIT, CUMUX_REPLY_SLOTS, 16, 16, "reply slot one past the last");
    drop_header(CUMUX_OP_INIT, 0xfffe, 16, 16, "reply slot 0xfffe");
    /* head moved where the client could never have written. */
    drop_head((uint64_t)-8, true, "head moved back behind tail");
    drop_head((uint64_t)-16, true, "head moved back by two messages");
    drop_head(CUMUX_RING_BYTES + 8, false, "head beyond the ring");
    drop_head(12, false, "head - tail not a multiple of 8");
    drop_head(UINT64_MAX, false, "head at UINT64_MAX - tail");

    /* A good message before a bad one is answered first: the server works in order. */
    struct conn c;
    conn_open(&c);
    struct cumux_reply_slot *s = &c.shm->replies[1];
    uint32_t before = atomic_load(&s->seq);
    struct cumux_none body = {0};
    put_msg(&c, CUMUX_OP_INIT, 1, &body, sizeof body);
    put_raw(&c, 0xffff, 0, 16, &body, sizeof body, 16);
    uint64_t end = cumux_now_ns() + 5000000000ull;
    while (atomic_load(&s->seq) == before && cumux_now_ns() < end)
        test_sleep_ms(1);
    CHECK(atomic_load(&s->seq) != before && s->result == CUDA_SUCCESS, "the good message before the bad one: "
          "not answered (seq %u -> %u, result %d)", before, atomic_load(&s->seq), s->result);
    expect_dropped(&c, "bad message after a good one");
    expect_clients_back("after the dropped clients");
}

/* A client that breaks the protocol and hangs up at once, many times: the server's hang-up and its
 * worker's end may then be noticed together. */
static void case_drop_and_hang_up(int rounds)
{
    for (int i = 0; i < rounds; i++) {
        struct conn c;
        conn_open(&c);
        uint8_t body[8] = {0};
        put_raw(&c, 0xffff, 0, 16, body, sizeof body, 16);
        if (i % 2)
            test_sleep_ms(i % 3); /* vary the gap between the violation and the hang-up */
        conn_close(&c);
    }
    check_server_ok("violations with immediate hang-ups");
    expect_clients_back("violations with immediate hang-ups");
}

/* ---- well-formed messages with bad handles: CUDA errors, the client stays ---- */
static void expect_error(struct conn *c, uint16_t op, const void *body, size_t len, int want, const char *what)
{
    int r = call(c, op, body, len);
    CHECK(r != -1, "%s: no reply (dropped or no answer in 5 s)", what);
    if (want)
        CHECK(r == want, "%s: result %d, expected %d", what, r, want);
    else
        CHECK(r > 0, "%s: result %d, expected a CUDA error", what, r);
}

/* The cases generated from common/protocol.spec for every op (tests/generated/malformed_cases.h). */
static void cases_generated(void)
{
    static uint8_t zeros[CUMUX_MAX_MSG];
    for (size_t i = 0; i < sizeof malformed_drops / sizeof malformed_drops[0]; i++) {
        const struct malformed_drop *d = &malformed_drops[i];
        struct conn c;
        conn_open(&c);
        uint32_t size = (uint32_t)sizeof(struct cumux_msg_hdr) + d->body_len;
        put_raw(&c, d->op, d->reply, size, zeros, d->body_len, size);
        expect_dropped(&c, d->what);
    }
    struct conn c;
    conn_open(&c);
    check_init(&c, "before the generated handle cases");
    for (size_t i = 0; i < sizeof malformed_handles / sizeof malformed_handles[0]; i++) {
        const struct malformed_handle *h = &malformed_handles[i];
        uint8_t body[1024] = {0}; /* more than any op's body */
        REQUIRE(h->body_len <= sizeof body, "%s: body of %u bytes", h->what, h->body_len);
        uint32_t never = 0x7fffffffu;
        memcpy(body + h->offset, &never, sizeof never);
        expect_error(&c, h->op, body, h->body_len, 0, h->what);
    }
    for (size_t i = 0; i < sizeof malformed_gpus / sizeof malformed_gpus[0]; i++) {
        const struct malformed_handle *h = &malformed_gpus[i];
        static const int32_t bad[] = {-1, CUMUX_MAX_DEVICES, 0x7fffffff};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            uint8_t body[1024] = {0};
            REQUIRE(h->body_len <= sizeof body, "%s: body of %u bytes", h->what, h->body_len);
            memcpy(body + h->offset, &bad[b], sizeof bad[b]);
            expect_error(&c, h->op, body, h->body_len, CUDA_ERROR_INVALID_DEVICE, h->what);
        }
    }
    check_init(&c, "after the generated handle cases");
    conn_close(&c);
    expect_clients_back("after the generated cases");
}

/* The GPUs the server has (with_server.sh says so in CUMUX_TEST_DEVICE_COUNT). */
static int ndev_of_server(void)
{
    const char *n = getenv("CUMUX_TEST_DEVICE_COUNT");
    return n ? atoi(n) : 0;
}

static void cases_bad_handles(void)
{
    struct conn c;
    conn_open(&c);
    check_init(&c, "before bad handles");

    struct handle_body h = {.handle = 12345};
    expect_error(&c, CUMUX_OP_STREAM_SYNC, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "STREAM_SYNC 12345");
    h.handle = 0;
    expect_error(&c, CUMUX_OP_STREAM_QUERY, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "STREAM_QUERY 0");
    /* Handles tagged with another GPU's worker (bits 24-27), or with every tag bit: none of this worker's. */
    h.handle = CUMUX_HANDLE_TAG(1) | 1;
    expect_error(&c, CUMUX_OP_STREAM_SYNC, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "STREAM_SYNC of GPU 1's handle 1");
    h.handle = 0xffffffffu;
    expect_error(&c, CUMUX_OP_STREAM_SYNC, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "STREAM_SYNC 0xffffffff");
    struct cumux_ctx_sync xs = {.ctx = CUMUX_HANDLE_TAG(15) | 1};
    expect_error(&c, CUMUX_OP_CTX_SYNC, &xs, sizeof xs, CUDA_ERROR_INVALID_CONTEXT, "CTX_SYNC of GPU 15's handle 1");
    struct cumux_mem_free mf = {.ptr = 0x7f1234567000ull};
    expect_error(&c, CUMUX_OP_MEM_FREE, &mf, sizeof mf, CUDA_ERROR_INVALID_VALUE, "MEM_FREE of a random pointer");
    mf.ptr = 0;
    expect_error(&c, CUMUX_OP_MEM_FREE, &mf, sizeof mf, CUDA_ERROR_INVALID_VALUE, "MEM_FREE of 0");
    mf.ptr = 0x1234000;
    expect_error(&c, CUMUX_OP_HOST_FREE, &mf, sizeof mf, CUDA_ERROR_INVALID_VALUE, "HOST_FREE of a random pointer");
    /* An IPC token of another GPU's worker that names no GPU, or a token nobody exported on one that is. */
    struct cumux_ipc_open_mem_handle io = {.token = 0x1234, .owner_gpu = -1};
    expect_error(&c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &io, sizeof io, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN owner GPU -1");
    io.owner_gpu = CUMUX_MAX_DEVICES;
    expect_error(&c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &io, sizeof io, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN owner GPU 16");
    io.owner_gpu = INT32_MAX;
    expect_error(&c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &io, sizeof io, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN owner GPU 2^31-1");
    io.owner_gpu = 0;
    expect_error(&c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &io, sizeof io, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN of a token never made");
    /* The same for an interprocess event's owner GPU (another's is opened through that GPU's worker): it
     * needs a context first, so a server with a GPU (the fake's: ctest fake_malformed_ipc). */
    struct cumux_ctx_create ecc = {.device = 0};
    struct cumux_ctx_reply ecr;
    uint32_t ecr_len = 0;
    if (ndev_of_server() > 0) {
        REQUIRE(call_slot(&c, 1, CUMUX_OP_CTX_CREATE, &ecc, sizeof ecc, &ecr, sizeof ecr, &ecr_len) == CUDA_SUCCESS &&
                    ecr_len == sizeof ecr, "CTX_CREATE");
        struct cumux_ipc_open_event_handle ie = {.ctx = ecr.ctx, .owner_gpu = -1, .token = 0x1234};
        expect_error(&c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &ie, sizeof ie, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN_EVENT owner GPU -1");
        ie.owner_gpu = CUMUX_MAX_DEVICES;
        expect_error(&c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &ie, sizeof ie, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN_EVENT owner GPU 16");
        ie.owner_gpu = INT32_MIN;
        expect_error(&c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &ie, sizeof ie, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN_EVENT owner GPU -2^31");
        ie.owner_gpu = 0;
        expect_error(&c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &ie, sizeof ie, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN_EVENT of a token never made");
        ie.token = 0;
        expect_error(&c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &ie, sizeof ie, CUDA_ERROR_INVALID_VALUE, "IPC_OPEN_EVENT of token 0");
        struct cumux_ctx_destroy ecd = {.ctx = ecr.ctx};
        CHECK(call(&c, CUMUX_OP_CTX_DESTROY, &ecd, sizeof ecd) == CUDA_SUCCESS, "CTX_DESTROY of the event test's context");
    }
    struct cumux_ctx_create cc = {.device = 5};
    const char *ndev = getenv("CUMUX_TEST_DEVICE_COUNT");
    if (ndev && atoi(ndev) <= 5) /* a device the server does not have */
        expect_error(&c, CUMUX_OP_CTX_CREATE, &cc, sizeof cc, CUDA_ERROR_INVALID_DEVICE, "CTX_CREATE device 5");
    cc.device = -1;
    expect_error(&c, CUMUX_OP_CTX_CREATE, &cc, sizeof cc, CUDA_ERROR_INVALID_DEVICE, "CTX_CREATE device -1");
    cc.device = CUMUX_MAX_DEVICES;
    expect_error(&c, CUMUX_OP_CTX_CREATE, &cc, sizeof cc, CUDA_ERROR_INVALID_DEVICE, "CTX_CREATE device 16");
    h.handle = 77;
    expect_error(&c, CUMUX_OP_CTX_DESTROY, &h, sizeof h, CUDA_ERROR_INVALID_CONTEXT, "CTX_DESTROY 77");
    expect_error(&c, CUMUX_OP_CTX_SYNC, &h, sizeof h, CUDA_ERROR_INVALID_CONTEXT, "CTX_SYNC 77");
    expect_error(&c, CUMUX_OP_MEM_INFO, &h, sizeof h, CUDA_ERROR_INVALID_CONTEXT, "MEM_INFO 77");
    struct cumux_mem_alloc ma = {.ctx = 1, .size = 4096};
    expect_error(&c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, CUDA_ERROR_INVALID_CONTEXT, "MEM_ALLOC in context 1");
    struct cumux_ctx_limit cl = {.ctx = 1, .limit = 0};
    expect_error(&c, CUMUX_OP_CTX_LIMIT, &cl, sizeof cl, CUDA_ERROR_INVALID_CONTEXT, "CTX_LIMIT of context 1");
    struct cumux_stream_create sc = {.ctx = 2};
    expect_error(&c, CUMUX_OP_STREAM_CREATE, &sc, sizeof sc, CUDA_ERROR_INVALID_CONTEXT, "STREAM_CREATE in context 2");
    struct cumux_event_create ec = {.ctx = 2};
    expect_error(&c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, CUDA_ERROR_INVALID_CONTEXT, "EVENT_CREATE in context 2");
    h.handle = 3;
    expect_error(&c, CUMUX_OP_EVENT_QUERY, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "EVENT_QUERY 3");
    expect_error(&c, CUMUX_OP_EVENT_SYNC, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "EVENT_SYNC 3");
    struct cumux_event_elapsed ee = {.start = 1, .end = 2};
    expect_error(&c, CUMUX_OP_EVENT_ELAPSED, &ee, sizeof ee, CUDA_ERROR_INVALID_HANDLE, "EVENT_ELAPSED 1 2");
    expect_error(&c, CUMUX_OP_MODULE_UNLOAD, &h, sizeof h, CUDA_ERROR_INVALID_HANDLE, "MODULE_UNLOAD 3");
    struct symbol_msg ms = SYMBOL_MSG(9, "kernel");
    expect_error(&c, CUMUX_OP_MODULE_GET_FUNCTION, &ms, sizeof ms, CUDA_ERROR_INVALID_HANDLE, "GET_FUNCTION in module 9");
    expect_error(&c, CUMUX_OP_MODULE_GET_GLOBAL, &ms, sizeof ms, CUDA_ERROR_INVALID_HANDLE, "GET_GLOBAL in module 9");
    memset(ms.name, 'x', sizeof ms.name); /* no terminating NUL */
    expect_error(&c, CUMUX_OP_MODULE_GET_FUNCTION, &ms, sizeof ms, 0, "GET_FUNCTION with an unterminated name");
    expect_error(&c, CUMUX_OP_LIBRARY_GET_MODULE, &ms, sizeof ms, 0, "LIBRARY_GET_MODULE");
    struct handle_body fnames = {.handle = 9};
    expect_error(&c, CUMUX_OP_MODULE_FUNCTION_NAMES, &fnames, sizeof fnames, CUDA_ERROR_INVALID_HANDLE,
                 "MODULE_FUNCTION_NAMES of module 9");
    struct handle_body arch = {.handle = 7};
    expect_error(&c, CUMUX_OP_ARCH_DATA, &arch, sizeof arch, CUDA_ERROR_INVALID_DEVICE, "ARCH_DATA of device 7");
    arch.handle = UINT32_MAX;
    expect_error(&c, CUMUX_OP_ARCH_DATA, &arch, sizeof arch, CUDA_ERROR_INVALID_DEVICE, "ARCH_DATA of device -1");
    struct cumux_func_attr fa = {.function = 1};
    expect_error(&c, CUMUX_OP_FUNC_GET_ATTRIBUTE, &fa, sizeof fa, CUDA_ERROR_INVALID_HANDLE, "FUNC_GET_ATTRIBUTE 1");
    expect_error(&c, CUMUX_OP_FUNC_SET_ATTRIBUTE, &fa, sizeof fa, CUDA_ERROR_INVALID_HANDLE, "FUNC_SET_ATTRIBUTE 1");
    struct cumux_copy cp = {.kind = CUMUX_COPY_DTOD, .stream = 1, .dst = 0x1000, .src = 0x2000, .size = 16};
    expect_error(&c, CUMUX_OP_COPY, &cp, sizeof cp, CUDA_ERROR_INVALID_HANDLE, "synchronous COPY on stream 1");
    struct cumux_copy_staged cs = {.stream = 1, .dev = 0x1000, .size = 16};
    expect_error(&c, CUMUX_OP_COPY_DTOH_STAGED, &cs, sizeof cs, CUDA_ERROR_INVALID_HANDLE, "COPY_DTOH_STAGED on stream 1");
    /* Occupancy, pools, stream-ordered memory, capture and graphs. */
    struct cumux_func_occupancy fo = {.function = 1, .a = 128};
    expect_error(&c, CUMUX_OP_FUNC_OCCUPANCY, &fo, sizeof fo, CUDA_ERROR_INVALID_HANDLE, "FUNC_OCCUPANCY 1");
    struct cumux_launch col = {.function = 1, .grid = {1, 1, 1}, .block = {1, 1, 1}};
    expect_error(&c, CUMUX_OP_FUNC_CLUSTER_OCCUPANCY, &col, sizeof col, CUDA_ERROR_INVALID_HANDLE,
                 "FUNC_CLUSTER_OCCUPANCY 1");
    struct cumux_pool_default pd = {.device = 5};
    expect_error(&c, CUMUX_OP_POOL_DEFAULT, &pd, sizeof pd, CUDA_ERROR_INVALID_DEVICE, "POOL_DEFAULT device 5");
    struct cumux_pool_create pc = {.device = 5};
    expect_error(&c, CUMUX_OP_POOL_CREATE, &pc, sizeof pc, CUDA_ERROR_INVALID_DEVICE, "POOL_CREATE device 5");
    struct cumux_pool_destroy pdes = {.pool = 7};
    expect_error(&c, CUMUX_OP_POOL_DESTROY, &pdes, sizeof pdes, CUDA_ERROR_INVALID_HANDLE, "POOL_DESTROY 7");
    struct cumux_pool_attribute pa = {.pool = 7};
    expect_error(&c, CUMUX_OP_POOL_ATTRIBUTE, &pa, sizeof pa, CUDA_ERROR_INVALID_HANDLE, "POOL_ATTRIBUTE 7");
    struct cumux_pool_trim pt = {.pool = 7};
    expect_error(&c, CUMUX_OP_POOL_TRIM, &pt, sizeof pt, CUDA_ERROR_INVALID_HANDLE, "POOL_TRIM 7");
    struct cumux_mem_alloc_async maa = {.stream = 1, .pool = 7, .size = 4096};
    expect_error(&c, CUMUX_OP_MEM_ALLOC_ASYNC, &maa, sizeof maa, CUDA_ERROR_INVALID_HANDLE, "MEM_ALLOC_ASYNC on stream 1");
    struct cumux_capture_begin cb = {.stream = 1};
    expect_error(&c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb, CUDA_ERROR_INVALID_HANDLE, "CAPTURE_BEGIN on stream 1");
    struct cumux_capture_end ce = {.stream = 1};
    expect_error(&c, CUMUX_OP_CAPTURE_END, &ce, sizeof ce, CUDA_ERROR_INVALID_HANDLE, "CAPTURE_END on stream 1");
    struct cumux_capture_query cq = {.stream = 1};
    expect_error(&c, CUMUX_OP_CAPTURE_INFO, &cq, sizeof cq, CUDA_ERROR_INVALID_HANDLE, "CAPTURE_INFO on stream 1");
    struct cumux_graph_instantiate gi = {.graph = 3};
    expect_error(&c, CUMUX_OP_GRAPH_INSTANTIATE, &gi, sizeof gi, CUDA_ERROR_INVALID_HANDLE, "GRAPH_INSTANTIATE 3");
    struct cumux_graph_exec_update geu = {.exec = 4, .graph = 3};
    expect_error(&c, CUMUX_OP_GRAPH_EXEC_UPDATE, &geu, sizeof geu, CUDA_ERROR_INVALID_HANDLE, "GRAPH_EXEC_UPDATE 4 3");
    struct cumux_graph_add_node gn = {.graph = 3};
    expect_error(&c, CUMUX_OP_GRAPH_ADD_EMPTY_NODE, &gn, sizeof gn, CUDA_ERROR_INVALID_HANDLE, "GRAPH_ADD_EMPTY_NODE to graph 3");
    struct cumux_graph_get_nodes gg = {.graph = 3};
    expect_error(&c, CUMUX_OP_GRAPH_GET_NODES, &gg, sizeof gg, CUDA_ERROR_INVALID_HANDLE, "GRAPH_GET_NODES of graph 3");
    struct cumux_node_get_deps nd = {.node = 5};
    expect_error(&c, CUMUX_OP_NODE_GET_DEPS, &nd, sizeof nd, CUDA_ERROR_INVALID_HANDLE, "NODE_GET_DEPS of node 5");
    struct cumux_graph_set_kernel_node sk = {.node = 5};
    expect_error(&c, CUMUX_OP_GRAPH_SET_KERNEL_NODE, &sk, sizeof sk, CUDA_ERROR_INVALID_HANDLE, "GRAPH_SET_KERNEL_NODE of node 5");
    /* Handles are looked up before anything else is checked (the routing does it). */
    gn.ndeps = 100000;
    expect_error(&c, CUMUX_OP_GRAPH_ADD_EMPTY_NODE, &gn, sizeof gn, CUDA_ERROR_INVALID_HANDLE, "GRAPH_ADD_EMPTY_NODE with 100000 deps to graph 3");
    struct cumux_graph_add_deps gd = {.graph = 3, .ndeps = 2};
    expect_error(&c, CUMUX_OP_GRAPH_ADD_DEPS, &gd, sizeof gd, CUDA_ERROR_INVALID_HANDLE, "GRAPH_ADD_DEPS to graph 3");
    check_init(&c, "after bad handles");

    /* One-way commands with bad handles: nothing comes back and the client is not dropped. */
    uint8_t lbuf[sizeof(struct cumux_launch) + 64] = {0};
    struct cumux_launch l = {.function = 999, .stream = 1, .grid = {1, 1, 1}, .block = {1, 1, 1}, .param_bytes = 64};
    memcpy(lbuf, &l, sizeof l);
    put_msg(&c, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, lbuf, sizeof lbuf);
    l.param_bytes = 1u << 30; /* more than the message holds */
    memcpy(lbuf, &l, sizeof l);
    put_msg(&c, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, lbuf, sizeof lbuf);
    h.handle = 99;
    put_msg(&c, CUMUX_OP_STREAM_DESTROY, CUMUX_NO_REPLY, &h, sizeof h);
    put_msg(&c, CUMUX_OP_EVENT_DESTROY, CUMUX_NO_REPLY, &h, sizeof h);
    struct cumux_event_record er = {.event = 4, .stream = 5};
    put_msg(&c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
    struct cumux_stream_wait_event we = {.stream = 5, .event = 4};
    put_msg(&c, CUMUX_OP_STREAM_WAIT_EVENT, CUMUX_NO_REPLY, &we, sizeof we);
    struct cumux_memset mset = {.stream = 5, .elem_size = 4, .dst = 0x1000, .width = 4, .height = 1};
    put_msg(&c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &mset, sizeof mset);
    put_msg(&c, CUMUX_OP_COPY, CUMUX_NO_REPLY, &cp, sizeof cp);
    cs.slot = 99;
    put_msg(&c, CUMUX_OP_COPY_HTOD_STAGED, CUMUX_NO_REPLY, &cs, sizeof cs);
    struct cumux_mem_free_async mfa = {.stream = 5, .ptr = 0x1000};
    put_msg(&c, CUMUX_OP_MEM_FREE_ASYNC, CUMUX_NO_REPLY, &mfa, sizeof mfa);
    struct cumux_host_func hf = {.stream = 5, .id = 1};
    put_msg(&c, CUMUX_OP_HOST_FUNC, CUMUX_NO_REPLY, &hf, sizeof hf);
    struct cumux_graph_launch gl = {.exec = 4, .stream = 1};
    put_msg(&c, CUMUX_OP_GRAPH_LAUNCH, CUMUX_NO_REPLY, &gl, sizeof gl);
    struct cumux_graph_upload gu = {.exec = 4, .stream = 1};
    put_msg(&c, CUMUX_OP_GRAPH_UPLOAD, CUMUX_NO_REPLY, &gu, sizeof gu);
    struct cumux_graph_exec_destroy ged = {.exec = 4};
    put_msg(&c, CUMUX_OP_GRAPH_EXEC_DESTROY, CUMUX_NO_REPLY, &ged, sizeof ged);
    struct cumux_graph_destroy gdes = {.graph = 3};
    put_msg(&c, CUMUX_OP_GRAPH_DESTROY, CUMUX_NO_REPLY, &gdes, sizeof gdes);
    check_init(&c, "after one-way commands with bad handles");
    CHECK(sock_open(c.sock), "dropped after one-way commands with bad handles");
    conn_close(&c);
    expect_clients_back("after bad handles");
}

/* ---- descriptors that accompany HOST_ALLOC ---- */
/* Either an error reply, or the client dropped: never a success, never silence. */
static void expect_host_alloc_refused(struct conn *c, const struct cumux_host_alloc *m, const char *what)
{
    int r = call(c, CUMUX_OP_HOST_ALLOC, m, sizeof *m);
    if (r == -1 && !sock_open(c->sock)) {
        expect_dropped(c, what);
        conn_open(c);
        return;
    }
    CHECK(r > 0, "%s: result %d (-1: no reply in 5 s)", what, r);
    if (r > 0)
        check_init(c, what);
}

static void cases_descriptors(void)
{
    struct conn c;
    conn_open(&c);
    struct cumux_host_alloc m = {.size = 1 << 20};
    int fd;

    /* A pipe is not shared memory. */
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    send_fd_tag(&c, CUMUX_MAGIC, p[0]);
    REQUIRE(close(p[0]) == 0 && close(p[1]) == 0, "close pipe");
    expect_host_alloc_refused(&c, &m, "HOST_ALLOC with a pipe");

    /* A memfd smaller than the size asked for. */
    fd = memfd_of(4096);
    send_fd_tag(&c, CUMUX_MAGIC, fd);
    REQUIRE(close(fd) == 0, "close");
    expect_host_alloc_refused(&c, &m, "HOST_ALLOC larger than its memfd");

    /* The descriptor's message carries the wrong tag. */
    fd = memfd_of(1 << 20);
    send_fd_tag(&c, 0x1122334455667788ull, fd);
    REQUIRE(close(fd) == 0, "close");
    expect_host_alloc_refused(&c, &m, "HOST_ALLOC with a wrongly tagged descriptor");

    /* A tag without a descriptor. */
    send_fd_tag(&c, CUMUX_MAGIC, -1);
    expect_host_alloc_refused(&c, &m, "HOST_ALLOC with a tag but no descriptor");

    /* Size 0 and absurd sizes. */
    struct cumux_host_alloc z = {.size = 0};
    fd = memfd_of(4096);
    send_fd_tag(&c, CUMUX_MAGIC, fd);
    REQUIRE(close(fd) == 0, "close");
    expect_host_alloc_refused(&c, &z, "HOST_ALLOC of 0 bytes");

    /* A memfd the client could still shrink under the server's mapping: sealed against it first. */
    fd = memfd_of(1 << 20);
    REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) == 0, "seal");
    send_fd_tag(&c, CUMUX_MAGIC, fd);
    REQUIRE(close(fd) == 0, "close");
    expect_host_alloc_refused(&c, &m, "HOST_ALLOC of a memfd that cannot take the shrink seal");
    conn_close(&c);
    expect_clients_back("after HOST_ALLOC descriptors");
}

/* A client that sends HOST_ALLOC (or MODULE_LOAD) without the descriptor first. The worker must not wait
 * for it forever: the shim sends the descriptor before the command, so it is there or it is missing. */
static void case_missing_fd(uint16_t op, const char *what)
{
    struct conn c;
    conn_open(&c);
    int r;
    if (op == CUMUX_OP_HOST_ALLOC) {
        struct cumux_host_alloc m = {.size = 1 << 20};
        r = call(&c, op, &m, sizeof m);
    } else {
        struct cumux_module_load m = {.ctx = 1, .kind = CUMUX_IMAGE_MODULE, .size = 4096};
        r = call(&c, op, &m, sizeof m);
    }
    if (r == -1 && !sock_open(c.sock)) {
        expect_dropped(&c, what);
    } else {
        CHECK(r > 0, "%s: result %d (-1: no reply in 5 s: the worker waits for a descriptor that never comes)",
              what, r);
        conn_close(&c);
    }
    expect_clients_back(what);
}

/* While one client's worker is stuck waiting for a descriptor, the server as a whole must go on, and
 * the stuck client must be cleaned up once it hangs up. */
/* The server tells each client how many it serves (the shim's default wait sleeps soon when they
 * are more than half the CPUs): two connect, both read baseline + 2; one goes, the other reads baseline + 1. */
static bool told_within(struct conn *c, uint32_t want, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (atomic_load(&c->shm->server_clients) == want)
            return true;
        usleep(1000);
    }
    return atomic_load(&c->shm->server_clients) == want;
}

static void case_client_count(void)
{
    struct conn a, b;
    conn_open(&a);
    conn_open(&b);
    uint32_t two = (uint32_t)baseline_clients + 2;
    REQUIRE(told_within(&a, two, 3000), "first client told %u clients, not %u",
            atomic_load(&a.shm->server_clients), two);
    REQUIRE(told_within(&b, two, 3000), "second client told %u clients, not %u",
            atomic_load(&b.shm->server_clients), two);
    conn_close(&b);
    REQUIRE(told_within(&a, two - 1, 5000), "after one left, told %u clients, not %u",
            atomic_load(&a.shm->server_clients), two - 1);
    conn_close(&a);
}

static void case_stuck_client_isolated(void)
{
    struct conn c;
    conn_open(&c);
    struct cumux_host_alloc m = {.size = 1 << 20};
    put_msg(&c, CUMUX_OP_HOST_ALLOC, 0, &m, sizeof m);
    test_sleep_ms(200);
    check_server_ok("while a client waits for its descriptor");
    conn_close(&c);
    expect_clients_back("after the client that never sent its descriptor hung up");
}

static const struct {
    const char *name;
    int known_bug; /* not run unless named */
} case_names[] = {
    {"dropped", 0}, {"generated", 0}, {"bad-handles", 0}, {"descriptors", 0}, {"stuck-isolated", 0}, {"hang-up", 1},
    {"missing-fd", 1}, {"client-count", 0},
};

static void run_case(const char *name)
{
    printf("case %s\n", name);
    fflush(stdout);
    if (!strcmp(name, "dropped"))
        cases_dropped();
    else if (!strcmp(name, "hang-up"))
        case_drop_and_hang_up(200);
    else if (!strcmp(name, "generated"))
        cases_generated();
    else if (!strcmp(name, "bad-handles"))
        cases_bad_handles();
    else if (!strcmp(name, "descriptors"))
        cases_descriptors();
    else if (!strcmp(name, "client-count"))
        case_client_count();
    else if (!strcmp(name, "stuck-isolated"))
        case_stuck_client_isolated();
    else if (!strcmp(name, "missing-fd")) {
        case_missing_fd(CUMUX_OP_HOST_ALLOC, "HOST_ALLOC without its descriptor");
        case_missing_fd(CUMUX_OP_MODULE_LOAD, "MODULE_LOAD without its descriptor");
    } else {
        fprintf(stderr, "unknown case %s\n", name);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_malformed CUMUX_CLI [CASE...]\n");
        return 2;
    }
    cli = argv[1];
    if (argc > 2 && !strcmp(argv[2], "list")) {
        for (size_t i = 0; i < sizeof case_names / sizeof case_names[0]; i++)
            printf("%s%s\n", case_names[i].name, case_names[i].known_bug ? " (known bug: run by name)" : "");
        return 0;
    }
    REQUIRE(status(&baseline_clients) == 0 && baseline_clients >= 0, "cumux status before the test");
    check_server_ok("at the start");
    if (argc > 2) {
        for (int i = 2; i < argc; i++)
            run_case(argv[i]);
    } else {
        for (size_t i = 0; i < sizeof case_names / sizeof case_names[0]; i++)
            if (!case_names[i].known_bug)
                run_case(case_names[i].name);
    }
    check_server_ok("at the end");
    expect_clients_back("at the end");
    printf("test_malformed: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
