/* Exit 0 when a CUDA GPU is usable, 77 (with a SKIP line) when not: used by run.sh.
 * gpu_probe --stack: also prints the context's stack limit ("stack limit: N bytes"), which the fault tests
 * compare before and after a standby worker takes over (it shrinks the stack while it waits).
 * gpu_probe --poll-then-wait: launches empty kernels on a stream of its own and learns of their end by
 * polling it (cuStreamQuery, as a program that never synchronizes does), says "probe: polled", and waits
 * for a line on stdin: an idle program that never told the server its work ended (tests/test_fault_recover.sh:
 * it must not be taken for a culprit).
 * gpu_probe --devices: also a line per device, "device I: UUID PCI-BUS-ID NAME" (the UUID as nvidia-smi
 * writes it), and whether each pair of devices can reach each other ("peer I J: yes|no"). */
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

int main(int argc, char **argv)
{
    gt_begin("probe");
    gt_require_gpu();
    int n = 0;
    CK(cuDeviceGetCount(&n));
    printf("probe: %d CUDA device(s)\n", n);
    if (argc > 1 && strcmp(argv[1], "--devices") == 0) {
        for (int i = 0; i < n; i++) {
            CUdevice dev;
            CUuuid u;
            char bus[32], name[128];
            CK(cuDeviceGet(&dev, i));
            CK(cuDeviceGetUuid(&u, dev));
            CK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
            CK(cuDeviceGetName(name, sizeof name, dev));
            printf("device %d: GPU-", i);
            for (int b = 0; b < 16; b++)
                printf("%s%02x", b == 4 || b == 6 || b == 8 || b == 10 ? "-" : "", (unsigned char)u.bytes[b]);
            printf(" %s %s\n", bus, name);
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                int can = -1;
                if (i != j) {
                    CK(cuDeviceCanAccessPeer(&can, i, j));
                    printf("peer %d %d: %s\n", i, j, can ? "yes" : "no");
                }
            }
    }
    if (argc > 1 && strcmp(argv[1], "--stack") == 0) {
        CUdevice dev;
        CUcontext ctx;
        size_t stack = 0;
        CK(cuDeviceGet(&dev, 0));
        CK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CK(cuCtxSetCurrent(ctx));
        CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
        printf("stack limit: %zu bytes\n", stack);
        CK(cuDevicePrimaryCtxRelease(dev));
    }
    if (argc > 1 && strcmp(argv[1], "--poll-then-wait") == 0) {
        gt_primary_ctx(0, NULL);
        CUmodule mod = gt_module_from_file_data(GT_FATBIN);
        CUfunction f = gt_function(mod, "empty_kernel");
        CUstream s;
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        for (int round = 0; round < 20; round++) {
            int x = round;
            void *args[] = {&x};
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
            CUresult q;
            while ((q = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY)
                gt_sleep_us(50);
            CK(q);
            gt_sleep_us(300); /* the worker idles: a mark, which the next questions read */
            for (int k = 0; k < 5; k++)
                CK(cuStreamQuery(s));
        }
        printf("probe: polled\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            line[0] = 0;
        CK(cuStreamDestroy(s));
        CK(cuModuleUnload(mod));
    }
    return 0;
}
