/* Client channels (struct cumux_shm in a sealed memfd), some made ready before the clients that take them.
 * A channel is ready when the driver has pinned its staging buffers (pageable copies go through them) and
 * its GPU words (host functions, completion marks). Pinning is what makes a channel cost tens of
 * milliseconds, and the driver does it one at a time: when the programs of a failed worker all come back
 * at once to the one taking over (docs/faults.md), each waited for the others' before its first answer.
 * So each worker, the standby too, keeps CUMUX_SPARE_CHANNELS (default 4) ready, and makes new ones only
 * once no client has taken one for a while, out of the way of programs starting or coming back.
 * A spare is fresh: never handed to a client before (a channel a client had may still be mapped by it). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/map.h"
#include "common/log.h"
#include "server/server.h"

#define SPARES_MAX 64
#define REFILL_QUIET_NS 200000000ull /* no take for this long before a new spare is made */

static pthread_mutex_t spares_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spares_cond = PTHREAD_COND_INITIALIZER;
static struct srv_channel spares[SPARES_MAX];
static unsigned nspares, spares_want;
static uint64_t last_take_ns;

int srv_channel_make(struct srv_channel *ch)
{
    *ch = (struct srv_channel){.fd = memfd_create("cumux-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
    if (ch->fd < 0)
        return -1;
    /* The client must not be able to resize what the server maps (SIGBUS in the server). */
    if (ftruncate(ch->fd, sizeof(struct cumux_shm)) < 0 ||
        fcntl(ch->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        goto fail;
    ch->shm = cumux_mmap(NULL, sizeof(struct cumux_shm), PROT_READ | PROT_WRITE, MAP_SHARED, ch->fd, 0);
    if (ch->shm == MAP_FAILED) {
        ch->shm = NULL;
        goto fail;
    }
    cumux_shm_init(ch->shm);
    return 0;
fail:;
    int e = errno;
    close(ch->fd);
    ch->fd = -1;
    errno = e;
    return -1;
}

void srv_channel_pin(struct srv_channel *ch)
{
    if (srv_gpu_served < 0)
        return;
    if (!ch->staging_pinned)
        ch->staging_pinned =
            cuMemHostRegister(ch->shm->staging, sizeof ch->shm->staging, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
    if (!ch->words_dev) {
        void *words = (void *)ch->shm->hostfn_stream_done;
        CUdeviceptr d = 0;
        if (cuMemHostRegister(words, SRV_GPU_WORDS_BYTES, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
            CUDA_SUCCESS) {
            if (cuMemHostGetDevicePointer(&d, words, 0) == CUDA_SUCCESS)
                ch->words_dev = d;
            else
                cuMemHostUnregister(words);
        }
    }
}

bool srv_channel_take_spare(struct srv_channel *ch)
{
    pthread_mutex_lock(&spares_lock);
    bool got = nspares > 0;
    if (got)
        *ch = spares[--nspares];
    last_take_ns = cumux_now_ns();
    pthread_cond_signal(&spares_cond);
    pthread_mutex_unlock(&spares_lock);
    return got;
}

static void *spares_main(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(srv_gpus[srv_gpu_served].ctx);
    bool said = false;
    pthread_mutex_lock(&spares_lock);
    for (;;) {
        while (nspares >= spares_want)
            pthread_cond_wait(&spares_cond, &spares_lock);
        uint64_t quiet_at = last_take_ns + REFILL_QUIET_NS, now = cumux_now_ns();
        if (last_take_ns && now < quiet_at) {
            pthread_mutex_unlock(&spares_lock);
            uint64_t ns = quiet_at - now;
            nanosleep(&(struct timespec){(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)}, NULL);
            pthread_mutex_lock(&spares_lock);
            continue;
        }
        pthread_mutex_unlock(&spares_lock);
        uint64_t t0 = cumux_now_ns();
        struct srv_channel ch;
        bool ok = srv_channel_make(&ch) == 0;
        if (ok)
            srv_channel_pin(&ch);
        if (!said) {
            said = true;
            if (ok)
                cumux_logf("client channels: %u kept ready (CUMUX_SPARE_CHANNELS); one made and pinned in %.1f ms",
                           spares_want, (cumux_now_ns() - t0) / 1e6);
            else
                cumux_logf("client channels: cannot make one ahead (%s): each is made as its client comes",
                           strerror(errno));
        }
        pthread_mutex_lock(&spares_lock);
        if (!ok)
            break; /* out of memory or descriptors: clients make their own */
        spares[nspares++] = ch;
    }
    pthread_mutex_unlock(&spares_lock);
    return NULL;
}

void srv_channel_spares_start(void)
{
    const char *e = getenv("CUMUX_SPARE_CHANNELS");
    char *end = NULL;
    long want = e && *e ? strtol(e, &end, 10) : 4;
    if (e && *e && (*end || want < 0 || want > SPARES_MAX)) {
        cumux_logf("CUMUX_SPARE_CHANNELS=%s: not a number from 0 to %d; 4 kept ready", e, SPARES_MAX);
        want = 4;
    }
    if (want == 0 || srv_gpu_served < 0)
        return;
    spares_want = (unsigned)want;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, spares_main, NULL) != 0)
        cumux_logf("client channels: no thread to make them ahead: each is made as its client comes");
    pthread_attr_destroy(&attr);
}
