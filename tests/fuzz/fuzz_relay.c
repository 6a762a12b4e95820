/* fuzz_relay: libFuzzer over the relay's reading of what a gateway sends (cli/relay.c, on_gateway_frame):
 * the ring's tail, answers (a HOST_ALLOC's among them, which adds a pinned block), staging slots filled,
 * host functions posted, mark words, marks told, pinned memory's changed-byte records, the server's
 * clients, a fault, printf output. The program's machine holds the key the gateway does, but a frame is
 * still checked before it is written into the program's page: none may write outside the page, a slot, a
 * block or a ring.
 *
 * The relay's file is compiled into this one to reach its static functions. A page of our own stands in
 * for the program's, already welcomed, with one pinned block at a known address for the records to hit
 * and a HOST_ALLOC's memory pending on reply slot 1 (its answer names where the block goes).
 *
 * Input: tests/fuzz/link_input.h. */
#include "cli/relay.c"

#include <fcntl.h>

#include "tests/fuzz/link_input.h"

#define BLOCK_ADDR 0x7f0000100000ull
#define BLOCK_SIZE (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The link's set-up (cli/remote.c) is not what is fuzzed: relay_one, which calls these, never runs here. */
struct cumux_tls *cli_remote_connect(const char *server, const char *key, int timeout_s, char *err, size_t errlen)
{
    (void)server, (void)key, (void)timeout_s, (void)err, (void)errlen;
    abort();
}
void cli_link_long_lived(struct cumux_tls *t)
{
    (void)t;
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cumux_shm *shm;
    if (!shm && (shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED)
        abort();
    cumux_shm_init(shm);

    struct relay *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    *r = (struct relay){.psock = -1, .out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC), .shm = shm, .welcomed = true};
    pthread_mutex_init(&r->stage_lock, NULL);
    pthread_mutex_init(&r->alloc_lock, NULL);
    pinned_init(&r->pinned);
    uint8_t *block = mmap(NULL, BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint8_t *pending = mmap(NULL, BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED || pending == MAP_FAILED || pinned_add(&r->pinned, BLOCK_ADDR, BLOCK_SIZE, block) < 0)
        abort();
    r->pending[1].mem = pending, r->pending[1].size = BLOCK_SIZE;

    link_input_frames(data, size, on_gateway_frame, r);

    if (r->pending[1].mem)
        munmap(r->pending[1].mem, r->pending[1].size);
    pinned_fini(&r->pinned);
    if (r->out_fd >= 0)
        close(r->out_fd);
    pthread_mutex_destroy(&r->stage_lock);
    pthread_mutex_destroy(&r->alloc_lock);
    free(r);
    return 0;
}
