/* fuzz_mirror: libFuzzer over the gateway's reading of what a relay sends (cli/gateway_program.c,
 * on_relay_frame): ring bytes at their positions, staging data, module images in pieces, pinned memory's
 * new blocks and changed-byte records, host-function words. A relay holds the key, but its frames are
 * still checked before use: none may write outside the page, a slot, a block or a queue.
 *
 * The gateway's file is compiled into this one to reach its static functions. A page of our own stands in
 * for the worker's (a worker that takes every message at once: its tail follows our head), with one
 * pinned block at a known address for the records to hit, and a socket pair for the descriptors the
 * gateway hands the worker.
 *
 * Input: tests/fuzz/link_input.h. */
#include "cli/gateway_program.c"

#include <fcntl.h>

#include "tests/fuzz/link_input.h"

#define BLOCK_ADDR 0x7f0000100000ull
#define BLOCK_SIZE (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A worker that takes every message at once: its tail follows our head. */
static int read_frame(void *ctx, uint32_t kind, const uint8_t *p, uint32_t len)
{
    struct gw *g = ctx;
    atomic_store(&g->shm->tail, g->head);
    return on_relay_frame(g, kind, p, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cumux_shm *shm;
    if (!shm && (shm = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED)
        abort();
    atomic_store(&shm->head, 0);
    atomic_store(&shm->tail, 0);
    for (unsigned s = 0; s < CUMUX_STAGING_SLOTS; s++)
        atomic_store(&shm->stage_state[s], CUMUX_STAGE_FREE);

    struct gw *g = calloc(1, sizeof *g);
    int sv[2];
    if (!g || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    fcntl(sv[0], F_SETFL, O_NONBLOCK); /* a full socket fails the send: the worker is not reading here */
    *g = (struct gw){.sock = sv[0], .image_fd = -1, .out_fd = -1, .shm = shm};
    pinned_init(&g->pinned);
    pthread_mutex_init(&g->alloc_lock, NULL);
    pthread_mutex_init(&g->send_lock, NULL);
    pthread_mutex_init(&g->stage_lock, NULL);
    pthread_mutex_init(&g->dtoh_lock, NULL);
    pthread_mutex_init(&g->look_lock, NULL);
    uint8_t *block = mmap(NULL, BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED || pinned_add(&g->pinned, BLOCK_ADDR, BLOCK_SIZE, block) < 0)
        abort();

    link_input_frames(data, size, read_frame, g);

    if (g->image_fd >= 0)
        close(g->image_fd);
    for (int i = 0; i < CUMUX_REPLY_SLOTS; i++)
        if (g->pending[i].mem)
            munmap(g->pending[i].mem, g->pending[i].size);
    pinned_fini(&g->pinned);
    close(sv[0]);
    close(sv[1]);
    free(g);
    return 0;
}
