/* libFuzzer over the network link's frame reader (common/frame.c; issue 45): any bytes, fed in pieces whose
 * sizes the input's first byte chooses, must give frames that lie inside what was offered, or a refusal,
 * and nothing after a refusal. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"

static int on_frame(void *ctx, uint32_t kind, const uint8_t *payload, uint32_t len)
{
    size_t *total = ctx;
    if (kind == 0 || kind >= CUMUX_FRAME_KINDS || len > CUMUX_FRAME_MAX || (len && !payload))
        abort();
    volatile uint8_t x = 0;
    for (uint32_t i = 0; i < len; i++) /* every byte readable (ASan) */
        x ^= payload[i];
    (void)x;
    *total += CUMUX_FRAME_HEAD + len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] + 1, fed = 0, framed = 0;
    data++, size--;
    struct cumux_frame_reader r;
    memset(&r, 0, sizeof r);
    int broken = 0;
    for (size_t off = 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        ssize_t used = cumux_frame_feed(&r, data + off, n, on_frame, &framed);
        if (broken && used != -1)
            abort(); /* nothing is taken after a refusal */
        if (used == -1)
            broken = 1;
        else if ((size_t)used != n)
            abort();
        fed += n; /* offered: frames before a refusal in the same piece are handed out */
    }
    if (framed > fed)
        abort();
    cumux_frame_reader_free(&r);
    return 0;
}
