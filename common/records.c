/* Parsing the status records (common/records.h); common/proto.h has their lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/records.h"

void cumux_records_free(struct cumux_records *r)
{
    free(r->clients);
    memset(r, 0, sizeof *r);
}

const struct cumux_record_gpu *cumux_records_gpu(const struct cumux_records *r, int index)
{
    for (int i = 0; i < r->ngpus; i++)
        if (r->gpus[i].index == index)
            return &r->gpus[i];
    return NULL;
}

int cumux_records_parse(const char *text, struct cumux_records *r, bool merge)
{
    if (!merge)
        memset(r, 0, sizeof *r);
    char *copy = strdup(text ? text : "");
    if (!copy)
        return -1;
    size_t cap = r->n;
    int rc = 0;
    for (char *save, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "server ", 7)) {
            if (!merge)
                sscanf(line + 7, "%d %d %llu %15s %u %d %u %u", &r->server_pid, &r->worker_pid, &r->default_limit,
                       r->default_priority, &r->default_percent, &r->gpu_count, &r->faults, &r->restarts);
            continue;
        }
        if (!strncmp(line, "gpu ", 4)) {
            if (r->ngpus >= CUMUX_RECORD_MAX_GPUS)
                continue;
            struct cumux_record_gpu *g = &r->gpus[r->ngpus];
            int used = 0;
            if (sscanf(line + 4, "%d %d %31s %d %llu %llu %llu %u %u %n", &g->index, &g->worker_pid, g->bus_id,
                       &g->sms, &g->used, &g->total, &g->default_limit, &g->faults, &g->restarts, &used) >= 9 &&
                g->index >= 0 && g->index < CUMUX_RECORD_MAX_GPUS) {
                snprintf(g->name, sizeof g->name, "%s", line + 4 + used);
                r->ngpus++;
            }
            continue;
        }
        if (!strncmp(line, "group ", 6)) {
            if (r->ngroups >= CUMUX_RECORD_MAX_GROUPS)
                continue;
            struct cumux_record_group *g = &r->groups[r->ngroups];
            memset(g, 0, sizeof *g);
            if (sscanf(line + 6, "%d %255s %llu %llu %u %15s %u %llu %llu %u %127s", &g->gpu, g->path, &g->limit, &g->used,
                       &g->programs, g->priority, &g->percent, &g->gpu_ns, &g->peak, &g->sms, g->labels) >= 7) {
                if (!strcmp(g->labels, "-"))
                    g->labels[0] = 0;
                r->ngroups++;
            }
            continue;
        }
        if (strncmp(line, "client ", 7) != 0)
            continue;
        if (r->n == cap) {
            /* the first merge finds cap == n: grown from there (realloc keeps what was parsed) */
            size_t ncap = cap < 16 ? 16 : cap * 2;
            struct cumux_record_client *g = realloc(r->clients, ncap * sizeof *g);
            if (!g) {
                rc = -1;
                break;
            }
            r->clients = g;
            cap = ncap;
        }
        struct cumux_record_client *c = &r->clients[r->n];
        memset(c, 0, sizeof *c);
        char name[sizeof c->name + 1];
        int used = 0;
        if (sscanf(line + 7, "%u %d %d %u %llu %llu %llu %u %llu %llu %15s %u %d %u %255s %64s %n", &c->id, &c->gpu,
                   &c->pid, &c->uid, &c->device, &c->limit, &c->pinned, &c->streams, &c->kernels, &c->gpu_ns,
                   c->priority, &c->sms, &c->reserved, &c->percent, c->group, name, &used) >= 16) {
            /* the name comes after '=' (nothing after it: none), so that an empty one is still a field */
            const char *nm = name[0] == '=' ? name + 1 : name;
            size_t nl = strnlen(nm, sizeof c->name - 1);
            memcpy(c->name, nm, nl);
            c->name[nl] = 0;
            snprintf(c->cmd, sizeof c->cmd, "%s", line + 7 + used);
            r->n++;
        }
    }
    free(copy);
    return rc;
}
