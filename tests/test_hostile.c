/* Hostile clients against a cumuxd that serves a GPU (in CI: the fake driver of tests/fakecuda, whose
 * oracle aborts the server on any device access outside one allocation). Each case is an attack that
 * once worked, or one a client could try: the server must answer with errors or drop the attacker, never
 * crash, and keep serving everyone else.
 *   param-scribble  a thread rewrites the parameter layout in the reply slot while MODULE_GET_FUNCTION
 *                   runs, then the client launches (the server once read the offsets back from the slot)
 *   span-wrap       2-D memsets, copies, graph nodes, array copies and textures whose span wraps 64 bits
 *                   onto a 4 KiB buffer; textures and stream memory operations on memory not the client's
 *   ptx-no-nul      an image of bytes with no NUL that ends on a page boundary (the driver reads PTX as a
 *                   C string: it ran off the end of the server's mapping)
 *   capture-free    frees while a stream is being captured (fuzz_server: the allocation left the client's
 *                   table, the captured free never ran, and the memory outlived the client; the wrapper's
 *                   leak check catches that); a captured allocation's address after its capture failed
 *   capture-global  one client captures in global mode while another queries and waits for an event (the
 *                   server began captures in the client's mode: the driver then refused the other
 *                   client's calls from any server thread and invalidated the capture)
 *   capture-left    a client asks for its capture's graph, adds to it, tries to destroy it, and goes with the
 *                   capture still running (the capture's graph and the handed-out handle must both go)
 *   counts          counts and sizes of the newer commands that say more than their message holds: JIT
 *                   options, link inputs, capture dependencies, tensor map ranks, graph event nodes, edges
 *                   removed, captures into a graph, stream memory operations of no known kind, a free node
 *                   of memory not a graph's, a conditional node with a foreign handle or 2^20 bodies;
 *                   symbol names that are missing, empty, unterminated or as long as the limit
 *   wait-orphan     a client goes while its streams wait on words of its memory nobody will write (its
 *                   worker waited forever in the final synchronization); waits no value can satisfy
 *   hostfn-never    a client whose streams wait for host functions it never runs goes while its worker
 *                   synchronizes one of them
 *   resume-claims   RESUME_MEMORY (taking memory back after a worker change) from a client that did not
 *                   come back, with counts its payload does not hold (2^32-1 of them), and from one that
 *                   came back with a made-up token naming another client's buffer: refused or nothing
 *                   taken, the buffer still the other's alone
 *   scribble-all    a thread writes random words all over the client's shared memory while it works;
 *                   a bystander command (after --) runs meanwhile and must succeed every time
 * usage: test_hostile CUMUX_CLI FATBIN CASE... [-- BYSTANDER_CMD ARGS...] */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "raw_client.h"
#include "test_util.h"

static const char *cli, *fatbin;
static char **bystander; /* NULL-terminated argv, or NULL */

/* ---- the calls a client needs, by hand ---- */
struct session {
    struct conn c;
    uint32_t ctx, stream, module;
    uint64_t buf; /* 4 KiB of device memory */
};

static int call_reply(struct conn *c, uint16_t op, const void *body, size_t len, void *out, uint32_t cap)
{
    uint32_t got = 0;
    int r = call_slot(c, 1, op, body, len, out, cap, &got);
    if (r == CUDA_SUCCESS && got < cap)
        return -2; /* a reply shorter than its type */
    return r;
}

static uint64_t call_u64(struct conn *c, uint16_t op, const void *body, size_t len, const char *what)
{
    struct cumux_u64_reply rep = {0};
    int r = call_reply(c, op, body, len, &rep, sizeof rep);
    REQUIRE(r == CUDA_SUCCESS, "%s: %d", what, r);
    return rep.value;
}

/* The result of a command answered with a u64. */
static int call_u64_rc(struct conn *c, uint16_t op, const void *body, size_t len)
{
    struct cumux_u64_reply rep = {0};
    return call_reply(c, op, body, len, &rep, sizeof rep);
}

static int load_image(struct conn *c, uint32_t ctx, const void *image, size_t size, uint64_t *handle)
{
    int fd = memfd_of(size);
    REQUIRE(pwrite(fd, image, size, 0) == (ssize_t)size, "write the image");
    send_fd_tag(c, CUMUX_MAGIC, fd);
    close(fd);
    struct cumux_module_load m = {.ctx = ctx, .kind = CUMUX_IMAGE_MODULE, .size = size};
    struct cumux_u64_reply rep = {0};
    int r = call_reply(c, CUMUX_OP_MODULE_LOAD, &m, sizeof m, &rep, sizeof rep);
    *handle = rep.value;
    return r;
}

static void session_open(struct session *s)
{
    memset(s, 0, sizeof *s);
    conn_open(&s->c);
    struct cumux_ctx_create cc = {.device = 0};
    struct cumux_ctx_reply cr;
    REQUIRE(call_reply(&s->c, CUMUX_OP_CTX_CREATE, &cc, sizeof cc, &cr, sizeof cr) == CUDA_SUCCESS, "CTX_CREATE");
    s->ctx = cr.ctx;
    s->stream = cr.legacy_stream;
    struct cumux_mem_alloc ma = {.ctx = s->ctx, .size = 4096};
    s->buf = call_u64(&s->c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, "MEM_ALLOC 4 KiB");
    FILE *f = fopen(fatbin, "rb");
    REQUIRE(f, "open %s", fatbin);
    static uint8_t image[8 << 20];
    size_t size = fread(image, 1, sizeof image, f);
    fclose(f);
    REQUIRE(size > 0 && size < sizeof image, "read %s", fatbin);
    uint64_t mod = 0;
    REQUIRE(load_image(&s->c, s->ctx, image, size, &mod) == CUDA_SUCCESS, "MODULE_LOAD of the test kernels");
    s->module = (uint32_t)mod;
}

static int sync_stream(struct session *s)
{
    struct handle_body h = {.handle = s->stream};
    return call(&s->c, CUMUX_OP_STREAM_SYNC, &h, sizeof h);
}

/* vec_add(a, b, c, n) on the session's buffer: 1024 floats, c = a + b in place (a = b = c). */
static void launch_vec_add(struct session *s, uint32_t function, uint32_t n)
{
    struct {
        struct cumux_launch l;
        uint64_t a, b, c;
        uint32_t n, pad;
    } msg = {.l = {.function = function, .stream = s->stream, .grid = {(n + 255) / 256, 1, 1}, .block = {256, 1, 1},
                   .param_bytes = 28},
             .a = s->buf, .b = s->buf, .c = s->buf, .n = n};
    put_msg(&s->c, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, &msg, sizeof msg);
}

static void session_close(struct session *s)
{
    conn_close(&s->c);
}

/* The server still answers the CLI and serves a well-behaved client. */
static void check_server_ok(const char *when)
{
    int n = -1;
    CHECK(test_cumux_status(cli, &n) == 0 && n >= 0, "%s: cumux status fails", when);
    struct session s;
    session_open(&s);
    struct symbol_msg sym = SYMBOL_MSG(s.module, "vec_add");
    uint8_t rep[sizeof(struct cumux_function_info)];
    CHECK(call_reply(&s.c, CUMUX_OP_MODULE_GET_FUNCTION, &sym, sizeof sym, rep, sizeof rep) == CUDA_SUCCESS,
          "%s: a new client cannot look up vec_add", when);
    struct cumux_function_info info;
    memcpy(&info, rep, sizeof info);
    launch_vec_add(&s, info.function, 1024);
    CHECK(sync_stream(&s) == CUDA_SUCCESS, "%s: a new client's launch fails", when);
    session_close(&s);
}

/* ---- a thread that writes random words into shared memory ---- */
struct scribbler {
    _Atomic int stop;
    volatile uint32_t *words;
    size_t nwords;
    uint64_t seed;
};

static void *scribble(void *arg)
{
    struct scribbler *sc = arg;
    uint64_t x = sc->seed | 1;
    while (!atomic_load_explicit(&sc->stop, memory_order_relaxed)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* Offsets near 2^31 or 2^32 send params + offset far outside the message; small ones point
         * at server heap right behind it. */
        uint32_t v = (x >> 32) & 1 ? (uint32_t)x : (uint32_t)(x >> 40) % 65536;
        sc->words[(x >> 16) % sc->nwords] = v;
    }
    return NULL;
}

/* ---- param-scribble ---- */
static void case_param_scribble(void)
{
    struct session s;
    session_open(&s);
    struct cumux_reply_slot *slot = &s.c.shm->replies[1];
    /* The (offset, size) pairs after struct cumux_function_info. */
    struct scribbler sc = {.words = (volatile uint32_t *)(slot->data + sizeof(struct cumux_function_info)),
                           .nwords = 8, .seed = 0x9e3779b97f4a7c15ull};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, scribble, &sc) == 0, "scribbler thread");
    struct symbol_msg sym = SYMBOL_MSG(s.module, "vec_add");
    int ok = 0;
    for (int i = 0; i < 2000 && sock_open(s.c.sock); i++) {
        uint8_t rep[sizeof(struct cumux_function_info)];
        if (call_reply(&s.c, CUMUX_OP_MODULE_GET_FUNCTION, &sym, sizeof sym, rep, sizeof rep) != CUDA_SUCCESS)
            continue;
        struct cumux_function_info info;
        memcpy(&info, rep, sizeof info);
        launch_vec_add(&s, info.function, 1024);
        if (i % 64 == 63)
            ok += sync_stream(&s) == CUDA_SUCCESS;
    }
    atomic_store(&sc.stop, 1);
    pthread_join(t, NULL);
    CHECK(sock_open(s.c.sock), "param-scribble: the server dropped a client that only raced its own reply slot");
    CHECK(sync_stream(&s) == CUDA_SUCCESS, "param-scribble: launches with the server's own layout failed");
    CHECK(ok > 0, "param-scribble: no launch batch succeeded");
    session_close(&s);
    check_server_ok("after param-scribble");
}

/* ---- span-wrap ---- */
static void expect_refused_at_sync(struct session *s, const char *what)
{
    int r = sync_stream(s);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "%s: next sync returned %d, expected INVALID_VALUE (%d)", what, r,
          CUDA_ERROR_INVALID_VALUE);
}

/* A node added to graph by op (GRAPH_ADD_MEMSET_NODE or GRAPH_ADD_MEMCPY_NODE), with no dependencies. */
static int graph_add(struct session *s, uint32_t graph, uint16_t op, const void *payload, size_t len)
{
    struct {
        struct cumux_graph_add_node n;
        uint8_t payload[sizeof(struct cumux_copy_2d) + sizeof(struct cumux_memset)];
    } msg = {.n = {.graph = graph}};
    memcpy(msg.payload, payload, len);
    struct cumux_u64_reply rep;
    return call_reply(&s->c, op, &msg, sizeof msg.n + len, &rep, sizeof rep);
}

static void case_span_wrap(void)
{
    struct session s;
    session_open(&s);
    const uint64_t pitch = 1ull << 33, rows = (1ull << 31) + 1; /* pitch * (rows - 1) = 2^64 */
    for (uint32_t es = 1; es <= 4; es *= 2) {
        struct cumux_memset m = {.stream = s.stream, .elem_size = es, .dst = s.buf, .pitch = pitch,
                                 .width = 4 / es, .height = rows, .value = 0x5a5a5a5a};
        put_msg(&s.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &m, sizeof m);
        expect_refused_at_sync(&s, "memset, pitch 2^33, 2^31+1 rows");
    }
    /* width * elem_size wraps: 2^62 elements of 4 bytes are 0 bytes. */
    struct cumux_memset m = {.stream = s.stream, .elem_size = 4, .dst = s.buf, .width = 1ull << 62, .height = 1};
    put_msg(&s.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &m, sizeof m);
    expect_refused_at_sync(&s, "memset of 2^62 4-byte elements");
    struct cumux_copy_2d cp = {.kind = CUMUX_COPY_DTOD, .stream = s.stream, .dst = s.buf, .dst_pitch = pitch,
                               .src = s.buf + 2048, .src_pitch = 0, .width = 4, .height = rows};
    int r = call(&s.c, CUMUX_OP_COPY_2D, &cp, sizeof cp);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "2-D copy, dst pitch 2^33, 2^31+1 rows: %d", r);
    cp.src_pitch = pitch;
    put_msg(&s.c, CUMUX_OP_COPY_2D, CUMUX_NO_REPLY, &cp, sizeof cp);
    expect_refused_at_sync(&s, "one-way 2-D copy, pitches 2^33, 2^31+1 rows");

    struct cumux_graph_create gc = {0};
    uint64_t graph = call_u64(&s.c, CUMUX_OP_GRAPH_CREATE, &gc, sizeof gc, "GRAPH_CREATE");
    struct cumux_memset node_ms = {.elem_size = 4, .dst = s.buf, .pitch = pitch, .width = 1, .height = rows};
    r = graph_add(&s, (uint32_t)graph, CUMUX_OP_GRAPH_ADD_MEMSET_NODE, &node_ms, sizeof node_ms);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "memset node, pitch 2^33, 2^31+1 rows: %d", r);
    node_ms = (struct cumux_memset){.elem_size = 4, .dst = s.buf, .width = 1ull << 62, .height = 1};
    r = graph_add(&s, (uint32_t)graph, CUMUX_OP_GRAPH_ADD_MEMSET_NODE, &node_ms, sizeof node_ms);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "memset node of 2^62 4-byte elements: %d", r);
    struct cumux_copy_2d node_cp = {.kind = CUMUX_COPY_DTOD, .dst = s.buf, .dst_pitch = pitch, .src = s.buf + 2048,
                                    .src_pitch = pitch, .width = 4, .height = rows};
    r = graph_add(&s, (uint32_t)graph, CUMUX_OP_GRAPH_ADD_MEMCPY_NODE, &node_cp, sizeof node_cp);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "memcpy node, pitches 2^33, 2^31+1 rows: %d", r);
    /* A well-formed memset node on the same buffer is still accepted. */
    node_ms = (struct cumux_memset){.elem_size = 4, .dst = s.buf, .pitch = 1024, .width = 256, .height = 4};
    r = graph_add(&s, (uint32_t)graph, CUMUX_OP_GRAPH_ADD_MEMSET_NODE, &node_ms, sizeof node_ms);
    CHECK(r == CUDA_SUCCESS, "a memset node of the whole 4 KiB buffer: %d", r);
    /* Dependency lists longer than the message holds, or absent. */
    struct cumux_graph_add_node many = {.graph = (uint32_t)graph, .ndeps = 100000};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_EMPTY_NODE, &many, sizeof many);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "an empty node with 100000 dependencies and none sent: %d", r);
    struct cumux_graph_add_deps deps = {.graph = (uint32_t)graph, .ndeps = 2};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_DEPS, &deps, sizeof deps);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_DEPS of 2 edges without their lists: %d", r);
    /* Arrays: regions whose ends wrap, a device side whose span wraps, textures over wrapping memory. */
    struct cumux_array_create ac = {.ctx = s.ctx, .format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = 16, .height = 16};
    uint32_t arr = (uint32_t)call_u64(&s.c, CUMUX_OP_ARRAY_CREATE, &ac, sizeof ac, "ARRAY_CREATE 16x16");
    const struct {
        struct cumux_copy_3d m;
        const char *what;
    } bad3d[] = {
        {{.stream = s.stream, .dst_array = arr, .src = s.buf, .src_pitch = 64, .src_height = 16,
          .dst_x = UINT64_MAX - 3, .width = 8, .height = 1, .depth = 1}, "array x + width wraps"},
        {{.stream = s.stream, .dst_array = arr, .src = s.buf, .src_pitch = 64, .src_height = 16,
          .dst_y = UINT64_MAX, .width = 4, .height = 2, .depth = 1}, "array y + height wraps"},
        {{.stream = s.stream, .dst_array = arr, .src = s.buf, .src_pitch = pitch, .src_height = rows,
          .width = 4, .height = 2, .depth = 2}, "device side: pitch x rows per slice wraps"},
        {{.stream = s.stream, .src_array = arr, .dst = s.buf, .dst_pitch = pitch, .dst_height = 1,
          .width = 4, .height = rows, .depth = 1}, "device side: 2^31+1 rows of pitch 2^33"},
        {{.stream = s.stream, .src_array = arr, .dst = s.buf + 4090, .dst_pitch = 64, .dst_height = 1,
          .width = 64, .height = 1, .depth = 1}, "device side past the buffer's end"},
        {{.stream = s.stream, .src = s.buf, .dst = s.buf + 64, .src_pitch = 64, .dst_pitch = 64, .width = 64,
          .height = 1, .depth = 1}, "no array on either side"},
    };
    for (size_t i = 0; i < sizeof bad3d / sizeof bad3d[0]; i++) {
        r = call(&s.c, CUMUX_OP_COPY_3D, &bad3d[i].m, sizeof bad3d[i].m);
        CHECK(r == CUDA_ERROR_INVALID_VALUE, "COPY_3D, %s: %d", bad3d[i].what, r);
    }
    struct cumux_tex_create tc = {.ctx = s.ctx, .res_type = CU_RESOURCE_TYPE_PITCH2D, .format = CU_AD_FORMAT_FLOAT,
                                  .channels = 1, .dev_ptr = s.buf, .width = 1, .height = rows, .pitch = pitch};
    struct cumux_tex_reply tr;
    r = call_reply(&s.c, CUMUX_OP_TEX_CREATE, &tc, sizeof tc, &tr, sizeof tr);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a pitched texture of 2^31+1 rows of 2^33: %d", r);
    tc = (struct cumux_tex_create){.ctx = s.ctx, .res_type = CU_RESOURCE_TYPE_LINEAR, .format = CU_AD_FORMAT_FLOAT,
                                   .channels = 1, .dev_ptr = s.buf + 2048, .size_bytes = 4096};
    r = call_reply(&s.c, CUMUX_OP_TEX_CREATE, &tc, sizeof tc, &tr, sizeof tr);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a linear texture running past the buffer: %d", r);
    /* The driver itself accepts a texture over any address (it faults only when a kernel fetches): the
     * server must refuse memory that is not the client's. */
    tc = (struct cumux_tex_create){.ctx = s.ctx, .res_type = CU_RESOURCE_TYPE_PITCH2D, .format = CU_AD_FORMAT_FLOAT,
                                   .channels = 1, .dev_ptr = s.buf + (1ull << 40), .width = 16, .height = 16,
                                   .pitch = 64};
    r = call_reply(&s.c, CUMUX_OP_TEX_CREATE, &tc, sizeof tc, &tr, sizeof tr);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a pitched texture over memory that is not the client's: %d", r);
    /* Stream memory operations: a word past the buffer, one far away, one misaligned. */
    uint64_t bad_words[] = {s.buf + 4096, s.buf + (1ull << 40), s.buf + 2};
    for (size_t i = 0; i < sizeof bad_words / sizeof bad_words[0]; i++) {
        struct cumux_stream_mem_op mo = {.stream = s.stream, .op = CU_STREAM_MEM_OP_WRITE_VALUE_32,
                                         .address = bad_words[i], .value = 1};
        put_msg(&s.c, CUMUX_OP_STREAM_MEM_OP, CUMUX_NO_REPLY, &mo, sizeof mo);
        expect_refused_at_sync(&s, "a stream write outside the client's buffer or misaligned");
    }
    /* A dma-buf of memory that is not the client's. */
    struct cumux_mem_range_handle rh = {.ptr = s.buf + (1ull << 40), .size = 4096,
                                        .handle_type = CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD};
    r = call(&s.c, CUMUX_OP_MEM_RANGE_HANDLE, &rh, sizeof rh);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a dma-buf of memory far from the buffer: %d", r);
    rh = (struct cumux_mem_range_handle){.ptr = s.buf + 2048, .size = 4096, .handle_type = CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD};
    r = call(&s.c, CUMUX_OP_MEM_RANGE_HANDLE, &rh, sizeof rh);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a dma-buf running past the buffer: %d", r);
    struct cumux_array_destroy ad = {.array = arr};
    CHECK(call(&s.c, CUMUX_OP_ARRAY_DESTROY, &ad, sizeof ad) == CUDA_SUCCESS, "ARRAY_DESTROY");
    CHECK(sync_stream(&s) == CUDA_SUCCESS, "span-wrap: the client's stream is not usable afterwards");
    session_close(&s);
    check_server_ok("after span-wrap");
}

/* ---- ptx-no-nul ---- */
static void case_ptx_no_nul(void)
{
    struct session s;
    session_open(&s);
    static uint8_t image[3 * 4096];
    memset(image, 'A', sizeof image);
    for (size_t size = 4096; size <= sizeof image; size += 4096) {
        uint64_t h = 0;
        int r = load_image(&s.c, s.ctx, image, size, &h);
        CHECK(r != CUDA_SUCCESS, "an image of %zu bytes of 'A' loaded as a module", size);
    }
    session_close(&s);
    check_server_ok("after ptx-no-nul");
}

/* ---- capture-free ---- */
static void case_capture_free(void)
{
    struct session s;
    session_open(&s);
    struct cumux_stream_create sc = {.ctx = s.ctx, .flags = CU_STREAM_NON_BLOCKING};
    struct cumux_ctx_reply sr;
    REQUIRE(call_reply(&s.c, CUMUX_OP_STREAM_CREATE, &sc, sizeof sc, &sr, sizeof sr) == CUDA_SUCCESS, "STREAM_CREATE");
    uint32_t stream = sr.ctx;
    struct cumux_mem_alloc ma = {.ctx = s.ctx, .size = 1 << 20};
    uint64_t a = call_u64(&s.c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, "MEM_ALLOC 1 MiB");
    uint64_t b = call_u64(&s.c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, "MEM_ALLOC 1 MiB");
    struct cumux_capture_begin cb = {.stream = stream, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    REQUIRE(call(&s.c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb) == CUDA_SUCCESS, "CAPTURE_BEGIN");
    struct cumux_mem_free_async fa = {.stream = stream, .ptr = a};
    put_msg(&s.c, CUMUX_OP_MEM_FREE_ASYNC, CUMUX_NO_REPLY, &fa, sizeof fa);
    struct cumux_mem_free mf = {.ptr = b};
    int r = call(&s.c, CUMUX_OP_MEM_FREE, &mf, sizeof mf);
    CHECK(r == CUDA_SUCCESS, "cuMemFree while another stream captures: %d", r);
    /* A captured allocation is the graph's: its address is the client's while the graph lives. */
    struct cumux_mem_alloc_async aa = {.stream = stream, .pool = 0, .size = 4096};
    struct cumux_mem_alloc_async_reply rep = {0};
    struct cumux_pool_default po = {.device = 0};
    aa.pool = (uint32_t)call_u64(&s.c, CUMUX_OP_POOL_DEFAULT, &po, sizeof po, "POOL_DEFAULT");
    r = call_reply(&s.c, CUMUX_OP_MEM_ALLOC_ASYNC, &aa, sizeof aa, &rep, sizeof rep);
    CHECK(r == CUDA_SUCCESS && rep.ptr && rep.graph == 1, "cuMemAllocAsync on a capturing stream: %d, graph %u", r,
          rep.graph);
    /* And one on a stream that joined the capture through an event (the capture is the first stream's),
     * which then joins back. */
    REQUIRE(call_reply(&s.c, CUMUX_OP_STREAM_CREATE, &sc, sizeof sc, &sr, sizeof sr) == CUDA_SUCCESS, "STREAM_CREATE");
    uint32_t joined = sr.ctx;
    struct cumux_event_create ec = {.ctx = s.ctx};
    uint32_t ev1 = (uint32_t)call_u64(&s.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "EVENT_CREATE");
    uint32_t ev2 = (uint32_t)call_u64(&s.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "EVENT_CREATE");
    struct cumux_event_record er = {.event = ev1, .stream = stream};
    put_msg(&s.c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
    struct cumux_stream_wait_event we = {.stream = joined, .event = ev1};
    put_msg(&s.c, CUMUX_OP_STREAM_WAIT_EVENT, CUMUX_NO_REPLY, &we, sizeof we);
    aa.stream = joined;
    struct cumux_mem_alloc_async_reply rep2 = {0};
    r = call_reply(&s.c, CUMUX_OP_MEM_ALLOC_ASYNC, &aa, sizeof aa, &rep2, sizeof rep2);
    CHECK(r == CUDA_SUCCESS && rep2.ptr && rep2.graph == 1, "cuMemAllocAsync on a stream that joined a capture: %d, "
          "graph %u", r, rep2.graph);
    er = (struct cumux_event_record){.event = ev2, .stream = joined};
    put_msg(&s.c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
    we = (struct cumux_stream_wait_event){.stream = stream, .event = ev2};
    put_msg(&s.c, CUMUX_OP_STREAM_WAIT_EVENT, CUMUX_NO_REPLY, &we, sizeof we);
    /* A stream memory operation in the capture (the fake driver cannot capture one: the capture fails). */
    struct cumux_stream_mem_op mo = {.stream = stream, .op = CU_STREAM_MEM_OP_WRITE_VALUE_32, .address = rep.ptr};
    put_msg(&s.c, CUMUX_OP_STREAM_MEM_OP, CUMUX_NO_REPLY, &mo, sizeof mo);
    struct cumux_u64_reply g;
    struct cumux_capture_end ce = {.stream = stream};
    r = call_reply(&s.c, CUMUX_OP_CAPTURE_END, &ce, sizeof ce, &g, sizeof g);
    /* The captured free was refused: the capture may end in error, as CUDA's does after a failed call. */
    CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
          "CAPTURE_END: %d", r);
    for (int k = 0; r != CUDA_SUCCESS && k < 2; k++) {
        /* The failed capture's graph went, and with it the addresses: no longer the client's to name. (The
         * refused captured free's error is reported first.) */
        (void)sync_stream(&s);
        uint64_t dst = k ? rep2.ptr : rep.ptr;
        struct cumux_memset m = {.stream = s.stream, .elem_size = 4, .dst = dst, .pitch = 4096, .width = 1024,
                                 .height = 1};
        put_msg(&s.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &m, sizeof m);
        int sr2 = sync_stream(&s);
        CHECK(sr2 == CUDA_ERROR_INVALID_VALUE, "a memset of a failed capture's graph allocation (%s): %d",
              k ? "the joined stream's" : "the capturing stream's", sr2);
    }
    /* The client goes with `a` still its own: the server must free it (with_server.sh --fake checks). */
    session_close(&s);
    check_server_ok("after capture-free");
}

/* ---- capture-global ---- */
static uint32_t vec_add_function(struct session *s)
{
    struct symbol_msg sym = SYMBOL_MSG(s->module, "vec_add");
    uint8_t rep[sizeof(struct cumux_function_info)];
    REQUIRE(call_reply(&s->c, CUMUX_OP_MODULE_GET_FUNCTION, &sym, sizeof sym, rep, sizeof rep) == CUDA_SUCCESS,
            "MODULE_GET_FUNCTION vec_add");
    struct cumux_function_info info;
    memcpy(&info, rep, sizeof info);
    return info.function;
}

/* A non-blocking stream of the session's context. */
static uint32_t new_stream(struct session *s, const char *what)
{
    struct cumux_stream_create sc = {.ctx = s->ctx, .flags = CU_STREAM_NON_BLOCKING};
    return (uint32_t)call_u64(&s->c, CUMUX_OP_STREAM_CREATE, &sc, sizeof sc, what);
}

static void case_capture_global(void)
{
    struct session a, b;
    session_open(&a);
    session_open(&b);
    uint32_t fa = vec_add_function(&a), fb = vec_add_function(&b);
    uint32_t captured = new_stream(&a, "A: STREAM_CREATE");
    struct cumux_capture_begin cb = {.stream = captured, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL};
    REQUIRE(call(&a.c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb) == CUDA_SUCCESS, "A: CAPTURE_BEGIN (global)");
    uint32_t a_legacy = a.stream;
    a.stream = captured;
    launch_vec_add(&a, fa, 1024); /* captured, not run */

    /* B, meanwhile: a kernel, an event after it, queried and waited for (unsafe calls in CUDA's sense). */
    struct cumux_event_create ec = {.ctx = b.ctx};
    uint32_t ev = (uint32_t)call_u64(&b.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "B: EVENT_CREATE");
    launch_vec_add(&b, fb, 1024);
    struct cumux_event_record er = {.event = ev, .stream = b.stream};
    put_msg(&b.c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
    struct cumux_event_query eq = {.event = ev};
    int r = call(&b.c, CUMUX_OP_EVENT_QUERY, &eq, sizeof eq);
    CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY, "B's cuEventQuery while A captures in global mode: %d", r);
    struct cumux_event_sync es = {.event = ev};
    r = call(&b.c, CUMUX_OP_EVENT_SYNC, &es, sizeof es);
    CHECK(r == CUDA_SUCCESS, "B's cuEventSynchronize while A captures in global mode: %d", r);
    CHECK(sync_stream(&b) == CUDA_SUCCESS, "B's stream after A's capture began");

    /* A's capture is intact. */
    struct cumux_capture_end ce = {.stream = captured};
    struct cumux_u64_reply g = {0};
    r = call_reply(&a.c, CUMUX_OP_CAPTURE_END, &ce, sizeof ce, &g, sizeof g);
    CHECK(r == CUDA_SUCCESS && g.value != 0, "A's capture ended with %d (B's calls invalidated it?)", r);
    a.stream = a_legacy;
    session_close(&b);
    session_close(&a);
    check_server_ok("after capture-global");
}

/* ---- capture-left ---- */
static void case_capture_left(void)
{
    struct session a;
    session_open(&a);
    uint32_t fa = vec_add_function(&a);
    uint32_t captured = new_stream(&a, "STREAM_CREATE");
    struct cumux_capture_begin cb = {.stream = captured, .mode = CU_STREAM_CAPTURE_MODE_GLOBAL};
    REQUIRE(call(&a.c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb) == CUDA_SUCCESS, "CAPTURE_BEGIN");
    a.stream = captured;
    launch_vec_add(&a, fa, 1024);
    struct cumux_capture_query q = {.stream = captured};
    uint8_t rep[256] = {0};
    uint32_t got = 0;
    int r = call_slot(&a.c, 1, CUMUX_OP_CAPTURE_GRAPH, &q, sizeof q, rep, sizeof rep, &got);
    struct cumux_capture_graph_reply info = {0};
    memcpy(&info, rep, sizeof info);
    CHECK(r == CUDA_SUCCESS && got >= sizeof info && info.graph != 0 && info.count == 1,
          "CAPTURE_GRAPH: %d, graph %u, %llu dependencies", r, info.graph, (unsigned long long)info.count);
    /* Destroying it (one-way) is refused: the capture still has it, under the same handle. */
    struct cumux_graph_destroy gd = {.graph = info.graph};
    put_msg(&a.c, CUMUX_OP_GRAPH_DESTROY, CUMUX_NO_REPLY, &gd, sizeof gd);
    struct cumux_capture_graph_reply again = {0};
    memset(rep, 0, sizeof rep);
    r = call_slot(&a.c, 1, CUMUX_OP_CAPTURE_GRAPH, &q, sizeof q, rep, sizeof rep, &got);
    memcpy(&again, rep, sizeof again);
    CHECK(r == CUDA_SUCCESS && again.graph == info.graph && again.status == CU_STREAM_CAPTURE_STATUS_ACTIVE,
          "the capture's graph after a destroy: %d, graph %u (was %u)", r, again.graph, info.graph);
    /* Dependencies that are not nodes of the capture's graph are refused. */
    struct {
        struct cumux_capture_update_deps m;
        uint32_t h[2];
    } ud = {.m = {.stream = captured, .flags = CU_STREAM_SET_CAPTURE_DEPENDENCIES, .count = 1}, .h = {info.graph}};
    r = call(&a.c, CUMUX_OP_CAPTURE_UPDATE_DEPS, &ud, sizeof ud);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a graph handle taken as a node of the capture: %d", r);
    /* A second capture whose stream is destroyed while it runs, its graph handed out: ended and freed. */
    uint32_t second = new_stream(&a, "STREAM_CREATE");
    cb.stream = second;
    REQUIRE(call(&a.c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb) == CUDA_SUCCESS, "CAPTURE_BEGIN (second)");
    a.stream = second;
    launch_vec_add(&a, fa, 1024);
    q.stream = second;
    r = call_slot(&a.c, 1, CUMUX_OP_CAPTURE_GRAPH, &q, sizeof q, rep, sizeof rep, &got);
    CHECK(r == CUDA_SUCCESS, "CAPTURE_GRAPH (second): %d", r);
    struct cumux_stream_destroy sd = {.stream = second};
    put_msg(&a.c, CUMUX_OP_STREAM_DESTROY, CUMUX_NO_REPLY, &sd, sizeof sd);
    a.stream = captured;
    session_close(&a); /* the first capture still running: the server ends it and frees its graph */
    check_server_ok("after capture-left");
}

/* ---- counts ---- */
/* Symbol names, the payload of MODULE_GET_FUNCTION and _GLOBAL: none, empty, without their NUL, as long as
 * the limit; then a long one (2 KiB, as cuDNN's CUTLASS kernels have) that the module lacks: the driver's
 * "not found". */
static void counts_symbol_names(struct session *s)
{
    static struct {
        struct cumux_module_symbol m;
        char name[CUMUX_NAME_MAX + 64];
    } sym;
    sym.m.module = s->module;
    static const uint16_t ops[2] = {CUMUX_OP_MODULE_GET_FUNCTION, CUMUX_OP_MODULE_GET_GLOBAL};
    static const size_t bad[4][2] = {{0, 0}, {8, 0}, {200, 200}, {CUMUX_NAME_MAX + 8, CUMUX_NAME_MAX}};
    uint8_t rep[sizeof(struct cumux_function_info) + 64];
    for (int o = 0; o < 2; o++) {
        for (int b = 0; b < 4; b++) { /* {payload bytes, of which 'x' before the NULs} */
            memset(sym.name, 0, sizeof sym.name);
            memset(sym.name, 'x', bad[b][1]);
            int r = call_reply(&s->c, ops[o], &sym, sizeof sym.m + bad[b][0], rep, sizeof rep);
            CHECK(r == CUDA_ERROR_INVALID_VALUE, "%s with a name of %zu bytes in %zu: %d",
                  o ? "MODULE_GET_GLOBAL" : "MODULE_GET_FUNCTION", bad[b][1], bad[b][0], r);
        }
        memset(sym.name, 0, sizeof sym.name);
        memset(sym.name, 'y', 2048);
        int r = call_reply(&s->c, ops[o], &sym, sizeof sym.m + 2056, rep, sizeof rep);
        CHECK(r == CUDA_ERROR_NOT_FOUND, "%s of a 2 KiB name the module lacks: %d",
              o ? "MODULE_GET_GLOBAL" : "MODULE_GET_FUNCTION", r);
    }
}

static void case_counts(void)
{
    struct session s;
    session_open(&s);
    /* JIT options said to follow, not sent. */
    struct cumux_link_create lc = {.ctx = s.ctx, .count = 1000};
    struct cumux_u64_reply rep;
    int r = call_reply(&s.c, CUMUX_OP_LINK_CREATE, &lc, sizeof lc, &rep, sizeof rep);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "LINK_CREATE of 1000 options, none sent: %d", r);
    lc.count = 0;
    uint32_t link = (uint32_t)call_u64(&s.c, CUMUX_OP_LINK_CREATE, &lc, sizeof lc, "LINK_CREATE");
    int fd = memfd_of(64);
    send_fd_tag(&s.c, CUMUX_MAGIC, fd);
    close(fd);
    struct cumux_module_load ml = {.ctx = s.ctx, .kind = CUMUX_IMAGE_MODULE, .size = 64, .noptions = 1000};
    r = call_reply(&s.c, CUMUX_OP_MODULE_LOAD, &ml, sizeof ml, &rep, sizeof rep);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "MODULE_LOAD with 1000 JIT options, none sent: %d", r);
    /* A link input larger than its file, one whose name has no end, a read of another size. */
    struct cumux_link_add la = {.link = link, .type = CU_JIT_INPUT_PTX, .size = 1 << 20};
    memcpy(la.name, "x.ptx", 6);
    fd = memfd_of(64);
    send_fd_tag(&s.c, CUMUX_MAGIC, fd);
    close(fd);
    r = call(&s.c, CUMUX_OP_LINK_ADD, &la, sizeof la);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "LINK_ADD of 1 MiB from a 64-byte file: %d", r);
    la.size = 64;
    memset(la.name, 'n', sizeof la.name);
    fd = memfd_of(64);
    send_fd_tag(&s.c, CUMUX_MAGIC, fd);
    close(fd);
    r = call(&s.c, CUMUX_OP_LINK_ADD, &la, sizeof la);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "LINK_ADD whose name has no NUL: %d", r);
    struct cumux_link_read rd = {.link = link, .size = 16};
    fd = memfd_of(16);
    send_fd_tag(&s.c, CUMUX_MAGIC, fd);
    close(fd);
    r = call(&s.c, CUMUX_OP_LINK_READ, &rd, sizeof rd);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "LINK_READ before anything was linked: %d", r);
    struct cumux_link_ref lr = {.link = link};
    CHECK(call(&s.c, CUMUX_OP_LINK_DESTROY, &lr, sizeof lr) == CUDA_SUCCESS, "LINK_DESTROY");
    /* Tensor map ranks the message's arrays cannot hold. */
    struct cumux_tensor_map tm;
    struct cumux_tensor_map_tiled tt = {.data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32, .rank = 6, .global_address = s.buf};
    r = call_reply(&s.c, CUMUX_OP_TENSOR_MAP_ENCODE_TILED, &tt, sizeof tt, &tm, sizeof tm);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a tiled tensor map of rank 6: %d", r);
    tt.rank = UINT32_MAX;
    r = call_reply(&s.c, CUMUX_OP_TENSOR_MAP_ENCODE_TILED, &tt, sizeof tt, &tm, sizeof tm);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a tiled tensor map of rank 2^32-1: %d", r);
    struct cumux_tensor_map_im2col ti = {.data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32, .rank = 2, .global_address = s.buf};
    r = call_reply(&s.c, CUMUX_OP_TENSOR_MAP_ENCODE_IM2COL, &ti, sizeof ti, &tm, sizeof tm);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "an im2col tensor map of rank 2: %d", r);
    /* This session's graph commands: dependencies said to follow, not sent; a wait flag out of range. */
    struct cumux_stream_create sc = {.ctx = s.ctx, .flags = CU_STREAM_NON_BLOCKING};
    uint32_t st = (uint32_t)call_u64(&s.c, CUMUX_OP_STREAM_CREATE, &sc, sizeof sc, "STREAM_CREATE");
    struct cumux_graph_create gc = {0};
    uint32_t graph = (uint32_t)call_u64(&s.c, CUMUX_OP_GRAPH_CREATE, &gc, sizeof gc, "GRAPH_CREATE");
    struct cumux_event_create ec = {.ctx = s.ctx};
    uint32_t ev = (uint32_t)call_u64(&s.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "EVENT_CREATE");
    struct cumux_graph_add_event_node en = {.graph = graph, .ndeps = 1000, .event = ev};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_EVENT_NODE, &en, sizeof en);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_EVENT_NODE after 1000 nodes, none sent: %d", r);
    en = (struct cumux_graph_add_event_node){.graph = graph, .event = ev, .wait = 7};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_EVENT_NODE, &en, sizeof en);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_EVENT_NODE with wait 7: %d", r);
    struct cumux_graph_add_deps gd = {.graph = graph, .ndeps = 1000};
    r = call(&s.c, CUMUX_OP_GRAPH_REMOVE_DEPS, &gd, sizeof gd);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_REMOVE_DEPS of 1000 edges, none sent: %d", r);
    struct cumux_capture_begin_to_graph ct = {.stream = st, .graph = graph, .ndeps = 1000};
    r = call(&s.c, CUMUX_OP_CAPTURE_BEGIN_TO_GRAPH, &ct, sizeof ct);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "CAPTURE_BEGIN_TO_GRAPH after 1000 nodes, none sent: %d", r);
    struct cumux_stream_mem_op mo = {.stream = st, .op = 99, .address = s.buf};
    put_msg(&s.c, CUMUX_OP_STREAM_MEM_OP, CUMUX_NO_REPLY, &mo, sizeof mo);
    /* A free node of memory that is not a graph's; a conditional node whose handle was never made for the
     * graph; a body count past what the answer holds. */
    struct cumux_graph_add_mem_free_node fn = {.graph = graph, .dptr = s.buf};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_MEM_FREE_NODE, &fn, sizeof fn);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_MEM_FREE_NODE of an ordinary allocation: %d", r);
    struct cumux_graph_add_cond_node cn = {.graph = graph, .cond = 0x1234, .type = CU_GRAPH_COND_TYPE_IF, .size = 1};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_COND_NODE, &cn, sizeof cn);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_COND_NODE with a handle not made for the graph: %d", r);
    struct cumux_graph_cond_handle ch = {.graph = graph, .default_value = 1};
    struct cumux_u64_reply hv = {0};
    REQUIRE(call_reply(&s.c, CUMUX_OP_GRAPH_COND_HANDLE, &ch, sizeof ch, &hv, sizeof hv) == CUDA_SUCCESS, "GRAPH_COND_HANDLE");
    cn = (struct cumux_graph_add_cond_node){.graph = graph, .cond = hv.value, .type = CU_GRAPH_COND_TYPE_SWITCH,
                                            .size = 1u << 20};
    r = call(&s.c, CUMUX_OP_GRAPH_ADD_COND_NODE, &cn, sizeof cn);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "GRAPH_ADD_COND_NODE of 2^20 bodies: %d", r);
    /* Capture dependencies said to follow, not sent (a capture whose graph was handed out). */
    struct cumux_capture_begin cb = {.stream = st, .mode = CU_STREAM_CAPTURE_MODE_RELAXED};
    REQUIRE(call(&s.c, CUMUX_OP_CAPTURE_BEGIN, &cb, sizeof cb) == CUDA_SUCCESS, "CAPTURE_BEGIN");
    struct cumux_capture_query q = {.stream = st};
    uint8_t cg[256] = {0};
    uint32_t got = 0;
    CHECK(call_slot(&s.c, 1, CUMUX_OP_CAPTURE_GRAPH, &q, sizeof q, cg, sizeof cg, &got) == CUDA_SUCCESS,
          "CAPTURE_GRAPH");
    struct cumux_capture_update_deps ud = {.stream = st, .flags = CU_STREAM_SET_CAPTURE_DEPENDENCIES, .count = 1000};
    r = call(&s.c, CUMUX_OP_CAPTURE_UPDATE_DEPS, &ud, sizeof ud);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "CAPTURE_UPDATE_DEPS of 1000 nodes, none sent: %d", r);
    ud.count = 0;
    ud.flags = 7;
    r = call(&s.c, CUMUX_OP_CAPTURE_UPDATE_DEPS, &ud, sizeof ud);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "CAPTURE_UPDATE_DEPS with flags 7: %d", r);
    counts_symbol_names(&s);
    session_close(&s); /* the capture still running */
    check_server_ok("after counts");
}

/* ---- wait-orphan: a client goes while its streams wait on its memory ---- */
static void mem_op(struct session *s, uint32_t stream, uint32_t op, uint64_t address, uint64_t value, uint32_t flags)
{
    struct cumux_stream_mem_op mo = {.stream = stream, .op = op, .address = address, .value = value, .flags = flags};
    put_msg(&s->c, CUMUX_OP_STREAM_MEM_OP, CUMUX_NO_REPLY, &mo, sizeof mo);
}

/* Clients that went are no longer listed within 10 s (their streams' waits released, their cleanup done):
 * `left` remain. */
static void expect_clients_left(int left, const char *who)
{
    int n = -1;
    for (int i = 0; i < 100 && n != left; i++) {
        if (test_cumux_status(cli, &n) != 0)
            n = -1;
        if (n != left)
            usleep(100000);
    }
    CHECK(n == left, "%s is still listed 10 s later (%d clients)", who, n);
}

static void expect_clients_gone(const char *who)
{
    expect_clients_left(0, who);
}

static void case_wait_orphan(void)
{
    struct session a;
    session_open(&a);
    uint32_t fa = vec_add_function(&a);
    uint32_t st[4];
    for (int i = 0; i < 4; i++)
        st[i] = new_stream(&a, "STREAM_CREATE");
    /* The words waited on: 64 zero bytes of memory of their own (the kernels queued behind the waits work
     * on the session's buffer). */
    struct cumux_mem_alloc ma = {.ctx = a.ctx, .size = 64};
    uint64_t words = call_u64(&a.c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, "MEM_ALLOC 64 bytes");
    for (uint64_t off = 0; off < 64; off += 8)
        mem_op(&a, st[0], CU_STREAM_MEM_OP_WRITE_VALUE_64, words + off, 0, 0);
    struct handle_body h = {.handle = st[0]};
    REQUIRE(call(&a.c, CUMUX_OP_STREAM_SYNC, &h, sizeof h) == CUDA_SUCCESS, "zeroing the words");
    /* Conditions no value meets are refused (at the stream's next synchronization: one-way). */
    mem_op(&a, st[0], CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 0, CU_STREAM_WAIT_VALUE_AND);
    int r = call(&a.c, CUMUX_OP_STREAM_SYNC, &h, sizeof h);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a wait for (x & 0) != 0: %d", r);
    mem_op(&a, st[0], CU_STREAM_MEM_OP_WAIT_VALUE_64, words, UINT64_MAX, CU_STREAM_WAIT_VALUE_NOR);
    r = call(&a.c, CUMUX_OP_STREAM_SYNC, &h, sizeof h);
    CHECK(r == CUDA_ERROR_INVALID_VALUE, "a wait for ~(x | ~0) != 0: %d", r);
    /* Waits nobody will satisfy, with work queued behind them; GEQ twice on one word (the later value
     * must be the one written), each condition on a word of its own. */
    mem_op(&a, st[0], CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 5, CU_STREAM_WAIT_VALUE_GEQ);
    mem_op(&a, st[0], CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 9, CU_STREAM_WAIT_VALUE_GEQ);
    mem_op(&a, st[0], CU_STREAM_MEM_OP_WAIT_VALUE_32, words, 7, CU_STREAM_WAIT_VALUE_GEQ);
    mem_op(&a, st[1], CU_STREAM_MEM_OP_WAIT_VALUE_32, words + 8, 7, CU_STREAM_WAIT_VALUE_EQ);
    mem_op(&a, st[2], CU_STREAM_MEM_OP_WAIT_VALUE_32, words + 16, 0x10, CU_STREAM_WAIT_VALUE_AND);
    mem_op(&a, st[3], CU_STREAM_MEM_OP_WAIT_VALUE_64, words + 24, 0, CU_STREAM_WAIT_VALUE_GEQ);
    mem_op(&a, st[3], CU_STREAM_MEM_OP_WAIT_VALUE_64, words + 32, 0, CU_STREAM_WAIT_VALUE_NOR); /* met */
    mem_op(&a, st[3], CU_STREAM_MEM_OP_WAIT_VALUE_64, words + 32, ~(uint64_t)0 >> 1, CU_STREAM_WAIT_VALUE_EQ);
    for (int i = 0; i < 4; i++) {
        a.stream = st[i];
        launch_vec_add(&a, fa, 1024);
    }
    struct cumux_stream_query q = {.stream = st[1]};
    r = call(&a.c, CUMUX_OP_STREAM_QUERY, &q, sizeof q);
    CHECK(r == CUDA_ERROR_NOT_READY, "a stream waiting for a word nobody wrote: %d", r);
    /* It goes: its streams must finish (the wrapper then finds all it held freed, and no client left). */
    session_close(&a);
    expect_clients_gone("the client that went with its streams waiting");
    check_server_ok("after wait-orphan");
}

/* ---- hostfn-never: host functions the client never runs, a synchronize waiting for them, and it goes ---- */
static void case_hostfn_never(void)
{
    struct session a;
    session_open(&a);
    uint32_t fa = vec_add_function(&a);
    uint32_t st = new_stream(&a, "STREAM_CREATE");
    /* Its own stream and the legacy one each wait for a function nobody will run, work queued behind; a
     * synchronize of its own stream is asked for (one way: no answer will come), and the client goes. */
    uint32_t streams[2] = {st, a.stream};
    for (int i = 0; i < 2; i++) {
        struct cumux_host_func hf = {.stream = streams[i], .id = 1 + (uint64_t)i};
        put_msg(&a.c, CUMUX_OP_HOST_FUNC, CUMUX_NO_REPLY, &hf, sizeof hf);
        a.stream = streams[i];
        launch_vec_add(&a, fa, 1024);
    }
    struct handle_body h = {.handle = st};
    put_msg(&a.c, CUMUX_OP_STREAM_SYNC, CUMUX_NO_REPLY, &h, sizeof h);
    usleep(200000); /* its worker is in the synchronize by now */
    session_close(&a);
    expect_clients_gone("the client that went with a synchronize waiting for its host functions");
    check_server_ok("after hostfn-never");
}

/* ---- vmm-foreign: one client's VMM objects are out of another's reach ---- */
static void case_vmm_foreign(void)
{
    struct session a, b;
    session_open(&a);
    session_open(&b);
    struct cumux_vmm_granularity vg = {.device = 0, .option = CU_MEM_ALLOC_GRANULARITY_MINIMUM};
    uint64_t gran = call_u64(&a.c, CUMUX_OP_VMM_GRANULARITY, &vg, sizeof vg, "VMM_GRANULARITY");
    struct cumux_vmm_reserve vr = {.size = 2 * gran};
    uint64_t ra = call_u64(&a.c, CUMUX_OP_VMM_RESERVE, &vr, sizeof vr, "A: VMM_RESERVE");
    struct cumux_vmm_create vc = {.device = 0, .size = gran};
    uint64_t ha = call_u64(&a.c, CUMUX_OP_VMM_CREATE, &vc, sizeof vc, "A: VMM_CREATE");
    uint64_t hb = call_u64(&b.c, CUMUX_OP_VMM_CREATE, &vc, sizeof vc, "B: VMM_CREATE");
    struct cumux_vmm_map vm = {.ptr = ra, .size = gran, .alloc = (uint32_t)ha};
    REQUIRE(call(&a.c, CUMUX_OP_VMM_MAP, &vm, sizeof vm) == CUDA_SUCCESS, "A: VMM_MAP");
    struct cumux_vmm_set_access va = {.ptr = ra, .size = gran, .device = 0, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REQUIRE(call(&a.c, CUMUX_OP_VMM_SET_ACCESS, &va, sizeof va) == CUDA_SUCCESS, "A: VMM_SET_ACCESS");
    /* B: its own allocation into A's reservation (free and mapped parts), A's allocation into anything. */
    struct cumux_vmm_map bm = {.ptr = ra + gran, .size = gran, .alloc = (uint32_t)hb};
    CHECK(call(&b.c, CUMUX_OP_VMM_MAP, &bm, sizeof bm) == CUDA_ERROR_INVALID_VALUE, "B mapped into A's reservation");
    bm.ptr = ra;
    CHECK(call(&b.c, CUMUX_OP_VMM_MAP, &bm, sizeof bm) == CUDA_ERROR_INVALID_VALUE, "B mapped over A's mapping");
    bm.alloc = (uint32_t)ha;
    CHECK(call(&b.c, CUMUX_OP_VMM_MAP, &bm, sizeof bm) != CUDA_SUCCESS, "B used A's allocation handle");
    /* B: A's mapping is not B's to unmap, grant access to, free, write or release. */
    struct cumux_vmm_unmap vu = {.ptr = ra, .size = gran};
    CHECK(call(&b.c, CUMUX_OP_VMM_UNMAP, &vu, sizeof vu) == CUDA_ERROR_INVALID_VALUE, "B unmapped A's mapping");
    CHECK(call(&b.c, CUMUX_OP_VMM_SET_ACCESS, &va, sizeof va) == CUDA_ERROR_INVALID_VALUE, "B set access on A's");
    struct cumux_vmm_address_free vf = {.ptr = ra, .size = 2 * gran};
    CHECK(call(&b.c, CUMUX_OP_VMM_ADDRESS_FREE, &vf, sizeof vf) == CUDA_ERROR_INVALID_VALUE, "B freed A's reservation");
    struct cumux_memset ms = {.stream = b.stream, .elem_size = 4, .dst = ra, .width = 16, .height = 1, .value = 1};
    put_msg(&b.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    expect_refused_at_sync(&b, "B's memset of A's mapped memory");
    /* A's own: a reservation with a mapping in it cannot be freed, a mapping past the allocation's end
     * cannot be made, an offset that wraps is refused. */
    CHECK(call(&a.c, CUMUX_OP_VMM_ADDRESS_FREE, &vf, sizeof vf) == CUDA_ERROR_INVALID_VALUE,
          "A freed its reservation with a mapping in it");
    struct cumux_vmm_map wrap = {.ptr = ra + gran, .size = gran, .offset = UINT64_MAX - gran + 2, .alloc = (uint32_t)ha};
    CHECK(call(&a.c, CUMUX_OP_VMM_MAP, &wrap, sizeof wrap) == CUDA_ERROR_NOT_SUPPORTED, "A mapped with a wrapping offset");
    /* A descriptor the server never gave out imports nothing. */
    int stray = memfd_of(4096);
    send_fd_tag(&b.c, CUMUX_MAGIC, stray);
    close(stray);
    struct cumux_vmm_import vi = {0};
    struct cumux_vmm_import_reply vrep;
    CHECK(call_reply(&b.c, CUMUX_OP_VMM_IMPORT, &vi, sizeof vi, &vrep, sizeof vrep) == CUDA_ERROR_INVALID_VALUE,
          "B imported a descriptor nobody exported");
    /* Both go with everything mapped: the server frees it all (with_server.sh --fake checks the counts). */
    session_close(&b);
    session_close(&a);
    check_server_ok("after vmm-foreign");
}

/* ---- ipc-owner-frees: memory others opened outlives its owner's free and exit ---- */
static void case_resume_claims(void)
{
    struct session victim, plain;
    session_open(&victim);
    session_open(&plain);
    struct {
        struct cumux_resume_memory m;
        struct cumux_resume_range r[2];
    } msg = {.m = {.count = 1}, .r = {{.ptr = victim.buf, .size = 4096, .gpu = 0}, {.ptr = plain.buf, .size = 4096}}};
    size_t one = sizeof msg.m + sizeof msg.r[0];
    /* Not come back after a worker change: nothing to take back. */
    CHECK(call_u64_rc(&plain.c, CUMUX_OP_RESUME_MEMORY, &msg, one) == CUDA_ERROR_INVALID_VALUE,
          "RESUME_MEMORY from a client that did not resume was not refused");
    /* Come back with a made-up token (no chunk of any worker is its own). */
    struct conn thief;
    conn_open_as(&thief, CUMUX_HELLO_RESUME, 0x5eed5eed5eed5eedull);
    msg.m.count = 2; /* more than the payload holds */
    CHECK(call_u64_rc(&thief, CUMUX_OP_RESUME_MEMORY, &msg, one) == CUDA_ERROR_INVALID_VALUE,
          "RESUME_MEMORY counting 2 ranges with 1 sent was not refused");
    msg.m.count = UINT32_MAX; /* count x size must not wrap to the payload's length */
    CHECK(call_u64_rc(&thief, CUMUX_OP_RESUME_MEMORY, &msg, sizeof msg) == CUDA_ERROR_INVALID_VALUE,
          "RESUME_MEMORY counting 2^32-1 ranges was not refused");
    msg.m.count = 2;
    struct cumux_u64_reply rep = {.value = 99};
    CHECK(call_reply(&thief, CUMUX_OP_RESUME_MEMORY, &msg, sizeof msg, &rep, sizeof rep) == CUDA_SUCCESS &&
              rep.value == 0,
          "RESUME_MEMORY of other clients' buffers took back %llu", (unsigned long long)rep.value);
    struct cumux_mem_free mf = {.ptr = victim.buf};
    CHECK(call(&thief, CUMUX_OP_MEM_FREE, &mf, sizeof mf) == CUDA_ERROR_INVALID_VALUE,
          "the resumed thief could free another client's buffer");
    /* The buffer is still the victim's: it writes and reads it. */
    struct cumux_memset ms = {.stream = victim.stream, .elem_size = 4, .dst = victim.buf, .width = 1024, .height = 1,
                              .value = 0x1234};
    put_msg(&victim.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    CHECK(sync_stream(&victim) == CUDA_SUCCESS, "the victim's buffer after the claims");
    conn_close(&thief);
    session_close(&plain);
    session_close(&victim);
    check_server_ok("after RESUME_MEMORY claims");
}

static void case_ipc_owner_frees(void)
{
    struct session a, b, x;
    session_open(&a);
    session_open(&b);
    struct cumux_ipc_get_mem_handle g = {.ptr = a.buf};
    struct cumux_ipc_mem_handle ha;
    REQUIRE(call_reply(&a.c, CUMUX_OP_IPC_GET_MEM_HANDLE, &g, sizeof g, &ha, sizeof ha) == CUDA_SUCCESS, "A: export");
    CHECK(ha.base == a.buf && ha.size == 4096 && ha.token != 0, "export of A's buffer: base %#llx size %llu",
          (unsigned long long)ha.base, (unsigned long long)ha.size);
    struct cumux_ipc_open_mem_handle o = {.token = ha.token};
    struct cumux_ipc_mem_handle hb;
    CHECK(call_reply(&a.c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &o, sizeof o, &hb, sizeof hb) == CUDA_ERROR_INVALID_CONTEXT,
          "A opened its own export");
    REQUIRE(call_reply(&b.c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &o, sizeof o, &hb, sizeof hb) == CUDA_SUCCESS, "B: open");
    CHECK(hb.base == a.buf, "B got %#llx, A's buffer is at %#llx", (unsigned long long)hb.base,
          (unsigned long long)a.buf);
    struct cumux_ipc_open_mem_handle none = {.token = ha.token ^ 1};
    CHECK(call_reply(&b.c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &none, sizeof none, &hb, sizeof hb) == CUDA_ERROR_INVALID_VALUE,
          "B opened a token nobody exported");
    /* An interprocess event of A's that B opened outlives A's destroying it. An ordinary event is not
     * exported. */
    struct cumux_event_create ec = {.ctx = a.ctx, .flags = CU_EVENT_DISABLE_TIMING};
    struct cumux_ipc_get_event_handle ge = {.event = (uint32_t)call_u64(&a.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "A: event")};
    CHECK(call(&a.c, CUMUX_OP_IPC_GET_EVENT_HANDLE, &ge, sizeof ge) == CUDA_ERROR_INVALID_VALUE,
          "A exported an event made without CU_EVENT_INTERPROCESS");
    ec.flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    ge.event = (uint32_t)call_u64(&a.c, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, "A: interprocess event");
    struct cumux_ipc_open_event_handle oe = {.ctx = b.ctx, .token = call_u64(&a.c, CUMUX_OP_IPC_GET_EVENT_HANDLE, &ge, sizeof ge, "A: export the event")};
    uint32_t bev = (uint32_t)call_u64(&b.c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &oe, sizeof oe, "B: open the event");
    struct handle_body evd = {.handle = ge.event};
    put_msg(&a.c, CUMUX_OP_EVENT_DESTROY, CUMUX_NO_REPLY, &evd, sizeof evd);
    check_server_ok("A destroyed the event B holds");
    struct cumux_event_record er = {.event = bev, .stream = b.stream};
    put_msg(&b.c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
    struct handle_body bs = {.handle = bev};
    CHECK(call(&b.c, CUMUX_OP_EVENT_SYNC, &bs, sizeof bs) == CUDA_SUCCESS, "B's record and sync of the event A destroyed");
    oe.token ^= 1;
    CHECK(call_u64_rc(&b.c, CUMUX_OP_IPC_OPEN_EVENT_HANDLE, &oe, sizeof oe) == CUDA_ERROR_INVALID_VALUE,
          "B opened an event token nobody exported");
    /* A frees it and goes: B still writes it (the fake driver's oracle would stop the server otherwise). */
    struct cumux_mem_free mf = {.ptr = a.buf};
    CHECK(call(&a.c, CUMUX_OP_MEM_FREE, &mf, sizeof mf) == CUDA_SUCCESS, "A: free of exported memory");
    session_open(&x);
    CHECK(call_reply(&x.c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &o, sizeof o, &hb, sizeof hb) == CUDA_ERROR_INVALID_VALUE,
          "a third client opened memory its owner had freed");
    session_close(&x);
    struct cumux_memset ms = {.stream = b.stream, .elem_size = 4, .dst = a.buf, .width = 1024, .height = 1, .value = 7};
    put_msg(&b.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    CHECK(sync_stream(&b) == CUDA_SUCCESS, "B's memset of memory its owner freed while B holds it open");
    session_close(&a);
    expect_clients_left(1, "A, which exported memory B holds open,"); /* its cleanup done */
    put_msg(&b.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    CHECK(sync_stream(&b) == CUDA_SUCCESS, "B's memset after the owner went");
    struct cumux_ipc_close_mem_handle cl = {.ptr = ha.base};
    CHECK(call(&b.c, CUMUX_OP_IPC_CLOSE_MEM_HANDLE, &cl, sizeof cl) == CUDA_SUCCESS, "B: close");
    CHECK(call(&b.c, CUMUX_OP_IPC_CLOSE_MEM_HANDLE, &cl, sizeof cl) == CUDA_ERROR_INVALID_VALUE, "B closed twice");
    put_msg(&b.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    expect_refused_at_sync(&b, "B's memset after it closed the memory");
    /* Again with the owner staying: A2 frees what B holds open, B writes it and closes it, and A2, still
     * there, gets it back (with CUMUX_CONTAIN=1 memory in A2's chunk, freed by A2's worker at B's ask). */
    struct session a2;
    session_open(&a2);
    g.ptr = a2.buf;
    REQUIRE(call_reply(&a2.c, CUMUX_OP_IPC_GET_MEM_HANDLE, &g, sizeof g, &ha, sizeof ha) == CUDA_SUCCESS, "A2: export");
    o.token = ha.token;
    REQUIRE(call_reply(&b.c, CUMUX_OP_IPC_OPEN_MEM_HANDLE, &o, sizeof o, &hb, sizeof hb) == CUDA_SUCCESS, "B: open A2's");
    mf.ptr = a2.buf;
    CHECK(call(&a2.c, CUMUX_OP_MEM_FREE, &mf, sizeof mf) == CUDA_SUCCESS, "A2: free of exported memory");
    ms.dst = a2.buf;
    put_msg(&b.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms, sizeof ms);
    CHECK(sync_stream(&b) == CUDA_SUCCESS, "B's memset of memory A2 freed while B holds it open");
    cl.ptr = a2.buf;
    CHECK(call(&b.c, CUMUX_OP_IPC_CLOSE_MEM_HANDLE, &cl, sizeof cl) == CUDA_SUCCESS, "B: close A2's");
    struct cumux_mem_alloc ma = {.ctx = a2.ctx, .size = 4096};
    for (int i = 0; i < 3; i++) { /* the freed block back in A2's hands; its new memory is its own */
        uint64_t p = call_u64(&a2.c, CUMUX_OP_MEM_ALLOC, &ma, sizeof ma, "A2: MEM_ALLOC after B's close");
        struct cumux_memset ms2 = {.stream = a2.stream, .elem_size = 4, .dst = p, .width = 1024, .height = 1, .value = 9};
        put_msg(&a2.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &ms2, sizeof ms2);
        CHECK(sync_stream(&a2) == CUDA_SUCCESS, "A2's memset of its new memory");
    }
    session_close(&a2);
    session_close(&b);
    check_server_ok("after ipc-owner-frees"); /* and with_server.sh --fake: the memory is freed */
}

/* ---- scribble-all ---- */
static pid_t bystander_start(void)
{
    pid_t p = fork();
    REQUIRE(p >= 0, "fork");
    if (p == 0) {
        execvp(bystander[0], bystander);
        _exit(127);
    }
    return p;
}

static void case_scribble_all(void)
{
    uint64_t end = cumux_now_ns() + 6000000000ull;
    int bystander_runs = 0, bystander_failures = 0, sessions = 0;
    pid_t by = bystander ? bystander_start() : -1;
    while (cumux_now_ns() < end) {
        struct session s;
        session_open(&s);
        sessions++;
        /* Everything the server reads or writes besides the ring (whose corruption test_malformed covers,
         * and which the scribbler's own client needs to keep working): doorbell, staging states, host
         * function words, reply slots. */
        size_t from = offsetof(struct cumux_shm, doorbell), to = offsetof(struct cumux_shm, ring);
        struct scribbler sc = {.words = (volatile uint32_t *)((uint8_t *)s.c.shm + from), .nwords = (to - from) / 4,
                               .seed = cumux_now_ns()};
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, scribble, &sc) == 0, "scribbler thread");
        struct symbol_msg sym = SYMBOL_MSG(s.module, "vec_add");
        for (int i = 0; i < 200 && sock_open(s.c.sock) && cumux_now_ns() < end; i++) {
            uint8_t rep[sizeof(struct cumux_function_info)];
            if (call_reply(&s.c, CUMUX_OP_MODULE_GET_FUNCTION, &sym, sizeof sym, rep, sizeof rep) == CUDA_SUCCESS) {
                struct cumux_function_info info;
                memcpy(&info, rep, sizeof info);
                launch_vec_add(&s, info.function, 1024);
            }
            struct cumux_memset m = {.stream = s.stream, .elem_size = 4, .dst = s.buf, .width = 1024, .height = 1};
            put_msg(&s.c, CUMUX_OP_MEMSET, CUMUX_NO_REPLY, &m, sizeof m);
            sync_stream(&s);
            if (by > 0) {
                int st;
                if (waitpid(by, &st, WNOHANG) == by) {
                    bystander_runs++;
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        bystander_failures++;
                        fprintf(stderr, "bystander run %d failed (status 0x%x)\n", bystander_runs, st);
                    }
                    by = bystander_start();
                }
            }
        }
        atomic_store(&sc.stop, 1);
        pthread_join(t, NULL);
        session_close(&s);
    }
    if (by > 0) {
        int st;
        REQUIRE(waitpid(by, &st, 0) == by, "wait for the bystander");
        bystander_runs++;
        bystander_failures += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    printf("scribble-all: %d sessions; bystander: %d runs, %d failed\n", sessions, bystander_runs, bystander_failures);
    CHECK(!bystander || bystander_runs > 0, "the bystander never finished");
    CHECK(bystander_failures == 0, "%d bystander runs failed while a client scribbled its shared memory",
          bystander_failures);
    check_server_ok("after scribble-all");
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: test_hostile CUMUX_CLI FATBIN CASE... [-- BYSTANDER_CMD ARGS...]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    cli = argv[1];
    fatbin = argv[2];
    int ncases = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            bystander = i + 1 < argc ? &argv[i + 1] : NULL;
            break;
        }
        ncases++;
    }
    for (int i = 3; i < 3 + ncases; i++) {
        const char *name = argv[i];
        printf("case %s\n", name);
        fflush(stdout);
        if (!strcmp(name, "param-scribble"))
            case_param_scribble();
        else if (!strcmp(name, "span-wrap"))
            case_span_wrap();
        else if (!strcmp(name, "ptx-no-nul"))
            case_ptx_no_nul();
        else if (!strcmp(name, "capture-free"))
            case_capture_free();
        else if (!strcmp(name, "capture-global"))
            case_capture_global();
        else if (!strcmp(name, "capture-left"))
            case_capture_left();
        else if (!strcmp(name, "counts"))
            case_counts();
        else if (!strcmp(name, "vmm-foreign"))
            case_vmm_foreign();
        else if (!strcmp(name, "ipc-owner-frees"))
            case_ipc_owner_frees();
        else if (!strcmp(name, "wait-orphan"))
            case_wait_orphan();
        else if (!strcmp(name, "hostfn-never"))
            case_hostfn_never();
        else if (!strcmp(name, "resume-claims"))
            case_resume_claims();
        else if (!strcmp(name, "scribble-all"))
            case_scribble_all();
        else {
            fprintf(stderr, "unknown case %s\n", name);
            return 2;
        }
    }
    printf("test_hostile: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
