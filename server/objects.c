/* The client's objects as every handler sees them: the handle table, the current GPU, the legacy-stream
 * rule, the pending error of one-way commands, and the checks of what a client names (address ranges,
 * memset shapes, descriptors). The handler files (context.c, stream.c, memory.c, pool.c, vmm.c, ipc.c,
 * copy.c, module.c, launch.c, hostfn.c, graph.c) use this file; it uses none of them. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sock.h"
#include "server/objects.h"

CUresult reply_u64(uint8_t *out, uint32_t *out_len, uint64_t v)
{
    struct cumux_u64_reply rep = {v};
    memcpy(out, &rep, sizeof rep);
    *out_len = sizeof rep;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- handles */

/* Handles one client may hold at once (CUMUX_MAX_HANDLES, cumuxd --max-handles): without a bound, one
 * client could grow the server's memory without end. Past it, handle_new returns 0, which every caller
 * answers with CUDA_ERROR_OUT_OF_MEMORY. */
uint32_t srv_max_handles = 1u << 20;
uint32_t srv_handle_tag;

uint32_t handle_new(struct srv_client *c, enum srv_obj_type type, void *obj)
{
    for (uint32_t i = c->obj.free_hint; i < c->obj.nhandles; i++) {
        if (c->obj.handles[i].type == OBJ_NONE) {
            c->obj.handles[i] = (struct srv_handle){type, obj};
            c->obj.free_hint = i + 1;
            return srv_handle_tag | (i + 1);
        }
    }
    /* No free slot: the table holds as many live handles as it has entries. */
    if (c->obj.nhandles >= srv_max_handles || c->obj.nhandles >= CUMUX_HANDLE_INDEX_MAX)
        return 0;
    if (c->obj.nhandles == c->obj.caphandles) {
        uint32_t cap = c->obj.caphandles ? c->obj.caphandles * 2 : 64;
        if (cap > (1u << 24))
            return 0;
        struct srv_handle *h = realloc(c->obj.handles, cap * sizeof *h);
        if (!h)
            return 0;
        c->obj.handles = h;
        c->obj.caphandles = cap;
    }
    c->obj.handles[c->obj.nhandles] = (struct srv_handle){type, obj};
    c->obj.free_hint = c->obj.nhandles + 1;
    return srv_handle_tag | ++c->obj.nhandles;
}

/* The object behind a handle of this client, if it has that type; otherwise NULL. A handle another GPU's
 * worker made is none here. */
void *handle_get(struct srv_client *c, uint32_t h, enum srv_obj_type type)
{
    uint32_t tag = h & ~CUMUX_HANDLE_INDEX_MAX;
    h = CUMUX_HANDLE_INDEX(h);
    if ((tag && tag != srv_handle_tag) || h == 0 || h > c->obj.nhandles || c->obj.handles[h - 1].type != type)
        return NULL;
    return c->obj.handles[h - 1].obj;
}

void handle_drop(struct srv_client *c, uint32_t h)
{
    h = CUMUX_HANDLE_INDEX(h);
    c->obj.handles[h - 1] = (struct srv_handle){OBJ_NONE, NULL};
    if (h - 1 < c->obj.free_hint)
        c->obj.free_hint = h - 1;
}

void use_gpu(struct srv_client *c, int gpu)
{
    if (c->obj.current_gpu != gpu && srv_gpu_serves(gpu)) {
        cuCtxSetCurrent(srv_gpus[gpu].ctx);
        c->obj.current_gpu = gpu;
    }
}

/* ---------------------------------------------------------------- legacy-stream emulation
 * Every real stream is non-blocking, so clients never meet on the real NULL stream. Within a client
 * context, an operation on the legacy stream first waits for the work of each blocking stream that has
 * had any since it last did, and a blocking stream first waits for the legacy stream's last operation
 * (CUDA's "legacy default stream" rule). Costs nothing while a client uses a single stream. */

CUresult before_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    s->mark_behind = false; /* work after its completion mark (marks.c) */
    if (s->capturing)
        return CUDA_SUCCESS; /* captured work is not run now: it takes no part in the legacy rule */
    if (!s->unconfirmed) {
        s->unconfirmed = true;
        if (x->unconfirmed)
            srv_unconfirmed_change(x->unconfirmed, s->handle, true);
    }
    if (s->kind == STREAM_LEGACY) {
        for (size_t i = 0; i < x->ndirty; i++) {
            struct srv_stream *b = x->dirty[i];
            CHECK(cuEventRecord(x->join_event, b->cu));
            CHECK(cuStreamWaitEvent(x->legacy->cu, x->join_event, 0));
            b->dirty = false;
        }
        x->ndirty = 0;
    } else if (s->kind == STREAM_BLOCKING && s->seen_epoch != x->epoch) {
        if (x->epoch_event_epoch != x->epoch) {
            CHECK(cuEventRecord(x->epoch_event, x->legacy->cu));
            x->epoch_event_epoch = x->epoch;
        }
        CHECK(cuStreamWaitEvent(s->cu, x->epoch_event, 0));
        s->seen_epoch = x->epoch;
    }
    return CUDA_SUCCESS;
}

void srv_stream_confirmed(struct srv_stream *s)
{
    if (s->unconfirmed) {
        s->unconfirmed = false;
        if (s->ctx->unconfirmed)
            srv_unconfirmed_change(s->ctx->unconfirmed, s->handle, false);
    }
}

void after_op(struct srv_stream *s)
{
    struct srv_ctx *x = s->ctx;
    if (s->capturing)
        return;
    if (s->kind == STREAM_LEGACY) {
        x->epoch++;
    } else if (s->kind == STREAM_BLOCKING && !s->dirty) {
        if (x->ndirty == x->capdirty) {
            size_t cap = x->capdirty ? x->capdirty * 2 : 8;
            struct srv_stream **d = realloc(x->dirty, cap * sizeof *d);
            if (!d) {
                /* Without room to remember it, make the stream safe now: the legacy stream waits. */
                cuEventRecord(x->join_event, s->cu);
                cuStreamWaitEvent(x->legacy->cu, x->join_event, 0);
                return;
            }
            x->dirty = d;
            x->capdirty = cap;
        }
        x->dirty[x->ndirty++] = s;
        s->dirty = true;
    }
}

/* Look up a stream handle and make its context current. */
struct srv_stream *stream_get(struct srv_client *c, uint32_t h)
{
    struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
    if (s) {
        use_gpu(c, s->ctx->gpu);
        srv_place_stream(c, s); /* its client's SMs may have changed since its last operation */
    }
    return s;
}

CUresult take_pending(struct srv_client *c, CUresult r)
{
    if (r == CUDA_SUCCESS && c->obj.pending_error != CUDA_SUCCESS) {
        r = c->obj.pending_error;
        c->obj.pending_error = CUDA_SUCCESS;
    }
    return r;
}

/* The stream a client's allocations and frees are ordered on, for one GPU. */
CUresult mem_stream(struct srv_client *c, int gpu, CUstream *out)
{
    use_gpu(c, gpu);
    if (!c->memory.mem_event)
        CHECK(cuEventCreate(&c->memory.mem_event, CU_EVENT_DISABLE_TIMING));
    if (!c->memory.mem_stream[gpu])
        CHECK(cuStreamCreate(&c->memory.mem_stream[gpu], CU_STREAM_NON_BLOCKING));
    *out = c->memory.mem_stream[gpu];
    return CUDA_SUCCESS;
}

CUresult alloc_stream(struct srv_client *c, int gpu, CUstream *out)
{
    use_gpu(c, gpu);
    if (!c->memory.alloc_stream[gpu])
        CHECK(cuStreamCreate(&c->memory.alloc_stream[gpu], CU_STREAM_NON_BLOCKING));
    *out = c->memory.alloc_stream[gpu];
    return CUDA_SUCCESS;
}

CUresult after_client_work(struct srv_client *c, int gpu, CUstream *out)
{
    CUstream ms;
    CHECK(mem_stream(c, gpu, &ms));
    SRV_FOR_EACH_HANDLE(c, h) {
        struct srv_stream *s = handle_get(c, h, OBJ_STREAM);
        /* A capturing stream's work is not running: nothing of it to wait for. */
        if (s && s->ctx->gpu == gpu && !srv_stream_capturing(c, s)) {
            CHECK(cuEventRecord(c->memory.mem_event, s->cu));
            CHECK(cuStreamWaitEvent(ms, c->memory.mem_event, 0));
        }
    }
    *out = ms;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- what a client names */

bool dev_ok(struct srv_client *c, uint64_t p, uint64_t n)
{
    if (cumux_ranges_covers(&c->memory.dev_ranges, p, n))
        return true;
    /* Mappings of one reservation that lie back to back are one span, as in CUDA. */
    const struct cumux_range *r = cumux_ranges_find(&c->memory.dev_ranges, p);
    uint64_t end;
    if (!r || r->tag != RANGE_VMM || !cumux_add_u64(p, n, &end))
        return false;
    while (end - r->base > r->size) {
        uint64_t next = r->base + r->size;
        r = cumux_ranges_find(&c->memory.dev_ranges, next);
        if (!r || r->base != next || r->tag != RANGE_VMM)
            return false;
    }
    return true;
}

bool host_ok(struct srv_client *c, uint64_t p, uint64_t n)
{
    return cumux_ranges_covers(&c->memory.host_ranges, p, n) != NULL;
}

bool memset_span(const struct cumux_memset *m, uint64_t *span)
{
    uint64_t row;
    if ((m->elem_size != 1 && m->elem_size != 2 && m->elem_size != 4) || !cumux_mul_u64(m->width, m->elem_size, &row))
        return false;
    if (m->width == 0 || m->height == 0) {
        *span = 0;
        return true;
    }
    /* One row may name any pitch (the driver reads none); several rows need pitch >= the row. */
    return cumux_span_2d(m->height > 1 ? m->pitch : row, row, m->height, span);
}

bool srv_stream_capturing(struct srv_client *c, struct srv_stream *s)
{
    if (s->capturing)
        return true;
    if (!c->graphs.ever_captured)
        return false;
    /* Other streams join a capture through events: ask the driver. */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return cuStreamIsCapturing(s->cu, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A descriptor the client sent over the socket just before the command that needs it. */
int recv_sealed_fd(struct srv_client *c, uint64_t min_size, int seals)
{
    int fd = recv_client_fd(c, 0);
    struct stat st;
    if (fd >= 0 && (fcntl(fd, F_ADD_SEALS, seals) < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size < min_size)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int recv_client_fd(struct srv_client *c, uint64_t min_size)
{
    uint64_t tag;
    int fd;
    /* The shim sends the descriptor before the command: if it is not there now, it never comes. */
    struct pollfd p = {.fd = c->conn.sock, .events = POLLIN};
    if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
        return -1;
    if (cumux_sock_recv(c->conn.sock, &tag, sizeof tag, &fd) < 0 || tag != CUMUX_MAGIC) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < min_size) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int srv_client_describe(const struct srv_client *c, char *out, size_t cap)
{
    return snprintf(out, cap, "%u pid %d uid %u %s", c->id, (int)c->pid, (unsigned)c->uid, c->cmd);
}

/* A client's end: its handle table, every object freed by now; anything left is a bug, said rather than
 * leaked quietly. */
void srv_handles_release(struct srv_client *c)
{
    SRV_FOR_EACH_HANDLE(c, h) {
        enum srv_obj_type t = c->obj.handles[CUMUX_HANDLE_INDEX(h) - 1].type;
        if (t != OBJ_NONE)
            cumux_logf("client %u: handle %u (%s) left after cleanup", c->id, h, srv_obj_kind_name(t));
    }
    free(c->obj.handles);
    c->obj.handles = NULL;
    c->obj.nhandles = c->obj.caphandles = 0;
}
