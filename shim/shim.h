/* Internal interface of the libcuda.so.1 shim: shared by hand-written files and generated code. */
#ifndef CUMUX_SHIM_H
#define CUMUX_SHIM_H

#include <cuda.h>

/* Set (to 1) by the generated _ptds/_ptsz wrappers around a call of the base entry point: a NULL
 * stream inside that call means the calling thread's per-thread default stream, not the legacy one. */
extern __thread int cumux_tls_ptds;

/* Every entry point that cumux does not implement yet returns this: CUDA_ERROR_NOT_SUPPORTED,
 * after logging the name once per process (invariant 4). */
CUresult cumux_unsupported(const char *name);
/* r, having named `what` once when r is CUDA_ERROR_NOT_SUPPORTED (the server's answer for a case of a
 * call that cumux does not handle). */
CUresult cumux_unsupported_if(CUresult r, const char *what);

#endif
