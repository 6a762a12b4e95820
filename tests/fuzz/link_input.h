/* The input format of the transport's fuzzers (fuzz_mirror, fuzz_relay): frames one after another, each
 * a head {u8 kind (0xff: BYE, else MSG), u8 pad, u16 length} and that many bytes (cut at the input's end).
 * Each frame is handed to the reader as a copy of its own (readers read a frame in place: a buffer of
 * theirs, as the link's is), until the reader refuses one. */
#ifndef CUMUX_FUZZ_LINK_INPUT_H
#define CUMUX_FUZZ_LINK_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"

typedef int (*link_frame_reader)(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len);

static void link_input_frames(const uint8_t *data, size_t size, link_frame_reader read, void *ctx)
{
    for (size_t off = 0; off + 4 <= size;) {
        uint32_t kind = data[off] == 0xff ? CUMUX_FRAME_BYE : CUMUX_FRAME_MSG;
        size_t len = (size_t)data[off + 2] | (size_t)data[off + 3] << 8;
        off += 4;
        if (len > size - off)
            len = size - off;
        uint8_t *frame = malloc(len ? len : 1);
        if (!frame)
            abort();
        memcpy(frame, data + off, len);
        off += len;
        int r = read(ctx, kind, frame, (uint32_t)len);
        free(frame);
        if (r < 0)
            break;
    }
}

#endif
