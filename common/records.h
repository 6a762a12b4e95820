/* The server's status as records (CUMUX_STATUS_RECORDS in common/proto.h), parsed: the CLI (cumux control,
 * cumux top) and GPU 0's worker (/metrics) read every GPU worker's and merge them. */
#ifndef CUMUX_COMMON_RECORDS_H
#define CUMUX_COMMON_RECORDS_H

#include <stdbool.h>
#include <stddef.h>

struct cumux_record_client {
    unsigned id, uid, streams; /* id: its worker's number for it (each GPU's worker numbers its own) */
    int gpu, pid;              /* gpu: the server's number of the GPU whose worker serves it */
    unsigned long long device, limit, pinned, kernels, gpu_ns; /* bytes; launches; GPU time (estimated) */
    char priority[16]; /* high, normal, low */
    unsigned sms;      /* SMs its kernels may use (0: not known yet) */
    int reserved;      /* they are its alone */
    unsigned percent;  /* its active thread percentage (100: no cap) */
    char group[256];   /* its group: the cgroup path of its group's rule, or its own cgroup */
    char name[64];     /* CUMUX_CLIENT_NAME, "" when it gave none */
    char cmd[128];
};
struct cumux_record_gpu {
    int index, sms, worker_pid;
    unsigned long long used, total, default_limit; /* bytes; default_limit: of new clients (0: none) */
    unsigned faults, restarts; /* fatal faults on it, and workers that replaced a failed one */
    char bus_id[32], name[128];
};
#define CUMUX_RECORD_MAX_GPUS 16
/* A client group with settings, on one GPU (server/groups.c). */
struct cumux_record_group {
    int gpu;
    char path[256];
    char labels[128]; /* its labels (cumux set --group --labels): "k=v,k=v", "" none */
    unsigned long long limit, used, peak; /* bytes on that GPU; limit 0: none; peak: the most held */
    unsigned long long gpu_ns; /* its programs' GPU time on that GPU, those gone too */
    unsigned programs, percent;
    unsigned sms; /* reserved for it on that GPU (0: none) */
    char priority[16]; /* "-": none */
};
#define CUMUX_RECORD_MAX_GROUPS 128
struct cumux_records {
    int server_pid, worker_pid, gpu_count; /* gpu_count: the GPUs the server serves, a worker each */
    unsigned long long default_limit;      /* GPU 0's */
    char default_priority[16];
    unsigned default_percent; /* active thread percentage for new clients (100: no cap) */
    unsigned faults, restarts; /* on every GPU */
    struct cumux_record_gpu gpus[CUMUX_RECORD_MAX_GPUS];
    int ngpus;
    struct cumux_record_client *clients;
    size_t n;
    struct cumux_record_group groups[CUMUX_RECORD_MAX_GROUPS]; /* of every GPU's worker */
    size_t ngroups;
};
/* Adds one worker's records (text) to r: its GPU and its clients; the server line is taken from the
 * first worker's (merge false: r is reset first). 0, or -1 when memory ran out. */
int cumux_records_parse(const char *text, struct cumux_records *r, bool merge);
void cumux_records_free(struct cumux_records *r);
/* The GPU record of the server's GPU index, or NULL. */
const struct cumux_record_gpu *cumux_records_gpu(const struct cumux_records *r, int index);

#endif
