/* A program using several GPUs: each GPU's worker is its own process (its fault domain), so the program
 * has a channel to each, opened at its first message naming the GPU (shim_gpu_route), and each message
 * goes to the worker of what it names (shim_chan_route). The main channel, the first GPU's, is the one
 * that comes back after another program's fault; a program with further channels does not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "shim/client.h"
#include "shim/generated/routes.h"

static pthread_mutex_t extra_lock = PTHREAD_MUTEX_INITIALIZER;

bool shim_several_gpus(void)
{
    return atomic_load_explicit(&shim_extra_count, memory_order_relaxed) != 0;
}

void shim_gpus_forget(void)
{
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        struct shim_chan *ch = atomic_exchange(&shim_extra_chans[g], NULL);
        if (ch) { /* a parent's, in a child: let go of it, as of the main one */
            close(ch->sock);
            munmap(ch->shm, sizeof(struct cumux_shm));
            free(ch);
        }
    }
    atomic_store(&shim_extra_count, 0);
    pthread_mutex_init(&extra_lock, NULL);
    shim_peer_reset(); /* the parent's views are its workers' clients', not this child's */
}


/* The INIT and CLIENT_INFO of a further GPU's channel: the same GPUs as the main channel's, and what the
 * program asks for on that GPU (program_gpu, as it numbers them). */
static CUresult extra_handshake(struct shim_chan *ch, int program_gpu)
{
    static uint8_t buf[CUMUX_REPLY_DATA]; /* under extra_lock */
    uint32_t len = 0;
    struct cumux_init_reply rep;
    CUresult r = shim_chan_hello(ch, program_gpu, buf, sizeof buf, &rep, &len);
    return r == CUDA_SUCCESS && rep.device_count != shim.server_device_count ? CUDA_ERROR_MPS_CONNECTION_FAILED : r;
}

CUresult shim_gpu_open(int gpu, int program_gpu)
{
    if (gpu < 0 || gpu >= CUMUX_MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&extra_lock);
    CUresult r = CUDA_SUCCESS;
    if (atomic_load(&shim_extra_chans[gpu])) {
        pthread_mutex_unlock(&extra_lock);
        return r;
    }
    struct shim_chan *ch = calloc(1, sizeof *ch);
    if (!ch) {
        pthread_mutex_unlock(&extra_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ch->gpu = gpu;
    ch->sock = -1;
    pthread_mutex_init(&ch->ring_lock, NULL);
    pthread_mutex_init(&ch->stage_lock, NULL);
    pthread_mutex_init(&ch->sock_lock, NULL);
    r = shim_connect_gpu(gpu, program_gpu, ch);
    if (r == CUDA_SUCCESS)
        r = extra_handshake(ch, program_gpu);
    if (r != CUDA_SUCCESS) {
        cumux_logf("this program uses GPU %d beside GPU %d: reaching GPU %d's worker failed (%d)", program_gpu,
                   shim_program_gpu(shim.main.gpu), program_gpu, (int)r);
        if (ch->shm)
            munmap(ch->shm, sizeof(struct cumux_shm));
        if (ch->sock >= 0)
            close(ch->sock);
        free(ch);
    } else {
        atomic_store_explicit(&shim_extra_chans[gpu], ch, memory_order_release);
        atomic_fetch_add(&shim_extra_count, 1);
        shim_hostfn_watch(ch);
        cumux_debugf("GPU %d beside GPU %d: client %u of GPU %d's worker", program_gpu, shim_program_gpu(shim.main.gpu),
                     ch->client_id, program_gpu);
    }
    pthread_mutex_unlock(&extra_lock);
    return r;
}

/* The worker a message goes to (shim/generated/routes.h): its handles', its GPU field's, its device
 * address's, else the current context's. One GPU: the main channel, nothing looked at. */
struct shim_chan *shim_chan_route(uint16_t op, const void *body, size_t len)
{
    if (!atomic_load_explicit(&shim_extra_count, memory_order_relaxed) || op >= CUMUX_OP_COUNT)
        return &shim.main;
    const struct shim_op_route *rt = &shim_op_routes[op];
    if (rt->main)
        return &shim.main;
    const uint8_t *b = body;
    for (int i = 0; i < SHIM_ROUTE_HANDLES && rt->handle[i] >= 0; i++) {
        uint32_t h;
        if ((size_t)rt->handle[i] + sizeof h > len)
            break;
        memcpy(&h, b + rt->handle[i], sizeof h);
        if (h)
            return shim_chan_of_gpu(CUMUX_HANDLE_GPU(h));
    }
    if (rt->gpu >= 0 && (size_t)rt->gpu + sizeof(int32_t) <= len) {
        int32_t g;
        memcpy(&g, b + rt->gpu, sizeof g);
        return shim_chan_of_gpu(g);
    }
    if (rt->devptr >= 0 && (size_t)rt->devptr + sizeof(uint64_t) <= len) {
        uint64_t p;
        memcpy(&p, b + rt->devptr, sizeof p);
        return shim_chan_of_ptr(p);
    }
    return shim_current_chan();
}


__attribute__((constructor)) static void register_gpus(void)
{
    static const struct shim_gpus_ops ops = {shim_chan_route, shim_gpu_open, shim_several_gpus, shim_gpus_forget};
    shim_set_gpus_ops(&ops);
}
