/* The worker's end at a fatal fault: the culprit named (from the GPU coredump, else from whose kernels were
 * in flight), every other client told what it lost and whether it may come back, the record handed to the
 * supervisor, and the worker gone so that the standby takes over (docs/faults.md). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "common/text.h"
#include "common/sock.h"
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"

_Atomic int srv_worker_failing; /* srv_worker_fails has begun */
static int listen_sock = -1;  /* the serving worker's copy of the listening socket */
static int metrics_sock = -1; /* CUMUX_METRICS_PORT's listening socket (the supervisor's), or -1 */

void srv_failover_sockets(int lsock, int msock)
{
    listen_sock = lsock;
    metrics_sock = msock;
}

/* This worker cannot serve any more: its context met a fatal error (fault.c's watch thread), or a killed
 * client's kernels never ended. Every client gets `code` in its channel (its calls return it once the
 * connection is gone, as the calls of a program whose own context failed do), the supervisor gets a
 * record, and the worker exits at once: the standby worker (supervisor.c) takes new clients. The clients
 * of this worker lose their work, as every client of a faulted MPS server does; with containment
 * (CUMUX_CONTAIN=1) all but the culprit come back to the standby with their memory. `culprit`: the id of the
 * client known to have caused it, or 0 (the driver's API does not say whose kernel faulted:
 * docs/faults.md); `culprit_desc`: one known only by its description (it has gone). */
_Noreturn void srv_worker_fails(CUresult code, int gpu, uint32_t culprit, const char *culprit_desc,
                                   const char *why)
{
    /* This worker accepts nobody more: the socket is the standby's now (the supervisor's and the other
     * workers' copies stay open; only this descriptor is replaced). */
    atomic_store(&srv_worker_failing, 1);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul >= 0 && listen_sock >= 0)
        dup2(nul, listen_sock);
    if (nul >= 0 && metrics_sock >= 0)
        dup2(nul, metrics_sock);
    struct srv_fault_record rec = {.at_ms = srv_wall_ms(), .recovered_ms = -1, .code = (int32_t)code,
                                   .gpu = gpu};
    bool locked = srv_clients_lock_briefly();
    size_t len = 0;
    unsigned n = 0;
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        if (c->id == culprit) {
            srv_client_describe(c, rec.culprit, sizeof rec.culprit);
            int32_t none = 0; /* a killed client has its own error already */
            if (c->shm) {
                atomic_compare_exchange_strong(&c->shm->server_fault, &none, (int32_t)code);
                cumux_shm_wake_waiters(c->shm);
            }
            continue;
        }
        if (atomic_load(&c->finished))
            continue;
        /* Every client but the named culprit may come back with its memory (docs/faults.md). It lost nothing
         * (1) when it had no kernel in flight, no stream with work it has not seen end, and no message half
         * handled: every message up to the ring's head handled to the end (read in this order: a message
         * taken meanwhile was written before the head read here). The head is told to the client: work it
         * wrote after (the worker may still take it, on a context that has failed) was lost too. */
        uint64_t done = atomic_load_explicit(&c->fault.ring_done, memory_order_acquire);
        uint64_t head = c->shm ? atomic_load_explicit(&c->shm->head, memory_order_acquire) : 0;
        if (c->shm && c->fault.resume_token) {
            /* One that had work going lost it (a kernel cut off may have written half its output): it comes
             * back too, and its streams and events say so once each (2; shim/resume.c). */
            bool in_flight = srv_usage_in_flight(c), unconfirmed = atomic_load(&c->fault.unconfirmed.count) != 0;
            bool idle = done == head && !in_flight && !unconfirmed;
            atomic_store(&c->fault.resumable, 1);
            c->shm->server_resumable_head = head;
            /* Which streams lost work: those with work not seen to end; any of them while a message was
             * not handled yet (its stream is not known here), kernels in flight on no such stream, or a stream
             * past the words. */
            for (unsigned w = 0; w < CUMUX_LOST_STREAM_WORDS; w++)
                c->shm->server_lost_streams[w] = atomic_load(&c->fault.unconfirmed.bits[w]);
            c->shm->server_lost_all = done != head || (in_flight && !unconfirmed) ||
                                      atomic_load(&c->fault.unconfirmed.beyond) != 0;
            atomic_store(&c->shm->server_resumable, idle ? 1 : 2);
        }
        if (c->shm) {
            atomic_store(&c->shm->server_fault, (int32_t)code);
            cumux_shm_wake_waiters(c->shm); /* its threads waiting for an answer learn it now */
        }
        int k = snprintf(rec.clients + len, sizeof rec.clients - len, "%s", n ? "; " : "");
        if (k > 0 && (size_t)k < sizeof rec.clients - len)
            len += (size_t)k;
        k = srv_client_describe(c, rec.clients + len, sizeof rec.clients - len);
        if (k > 0 && (size_t)k < sizeof rec.clients - len)
            len += (size_t)k;
        n++;
    }
    if (locked)
        pthread_mutex_unlock(&srv_clients_lock);
    if (!rec.culprit[0] && culprit_desc)
        snprintf(rec.culprit, sizeof rec.culprit, "%s", culprit_desc);
    snprintf(rec.why, sizeof rec.why, "%s", why);
    const char *name = NULL;
    cuGetErrorName(code, &name);
    cumux_logf("GPU %d: %s (%s); culprit: %s; the %u other client(s) %s: %s; the standby worker takes over", gpu,
               why, name ? name : "?", rec.culprit[0] ? rec.culprit : "not known", n,
               srv_chunks_on() ? "may come back, told what work they lost" : "lose their work",
               n ? rec.clients : "none");
    srv_fault_decided(code);
    srv_supervisor_fault(&rec);
    _exit(CUMUX_EXIT_GPU_FAULT);
}

/* A GPU coredump has begun: the driver may let faulted streams go on while it writes it, so no program may
 * answer its questions from completion marks any more (marks.c). */
static _Atomic uint64_t dump_begun_ns; /* when the fault watch saw the dump begin */

void srv_on_dump_begun(void)
{
    atomic_store(&dump_begun_ns, cumux_now_ns());
    srv_marks_stop_telling();
    bool locked = srv_clients_lock_briefly();
    for (struct srv_client *c = locked ? srv_clients : NULL; c; c = c->next)
        srv_marks_withdraw(c);
    if (locked)
        pthread_mutex_unlock(&srv_clients_lock);
    cumux_logf("a GPU coredump has begun: programs ask the worker from now on (completion marks withdrawn)");
}

void srv_on_gpu_fault(CUresult r, int gpu)
{
    /* The culprit: the client whose module holds the faulting code, from the GPU coredump (coredump.c). */
    uint64_t mods[8];
    CUresult dumped;
    char kernel[96];
    size_t nm = srv_coredump_culprits(mods, 8, &dumped, kernel, sizeof kernel);
    if (dumped == CUDA_ERROR_ASSERT && dumped != r) {
        /* With dumps on the driver says less than the fault was for an assert (a launch failure, on the
         * H200): the programs are told what the dump shows, as the driver tells it without dumps. Only that
         * case: for others the driver's own error is what a program gets natively (a trap's dump shows an
         * SM exception too, yet natively it is CUDA_ERROR_LAUNCH_FAILED). */
        cumux_logf("GPU %d: the driver said %d, the GPU coredump shows %d: told %d", gpu, (int)r, (int)dumped,
                   (int)dumped);
        r = dumped;
    }
    uint32_t culprit = 0;
    unsigned owners = 0;
    if (nm && srv_clients_lock_briefly()) {
        for (struct srv_client *c = srv_clients; c; c = c->next) {
            bool owns = false;
            for (size_t i = 0; i < nm && !owns; i++)
                owns = srv_module_owned(c, mods[i]);
            if (owns) {
                culprit = c->id;
                owners++;
            }
        }
        pthread_mutex_unlock(&srv_clients_lock);
    }
    char gone[192] = "";
    if (owners > 1)
        culprit = 0; /* kernels of several clients faulted at once: no one name */
    else if (!owners && nm && srv_module_departed_owner(mods[0], gone, sizeof gone - 16))
        strcat(gone, " (gone)"); /* it had its error and left before the dump was read */
    /* Without a dump: a fault comes from a kernel that was running, so the clients with launches not known
     * to have ended are the candidates; when there is one, it is the culprit. */
    char why[sizeof ((struct srv_fault_record *)0)->why] = "fatal GPU error";
    if (kernel[0] && (culprit || gone[0])) /* the dump's faulting kernel, of the client it names */
        snprintf(why, sizeof why, "fatal GPU error in kernel %s", kernel);
    if (!culprit && !gone[0] && srv_clients_lock_briefly()) {
        unsigned cands = 0, nlive = 0, unsure = 0;
        char only_desc[160] = "";
        uint32_t only = 0, live_id[8];
        int live_pid[8];
        size_t len = strlen(why);
        /* With dumps on, launches seen to end since shortly before the dump began may have been the
         * culprit's, answered with success while the driver wrote it (fault.c). */
        uint64_t begun = atomic_load(&dump_begun_ns), now = cumux_now_ns();
        uint64_t base = begun ? begun : now, since = base > 2000000000ull ? base - 2000000000ull : 0;
        for (struct srv_client *c = srv_clients; c; c = c->next) {
            /* Launches not known to have ended, unless its own marks said they have (a program that
             * answered its questions itself from them did not tell the server). */
            if (atomic_load(&c->finished))
                continue;
            bool in_flight = srv_usage_in_flight(c);
            if (!in_flight || srv_marks_client_done(c)) {
                if (in_flight || atomic_load(&c->usage.ended_ns) >= since)
                    unsure++;
                continue;
            }
            only = c->id;
            if (!cands) /* its name, should it leave the list before the record is made */
                srv_client_describe(c, only_desc, sizeof only_desc);
            if (nlive < 8) {
                live_id[nlive] = c->id;
                live_pid[nlive++] = (int)c->pid;
            }
            int k = snprintf(why + len, sizeof why - len, "%s%u pid %d", cands ? ", " : "; kernels in flight: ",
                             c->id, (int)c->pid);
            if (k > 0 && (size_t)k < sizeof why - len)
                len += (size_t)k;
            cands++;
        }
        pthread_mutex_unlock(&srv_clients_lock);
        /* And those that went with kernels in flight just before (within 2 s). */
        char went[4][160];
        size_t nw = srv_usage_departed_lately(2000000000ull, went, 4), kept = 0;
        for (size_t i = 0; i < nw; i++) {
            /* One that is leaving is both: its worker recorded its going before it left the list. */
            unsigned id = 0;
            int pid = 0;
            bool listed = false;
            if (sscanf(went[i], "%u pid %d", &id, &pid) == 2)
                for (unsigned j = 0; j < nlive && !listed; j++)
                    listed = live_id[j] == id && live_pid[j] == pid;
            if (listed)
                continue;
            if (kept != i)
                memcpy(went[kept], went[i], sizeof went[i]);
            kept++;
            int k = snprintf(why + len, sizeof why - len, "%s%.40s (gone)", cands ? ", " : "; kernels in flight: ",
                             went[i]);
            if (k > 0 && (size_t)k < sizeof why - len)
                len += (size_t)k;
            cands++;
        }
        /* With dumps on, only when no other client's launches were seen to end lately (nor said to by its
         * marks): the driver may have answered the culprit's synchronize with success before the fault
         * showed (fault.c), which ended its launches here, leaving a busy bystander the only candidate
         * (12-03, a runtime assert beside one). The dump names a culprit when it can; a trap's dump on the
         * H200 once named no one (12-04), its program the only one with kernels in flight. */
        if (cands == 1 && (!srv_coredump_path[0] || !unsure)) {
            culprit = only; /* 0 when the one candidate has gone: named by its description */
            if (!only)
                snprintf(gone, sizeof gone, "%.150s (gone)", went[0]);
            else
                snprintf(gone, sizeof gone, "%.150s", only_desc);
            snprintf(why, sizeof why, "fatal GPU error (culprit: the only client with kernels in flight)");
        }
    }
    srv_worker_fails(r, gpu, culprit, gone[0] ? gone : NULL, why);
}
