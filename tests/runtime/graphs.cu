/* graphs: CUDA graphs through the runtime.
 * 1. Stream capture (global mode) of copies and kernels on two streams forked and joined by events;
 *    node count; instantiate; 50 launches with new input each time, checked; 200 launches back to back
 *    (a counter kernel proves each ran once); a launch on another stream; cudaGraphUpload.
 * 2. An explicit graph: memset, 1-D memcpy and kernel nodes, dependencies given at creation and
 *    added with cudaGraphAddDependencies; instantiate and launch; cudaGraphExecKernelNodeSetParams
 *    with a changed scalar; cudaGraphKernelNodeSetParams + cudaGraphExecUpdate; every result checked. */
#include "rt_test.h"

/* a is a power of two: a*x is exact, so fused or not the GPU rounds exactly as the CPU does. */
__global__ void axpb(const float *x, float *y, float a, float b, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}

__global__ void count_run(unsigned *c)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        atomicAdd(c, 1u);
}

static void expect_axpb(const char *what, const float *got, const float *x, float a, float b, int n)
{
    for (int i = 0; i < n; i++) {
        float w = a * x[i] + b;
        if (memcmp(&got[i], &w, sizeof w) != 0)
            rt_fail("%s: element %d is %.9g, expected %.9g (a=%g b=%g x=%.9g)", what, i, (double)got[i], (double)w,
                    (double)a, (double)b, (double)x[i]);
    }
}

static void expect_capturing(cudaStream_t s, cudaStreamCaptureStatus want, const char *what)
{
    cudaStreamCaptureStatus st;
    CK(cudaStreamIsCapturing(s, &st));
    if (st != want)
        rt_fail("cudaStreamIsCapturing(%s) = %d, expected %d", what, (int)st, (int)want);
}

int main(void)
{
    rt_begin("graphs");
    rt_require_gpu();

    const int n = 200003;
    const size_t bytes = (size_t)n * sizeof(float);
    float *hin, *hy, *hz;
    CK(cudaMallocHost((void **)&hin, bytes));
    CK(cudaMallocHost((void **)&hy, bytes));
    CK(cudaMallocHost((void **)&hz, bytes));
    float *dx, *dy, *dz;
    unsigned *dcount;
    CK(cudaMalloc((void **)&dx, bytes));
    CK(cudaMalloc((void **)&dy, bytes));
    CK(cudaMalloc((void **)&dz, bytes));
    CK(cudaMalloc((void **)&dcount, sizeof(unsigned)));
    CK(cudaMemset(dcount, 0, sizeof(unsigned)));

    cudaStream_t s, s2, s3;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

    /* ---- 1. capture ---- */
    expect_capturing(s, cudaStreamCaptureStatusNone, "s before capture");
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    expect_capturing(s, cudaStreamCaptureStatusActive, "s during capture");
    CK(cudaMemcpyAsync(dx, hin, bytes, cudaMemcpyHostToDevice, s));
    axpb<<<128, 256, 0, s>>>(dx, dy, 2.0f, 1.0f, n);
    CK_LAUNCH();
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    expect_capturing(s2, cudaStreamCaptureStatusActive, "s2 joined to the capture");
    axpb<<<128, 256, 0, s2>>>(dx, dz, 0.25f, -3.0f, n);
    CK_LAUNCH();
    count_run<<<1, 32, 0, s2>>>(dcount);
    CK_LAUNCH();
    CK(cudaEventRecord(join, s2));
    CK(cudaStreamWaitEvent(s, join, 0));
    CK(cudaMemcpyAsync(hy, dy, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(hz, dz, bytes, cudaMemcpyDeviceToHost, s));
    cudaGraph_t graph = NULL;
    CK(cudaStreamEndCapture(s, &graph));
    if (!graph)
        rt_fail("cudaStreamEndCapture returned no graph");
    expect_capturing(s, cudaStreamCaptureStatusNone, "s after capture");
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    if (nodes != 6)
        rt_fail("captured graph has %zu nodes, expected 6 (1 copy in, 3 kernels, 2 copies out)", nodes);

    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphUpload(exec, s));
    for (int it = 0; it < 50; it++) {
        rt_fill_float(hin, n, 100 + (uint64_t)it, 1000.0f);
        rt_poison(hy, bytes);
        rt_poison(hz, bytes);
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        expect_axpb("captured graph, y", hy, hin, 2.0f, 1.0f, n);
        expect_axpb("captured graph, z", hz, hin, 0.25f, -3.0f, n);
    }
    for (int it = 0; it < 200; it++)
        CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    rt_poison(hy, bytes);
    CK(cudaGraphLaunch(exec, s3)); /* another stream */
    CK(cudaStreamSynchronize(s3));
    expect_axpb("captured graph on another stream", hy, hin, 2.0f, 1.0f, n);
    unsigned count = 0;
    CK(cudaMemcpy(&count, dcount, sizeof count, cudaMemcpyDeviceToHost));
    if (count != 251)
        rt_fail("the captured graph ran %u times, expected 251", count);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));

    /* ---- 2. explicit graph ---- */
    const int m = 100000;
    const size_t mb = (size_t)m * sizeof(float);
    float *hin2, *hout2;
    unsigned *hflag;
    CK(cudaMallocHost((void **)&hin2, mb));
    CK(cudaMallocHost((void **)&hout2, mb));
    CK(cudaMallocHost((void **)&hflag, mb));
    float *dx2, *dy2;
    unsigned *dflag;
    CK(cudaMalloc((void **)&dx2, mb));
    CK(cudaMalloc((void **)&dy2, mb));
    CK(cudaMalloc((void **)&dflag, mb));
    rt_fill_float(hin2, m, 7, 100.0f);

    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t n_memset, n_h2d, n_k1, n_k2, n_d2h, n_flag;
    cudaMemsetParams ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = dflag;
    ms.value = 0x5eed1234u;
    ms.elementSize = 4;
    ms.width = (size_t)m;
    ms.height = 1;
    CK(cudaGraphAddMemsetNode(&n_memset, g, NULL, 0, &ms));
    CK(cudaGraphAddMemcpyNode1D(&n_h2d, g, NULL, 0, dx2, hin2, mb, cudaMemcpyHostToDevice));

    float a1 = 2.0f, b1 = 0.5f, a2 = 0.5f, b2 = -1.0f;
    int mm = m;
    void *args1[] = {&dx2, &dy2, &a1, &b1, &mm};
    void *args2[] = {&dy2, &dy2, &a2, &b2, &mm};
    cudaKernelNodeParams kp1 = {}, kp2 = {};
    kp1.func = (void *)axpb;
    kp1.gridDim = dim3(64, 1, 1);
    kp1.blockDim = dim3(256, 1, 1);
    kp1.kernelParams = args1;
    kp2 = kp1;
    kp2.kernelParams = args2;
    cudaGraphNode_t k1_deps[] = {n_h2d};
    CK(cudaGraphAddKernelNode(&n_k1, g, k1_deps, 1, &kp1));
    CK(cudaGraphAddKernelNode(&n_k2, g, NULL, 0, &kp2));
    CK(cudaGraphAddDependencies(g, &n_k1, &n_k2, NULL, 1)); /* k1 -> k2, added afterwards */
    CK(cudaGraphAddMemcpyNode1D(&n_d2h, g, &n_k2, 1, hout2, dy2, mb, cudaMemcpyDeviceToHost));
    CK(cudaGraphAddMemcpyNode1D(&n_flag, g, &n_memset, 1, hflag, dflag, mb, cudaMemcpyDeviceToHost));
    size_t deps = 0;
    CK(cudaGraphNodeGetDependencies(n_k2, NULL, NULL, &deps));
    if (deps != 1)
        rt_fail("kernel node 2 has %zu dependencies, expected 1", deps);

    /* Expected: y = a2 * (a1 * x + b1) + b2, both steps rounded as on the GPU. */
    float *step = (float *)rt_malloc(mb);
    cudaGraphExec_t gx;
    CK(cudaGraphInstantiate(&gx, g, 0));
    rt_poison(hout2, mb);
    rt_poison(hflag, mb);
    CK(cudaGraphLaunch(gx, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++)
        step[i] = a1 * hin2[i] + b1;
    expect_axpb("explicit graph", hout2, step, a2, b2, m);
    for (int i = 0; i < m; i++)
        if (hflag[i] != 0x5eed1234u)
            rt_fail("explicit graph memset node: element %d is 0x%08x", i, hflag[i]);

    /* cudaGraphExecKernelNodeSetParams: k1 with a new scale, in the executable graph only. */
    float a1x = 8.0f;
    void *args1x[] = {&dx2, &dy2, &a1x, &b1, &mm};
    cudaKernelNodeParams kp1x = kp1;
    kp1x.kernelParams = args1x;
    CK(cudaGraphExecKernelNodeSetParams(gx, n_k1, &kp1x));
    rt_poison(hout2, mb);
    CK(cudaGraphLaunch(gx, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++)
        step[i] = a1x * hin2[i] + b1;
    expect_axpb("after cudaGraphExecKernelNodeSetParams", hout2, step, a2, b2, m);

    /* cudaGraphExecUpdate from the template graph with k2 changed: k1 returns to the template's a1. */
    float b2x = 3.0f;
    void *args2x[] = {&dy2, &dy2, &a2, &b2x, &mm};
    cudaKernelNodeParams kp2x = kp2;
    kp2x.kernelParams = args2x;
    CK(cudaGraphKernelNodeSetParams(n_k2, &kp2x));
    cudaGraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CK(cudaGraphExecUpdate(gx, g, &info));
    if (info.result != cudaGraphExecUpdateSuccess)
        rt_fail("cudaGraphExecUpdate result %d", (int)info.result);
    rt_poison(hout2, mb);
    CK(cudaGraphLaunch(gx, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++)
        step[i] = a1 * hin2[i] + b1;
    expect_axpb("after cudaGraphExecUpdate", hout2, step, a2, b2x, m);

    /* New input through the same pinned buffer, many launches, last one checked. */
    rt_fill_float(hin2, m, 8, 100.0f);
    for (int it = 0; it < 20; it++)
        CK(cudaGraphLaunch(gx, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < m; i++)
        step[i] = a1 * hin2[i] + b1;
    expect_axpb("explicit graph, new input", hout2, step, a2, b2x, m);

    CK(cudaGraphExecDestroy(gx));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
    CK(cudaStreamDestroy(s));
    CK(cudaStreamDestroy(s2));
    CK(cudaStreamDestroy(s3));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dz));
    CK(cudaFree(dcount));
    CK(cudaFree(dx2));
    CK(cudaFree(dy2));
    CK(cudaFree(dflag));
    CK(cudaFreeHost(hin));
    CK(cudaFreeHost(hy));
    CK(cudaFreeHost(hz));
    CK(cudaFreeHost(hin2));
    CK(cudaFreeHost(hout2));
    CK(cudaFreeHost(hflag));
    free(step);
    rt_pass();
}
