/* ptds: compiled with `nvcc --default-stream per-thread`, so stream 0 (and <<<>>> without a stream, and
 * cudaMemcpy) means the calling thread's per-thread default stream.
 * - 6 host threads each launch on their default stream, copy, synchronize and check, in a loop;
 *   each thread's stream 0 is cudaStreamPerThread and has its own id, distinct from the other threads'
 *   and from cudaStreamLegacy's.
 * - Ordering against cudaStreamLegacy: a slow kernel on the legacy stream is seen by the next kernel on
 *   the per-thread stream and the other way round, also when the per-thread stream is another
 *   thread's (the per-thread default stream is a blocking stream). */
#include "rt_test.h"

#include <pthread.h>

#define THREADS 6
#define ITERS 20

__global__ void affine(const float *in, float *out, float a, float b, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * in[i] + b;
}

__global__ void spin_write(volatile int *flag, int v, long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    *flag = v;
    __threadfence_system();
}

__global__ void read_plus(const volatile int *flag, int *out)
{
    *out = *flag + 1;
}

typedef struct {
    int id;
    unsigned long long stream_id;
    char err[512];
} worker;

#define WCK(call)                                                                                            \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            snprintf(w->err, sizeof w->err, "thread %d: line %d: %s returned %s", w->id, __LINE__, #call,      \
                     cudaGetErrorName(e_));                                                                  \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)

static void *run(void *arg)
{
    worker *w = (worker *)arg;
    const int n = (1 << 17) + 17 * w->id;
    const size_t bytes = (size_t)n * sizeof(float);
    float *hin = NULL, *hout = NULL, *din = NULL, *dout = NULL;
    unsigned long long id0 = 0, idp = 1;
    WCK(cudaStreamGetId(0, &id0));
    WCK(cudaStreamGetId(cudaStreamPerThread, &idp));
    if (id0 != idp) {
        snprintf(w->err, sizeof w->err, "thread %d: stream 0 has id %llu, cudaStreamPerThread %llu", w->id, id0, idp);
        goto out;
    }
    w->stream_id = id0;
    WCK(cudaMallocHost((void **)&hin, bytes));
    WCK(cudaMallocHost((void **)&hout, bytes));
    WCK(cudaMalloc((void **)&din, bytes));
    WCK(cudaMalloc((void **)&dout, bytes));
    for (int it = 0; it < ITERS; it++) {
        float a = (float)(1 << (it % 5)), b = (float)w->id - 0.5f * (float)it;
        rt_fill_float(hin, n, 1000 * (uint64_t)w->id + (uint64_t)it, 300.0f);
        rt_poison(hout, bytes);
        WCK(cudaMemsetAsync(dout, 0xff, bytes, 0));
        if (it & 1) {
            WCK(cudaMemcpy(din, hin, bytes, cudaMemcpyHostToDevice)); /* synchronous: per-thread stream */
            affine<<<64, 256>>>(din, dout, a, b, n);
        } else {
            WCK(cudaMemcpyAsync(din, hin, bytes, cudaMemcpyHostToDevice, 0));
            affine<<<64, 256, 0, cudaStreamPerThread>>>(din, dout, a, b, n);
        }
        WCK(cudaGetLastError());
        WCK(cudaMemcpyAsync(hout, dout, bytes, cudaMemcpyDeviceToHost, 0));
        WCK(cudaStreamSynchronize(0));
        for (int i = 0; i < n; i++) {
            float want = a * hin[i] + b;
            if (memcmp(&hout[i], &want, sizeof want) != 0) {
                snprintf(w->err, sizeof w->err, "thread %d iter %d: element %d is %.9g, expected %.9g", w->id, it, i,
                         (double)hout[i], (double)want);
                goto out;
            }
        }
    }
out:
    if (din)
        cudaFree(din);
    if (dout)
        cudaFree(dout);
    if (hin)
        cudaFreeHost(hin);
    if (hout)
        cudaFreeHost(hout);
    return NULL;
}

/* Thread of check C: launches a slow write on its own per-thread stream, then tells main. */
typedef struct {
    int *flag;
    long long cycles;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int launched;
    cudaError_t err;
} other;

static void *slow_writer(void *arg)
{
    other *o = (other *)arg;
    spin_write<<<1, 1>>>(o->flag, 7, o->cycles);
    cudaError_t e = cudaGetLastError();
    pthread_mutex_lock(&o->mu);
    o->err = e;
    o->launched = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    if (e != cudaSuccess)
        o->err = e;
    return NULL;
}

static int read_back(const int *dout)
{
    int v = -1;
    CK(cudaMemcpy(&v, dout, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

int main(void)
{
    rt_begin("ptds");
    rt_require_gpu();

    worker ws[THREADS];
    pthread_t th[THREADS];
    memset(ws, 0, sizeof ws);
    for (int i = 0; i < THREADS; i++) {
        ws[i].id = i;
        if (pthread_create(&th[i], NULL, run, &ws[i]) != 0)
            rt_fail("pthread_create failed");
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    unsigned long long legacy_id = 0, main_id = 0;
    CK(cudaStreamGetId(cudaStreamLegacy, &legacy_id));
    CK(cudaStreamGetId(0, &main_id));
    for (int i = 0; i < THREADS; i++) {
        if (ws[i].err[0])
            rt_fail("%s", ws[i].err);
        if (ws[i].stream_id == legacy_id || ws[i].stream_id == main_id)
            rt_fail("thread %d's default stream id %llu equals the legacy (%llu) or main thread's (%llu)", i,
                    ws[i].stream_id, legacy_id, main_id);
        for (int j = 0; j < i; j++)
            if (ws[i].stream_id == ws[j].stream_id)
                rt_fail("threads %d and %d share default stream id %llu", j, i, ws[i].stream_id);
    }

    int *flag = NULL, *dout = NULL;
    CK(cudaMalloc((void **)&flag, sizeof(int)));
    CK(cudaMalloc((void **)&dout, sizeof(int)));
    const long long cycles = rt_cycles_for_ms(30);

    /* A. legacy, then this thread's per-thread stream. */
    CK(cudaMemset(flag, 0, sizeof(int))); /* per-thread stream, synchronous */
    CK(cudaDeviceSynchronize());
    spin_write<<<1, 1, 0, cudaStreamLegacy>>>(flag, 1, cycles);
    CK_LAUNCH();
    read_plus<<<1, 1>>>(flag, dout); /* stream 0 = per-thread */
    CK_LAUNCH();
    CK(cudaStreamSynchronize(0));
    int v = read_back(dout);
    if (v != 2)
        rt_fail("a kernel on the per-thread stream did not wait for the legacy stream (read %d, expected 2)", v);

    /* B. per-thread, then legacy. */
    spin_write<<<1, 1>>>(flag, 5, cycles);
    CK_LAUNCH();
    read_plus<<<1, 1, 0, cudaStreamLegacy>>>(flag, dout);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(cudaStreamLegacy));
    v = read_back(dout);
    if (v != 6)
        rt_fail("a kernel on the legacy stream did not wait for the per-thread stream (read %d, expected 6)", v);

    /* C. another thread's per-thread stream, then legacy from this thread. */
    other o;
    memset(&o, 0, sizeof o);
    o.flag = flag;
    o.cycles = cycles;
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, slow_writer, &o) != 0)
        rt_fail("pthread_create failed");
    pthread_mutex_lock(&o.mu);
    while (!o.launched)
        pthread_cond_wait(&o.cv, &o.mu);
    pthread_mutex_unlock(&o.mu);
    if (o.err != cudaSuccess)
        rt_fail("other thread's launch: %s", cudaGetErrorName(o.err));
    read_plus<<<1, 1, 0, cudaStreamLegacy>>>(flag, dout);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(cudaStreamLegacy));
    pthread_join(t, NULL);
    if (o.err != cudaSuccess)
        rt_fail("other thread: %s", cudaGetErrorName(o.err));
    v = read_back(dout);
    if (v != 8)
        rt_fail("the legacy stream did not wait for another thread's per-thread stream (read %d, expected 8)", v);

    CK(cudaFree(flag));
    CK(cudaFree(dout));
    rt_pass();
}
