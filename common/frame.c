/* The network link's framing (common/frame.h). */
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void cumux_frame_head(uint8_t out[CUMUX_FRAME_HEAD], uint32_t kind, uint32_t len)
{
    put32(out, len);
    put32(out + 4, kind);
}

ssize_t cumux_frame_feed(struct cumux_frame_reader *r, const void *data, size_t n, cumux_frame_fn on_frame, void *ctx)
{
    const uint8_t *p = data;
    size_t used = 0;
    if (r->broken)
        return -1;
    while (used < n) {
        if (r->head_got < CUMUX_FRAME_HEAD) {
            size_t take = CUMUX_FRAME_HEAD - r->head_got;
            if (take > n - used)
                take = n - used;
            memcpy(r->head + r->head_got, p + used, take);
            r->head_got += take;
            used += take;
            if (r->head_got < CUMUX_FRAME_HEAD)
                break;
            r->len = get32(r->head);
            r->kind = get32(r->head + 4);
            if (r->kind == 0 || r->kind >= CUMUX_FRAME_KINDS || r->len > CUMUX_FRAME_MAX) {
                r->broken = 1;
                return -1;
            }
            if (r->len > r->cap) {
                uint8_t *b = realloc(r->buf, r->len);
                if (!b) {
                    r->broken = 1;
                    return -1;
                }
                r->buf = b;
                r->cap = r->len;
            }
            r->got = 0;
        }
        size_t take = r->len - r->got;
        if (take > n - used)
            take = n - used;
        if (take)
            memcpy(r->buf + r->got, p + used, take);
        r->got += take;
        used += take;
        if (r->got < r->len)
            break;
        r->head_got = 0; /* whole: the next head starts here, whatever on_frame says */
        if (on_frame(ctx, r->kind, r->buf, r->len) != 0)
            return (ssize_t)used;
    }
    return (ssize_t)used;
}

void cumux_frame_reader_free(struct cumux_frame_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}
