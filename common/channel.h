/* The shared-memory channel: a single-consumer ring of commands, reply slots, futex waits. */
#ifndef CUMUX_CHANNEL_H
#define CUMUX_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/proto.h"

/* Cross-process futex (the memory is MAP_SHARED, so no FUTEX_PRIVATE_FLAG). timeout_ns < 0 waits forever.
 * Returns 0 when woken or the value differed, -1 on timeout. */
int cumux_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
void cumux_futex_wake(_Atomic uint32_t *word, int count);

uint64_t cumux_now_ns(void);

/* Initialise a fresh channel (server side). */
void cumux_shm_init(struct cumux_shm *shm);

/* ---- client side ---- */
/* Room in the ring for a message of `size` bytes (hdr included, multiple of 8)? Writes padding at the end
 * of the ring when the message would not fit before it. Returns a pointer to write the message at, or NULL
 * when the ring is full now. The caller serialises producers. */
void *cumux_ring_reserve(struct cumux_shm *shm, uint32_t size);
/* Publish the message written at the reserved place and wake the server if it sleeps. */
void cumux_ring_commit(struct cumux_shm *shm, uint32_t size);

/* ---- server side ---- */
enum cumux_ring_status { CUMUX_RING_EMPTY = 0, CUMUX_RING_MSG = 1, CUMUX_RING_CORRUPT = -1 };
/* Take the next message out of the ring into buf (at least CUMUX_MAX_MSG bytes), skipping padding.
 * The copy is made before anything is checked, so the client cannot change it afterwards. */
enum cumux_ring_status cumux_ring_take(struct cumux_shm *shm, void *buf, uint32_t *size);
/* The same, from the reader's own record of the tail (*tail, updated), not from shm->tail: the server
 * keeps its tail in its own memory, since the client can rewrite the shared copy at any moment. The
 * shared copy is still written, for the writer's flow control. */
enum cumux_ring_status cumux_ring_take_at(struct cumux_shm *shm, uint64_t *tail, void *buf, uint32_t *size);
/* Sleep until the ring is not empty, *stop becomes true, or timeout. Spins first for spin_ns. */
void cumux_ring_wait(struct cumux_shm *shm, const _Atomic int *stop, uint64_t spin_ns, int64_t timeout_ns);
/* The same, empty meaning head == tail (the reader's own tail). */
void cumux_ring_wait_at(struct cumux_shm *shm, uint64_t tail, const _Atomic int *stop, uint64_t spin_ns,
                        int64_t timeout_ns);
/* Look for a message for up to poll_ns without sleeping: spinning for 50 us, then giving the CPU to any
 * other runnable thread between looks. True when one came (or *stop became true). */
bool cumux_ring_poll_at(struct cumux_shm *shm, uint64_t tail, const _Atomic int *stop, uint64_t poll_ns);

/* Bytes a message of body_len needs, rounded up to 8. */
static inline uint32_t cumux_msg_size(size_t body_len)
{
    return (uint32_t)((sizeof(struct cumux_msg_hdr) + body_len + 7u) & ~(size_t)7u);
}

/* Post a reply (server) and wait for one (client). */
void cumux_reply_post(struct cumux_reply_slot *slot, int32_t result, const void *data, uint32_t len);
/* How a client thread waits for an answer: the CUDA context's scheduling flags (CU_CTX_SCHED_*).
 * AUTO: spins 50 us, yields the CPU between looks up to 20 ms, then sleeps on a futex; AUTO_CROWDED (AUTO
 * while the server's clients are more than half the CPUs): spins 20 us, yields to 50 us, then sleeps; SPIN:
 * spins on the CPU, never sleeps; YIELD: yields the CPU between looks, never sleeps; BLOCK: sleeps on a
 * futex after a first look. */
enum cumux_wait_mode { CUMUX_WAIT_AUTO, CUMUX_WAIT_SPIN, CUMUX_WAIT_YIELD, CUMUX_WAIT_BLOCK, CUMUX_WAIT_AUTO_CROWDED };
/* Wait until slot->seq != seq_before. Calls alive() every ~100 ms while sleeping (every ~1 ms while
 * spinning or yielding); gives up (returns -1) when it says the peer is gone. cumux_reply_wait waits as
 * CUMUX_WAIT_AUTO. */
int cumux_reply_wait_as(struct cumux_reply_slot *slot, uint32_t seq_before, bool (*alive)(void),
                        enum cumux_wait_mode mode);
int cumux_reply_wait(struct cumux_reply_slot *slot, uint32_t seq_before, bool (*alive)(void));
/* Wakes every client thread waiting on the channel (answers, staging slots): a worker that gives up tells
 * them at once rather than at their next timeout (they then ask whether the server is alive). */
void cumux_shm_wake_waiters(struct cumux_shm *shm);

#endif
