/* A question to one GPU's worker on its socket (the CLI's requests, and GPU 0's worker gathering the
 * others' records for /metrics): a hello, its welcome, and the text that follows. */
#ifndef CUMUX_COMMON_ASK_H
#define CUMUX_COMMON_ASK_H

#include <stdint.h>

#include "common/proto.h"

/* Connects to GPU gpu's socket (checked to be ours: cumux_connect_checked), sends h, and waits at most
 * timeout_ms (0: no limit) for the answer. The worker's status (0 or a CUresult), its text in *text
 * (malloc'd, NUL-ended; NULL when there was none or text is NULL), or -1 with errno: EPERM (err says why),
 * ENOENT/ECONNREFUSED (no worker there), ETIMEDOUT. */
int cumux_ask(int gpu, const struct cumux_hello *h, int timeout_ms, char **text, char *err, size_t errlen);

#endif
