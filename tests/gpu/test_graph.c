/* CUDA graphs through the driver API: stream capture (kernels, memset, copy to pinned memory, a host
 * function, work forked to a second stream by events), explicit graphs (kernel, memset, memcpy, empty
 * and host nodes with dependencies), instantiate, many launches, kernel parameters changed in an
 * instance, memset, memcpy and host nodes read back and changed in a graph and in an instance, a node turned
 * off and on, an instance uploaded when made, a capture into an existing graph, a clone changed apart from its
 * original, an edge removed and a node destroyed, and cuGraphExecUpdate; event record
 * and wait nodes ordering two graphs on two streams. Results
 * against the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <unistd.h>
#include <stdbool.h>

#include "gpu_test.h"

#define N 4096

static int host_calls;
static void CUDA_CB count_call(void *arg)
{
    (void)arg;
    host_calls++;
}

static int other_calls;
static void CUDA_CB count_other(void *arg)
{
    (void)arg;
    other_calls++;
}

/* Every word of got[0..N) is v. */
static void expect_words(const void *got, uint32_t v, const char *what)
{
    for (int i = 0; i < N; i++) {
        uint32_t w;
        memcpy(&w, (const char *)got + 4 * (size_t)i, 4);
        if (w != v)
            gt_fail("%s: word %d is 0x%x, expected 0x%x", what, i, w, v);
    }
}

static void expect_scaled(const float *got, const float *in, float a, float b, const char *what)
{
    for (int i = 0; i < N; i++) {
        float want = in[i] * a + b;
        if (got[i] != want)
            gt_fail("%s: element %d is %g, expected %g", what, i, got[i], want);
    }
}

/* Event record and wait nodes: one graph spins a kernel for a while, then sets a flag and records an
 * event; another, launched at once on another stream, waits for the event and copies the flag. Without
 * the wait the copy would read the flag before it is set. The nodes' events are read back and changed,
 * in the graph and in an instance. */
static void event_nodes(CUmodule mod, CUstream s, CUstream s2)
{
    CUfunction spin = gt_function(mod, "spin_flag"), copy = gt_function(mod, "copy_flag");
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    CUdeviceptr flag, got;
    CK(cuMemAlloc(&flag, sizeof(int)));
    CK(cuMemAlloc(&got, sizeof(int)));
    CUevent ev, ev2;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));

    long long cycles = gt_cycles_for_ms(dev, 100);
    int value = 42;
    void *sargs[] = {&cycles, &flag, &value};
    CUDA_KERNEL_NODE_PARAMS kp = {.func = spin, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                                  .blockDimY = 1, .blockDimZ = 1, .kernelParams = sargs};
    CUgraph producer, consumer;
    CUgraphNode k1, rec, wait, k2;
    CK(cuGraphCreate(&producer, 0));
    CK(cuGraphAddKernelNode(&k1, producer, NULL, 0, &kp));
    CK(cuGraphAddEventRecordNode(&rec, producer, &k1, 1, ev));
    void *cargs[] = {&flag, &got};
    kp.func = copy;
    kp.kernelParams = cargs;
    CK(cuGraphCreate(&consumer, 0));
    CK(cuGraphAddEventWaitNode(&wait, consumer, NULL, 0, ev));
    CK(cuGraphAddKernelNode(&k2, consumer, &wait, 1, &kp));

    CUgraphNodeType t;
    CK(cuGraphNodeGetType(rec, &t));
    if (t != CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        gt_fail("an event record node is of type %d", (int)t);
    CK(cuGraphNodeGetType(wait, &t));
    if (t != CU_GRAPH_NODE_TYPE_WAIT_EVENT)
        gt_fail("an event wait node is of type %d", (int)t);
    CUevent e_got;
    CK(cuGraphEventRecordNodeGetEvent(rec, &e_got));
    if (e_got != ev)
        gt_fail("cuGraphEventRecordNodeGetEvent gave %p, not the node's event %p", (void *)e_got, (void *)ev);
    CK(cuGraphEventWaitNodeGetEvent(wait, &e_got));
    if (e_got != ev)
        gt_fail("cuGraphEventWaitNodeGetEvent gave %p, not the node's event %p", (void *)e_got, (void *)ev);
    EXPECT_RC(cuGraphEventWaitNodeGetEvent(rec, &e_got), CUDA_ERROR_INVALID_VALUE);

    CUgraphExec pe, ce;
    CK(cuGraphInstantiate(&pe, producer, 0));
    CK(cuGraphInstantiate(&ce, consumer, 0));
    for (int round = 0; round < 3; round++) {
        int zero = 0, out = -1;
        CK(cuMemcpyHtoD(flag, &zero, sizeof zero));
        CK(cuMemcpyHtoD(got, &zero, sizeof zero));
        value = 42 + round;
        void *a[] = {&cycles, &flag, &value};
        kp.func = spin;
        kp.kernelParams = a;
        CK(cuGraphExecKernelNodeSetParams(pe, k1, &kp));
        if (round == 2) { /* the instance's nodes moved to ev2 and back to ev */
            CK(cuGraphExecEventRecordNodeSetEvent(pe, rec, ev2));
            CK(cuGraphExecEventWaitNodeSetEvent(ce, wait, ev2));
        }
        CK(cuGraphLaunch(pe, s));
        CK(cuGraphLaunch(ce, s2));
        CK(cuStreamSynchronize(s2));
        CK(cuMemcpyDtoH(&out, got, sizeof out));
        if (out != value)
            gt_fail("round %d: the waiting graph copied %d, not the %d the other set before its event", round, out,
                    value);
        CK(cuStreamSynchronize(s));
        CK(cuEventQuery(round == 2 ? ev2 : ev));
    }

    /* The graph's own node changed: an instance made after it uses ev2. */
    CK(cuGraphEventRecordNodeSetEvent(rec, ev2));
    CK(cuGraphEventRecordNodeGetEvent(rec, &e_got));
    if (e_got != ev2)
        gt_fail("after cuGraphEventRecordNodeSetEvent the node names %p, not %p", (void *)e_got, (void *)ev2);
    CK(cuGraphEventWaitNodeSetEvent(wait, ev2));
    EXPECT_RC(cuGraphEventRecordNodeSetEvent(wait, ev), CUDA_ERROR_INVALID_VALUE);

    CK(cuGraphExecDestroy(pe));
    CK(cuGraphExecDestroy(ce));
    CK(cuGraphDestroy(producer));
    CK(cuGraphDestroy(consumer));
    CK(cuEventDestroy(ev));
    CK(cuEventDestroy(ev2));
    CK(cuMemFree(flag));
    CK(cuMemFree(got));
}

/* A kernel node of scale_add over the N elements, with the given arguments. */
static CUDA_KERNEL_NODE_PARAMS scale_node(CUfunction scale, void **args)
{
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = scale;
    kp.gridDimX = 16, kp.gridDimY = 1, kp.gridDimZ = 1;
    kp.blockDimX = 256, kp.blockDimY = 1, kp.blockDimZ = 1;
    kp.kernelParams = args;
    return kp;
}

/* Graph memory: an allocation captured with its free (the graph's scratch buffer), the same made by hand
 * with a memset on it, and one the graph leaves live, read and freed after the launch. */
static int count_nodes(CUgraph g, CUgraphNodeType type, CUgraphNode *first)
{
    size_t n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        gt_fail("out of memory");
    CK(cuGraphGetNodes(g, v, &n));
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CK(cuGraphNodeGetType(v[i], &t));
        if (t == type && count++ == 0 && first)
            *first = v[i];
    }
    free(v);
    return count;
}

static void graph_memory(CUfunction scale, CUstream s, CUdeviceptr out, const float *h_in, float *h_out)
{
    int n = N;
    size_t bytes = N * sizeof(float);
    /* Captured: scratch = in; out = 2 * scratch + 1; scratch freed; out copied back. */
    CUdeviceptr scratch = 0;
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuMemAllocAsync(&scratch, bytes, s));
    CK(cuMemcpyHtoDAsync(scratch, h_in, bytes, s));
    float a = 2.0f, b = 1.0f;
    void *args[] = {&scratch, &out, &a, &b, &n};
    CK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CK(cuMemFreeAsync(scratch, s));
    CK(cuMemcpyDtoHAsync(h_out, out, bytes, s));
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    if (!scratch)
        gt_fail("a captured cuMemAllocAsync gave no address");
    CUgraphNode an = NULL, fn = NULL;
    if (count_nodes(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &an) != 1 || count_nodes(g, CU_GRAPH_NODE_TYPE_MEM_FREE, &fn) != 1)
        gt_fail("the captured graph has not one allocation and one free node");
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    CK(cuGraphMemAllocNodeGetParams(an, &ap));
    if (ap.dptr != scratch || ap.bytesize < bytes || ap.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        gt_fail("allocation node: address 0x%llx (captured 0x%llx), %zu bytes", (unsigned long long)ap.dptr,
                (unsigned long long)scratch, ap.bytesize);
    CUdeviceptr freed = 0;
    CK(cuGraphMemFreeNodeGetParams(fn, &freed));
    if (freed != scratch)
        gt_fail("free node frees 0x%llx, not 0x%llx", (unsigned long long)freed, (unsigned long long)scratch);
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    for (int k = 0; k < 3; k++) {
        memset(h_out, 0, bytes);
        CK(cuGraphLaunch(ge, s));
        CK(cuStreamSynchronize(s));
        expect_scaled(h_out, h_in, a, b, "a graph with a captured allocation and free");
    }
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));

    /* By hand: alloc -> memset 1.5 -> out = 2 * it -> free. */
    CUgraph eg;
    CK(cuGraphCreate(&eg, 0));
    CUgraphNode nalloc, nset, nk, nfree;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = 0;
    ap.bytesize = bytes;
    CK(cuGraphAddMemAllocNode(&nalloc, eg, NULL, 0, &ap));
    CUdeviceptr buf = ap.dptr;
    if (!buf)
        gt_fail("cuGraphAddMemAllocNode gave no address");
    float fill = 1.5f;
    uint32_t fill_bits;
    memcpy(&fill_bits, &fill, 4);
    CUDA_MEMSET_NODE_PARAMS ms = {.dst = buf, .value = fill_bits, .elementSize = 4, .width = N, .height = 1};
    /* On graph memory the driver needs the context named (NULL: CUDA_ERROR_INVALID_VALUE on the H200). */
    CUcontext cur;
    CK(cuCtxGetCurrent(&cur));
    CK(cuGraphAddMemsetNode(&nset, eg, &nalloc, 1, &ms, cur));
    float a2 = 2.0f, b2 = 0.0f;
    void *args2[] = {&buf, &out, &a2, &b2, &n};
    CUDA_KERNEL_NODE_PARAMS kp = scale_node(scale, args2);
    CK(cuGraphAddKernelNode(&nk, eg, &nset, 1, &kp));
    CK(cuGraphAddMemFreeNode(&nfree, eg, &nk, 1, buf));
    CK(cuGraphInstantiate(&ge, eg, 0));
    for (int k = 0; k < 2; k++) {
        CK(cuMemsetD32Async(out, 0, N, s));
        CK(cuGraphLaunch(ge, s));
        CK(cuMemcpyDtoHAsync(h_out, out, bytes, s));
        CK(cuStreamSynchronize(s));
        expect_words(h_out, 0x40400000u /* 3.0f */, "a graph with an allocation node, a memset on it, a free node");
    }
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(eg));

    /* An allocation the graph leaves live: read after the launch, then freed by the program. */
    CK(cuGraphCreate(&eg, 0));
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.bytesize = bytes;
    CK(cuGraphAddMemAllocNode(&nalloc, eg, NULL, 0, &ap));
    ms.dst = ap.dptr;
    ms.value = 0x12345678u;
    CK(cuGraphAddMemsetNode(&nset, eg, &nalloc, 1, &ms, cur));
    CK(cuGraphInstantiate(&ge, eg, 0));
    CK(cuGraphLaunch(ge, s));
    CK(cuMemcpyDtoHAsync(h_out, ap.dptr, bytes, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x12345678u, "graph memory left live after the launch");
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    cuuint64_t used = 0, high = 0;
    CK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    CK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &high));
    if (used < bytes || high < used)
        gt_fail("graph memory in use %llu, high watermark %llu, with %zu bytes live", (unsigned long long)used,
                (unsigned long long)high, bytes);
    cuuint64_t zero = 0;
    CK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    CK(cuMemFreeAsync(ap.dptr, s));
    CK(cuStreamSynchronize(s));
    CK(cuDeviceGraphMemTrim(dev));
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(eg));
}

/* The generic forms: cuGraphAddNode for a memset, a kernel, an allocation and its free; the kernel's
 * arguments changed with cuGraphNodeSetParams in the graph and cuGraphExecNodeSetParams in an instance. */
static void generic_nodes(CUfunction scale, CUstream s, CUdeviceptr out, float *h_out)
{
    int n = N;
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.alloc.bytesize = N * sizeof(float);
    CUgraphNode na, ns, nk, nf;
    CK(cuGraphAddNode(&na, g, NULL, NULL, 0, &p));
    CUdeviceptr buf = p.alloc.dptr;
    if (!buf)
        gt_fail("cuGraphAddNode of an allocation gave no address");
    float one = 1.0f;
    uint32_t one_bits;
    memcpy(&one_bits, &one, 4);
    memset(&p, 0, sizeof p);
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){.dst = buf, .value = one_bits, .elementSize = 4, .width = N, .height = 1,
                                            .ctx = ctx};
    CK(cuGraphAddNode(&ns, g, &na, NULL, 1, &p));
    float a = 3.0f, b = 1.0f; /* 3 * 1 + 1 */
    void *args[] = {&buf, &out, &a, &b, &n};
    CUDA_KERNEL_NODE_PARAMS kp = scale_node(scale, args);
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    memcpy(&p.kernel, &kp, sizeof kp); /* the same layout, v2 and v3 */
    CK(cuGraphAddNode(&nk, g, &ns, NULL, 1, &p));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    p.free.dptr = buf;
    CK(cuGraphAddNode(&nf, g, &nk, NULL, 1, &p));
    /* In the graph: 5 * 1 + 1, before the instance is made. */
    a = 5.0f;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    kp = scale_node(scale, args);
    memcpy(&p.kernel, &kp, sizeof kp);
    CK(cuGraphNodeSetParams(nk, &p));
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    CK(cuGraphLaunch(ge, s));
    CK(cuMemcpyDtoHAsync(h_out, out, N * sizeof(float), s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x40c00000u /* 6.0f */, "a graph made with cuGraphAddNode");
    /* In the instance: 7 * 1 + 1. */
    a = 7.0f;
    kp = scale_node(scale, args);
    memcpy(&p.kernel, &kp, sizeof kp);
    CK(cuGraphExecNodeSetParams(ge, nk, &p));
    CK(cuGraphLaunch(ge, s));
    CK(cuMemcpyDtoHAsync(h_out, out, N * sizeof(float), s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x41000000u /* 8.0f */, "an instance changed with cuGraphExecNodeSetParams");
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
}

/* Conditional nodes: a WHILE node whose body's kernel counts and keeps the condition until 5 runs, then an
 * IF node with an else body (filled by a capture into it), taken by its handle's default (0, assigned at
 * every launch). */
static CUgraphNode one_kernel(CUgraph g, CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraphNode n;
    CK(cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
    return n;
}

static CUgraphNodeParams cond_params(CUgraphConditionalHandle h, CUgraphConditionalNodeType type, unsigned size,
                                     CUcontext ctx)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    return p;
}

static void conditional_nodes(CUmodule mod, CUstream s, float *h_out)
{
    CUfunction count = gt_function(mod, "cond_count"), write = gt_function(mod, "write_value");
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    CUdeviceptr words; /* the counter, then the IF node's answer */
    CK(cuMemAlloc(&words, 8));
    CUdeviceptr counter = words, answer = words + 4;
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle loop, branch;
    CK(cuGraphConditionalHandleCreate(&loop, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&branch, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams p = cond_params(loop, CU_GRAPH_COND_TYPE_WHILE, 1, ctx);
    CUgraphNode wn, in;
    CK(cuGraphAddNode(&wn, g, NULL, NULL, 0, &p));
    CUgraph body = p.conditional.phGraph_out[0];
    unsigned limit = 5;
    void *cargs[] = {&loop, &counter, &limit};
    one_kernel(body, count, cargs);
    p = cond_params(branch, CU_GRAPH_COND_TYPE_IF, 2, ctx);
    CK(cuGraphAddNode(&in, g, &wn, NULL, 1, &p));
    CUgraph then_body = p.conditional.phGraph_out[0], else_body = p.conditional.phGraph_out[1];
    int one = 1, two = 2;
    void *a1[] = {&answer, &one}, *a2[] = {&answer, &two};
    one_kernel(then_body, write, a1);
    /* The else body by a capture into it, as PyTorch fills its conditional nodes' bodies. */
    CK(cuStreamBeginCaptureToGraph(s, else_body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(write, 1, 1, 1, 1, 1, 1, 0, s, a2, NULL));
    CUgraph captured;
    CK(cuStreamEndCapture(s, &captured));
    if (captured != else_body)
        gt_fail("a capture into a conditional node's body ended with another graph");
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(wn, &t));
    if (t != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        gt_fail("a conditional node's type is %d", (int)t);
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    for (int k = 0; k < 2; k++) {
        CK(cuMemsetD32Async(words, 0, 2, s));
        CK(cuGraphLaunch(ge, s));
        CK(cuMemcpyDtoHAsync(h_out, words, 8, s));
        CK(cuStreamSynchronize(s));
        uint32_t got[2];
        memcpy(got, h_out, sizeof got);
        if (got[0] != limit || got[1] != 2)
            gt_fail("launch %d: the WHILE body ran %u times (expected %u), the IF node chose %u (expected the else "
                    "body's 2)", k, got[0], limit, got[1]);
    }
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
    CK(cuMemFree(words));
}

int main(void)
{
    gt_begin("graph");
    gt_require_gpu();
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CUfunction scale = gt_function(mod, "scale_add");
    CUstream s, s2;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr in, mid, out;
    CK(cuMemAlloc(&in, N * sizeof(float)));
    CK(cuMemAlloc(&mid, N * sizeof(float)));
    CK(cuMemAlloc(&out, N * sizeof(float)));
    float *h_in, *h_out;
    CK(cuMemAllocHost((void **)&h_in, N * sizeof(float)));
    CK(cuMemAllocHost((void **)&h_out, N * sizeof(float)));
    for (int i = 0; i < N; i++)
        h_in[i] = (float)(i % 97) - 40.0f;
    int n = N;

    /* ---- capture ---- */
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        gt_fail("stream capturing before any capture");
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamIsCapturing(s, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        gt_fail("cuStreamIsCapturing after begin: %d", (int)st);
    CUevent fork, join;
    CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    float a1 = 2.0f, b1 = 1.0f, a2 = 3.0f, b2 = -5.0f;
    CK(cuMemcpyHtoDAsync(in, h_in, N * sizeof(float), s));
    CK(cuMemsetD32Async(out, 0xdeadbeef, N, s));
    void *args1[] = {&in, &mid, &a1, &b1, &n};
    CK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, s, args1, NULL));
    /* fork to s2 and back */
    CK(cuEventRecord(fork, s));
    CK(cuStreamWaitEvent(s2, fork, 0));
    CK(cuStreamIsCapturing(s2, &st)); /* joined by the wait */
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        gt_fail("a stream that waited for a captured event: capture status %d, not active", (int)st);
    void *args2[] = {&mid, &out, &a2, &b2, &n};
    CK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, s2, args2, NULL));
    CK(cuEventRecord(join, s2));
    CK(cuStreamWaitEvent(s, join, 0));
    CK(cuMemcpyDtoHAsync(h_out, out, N * sizeof(float), s));
    CK(cuLaunchHostFunc(s, count_call, NULL));
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    CUstream pair[2] = {s, s2};
    for (int k = 0; k < 2; k++) {
        CK(cuStreamIsCapturing(pair[k], &st));
        if (st != CU_STREAM_CAPTURE_STATUS_NONE)
            gt_fail("stream %d still capturing (status %d) after the capture ended", k, (int)st);
    }
    /* An end that fails (s2 is not capturing) leaves the capture on s open, and the queries right. */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUgraph nog = NULL;
    if (cuStreamEndCapture(s2, &nog) == CUDA_SUCCESS)
        gt_fail("cuStreamEndCapture of a stream not capturing succeeded");
    CK(cuStreamIsCapturing(s, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        gt_fail("after another stream's end failed: capture status %d, not active", (int)st);
    CK(cuStreamEndCapture(s, &nog));
    CK(cuStreamIsCapturing(s, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        gt_fail("capture status %d after the second capture ended", (int)st);
    CK(cuGraphDestroy(nog));
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    int launches = 20;
    for (int k = 0; k < launches; k++) {
        memset(h_out, 0, N * sizeof(float));
        CK(cuGraphLaunch(ge, s));
        CK(cuStreamSynchronize(s));
        float a = a1 * a2, b = b1 * a2 + b2;
        expect_scaled(h_out, h_in, a, b, "captured graph");
    }
    if (host_calls != launches)
        gt_fail("captured host function ran %d times in %d launches", host_calls, launches);

    /* ---- explicit graph: memset -> kernel -> kernel -> memcpy -> host, plus an empty join ---- */
    CUgraph eg;
    CK(cuGraphCreate(&eg, 0));
    CUgraphNode nset, nk1, nk2, ncpy, nhost, nempty;
    CUDA_MEMSET_NODE_PARAMS ms = {.dst = mid, .pitch = 0, .value = 0, .elementSize = 4, .width = N, .height = 1};
    CK(cuGraphAddMemsetNode(&nset, eg, NULL, 0, &ms, NULL));
    CUDA_KERNEL_NODE_PARAMS kp = scale_node(scale, args1);
    CK(cuGraphAddKernelNode(&nk1, eg, &nset, 1, &kp));
    kp.kernelParams = args2;
    CK(cuGraphAddKernelNode(&nk2, eg, NULL, 0, &kp));
    CK(cuGraphAddDependencies(eg, &nk1, &nk2, NULL, 1));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE, cp.srcDevice = out;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST, cp.dstHost = h_out;
    cp.WidthInBytes = N * sizeof(float), cp.Height = 1, cp.Depth = 1;
    CK(cuGraphAddMemcpyNode(&ncpy, eg, &nk2, 1, &cp, NULL));
    CUDA_HOST_NODE_PARAMS hp = {.fn = count_call, .userData = NULL};
    CK(cuGraphAddHostNode(&nhost, eg, &ncpy, 1, &hp));
    CUgraphNode both[] = {nhost, nk1};
    CK(cuGraphAddEmptyNode(&nempty, eg, both, 2));
    /* Each node is of the kind it was added as. */
    const struct {
        CUgraphNode node;
        CUgraphNodeType type;
    } kinds[] = {{nset, CU_GRAPH_NODE_TYPE_MEMSET}, {nk1, CU_GRAPH_NODE_TYPE_KERNEL}, {ncpy, CU_GRAPH_NODE_TYPE_MEMCPY},
                 {nhost, CU_GRAPH_NODE_TYPE_HOST}, {nempty, CU_GRAPH_NODE_TYPE_EMPTY}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        CUgraphNodeType t = (CUgraphNodeType)-1;
        CK(cuGraphNodeGetType(kinds[i].node, &t));
        if (t != kinds[i].type)
            gt_fail("cuGraphNodeGetType of node %zu: %d, expected %d", i, (int)t, (int)kinds[i].type);
    }
    /* Each node's parameters as given. */
    CUDA_KERNEL_NODE_PARAMS kq;
    CK(cuGraphKernelNodeGetParams(nk1, &kq));
    if (kq.func != scale || kq.gridDimX != 16 || kq.gridDimY != 1 || kq.blockDimX != 256 || kq.sharedMemBytes != 0 ||
        !kq.kernelParams || *(CUdeviceptr *)kq.kernelParams[0] != in || *(CUdeviceptr *)kq.kernelParams[1] != mid ||
        *(float *)kq.kernelParams[2] != a1 || *(float *)kq.kernelParams[3] != b1 || *(int *)kq.kernelParams[4] != n)
        gt_fail("cuGraphKernelNodeGetParams gave other parameters than the node was added with");
    CUDA_MEMSET_NODE_PARAMS mq;
    CK(cuGraphMemsetNodeGetParams(nset, &mq));
    if (mq.dst != ms.dst || mq.value != ms.value || mq.elementSize != 4 || mq.width != N || mq.height != 1)
        gt_fail("cuGraphMemsetNodeGetParams: dst %llx value %u element %u width %zu height %zu",
                (unsigned long long)mq.dst, mq.value, mq.elementSize, mq.width, mq.height);
    CUDA_HOST_NODE_PARAMS hq;
    CK(cuGraphHostNodeGetParams(nhost, &hq));
    if (hq.fn != count_call || hq.userData != NULL)
        gt_fail("cuGraphHostNodeGetParams gave another function");
    EXPECT_RC(cuGraphMemsetNodeGetParams(nk1, &mq), CUDA_ERROR_INVALID_VALUE);

    /* Its shape as the queries give it: one root, six edges, two nodes that depend on nk1. */
    CUgraphNode roots[4];
    size_t nroots = 4;
    CK(cuGraphGetRootNodes(eg, roots, &nroots));
    if (nroots != 1 || roots[0] != nset)
        gt_fail("root nodes: %zu, the first %s the memset node", nroots, nroots && roots[0] == nset ? "is" : "is not");
    CUgraphNode from[8], to[8];
    size_t nedges = 0;
    CK(cuGraphGetEdges(eg, NULL, NULL, NULL, &nedges));
    if (nedges != 6)
        gt_fail("cuGraphGetEdges counts %zu edges, expected 6", nedges);
    nedges = 8;
    CK(cuGraphGetEdges(eg, from, to, NULL, &nedges));
    const CUgraphNode want_from[] = {nset, nk1, nk2, ncpy, nhost, nk1}, want_to[] = {nk1, nk2, ncpy, nhost, nempty, nempty};
    for (int k = 0; k < 6; k++) {
        bool found = false;
        for (size_t i = 0; i < nedges; i++)
            found |= from[i] == want_from[k] && to[i] == want_to[k];
        if (!found)
            gt_fail("edge %d of the graph is missing from cuGraphGetEdges", k);
    }
    CUgraphNode dependents[4];
    size_t ndependents = 4;
    CK(cuGraphNodeGetDependentNodes(nk1, dependents, NULL, &ndependents));
    if (ndependents != 2 || !((dependents[0] == nk2 && dependents[1] == nempty) ||
                              (dependents[0] == nempty && dependents[1] == nk2)))
        gt_fail("dependents of the first kernel node: %zu, not the second kernel and the empty node", ndependents);
    /* Its picture in Graphviz's language: a digraph with (at least) its six edges. */
    char dot[] = "/tmp/cumux-graph-XXXXXX";
    int dfd = mkstemp(dot);
    if (dfd < 0)
        gt_fail("mkstemp: %s", strerror(errno));
    close(dfd);
    CK(cuGraphDebugDotPrint(eg, dot, 0));
    FILE *df = fopen(dot, "r");
    if (!df)
        gt_fail("cuGraphDebugDotPrint wrote no %s", dot);
    char line[512];
    int arrows = 0, digraph = 0;
    while (fgets(line, sizeof line, df)) {
        digraph |= strstr(line, "digraph") != NULL;
        for (char *a = line; (a = strstr(a, "->")); a += 2)
            arrows++;
    }
    fclose(df);
    unlink(dot);
    if (!digraph || arrows < 6)
        gt_fail("cuGraphDebugDotPrint: %s, %d edges", digraph ? "a digraph" : "no digraph", arrows);
    CUgraphExec gexec;
    CK(cuGraphInstantiateWithFlags(&gexec, eg, 0));
    host_calls = 0;
    for (int k = 0; k < 5; k++) {
        memset(h_out, 0, N * sizeof(float));
        CK(cuGraphLaunch(gexec, NULL));
        CK(cuCtxSynchronize());
        expect_scaled(h_out, h_in, a1 * a2, b1 * a2 + b2, "explicit graph");
    }
    if (host_calls != 5)
        gt_fail("host node ran %d times in 5 launches", host_calls);

    /* ---- new parameters in the instance ---- */
    float a3 = 0.5f, b3 = 7.0f;
    void *args3[] = {&mid, &out, &a3, &b3, &n};
    kp.kernelParams = args3;
    CK(cuGraphExecKernelNodeSetParams(gexec, nk2, &kp));
    memset(h_out, 0, N * sizeof(float));
    CK(cuGraphLaunch(gexec, s));
    CK(cuStreamSynchronize(s));
    expect_scaled(h_out, h_in, a1 * a3, b1 * a3 + b3, "instance with new kernel parameters");

    /* ---- whole-graph update: the same topology with other parameters ---- */
    kp.kernelParams = args2;
    CK(cuGraphKernelNodeSetParams(nk2, &kp));
    CUgraphExecUpdateResultInfo info;
    CK(cuGraphExecUpdate(gexec, eg, &info));
    if (info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS)
        gt_fail("cuGraphExecUpdate result %d", (int)info.result);
    memset(h_out, 0, N * sizeof(float));
    CK(cuGraphLaunch(gexec, s));
    CK(cuStreamSynchronize(s));
    expect_scaled(h_out, h_in, a1 * a2, b1 * a2 + b2, "instance after cuGraphExecUpdate");

    /* ---- memset and host node parameters changed, in the graph and then in an instance ---- */
    CUgraph mg;
    CUgraphNode mset, mcpy, mhost;
    CK(cuGraphCreate(&mg, 0));
    CUDA_MEMSET_NODE_PARAMS m1 = {.dst = out, .value = 0x11111111u, .elementSize = 4, .width = N, .height = 1};
    CK(cuGraphAddMemsetNode(&mset, mg, NULL, 0, &m1, NULL));
    CK(cuGraphAddMemcpyNode(&mcpy, mg, &mset, 1, &cp, NULL)); /* out to h_out */
    CUDA_HOST_NODE_PARAMS h1 = {.fn = count_call}, h2 = {.fn = count_other};
    CK(cuGraphAddHostNode(&mhost, mg, &mcpy, 1, &h1));
    m1.value = 0x22222222u;
    CK(cuGraphMemsetNodeSetParams(mset, &m1));
    CK(cuGraphHostNodeSetParams(mhost, &h2));
    CUDA_MEMSET_NODE_PARAMS mgot;
    CK(cuGraphMemsetNodeGetParams(mset, &mgot));
    if (mgot.value != 0x22222222u)
        gt_fail("a memset node's value reads back as 0x%x after it was set to 0x22222222", mgot.value);
    CUgraphExec mx;
    CK(cuGraphInstantiate(&mx, mg, 0));
    host_calls = other_calls = 0;
    CK(cuGraphLaunch(mx, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x22222222u, "memset node after cuGraphMemsetNodeSetParams");
    if (host_calls != 0 || other_calls != 1)
        gt_fail("after cuGraphHostNodeSetParams the old function ran %d times, the new %d (expected 0, 1)", host_calls,
                other_calls);
    m1.value = 0x33333333u;
    CK(cuGraphExecMemsetNodeSetParams(mx, mset, &m1, NULL));
    CK(cuGraphExecHostNodeSetParams(mx, mhost, &h1));
    CK(cuGraphLaunch(mx, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x33333333u, "memset node after cuGraphExecMemsetNodeSetParams");
    if (host_calls != 1 || other_calls != 1)
        gt_fail("after cuGraphExecHostNodeSetParams the functions ran %d and %d times (expected 1, 1)", host_calls,
                other_calls);
    CK(cuGraphMemsetNodeGetParams(mset, &mgot));
    if (mgot.value != 0x22222222u)
        gt_fail("changing the instance changed the graph's memset node (0x%x)", mgot.value);
    /* The copy node read back; the instance's copy pointed at another source. */
    CUDA_MEMCPY3D cgot;
    CK(cuGraphMemcpyNodeGetParams(mcpy, &cgot));
    if (cgot.srcMemoryType != CU_MEMORYTYPE_DEVICE || cgot.srcDevice != out || cgot.dstMemoryType != CU_MEMORYTYPE_HOST ||
        cgot.dstHost != h_out || cgot.WidthInBytes != N * sizeof(float))
        gt_fail("cuGraphMemcpyNodeGetParams: types %d -> %d, %#llx -> %p, %zu bytes", (int)cgot.srcMemoryType,
                (int)cgot.dstMemoryType, (unsigned long long)cgot.srcDevice, cgot.dstHost, cgot.WidthInBytes);
    CUDA_MEMCPY3D cp2 = cp;
    cp2.srcDevice = in;
    CK(cuGraphExecMemcpyNodeSetParams(mx, mcpy, &cp2, NULL));
    CK(cuGraphLaunch(mx, s));
    CK(cuStreamSynchronize(s));
    if (memcmp(h_out, h_in, N * sizeof(float)) != 0)
        gt_fail("the instance's copy node did not copy from its new source");
    CK(cuGraphMemcpyNodeGetParams(mcpy, &cgot));
    if (cgot.srcDevice != out)
        gt_fail("changing the instance changed the graph's copy node");
    CK(cuGraphMemcpyNodeSetParams(mcpy, &cp2));
    CK(cuGraphMemcpyNodeGetParams(mcpy, &cgot));
    if (cgot.srcDevice != in)
        gt_fail("cuGraphMemcpyNodeSetParams: the node copies from %#llx, not %#llx", (unsigned long long)cgot.srcDevice,
                (unsigned long long)in);
    CK(cuGraphExecDestroy(mx));
    CK(cuGraphDestroy(mg));

    /* ---- a node turned off and on in an instance; instance flags; an instance uploaded when made ---- */
    CUgraph og;
    CUgraphNode oset, ocpy;
    CK(cuGraphCreate(&og, 0));
    CUDA_MEMSET_NODE_PARAMS m4 = {.dst = out, .value = 0x44444444u, .elementSize = 4, .width = N, .height = 1};
    CK(cuGraphAddMemsetNode(&oset, og, NULL, 0, &m4, NULL));
    CK(cuGraphAddMemcpyNode(&ocpy, og, &oset, 1, &cp, NULL));
    CUgraphExec ox;
    /* The driver reports the flags that shape the instance: AUTO_FREE_ON_LAUNCH, not USE_NODE_PRIORITY. */
    CK(cuGraphInstantiateWithFlags(&ox, og,
                                   CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
    cuuint64_t oflags = 0;
    CK(cuGraphExecGetFlags(ox, &oflags));
    if (oflags != CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        gt_fail("cuGraphExecGetFlags gave %#llx", (unsigned long long)oflags);
    CK(cuMemsetD32(out, 0x55555555u, N));
    CK(cuGraphNodeSetEnabled(ox, oset, 0));
    unsigned on = 1;
    CK(cuGraphNodeGetEnabled(ox, oset, &on));
    if (on != 0)
        gt_fail("a node turned off reads as on");
    CK(cuGraphLaunch(ox, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x55555555u, "the copy after a memset node turned off");
    CK(cuGraphNodeSetEnabled(ox, oset, 1));
    CK(cuGraphLaunch(ox, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x44444444u, "the copy after the memset node turned on again");
    CK(cuGraphExecDestroy(ox));
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, .hUploadStream = s};
    CK(cuGraphInstantiateWithParams(&ox, og, &ip));
    if (ip.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS)
        gt_fail("cuGraphInstantiateWithParams(UPLOAD): result %d", (int)ip.result_out);
    CK(cuMemsetD32(out, 0, N));
    CK(cuGraphLaunch(ox, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x44444444u, "an instance uploaded when made");
    CK(cuGraphExecDestroy(ox));
    /* The CUDA 11 form of cuGraphInstantiate, as a program built against CUDA 11 finds it. */
    CUresult (*instantiate11)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t) = NULL;
    CUdriverProcAddressQueryResult found;
    CK(cuGetProcAddress("cuGraphInstantiate", (void **)&instantiate11, 11040, 0, &found));
    if (!instantiate11 || found != CU_GET_PROC_ADDRESS_SUCCESS)
        gt_fail("cuGetProcAddress(cuGraphInstantiate, 11040) found nothing");
    CUgraphNode err_node = NULL;
    char log[64] = "";
    CK(instantiate11(&ox, og, &err_node, log, sizeof log));
    CK(cuMemsetD32(out, 0, N));
    CK(cuGraphLaunch(ox, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x44444444u, "an instance made by the CUDA 11 cuGraphInstantiate");
    CK(cuGraphExecDestroy(ox));

    /* ---- a capture into an existing graph, after one of its nodes ---- */
    CUgraph tg, tg_out = NULL;
    CUgraphNode tset;
    CK(cuGraphCreate(&tg, 0));
    CUDA_MEMSET_NODE_PARAMS m6 = {.dst = out, .value = 0x66666666u, .elementSize = 4, .width = N, .height = 1};
    CK(cuGraphAddMemsetNode(&tset, tg, NULL, 0, &m6, NULL));
    CK(cuStreamBeginCaptureToGraph(s, tg, &tset, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuMemcpyDtoHAsync(h_out, out, N * sizeof(float), s));
    CK(cuStreamEndCapture(s, &tg_out));
    if (tg_out != tg)
        gt_fail("cuStreamEndCapture after cuStreamBeginCaptureToGraph gave %p, not the graph %p", (void *)tg_out,
                (void *)tg);
    size_t tn = 0, te = 0;
    CK(cuGraphGetNodes(tg, NULL, &tn));
    CK(cuGraphGetEdges(tg, NULL, NULL, NULL, &te));
    if (tn != 2 || te != 1)
        gt_fail("a capture into a graph of one node: %zu nodes and %zu edges, expected 2 and 1", tn, te);
    CUgraphExec tx;
    CK(cuGraphInstantiate(&tx, tg, 0));
    memset(h_out, 0, N * sizeof(float));
    CK(cuGraphLaunch(tx, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x66666666u, "a graph with a copy captured into it after its memset");
    /* A clone: its node found from the original's, changed there alone; both run. */
    CUgraph tc;
    CUgraphNode cset;
    CK(cuGraphClone(&tc, tg));
    CK(cuGraphNodeFindInClone(&cset, tset, tc));
    m6.value = 0x77777777u;
    CK(cuGraphMemsetNodeSetParams(cset, &m6));
    CUgraphExec cx;
    CK(cuGraphInstantiate(&cx, tc, 0));
    CK(cuGraphLaunch(cx, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x77777777u, "a clone with its memset node changed");
    CK(cuGraphLaunch(tx, s));
    CK(cuStreamSynchronize(s));
    expect_words(h_out, 0x66666666u, "the original after its clone was changed");
    CK(cuGraphExecDestroy(cx));
    CK(cuGraphDestroy(tc));
    CK(cuGraphExecDestroy(tx));
    CK(cuGraphDestroy(tg));

    /* ---- an edge removed, a node destroyed ---- */
    CUgraphNode e1, e2;
    CK(cuGraphAddEmptyNode(&e1, og, &ocpy, 1));
    CK(cuGraphAddEmptyNode(&e2, og, &e1, 1));
    CK(cuGraphRemoveDependencies(og, &e1, &e2, NULL, 1));
    nedges = 0;
    CK(cuGraphGetEdges(og, NULL, NULL, NULL, &nedges));
    if (nedges != 2)
        gt_fail("%zu edges after one of three was removed", nedges);
    EXPECT_RC(cuGraphRemoveDependencies(og, &e1, &e2, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphDestroyNode(e1));
    size_t nnodes = 0;
    CK(cuGraphGetNodes(og, NULL, &nnodes));
    CK(cuGraphGetEdges(og, NULL, NULL, NULL, &nedges));
    if (nnodes != 3 || nedges != 1)
        gt_fail("after a node was destroyed: %zu nodes and %zu edges, expected 3 and 1", nnodes, nedges);
    CK(cuGraphDestroy(og));

    /* ---- the capture's graph and dependencies, as PyTorch's conditional nodes use them: a kernel is
     * captured; the capture's graph gets an empty node after it by hand; the capture is told to depend
     * on that node; a second kernel follows. The graph that comes out is the one handed out. ---- */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, s, args1, NULL));
    cuuint64_t cid = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CK(cuStreamGetCaptureInfo(s, &st, &cid, &cg, &deps, NULL, &ndeps));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || !cg || ndeps != 1 || !deps)
        gt_fail("cuStreamGetCaptureInfo: status %d, graph %p, %zu dependencies", (int)st, (void *)cg, ndeps);
    CUgraphNodeType dt;
    CK(cuGraphNodeGetType(deps[0], &dt));
    if (dt != CU_GRAPH_NODE_TYPE_KERNEL)
        gt_fail("the capture's dependency is a node of type %d, not the kernel", (int)dt);
    CUDA_KERNEL_NODE_PARAMS cq;
    CK(cuGraphKernelNodeGetParams(deps[0], &cq));
    if (cq.func != scale || *(CUdeviceptr *)cq.kernelParams[0] != in || *(float *)cq.kernelParams[3] != b1)
        gt_fail("a captured kernel node's parameters are not the launch's");
    CUgraphNode marker;
    CK(cuGraphAddEmptyNode(&marker, cg, deps, ndeps));
    CK(cuStreamUpdateCaptureDependencies(s, &marker, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CK(cuStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &ndeps));
    if (ndeps != 1 || deps[0] != marker)
        gt_fail("after cuStreamUpdateCaptureDependencies: %zu dependencies, not the marker", ndeps);
    CK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, s, args2, NULL));
    CUgraph cg_end;
    CK(cuStreamEndCapture(s, &cg_end));
    if (cg_end != cg)
        gt_fail("cuStreamEndCapture gave another graph than the capture's");
    size_t nn = 0;
    CK(cuGraphGetNodes(cg, NULL, &nn));
    if (nn != 3)
        gt_fail("the capture with a node added by hand has %zu nodes, not 3", nn);
    CUgraphNode after[2];
    size_t nafter = 2;
    CK(cuGraphNodeGetDependentNodes(marker, after, NULL, &nafter));
    if (nafter != 1)
        gt_fail("the marker has %zu dependents, not the second kernel", nafter);
    CUgraphExec cge;
    CK(cuGraphInstantiate(&cge, cg, 0));
    CK(cuMemcpyHtoD(in, h_in, N * sizeof(float)));
    CK(cuGraphLaunch(cge, s));
    CK(cuMemcpyDtoHAsync(h_out, out, N * sizeof(float), s));
    CK(cuStreamSynchronize(s));
    expect_scaled(h_out, h_in, a1 * a2, b1 * a2 + b2, "capture with a dependency set by hand");
    CK(cuGraphExecDestroy(cge));
    CK(cuGraphDestroy(cg));

    /* ---- a library's kernel (the CUDA runtime's way: cuLibraryGetKernel, launched as a CUfunction),
     * captured, then its node read back as PyTorch does after a capture: the node names the kernel or
     * the kernel's function in the context, with the launch's geometry and arguments ---- */
    CUlibrary lib = gt_library_from_file_data(GT_FATBIN);
    CUkernel lk;
    CK(cuLibraryGetKernel(&lk, lib, "scale_add"));
    CUfunction lkf;
    CK(cuKernelGetFunction(&lkf, lk));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel((CUfunction)lk, 8, 1, 1, 128, 1, 1, 0, s, args1, NULL));
    CUgraph lg;
    CK(cuStreamEndCapture(s, &lg));
    CUgraphNode ln[2];
    size_t nln = 2;
    CK(cuGraphGetNodes(lg, ln, &nln));
    if (nln != 1)
        gt_fail("the capture of one library kernel has %zu nodes", nln);
    CUDA_KERNEL_NODE_PARAMS lq;
    CK(cuGraphKernelNodeGetParams(ln[0], &lq));
    if ((lq.func != (CUfunction)lk && lq.func != lkf) || lq.gridDimX != 8 || lq.blockDimX != 128 ||
        *(CUdeviceptr *)lq.kernelParams[0] != in || *(float *)lq.kernelParams[3] != b1)
        gt_fail("a captured library kernel's node: function %p (kernel %p, its function %p), grid %u, block %u",
                (void *)lq.func, (void *)lk, (void *)lkf, lq.gridDimX, lq.blockDimX);
    CK(cuGraphDestroy(lg));
    CK(cuLibraryUnload(lib));

    /* ---- a child graph: the two kernels in a graph of their own, embedded in a parent that then copies the
     * result out; the child changed afterwards does not change the parent (the node holds a copy) ---- */
    CUgraph child, parent;
    CK(cuGraphCreate(&child, 0));
    CUgraphNode c1, c2, nchild, nout;
    kp.kernelParams = args1;
    CK(cuGraphAddKernelNode(&c1, child, NULL, 0, &kp));
    kp.kernelParams = args2;
    CK(cuGraphAddKernelNode(&c2, child, &c1, 1, &kp));
    CK(cuGraphCreate(&parent, 0));
    CK(cuGraphAddChildGraphNode(&nchild, parent, NULL, 0, child));
    CK(cuGraphAddMemcpyNode(&nout, parent, &nchild, 1, &cp, NULL));
    CUgraphNodeType ct;
    CK(cuGraphNodeGetType(nchild, &ct));
    if (ct != CU_GRAPH_NODE_TYPE_GRAPH)
        gt_fail("a child-graph node is of type %d", (int)ct);
    CUgraphNode c3;
    CK(cuGraphAddEmptyNode(&c3, child, &c2, 1)); /* after the copy was taken: not in the parent */
    CUgraphExec pexec;
    CK(cuGraphInstantiate(&pexec, parent, 0));
    CK(cuMemcpyHtoD(in, h_in, N * sizeof(float)));
    memset(h_out, 0, N * sizeof(float));
    CK(cuGraphLaunch(pexec, s));
    CK(cuStreamSynchronize(s));
    expect_scaled(h_out, h_in, a1 * a2, b1 * a2 + b2, "a graph with a child graph");
    CK(cuGraphExecDestroy(pexec));
    CK(cuGraphDestroy(parent));
    CK(cuGraphDestroy(child));

    event_nodes(mod, s, s2);
    graph_memory(scale, s, out, h_in, h_out);
    generic_nodes(scale, s, out, h_out);
    conditional_nodes(mod, s, h_out);

    CK(cuGraphExecDestroy(gexec));
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(eg));
    CK(cuGraphDestroy(g));
    CK(cuEventDestroy(fork));
    CK(cuEventDestroy(join));
    CK(cuMemFreeHost(h_in));
    CK(cuMemFreeHost(h_out));
    CK(cuMemFree(in));
    CK(cuMemFree(mid));
    CK(cuMemFree(out));
    printf("graph: %d captured launches, 7 explicit launches, parameter change and update checked\n", launches);
    gt_pass();
}
