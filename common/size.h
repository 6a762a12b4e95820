/* Memory sizes as people and MPS write them: "4G", "512M", "1.5GiB", "8589934592", "none". */
#ifndef CUMUX_SIZE_H
#define CUMUX_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A size: digits with an optional fraction, then an optional unit K, M, G or T (powers of 1024, as MPS
 * takes them; "KB", "KiB", "k" alike) or B. "0", "none" and "unlimited" are 0: no limit. false when
 * malformed or past 2^63. */
bool cumux_parse_size(const char *s, uint64_t *bytes);

/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's form, "0=1G,1=512M": device `dev`'s entry. A bare size (no "N=") is
 * taken for every device. *bytes is 0 when the device has no entry; false when malformed. */
bool cumux_parse_device_limits(const char *s, int dev, uint64_t *bytes);
/* Device dev's entry of a per-device value as MPS writes its memory limits: "V" (every device) or
 * "0=V,1=W" (a bare V among them: every device not named), into out ("" when none); false when
 * malformed: an entry without a value, a device that is no number, a value longer than cap or 63
 * characters, or one that valid (when not NULL) refuses, whichever device it names. */
bool cumux_device_entry(const char *s, int dev, char *out, size_t cap, bool (*valid)(const char *v));

/* A count from 0 to max in plain digits ("16"), or "none": 0. false when malformed or past max. */
bool cumux_parse_count(const char *s, uint32_t max, uint32_t *n);

#endif
