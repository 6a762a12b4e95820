/* A bystander of another program's fault (issue 10): it holds device memory of three sizes (a small
 * allocation, one of its own chunk's size, a stream-ordered one) and memory from a pool of its own (with
 * a release threshold set) with known contents, a module and a
 * library with a function of each, a stream, an event and pinned host memory; with "wait" it says "bystander: ready" and waits
 * for a line on stdin (meanwhile tests/test_contain_memory.sh makes another program fault the GPU). Then
 * its memory must read back intact at the same addresses, and it computes again with what it made before:
 * the module's kernel on its stream, the event recorded there and waited for, the library's kernel,
 * copies through the pinned memory it allocated before, its pool (its threshold as set, memory from it
 * again), the stack limit it set; and
 * with new memory and a module loaded now. Results against the CPU.
 * With "wait-twice" it then says "bystander: ready again" and waits for a second fault, after which its
 * memory must still be intact and its old kernel still run (its second coming back).
 * With "wait-unsynced" it leaves a memset queued on its stream unsynchronized, with its event recorded
 * behind it, before it waits: work the fault may have lost. It comes back, and that stream, that event and
 * its context say CUDA_ERROR_LAUNCH_FAILED at their next synchronize, once; its legacy and per-thread
 * streams, seen to end before, and an event recorded on the legacy one, lost nothing and say
 * CUDA_SUCCESS. Then it writes the memset's target anew and goes on as above. "wait-unsynced-ptds" does
 * the same with the memset and the event on its per-thread stream: that stream, the event and the context
 * say it, its own stream and the legacy one do not.
 * With "busy" it computes in a loop (a kernel adds 1 to its small allocation, then a synchronize and a
 * check of every word) until a line comes on stdin, while faults come and go: a round's work may be lost
 * at a fault, but never silently: a call says CUDA_ERROR_LAUNCH_FAILED and it writes its contents anew;
 * or a call of its answered the fault's own error (it was told its context failed, and does not come
 * back), and it exits with status 3. A wrong result after calls that all succeeded fails the test.
 * With "wait-many" it holds only MANY allocations of 1 MiB (a chunk of its own each: more chunks than a
 * socket's buffer holds messages), each with a word of its own, waits, and checks every word.
 * In every mode but "busy" and "wait-many" it also holds graph instances made before the fault: one of a
 * graph built node by node (memset, kernel, then a copy and a host function), one of a graph captured on
 * its stream (two kernels), and one of a graph holding a child graph; and two graphs: the captured one,
 * with its nodes, and one never instantiated. After the fault the first two instances run again with the
 * same results, the captured graph is instantiated again and runs, its nodes are its nodes; the instance
 * with a child graph and the graph never instantiated, which cumux does not make again, say
 * CUDA_ERROR_INVALID_HANDLE (docs/faults.md), and destroying them succeeds.
 * With "wait-array" it holds an array with known contents and waits: arrays do not come back (their
 * contents are the failed worker's), so after the fault its calls must return a fatal error, the same one
 * each time, never a success; it says "bystander: did not come back (N)" and passes. "wait-ipc": the same
 * for a program holding another program's memory open through CUDA IPC (a child of its own exports it),
 * and "wait-global" for one that asked for a module global's address and wrote it (its module comes back
 * with the global elsewhere, holding the image's values).
 * Without "wait" it does the same with no fault in between (part of the GPU suite). */
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test.h"

static void expect_words(CUdeviceptr p, size_t bytes, unsigned first, const char *what)
{
    unsigned *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(h, p, bytes));
    for (size_t i = 0; i < bytes / 4; i++)
        if (h[i] != first + (unsigned)i)
            gt_fail("%s: word %zu is 0x%x, expected 0x%x", what, i, h[i], first + (unsigned)i);
    free(h);
}

static void fill_words(CUdeviceptr p, size_t bytes, unsigned first)
{
    unsigned *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    for (size_t i = 0; i < bytes / 4; i++)
        h[i] = first + (unsigned)i;
    CK(cuMemcpyHtoD(p, h, bytes));
    free(h);
}

/* Graph instances made before the fault. */
enum { GW = 1024 };
static _Atomic unsigned host_runs;

static void CUDA_CB count_run(void *data)
{
    (void)data;
    host_runs++;
}

struct graphs {
    CUgraphExec built, captured, with_child;
    CUgraph captured_graph, loose;
    CUgraphNode captured_nodes[2];
    CUdeviceptr buf; /* 3 * GW words: the built graph's target and copy, the captured graph's target */
};

static void make_graphs(struct graphs *G, CUfunction add, CUstream stream)
{
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    CK(cuMemAlloc(&G->buf, 3 * GW * 4));
    CUdeviceptr target = G->buf, copy = G->buf + GW * 4, cap = G->buf + 2 * GW * 4;
    unsigned long long n = GW;
    unsigned four = 4, nine = 9, one = 1;
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNode set, k, cp, host;
    CUDA_MEMSET_NODE_PARAMS ms = {.dst = target, .value = 0x100, .elementSize = 4, .width = GW, .height = 1};
    CK(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, ctx));
    void *args[] = {&target, &n, &four};
    CUDA_KERNEL_NODE_PARAMS kp = {.func = add, .gridDimX = GW / 256, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
    CK(cuGraphAddKernelNode(&k, g, &set, 1, &kp));
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = target;
    c.dstDevice = copy;
    c.WidthInBytes = GW * 4;
    c.Height = c.Depth = 1;
    CK(cuGraphAddMemcpyNode(&cp, g, &k, 1, &c, ctx));
    CUDA_HOST_NODE_PARAMS hp = {.fn = count_run, .userData = NULL};
    CK(cuGraphAddHostNode(&host, g, &k, 1, &hp));
    CK(cuGraphInstantiate(&G->built, g, 0));
    CK(cuGraphDestroy(g)); /* the instance lives on without it */
    CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    void *a9[] = {&cap, &n, &nine}, *a1[] = {&cap, &n, &one};
    CK(cuLaunchKernel(add, GW / 256, 1, 1, 256, 1, 1, 0, stream, a9, NULL));
    CK(cuLaunchKernel(add, GW / 256, 1, 1, 256, 1, 1, 0, stream, a1, NULL));
    CK(cuStreamEndCapture(stream, &G->captured_graph));
    CK(cuGraphInstantiate(&G->captured, G->captured_graph, 0));
    size_t nn = 2;
    CK(cuGraphGetNodes(G->captured_graph, G->captured_nodes, &nn));
    if (nn != 2)
        gt_fail("the captured graph has %zu nodes, not 2", nn);
    CUgraphNode loose_node;
    CK(cuGraphCreate(&G->loose, 0));
    CK(cuGraphAddEmptyNode(&loose_node, G->loose, NULL, 0));
    CUgraph child, parent;
    CUgraphNode empty, holder;
    CK(cuGraphCreate(&child, 0));
    CK(cuGraphAddEmptyNode(&empty, child, NULL, 0));
    CK(cuGraphCreate(&parent, 0));
    CK(cuGraphAddChildGraphNode(&holder, parent, NULL, 0, child));
    CK(cuGraphInstantiate(&G->with_child, parent, 0));
    CK(cuGraphDestroy(parent));
    CK(cuGraphDestroy(child));
}

static void expect_value(CUdeviceptr p, unsigned v, const char *what)
{
    unsigned *h = malloc(GW * 4);
    if (!h)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(h, p, GW * 4));
    for (unsigned i = 0; i < GW; i++)
        if (h[i] != v)
            gt_fail("%s: word %u is 0x%x, expected 0x%x", what, i, h[i], v);
    free(h);
}

/* Both instances run, on its stream, with results against what their nodes do; the one holding a child
 * graph runs too, or, after a fault (gone), says CUDA_ERROR_INVALID_HANDLE. */
static void run_graphs(struct graphs *G, CUstream stream, bool after_fault, const char *when)
{
    char what[160];
    unsigned runs = host_runs;
    CK(cuMemsetD32(G->buf + GW * 4, 0, GW));
    CK(cuMemsetD32(G->buf + 2 * GW * 4, 0x500, GW));
    CK(cuGraphLaunch(G->built, stream));
    CK(cuGraphLaunch(G->captured, stream));
    CK(cuStreamSynchronize(stream));
    snprintf(what, sizeof what, "%s: the built graph's memset and +4", when);
    expect_value(G->buf, 0x104, what);
    snprintf(what, sizeof what, "%s: the built graph's copy", when);
    expect_value(G->buf + GW * 4, 0x104, what);
    snprintf(what, sizeof what, "%s: the captured graph's +9 and +1", when);
    expect_value(G->buf + 2 * GW * 4, 0x50a, what);
    if (host_runs != runs + 1)
        gt_fail("%s: the built graph's host function ran %u times, not once", when, host_runs - runs);
    CUresult r = cuGraphLaunch(G->with_child, stream);
    CUresult want = after_fault ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
    if (r != want)
        gt_fail("%s: launching the instance with a child graph returned %d, expected %d", when, (int)r, (int)want);
    size_t nn = 0;
    r = cuGraphGetNodes(G->loose, NULL, &nn);
    if (r != want)
        gt_fail("%s: the nodes of the graph never instantiated: %d, expected %d", when, (int)r, (int)want);
    /* The captured graph: its nodes the same objects, instantiated again, run. */
    CUgraphNode nodes[2] = {NULL, NULL};
    nn = 2;
    CK(cuGraphGetNodes(G->captured_graph, nodes, &nn));
    for (int i = 0; i < 2; i++) {
        CUgraphNodeType type;
        CK(cuGraphNodeGetType(G->captured_nodes[i], &type));
        if (nn != 2 || nodes[i] != G->captured_nodes[i] || type != CU_GRAPH_NODE_TYPE_KERNEL)
            gt_fail("%s: the captured graph's node %d is not the one it had (%zu nodes, type %d)", when, i, nn,
                    (int)type);
    }
    CUgraphExec again;
    CK(cuGraphInstantiate(&again, G->captured_graph, 0));
    CK(cuMemsetD32(G->buf + 2 * GW * 4, 0x700, GW));
    CK(cuGraphLaunch(again, stream));
    CK(cuStreamSynchronize(stream));
    snprintf(what, sizeof what, "%s: the captured graph instantiated again", when);
    expect_value(G->buf + 2 * GW * 4, 0x70a, what);
    CK(cuGraphExecDestroy(again));
    CK(cuStreamSynchronize(stream));
    /* All seen to end: the legacy stream's memsets by the synchronous copies behind them, which the
     * server counts as seeing that stream end. A fault now loses no work of this program (were the copies
     * not counted, its context would say CUDA_ERROR_LAUNCH_FAILED after the fault, failing the test). */
}

static void destroy_graphs(struct graphs *G)
{
    CK(cuGraphExecDestroy(G->built));
    CK(cuGraphExecDestroy(G->captured));
    CK(cuGraphExecDestroy(G->with_child));
    CK(cuGraphDestroy(G->captured_graph));
    CK(cuGraphDestroy(G->loose));
    CK(cuMemFree(G->buf));
}

/* "busy": rounds of +1 on small until stdin has a line. A round whose work was lost at a fault (a call
 * says CUDA_ERROR_LAUNCH_FAILED: what the cut-off kernel wrote is not known) starts again from contents
 * written anew; a fault while it does so (faults may come back to back) is said the same way. */
static void busy(CUdeviceptr small, size_t bytes, CUfunction add, CUstream stream)
{
    unsigned long long n = bytes / 4;
    unsigned one = 1, *h = malloc(bytes);
    if (!h)
        gt_fail("out of host memory");
    printf("bystander: busy\n");
    fflush(stdout);
    unsigned long rounds = 0, lost = 0, said_in_a_row = 0;
    unsigned k = 0; /* increments since the contents were written */
    bool rewrite = false;
    for (;;) {
        struct pollfd in = {.fd = 0, .events = POLLIN};
        if (poll(&in, 1, 0) > 0)
            break;
        CUresult r = CUDA_SUCCESS;
        if (rewrite) {
            for (size_t i = 0; i < n; i++)
                h[i] = 0x1000 + (unsigned)i;
            r = cuMemcpyHtoD(small, h, bytes);
            if (r == CUDA_SUCCESS)
                r = cuStreamSynchronize(stream); /* its stream may say it too */
            if (r == CUDA_SUCCESS) {
                rewrite = false;
                k = 0;
            }
        } else {
            void *args[] = {&small, &n, &one};
            r = cuLaunchKernel(add, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, stream, args, NULL);
            if (r == CUDA_SUCCESS)
                r = cuStreamSynchronize(stream);
            if (r == CUDA_SUCCESS)
                r = cuMemcpyDtoH(h, small, bytes);
            if (r == CUDA_SUCCESS) {
                rounds++;
                k++;
                for (size_t i = 0; i < n; i++)
                    if (h[i] != 0x1000 + (unsigned)i + k)
                        gt_fail("round %lu: word %zu is 0x%x, expected 0x%x: work lost silently", rounds, i, h[i],
                                0x1000 + (unsigned)i + k);
            }
        }
        if (r == CUDA_ERROR_LAUNCH_FAILED && ++said_in_a_row < 1000) {
            lost += !rewrite;
            rewrite = true;
            continue;
        }
        if (r != CUDA_SUCCESS) {
            const char *name = NULL;
            cuGetErrorName(r, &name);
            printf("bystander: told the fault's error after %lu rounds (%s)\n", rounds, name ? name : "?");
            fflush(stdout);
            exit(3);
        }
        said_in_a_row = 0;
    }
    printf("bystander: %lu busy rounds, all right; %lu lost at faults\n", rounds, lost);
    fflush(stdout);
    free(h);
    exit(0);
}

/* "wait-many": many chunks through a fault. */
static void wait_many(void)
{
    enum { MANY = 600 };
    CUdeviceptr *p = calloc(MANY, sizeof *p);
    if (!p)
        gt_fail("out of host memory");
    for (unsigned i = 0; i < MANY; i++) {
        CK(cuMemAlloc(&p[i], 1 << 20));
        CK(cuMemsetD32(p[i], 0x5000 + i, 1));
    }
    CK(cuCtxSynchronize());
    printf("bystander: ready (%u allocations of 1 MiB)\n", (unsigned)MANY);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        gt_fail("no line on stdin");
    for (unsigned i = 0; i < MANY; i++) {
        unsigned v = 0;
        CK(cuMemcpyDtoH(&v, p[i], sizeof v));
        if (v != 0x5000 + i)
            gt_fail("allocation %u of %u after the fault holds 0x%x, expected 0x%x", i, (unsigned)MANY, v, 0x5000 + i);
        CK(cuMemFree(p[i]));
    }
    free(p);
    gt_pass();
}

/* Says the bystander is ready (holding `what`) and waits for the line that says the fault has come. */
static void ready_then_wait(const char *what)
{
    printf("bystander: ready (%s)\n", what);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        gt_fail("no line on stdin");
}

/* After the fault, a program that does not come back: its synchronize, an allocation and `third` (a call on
 * what it held) all return the same fatal error. */
static void expect_not_back(const char *holding, CUresult (*third)(void *), void *arg)
{
    CUresult first = cuCtxSynchronize();
    CUdeviceptr p;
    CUresult second = cuMemAlloc(&p, 4096);
    CUresult last = third(arg);
    if (first == CUDA_SUCCESS || second != first || last != first)
        gt_fail("after the fault a program holding %s got %d, %d, %d: expected the same fatal error", holding,
                (int)first, (int)second, (int)last);
    printf("bystander: did not come back (%d)\n", (int)first);
}

/* What a pool says of its memory in use counts what was allocated from it (memory in chunks too, with
 * containment): at least `held`, then at least twice that while a second allocation lives, which the high
 * mark keeps after its free. */
static void expect_pool_counts(CUmemoryPool pool, size_t held)
{
    cuuint64_t used = 0, reserved = 0, high = 0;
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    if (used < held || reserved < used)
        gt_fail("its pool says %llu bytes used, %llu reserved, holding %zu", (unsigned long long)used,
                (unsigned long long)reserved, held);
    cuuint64_t was = 0, keep_all = ~0ull; /* a pool keeps what is freed: reserved stays after a sync */
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &was));
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    CUdeviceptr more;
    CK(cuMemAllocFromPoolAsync(&more, held, pool, NULL));
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    if (used < 2 * held)
        gt_fail("its pool says %llu bytes used, holding %zu", (unsigned long long)used, 2 * held);
    CK(cuMemFreeAsync(more, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    if (reserved < 2 * held)
        gt_fail("its pool kept %llu bytes reserved after a free with no release threshold, it held %zu",
                (unsigned long long)reserved, 2 * held);
    CK(cuMemPoolTrimTo(pool, 0));
    cuuint64_t trimmed = 0;
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &trimmed));
    /* Trimming keeps what is in use; natively the 32 MiB block under a live allocation stays whole (H200,
     * 12-04), so less is not required, only never more and never below what is held. */
    if (trimmed > reserved || trimmed < held)
        gt_fail("its pool's reserved memory after a trim: %llu bytes (before %llu, holding %zu)",
                (unsigned long long)trimmed, (unsigned long long)reserved, held);
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &was));
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    if (high < 2 * held)
        gt_fail("its pool's high mark is %llu bytes, it held %zu", (unsigned long long)high, 2 * held);
    cuuint64_t zero = 0;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    if (used < held || high < used)
        gt_fail("after its high mark was reset its pool says %llu used, high %llu", (unsigned long long)used,
                (unsigned long long)high);
}

/* "wait-array": a program holding an array through a fault does not come back. */
static CUarray arr;
static CUresult read_array(void *h)
{
    return cuMemcpyAtoH(h, arr, 0, 64 * sizeof(float));
}

static void wait_array(void)
{
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 64, .Height = 1, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CK(cuArrayCreate(&arr, &d));
    float h[64];
    for (int i = 0; i < 64; i++)
        h[i] = (float)i;
    CK(cuMemcpyHtoA(arr, 0, h, sizeof h));
    CK(cuCtxSynchronize());
    ready_then_wait("an array");
    expect_not_back("an array", read_array, h);
    gt_pass();
}

/* "wait-ipc": a program holding another program's memory open (CUDA IPC) through a fault does not come
 * back: the new worker knows nothing of what the failed one shared. A child (forked before any CUDA call)
 * exports an allocation and stays until told to go. */
static CUdeviceptr opened;
static CUresult read_opened(void *w)
{
    return cuMemcpyDtoH(w, opened, 4096);
}

static void wait_ipc(void)
{
    int down[2], up[2];
    if (pipe(down) || pipe(up))
        gt_fail("pipe");
    pid_t child = fork();
    if (child < 0)
        gt_fail("fork");
    if (child == 0) {
        CK(cuInit(0));
        gt_primary_ctx(0, NULL);
        CUdeviceptr d;
        CK(cuMemAlloc(&d, 4096));
        CK(cuMemsetD32(d, 0x1234, 1024));
        /* A memset may run after it returns (as natively): done before the other program reads. */
        CK(cuCtxSynchronize());
        CUipcMemHandle h;
        CK(cuIpcGetMemHandle(&h, d));
        if (write(up[1], &h, sizeof h) != (ssize_t)sizeof h)
            _exit(1);
        char go;
        _exit(read(down[0], &go, 1) == 1 ? 0 : 1); /* the memory goes with the process */
    }
    gt_require_gpu();
    CUipcMemHandle h;
    if (read(up[0], &h, sizeof h) != (ssize_t)sizeof h)
        gt_fail("no handle from the exporting child");
    gt_primary_ctx(0, NULL);
    CUdeviceptr p;
    CK(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    unsigned w[1024];
    CK(cuMemcpyDtoH(w, p, sizeof w));
    for (int i = 0; i < 1024; i++)
        if (w[i] != 0x1234)
            gt_fail("the opened memory's word %d is 0x%x", i, w[i]);
    ready_then_wait("another program's memory open");
    opened = p;
    expect_not_back("IPC memory", read_opened, w);
    if (write(down[1], "g", 1) != 1)
        gt_fail("pipe write");
    int st = 0;
    waitpid(child, &st, 0);
    gt_pass();
}

/* "wait-global": a program that asked for a module global's address and wrote to it does not come back. */
static CUdeviceptr global_table;
static CUresult read_global(void *h)
{
    return cuMemcpyDtoH(h, global_table, GT_TABLE_LEN * sizeof(unsigned));
}

static void wait_global(void)
{
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    size_t size = 0;
    CK(cuModuleGetGlobal(&global_table, &size, mod, "g_table"));
    if (size != GT_TABLE_LEN * sizeof(unsigned))
        gt_fail("g_table is %zu bytes", size);
    static unsigned h[GT_TABLE_LEN];
    for (int i = 0; i < GT_TABLE_LEN; i++)
        h[i] = 0x5000u + (unsigned)i;
    CK(cuMemcpyHtoD(global_table, h, sizeof h));
    CK(cuCtxSynchronize());
    ready_then_wait("a module global's address");
    expect_not_back("a module global's address", read_global, h);
    gt_pass();
}

int main(int argc, char **argv)
{
    gt_begin("contain_bystander");
    if (argc > 1 && !strcmp(argv[1], "wait-ipc"))
        wait_ipc(); /* forks before any CUDA call: CUDA is not fork-safe */
    gt_require_gpu();
    if (argc > 1 && !strcmp(argv[1], "wait-array")) {
        gt_primary_ctx(0, NULL);
        wait_array();
    }
    if (argc > 1 && !strcmp(argv[1], "wait-global")) {
        gt_primary_ctx(0, NULL);
        wait_global();
    }
    if (argc > 1 && !strcmp(argv[1], "wait-many")) {
        gt_primary_ctx(0, NULL);
        wait_many();
    }
    bool on_ptds = argc > 1 && !strcmp(argv[1], "wait-unsynced-ptds");
    bool unsynced = on_ptds || (argc > 1 && !strcmp(argv[1], "wait-unsynced"));
    bool twice = argc > 1 && !strcmp(argv[1], "wait-twice");
    bool is_busy = argc > 1 && !strcmp(argv[1], "busy");
    bool wait = unsynced || twice || (argc > 1 && !strcmp(argv[1], "wait"));
    gt_primary_ctx(0, NULL);
    enum { SMALL = 4096, BIG = 3 << 20, ASYNC = 96 << 10, POOLED = 40 << 10 };
    CUdeviceptr small, big, async;
    CK(cuMemAlloc(&small, SMALL));
    CK(cuMemAlloc(&big, BIG));
    CK(cuMemAllocAsync(&async, ASYNC, NULL));
    fill_words(small, SMALL, 0x1000);
    fill_words(big, BIG, 0x200000);
    fill_words(async, ASYNC, 0x3000000);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    const cuuint64_t threshold = 3 << 20;
    cuuint64_t v = threshold;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    CUdeviceptr pooled;
    CK(cuMemAllocFromPoolAsync(&pooled, POOLED, pool, NULL));
    fill_words(pooled, POOLED, 0x4000000);
    CK(cuCtxSynchronize());
    expect_pool_counts(pool, POOLED);
    CUmodule mod0 = gt_module_from_file_data(GT_FATBIN);
    CUfunction add0 = gt_function(mod0, "add_u32");
    CK(cuFuncSetAttribute(add0, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    CUlibrary lib = gt_library_from_file_data(GT_FATBIN);
    CUkernel kern;
    CK(cuLibraryGetKernel(&kern, lib, "add_u32"));
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUevent done;
    CK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    unsigned *pinned;
    CK(cuMemHostAlloc((void **)&pinned, SMALL, CU_MEMHOSTALLOC_PORTABLE));
    for (unsigned i = 0; i < SMALL / 4; i++)
        pinned[i] = 0x77000 + i;
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD)); /* its per-thread default stream exists from here */
    /* A limit it set: its kernels' stack, four times the default (a new worker's context has the default). */
    const size_t stack = 4096;
    CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
    if (is_busy)
        busy(small, SMALL, add0, stream);
    struct graphs graphs;
    make_graphs(&graphs, add0, stream);
    run_graphs(&graphs, stream, false, "before the fault");
    CUevent on_legacy;
    CK(cuEventCreate(&on_legacy, CU_EVENT_DISABLE_TIMING));
    if (unsynced) {
        CK(cuEventRecord(on_legacy, CU_STREAM_LEGACY));
        CK(cuStreamSynchronize(CU_STREAM_LEGACY));
        CUstream on = on_ptds ? CU_STREAM_PER_THREAD : stream;
        CK(cuMemsetD32Async(async, 0, ASYNC / 4, on)); /* queued, never seen to end before the fault */
        CK(cuEventRecord(done, on));
    }
    if (wait) {
        printf("bystander: ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            gt_fail("no line on stdin");
    }
    if (unsynced) {
        /* The work of that stream was lost: the stream, the event behind it and its context say so once,
         * then all is well; what had ended before lost nothing. */
        const CUresult L = CUDA_ERROR_LAUNCH_FAILED, S = CUDA_SUCCESS;
        CUresult want[2][6] = {{L, S, S, L, S, L}, {S, S, S, S, S, S}};
        if (on_ptds)
            want[0][0] = S, want[0][2] = L;
        for (int k = 0; k < 2; k++) {
            CUresult got[6] = {cuStreamSynchronize(stream), cuStreamSynchronize(CU_STREAM_LEGACY),
                               cuStreamSynchronize(CU_STREAM_PER_THREAD), cuEventSynchronize(done),
                               cuEventSynchronize(on_legacy), cuCtxSynchronize()};
            for (int i = 0; i < 6; i++)
                if (got[i] != want[k][i])
                    gt_fail("after the fault, synchronize %d (stream, legacy, per-thread, its event, the legacy's event, "
                            "context) of round %d returned %d, expected %d", i, k, (int)got[i], (int)want[k][i]);
        }
        fill_words(async, ASYNC, 0x3000000); /* what the cut-off memset left is not known */
    }
    /* Its memory, where it was. */
    expect_words(small, SMALL, 0x1000, "the small allocation after the fault");
    run_graphs(&graphs, stream, wait, "after the fault");
    expect_words(big, BIG, 0x200000, "the large allocation after the fault");
    expect_words(async, ASYNC, 0x3000000, "the stream-ordered allocation after the fault");
    expect_words(pooled, POOLED, 0x4000000, "the memory from its own pool after the fault");
    size_t got_stack = 0;
    CK(cuCtxGetLimit(&got_stack, CU_LIMIT_STACK_SIZE));
    if (got_stack < stack)
        gt_fail("its context's stack limit is %zu bytes, set to %zu", got_stack, stack);
    /* Its pool, as it made it: the threshold it set, memory from it again. */
    v = 0;
    CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    if (v != threshold)
        gt_fail("its pool's release threshold is %llu, set to %llu", (unsigned long long)v,
                (unsigned long long)threshold);
    CUdeviceptr pooled2;
    CK(cuMemAllocFromPoolAsync(&pooled2, POOLED, pool, stream));
    CK(cuMemsetD32Async(pooled2, 0x6000000, POOLED / 4, stream));
    CK(cuStreamSynchronize(stream));
    unsigned *back = malloc(POOLED);
    if (!back)
        gt_fail("out of host memory");
    CK(cuMemcpyDtoH(back, pooled2, POOLED));
    for (unsigned i = 0; i < POOLED / 4; i++)
        if (back[i] != 0x6000000)
            gt_fail("new memory from its pool: word %u is 0x%x", i, back[i]);
    free(back);
    CK(cuMemFreeAsync(pooled2, stream));
    /* Computing again with what it made before: the module's kernel on its stream (+5 to every word of
     * big, with the dynamic shared memory its attribute allows), the event recorded there; the library's
     * kernel (+2 to small). */
    unsigned long long n = BIG / 4, ns = SMALL / 4;
    unsigned five = 5, two = 2, seven = 7;
    void *args0[] = {&big, &n, &five};
    CK(cuLaunchKernel(add0, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 1024, stream, args0, NULL));
    CK(cuEventRecord(done, stream));
    CK(cuEventSynchronize(done));
    CK(cuStreamSynchronize(stream));
    expect_words(big, BIG, 0x200000 + 5, "the large allocation after the old module's kernel added 5");
    void *args1[] = {&small, &ns, &two};
    CK(cuLaunchKernel((CUfunction)kern, (unsigned)((ns + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args1, NULL));
    CK(cuCtxSynchronize());
    expect_words(small, SMALL, 0x1000 + 2, "the small allocation after the old library's kernel added 2");
    unsigned three = 3;
    void *args2[] = {&small, &ns, &three};
    CK(cuLaunchKernel(add0, (unsigned)((ns + 255) / 256), 1, 1, 256, 1, 1, 0, CU_STREAM_PER_THREAD, args2, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    expect_words(small, SMALL, 0x1000 + 5, "the small allocation after a kernel on the per-thread stream added 3");
    /* Its pinned memory, made before: an asynchronous copy from it on its old stream, and back. */
    CK(cuMemcpyHtoDAsync(async, pinned, SMALL, stream));
    CK(cuStreamSynchronize(stream));
    expect_words(async, SMALL, 0x77000, "a copy from pinned memory made before the fault");
    memset(pinned, 0, SMALL);
    CK(cuMemcpyDtoHAsync(pinned, async, SMALL, stream));
    CK(cuStreamSynchronize(stream));
    for (unsigned i = 0; i < SMALL / 4; i++)
        if (pinned[i] != 0x77000 + i)
            gt_fail("the copy back into pinned memory: word %u is 0x%x", i, pinned[i]);
    /* And a module loaded now (+7 to big). */
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction add = gt_function(mod, "add_u32");
    void *args[] = {&big, &n, &seven};
    CK(cuLaunchKernel(add, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    expect_words(big, BIG, 0x200000 + 12, "the large allocation after a new module's kernel added 7");
    CUdeviceptr fresh;
    CK(cuMemAlloc(&fresh, SMALL));
    fill_words(fresh, SMALL, 0x42);
    expect_words(fresh, SMALL, 0x42, "new memory");
    CK(cuMemFree(fresh));
    if (twice) {
        CK(cuCtxSynchronize());
        printf("bystander: ready again\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            gt_fail("no second line on stdin");
        expect_words(big, BIG, 0x200000 + 12, "the large allocation after a second fault");
        expect_words(small, SMALL, 0x1000 + 5, "the small allocation after a second fault");
        CK(cuLaunchKernel(add0, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 1024, stream, args0, NULL));
        CK(cuStreamSynchronize(stream));
        expect_words(big, BIG, 0x200000 + 17, "the large allocation after the old kernel added 5 again");
        run_graphs(&graphs, stream, true, "after a second fault");
    }
    destroy_graphs(&graphs);
    CK(cuMemFree(small));
    CK(cuMemFree(big));
    CK(cuMemFreeAsync(async, NULL));
    CK(cuMemFreeAsync(pooled, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemPoolDestroy(pool));
    CK(cuModuleUnload(mod));
    CK(cuModuleUnload(mod0));
    CK(cuLibraryUnload(lib));
    CK(cuStreamDestroy(stream));
    CK(cuEventDestroy(done));
    CK(cuEventDestroy(on_legacy));
    CK(cuMemFreeHost(pinned));
    gt_pass();
}
