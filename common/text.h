/* Text that grows as it is written (status reports, /metrics). */
#ifndef CUMUX_TEXT_H
#define CUMUX_TEXT_H

#include <stddef.h>

struct cumux_text {
    char *p; /* NULL once out of memory: what was written is gone, later writes do nothing */
    size_t len, cap;
};

/* Starts with room for cap bytes (p NULL when out of memory). */
struct cumux_text cumux_text_new(size_t cap);
void cumux_text_printf(struct cumux_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
