/* Logging shared by every cumux component: one line per message, prefixed with the component. */
#ifndef CUMUX_LOG_H
#define CUMUX_LOG_H

#include <stdarg.h>

void cumux_log_init(const char *component);
void cumux_logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Debug messages only when CUMUX_DEBUG is set in the environment. */
void cumux_debugf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int cumux_debug_enabled;

#endif
