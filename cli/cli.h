/* What the CLI's commands share (cli/cumux.c: the server connection; cli/control.c: MPS's commands). */
#ifndef CUMUX_CLI_H
#define CUMUX_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Sends a hello of this kind (flags, arg: common/proto.h) and writes the text that comes back to out
 * (NULL: dropped). The server's status (0 or a CUresult), or -1 with errno when it could not be asked
 * (EPERM: said on stderr). */
int cli_request(uint32_t kind, uint32_t flags, uint64_t arg, FILE *out);
/* cumux stop. */
int cli_stop(void);
/* A server for the pipe directory, started if none runs. 0 when one answers. */
int cli_ensure_server(void);
/* The server's status for programs (status_records.c). */
struct cli_client {
    unsigned id, uid, streams;
    int pid;
    unsigned long long device, limit, pinned, kernels, gpu_ns; /* bytes; launches; GPU time (estimated) */
    char priority[16]; /* high, normal, low */
    unsigned sms;      /* SMs its kernels may use (0: not known yet) */
    int reserved;      /* they are its alone */
    unsigned percent;  /* its active thread percentage (100: no cap) */
    char cmd[128];
};
struct cli_gpu {
    int index, sms;
    unsigned long long used, total;
    char bus_id[32], name[128];
};
#define CLI_MAX_GPUS 16
struct cli_records {
    int server_pid, worker_pid;
    unsigned long long default_limit;
    char default_priority[16];
    unsigned default_percent; /* active thread percentage for new clients (100: no cap) */
    struct cli_gpu gpus[CLI_MAX_GPUS];
    int ngpus;
    struct cli_client *clients;
    size_t n;
};
/* 0, or -1 (said on stderr) when no server answers. */
int cli_records_get(struct cli_records *r);
void cli_records_free(struct cli_records *r);
/* cumux control: nvidia-cuda-mps-control's command lines. */
int cli_control(int argc, char **argv);
/* cumux top: a live view of the GPUs and the clients (top.c). */
int cli_top(int argc, char **argv);

#endif
