/* CUDA_VISIBLE_DEVICES as the driver reads it (common/visible.c): indices, UUIDs and their beginnings,
 * the first entry that names no GPU ending the list. */
#include <stdio.h>
#include <string.h>

#include "common/visible.h"

static int failures;
static uint8_t uuids[4][16];

/* spec among 4 GPUs: want is the indices seen, as a string ("2,1"; "" for none). */
static void want(const char *spec, const char *expect)
{
    int out[8], n = cumux_visible_gpus(spec, (const uint8_t (*)[16])uuids, 4, out, 8);
    char got[64] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", i ? "," : "", out[i]);
    if (strcmp(got, expect)) {
        printf("FAIL CUDA_VISIBLE_DEVICES=%s: sees \"%s\", want \"%s\"\n", spec ? spec : "(unset)", got, expect);
        failures++;
    }
}

int main(void)
{
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 16; i++)
            uuids[g][i] = (uint8_t)(0x10 * g + i);
    uuids[3][0] = 0x00, uuids[3][1] = 0x01, uuids[3][2] = 0x02, uuids[3][3] = 0xff; /* shares "GPU-000102" with GPU 0 */
    char text[41];
    cumux_uuid_text(uuids[1], text);
    if (strcmp(text, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f")) {
        printf("FAIL uuid text %s\n", text);
        failures++;
    }
    want(NULL, "0,1,2,3");
    want("", "");
    want("2,1", "2,1");
    want("0,2,-1,1", "0,2");  /* an entry that names no GPU ends the list */
    want("1,7,2", "1");       /* out of range */
    want("1gpu,2", "1,2");    /* an index is read as strtoul reads it */
    want(" 3, 0", "3,0");
    want("1,1,2", "1");       /* named again */
    want("GPU-10111213-1415-1617-1819-1a1b1c1d1e1f", "1");
    want("GPU-2021,gpu-1011", "2,1"); /* beginnings; case does not matter */
    want("GPU-000102", "");            /* the beginning of two UUIDs: names neither */
    want("GPU-00010203,GPU-000102ff", "0,3");
    want("MIG-GPU-1011/0/0,1", "");
    want("GPU-,1", "");
    want("2,,1", "2");
    if (failures)
        return 1;
    printf("PASS visible: indices, UUIDs and their beginnings, the list's end at the first unknown entry\n");
    return 0;
}
