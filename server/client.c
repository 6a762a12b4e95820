/* A client of the server: its shared-memory channel and the worker thread that runs its commands. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/map.h"
#include "common/channel.h"
#include "common/log.h"
#include "common/sock.h"
#include "server/objects.h"
#include "server/groups.h"
#include "server/handlers.h" /* the kinds' free functions, for the generated release loops */
#include "server/server.h"

#define SRV_RELEASE_IMPL /* srv_client_release_all, the spec's release lines */
#include "server/generated/release.h"

int srv_wake_fd = -1;

/* CUMUX_PROFILE=1: each worker times every command it runs (validation, handler, reply) and logs, per
 * command, how many, the mean and the longest time, and how many took 100 us or more (a driver call that
 * blocked: a full queue, a lock another worker held) when its client goes; for splitting a round trip's
 * cost and finding where a worker waits. */
#define PROFILE_SLOW_NS 100000ull
struct op_profile {
    uint64_t n[CUMUX_OP_COUNT];
    uint64_t ns[CUMUX_OP_COUNT];
    uint64_t max_ns[CUMUX_OP_COUNT];
    uint64_t slow[CUMUX_OP_COUNT];
    uint64_t slow_ns[CUMUX_OP_COUNT];
    uint64_t begin_ns, busy_ns;
};

const char *srv_op_name(unsigned op)
{
    static const char *const names[CUMUX_OP_COUNT] = {
#define OP_NAME(name, body, direction) #name,
        CUMUX_OPS(OP_NAME)
#undef OP_NAME
    };
    return op < CUMUX_OP_COUNT ? names[op] : "?";
}

static void profile_log(const struct srv_client *c, const struct op_profile *p)
{
    uint64_t wall = cumux_now_ns() - p->begin_ns;
    cumux_logf("client %u: profile: the worker ran commands %.1f%% of its %.1f s", c->id,
               wall ? 100.0 * (double)p->busy_ns / (double)wall : 0.0, (double)wall / 1e9);
    for (int op = 0; op < CUMUX_OP_COUNT; op++)
        if (p->n[op])
            cumux_logf("client %u: profile: %s: %llu commands, %.0f ns each in the worker, longest %.1f us, "
                       "%llu of 100 us or more (%.1f ms in all)",
                       c->id, srv_op_name(op), (unsigned long long)p->n[op], (double)p->ns[op] / (double)p->n[op],
                       (double)p->max_ns[op] / 1e3, (unsigned long long)p->slow[op], (double)p->slow_ns[op] / 1e6);
}

/* A client back after a fault (RESUME hello) makes again what it held; on the H200 that took 220-400 ms
 * where it takes well under one otherwise (docs/faults.md): until its own work starts again (at most 2 s),
 * each command that takes over 2 ms is logged, to see which driver calls are slow then. */
#define COMEBACK_WATCH_NS 2000000000ull
#define COMEBACK_SLOW_NS 2000000ull

_Static_assert(offsetof(struct cumux_shm, mark_word) ==
                   offsetof(struct cumux_shm, hostfn_stream_done) + sizeof(((struct cumux_shm *)0)->hostfn_stream_done),
               "the marks' page follows the host-function words");

/* Whether a stream can wait on pinned host memory (hostfn.c's words): asked once, at the worker's start,
 * with one wait (already satisfied) on a page of the server's own. Never on a client's word: a wait for 0
 * is held by a word of 0x80000000 or more (GEQ compares cyclically), which the client may write before the
 * GPU gets there, and its memory stream would never end, nor anything that waits for the context (a free,
 * the reaper's unregistering): every client's cleanup would stop behind it. */
static bool host_waits_ok;

void srv_host_waits_probe(void)
{
    uint32_t *page = aligned_alloc(4096, 4096);
    if (!page)
        return;
    memset(page, 0, 4096);
    CUdeviceptr d = 0;
    CUstream s = NULL;
    if (cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS) {
        CUstreamBatchMemOpParams w;
        memset(&w, 0, sizeof w);
        w.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
        w.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
        host_waits_ok = cuMemHostGetDevicePointer(&d, page, 0) == CUDA_SUCCESS &&
                        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                        (w.waitValue.address = d, cuStreamBatchMemOp(s, 1, &w, 0) == CUDA_SUCCESS) &&
                        cuStreamSynchronize(s) == CUDA_SUCCESS;
        if (s)
            cuStreamDestroy(s);
        cuMemHostUnregister(page);
    }
    free(page);
    if (host_waits_ok)
        cumux_debugf("streams wait on pinned host memory: host functions release their streams from the GPU");
    else
        cumux_logf("streams cannot wait on pinned host memory here: the driver's thread waits for each host function");
}

void srv_worker_begin(struct srv_client *c)
{
    if (srv_gpu_served < 0)
        return;
    cuCtxSetCurrent(srv_gpus[srv_gpu_served].ctx);
    c->obj.current_gpu = srv_gpu_served;
    /* Copies of pageable memory are staged through the channel, pinned for the GPU's DMA; the page of
     * host-function words, which streams wait on (hostfn.c), pinned for the GPU to read (without it, the
     * driver's thread waits for each host function, as for graphs). A spare channel came pinned. */
    struct srv_channel ch = {.fd = c->shm_fd, .shm = c->shm, .staging_pinned = c->staging.staging_registered,
                             .words_dev = c->hostfn.words_pinned};
    srv_channel_pin(&ch);
    c->staging.staging_registered = ch.staging_pinned;
    c->hostfn.words_pinned = ch.words_dev;
    if (!c->staging.staging_registered)
        cumux_logf("client %u: cannot pin staging buffers: pageable copies will fail", c->id);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        cuEventCreate(&c->staging.stage_event[i], CU_EVENT_DISABLE_TIMING);
    void *words = (void *)c->shm->hostfn_stream_done;
    CUdeviceptr d = c->hostfn.words_pinned;
    CUstream ms;
    if (d) {
        if (host_waits_ok && mem_stream(c, 0, &ms) == CUDA_SUCCESS) {
            c->hostfn.hostfn_words = d;
            c->marks.mark_words = d + sizeof c->shm->hostfn_stream_done; /* the page after (marks.c) */
        } else {
            cuMemHostUnregister(words);
            c->hostfn.words_pinned = 0;
        }
    }
}

int srv_worker_step(struct srv_client *c, uint64_t *tail, void *msg)
{
    uint32_t size;
    enum cumux_ring_status st = cumux_ring_take_at(c->shm, tail, msg, &size);
    if (st == CUMUX_RING_EMPTY)
        return 0;
    if (st == CUMUX_RING_CORRUPT || srv_dispatch(c, msg, size) < 0) {
        cumux_logf("client %u (pid %d): protocol violation, disconnecting it", c->id, (int)c->pid);
        atomic_store(&c->dead, 1);
        return -1;
    }
    srv_printf_flush(1); /* a device line the driver printed without its newline yet */
    return 1;
}

static void *worker_main(void *arg)
{
    struct srv_client *c = arg;
    srv_printf_bind(c);
    const char *prof_env = getenv("CUMUX_PROFILE");
    struct op_profile *prof = prof_env && !strcmp(prof_env, "1") ? calloc(1, sizeof *prof) : NULL;
    if (prof)
        prof->begin_ns = cumux_now_ns();
    void *msg = malloc(CUMUX_MAX_MSG);
    if (!msg)
        atomic_store(&c->dead, 1);
    else
        srv_worker_begin(c);
    const char *poll_env = getenv("CUMUX_TIMING_POLL_US"); /* microseconds, at most a second */
    uint64_t poll_us = poll_env && *poll_env ? strtoull(poll_env, NULL, 10) : 1000;
    uint64_t timing_poll_ns = (poll_us < 1000000 ? poll_us : 1000000) * 1000;
    uint64_t tail = 0; /* the server's own: the shared copy is the client's to scribble on */
    uint64_t watch_until = 0;
    bool first = true; /* a RESUME hello's claim is known by its first command (set before the welcome) */
    while (!atomic_load(&c->dead)) {
        uint64_t t0 = prof || watch_until || first ? cumux_now_ns() : 0;
        int st = srv_worker_step(c, &tail, msg);
        if (first && st > 0) {
            first = false;
            watch_until = c->fault.resume_claim ? t0 + COMEBACK_WATCH_NS : 0;
        }
        if (watch_until && st > 0) {
            uint16_t op = ((const struct cumux_msg_hdr *)msg)->op;
            /* Its own work again (a launch, a copy, a wait for its streams): what is made again is made. */
            if (cumux_op_work(op))
                watch_until = 0;
            uint64_t t1 = cumux_now_ns();
            if (watch_until && t1 - t0 > COMEBACK_SLOW_NS)
                cumux_logf("client %u (back after a fault): %s took %.1f ms", c->id,
                           srv_op_name(((const struct cumux_msg_hdr *)msg)->op), (double)(t1 - t0) / 1e6);
            if (t1 > watch_until)
                watch_until = 0;
        }
        if (st > 0) /* after the message's work is queued, not when it is taken (failover.c srv_worker_fails) */
            atomic_store_explicit(&c->fault.ring_done, tail, memory_order_release);
        if (st == 0) {
            /* Nothing to do: give back staging slots whose copies are done before sleeping, since the
             * client may be waiting for one and will send nothing until it has it. Copies still running
             * are not waited for (one may sit behind work waiting for the client's next message): the
             * worker sleeps 50 us at a time until they are done (after its 50 us of spinning). */
            srv_marks_write(c, tail); /* in time the worker has to spare: a question about these then needs
                                       * no driver, or no round trip */
            bool copies_left = srv_staging_flush(c, false);
            /* Between a timing event's record and the work it times, the client's host work (a library
             * preparing its next launch) can outlast the 50 us spin; natively the GPU then waits for the
             * launch, here it would also wait for the worker's wake-up, tens of microseconds that vary from
             * one sample to the next. cuDNN's benchmark mode times each candidate once and keeps the
             * fastest for the program's life: noise there keeps slower kernels (docs/performance.md).
             * So while a timing window is open the worker keeps looking, yielding the CPU between looks. */
            if (c->marks.timing_window) {
                if (timing_poll_ns && cumux_ring_poll_at(c->shm, tail, &c->dead, timing_poll_ns))
                    continue;
                c->marks.timing_window = false; /* idle that long: whatever is timed now includes the host's wait */
            }
            cumux_ring_wait_at(c->shm, tail, &c->dead, 50000, copies_left ? 50000 : 1000000000);
        } else if (st > 0 && prof) {
            uint16_t op = ((const struct cumux_msg_hdr *)msg)->op;
            uint64_t d = cumux_now_ns() - t0;
            prof->n[op]++;
            prof->ns[op] += d;
            prof->busy_ns += d;
            if (d > prof->max_ns[op])
                prof->max_ns[op] = d;
            if (d >= PROFILE_SLOW_NS) {
                prof->slow[op]++;
                prof->slow_ns[op] += d;
            }
        }
    }
    free(msg);
    srv_printf_unbind();
    if (prof) {
        profile_log(c, prof);
        free(prof);
    }
    srv_client_release_all(c);
    srv_group_leave(c); /* after its memory went: what is left of its count goes with it */
    if (c->marks.marks_answered)
        cumux_debugf("client %u: %llu questions answered from completion marks", c->id,
                     (unsigned long long)c->marks.marks_answered);
    if (c->marks.marks_queued || c->marks.marks_withheld)
        cumux_debugf("client %u: %llu completion marks queued, none at %llu idle moments while it timed work",
                     c->id, (unsigned long long)c->marks.marks_queued, (unsigned long long)c->marks.marks_withheld);
    if (atomic_load(&c->pacing.paced))
        cumux_logf("client %u: %llu of its %llu launches waited for their stream (pacing)", c->id,
                   (unsigned long long)atomic_load(&c->pacing.paced), (unsigned long long)atomic_load(&c->usage.launches));
    cumux_logf("client %u (pid %d) gone; everything it held is freed", c->id, (int)c->pid);
    atomic_store(&c->finished, 1);
    char b = 1;
    ssize_t w = write(srv_wake_fd, &b, 1);
    (void)w;
    return NULL;
}

/* The command line of a process, its arguments joined by spaces ("" when it cannot be read). */
static void command_of(pid_t pid, char *out, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    out[0] = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    /* One line, printable: it goes into the log, fault records and `cumux status` lines that programs
     * read (a newline in an argument must not make a record of its own). */
    for (size_t i = 0; i < n; i++)
        if (!out[i])
            out[i] = i + 1 < n ? ' ' : 0;
        else if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            out[i] = '?';
    out[n] = 0;
}

static void channel_release(struct srv_client *c);

struct srv_client *srv_client_start(int sock, pid_t pid, uid_t uid, uint32_t id, int stdout_fd)
{
    struct srv_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->stdout_fd = stdout_fd;
    c->id = id;
    pthread_mutex_init(&c->hostfn.hostfn_lock, NULL);
    c->pid = pid;
    c->uid = uid;
    c->conn.sock = sock;
    /* Its secret for coming back after a worker change, when its memory can outlive the worker. */
    if (srv_chunks_on() && getrandom(&c->fault.resume_token, sizeof c->fault.resume_token, 0) != sizeof c->fault.resume_token)
        c->fault.resume_token = 0;
    command_of(pid, c->cmd, sizeof c->cmd);
    struct srv_channel ch;
    if (!srv_channel_take_spare(&ch) && srv_channel_make(&ch) < 0) {
        cumux_logf("client %u: cannot set up its channel: %s", id, strerror(errno));
        free(c); /* the caller still owns stdout_fd */
        return NULL;
    }
    c->shm_fd = ch.fd;
    c->shm = ch.shm;
    c->staging.staging_registered = ch.staging_pinned;
    c->hostfn.words_pinned = ch.words_dev;
    if (pthread_create(&c->worker, NULL, worker_main, c) != 0) {
        cumux_logf("client %u: cannot start its worker thread", id);
        channel_release(c);
        free(c);
        return NULL;
    }
    return c;
}

/* Unregistering waits for every kernel in the context: the reaper unregisters, then unmaps. Each page is
 * unmapped once: the host-function page lies inside the range unmapped last, so it is only unregistered
 * first (unmapped on its own, its addresses could be handed to another mapping, of another thread, before
 * the range around it went, taking that mapping with it). */
static void channel_release(struct srv_client *c)
{
    if (c->hostfn.words_pinned)
        srv_reap(REAP_HOST_UNREGISTER, 0, (void *)c->shm->hostfn_stream_done, SRV_GPU_WORDS_BYTES, NULL);
    if (c->staging.staging_registered) {
        srv_reap(REAP_HOST_MEMORY, 0, c->shm->staging, sizeof c->shm->staging, NULL);
        srv_reap(REAP_UNMAP, -1, c->shm, offsetof(struct cumux_shm, staging), NULL);
    } else if (c->hostfn.words_pinned) {
        srv_reap(REAP_UNMAP, -1, c->shm, sizeof(struct cumux_shm), NULL);
    } else {
        munmap(c->shm, sizeof(struct cumux_shm));
    }
    close(c->shm_fd);
}

void srv_client_free(struct srv_client *c)
{
    pthread_join(c->worker, NULL);
    channel_release(c);
    free(c->hostfn.hostfn_last);
    close(c->conn.sock);
    if (c->stdout_fd >= 0)
        close(c->stdout_fd);
    free(c);
}
