/* Client priority classes (cumux run --priority, CUMUX_PRIORITY, MPS's CUDA_MPS_CLIENT_PRIORITY): each
 * class has its own band of the GPU's stream priorities, so that every stream of a high client is served
 * before every stream of a normal one, and those before a low one's; inside its band a program's own
 * stream priorities keep their order. */
#ifndef CUMUX_PRIORITY_H
#define CUMUX_PRIORITY_H

#include <stdbool.h>

enum cumux_priority {
    CUMUX_PRIORITY_UNSET = 0, /* the server's default */
    CUMUX_PRIORITY_LOW = 1,   /* MPS's CUDA_MPS_CLIENT_PRIORITY=1 (below normal) */
    CUMUX_PRIORITY_NORMAL = 2, /* MPS's 0 */
    CUMUX_PRIORITY_HIGH = 3,  /* latency-critical: MPS has none */
};

/* "high", "normal", "low" (or MPS's "0", "1"); false for anything else. */
bool cumux_priority_parse(const char *s, enum cumux_priority *out);
const char *cumux_priority_name(enum cumux_priority p);

/* The stream priority the server gives a stream that the program asked `requested` for, on a device whose
 * range is least (lowest priority, e.g. 0) .. greatest (e.g. -5): low clients get `least`; the others
 * share the rest, the top third of the levels for high clients. */
int cumux_priority_stream(enum cumux_priority cls, int requested, int least, int greatest);

#endif
