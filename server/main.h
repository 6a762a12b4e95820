/* The main thread's files (main.c, conn.c, status.c, control.c, failover.c, client_list.c): what they
 * share. Listed from the bottom up, each file using only those below it. Worker threads use none of it. */
#ifndef CUMUX_SERVER_MAIN_H
#define CUMUX_SERVER_MAIN_H

#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct srv_client;

/* client_list.c: every client from its welcome until its worker is done, under srv_clients_lock. */
extern struct srv_client *srv_clients;
extern pthread_mutex_t srv_clients_lock;
/* Clients still connected (live), and all of them, those still being cleaned up included. */
void srv_clients_count(uint32_t *live, uint32_t *all);
/* The client is to go: its worker wakes and cleans up. */
void srv_client_mark_dead(struct srv_client *c);
/* Clients whose worker is done leave the list and are freed. */
void srv_clients_reap_finished(void);
/* The lock, unless a thread stuck in the driver holds it for long (the worker giving up goes on without). */
bool srv_clients_lock_briefly(void);

/* failover.c: the worker's end at a fatal fault. */
extern _Atomic int srv_worker_failing; /* srv_worker_fails has begun: nobody is taken any more */
/* The listening sockets the failing worker gives up to the standby. */
void srv_failover_sockets(int lsock, int msock);
/* Every client told `code`, the record to the supervisor, and the worker's exit. */
_Noreturn void srv_worker_fails(CUresult code, int gpu, uint32_t culprit, const char *culprit_desc, const char *why);
/* fault.c's watch: a GPU coredump has begun; the context met a fatal error. */
void srv_on_dump_begun(void);
void srv_on_gpu_fault(CUresult r, int gpu);

/* status.c */
extern time_t srv_started_at;
char *srv_status_report(bool gpu_only); /* `cumux status`'s text (malloc'd), or NULL; gpu_only: this worker's GPU's part */
char *srv_status_records(void); /* the records programs read (CUMUX_STATUS_RECORDS), or NULL */

/* control.c: each changes the clients of process pid; the reply's text (cap bytes) says how; they return
 * how many. */
unsigned srv_kill_clients(pid_t pid, char *text, size_t cap);
unsigned srv_set_memory_limit(pid_t pid, uint64_t limit, char *text, size_t cap);
unsigned srv_set_priority(pid_t pid, int cls, char *text, size_t cap);
/* *refused: how many could not have the SMs asked for (they keep theirs). */
unsigned srv_set_sms(pid_t pid, uint64_t arg, char *text, size_t cap, unsigned *refused);
int srv_set_group(const char *path, const char *labels, uint32_t what, uint64_t value, char *text, size_t cap);
int srv_kills_pending(void); /* killed clients whose work has not drained yet: accept nobody meanwhile */

/* access.c: who may use the server besides its user and root (CUMUX_USERS). srv_access_parse: false (said
 * on stderr) when the list names no one it knows; srv_access_open: whether anyone else may. */
bool srv_access_parse(const char *spec);
bool srv_access_open(void);
bool srv_access_may_use(uid_t uid, gid_t gid, pid_t pid);

/* conn.c: the main thread's poll loop, until a stop is asked for; 0, or -1 on an error. */
int srv_serve(int lsock, int metrics_sock);
extern volatile sig_atomic_t srv_stop_requested;
extern int srv_wake_pipe[2];    /* written to wake the loop (a signal, a worker done) */
extern uint32_t srv_max_clients; /* live clients at once (--max-clients) */
extern int srv_test_sndbuf;             /* CUMUX_TEST_SNDBUF (tests only): SO_SNDBUF of accepted connections */
extern unsigned srv_test_welcome_delay_us; /* CUMUX_TEST_WELCOME_DELAY_MS (tests only): before each welcome */

#endif
