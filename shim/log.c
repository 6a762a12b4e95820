/* Reporting from the shim: calls that are not implemented yet say so once (invariant 4). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "shim/shim.h"

__thread int cumux_tls_ptds;

#define UNSUPPORTED_SEEN_MAX 1024
static const char *unsupported_seen[UNSUPPORTED_SEEN_MAX];
static int unsupported_count;
static pthread_mutex_t unsupported_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult cumux_unsupported_if(CUresult r, const char *what)
{
    return r == CUDA_ERROR_NOT_SUPPORTED ? cumux_unsupported(what) : r;
}

CUresult cumux_unsupported(const char *name)
{
    pthread_mutex_lock(&unsupported_lock);
    int seen = 0;
    for (int i = 0; i < unsupported_count; i++) {
        if (unsupported_seen[i] == name || !strcmp(unsupported_seen[i], name)) {
            seen = 1;
            break;
        }
    }
    if (!seen && unsupported_count < UNSUPPORTED_SEEN_MAX)
        unsupported_seen[unsupported_count++] = name;
    pthread_mutex_unlock(&unsupported_lock);
    if (!seen)
        cumux_logf("%s is not supported by cumux yet: returning CUDA_ERROR_NOT_SUPPORTED", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
