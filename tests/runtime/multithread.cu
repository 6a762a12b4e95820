/* multithread: 8 host threads of one process share device buffers, each on its own stream (blocking and
 * non-blocking), ordered by events recorded in one thread and waited for in another:
 * - a chain per round: thread 0 writes stage 0 (after a slow kernel, so that missing ordering shows),
 *   thread i waits for thread i-1's event and computes stage i = stage i-1 + 1; the main thread waits
 *   for the last event and checks every stage;
 * - between rounds each thread also allocates, copies, runs a kernel and frees on its own, so that
 *   cudaMalloc/cudaFree/cudaMemcpy run concurrently from several threads. */
#include "rt_test.h"

#include <pthread.h>

#define THREADS 8
#define ROUNDS 12

__global__ void stage0(const float *in, float *out, int n, long long spin)
{
    long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] + 1.0f;
}

__global__ void next_stage(const float *prev, float *out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = prev[i] + 1.0f;
}

__global__ void square(const int *in, int *out, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] * in[i];
}

static const int N = 1 << 18;
static float *d_in, *d_stage[THREADS];
static cudaEvent_t ev[THREADS];
static long long spin_cycles;
static pthread_barrier_t round_start, round_end;
/* recorded[r] counts the threads whose event of round r is recorded; guarded by mu. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int recorded_upto[THREADS];

typedef struct {
    int id;
    char err[512];
} worker;

#define WCK(call)                                                                                            \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess && !w->err[0])                                                                 \
            snprintf(w->err, sizeof w->err, "thread %d: line %d: %s returned %s", w->id, __LINE__, #call,      \
                     cudaGetErrorName(e_));                                                                  \
    } while (0)

static void *run(void *arg)
{
    worker *w = (worker *)arg;
    cudaStream_t s;
    WCK(cudaStreamCreateWithFlags(&s, (w->id & 1) ? cudaStreamNonBlocking : cudaStreamDefault));
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&round_start);
        if (w->id == 0) {
            stage0<<<64, 256, 0, s>>>(d_in, d_stage[0], N, spin_cycles);
        } else {
            /* The previous thread's event of this round must be recorded before we wait for it. */
            pthread_mutex_lock(&mu);
            while (recorded_upto[w->id - 1] < r + 1)
                pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
            WCK(cudaStreamWaitEvent(s, ev[w->id - 1], 0));
            next_stage<<<64, 256, 0, s>>>(d_stage[w->id - 1], d_stage[w->id], N);
        }
        WCK(cudaGetLastError());
        WCK(cudaEventRecord(ev[w->id], s));
        pthread_mutex_lock(&mu);
        recorded_upto[w->id] = r + 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);

        /* Independent work of this thread: its own allocation, copies and kernel. */
        const int m = 4096 + 333 * w->id + r;
        int *h = NULL, *hr = NULL, *di = NULL, *dout = NULL;
        h = (int *)malloc((size_t)m * sizeof(int));
        hr = (int *)malloc((size_t)m * sizeof(int));
        if (!h || !hr) {
            snprintf(w->err, sizeof w->err, "thread %d: out of memory", w->id);
        } else {
            for (int i = 0; i < m; i++)
                h[i] = i - m / 2 + w->id;
            WCK(cudaMalloc((void **)&di, (size_t)m * sizeof(int)));
            WCK(cudaMalloc((void **)&dout, (size_t)m * sizeof(int)));
            if (di && dout) {
                WCK(cudaMemcpyAsync(di, h, (size_t)m * sizeof(int), cudaMemcpyHostToDevice, s));
                square<<<16, 128, 0, s>>>(di, dout, m);
                WCK(cudaGetLastError());
                memset(hr, 0xff, (size_t)m * sizeof(int));
                WCK(cudaMemcpyAsync(hr, dout, (size_t)m * sizeof(int), cudaMemcpyDeviceToHost, s));
                WCK(cudaStreamSynchronize(s));
                for (int i = 0; i < m && !w->err[0]; i++)
                    if (hr[i] != h[i] * h[i])
                        snprintf(w->err, sizeof w->err, "thread %d round %d: square[%d] = %d, expected %d", w->id,
                                 r, i, hr[i], h[i] * h[i]);
            }
            if (di)
                WCK(cudaFree(di));
            if (dout)
                WCK(cudaFree(dout));
        }
        free(h);
        free(hr);
        pthread_barrier_wait(&round_end);
    }
    WCK(cudaStreamSynchronize(s));
    WCK(cudaStreamDestroy(s));
    return NULL;
}

int main(void)
{
    rt_begin("multithread");
    rt_require_gpu();

    const size_t bytes = (size_t)N * sizeof(float);
    float *hin = NULL, *hout = NULL;
    CK(cudaMallocHost((void **)&hin, bytes));
    CK(cudaMallocHost((void **)&hout, bytes));
    CK(cudaMalloc((void **)&d_in, bytes));
    for (int i = 0; i < THREADS; i++) {
        CK(cudaMalloc((void **)&d_stage[i], bytes));
        CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    }
    spin_cycles = rt_cycles_for_ms(5);
    pthread_barrier_init(&round_start, NULL, THREADS + 1);
    pthread_barrier_init(&round_end, NULL, THREADS + 1);

    worker ws[THREADS];
    pthread_t th[THREADS];
    memset(ws, 0, sizeof ws);
    for (int i = 0; i < THREADS; i++) {
        ws[i].id = i;
        if (pthread_create(&th[i], NULL, run, &ws[i]) != 0)
            rt_fail("pthread_create failed");
    }
    int failed = 0;
    char why[512] = "";
    for (int r = 0; r < ROUNDS && !failed; r++) {
        /* Integers in [-2^20, 2^20]: every +1 is exact. */
        rt_rng rng;
        rt_rng_seed(&rng, 500 + (uint64_t)r);
        for (int i = 0; i < N; i++)
            hin[i] = (float)((int)(rt_rng_next(&rng) % 2097153u) - 1048576);
        CK(cudaMemcpy(d_in, hin, bytes, cudaMemcpyHostToDevice));
        for (int i = 0; i < THREADS; i++)
            CK(cudaMemset(d_stage[i], 0xff, bytes));
        CK(cudaDeviceSynchronize());
        pthread_barrier_wait(&round_start);
        /* Wait for the chain's last event (recorded by thread 7 in this round). */
        pthread_mutex_lock(&mu);
        while (recorded_upto[THREADS - 1] < r + 1)
            pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        CK(cudaEventSynchronize(ev[THREADS - 1]));
        for (int st = 0; st < THREADS && !failed; st++) {
            rt_poison(hout, bytes);
            CK(cudaMemcpy(hout, d_stage[st], bytes, cudaMemcpyDeviceToHost));
            for (int i = 0; i < N; i++)
                if (hout[i] != hin[i] + (float)(st + 1)) {
                    snprintf(why, sizeof why, "round %d stage %d element %d is %.9g, expected %.9g", r, st, i,
                             (double)hout[i], (double)(hin[i] + (float)(st + 1)));
                    failed = 1;
                    break;
                }
        }
        pthread_barrier_wait(&round_end);
        for (int i = 0; i < THREADS; i++)
            if (ws[i].err[0])
                failed = 1;
        if (failed) {
            /* Let the threads finish their remaining rounds without us checking. */
            for (int rr = r + 1; rr < ROUNDS; rr++) {
                pthread_barrier_wait(&round_start);
                pthread_barrier_wait(&round_end);
            }
        }
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (ws[i].err[0])
            rt_fail("%s", ws[i].err);
    if (failed)
        rt_fail("chain of events across threads: %s", why);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < THREADS; i++) {
        CK(cudaFree(d_stage[i]));
        CK(cudaEventDestroy(ev[i]));
    }
    CK(cudaFree(d_in));
    CK(cudaFreeHost(hin));
    CK(cudaFreeHost(hout));
    rt_pass();
}
