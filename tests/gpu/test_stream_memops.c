/* Stream memory operations: a stream waits for a value another stream's work writes (device memory), a
 * stream waits for a value the CPU writes (pinned host memory, named by its host pointer), 32- and 64-bit
 * writes land, each wait condition (GEQ, EQ, AND, NOR) releases when it should, and a batch does its
 * operations in order. Results against what the CPU wrote and read. (Addresses that are not the client's
 * are test_hostile's: the driver itself may accept them and fault later.) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu_test.h"

static CUstream s1, s2;

static void expect_u32(CUdeviceptr p, uint32_t want, const char *what)
{
    uint32_t got;
    CK(cuMemcpyDtoH(&got, p, sizeof got));
    if (got != want)
        gt_fail("%s: 0x%x, expected 0x%x", what, got, want);
}

/* A wait of s2 for a flag that the work of s1 sets after a spinning kernel: s2's copy must see the value
 * the kernel wrote. */
static void wait_for_other_stream(CUmodule mod, CUdevice dev)
{
    CUfunction spin = gt_function(mod, "spin_flag"), copy = gt_function(mod, "copy_flag");
    CUdeviceptr data, flag, got;
    CK(cuMemAlloc(&data, 4));
    CK(cuMemAlloc(&flag, 4));
    CK(cuMemAlloc(&got, 4));
    CK(cuMemsetD32(data, 0, 1));
    CK(cuMemsetD32(flag, 0, 1));
    CK(cuMemsetD32(got, 0, 1));
    long long cycles = gt_cycles_for_ms(dev, 100);
    int value = 1234;
    void *sargs[] = {&cycles, &data, &value};
    /* The writer's work first: a wait that CUDA does not see as a dependency may hold every stream that
     * shares its hardware queue, and so deadlock a writer queued behind it (cuStreamWaitValue32's warning);
     * natively on the H200 the other order hung once. The spin's 100 ms keep the flag unwritten while s2
     * queues its wait, so the copy still shows that s2 waited. */
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s1, sargs, NULL));
    CK(cuStreamWriteValue32(s1, flag, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
    CK(cuStreamWaitValue32(s2, flag, 1, CU_STREAM_WAIT_VALUE_GEQ));
    void *cargs[] = {&data, &got};
    CK(cuLaunchKernel(copy, 1, 1, 1, 1, 1, 1, 0, s2, cargs, NULL));
    CK(cuStreamSynchronize(s2));
    expect_u32(got, 1234, "the copy after a wait for the other stream's flag");
    CK(cuStreamSynchronize(s1));
    CK(cuMemFree(data));
    CK(cuMemFree(flag));
    CK(cuMemFree(got));
}

/* Each condition: the stream waits on a pinned word the CPU changes; until the condition holds, the write
 * behind the wait has not happened. */
static void wait_for_cpu(volatile uint32_t *word, CUdeviceptr out)
{
    static const struct {
        unsigned flags;
        uint32_t start, wait_for, release;
        const char *name;
    } cases[] = {
        {CU_STREAM_WAIT_VALUE_GEQ, 3, 5, 7, "GEQ"},
        {CU_STREAM_WAIT_VALUE_EQ, 0, 9, 9, "EQ"},
        {CU_STREAM_WAIT_VALUE_AND, 0x10, 0x3, 0x2, "AND"},
        {CU_STREAM_WAIT_VALUE_NOR, 0xffffffffu, 0xfffffff0u, 0xfffffff0u, "NOR"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        *word = cases[i].start;
        CK(cuMemsetD32(out, 0, 1));
        CK(cuStreamWaitValue32(s1, (CUdeviceptr)(uintptr_t)word, cases[i].wait_for, cases[i].flags));
        CK(cuStreamWriteValue32(s1, out, 0xabc0 + (uint32_t)i, CU_STREAM_WRITE_VALUE_DEFAULT));
        gt_sleep_ms(50);
        if (cuStreamQuery(s1) != CUDA_ERROR_NOT_READY)
            gt_fail("wait %s: the stream ran past a condition that does not hold", cases[i].name);
        expect_u32(out, 0, "the write behind a wait that does not hold yet");
        *word = cases[i].release;
        CK(cuStreamSynchronize(s1));
        expect_u32(out, 0xabc0 + (uint32_t)i, "the write behind a wait that holds");
    }
}

int main(void)
{
    gt_begin("stream_memops");
    gt_require_gpu();
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    int ok32 = 0, ok64 = 0;
    CK(cuDeviceGetAttribute(&ok32, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
    CK(cuDeviceGetAttribute(&ok64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
    CUmodule mod = gt_module_from_file_data(GT_FATBIN);
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

    wait_for_other_stream(mod, dev);

    uint32_t *pinned;
    CK(cuMemHostAlloc((void **)&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 64));
    if (ok32)
        wait_for_cpu(pinned, out);

    /* 32- and 64-bit writes to device and pinned memory; a batch in order. */
    CK(cuStreamWriteValue32(s1, out + 4, 0x11223344u, 0));
    CK(cuStreamWriteValue32(s1, (CUdeviceptr)(uintptr_t)(pinned + 1), 0x55667788u, 0));
    if (ok64) {
        CK(cuStreamWriteValue64(s1, out + 8, 0x0102030405060708ull, 0));
        CK(cuStreamWriteValue64(s1, (CUdeviceptr)(uintptr_t)(pinned + 4), 0x1112131415161718ull, 0));
    }
    CUstreamBatchMemOpParams ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = out + 16;
    ops[0].writeValue.value = 1;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[1].waitValue.address = out + 16;
    ops[1].waitValue.value = 1;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[2].writeValue.address = out + 20;
    ops[2].writeValue.value = 2;
    CK(cuStreamBatchMemOp(s1, 3, ops, 0));
    CK(cuStreamSynchronize(s1));
    uint32_t d[6];
    CK(cuMemcpyDtoH(d, out, sizeof d));
    if (d[1] != 0x11223344u || pinned[1] != 0x55667788u || d[4] != 1 || d[5] != 2)
        gt_fail("writes: device 0x%x, pinned 0x%x, batch %u %u", d[1], pinned[1], d[4], d[5]);
    if (ok64) {
        uint64_t w, hw;
        memcpy(&w, &d[2], 8);
        memcpy(&hw, &pinned[4], 8);
        if (w != 0x0102030405060708ull || hw != 0x1112131415161718ull)
            gt_fail("64-bit writes: device 0x%llx, pinned 0x%llx", (unsigned long long)w, (unsigned long long)hw);
    }

    CK(cuMemFree(out));
    CK(cuMemFreeHost(pinned));
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
    printf("stream_memops: waits (%s), writes (32-bit%s) and a batch checked\n", ok32 ? "all conditions" : "GEQ",
           ok64 ? ", 64-bit" : "");
    gt_pass();
}
