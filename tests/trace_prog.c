/* A small driver-API program for the trace tests (test_trace.sh): linked against libcuda.so.1 like any
 * CUDA program, it calls a few entry points directly and one through the pointer cuGetProcAddress
 * hands out, and prints what it got: "version V via-pointer W name N init R". */
#include <stdio.h>
#include <string.h>

#include <cuda.h>

int main(void)
{
    int v = -1, w = -1;
    CUresult r = cuDriverGetVersion(&v);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "trace_prog: cuDriverGetVersion = %d\n", (int)r);
        return 1;
    }
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    r = cuGetProcAddress("cuDriverGetVersion", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !pfn) {
        fprintf(stderr, "trace_prog: cuGetProcAddress = %d, status %d\n", (int)r, (int)st);
        return 1;
    }
    r = ((CUresult(*)(int *))pfn)(&w);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "trace_prog: cuDriverGetVersion through the pointer = %d\n", (int)r);
        return 1;
    }
    const char *name = NULL;
    r = cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &name);
    if (r != CUDA_SUCCESS || !name) {
        fprintf(stderr, "trace_prog: cuGetErrorName = %d\n", (int)r);
        return 1;
    }
    r = cuInit(0);
    printf("version %d via-pointer %d name %s init %d\n", v, w, name, (int)r);
    return 0;
}
