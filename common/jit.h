/* The JIT options whose value is a number: the shim sends them to the server, which gives them to the
 * driver as they are. The others point into the program's memory (logs, symbol tables) or are outputs. */
#ifndef CUMUX_COMMON_JIT_H
#define CUMUX_COMMON_JIT_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

static inline bool cumux_jit_scalar_option(uint32_t o)
{
    switch (o) {
    case CU_JIT_MAX_REGISTERS: case CU_JIT_THREADS_PER_BLOCK: case CU_JIT_OPTIMIZATION_LEVEL:
    case CU_JIT_TARGET_FROM_CUCONTEXT: case CU_JIT_TARGET: case CU_JIT_FALLBACK_STRATEGY:
    case CU_JIT_GENERATE_DEBUG_INFO: case CU_JIT_LOG_VERBOSE: case CU_JIT_GENERATE_LINE_INFO:
    case CU_JIT_CACHE_MODE: case CU_JIT_POSITION_INDEPENDENT_CODE: case CU_JIT_MIN_CTA_PER_SM:
    case CU_JIT_MAX_THREADS_PER_BLOCK: case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
        return true;
    default:
        return false;
    }
}

#endif
