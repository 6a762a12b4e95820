/* CUDA_VISIBLE_DEVICES as the driver reads it: which of the server's GPUs a program sees, in what order. */
#ifndef CUMUX_VISIBLE_H
#define CUMUX_VISIBLE_H

#include <stdint.h>

/* The GPUs that spec names, among n GPUs whose UUIDs are uuids[0..n-1]: their indices go into out (at most
 * max), in the list's order, and their count is returned. spec NULL: every GPU, in order. A list is
 * separated by commas; an entry is an index (read as strtoul reads it: "1gpu" is 1) or "GPU-" and the
 * beginning of one GPU's UUID as nvidia-smi writes it (enough of it to name one GPU alone). The first
 * entry that names no GPU (out of range, unknown, ambiguous, a MIG instance, "-1", empty) or one named
 * before ends the list: the GPUs before it are seen, as the driver does. */
int cumux_visible_gpus(const char *spec, const uint8_t (*uuids)[16], int n, int *out, int max);
/* A UUID as nvidia-smi writes it: "GPU-" then 8-4-4-4-12 hexadecimal digits (41 bytes with the NUL). */
void cumux_uuid_text(const uint8_t uuid[16], char out[41]);

#endif
