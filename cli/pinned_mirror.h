/* Pinned host memory across the network (cli/relay.c, cli/gateway_program.c; docs/remote.md): each side maps
 * its own copy of every allocation (the program's memfd on the relay's side, one of the gateway's own that
 * the worker registers), named by the server's address of it, and keeps a shadow of what the other side
 * last had. At each synchronizing point (the relay: before the program's messages go and after a host
 * function ran; the gateway: before answers, marks and host functions go back) the bytes that differ from
 * the shadow are sent, as runs of changed 8-byte words (runs less than 32 bytes apart as one), never whole
 * pages: bytes the other side wrote meanwhile elsewhere in the same page are not overwritten. What is
 * looked at follows the ops (the spec's look=): all blocks where the GPU may touch any of them (a kernel),
 * a copy's or memset's own range, nothing for a query. */
#ifndef CUMUX_PINNED_MIRROR_H
#define CUMUX_PINNED_MIRROR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pinned_block {
    uint64_t server_addr, size;
    uint8_t *mem;    /* this side's copy (mapped) */
    uint8_t *shadow; /* what the other side has, as far as we know */
};

struct pinned_set {
    pthread_mutex_t lock;
    struct pinned_block *v;
    size_t n, cap;
    uint64_t bytes; /* of all blocks */
    /* Between synchronizing points, a look now and then (pinned_due): memory one side polls while the
     * other writes it (a flag a kernel waits on, a word a kernel sets) must cross without a call. */
    uint64_t next_look_ns, look_cost_ns;
};

#define PINNED_MAX_BYTES (64ull << 30) /* a side's shadows at most, together */

void pinned_init(struct pinned_set *s);
/* Every block unmapped, the set's memory freed. */
void pinned_fini(struct pinned_set *s);
/* A block mapped at mem (owned from now on: unmapped when removed). 0, or -1 (no memory for its shadow,
 * or an address range that overlaps another's). */
int pinned_add(struct pinned_set *s, uint64_t server_addr, uint64_t size, uint8_t *mem);
void pinned_remove(struct pinned_set *s, uint64_t server_addr);
/* The changed runs of every block, as records {u64 addr, u32 len, u32 pad, bytes, padded to 8} in frames
 * of at most CUMUX_FRAME_MAX, each handed to send (which returns 0, or -1 to stop) without the set's lock
 * held. How many bytes changed, or -1. */
typedef int (*pinned_send_fn)(void *ctx, const uint8_t *records, size_t len);
long long pinned_diff(struct pinned_set *s, pinned_send_fn send, void *ctx);
/* The same for the pages that ranges r[0, nr) of server addresses touch (a copy's, a memset's: an op with
 * look=range; none: no look). scheduled: it stands for the look now and then that pinned_due asks for
 * (where nothing else can have changed), else it leaves when that is due alone. */
struct pinned_range {
    uint64_t addr, len;
};
long long pinned_diff_ranges(struct pinned_set *s, const struct pinned_range *r, size_t nr, bool scheduled,
                             pinned_send_fn send, void *ctx);
/* The ranges (any addresses: the blocks' are the ones looked at) of a look=range op's body of len bytes that
 * one side looks at: the relay (gateway false) before the op goes, the gateway after it ran. How many (0 to
 * 2) into r, or -1  (a body too short, a range past 2^64: look at everything). */
int pinned_op_ranges(unsigned op, const uint8_t *body, size_t len, bool gateway, struct pinned_range r[2]);
/* Whether a look between synchronizing points is due at now: every millisecond, or less often where a
 * look costs more (a look at most a twentieth of the time). */
int pinned_due(struct pinned_set *s, uint64_t now_ns);
/* Records from the other side into the blocks and their shadows (a record outside every block, of memory
 * this side freed meanwhile, is skipped). 0, or -1 (a malformed record). */
int pinned_apply(struct pinned_set *s, const uint8_t *records, size_t len);

#endif
