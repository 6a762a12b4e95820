/* Prometheus metrics (`/metrics`, opt-in: CUMUX_METRICS_PORT): per client, labelled by pid, user, the
 * name the program set (CUMUX_CLIENT_NAME) and its group (groups.c: a cgroup path; a Slurm job's id from it,
 * job), its device memory and limit, pinned memory, streams, kernel
 * launches and GPU time (estimated: usage.c), and the GPU that serves it; per GPU its memory, clients,
 * default limit, faults and restarts; per group with settings and GPU, what it holds and its limit; the
 * server's clients, faults and restarts. The listening socket is
 * the supervisor's, made before the workers: GPU 0's worker answers (one that replaces a faulted worker
 * goes on answering on the same port), with what every other GPU's worker tells it in its status records. There is no
 * authentication: it listens on 127.0.0.1 unless an address is given, and says which programs run. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ask.h"
#include "common/log.h"
#include "common/priority.h"
#include "common/records.h"
#include "common/text.h"
#include "server/main.h"
#include "server/server.h"

int srv_metrics_listen(const char *spec)
{
    char addr[64] = "127.0.0.1";
    const char *colon = strrchr(spec, ':'), *port_text = spec;
    if (colon) {
        size_t n = (size_t)(colon - spec);
        if (n == 0 || n >= sizeof addr)
            goto bad;
        memcpy(addr, spec, n);
        addr[n] = 0;
        port_text = colon + 1;
    }
    char *end;
    long port = strtol(port_text, &end, 10);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!*port_text || *end || port < 1 || port > 65535 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        goto bad;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, 64) < 0) {
        cumux_logf("metrics: cannot listen on %s:%ld: %s", addr, port, strerror(errno));
        if (s >= 0)
            close(s);
        return -1;
    }
    cumux_logf("metrics: http://%s:%ld/metrics", addr, port);
    return s;
bad:
    cumux_logf("metrics: CUMUX_METRICS_PORT=%s is not PORT nor IPV4ADDRESS:PORT", spec);
    errno = EINVAL;
    return -1;
}

/* A label value: backslash, quote and newline escaped as the exposition format wants. */
static void label_value(char *out, size_t cap, const char *in)
{
    size_t j = 0;
    for (; *in && j + 3 < cap; in++) {
        if (*in == '\\' || *in == '"')
            out[j++] = '\\', out[j++] = *in;
        else if (*in == '\n')
            out[j++] = '\\', out[j++] = 'n';
        else
            out[j++] = *in;
    }
    out[j] = 0;
}

/* The labels a group gives beyond its path: a Slurm job's id (`,job="42"`, from its cgroup's job_42 level:
 * Slurm's own job cgroup or the SPANK plugin's /cumux-slurm/job_42), and the labels its rule was given
 * (`cumux set --group --labels namespace=a,pod=b,container=c`: a pod's names, from the device plugin's
 * hook), checked by groups.c; "" when none. */
static void owner_labels(char *out, size_t cap, const char *path, const char *labels)
{
    size_t len = 0;
    out[0] = 0;
    for (const char *p = path; p && *p; p = strchr(p + 1, '/')) {
        const char *c = *p == '/' ? p + 1 : p;
        size_t n = strcspn(c, "/");
        if (n > 4 && n < 24 && !strncmp(c, "job_", 4) && strspn(c + 4, "0123456789") == n - 4) {
            len = (size_t)snprintf(out, cap, ",job=\"%.*s\"", (int)(n - 4), c + 4);
            break;
        }
    }
    for (const char *p = labels; p && *p && len < cap;) {
        size_t k = strcspn(p, "="), v = strcspn(p + k + 1, ",");
        if (!p[k])
            break;
        len += (size_t)snprintf(out + len, cap - len, ",%.*s=\"%.*s\"", (int)k, p, (int)v, p + k + 1);
        p += k + 1 + v + (p[k + 1 + v] == ',');
    }
    if (len >= cap)
        out[0] = 0; /* cut short: none rather than half a label */
}

static void family(struct cumux_text *t, const char *name, const char *type, const char *help)
{
    cumux_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Every GPU's records: this worker's (GPU 0's), then each other GPU's worker's, asked on its socket; one
 * that does not answer within half a second (being replaced after a fault) is left out of this scrape. */
static int gather(struct cumux_records *r)
{
    char *own = srv_status_records();
    int rc = own ? cumux_records_parse(own, r, false) : -1;
    free(own);
    if (rc < 0)
        return -1;
    for (int g = 0; g < srv_gpu_count && g < CUMUX_RECORD_MAX_GPUS; g++) {
        if (g == srv_gpu_served)
            continue;
        struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = CUMUX_HELLO_STATUS,
                                .flags = CUMUX_STATUS_RECORDS};
        char *text = NULL, err[256];
        if (cumux_ask(g, &h, 500, &text, err, sizeof err) == 0 && cumux_records_parse(text, r, true) < 0)
            rc = -1;
        free(text);
    }
    return rc;
}

/* The metrics text (Prometheus exposition format 0.0.4); NULL when out of memory. */
static char *metrics_text(const struct cumux_records *r)
{
    struct cumux_text t = cumux_text_new(8192);
    family(&t, "cumux_clients", "gauge", "Programs connected to cumuxd.");
    cumux_text_printf(&t, "cumux_clients %zu\n", r->n);
    family(&t, "cumux_fatal_gpu_faults_total", "counter", "Fatal GPU faults since cumuxd started.");
    cumux_text_printf(&t, "cumux_fatal_gpu_faults_total %u\n", r->faults);
    family(&t, "cumux_workers_restarted_total", "counter", "GPU workers that replaced a failed one.");
    cumux_text_printf(&t, "cumux_workers_restarted_total %u\n", r->restarts);
    family(&t, "cumux_default_memory_limit_bytes", "gauge", "Device memory limit of new clients on GPU 0 (0: none).");
    cumux_text_printf(&t, "cumux_default_memory_limit_bytes %llu\n", r->default_limit);
    static const struct {
        const char *name, *type, *help;
    } gfams[] = {
        {"cumux_gpu_memory_used_bytes", "gauge", "Device memory in use on the GPU, by everyone."},
        {"cumux_gpu_memory_total_bytes", "gauge", "Device memory of the GPU."},
        {"cumux_gpu_clients", "gauge", "Programs the GPU's worker serves."},
        {"cumux_gpu_default_memory_limit_bytes", "gauge", "Device memory limit of new clients on the GPU (0: none)."},
        {"cumux_gpu_fatal_faults_total", "counter", "Fatal faults on the GPU since cumuxd started."},
        {"cumux_gpu_workers_restarted_total", "counter", "The GPU's workers that replaced a failed one."},
    };
    for (size_t f = 0; f < sizeof gfams / sizeof *gfams; f++) {
        family(&t, gfams[f].name, gfams[f].type, gfams[f].help);
        for (int i = 0; i < r->ngpus; i++) {
            const struct cumux_record_gpu *g = &r->gpus[i];
            char name[300];
            label_value(name, sizeof name, g->name);
            unsigned long long v = 0;
            switch (f) {
            case 0: v = g->used; break;
            case 1: v = g->total; break;
            case 2:
                for (size_t k = 0; k < r->n; k++)
                    v += r->clients[k].gpu == g->index;
                break;
            case 3: v = g->default_limit; break;
            case 4: v = g->faults; break;
            default: v = g->restarts; break;
            }
            cumux_text_printf(&t, "%s{gpu=\"%d\",name=\"%s\"} %llu\n", gfams[f].name, g->index, name, v);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } fams[] = {
        {"cumux_client_device_memory_bytes", "gauge", "Device memory the client holds."},
        {"cumux_client_device_memory_limit_bytes", "gauge", "The client's device memory limit (0: none)."},
        {"cumux_client_pinned_memory_bytes", "gauge", "Pinned host memory the client holds."},
        {"cumux_client_streams", "gauge", "The client's streams."},
        {"cumux_client_kernel_launches_total", "counter", "Kernels the client launched."},
        {"cumux_client_gpu_seconds_total", "counter",
         "GPU time of the client's kernels, estimated from sampled launches (rate() gives its share)."},
        {"cumux_client_priority_class", "gauge", "The client's priority class: 1 low, 2 normal, 3 high."},
    };
    /* Each client's labels, made once for all its families (a user's name, its group's labels). */
    char(*labels)[1600] = r->n ? malloc(r->n * sizeof *labels) : NULL;
    if (r->n && !labels) {
        free(t.p);
        return NULL; /* answered as out of memory */
    }
    for (size_t i = 0; labels && i < r->n; i++) {
        const struct cumux_record_client *c = &r->clients[i];
        char user[64], uname[160], cname[160], gname[400], pwbuf[1024], owner[320];
        struct passwd pw, *res = NULL;
        if (getpwuid_r(c->uid, &pw, pwbuf, sizeof pwbuf, &res) == 0 && res)
            snprintf(user, sizeof user, "%s", res->pw_name);
        else
            snprintf(user, sizeof user, "%u", (unsigned)c->uid);
        label_value(uname, sizeof uname, user);
        label_value(cname, sizeof cname, c->name);
        label_value(gname, sizeof gname, c->group);
        const char *glabels = "";
        for (size_t k = 0; k < r->ngroups; k++)
            if (r->groups[k].gpu == c->gpu && !strcmp(r->groups[k].path, c->group))
                glabels = r->groups[k].labels;
        owner_labels(owner, sizeof owner, c->group, glabels);
        snprintf(labels[i], sizeof labels[i], "pid=\"%d\",user=\"%s\",name=\"%s\",gpu=\"%d\",client=\"%u\",group=\"%s\"%s",
                 c->pid, uname, cname, c->gpu, c->id, gname, owner);
    }
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        family(&t, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < r->n; i++) {
            const struct cumux_record_client *c = &r->clients[i];
            cumux_text_printf(&t, "%s{%s} ", fams[f].name, labels[i]);
            enum cumux_priority prio = CUMUX_PRIORITY_NORMAL;
            cumux_priority_parse(c->priority, &prio);
            switch (f) {
            case 0: cumux_text_printf(&t, "%llu\n", c->device); break;
            case 1: cumux_text_printf(&t, "%llu\n", c->limit); break;
            case 2: cumux_text_printf(&t, "%llu\n", c->pinned); break;
            case 3: cumux_text_printf(&t, "%u\n", c->streams); break;
            case 4: cumux_text_printf(&t, "%llu\n", c->kernels); break;
            case 5: cumux_text_printf(&t, "%.6f\n", c->gpu_ns / 1e9); break;
            default: cumux_text_printf(&t, "%d\n", (int)prio); break;
            }
        }
    }
    free(labels);
    /* Groups with settings (cumux set --group), per GPU: what their programs hold against their limit. */
    static const struct {
        const char *name, *help;
    } gfam[] = {
        {"cumux_group_device_memory_bytes", "Device memory the group's programs hold on the GPU."},
        {"cumux_group_device_memory_limit_bytes", "The group's device memory limit on each GPU (0: none)."},
        {"cumux_group_programs", "The group's programs on the GPU."},
        {"cumux_group_sms_reserved", "SMs of the GPU reserved for the group's programs (0: none)."},
    };
    for (size_t f = 0; r->ngroups && f < sizeof gfam / sizeof *gfam; f++) {
        family(&t, gfam[f].name, "gauge", gfam[f].help);
        for (size_t i = 0; i < r->ngroups; i++) {
            const struct cumux_record_group *g = &r->groups[i];
            char gname[400], owner[320];
            label_value(gname, sizeof gname, g->path);
            owner_labels(owner, sizeof owner, g->path, g->labels);
            cumux_text_printf(&t, "%s{group=\"%s\",gpu=\"%d\"%s} %llu\n", gfam[f].name, gname, g->gpu, owner,
                              f == 0 ? g->used : f == 1 ? g->limit : f == 2 ? (unsigned long long)g->programs
                                                                          : (unsigned long long)g->sms);
        }
    }
    return t.p;
}

char *srv_metrics_response(const char *request, size_t len, size_t *out_len)
{
    /* "GET /metrics" (a query string allowed) answers; anything else is not found. */
    bool get = len >= 13 && !strncmp(request, "GET /metrics", 12) &&
               (request[12] == ' ' || request[12] == '?');
    struct cumux_records recs;
    memset(&recs, 0, sizeof recs);
    char *body = get && gather(&recs) == 0 ? metrics_text(&recs) : NULL;
    cumux_records_free(&recs);
    const char *status = get ? (body ? "200 OK" : "500 Internal Server Error") : "404 Not Found";
    const char *text = body ? body : get ? "out of memory\n" : "cumuxd serves /metrics\n";
    size_t tl = strlen(text);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, tl);
    char *r = malloc((size_t)hl + tl);
    if (r) {
        memcpy(r, head, (size_t)hl);
        memcpy(r + hl, text, tl);
        *out_len = (size_t)hl + tl;
    }
    free(body);
    return r;
}
