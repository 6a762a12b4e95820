/* The transport alone: round trips through a cumux channel between two threads, no GPU and no driver.
 * Separates the channel's own latency from the server's work in a synchronous call.
 * usage: bench_channel [ROUND_TRIPS=100000] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "common/channel.h"

static struct cumux_shm *shm;
static _Atomic int stop;

static void *server(void *arg)
{
    (void)arg;
    static uint8_t buf[CUMUX_MAX_MSG];
    while (!atomic_load(&stop)) {
        uint32_t size;
        enum cumux_ring_status st = cumux_ring_take(shm, buf, &size);
        if (st == CUMUX_RING_EMPTY) {
            cumux_ring_wait(shm, &stop, 50000, 1000000000);
            continue;
        }
        if (st != CUMUX_RING_MSG)
            abort();
        const struct cumux_msg_hdr *h = (const void *)buf;
        cumux_reply_post(&shm->replies[h->reply], 0, NULL, 0);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    if (n < 1)
        return 2;
    shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED)
        return 1;
    cumux_shm_init(shm);
    pthread_t t;
    if (pthread_create(&t, NULL, server, NULL) != 0)
        return 1;
    double best = 1e18;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t t0 = cumux_now_ns();
        for (long i = 0; i < n; i++) {
            struct cumux_reply_slot *s = &shm->replies[0];
            uint32_t before = atomic_load(&s->seq);
            uint32_t size = cumux_msg_size(sizeof(struct cumux_none));
            struct cumux_msg_hdr *h;
            while (!(h = cumux_ring_reserve(shm, size)))
                ;
            h->op = CUMUX_OP_INIT;
            h->reply = 0;
            h->size = size;
            cumux_ring_commit(shm, size);
            cumux_reply_wait(s, before, NULL);
        }
        double ns = (double)(cumux_now_ns() - t0) / (double)n;
        if (ns < best)
            best = ns;
    }
    printf("channel_round_trip_ns=%.0f\n", best);
    atomic_store(&stop, 1);
    atomic_fetch_add(&shm->doorbell, 1);
    cumux_futex_wake(&shm->doorbell, 1);
    pthread_join(t, NULL);
    return 0;
}
