/* CUDA_VISIBLE_DEVICES (common/visible.h). */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/visible.h"

void cumux_uuid_text(const uint8_t uuid[16], char out[41])
{
    char *p = out + sprintf(out, "GPU-");
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        p += sprintf(p, "%02x", uuid[i]);
    }
}

/* The GPU one entry names (its text is e[0..len-1]), or -1. */
static int entry_gpu(const char *e, size_t len, const uint8_t (*uuids)[16], int n)
{
    while (len && isspace((unsigned char)*e))
        e++, len--;
    if (len && isdigit((unsigned char)*e)) {
        unsigned long v = 0;
        for (size_t i = 0; i < len && isdigit((unsigned char)e[i]) && v < 1000000; i++)
            v = v * 10 + (unsigned long)(e[i] - '0');
        return v < (unsigned long)n ? (int)v : -1;
    }
    if (len <= 4 || strncasecmp(e, "GPU-", 4) != 0)
        return -1;
    int found = -1;
    for (int g = 0; g < n; g++) {
        char text[41];
        cumux_uuid_text(uuids[g], text);
        if (len <= strlen(text) && strncasecmp(text, e, len) == 0) {
            if (found >= 0)
                return -1; /* the beginning of two UUIDs: names neither */
            found = g;
        }
    }
    return found;
}

int cumux_visible_gpus(const char *spec, const uint8_t (*uuids)[16], int n, int *out, int max)
{
    int count = 0;
    if (!spec) {
        for (int g = 0; g < n && count < max; g++)
            out[count++] = g;
        return count;
    }
    for (const char *e = spec; count < max;) {
        const char *end = strchr(e, ',');
        size_t len = end ? (size_t)(end - e) : strlen(e);
        int g = entry_gpu(e, len, uuids, n);
        bool again = false;
        for (int i = 0; i < count; i++)
            again |= out[i] == g;
        if (g < 0 || again)
            break;
        out[count++] = g;
        if (!end)
            break;
        e = end + 1;
    }
    return count;
}
