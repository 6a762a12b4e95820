/* The network link's framing (issue 45, docs/remote.md): over a byte stream (TLS over TCP), each frame is
 * an 8-byte head, little-endian u32 payload length and u32 kind, then the payload. A reader takes the
 * stream in pieces of any size and hands out whole frames; a length past CUMUX_FRAME_MAX or a kind it does
 * not know is a broken link (the peer is dropped, as a killed client). Nothing here trusts the peer. */
#ifndef CUMUX_FRAME_H
#define CUMUX_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CUMUX_FRAME_HEAD 8u
#define CUMUX_FRAME_MAX (16u << 20) /* a payload's bytes at most: bulk data goes in pieces of this */

enum cumux_frame_kind {
    CUMUX_FRAME_HELLO = 1, /* the connection's first: the hello a local client sends on the socket */
    CUMUX_FRAME_MSG = 2,   /* a channel message, as the shared-memory channel carries it */
    CUMUX_FRAME_DATA = 3,  /* bulk data of a copy: its destination in the payload's first 16 bytes */
    CUMUX_FRAME_BYE = 4,   /* the end: the other side closes after it */
    CUMUX_FRAME_KINDS
};

struct cumux_frame_reader {
    uint8_t head[CUMUX_FRAME_HEAD];
    size_t head_got;
    uint32_t len, kind;
    uint8_t *buf; /* the payload being read (len bytes), grown as needed */
    size_t cap, got;
    int broken; /* a malformed head was read: everything after it is refused */
};

/* The head of a frame of kind with len payload bytes into out. */
void cumux_frame_head(uint8_t out[CUMUX_FRAME_HEAD], uint32_t kind, uint32_t len);

/* Takes n bytes of the stream; calls on_frame for each whole frame (its payload valid during the call
 * only), which returns 0 to go on or non-zero to stop there. Returns the bytes taken (n unless on_frame
 * stopped), or -1 once the stream is malformed (a kind not known, a length past CUMUX_FRAME_MAX) or out of
 * memory: the link is to be dropped. */
typedef int (*cumux_frame_fn)(void *ctx, uint32_t kind, const uint8_t *payload, uint32_t len);
ssize_t cumux_frame_feed(struct cumux_frame_reader *r, const void *data, size_t n, cumux_frame_fn on_frame, void *ctx);
void cumux_frame_reader_free(struct cumux_frame_reader *r);

#endif
