/* The main thread's list of clients: every client from its welcome until its worker has freed all it
 * held. The connection loop adds and reaps them; status, control commands and the fault reaction walk it,
 * each under srv_clients_lock. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "common/text.h"
#include "common/sock.h"
#include "server/main.h"
#include "server/objects.h"
#include "server/server.h"

struct srv_client *srv_clients;
pthread_mutex_t srv_clients_lock = PTHREAD_MUTEX_INITIALIZER;

/* Clients still connected (live), and all of them, those whose worker is still freeing what a client
 * that went held included (they keep their thread and descriptors until then). */
void srv_clients_count(uint32_t *live, uint32_t *all)
{
    *live = *all = 0;
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client *c = srv_clients; c; c = c->next) {
        ++*all;
        *live += !atomic_load(&c->dead);
    }
    pthread_mutex_unlock(&srv_clients_lock);
}

void srv_client_mark_dead(struct srv_client *c)
{
    atomic_store(&c->dead, 1);
    atomic_fetch_add(&c->shm->doorbell, 1);
    cumux_futex_wake(&c->shm->doorbell, 1);
}

void srv_clients_reap_finished(void)
{
    pthread_mutex_lock(&srv_clients_lock);
    for (struct srv_client **p = &srv_clients; *p;) {
        struct srv_client *c = *p;
        if (atomic_load(&c->finished)) {
            *p = c->next;
            srv_client_free(c);
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&srv_clients_lock);
}

/* A thread stuck in the driver may hold the client list's lock when the worker must give up: wait for it
 * a little, then go on without. */
bool srv_clients_lock_briefly(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000;
    if (until.tv_nsec >= 1000000000)
        until.tv_sec++, until.tv_nsec -= 1000000000;
    return pthread_mutex_timedlock(&srv_clients_lock, &until) == 0;
}
