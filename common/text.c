/* Text that grows as it is written (common/text.h). */
#include "common/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct cumux_text cumux_text_new(size_t cap)
{
    struct cumux_text t = {.p = malloc(cap), .cap = cap};
    if (t.p)
        t.p[0] = 0;
    return t;
}

void cumux_text_printf(struct cumux_text *t, const char *fmt, ...)
{
    for (int tries = 0; t->p && tries < 32; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *g = realloc(t->p, t->cap * 2);
        if (!g) {
            free(t->p);
            t->p = NULL;
            return;
        }
        t->p = g;
        t->cap *= 2;
    }
}
