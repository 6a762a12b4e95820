/* Every kernel's run on the GPU, as CUPTI's activity records give it (issue 9: ResNet-50 training 2-3 %
 * slower under cumux with the same kernels; Nsight Compute times kernels one at a time, which hides what
 * happens between them, and the profilers cannot reach into the server). Loaded by the real driver of the
 * process that runs the kernels through CUDA_INJECTION64_PATH: the program natively, cumuxd's workers under
 * cumux, so that both are measured the same way. Writes one line per kernel to
 * $KERNEL_TRACE_DIR/kernels.PID.tsv (default /tmp): GPU start and end (ns), stream, channel and channel
 * type, registers, static and dynamic shared memory, shared memory executed, cache configuration requested
 * and executed, local memory per thread, grid, block, cluster, launch type, graph id, name; at most
 * KERNEL_TRACE_MAX lines (default 2,000,000). A thread flushes the records every 500 ms, so a process that
 * ends with _exit or a signal loses at most that much. bench/kernel_trace.py compares two such traces.
 * A measuring aid, never part of cumux: built where the toolkit has CUPTI. */
#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES (4u << 20)

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long lines, max_lines = 2000000;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&out_lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !out || lines >= max_lines)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(out,
                "%llu\t%llu\t%u\t%u\t%d\t%u\t%d\t%d\t%u\t%u\t%u\t%u\t%d,%d,%d\t%d,%d,%d\t%u,%u,%u\t%u\t%u\t%s\n",
                (unsigned long long)k->start, (unsigned long long)k->end, k->streamId, k->channelID,
                (int)k->channelType, k->registersPerThread, k->staticSharedMemory, k->dynamicSharedMemory,
                k->sharedMemoryExecuted, k->cacheConfig.config.requested, k->cacheConfig.config.executed,
                k->localMemoryPerThread, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                k->clusterX, k->clusterY, k->clusterZ, k->launchType, k->graphId, k->name ? k->name : "?");
        lines++;
    }
    fflush(out);
    pthread_mutex_unlock(&out_lock);
    free(buffer);
}

static void *flusher(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
        cuptiActivityFlushAll(0);
    }
    return NULL;
}

static void at_exit(void)
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Called by the driver at cuInit when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void)
{
    static atomic_int once;
    if (atomic_exchange(&once, 1))
        return 1;
    const char *dir = getenv("KERNEL_TRACE_DIR");
    const char *max = getenv("KERNEL_TRACE_MAX");
    if (max && *max)
        max_lines = strtoul(max, NULL, 10);
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels.%d.tsv", dir && *dir ? dir : "/tmp", (int)getpid());
    out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n", path);
        return 0;
    }
    fprintf(out, "start\tend\tstream\tchannel\tchannel_type\tregs\tstatic_shared\tdynamic_shared\tshared_executed"
                 "\tcache_requested\tcache_executed\tlocal_per_thread\tgrid\tblock\tcluster\tlaunch_type\tgraph\tname\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity\n");
        return 0;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, flusher, NULL) == 0)
        pthread_detach(t);
    atexit(at_exit);
    return 1;
}
