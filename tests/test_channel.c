/* The shared-memory channel in one process, no server: the ring between a producer and a consumer
 * thread (byte-exact, in order, across wrap-around), a full ring, every kind of corrupt ring the
 * server must refuse, replies across threads (spin and futex paths), and the futex helpers.
 * usage: test_channel */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/channel.h"

#include "test_util.h"

static void sleep_ns(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0)
        REQUIRE(errno == EINTR, "nanosleep: %s", strerror(errno));
}

static void yield_cpu(void)
{
    REQUIRE(sched_yield() == 0, "sched_yield");
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static struct cumux_shm *shm_new(void)
{
    /* MAP_SHARED as the server makes it, so futexes behave as across processes. */
    void *p = mmap(NULL, sizeof(struct cumux_shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED, "mmap %zu bytes", sizeof(struct cumux_shm));
    cumux_shm_init(p);
    return p;
}

static void shm_delete(struct cumux_shm *shm)
{
    REQUIRE(munmap(shm, sizeof *shm) == 0, "munmap");
}

/* Message i of a stream: its size and contents follow from (seed, i) alone, so the consumer can
 * recompute what it must receive. Mostly small messages, a quarter up to CUMUX_MAX_MSG. */
static uint32_t msg_size_of(uint64_t seed, uint64_t i)
{
    uint64_t s = seed ^ (i * 0x100000001b3ull);
    uint64_t r = splitmix(&s);
    size_t body = (r & 3) == 0 ? (size_t)((r >> 8) % (CUMUX_MAX_MSG - sizeof(struct cumux_msg_hdr) + 1))
                               : (size_t)((r >> 8) % 257);
    return cumux_msg_size(body);
}

static void msg_fill(uint8_t *p, uint32_t size, uint64_t seed, uint64_t i)
{
    struct cumux_msg_hdr h = {.op = (uint16_t)(1 + i % (CUMUX_OP_COUNT - 1)), .reply = (uint16_t)i, .size = size};
    memcpy(p, &h, sizeof h);
    uint64_t s = seed + i;
    for (uint32_t off = sizeof h; off < size; off += 8) {
        uint64_t v = splitmix(&s);
        memcpy(p + off, &v, 8);
    }
}

static bool msg_same(const uint8_t *p, uint32_t size, uint64_t seed, uint64_t i, uint8_t *scratch)
{
    msg_fill(scratch, size, seed, i);
    return memcmp(p, scratch, size) == 0;
}

/* ---- producer and consumer threads ---- */
struct spsc {
    struct cumux_shm *shm;
    uint64_t seed;
    uint64_t count;
    _Atomic uint64_t ring_full; /* times the producer found no room */
};

static void *producer(void *arg)
{
    struct spsc *t = arg;
    uint64_t rng = t->seed * 7 + 1;
    for (uint64_t i = 0; i < t->count; i++) {
        uint32_t size = msg_size_of(t->seed, i);
        void *p;
        while (!(p = cumux_ring_reserve(t->shm, size))) {
            atomic_fetch_add(&t->ring_full, 1);
            yield_cpu();
        }
        msg_fill(p, size, t->seed, i);
        cumux_ring_commit(t->shm, size);
        /* Pause now and then, so the consumer goes to sleep and must be woken by the doorbell. */
        if ((splitmix(&rng) & 63) == 0)
            sleep_ns((long)(splitmix(&rng) % 200000));
    }
    return NULL;
}

static void test_producer_consumer(uint64_t seed, uint64_t count, uint64_t spin_ns)
{
    struct cumux_shm *shm = shm_new();
    struct spsc t = {.shm = shm, .seed = seed, .count = count};
    uint8_t *buf = malloc(CUMUX_MAX_MSG), *want = malloc(CUMUX_MAX_MSG);
    REQUIRE(buf && want, "malloc");
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, producer, &t) == 0, "pthread_create");
    _Atomic int stop = 0;
    uint64_t pads = 0, bytes = 0, sleeps = 0;
    uint64_t tail0 = 0; /* tail after the previous message: padding may be skipped by a take that finds
                         * the message itself not yet committed */
    for (uint64_t i = 0; i < count;) {
        if (i == count / 2) {
            /* Stop consuming until the producer finds the ring full, so it waits for room too. */
            uint64_t t0 = cumux_now_ns();
            while (!atomic_load(&t.ring_full) && cumux_now_ns() - t0 < 20000000000ull)
                sleep_ns(1000000);
            REQUIRE(atomic_load(&t.ring_full), "the producer never found the ring full");
        }
        uint32_t size = 0;
        enum cumux_ring_status st = cumux_ring_take(shm, buf, &size);
        REQUIRE(st != CUMUX_RING_CORRUPT, "message %llu: ring reported corrupt", (unsigned long long)i);
        if (st == CUMUX_RING_EMPTY) {
            uint64_t t0 = cumux_now_ns();
            cumux_ring_wait(shm, &stop, spin_ns, 2000000000);
            /* The producer never pauses more than 0.2 ms: a second's wait is a lost wake-up. */
            REQUIRE(cumux_now_ns() - t0 < 1000000000ull || atomic_load(&shm->head) == atomic_load(&shm->tail),
                  "ring_wait slept %.3f s with a message waiting", (cumux_now_ns() - t0) / 1e9);
            REQUIRE(atomic_load(&shm->server_sleeping) == 0, "server_sleeping left set");
            sleeps++;
            continue;
        }
        uint32_t want_size = msg_size_of(seed, i);
        REQUIRE(size == want_size, "message %llu: size %u, sent %u", (unsigned long long)i, size, want_size);
        REQUIRE(msg_same(buf, size, seed, i, want), "message %llu (%u bytes): contents differ",
              (unsigned long long)i, size);
        uint64_t moved = atomic_load(&shm->tail) - tail0;
        REQUIRE(moved >= size, "tail moved %llu for a message of %u", (unsigned long long)moved, size);
        if (moved > size) {
            /* Padding skipped: it ran exactly to the end of the ring, and the message is at offset 0. */
            REQUIRE((tail0 + moved - size) % CUMUX_RING_BYTES == 0, "padding did not end at the ring's end");
            pads++;
        }
        bytes += moved;
        tail0 += moved;
        i++;
    }
    REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
    uint32_t size;
    REQUIRE(cumux_ring_take(shm, buf, &size) == CUMUX_RING_EMPTY, "messages left over");
    REQUIRE(bytes == atomic_load(&shm->head), "consumed %llu bytes, produced %llu", (unsigned long long)bytes,
          (unsigned long long)atomic_load(&shm->head));
    /* The stream must have wrapped several times, each wrap padded unless a message ended exactly. */
    REQUIRE(bytes > 3ull * CUMUX_RING_BYTES, "only %llu bytes went through", (unsigned long long)bytes);
    REQUIRE(pads > 0, "no padding seen across %llu wraps", (unsigned long long)(bytes / CUMUX_RING_BYTES));
    printf("producer/consumer (spin %llu ns): %llu messages, %.1f MiB, %llu wraps padded, %llu sleeps, "
           "ring full %llu times\n",
           (unsigned long long)spin_ns, (unsigned long long)count, bytes / 1048576.0, (unsigned long long)pads,
           (unsigned long long)sleeps, (unsigned long long)atomic_load(&t.ring_full));
    free(buf);
    free(want);
    shm_delete(shm);
}

/* ---- a full ring ---- */
static void put(struct cumux_shm *shm, uint32_t size, uint64_t i)
{
    void *p = cumux_ring_reserve(shm, size);
    REQUIRE(p != NULL, "reserve %u with %llu bytes used", size,
          (unsigned long long)(atomic_load(&shm->head) - atomic_load(&shm->tail)));
    msg_fill(p, size, 99, i);
    cumux_ring_commit(shm, size);
}

static void take_expect(struct cumux_shm *shm, uint8_t *buf, uint32_t size, uint64_t i)
{
    uint8_t *want = malloc(CUMUX_MAX_MSG);
    REQUIRE(want != NULL, "malloc");
    uint32_t got = 0;
    REQUIRE(cumux_ring_take(shm, buf, &got) == CUMUX_RING_MSG, "take message %llu", (unsigned long long)i);
    REQUIRE(got == size && msg_same(buf, size, 99, i, want), "message %llu: %u bytes, wanted %u", (unsigned long long)i,
          got, size);
    free(want);
}

static void test_full(void)
{
    struct cumux_shm *shm = shm_new();
    uint8_t *buf = malloc(CUMUX_MAX_MSG);
    REQUIRE(buf != NULL, "malloc");
    /* Largest messages fill the ring exactly; then not even the smallest fits. */
    uint32_t n = CUMUX_RING_BYTES / CUMUX_MAX_MSG;
    for (uint32_t i = 0; i < n; i++)
        put(shm, CUMUX_MAX_MSG, i);
    REQUIRE(atomic_load(&shm->head) == CUMUX_RING_BYTES, "head %llu", (unsigned long long)atomic_load(&shm->head));
    REQUIRE(cumux_ring_reserve(shm, 8) == NULL, "reserve succeeded in a full ring");
    REQUIRE(atomic_load(&shm->head) == CUMUX_RING_BYTES, "a refused reserve moved head");
    /* One taken: exactly its room is back. */
    take_expect(shm, buf, CUMUX_MAX_MSG, 0);
    REQUIRE(cumux_ring_reserve(shm, CUMUX_MAX_MSG + 8) == NULL, "reserve of more than the free room");
    put(shm, CUMUX_MAX_MSG, n);
    REQUIRE(cumux_ring_reserve(shm, 8) == NULL, "ring full again but reserve succeeded");
    for (uint32_t i = 1; i <= n; i++)
        take_expect(shm, buf, CUMUX_MAX_MSG, i);
    uint32_t got;
    REQUIRE(cumux_ring_take(shm, buf, &got) == CUMUX_RING_EMPTY, "ring not empty");
    shm_delete(shm);

    /* Near the end of the ring: a message that needs padding is refused when padding plus message do
     * not fit, without writing the padding; one that ends exactly at the end needs none. */
    shm = shm_new();
    uint64_t i = 0;
    put(shm, 32, i++); /* taken below, so 48 bytes are free at the end */
    uint64_t left = CUMUX_RING_BYTES - 32 - 16;
    while (left > 0) {
        uint32_t s = left > CUMUX_MAX_MSG ? CUMUX_MAX_MSG : (uint32_t)left;
        put(shm, s, i++);
        left -= s;
    }
    take_expect(shm, buf, 32, 0);
    uint64_t head = atomic_load(&shm->head);
    REQUIRE(head == CUMUX_RING_BYTES - 16, "head %llu", (unsigned long long)head);
    REQUIRE(cumux_ring_reserve(shm, 40) == NULL, "16 bytes to the end + 40 fit in 48 free");
    REQUIRE(atomic_load(&shm->head) == head, "refused reserve wrote padding");
    put(shm, 16, i++); /* ends exactly at the end of the ring */
    REQUIRE(atomic_load(&shm->head) == CUMUX_RING_BYTES, "no padding expected");
    put(shm, 32, i++); /* starts at offset 0, in the room the first message left */
    REQUIRE(cumux_ring_reserve(shm, 8) == NULL, "ring should be full");
    /* Consume all: the same messages, in order. */
    uint64_t j = 1;
    for (left = CUMUX_RING_BYTES - 32 - 16; left > 0; j++) {
        uint32_t s = left > CUMUX_MAX_MSG ? CUMUX_MAX_MSG : (uint32_t)left;
        take_expect(shm, buf, s, j);
        left -= s;
    }
    take_expect(shm, buf, 16, j++);
    take_expect(shm, buf, 32, j++);
    REQUIRE(cumux_ring_take(shm, buf, &got) == CUMUX_RING_EMPTY, "ring not empty");

    /* Padding: 40 bytes at offset 32, with 16 bytes to the end of the ring, all free now. */
    shm_delete(shm);
    shm = shm_new();
    atomic_store(&shm->head, 3 * (uint64_t)CUMUX_RING_BYTES - 16);
    atomic_store(&shm->tail, 3 * (uint64_t)CUMUX_RING_BYTES - 16);
    put(shm, 40, 1000);
    REQUIRE(atomic_load(&shm->head) == 3 * (uint64_t)CUMUX_RING_BYTES + 40, "padding not accounted in head");
    const struct cumux_msg_hdr *pad = (const void *)&shm->ring[CUMUX_RING_BYTES - 16];
    REQUIRE(pad->op == CUMUX_OP_PAD && pad->size == 16, "padding header op %u size %u", pad->op, pad->size);
    take_expect(shm, buf, 40, 1000);
    REQUIRE(atomic_load(&shm->tail) == atomic_load(&shm->head), "padding not skipped");
    free(buf);
    shm_delete(shm);
}

/* ---- corrupt rings ---- */
static void write_hdr(struct cumux_shm *shm, uint64_t pos, uint16_t op, uint32_t size)
{
    struct cumux_msg_hdr h = {.op = op, .reply = CUMUX_NO_REPLY, .size = size};
    memcpy(&shm->ring[pos % CUMUX_RING_BYTES], &h, sizeof h);
}

static void expect_corrupt(struct cumux_shm *shm, uint64_t tail, uint64_t head, const char *what)
{
    atomic_store(&shm->tail, tail);
    atomic_store(&shm->head, head);
    uint8_t *buf = malloc(CUMUX_MAX_MSG);
    REQUIRE(buf != NULL, "malloc");
    uint32_t size = 12345;
    enum cumux_ring_status st = cumux_ring_take(shm, buf, &size);
    REQUIRE(st == CUMUX_RING_CORRUPT, "%s: status %d, wanted CUMUX_RING_CORRUPT", what, (int)st);
    REQUIRE(atomic_load(&shm->tail) == tail, "%s: tail moved", what);
    free(buf);
}

static void test_corrupt(void)
{
    struct cumux_shm *shm = shm_new();
    const uint64_t base = 5ull * CUMUX_RING_BYTES + 4096; /* any position: only differences count */
    const uint16_t op = CUMUX_OP_INIT;

    write_hdr(shm, base, op, 16);
    expect_corrupt(shm, base, base + 12, "head - tail not a multiple of 8");
    expect_corrupt(shm, base, base + 4, "head - tail smaller than a header");
    expect_corrupt(shm, base, base + CUMUX_RING_BYTES + 8, "head - tail larger than the ring");
    expect_corrupt(shm, base, base - 8, "head moved back behind tail");
    expect_corrupt(shm, base, UINT64_MAX - 7, "head far beyond");

    write_hdr(shm, base, op, 0);
    expect_corrupt(shm, base, base + 64, "message size 0");
    write_hdr(shm, base, op, 4);
    expect_corrupt(shm, base, base + 64, "message size smaller than its header");
    write_hdr(shm, base, op, 20);
    expect_corrupt(shm, base, base + 64, "message size not a multiple of 8");
    write_hdr(shm, base, op, 72);
    expect_corrupt(shm, base, base + 64, "message larger than what was committed");
    write_hdr(shm, base, op, CUMUX_MAX_MSG + 8);
    expect_corrupt(shm, base, base + 2 * CUMUX_MAX_MSG, "message larger than CUMUX_MAX_MSG");
    write_hdr(shm, base, op, 0xfffffff8u);
    expect_corrupt(shm, base, base + CUMUX_RING_BYTES, "message size near 4 GiB");

    /* A message may not run over the end of the ring (the producer pads instead). */
    const uint64_t end = 6ull * CUMUX_RING_BYTES;
    write_hdr(shm, end - 16, op, 32);
    expect_corrupt(shm, end - 16, end + 64, "message across the end of the ring");

    /* Padding must run exactly to the end of the ring. */
    write_hdr(shm, base, CUMUX_OP_PAD, 16);
    expect_corrupt(shm, base, base + 64, "padding in the middle of the ring");
    write_hdr(shm, end - 32, CUMUX_OP_PAD, 16);
    expect_corrupt(shm, end - 32, end + 64, "padding short of the end");
    write_hdr(shm, end - 32, CUMUX_OP_PAD, 48);
    expect_corrupt(shm, end - 32, end + 64, "padding past the end");
    /* Correct padding followed by a bad message: the padding is consumed, then corrupt is reported. */
    write_hdr(shm, end - 32, CUMUX_OP_PAD, 32);
    write_hdr(shm, end, op, 0);
    atomic_store(&shm->tail, end - 32);
    atomic_store(&shm->head, end + 64);
    uint8_t *buf = malloc(CUMUX_MAX_MSG);
    REQUIRE(buf != NULL, "malloc");
    uint32_t size;
    REQUIRE(cumux_ring_take(shm, buf, &size) == CUMUX_RING_CORRUPT, "bad message after padding");
    REQUIRE(atomic_load(&shm->tail) == end, "padding before the bad message not consumed");
    /* Padding that is all there is: consumed, then the ring is empty. */
    write_hdr(shm, end - 32, CUMUX_OP_PAD, 32);
    atomic_store(&shm->tail, end - 32);
    atomic_store(&shm->head, end);
    REQUIRE(cumux_ring_take(shm, buf, &size) == CUMUX_RING_EMPTY, "padding alone");
    REQUIRE(atomic_load(&shm->tail) == end, "padding alone not consumed");

    /* The sanity case with the same setup: a good message is taken. */
    write_hdr(shm, base, op, 64);
    atomic_store(&shm->tail, base);
    atomic_store(&shm->head, base + 64);
    REQUIRE(cumux_ring_take(shm, buf, &size) == CUMUX_RING_MSG && size == 64, "good message");
    free(buf);
    shm_delete(shm);
}

/* ---- futexes ---- */
struct waker {
    _Atomic uint32_t *word;
    long delay_ns;
};

static void *wake_later(void *arg)
{
    struct waker *w = arg;
    sleep_ns(w->delay_ns);
    atomic_fetch_add(w->word, 1);
    cumux_futex_wake(w->word, 1);
    return NULL;
}

static void test_futex(struct cumux_shm *shm)
{
    _Atomic uint32_t *word = &shm->replies[0].seq;
    atomic_store(word, 5);
    uint64_t t0 = cumux_now_ns();
    REQUIRE(cumux_futex_wait(word, 5, 50000000) == -1, "timed-out wait must return -1");
    uint64_t dt = cumux_now_ns() - t0;
    REQUIRE(dt >= 45000000, "timed out after only %llu ns", (unsigned long long)dt);
    t0 = cumux_now_ns();
    REQUIRE(cumux_futex_wait(word, 6, 5000000000) == 0, "value differs: must return 0 at once");
    REQUIRE(cumux_now_ns() - t0 < 1000000000ull, "did not return at once");

    struct waker w = {word, 50000000};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, wake_later, &w) == 0, "pthread_create");
    t0 = cumux_now_ns();
    int r;
    while ((r = cumux_futex_wait(word, 5, 5000000000)) == 0 && atomic_load(word) == 5) {
        /* spurious wake-up: wait again */
    }
    REQUIRE(r == 0, "woken wait returned %d", r);
    REQUIRE(cumux_now_ns() - t0 < 4000000000ull, "wake took too long");
    REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
}

/* ---- cumux_ring_wait ---- */
struct committer {
    struct cumux_shm *shm;
    long delay_ns;
    bool saw_sleeping;
};

static void *commit_later(void *arg)
{
    struct committer *c = arg;
    sleep_ns(c->delay_ns);
    c->saw_sleeping = atomic_load(&c->shm->server_sleeping) != 0;
    void *p = cumux_ring_reserve(c->shm, 16);
    if (p) {
        msg_fill(p, 16, 7, 0);
        cumux_ring_commit(c->shm, 16);
    }
    return NULL;
}

static void test_ring_wait(void)
{
    struct cumux_shm *shm = shm_new();
    _Atomic int stop = 0;
    /* Empty ring: sleeps for the timeout. */
    uint64_t t0 = cumux_now_ns();
    cumux_ring_wait(shm, &stop, 1000, 50000000);
    uint64_t dt = cumux_now_ns() - t0;
    REQUIRE(dt >= 45000000 && dt < 3000000000ull, "empty ring_wait returned after %llu ns", (unsigned long long)dt);
    REQUIRE(atomic_load(&shm->server_sleeping) == 0, "server_sleeping left set");
    /* Stop set: returns at once. */
    atomic_store(&stop, 1);
    t0 = cumux_now_ns();
    cumux_ring_wait(shm, &stop, 1000000000, 5000000000);
    REQUIRE(cumux_now_ns() - t0 < 500000000ull, "ring_wait ignored stop");
    atomic_store(&stop, 0);
    /* A commit while it sleeps wakes it through the doorbell, long before the timeout. */
    struct committer c = {shm, 100000000, false};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, commit_later, &c) == 0, "pthread_create");
    t0 = cumux_now_ns();
    while (atomic_load(&shm->head) == atomic_load(&shm->tail) && cumux_now_ns() - t0 < 5000000000ull)
        cumux_ring_wait(shm, &stop, 1000, 5000000000);
    dt = cumux_now_ns() - t0;
    REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
    REQUIRE(c.saw_sleeping, "the waiter was not asleep on the doorbell after 100 ms");
    REQUIRE(dt < 3000000000ull, "commit did not wake ring_wait (%llu ns)", (unsigned long long)dt);
    uint8_t *buf = malloc(CUMUX_MAX_MSG);
    REQUIRE(buf != NULL, "malloc");
    uint32_t size;
    REQUIRE(cumux_ring_take(shm, buf, &size) == CUMUX_RING_MSG && size == 16, "committed message");
    free(buf);
    shm_delete(shm);
}

/* ---- replies ---- */
/* alive() is called only when a futex wait timed out: counting the calls tells whether a waiter was
 * woken by the post or only noticed the reply at its next timeout. */
static _Atomic unsigned alive_calls;

static bool peer_alive(void)
{
    atomic_fetch_add(&alive_calls, 1);
    return true;
}

static bool peer_gone(void)
{
    return false;
}

struct reply_waiter {
    struct cumux_reply_slot *slot;
    uint32_t before;
    int rc;
    uint64_t ns;
    enum cumux_wait_mode mode;
    bool (*alive)(void); /* NULL: peer_alive */
};

static void *wait_reply(void *arg)
{
    struct reply_waiter *w = arg;
    uint64_t t0 = cumux_now_ns();
    w->rc = cumux_reply_wait_as(w->slot, w->before, w->alive ? w->alive : peer_alive, w->mode);
    w->ns = cumux_now_ns() - t0;
    return NULL;
}

/* A waiter in `mode` and a reply posted after `ms` milliseconds (until_asleep: or once the waiter is seen
 * asleep, if that comes later) with `result`: whether the waiter went to sleep on the futex meanwhile (its
 * `waiting` mark); *ns how long it waited. */
static bool waited_asleep(struct cumux_reply_slot *slot, enum cumux_wait_mode mode, int ms, bool until_asleep,
                          int32_t result, uint64_t *ns)
{
    uint32_t before = atomic_load(&slot->seq);
    struct reply_waiter w = {slot, before, -5, 0, mode, NULL};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, wait_reply, &w) == 0, "pthread_create");
    bool slept = false;
    /* A waiter that should sleep is given up to 2 s to be seen asleep: on a loaded machine its thread may
     * not have run at all within ms. */
    int limit = until_asleep ? 2000 : ms;
    for (int i = 0; i < limit && !(slept && i >= ms); i++) {
        sleep_ns(1000000);
        slept |= atomic_load(&slot->waiting) != 0;
    }
    cumux_reply_post(slot, result, "m", 1);
    REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
    REQUIRE(w.rc == 0 && slot->result == result, "mode %d: rc %d, result %d", (int)mode, w.rc, slot->result);
    if (ns)
        *ns = w.ns;
    return slept;
}

/* The wait modes of the contexts' scheduling flags: spinning and yielding threads never sleep on the futex
 * (no `waiting` mark), see a reply posted 20 ms later, and give up on a dead peer (looked at every ms); a
 * blocking one sleeps at once. */
static void test_wait_modes(struct cumux_shm *shm)
{
    struct cumux_reply_slot *slot = &shm->replies[CUMUX_REPLY_SLOTS - 2];
    const enum cumux_wait_mode modes[] = {CUMUX_WAIT_SPIN, CUMUX_WAIT_YIELD, CUMUX_WAIT_BLOCK};
    const char *names[] = {"spin", "yield", "block"};
    for (int m = 0; m < 3; m++) {
        uint64_t ns;
        bool slept = waited_asleep(slot, modes[m], 20, modes[m] == CUMUX_WAIT_BLOCK, 40 + m, &ns);
        REQUIRE(ns >= 15000000ull && ns < 3000000000ull, "%s: waited %llu ns for a reply posted at 20 ms",
                names[m], (unsigned long long)ns);
        REQUIRE(slept == (modes[m] == CUMUX_WAIT_BLOCK), "%s: %s on the futex", names[m],
                slept ? "slept" : "never slept");
        /* The peer dies: each gives up. */
        uint32_t before = atomic_load(&slot->seq);
        uint64_t t0 = cumux_now_ns();
        REQUIRE(cumux_reply_wait_as(slot, before, peer_gone, modes[m]) == -1, "%s: a dead peer not noticed", names[m]);
        REQUIRE(cumux_now_ns() - t0 < 3000000000ull, "%s: dead peer noticed too late", names[m]);
    }
    /* AUTO: a reply within 20 ms is seen without sleeping on the futex (natively AUTO spins: a wake-up at
     * each synchronize cost a program that waits every few ms 4 %); a longer wait sleeps. Crowded (more
     * clients than CPUs): the same 5 ms wait sleeps. */
    REQUIRE(!waited_asleep(slot, CUMUX_WAIT_AUTO, 5, false, 50, NULL), "auto, reply after 5 ms: slept on the futex");
    REQUIRE(waited_asleep(slot, CUMUX_WAIT_AUTO, 60, true, 51, NULL), "auto, reply after 60 ms: never slept");
    REQUIRE(waited_asleep(slot, CUMUX_WAIT_AUTO_CROWDED, 5, true, 52, NULL),
            "auto crowded, reply after 5 ms: never slept on the futex");
}

static void test_reply(struct cumux_shm *shm)
{
    struct cumux_reply_slot *slot = &shm->replies[CUMUX_REPLY_SLOTS - 1];
    static const char text[] = "the reply";

    /* Posted before the wait: returns at once. */
    uint32_t before = atomic_load(&slot->seq);
    cumux_reply_post(slot, 7, text, sizeof text);
    REQUIRE(atomic_load(&slot->seq) == before + 1, "seq not bumped");
    REQUIRE(cumux_reply_wait(slot, before, peer_alive) == 0, "wait after post");
    REQUIRE(slot->result == 7 && slot->len == sizeof text && !memcmp(slot->data, text, sizeof text), "reply content");

    /* The waiter arrives first and sleeps on the futex: the post must wake it, not its next timeout.
     * Three rounds: a timeout may coincide with a post once by chance, not three times. */
    int late = 0;
    for (int round = 0; round < 3; round++) {
        before = atomic_load(&slot->seq);
        struct reply_waiter w = {slot, before, -5, 0, CUMUX_WAIT_AUTO, NULL};
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, wait_reply, &w) == 0, "pthread_create");
        uint64_t t0 = cumux_now_ns();
        while (!atomic_load(&slot->waiting) && cumux_now_ns() - t0 < 5000000000ull)
            sleep_ns(1000000);
        REQUIRE(atomic_load(&slot->waiting), "waiter never went to sleep on the futex");
        sleep_ns(150000000); /* past one alive() period of the waiter */
        unsigned calls = atomic_load(&alive_calls);
        REQUIRE(calls > 0, "a waiter asleep for 150 ms never checked its peer");
        cumux_reply_post(slot, round, "x", 1);
        REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
        late += atomic_load(&alive_calls) != calls;
        REQUIRE(w.rc == 0, "futex waiter returned %d", w.rc);
        REQUIRE(w.ns < 3000000000ull, "futex waiter took %llu ns", (unsigned long long)w.ns);
        REQUIRE(atomic_load(&slot->waiting) == 0, "waiting left set");
        REQUIRE(slot->result == round && slot->len == 1 && slot->data[0] == 'x', "reply content after futex wait");
        atomic_store(&alive_calls, 0);
    }
    REQUIRE(late < 3, "the post never woke the sleeping waiter: it only saw the reply after its futex timed out");

    /* The peer dies: the wait gives up. */
    before = atomic_load(&slot->seq);
    uint64_t t0 = cumux_now_ns();
    REQUIRE(cumux_reply_wait(slot, before, peer_gone) == -1, "wait with a dead peer must fail");
    REQUIRE(cumux_now_ns() - t0 < 3000000000ull, "dead peer noticed too late");
    REQUIRE(atomic_load(&slot->waiting) == 0, "waiting left set after giving up");

    /* Oversized data is cut to the slot. */
    uint8_t *big = malloc(CUMUX_REPLY_DATA + 100);
    REQUIRE(big != NULL, "malloc");
    memset(big, 0xab, CUMUX_REPLY_DATA + 100);
    cumux_reply_post(slot, 1, big, CUMUX_REPLY_DATA + 100);
    REQUIRE(slot->len == CUMUX_REPLY_DATA && slot->data[CUMUX_REPLY_DATA - 1] == 0xab, "oversized reply");
    free(big);
}

/* ---- round trips: a client thread and a server thread, as shim and worker ---- */
struct rt {
    struct cumux_shm *shm;
    uint64_t n;
    _Atomic int stop;
    _Atomic int bad;
};

static void *rt_server(void *arg)
{
    struct rt *t = arg;
    uint8_t *buf = malloc(CUMUX_MAX_MSG);
    if (!buf) {
        t->bad = 1;
        return NULL;
    }
    for (uint64_t done = 0; done < t->n && !t->bad;) {
        uint32_t size;
        enum cumux_ring_status st = cumux_ring_take(t->shm, buf, &size);
        if (st == CUMUX_RING_EMPTY) {
            cumux_ring_wait(t->shm, &t->stop, 2000, 100000000);
            continue;
        }
        const struct cumux_msg_hdr *h = (const void *)buf;
        if (st != CUMUX_RING_MSG || h->reply >= CUMUX_REPLY_SLOTS) {
            t->bad = 1;
            break;
        }
        /* Echo the body, and sometimes be slow so the client sleeps on its futex. */
        if (done % 97 == 0)
            sleep_ns(200000);
        cumux_reply_post(&t->shm->replies[h->reply], (int32_t)(done & 0xff), buf + sizeof *h, size - (uint32_t)sizeof *h);
        done++;
    }
    free(buf);
    return NULL;
}

static void test_round_trips(uint64_t n)
{
    struct cumux_shm *shm = shm_new();
    struct rt t = {.shm = shm, .n = n};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, rt_server, &t) == 0, "pthread_create");
    uint8_t *want = malloc(CUMUX_MAX_MSG);
    REQUIRE(want != NULL, "malloc");
    for (uint64_t i = 0; i < n; i++) {
        uint16_t s = (uint16_t)(i % CUMUX_REPLY_SLOTS);
        struct cumux_reply_slot *slot = &shm->replies[s];
        uint32_t before = atomic_load(&slot->seq);
        uint32_t size = cumux_msg_size((size_t)(i * 8 % 512));
        void *p;
        while (!(p = cumux_ring_reserve(shm, size)))
            yield_cpu();
        msg_fill(p, size, 3, i);
        ((struct cumux_msg_hdr *)p)->reply = s;
        cumux_ring_commit(shm, size);
        REQUIRE(cumux_reply_wait(slot, before, peer_alive) == 0, "round trip %llu", (unsigned long long)i);
        REQUIRE(!t.bad, "server thread saw a bad message");
        msg_fill(want, size, 3, i);
        REQUIRE(slot->result == (int32_t)(i & 0xff), "round trip %llu: result %d", (unsigned long long)i, slot->result);
        REQUIRE(slot->len == size - sizeof(struct cumux_msg_hdr) &&
                  !memcmp(slot->data, want + sizeof(struct cumux_msg_hdr), slot->len),
              "round trip %llu: reply data", (unsigned long long)i);
    }
    REQUIRE(pthread_join(th, NULL) == 0, "pthread_join");
    printf("round trips: %llu\n", (unsigned long long)n);
    free(want);
    shm_delete(shm);
}

int main(void)
{
    struct cumux_shm *shm = shm_new();
    REQUIRE(shm->magic == CUMUX_MAGIC && shm->version == CUMUX_PROTO_VERSION && shm->size == sizeof *shm, "shm_init");
    REQUIRE(atomic_load(&shm->head) == 0 && atomic_load(&shm->tail) == 0, "shm_init ring");
    REQUIRE(cumux_msg_size(0) == 8 && cumux_msg_size(1) == 16 && cumux_msg_size(8) == 16 && cumux_msg_size(9) == 24,
          "cumux_msg_size rounding");
    /* The layout the server and the shim share: alignment the ring's 8-byte steps rely on. */
    REQUIRE(sizeof(struct cumux_msg_hdr) == 8, "header size");
    REQUIRE(CUMUX_RING_BYTES % CUMUX_MAX_MSG == 0 && CUMUX_MAX_MSG % 8 == 0, "ring geometry");

    test_futex(shm);
    test_reply(shm);
    test_wait_modes(shm);
    shm_delete(shm);
    test_ring_wait();
    test_full();
    test_corrupt();
    test_producer_consumer(1, 40000, 50000);
    test_producer_consumer(2, 20000, 0); /* no spinning: every empty ring sleeps on the doorbell */
    test_round_trips(20000);
    printf("test_channel: %lu checks passed\n", test_checks);
    return 0;
}
