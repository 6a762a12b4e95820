/* A client that keeps the server busy until it is killed: each round allocates device and pinned memory,
 * makes a stream and events, copies (pageable and pinned), launches vec_add and checks its result against
 * the CPU, then frees only part of what it made, so that a kill -9 at any moment leaves the server
 * something of every kind to clean up. Used by test_kill_storm.sh.
 * usage: storm_client FATBIN [ROUNDS]   (ROUNDS 0 or absent: until killed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define N 4096

static float a[N], c[N];

/* A wrong result: read everything back again, so that the log tells which copy or launch was stale. */
static void report_mismatch(long r, int i, CUdeviceptr da, CUdeviceptr db, CUdeviceptr dc, float direct)
{
    static float again_a[N], again_b[N], again_c[N];
    CUresult ra = cuMemcpyDtoH(again_a, da, sizeof again_a), rb = cuMemcpyDtoH(again_b, db, sizeof again_b),
             rc = cuMemcpyDtoH(again_c, dc, sizeof again_c);
    gt_fail("round %ld: c[%d] = %g (staged copy), %g (direct copy), expected %g; read again (%d %d %d): a %g (want "
            "%g), b %g (want %g), c %g; da %#llx db %#llx dc %#llx",
            r, i, c[i], (double)direct, (double)((float)(i + r) + (float)(2 * i)), (int)ra, (int)rb, (int)rc, again_a[i],
            (double)a[i], again_b[i], (double)(2 * i), again_c[i], (unsigned long long)da, (unsigned long long)db,
            (unsigned long long)dc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: storm_client FATBIN [ROUNDS]\n");
        return 2;
    }
    gt_begin("storm_client");
    long rounds = argc > 2 ? atol(argv[2]) : 0;
    CK(cuInit(0));
    gt_primary_ctx(0, NULL);
    CUmodule mod = gt_module_from_file_data(argv[1]);
    CUfunction vec_add = gt_function(mod, "vec_add");
    for (long r = 0; rounds == 0 || r < rounds; r++) {
        CUstream s;
        CUevent e0, e1;
        CUdeviceptr da, db, dc;
        float *pinned;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CK(cuEventCreate(&e0, 0));
        CK(cuEventCreate(&e1, 0));
        CK(cuMemAlloc(&da, N * sizeof(float)));
        CK(cuMemAlloc(&db, N * sizeof(float)));
        CK(cuMemAlloc(&dc, N * sizeof(float)));
        CK(cuMemAllocHost((void **)&pinned, N * sizeof(float)));
        for (int i = 0; i < N; i++) {
            a[i] = (float)(i + r);
            pinned[i] = (float)(2 * i);
        }
        CK(cuMemcpyHtoD(da, a, sizeof a));
        CK(cuMemcpyHtoDAsync(db, pinned, N * sizeof(float), s));
        CK(cuEventRecord(e0, s));
        int n = N;
        void *args[] = {&da, &db, &dc, &n};
        CK(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
        CK(cuEventRecord(e1, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(c, dc, sizeof c));
        /* The result again, by the direct path into pinned memory: a wrong result then tells a stale
         * staging copy (only c wrong) from work that ran late (both wrong). */
        CK(cuMemcpyDtoH(pinned, dc, N * sizeof(float)));
        for (int i = 0; i < N; i++)
            if (c[i] != (float)(i + r) + (float)(2 * i) || pinned[i] != c[i])
                report_mismatch(r, i, da, db, dc, pinned[i]);
        /* Odd rounds among the first 64 leave their objects behind: the server frees them when the client
         * goes. */
        if (r % 2 == 0 || r > 64) {
            CK(cuMemFree(da));
            CK(cuMemFree(db));
            CK(cuMemFree(dc));
            CK(cuMemFreeHost(pinned));
            CK(cuEventDestroy(e0));
            CK(cuEventDestroy(e1));
            CK(cuStreamDestroy(s));
        }
    }
    gt_pass();
}
