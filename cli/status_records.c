/* The server's status as records (CUMUX_STATUS_RECORDS in common/proto.h), for cumux control and
 * cumux top. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/proto.h"
#include "common/sock.h"

void cli_records_free(struct cli_records *r)
{
    free(r->clients);
    memset(r, 0, sizeof *r);
}

int cli_records_get(struct cli_records *r)
{
    memset(r, 0, sizeof *r);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return -1;
    int st = cli_request(CUMUX_HELLO_STATUS, CUMUX_STATUS_RECORDS, 0, f);
    fclose(f);
    if (st != 0) {
        if (!(st < 0 && errno == EPERM))
            fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
        free(text);
        return -1;
    }
    size_t cap = 0;
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "server ", 7)) {
            sscanf(line + 7, "%d %d %llu %15s %u", &r->server_pid, &r->worker_pid, &r->default_limit,
                   r->default_priority, &r->default_percent);
            continue;
        }
        if (!strncmp(line, "gpu ", 4) && r->ngpus < CLI_MAX_GPUS) {
            struct cli_gpu *g = &r->gpus[r->ngpus];
            int used = 0;
            if (sscanf(line + 4, "%d %31s %d %llu %llu %n", &g->index, g->bus_id, &g->sms, &g->used, &g->total,
                       &used) >= 5) {
                snprintf(g->name, sizeof g->name, "%s", line + 4 + used);
                r->ngpus++;
            }
            continue;
        }
        if (strncmp(line, "client ", 7) != 0)
            continue;
        if (r->n == cap) {
            cap = cap ? cap * 2 : 16;
            struct cli_client *g = realloc(r->clients, cap * sizeof *g);
            if (!g)
                break;
            r->clients = g;
        }
        struct cli_client *c = &r->clients[r->n];
        int used = 0;
        if (sscanf(line + 7, "%u %d %u %llu %llu %llu %u %llu %llu %15s %u %d %u %n", &c->id, &c->pid, &c->uid,
                   &c->device, &c->limit, &c->pinned, &c->streams, &c->kernels, &c->gpu_ns, c->priority, &c->sms,
                   &c->reserved, &c->percent, &used) >= 13) {
            snprintf(c->cmd, sizeof c->cmd, "%s", line + 7 + used);
            r->n++;
        }
    }
    free(text);
    return 0;
}

