/* Copies between the program's pageable memory and the channel's staging buffers, spread over a few
 * helper threads: one core's memcpy is slower than the GPU's DMA, and the driver copies pageable
 * memory with more than one thread too. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "shim/client.h"

#define PCOPY_MAX_HELPERS 3
#define PCOPY_MIN_BYTES (1u << 20)

static struct {
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    uint64_t generation;
    int pending;
    char *dst;
    const char *src;
    size_t len, part;
    int helpers;
} pc = {.lock = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static pthread_once_t pc_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t pc_serial = PTHREAD_MUTEX_INITIALIZER; /* one parallel copy at a time */

static void copy_part(int idx)
{
    size_t off = (size_t)idx * pc.part;
    if (off < pc.len) {
        size_t n = pc.len - off < pc.part ? pc.len - off : pc.part;
        memcpy(pc.dst + off, pc.src + off, n);
    }
}

static void *helper_main(void *arg)
{
    int idx = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pc.lock);
    for (;;) {
        while (pc.generation == seen)
            pthread_cond_wait(&pc.go, &pc.lock);
        seen = pc.generation;
        pthread_mutex_unlock(&pc.lock);
        copy_part(idx);
        pthread_mutex_lock(&pc.lock);
        if (--pc.pending == 0)
            pthread_cond_signal(&pc.done);
    }
    return NULL;
}

static void reset_after_fork(void)
{
    /* The helpers do not exist in a child: it starts without any and makes them again if it can. */
    pthread_mutex_init(&pc.lock, NULL);
    pthread_cond_init(&pc.go, NULL);
    pthread_cond_init(&pc.done, NULL);
    pthread_mutex_init(&pc_serial, NULL);
    pc.helpers = 0;
    pc.generation = 0;
    pc_once = (pthread_once_t)PTHREAD_ONCE_INIT;
}

static void start_helpers(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus > 1 ? (int)(cpus - 1) : 0;
    if (want > PCOPY_MAX_HELPERS)
        want = PCOPY_MAX_HELPERS;
    static bool atfork_set;
    if (!atfork_set) {
        atfork_set = true;
        pthread_atfork(NULL, NULL, reset_after_fork);
    }
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < want; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, helper_main, (void *)(intptr_t)(i + 1)) != 0)
            break;
        pc.helpers++;
    }
    pthread_attr_destroy(&a);
}

void shim_memcpy(void *dst, const void *src, size_t len)
{
    if (len < PCOPY_MIN_BYTES) {
        memcpy(dst, src, len);
        return;
    }
    pthread_once(&pc_once, start_helpers);
    if (pc.helpers == 0 || pthread_mutex_trylock(&pc_serial) != 0) {
        memcpy(dst, src, len);
        return;
    }
    int parts = pc.helpers + 1;
    pthread_mutex_lock(&pc.lock);
    pc.dst = dst;
    pc.src = src;
    pc.len = len;
    pc.part = ((len + (size_t)parts - 1) / (size_t)parts + 63) & ~(size_t)63;
    pc.pending = pc.helpers;
    pc.generation++;
    pthread_cond_broadcast(&pc.go);
    pthread_mutex_unlock(&pc.lock);
    copy_part(0);
    pthread_mutex_lock(&pc.lock);
    while (pc.pending > 0)
        pthread_cond_wait(&pc.done, &pc.lock);
    pthread_mutex_unlock(&pc.lock);
    pthread_mutex_unlock(&pc_serial);
}
