#include "common/channel.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

uint64_t cumux_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cumux_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tp = &ts;
    }
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, tp, NULL, 0);
    if (r < 0 && errno == ETIMEDOUT)
        return -1;
    return 0;
}

void cumux_futex_wake(_Atomic uint32_t *word, int count)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, count, NULL, NULL, 0);
}

void cumux_shm_init(struct cumux_shm *shm)
{
    shm->magic = CUMUX_MAGIC;
    shm->version = CUMUX_PROTO_VERSION;
    shm->size = sizeof *shm;
    atomic_store(&shm->head, 0);
    atomic_store(&shm->tail, 0);
    atomic_store(&shm->doorbell, 0);
    atomic_store(&shm->server_sleeping, 0);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++) {
        atomic_store(&shm->stage_state[i], CUMUX_STAGE_FREE);
        atomic_store(&shm->stage_seq[i], 0);
    }
}

void *cumux_ring_reserve(struct cumux_shm *shm, uint32_t size)
{
    uint64_t head = atomic_load_explicit(&shm->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&shm->tail, memory_order_acquire);
    uint64_t pos = head % CUMUX_RING_BYTES;
    uint64_t to_end = CUMUX_RING_BYTES - pos;
    uint64_t need = size <= to_end ? size : to_end + size;
    if (head - tail + need > CUMUX_RING_BYTES)
        return NULL;
    if (size > to_end) {
        /* Pad to the end of the ring; the message starts at offset 0. */
        struct cumux_msg_hdr *pad = (struct cumux_msg_hdr *)&shm->ring[pos];
        pad->op = CUMUX_OP_PAD;
        pad->reply = CUMUX_NO_REPLY;
        pad->size = (uint32_t)to_end;
        atomic_store_explicit(&shm->head, head + to_end, memory_order_release);
        return &shm->ring[0];
    }
    return &shm->ring[pos];
}

void cumux_ring_commit(struct cumux_shm *shm, uint32_t size)
{
    uint64_t head = atomic_load_explicit(&shm->head, memory_order_relaxed);
    /* seq_cst store then load: pairs with the server's store of server_sleeping then load of head, so
     * one of the two always sees the other and no wake-up is lost. */
    atomic_store(&shm->head, head + size);
    if (atomic_load(&shm->server_sleeping)) {
        atomic_fetch_add(&shm->doorbell, 1);
        cumux_futex_wake(&shm->doorbell, 1);
    }
}

enum cumux_ring_status cumux_ring_take_at(struct cumux_shm *shm, uint64_t *tailp, void *buf, uint32_t *size)
{
    for (;;) {
        uint64_t tail = *tailp;
        uint64_t head = atomic_load_explicit(&shm->head, memory_order_acquire);
        if (head == tail)
            return CUMUX_RING_EMPTY;
        uint64_t avail = head - tail;
        if (avail > CUMUX_RING_BYTES || (avail & 7u) != 0)
            return CUMUX_RING_CORRUPT;
        uint64_t pos = tail % CUMUX_RING_BYTES;
        struct cumux_msg_hdr hdr;
        memcpy(&hdr, &shm->ring[pos], sizeof hdr);
        uint64_t to_end = CUMUX_RING_BYTES - pos;
        if (hdr.size < sizeof hdr || (hdr.size & 7u) != 0 || hdr.size > avail || hdr.size > to_end)
            return CUMUX_RING_CORRUPT;
        if (hdr.op == CUMUX_OP_PAD) {
            if (hdr.size != to_end)
                return CUMUX_RING_CORRUPT;
            *tailp = tail + hdr.size;
            atomic_store_explicit(&shm->tail, *tailp, memory_order_release);
            continue;
        }
        if (hdr.size > CUMUX_MAX_MSG)
            return CUMUX_RING_CORRUPT;
        memcpy(buf, &shm->ring[pos], hdr.size);
        /* The header may have changed between the two reads: trust only the copy, and its size. */
        ((struct cumux_msg_hdr *)buf)->size = hdr.size;
        *size = hdr.size;
        *tailp = tail + hdr.size;
        atomic_store_explicit(&shm->tail, *tailp, memory_order_release);
        return CUMUX_RING_MSG;
    }
}

enum cumux_ring_status cumux_ring_take(struct cumux_shm *shm, void *buf, uint32_t *size)
{
    uint64_t tail = atomic_load_explicit(&shm->tail, memory_order_relaxed);
    return cumux_ring_take_at(shm, &tail, buf, size);
}

void cumux_ring_wait(struct cumux_shm *shm, const _Atomic int *stop, uint64_t spin_ns, int64_t timeout_ns)
{
    cumux_ring_wait_at(shm, atomic_load_explicit(&shm->tail, memory_order_relaxed), stop, spin_ns, timeout_ns);
}

/* Look at the ring until a message comes or *stop is set (true), or limit_ns passes (false): spinning for
 * spin_ns, then giving a busy CPU to whoever else needs it between looks. */
static bool ring_look(struct cumux_shm *shm, uint64_t tail, const _Atomic int *stop, uint64_t spin_ns,
                      uint64_t limit_ns)
{
    uint64_t start = cumux_now_ns();
    unsigned n = 0;
    while (atomic_load_explicit(&shm->head, memory_order_acquire) == tail) {
        if (atomic_load(stop))
            return true;
        if ((++n & 63u) == 0) {
            uint64_t t = cumux_now_ns() - start;
            if (t > limit_ns)
                return false;
            if (t > spin_ns) {
                sched_yield();
                continue;
            }
        }
        cpu_relax();
    }
    return true;
}

void cumux_ring_wait_at(struct cumux_shm *shm, uint64_t tail, const _Atomic int *stop, uint64_t spin_ns,
                        int64_t timeout_ns)
{
    if (ring_look(shm, tail, stop, spin_ns, spin_ns))
        return; /* work came while spinning: no need to announce a sleep */
    uint32_t bell = atomic_load(&shm->doorbell);
    atomic_store(&shm->server_sleeping, 1);
    if (atomic_load(&shm->head) == tail && !atomic_load(stop))
        cumux_futex_wait(&shm->doorbell, bell, timeout_ns);
    atomic_store(&shm->server_sleeping, 0);
}

bool cumux_ring_poll_at(struct cumux_shm *shm, uint64_t tail, const _Atomic int *stop, uint64_t poll_ns)
{
    return ring_look(shm, tail, stop, 50000, poll_ns);
}

void cumux_reply_post(struct cumux_reply_slot *slot, int32_t result, const void *data, uint32_t len)
{
    if (len > CUMUX_REPLY_DATA)
        len = CUMUX_REPLY_DATA;
    if (len && data != slot->data)
        memcpy(slot->data, data, len);
    slot->result = result;
    slot->len = len;
    atomic_fetch_add(&slot->seq, 1); /* seq_cst: pairs with the client's store of waiting then load of seq */
    if (atomic_load(&slot->waiting))
        cumux_futex_wake(&slot->seq, 1);
}

void cumux_shm_wake_waiters(struct cumux_shm *shm)
{
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++)
        cumux_futex_wake(&shm->replies[i].seq, 1 << 30);
    for (int i = 0; i < CUMUX_STAGING_SLOTS; i++)
        cumux_futex_wake(&shm->stage_seq[i], 1 << 30);
}

#define AUTO_SPIN_NS 50000ull
#define AUTO_YIELD_NS 20000000ull

int cumux_reply_wait_as(struct cumux_reply_slot *slot, uint32_t seq_before, bool (*alive)(void),
                        enum cumux_wait_mode mode)
{
    uint64_t start = cumux_now_ns(), checked = start;
    unsigned n = 0;
    if (mode == CUMUX_WAIT_SPIN || mode == CUMUX_WAIT_YIELD) {
        /* As the program asked: the CPU stays this thread's until the answer comes. The peer's life is
         * looked at every millisecond (a worker that fails says so in the channel at once: a sleeping
         * waiter is woken for it, a spinning one must look). */
        while (atomic_load_explicit(&slot->seq, memory_order_acquire) == seq_before) {
            if ((++n & 1023u) == 0) {
                uint64_t now = cumux_now_ns();
                if (now - checked > 1000000) {
                    checked = now;
                    if (alive && !alive())
                        return -1;
                }
            }
            if (mode == CUMUX_WAIT_YIELD)
                sched_yield();
            else
                cpu_relax();
        }
        return 0;
    }
    /* AUTO: spin 50 us (most replies come in microseconds), then yield the CPU between looks for up to
     * 20 ms, then sleep. Natively AUTO spins for as long as the wait lasts on a machine with more CPUs than
     * contexts; sleeping sooner cost a wake-up of ~100 us at each synchronize: a program that waits every
     * 2.5 ms (5 kernels, then cuCtxSynchronize) ran 4 % slower than natively (docs/performance.md). Past
     * 20 ms a wake-up is under 0.5 % of the wait, and the CPU is given back to the programs that share it.
     * AUTO_CROWDED, where the programs sharing the server are more than half the CPUs (each has a worker
     * in the server too), sleeps after 50 us: spinning waiters would take the CPUs the workers need (as
     * natively AUTO yields once contexts outnumber CPUs). */
    uint64_t until = mode == CUMUX_WAIT_AUTO ? AUTO_YIELD_NS : AUTO_SPIN_NS;
    uint64_t yield_after = mode == CUMUX_WAIT_AUTO ? AUTO_SPIN_NS : AUTO_SPIN_NS * 2 / 5;
    while ((mode == CUMUX_WAIT_AUTO || mode == CUMUX_WAIT_AUTO_CROWDED) &&
           atomic_load_explicit(&slot->seq, memory_order_acquire) == seq_before) {
        if ((++n & 63u) == 0) {
            uint64_t now = cumux_now_ns();
            if (now - start > until)
                break;
            if (now - checked > 1000000) {
                checked = now;
                if (alive && !alive())
                    return -1;
            }
            if (now - start > yield_after)
                sched_yield();
        }
        cpu_relax();
    }
    while (atomic_load_explicit(&slot->seq, memory_order_acquire) == seq_before) {
        atomic_store(&slot->waiting, 1);
        if (atomic_load(&slot->seq) == seq_before) {
            /* After a timeout or a wake without an answer (cumux_shm_wake_waiters): is the server there? */
            cumux_futex_wait(&slot->seq, seq_before, 100000000);
            if (atomic_load(&slot->seq) == seq_before && alive && !alive()) {
                atomic_store(&slot->waiting, 0);
                return -1;
            }
        }
        atomic_store(&slot->waiting, 0);
    }
    return 0;
}

int cumux_reply_wait(struct cumux_reply_slot *slot, uint32_t seq_before, bool (*alive)(void))
{
    return cumux_reply_wait_as(slot, seq_before, alive, CUMUX_WAIT_AUTO);
}
