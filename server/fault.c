/* Fatal GPU errors: seen as they happen, reported to every client, and the worker gives way.
 *
 * A kernel that faults (an illegal address, a device-side assert, a trap) leaves the context with a sticky
 * error: every later call of the process returns it. Probed on the H200 (driver 13.0): neither
 * cuDevicePrimaryCtxReset nor a new context brings CUDA back in that process (cuDevicePrimaryCtxRetain then
 * answers CUDA_ERROR_ILLEGAL_ADDRESS itself). So the worker that holds the context cannot recover: it
 * writes the error into each client's channel (its calls return it from then on, as a program's own faulted
 * context would), tells the supervisor what happened and exits; the supervisor starts a fresh worker on the
 * same listening socket (supervisor.c).
 *
 * Seen as it happens: a watch thread queries an idle stream of each GPU every few milliseconds, which
 * answers the sticky error as soon as the context has it, whether or not a client synchronizes. */

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fatal.h"
#include "common/log.h"
#include "server/server.h"

#define WATCH_PERIOD_NS 2000000L

static CUstream watch_stream[CUMUX_MAX_DEVICES];
static pthread_t watch_thread;
static _Atomic int watch_stop;
static srv_fault_fn fault_fn;
static void (*dump_begun_fn)(void);

bool srv_fault_is_fatal(CUresult r)
{
    return cumux_error_is_fatal(r);
}

static _Atomic int decided, decided_code;

void srv_fault_decided(CUresult code)
{
    atomic_store(&decided_code, (int)code);
    atomic_store(&decided, 1);
}

/* Whether the worker decided within ms milliseconds. */
static bool decided_within(int ms)
{
    for (int i = 0; i < ms && !atomic_load(&decided); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&decided);
}

/* The worker exits once it has decided: it takes this thread, and its unanswered call, with it. */
static _Noreturn void go_with_worker(void)
{
    for (;;)
        pause();
}

/* A fatal error in a handler means the context failed: the watch thread sees it within WATCH_PERIOD_NS and
 * the worker decides who may come back. Told the error now, a bystander would keep it (as far as it knows,
 * its context failed: shim/connection.c); so its answer waits for the decision, and a client that may come
 * back is not answered at all: this worker is about to exit, and its call, in flight, comes back as lost
 * work. Without a decision within 200 ms the error is told as it is.
 *
 * With GPU coredumps on, the driver may say less than the fault was until the dump is read (on the H200 a
 * device-side assert answered CUDA_ERROR_LAUNCH_FAILED, 12-03): every answer waits for the decision, which
 * reads the dump (failover.c srv_on_gpu_fault), and tells the error it shows. The dump of an assert took seconds. */
CUresult srv_fault_answer(struct srv_client *c, CUresult r)
{
    bool dumps = srv_coredump_path[0] != 0;
    if (!c->fault.resume_token && !dumps)
        return r;
    if (!decided_within(dumps ? 10000 : 200))
        return r;
    if (c->fault.resume_token && atomic_load(&c->fault.resumable))
        go_with_worker();
    CUresult told = (CUresult)atomic_load(&decided_code);
    return dumps && told != CUDA_SUCCESS ? told : r;
}

/* With GPU coredumps on (CUMUX_FAULT_COREDUMP=1) the driver, at a fault, begins the dump and lets the
 * faulting stream go on: on the H200 the faulting program's synchronize returned CUDA_SUCCESS, the error
 * showing some 40 ms later. So while a dump of this worker's context exists, a success is not told: the
 * answer waits for the worker's decision, which tells every client the fault (server_fault) or lets it come
 * back, and the worker then exits with this thread. No decision within 500 ms: answered as it is. */
void srv_fault_hold_if_dumping(void)
{
    if (srv_coredump_begun() && decided_within(500))
        go_with_worker();
}

static void *watch(void *arg)
{
    (void)arg;
    bool dump_seen = false;
    while (!atomic_load(&watch_stop)) {
        /* A GPU coredump begun: a fault is being dumped, programs must ask the worker from now on. */
        if (!dump_seen && dump_begun_fn && srv_coredump_begun()) {
            dump_seen = true;
            dump_begun_fn();
        }
        for (int g = 0; g < srv_gpu_count && g < CUMUX_MAX_DEVICES; g++) {
            if (!watch_stream[g])
                continue;
            cuCtxSetCurrent(srv_gpus[g].ctx);
            CUresult r = cuStreamQuery(watch_stream[g]);
            if (srv_fault_is_fatal(r) && fault_fn)
                fault_fn(r, g); /* does not return */
        }
        struct timespec ts = {0, WATCH_PERIOD_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int srv_fault_watch_start(srv_fault_fn fn, void (*on_dump_begun)(void))
{
    fault_fn = fn;
    dump_begun_fn = on_dump_begun;
    for (int g = 0; g < srv_gpu_count && g < CUMUX_MAX_DEVICES; g++) {
        if (!srv_gpu_serves(g))
            continue;
        cuCtxSetCurrent(srv_gpus[g].ctx);
        if (cuStreamCreate(&watch_stream[g], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            cumux_logf("GPU %d: no stream to watch for faults: they are seen at the next failing call only", g);
            watch_stream[g] = NULL;
        }
    }
    return pthread_create(&watch_thread, NULL, watch, NULL) == 0 ? 0 : -1;
}

void srv_fault_watch_stop(void)
{
    atomic_store(&watch_stop, 1);
    pthread_join(watch_thread, NULL);
    for (int g = 0; g < srv_gpu_count && g < CUMUX_MAX_DEVICES; g++) {
        if (watch_stream[g]) {
            cuCtxSetCurrent(srv_gpus[g].ctx);
            cuStreamDestroy(watch_stream[g]);
        }
    }
}
