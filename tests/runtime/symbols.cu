/* symbols: module globals through the runtime. __device__ and __constant__ arrays written with
 * cudaMemcpyToSymbol (whole, with an offset, async), read with cudaMemcpyFromSymbol (sync and async),
 * cudaGetSymbolAddress / cudaGetSymbolSize, and kernels that use them. */
#include "rt_test.h"

#define NDEV 4096
#define NCONST 256

__device__ float g_data[NDEV];
__constant__ float c_coef[NCONST];
__device__ int g_counter;
__device__ unsigned long long g_scalar = 0x1122334455667788ull; /* statically initialised */

__global__ void apply(float *out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = g_data[i] * c_coef[i % NCONST];
        atomicAdd(&g_counter, 1);
    }
}

__global__ void bump_data(float add)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < NDEV; i += gridDim.x * blockDim.x)
        g_data[i] += add;
}

int main(void)
{
    rt_begin("symbols");
    rt_require_gpu();

    size_t sz = 0;
    CK(cudaGetSymbolSize(&sz, g_data));
    if (sz != sizeof(float) * NDEV)
        rt_fail("cudaGetSymbolSize(g_data) = %zu, expected %zu", sz, sizeof(float) * NDEV);
    CK(cudaGetSymbolSize(&sz, c_coef));
    if (sz != sizeof(float) * NCONST)
        rt_fail("cudaGetSymbolSize(c_coef) = %zu, expected %zu", sz, sizeof(float) * NCONST);

    /* The static initialiser is visible before anything was written. */
    unsigned long long scalar = 0;
    CK(cudaMemcpyFromSymbol(&scalar, g_scalar, sizeof scalar));
    if (scalar != 0x1122334455667788ull)
        rt_fail("g_scalar initial value 0x%llx", scalar);

    static float data[NDEV], coef[NCONST], got[NDEV];
    rt_fill_float(data, NDEV, 31, 50.0f);
    /* Powers of two: the product is exact, so the GPU result is bit-exact. */
    for (int i = 0; i < NCONST; i++)
        coef[i] = ldexpf(1.0f, (i % 9) - 4) * ((i & 1) ? -1.0f : 1.0f);

    CK(cudaMemcpyToSymbol(g_data, data, sizeof data));
    /* c_coef in two halves: the second one through the offset argument. */
    CK(cudaMemcpyToSymbol(c_coef, coef, sizeof coef / 2));
    CK(cudaMemcpyToSymbol(c_coef, coef + NCONST / 2, sizeof coef / 2, sizeof coef / 2, cudaMemcpyHostToDevice));
    int zero = 0;
    CK(cudaMemcpyToSymbol(g_counter, &zero, sizeof zero));

    float *dout = NULL;
    CK(cudaMalloc((void **)&dout, sizeof got));
    CK(cudaMemset(dout, 0xff, sizeof got));
    apply<<<16, 128>>>(dout, NDEV);
    CK_LAUNCH();
    rt_poison(got, sizeof got);
    CK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < NDEV; i++) {
        float w = data[i] * coef[i % NCONST];
        if (memcmp(&got[i], &w, sizeof w) != 0)
            rt_fail("apply: out[%d] = %.9g, expected %.9g", i, (double)got[i], (double)w);
    }
    int count = -1;
    CK(cudaMemcpyFromSymbol(&count, g_counter, sizeof count));
    if (count != NDEV)
        rt_fail("g_counter = %d, expected %d", count, NDEV);

    /* cudaMemcpyFromSymbol with an offset, and the constant array read back. */
    static float coef_back[NCONST];
    rt_poison(coef_back, sizeof coef_back);
    CK(cudaMemcpyFromSymbol(coef_back, c_coef, sizeof coef_back));
    rt_expect_equal_f("c_coef read back", coef_back, coef, NCONST);
    rt_poison(got, sizeof got);
    CK(cudaMemcpyFromSymbol(got, g_data, 100 * sizeof(float), 1000 * sizeof(float), cudaMemcpyDeviceToHost));
    rt_expect_equal_f("g_data[1000..1100) read with an offset", got, data + 1000, 100);

    /* cudaGetSymbolAddress: plain cudaMemcpy through the address, and a kernel changing the symbol. */
    float *addr = NULL;
    CK(cudaGetSymbolAddress((void **)&addr, g_data));
    if (!addr)
        rt_fail("cudaGetSymbolAddress returned NULL");
    rt_poison(got, sizeof got);
    CK(cudaMemcpy(got, addr, sizeof got, cudaMemcpyDeviceToHost));
    rt_expect_equal_f("g_data through cudaGetSymbolAddress", got, data, NDEV);
    bump_data<<<8, 256>>>(0.5f);
    CK_LAUNCH();
    for (int i = 0; i < NDEV; i++)
        data[i] += 0.5f;
    rt_poison(got, sizeof got);
    CK(cudaMemcpy(got, addr, sizeof got, cudaMemcpyDefault));
    rt_expect_equal_f("g_data after bump_data", got, data, NDEV);
    /* Write through the address, read through the symbol. */
    rt_fill_float(data, NDEV, 32, 3.0f);
    CK(cudaMemcpy(addr, data, sizeof data, cudaMemcpyHostToDevice));
    rt_poison(got, sizeof got);
    CK(cudaMemcpyFromSymbol(got, g_data, sizeof got));
    rt_expect_equal_f("written via address, read via symbol", got, data, NDEV);

    /* Async forms on a stream, to and from pinned memory. */
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float *pin = NULL;
    CK(cudaMallocHost((void **)&pin, sizeof data));
    rt_fill_float(pin, NDEV, 33, 7.0f);
    memcpy(data, pin, sizeof data);
    CK(cudaMemcpyToSymbolAsync(g_data, pin, sizeof data, 0, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s)); /* `pin` is reused as the destination below */
    rt_poison(pin, sizeof data);
    CK(cudaMemcpyFromSymbolAsync(pin, g_data, sizeof data, 0, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    rt_expect_equal_f("async symbol round trip", pin, data, NDEV);

    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(pin));
    CK(cudaFree(dout));
    rt_pass();
}
