/* Shared by the supervisor's files (supervisor.c: the workers' lives; kept_chunks.c: the descriptors of
 * clients' memory it keeps for them): what the supervisor knows of each GPU's fault domain. */
#ifndef CUMUX_SERVER_SUPERVISOR_H
#define CUMUX_SERVER_SUPERVISOR_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "server/server.h"

enum sup_kind {
    SUP_SERVING = 1, /* a worker serves (rec.recovered_ms: for the last fault) */
    SUP_FAULT = 2,   /* a worker's GPU met a fatal error (rec); it exits next */
    SUP_STANDBY = 3, /* a standby worker's GPUs are up: it waits to be told to go */
};

/* What a standby is given when it goes: the history it shows in `cumux status`. */
struct sup_go {
    uint32_t nfaults, restarts;
    struct srv_fault_record faults[SRV_FAULTS_KEPT];
};

/* What the supervisor knows of each GPU's standby, on a page every worker shares (for `cumux status`). */
/* A client group's settings (groups.c), kept here so that every GPU's worker, and one replacing it, has
 * them. A rule is never removed: one whose settings are all lifted stays, with none. */
#define SRV_GROUPS_MAX 64
struct sup_group_rule {
    char path[CUMUX_GROUP_PATH]; /* the cgroup path; "" free. Written once, under groups_lock */
    _Atomic uint64_t mem_limit[CUMUX_MAX_DEVICES]; /* the group's device memory on each GPU at most; 0 none */
    _Atomic int32_t priority;  /* its programs' class; -1 none */
    _Atomic uint32_t percent;  /* their active thread percentage; 0 none */
    _Atomic uint32_t sms[CUMUX_MAX_DEVICES]; /* SMs for them alone on each GPU; 0 none. Set by that GPU's
                                              * worker once it holds them (placement.c) */
    _Atomic uint32_t gen;      /* moves on when the rule is forgotten (its slot may serve another) */
    char labels[CUMUX_GROUP_LABELS]; /* its labels for /metrics ("" none); under the rules' lock */
};

struct sup_groups {
    _Atomic int32_t lock;     /* a spin lock over the rules' paths (writers, and readers of paths) */
    _Atomic uint32_t n;       /* rules in use, from the first */
    _Atomic uint32_t version; /* moves on when a rule is added: clients find their group again */
    _Atomic uint32_t sms_version; /* moves on when a rule's SMs change: each worker's reservations follow */
    struct sup_group_rule rule[SRV_GROUPS_MAX];
};

struct sup_shared {
    _Atomic int32_t enabled;
    _Atomic int32_t standby_pid[CUMUX_MAX_DEVICES]; /* 0: none */
    _Atomic int32_t standby_ready[CUMUX_MAX_DEVICES];
    _Atomic uint64_t default_mem_limit[CUMUX_MAX_DEVICES]; /* srv_default_mem_limit, by GPU: set by whichever worker is told */
    _Atomic int32_t default_priority;   /* srv_default_priority: likewise */
    _Atomic uint32_t default_percent;   /* srv_default_thread_percent: likewise */
    _Atomic uint64_t kept_chunks[CUMUX_MAX_DEVICES], kept_bytes[CUMUX_MAX_DEVICES]; /* clients' memory chunks whose descriptors the supervisor holds */
    /* The faults of every GPU, as the supervisor heard them (srv_fault_history): any worker tells them all.
     * The supervisor writes a record, then moves nfaults on. */
    _Atomic uint32_t nfaults, restarts;
    _Atomic uint32_t gpu_faults[CUMUX_MAX_DEVICES], gpu_restarts[CUMUX_MAX_DEVICES];
    struct srv_fault_record faults[SRV_FAULTS_KEPT];
    /* Reloads of the settings file (config.c): the supervisor writes the outcome, then moves reloads on. */
    _Atomic uint32_t reloads;
    _Atomic int32_t reload_failed;
    char reload_text[480];
    struct sup_groups groups;
};
extern struct sup_shared *sup_page;

/* The supervisor's view of one GPU's fault domain: its socket, serving worker and standby, and the
 * descriptors of its clients' memory. */
struct sup_domain {
    int gpu;
    int lsock; /* its listening socket: every worker of the domain serves on it */
    volatile pid_t active, standby;
    int keep_active, keep_standby; /* the supervisor's ends of the workers' sockets */
    struct srv_kept_chunk *kept;   /* every chunk a worker handed over, not yet dropped */
    bool *kept_mirrored;           /* kept[i] was handed to the standby to map ahead */
    size_t nkept, capkept;
    uint64_t *unmirror; /* chunks the standby mapped ahead that went since: to tell it */
    size_t nunmirror, capunmirror;
    bool mirror_on; /* the standby is ready: chunks go to it as they come */
    int standby_go; /* the standby's pipe: the word to go */
    bool serving, ever_served, standby_ready, need_active;
    time_t window_start;
    unsigned in_window, init_failures, standby_failures;
    uint64_t active_since_ns; /* when the serving worker took over */
    unsigned quick_deaths;    /* serving workers in a row that ended within a second */
    /* After a takeover the next standby waits until the failed worker has exited (at most a second): a
     * new process's start of the GPU competes with the driver calls of the programs coming back, which
     * are then slow (on the H200 their comeback took 220-400 ms while the new standby started beside them). */
    pid_t failed_worker;
    uint64_t standby_not_before;
    uint64_t arena_hint, arena_hint_size; /* its workers' arena of clients' memory (chunks.c) */
};

/* A worker's ends: its socket of kept descriptors, and a standby's pipe from the supervisor (-1: none). */
extern int sup_keep_fd, sup_go_fd;
/* A report to the supervisor (from a worker). */
void sup_send(uint32_t kind, const struct srv_fault_record *rec, uint64_t arena_base, uint64_t arena_size);

/* kept_chunks.c, in the supervisor: what a worker of d said of its chunks; the standby's mapping ahead
 * (reset for a new standby or none; flush: true while some is left to tell); the chunks to the standby
 * that takes over (or let go, without one). */
void sup_keep_read(struct sup_domain *d, int sock);
void sup_mirror_reset(struct sup_domain *d, bool ready);
bool sup_mirror_flush(struct sup_domain *d);
void sup_keep_hand_over(struct sup_domain *d, bool to_standby);
/* In a waiting standby: one message from the supervisor's socket of kept descriptors, a chunk to map ahead
 * (or one gone) handled at once, any other held for srv_standby_take (holding: one is held); -1 when the
 * supervisor is gone. */
int sup_keep_take_one(const struct srv_mirror_ops *mirror);
bool sup_keep_holding(void);

#endif
