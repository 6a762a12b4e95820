/* The tracing libcuda.so.1 (docs/trace.md): what the generated wrappers and the hand-written parts share. */
#ifndef CUMUX_TRACE_H
#define CUMUX_TRACE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "trace/generated/trace_wrappers.h"

#define TR_EXPORT __attribute__((visibility("default")))
#define TR_HIDDEN __attribute__((visibility("hidden")))

#define TR_LINE_MAX 2048

/* One traced call, on the caller's stack: the line is built in buf as the arguments are printed. */
struct tr_call {
    tr_fn fn;      /* the traced library's entry point, NULL when it has none */
    unsigned idx;  /* index in tr_names */
    int ok;        /* the result was CUDA_SUCCESS: outputs may be read */
    int saved_errno;
    CUresult result;
    uint64_t t0, t1; /* ns since the library started */
    size_t len;
    int nargs;
    const char *note; /* appended after the duration */
    char note_buf[160];
    char buf[TR_LINE_MAX];
};

/* Fills c; returns 0 when the call is not to be traced (the traced library calling its own entry points
 * through ours, see trace.c), else starts the clock. */
TR_HIDDEN int tr_begin(struct tr_call *c, unsigned idx, const void *return_address);
TR_HIDDEN void tr_end(struct tr_call *c, CUresult r);
TR_HIDDEN void tr_finish(struct tr_call *c);
/* The result when the traced library lacks the entry point (or could not be loaded). */
TR_HIDDEN CUresult tr_missing(struct tr_call *c);

/* Arguments: tr_a_* print an input, tr_o_* an output pointer and, after success, what it points to. */
TR_HIDDEN void tr_a_i(struct tr_call *c, const char *name, long long v);
TR_HIDDEN void tr_a_u(struct tr_call *c, const char *name, unsigned long long v);
TR_HIDDEN void tr_a_x(struct tr_call *c, const char *name, unsigned long long v);
TR_HIDDEN void tr_a_f(struct tr_call *c, const char *name, double v);
TR_HIDDEN void tr_a_p(struct tr_call *c, const char *name, const void *p);
TR_HIDDEN void tr_a_s(struct tr_call *c, const char *name, const char *s);
TR_HIDDEN void tr_a_uuid(struct tr_call *c, const char *name, const CUuuid *u);
TR_HIDDEN void tr_a_agg(struct tr_call *c, const char *name, size_t size);
TR_HIDDEN void tr_o_i(struct tr_call *c, const char *name, const void *p, long long v);
TR_HIDDEN void tr_o_u(struct tr_call *c, const char *name, const void *p, unsigned long long v);
TR_HIDDEN void tr_o_x(struct tr_call *c, const char *name, const void *p, unsigned long long v);
TR_HIDDEN void tr_o_f(struct tr_call *c, const char *name, const void *p, double v);
TR_HIDDEN void tr_o_p(struct tr_call *c, const char *name, const void *p, const void *v);
TR_HIDDEN void tr_o_s(struct tr_call *c, const char *name, const void *p, const char *v);
TR_HIDDEN void tr_o_str(struct tr_call *c, const char *name, const char *buf, long long len);
TR_HIDDEN void tr_o_uuid(struct tr_call *c, const char *name, const CUuuid *u);

/* cuGetProcAddress[_v2]: the pointer handed out becomes this library's wrapper of the same name. */
TR_HIDDEN void tr_hook_procaddress(struct tr_call *c, void **pfn);
/* cuGetExportTable: the table's function slots are made to go through logging trampolines (tables.c). */
TR_HIDDEN void tr_hook_export_table(struct tr_call *c, const void **table, const CUuuid *id);

/* output.c: where the lines go (CUMUX_TRACE_FILE, else stderr), opened at start; the clock starts then. */
TR_HIDDEN void tr_output_open(void);
TR_HIDDEN bool tr_output_to_file(void);
TR_HIDDEN void tr_output_after_fork(void); /* in the child: its own thread ids */
/* Nanoseconds since start; the thread's id; one line written whole; a line's "seconds tid " prefix. */
TR_HIDDEN uint64_t tr_now(void);
TR_HIDDEN int tr_tid(void);
TR_HIDDEN void tr_write(const char *s, size_t n);
TR_HIDDEN int tr_prefix(char *buf, size_t size, uint64_t t);
TR_HIDDEN void tr_tables_summary(void);
TR_HIDDEN void tr_tables_after_fork(void);
TR_HIDDEN extern int tr_tables_enabled;
TR_HIDDEN extern int tr_tables_dump; /* CUMUX_TRACE_DUMP=1: the bytes behind each pointer argument of a slot */

#endif
