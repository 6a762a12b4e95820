/* What the CLI's commands share (cli/server_link.c: the server connection; cli/control.c: MPS's commands;
 * cli/status_records.c, cli/top.c). */
#ifndef CUMUX_CLI_H
#define CUMUX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* server_link.c */
/* cumux's own directory, where the server and the shim are looked for; 0 or -1. */
int cli_find_exe_dir(void);
/* The directory holding the shim libcuda.so.1 ($CUMUX_LIB_DIRECTORY, or beside cumux); 0 or -1. */
int cli_shim_dir(char *out, size_t len);
/* A connection to the server, checked to be ours before anything is sent: -1 with errno EPERM (said on
 * stderr) when another user's process holds the pipe directory; -1 with another errno when none runs. */
int cli_connect_server(void);
/* cumuxd started (foreground: this process becomes it); 0 or 1. */
/* every_gpu: started for a program, whose CUDA_VISIBLE_DEVICES is not the server's (`cumux start` keeps
 * it: the GPUs the server serves, as for nvidia-cuda-mps-control). */
int cli_start_server(bool foreground, bool every_gpu);
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
