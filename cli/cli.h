/* What the CLI's commands share (cli/server_link.c: the server connection; cli/control.c: MPS's commands;
 * cli/status_records.c, cli/top.c). */
#ifndef CUMUX_CLI_H
#define CUMUX_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

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
/* Sends a hello of this kind (flags, arg: common/proto.h) to GPU 0's worker (cli_request) or GPU gpu's, and
 * writes the text that comes back to out (NULL: dropped). The worker's status (0 or a CUresult), or -1
 * with errno when it could not be asked (EPERM: said on stderr). */
int cli_request(uint32_t kind, uint32_t flags, uint64_t arg, FILE *out);
/* cdi.c: `cumux cdi`. */
int cli_cdi(int argc, char **argv);
/* remote.c: cumux gateway, cumux keygen, and a request across the network (CUMUX_SERVER, CUMUX_KEY_FILE;
 * as cumux_ask_extra). */
struct cumux_hello;
int cli_gateway(int argc, char **argv);
int cli_keygen(int argc, char **argv);
int cli_remote_ask(const char *server, int gpu, const struct cumux_hello *h, const void *extra, size_t extra_len,
                   char **text, char *err, size_t errlen);
/* A TLS link to the gateway at server (host:port), reads and writes timing out after timeout_s: the link,
 * or NULL (errno, err). */
struct cumux_tls;
struct cumux_tls *cli_remote_connect(const char *server, const char *key, int timeout_s, char *err, size_t errlen);
/* A program's link lasts as long as it does: no timeouts on its reads and writes; a peer gone silent is
 * found by TCP's keepalive (about 30 s); small messages go at once. */
void cli_link_long_lived(struct cumux_tls *t);
/* gateway_program.c: a program's channel through the gateway (the connection's HELLO asked for one). */
int cli_gateway_program(struct cumux_tls *t, uint32_t gpu, const struct cumux_hello *hello);
/* relay.c: `cumux relay`, and the relay `cumux run` starts where CUMUX_SERVER names a remote server (its
 * pipe directory into dir; the relay ends when process `program` does). 0, or -1 (said on stderr). */
int cli_relay(int argc, char **argv);
int cli_relay_start(const char *server, const char *key, pid_t program, char *dir, size_t dirlen);
/* cumux hook (hook.c): the OCI hook of the Kubernetes plugin's CDI devices. */
int cli_hook(int argc, char **argv);
/* The group a SET_GROUP request names (sent after its hello). */
extern const struct cumux_group_name *cli_group;
int cli_request_gpu(int gpu, uint32_t kind, uint32_t flags, uint64_t arg, FILE *out);
/* The same to every GPU's worker, for what names a process (its clients are on whichever GPUs it uses):
 * 0 when any did it (their texts written), else the first refusal (its text written). */
int cli_request_each(uint32_t kind, uint32_t flags, uint64_t arg, FILE *out);
/* How many GPUs the server serves (a worker each), or -1 with errno when none answers. */
int cli_gpu_count(void);
/* cumux stop. */
int cli_stop(void);
/* A server for the pipe directory, started if none runs. 0 when one answers. */
int cli_ensure_server(void);
/* The server's status for programs (status_records.c): every GPU worker's records together. */
#include "common/records.h"
/* 0, or -1 (said on stderr) when no server answers. */
int cli_records_get(struct cumux_records *r);
void cli_records_free(struct cumux_records *r);
/* cumux control: nvidia-cuda-mps-control's command lines. */
int cli_control(int argc, char **argv);
/* cumux top: a live view of the GPUs and the clients (top.c). */
int cli_top(int argc, char **argv);

#endif
