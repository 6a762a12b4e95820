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
/* cumux control: nvidia-cuda-mps-control's command lines. */
int cli_control(int argc, char **argv);

#endif
