/* The driver's compile cache table (export table da9151d3..., shim/compile_cache.c). */
#ifndef CUMUX_SHIM_COMPILE_CACHE_H
#define CUMUX_SHIM_COMPILE_CACHE_H

/* Its size word and six slots, as cuGetExportTable hands it out. */
extern const void *const cumux_compile_cache_table[7];

#endif
