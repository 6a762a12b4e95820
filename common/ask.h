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
/* The same, with extra_len bytes sent after the hello (SET_GROUP's struct cumux_group_name). */
int cumux_ask_extra(int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len, int timeout_ms,
                    char **text, char *err, size_t errlen);

/* The same question, its welcome in *w and the descriptor that came with it in *fd (-1: none; fd NULL:
 * none taken): the connected socket, which the caller closes (or keeps: a lease lasts while it is open),
 * or -1 with errno as above. */
int cumux_ask_open(int gpu, const struct cumux_hello *h, int timeout_ms, struct cumux_welcome *w, int *fd, char *err,
                   size_t errlen);

#endif
