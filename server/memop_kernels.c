/* Stream memory operations on memory the driver refuses them for.
 *
 * cumuxd serves cuMemAlloc from the client's own memory pool (memory.c: a stream-ordered free waits for no
 * other client), and the driver refuses stream memory operations on pool memory: on the H200 (driver 13.0)
 * cuStreamWriteValue32/64, cuStreamWaitValue32 and cuStreamBatchMemOp answer CUDA_ERROR_INVALID_VALUE for
 * cuMemAllocAsync and cuMemAllocFromPoolAsync memory and succeed on cuMemAlloc's (tools/probe_stream_memops.c).
 * A program that waits on cuMemAlloc memory must still work, so such a write or wait runs as a one-thread
 * kernel of the server's own on the same stream: the write a release store, the wait a loop of acquire loads
 * (with a short sleep) until the condition holds, as the driver's semaphore does. A waiting kernel holds one
 * thread of one SM while it waits. The module is PTX, compiled by the driver for each GPU when the server starts. */

#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "server/server.h"

static const char memop_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry cumux_mem_write(.param .u64 p_addr, .param .u64 p_value, .param .u32 p_size)\n"
    "{\n"
    "    .reg .pred %wide;\n"
    "    .reg .b32 %size, %v32;\n"
    "    .reg .b64 %addr, %value;\n"
    "    ld.param.u64 %addr, [p_addr];\n"
    "    ld.param.u64 %value, [p_value];\n"
    "    ld.param.u32 %size, [p_size];\n"
    "    setp.eq.u32 %wide, %size, 8;\n"
    "    @%wide bra WIDE;\n"
    "    cvt.u32.u64 %v32, %value;\n"
    "    st.release.sys.u32 [%addr], %v32;\n"
    "    ret;\n"
    "WIDE:\n"
    "    st.release.sys.u64 [%addr], %value;\n"
    "    ret;\n"
    "}\n"
    "\n"
    ".visible .entry cumux_mem_wait(.param .u64 p_addr, .param .u64 p_value, .param .u32 p_size, .param .u32 p_cond)\n"
    "{\n"
    "    .reg .pred %wide, %ok;\n"
    "    .reg .b32 %size, %cond, %x32;\n"
    "    .reg .b64 %addr, %value, %x, %t, %mask;\n"
    "    ld.param.u64 %addr, [p_addr];\n"
    "    ld.param.u64 %value, [p_value];\n"
    "    ld.param.u32 %size, [p_size];\n"
    "    ld.param.u32 %cond, [p_cond];\n"
    "    setp.eq.u32 %wide, %size, 8;\n"
    "    mov.b64 %mask, 0xffffffffffffffff;\n"
    "    @!%wide mov.b64 %mask, 0xffffffff;\n"
    "LOOP:\n"
    "    @%wide ld.acquire.sys.u64 %x, [%addr];\n"
    "    @!%wide ld.acquire.sys.u32 %x32, [%addr];\n"
    "    @!%wide cvt.u64.u32 %x, %x32;\n"
    "    setp.eq.u32 %ok, %cond, 0;\n"
    "    @%ok bra GEQ;\n"
    "    setp.eq.u32 %ok, %cond, 1;\n"
    "    @%ok bra EQ;\n"
    "    setp.eq.u32 %ok, %cond, 2;\n"
    "    @%ok bra AND;\n"
    "    or.b64 %t, %x, %value;\n"
    "    not.b64 %t, %t;\n"
    "    and.b64 %t, %t, %mask;\n"
    "    setp.ne.u64 %ok, %t, 0;\n"
    "    bra TEST;\n"
    "GEQ:\n"
    "    sub.u64 %t, %x, %value;\n"
    "    @!%wide shl.b64 %t, %t, 32;\n"
    "    @!%wide shr.s64 %t, %t, 32;\n"
    "    setp.ge.s64 %ok, %t, 0;\n"
    "    bra TEST;\n"
    "EQ:\n"
    "    setp.eq.u64 %ok, %x, %value;\n"
    "    bra TEST;\n"
    "AND:\n"
    "    and.b64 %t, %x, %value;\n"
    "    setp.ne.u64 %ok, %t, 0;\n"
    "TEST:\n"
    "    @%ok bra DONE;\n"
    "    nanosleep.u32 200;\n"
    "    bra LOOP;\n"
    "DONE:\n"
    "    ret;\n"
    "}\n";

static struct {
    pthread_mutex_t mu;
    bool tried;
    CUfunction write, wait;
} kernels[CUMUX_MAX_DEVICES];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_locks(void)
{
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++)
        pthread_mutex_init(&kernels[g].mu, NULL);
}

/* Loaded when the server starts (counted among its own resources, not a client's). */
bool srv_memop_kernels_load(int gpu)
{
    pthread_once(&init_once, init_locks);
    pthread_mutex_lock(&kernels[gpu].mu);
    if (!kernels[gpu].tried) {
        kernels[gpu].tried = true;
        CUmodule mod;
        CUresult r = cuModuleLoadData(&mod, memop_ptx);
        if (r == CUDA_SUCCESS && (r = cuModuleGetFunction(&kernels[gpu].write, mod, "cumux_mem_write")) == CUDA_SUCCESS)
            r = cuModuleGetFunction(&kernels[gpu].wait, mod, "cumux_mem_wait");
        if (r != CUDA_SUCCESS) {
            kernels[gpu].write = kernels[gpu].wait = NULL;
            cumux_logf("GPU %d: cannot load the stream memory operation kernels (%d): such operations on "
                       "pool memory fail", gpu, (int)r);
        }
    }
    bool ok = kernels[gpu].write && kernels[gpu].wait;
    pthread_mutex_unlock(&kernels[gpu].mu);
    return ok;
}

CUresult srv_memop_run(int gpu, CUstream s, const CUstreamBatchMemOpParams *p, bool pool)
{
    CUresult r = cuStreamBatchMemOp(s, 1, (CUstreamBatchMemOpParams *)p, 0);
    if (r != CUDA_ERROR_INVALID_VALUE || !pool || gpu < 0 || gpu >= CUMUX_MAX_DEVICES || !srv_memop_kernels_load(gpu))
        return r;
    uint64_t address = p->waitValue.address, value = p->waitValue.value64;
    uint32_t size = 4, cond = p->waitValue.flags & 3u;
    CUfunction f = kernels[gpu].wait;
    switch (p->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        size = 8;
        break;
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        value = p->waitValue.value;
        break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        size = 8, f = kernels[gpu].write;
        break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        value = p->writeValue.value, f = kernels[gpu].write;
        break;
    default:
        return r;
    }
    void *args[] = {&address, &value, &size, &cond}; /* the write takes the first three */
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}
