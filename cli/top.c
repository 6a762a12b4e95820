/* cumux top: a live view in the manner of top and nvtop. Per client: pid, user, command, device memory and
 * its limit, kernels per second and its share of GPU time (the server's sampled estimate, server/usage.c);
 * per GPU: memory, NVML's utilization (what nvidia-smi shows: the share of time any kernel ran) beside GPM
 * SM activity and occupancy (how much of the GPU the kernels used), with small graphs of the last minutes.
 * NVML is loaded with dlopen; without it (or on a GPU without GPM, before Hopper) those figures are "-".
 *   cumux top [--once] [--json] [--interval SECONDS]
 * Clients first, then the same by client group (server/groups.c).
 * --once: one sample over the interval, printed, then exit (--json: as JSON, for scripts). */
#include <dlfcn.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- NVML, as much of its interface as top uses (nvml.h's layouts; the library is loaded at run time) */
typedef void *nvml_device;
typedef struct {
    void *handle;
} nvml_gpm_sample;
struct nvml_utilization {
    unsigned gpu, memory;
};
struct nvml_gpm_metric {
    unsigned id;
    int ret;
    double value;
    struct {
        char *short_name, *long_name, *unit;
    } info;
};
#define NVML_GPM_METRIC_SLOTS 98 /* NVML_GPM_METRIC_MAX of version 1 of the query */
struct nvml_gpm_query {
    unsigned version, n;
    nvml_gpm_sample s1, s2;
    struct nvml_gpm_metric m[NVML_GPM_METRIC_SLOTS];
};
#define GPM_SM_ACTIVITY 2  /* NVML_GPM_METRIC_SM_UTIL */
#define GPM_SM_OCCUPANCY 3 /* NVML_GPM_METRIC_SM_OCCUPANCY */

static struct {
    bool tried, ok;
    int (*init)(void);
    int (*by_bus_id)(const char *, nvml_device *);
    int (*utilization)(nvml_device, struct nvml_utilization *);
    int (*gpm_alloc)(nvml_gpm_sample *);
    int (*gpm_get)(nvml_device, nvml_gpm_sample);
    int (*gpm_metrics)(struct nvml_gpm_query *);
} nvml;

static bool nvml_load(void)
{
    if (nvml.tried)
        return nvml.ok;
    nvml.tried = true;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return false;
    nvml.init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    nvml.by_bus_id = (int (*)(const char *, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.utilization = (int (*)(nvml_device, struct nvml_utilization *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    nvml.gpm_alloc = (int (*)(nvml_gpm_sample *))dlsym(lib, "nvmlGpmSampleAlloc");
    nvml.gpm_get = (int (*)(nvml_device, nvml_gpm_sample))dlsym(lib, "nvmlGpmSampleGet");
    nvml.gpm_metrics = (int (*)(struct nvml_gpm_query *))dlsym(lib, "nvmlGpmMetricsGet");
    nvml.ok = nvml.init && nvml.by_bus_id && nvml.utilization && nvml.init() == 0;
    return nvml.ok;
}

/* ---- what is shown of a GPU, and its history */
#define HISTORY 120
struct gpu_view {
    bool have_dev, gpm;
    nvml_device dev;
    nvml_gpm_sample sample[2];
    int cur; /* sample[cur] is the older one */
    double util, sm_activity, occupancy; /* NAN: not known */
    double hist_util[HISTORY], hist_sm[HISTORY];
    int nhist;
};

static void gpu_view_open(struct gpu_view *v, const char *bus_id)
{
    v->util = v->sm_activity = v->occupancy = NAN;
    if (!nvml_load() || nvml.by_bus_id(bus_id, &v->dev) != 0)
        return;
    v->have_dev = true;
    v->gpm = nvml.gpm_alloc && nvml.gpm_get && nvml.gpm_metrics && nvml.gpm_alloc(&v->sample[0]) == 0 &&
             nvml.gpm_alloc(&v->sample[1]) == 0 && nvml.gpm_get(v->dev, v->sample[0]) == 0;
}

/* The figures since the last call (GPM needs two samples at least 100 ms apart). */
static void gpu_view_sample(struct gpu_view *v)
{
    if (!v->have_dev)
        return;
    struct nvml_utilization u;
    v->util = nvml.utilization(v->dev, &u) == 0 ? u.gpu : NAN;
    if (v->gpm && nvml.gpm_get(v->dev, v->sample[1 - v->cur]) == 0) {
        struct nvml_gpm_query q;
        memset(&q, 0, sizeof q);
        q.version = 1;
        q.n = 2;
        q.s1 = v->sample[v->cur];
        q.s2 = v->sample[1 - v->cur];
        q.m[0].id = GPM_SM_ACTIVITY;
        q.m[1].id = GPM_SM_OCCUPANCY;
        bool ok = nvml.gpm_metrics(&q) == 0;
        v->sm_activity = ok && q.m[0].ret == 0 ? q.m[0].value : NAN;
        v->occupancy = ok && q.m[1].ret == 0 ? q.m[1].value : NAN;
        v->cur = 1 - v->cur;
    }
    if (v->nhist == HISTORY) {
        memmove(v->hist_util, v->hist_util + 1, (HISTORY - 1) * sizeof(double));
        memmove(v->hist_sm, v->hist_sm + 1, (HISTORY - 1) * sizeof(double));
        v->nhist--;
    }
    v->hist_util[v->nhist] = v->util;
    v->hist_sm[v->nhist++] = v->sm_activity;
}

/* ---- a sample of everything: two status records an interval apart */
struct client_view {
    const struct cumux_record_client *c;
    double share, kernels_per_s; /* GPU time share (%), launches per second over the interval */
};

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A client by its GPU and id (each GPU's worker numbers its own clients). */
static const struct cumux_record_client *find_client(const struct cumux_records *r, int gpu, unsigned id)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->clients[i].id == id && r->clients[i].gpu == gpu)
            return &r->clients[i];
    return NULL;
}

static void user_name(unsigned uid, char *out, size_t cap)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(out, cap, "%s", res->pw_name);
    else
        snprintf(out, cap, "%u", uid);
}

static void fmt_pct(char *out, size_t cap, double v)
{
    if (isnan(v))
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.1f%%", v);
}

/* A small graph of the history, newest on the right, one character a sample. */
static void sparkline(const double *h, int n, int width)
{
    static const char *const bars[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587",
                                       "\u2588"};
    for (int i = n > width ? n - width : 0; i < n; i++)
        fputs(isnan(h[i]) ? "\u00b7" : bars[(int)lround(fmin(fmax(h[i], 0), 100) / 100.0 * 8)], stdout);
    putchar('\n');
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void json_number(double v)
{
    if (isnan(v))
        printf("null");
    else
        printf("%.2f", v);
}

static void print_json(const struct cumux_records *r, const struct gpu_view *gv, const struct client_view *cv,
                       size_t n, double interval)
{
    printf("{\"server_pid\":%d,\"interval_s\":%.3f,\"gpus\":[", r->server_pid, interval);
    for (int i = 0; i < r->ngpus; i++) {
        const struct cumux_record_gpu *g = &r->gpus[i];
        const struct gpu_view *v = &gv[g->index];
        printf("%s{\"index\":%d,\"worker_pid\":%d,\"name\":", i ? "," : "", g->index, g->worker_pid);
        json_string(g->name);
        printf(",\"pci_bus_id\":");
        json_string(g->bus_id);
        printf(",\"sms\":%d,\"memory_used_bytes\":%llu,\"memory_total_bytes\":%llu,\"faults\":%u,\"restarts\":%u,"
               "\"utilization_pct\":", g->sms, g->used, g->total, g->faults, g->restarts);
        json_number(v->util);
        printf(",\"sm_activity_pct\":");
        json_number(v->sm_activity);
        printf(",\"sm_occupancy_pct\":");
        json_number(v->occupancy);
        printf("}");
    }
    printf("],\"clients\":[");
    for (size_t i = 0; i < n; i++) {
        const struct cumux_record_client *c = cv[i].c;
        char user[64];
        user_name(c->uid, user, sizeof user);
        printf("%s{\"id\":%u,\"gpu\":%d,\"pid\":%d,\"uid\":%u,\"user\":", i ? "," : "", c->id, c->gpu, c->pid, c->uid);
        json_string(user);
        printf(",\"command\":");
        json_string(c->cmd);
        printf(",\"device_bytes\":%llu,\"limit_bytes\":", c->device);
        if (c->limit)
            printf("%llu", c->limit);
        else
            printf("null");
        printf(",\"priority\":\"%s\",\"sms\":%u,\"sms_reserved\":%s,\"streams\":%u,\"kernels\":%llu,"
               "\"kernels_per_s\":%.1f,\"gpu_time_s\":%.6f,\"gpu_share_pct\":%.2f,\"group\":", c->priority, c->sms,
               c->reserved ? "true" : "false", c->streams, c->kernels, cv[i].kernels_per_s, c->gpu_ns / 1e9,
               cv[i].share);
        json_string(c->group);
        printf("}");
    }
    printf("]}\n");
}

/* The clients by group (their cgroup, or their group's rule: server/groups.c) on each GPU: GPU time share,
 * kernels/s, memory against the group's limit. */
static void print_groups(const struct cumux_records *r, const struct client_view *cv, size_t n)
{
    struct group_view {
        const char *path;
        int gpu;
        unsigned programs;
        double share, kps;
        unsigned long long mem;
    } g[64];
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cumux_record_client *c = cv[i].c;
        size_t k = 0;
        while (k < ng && !(g[k].gpu == c->gpu && !strcmp(g[k].path, c->group)))
            k++;
        if (k == ng) {
            if (ng == sizeof g / sizeof *g)
                continue;
            g[ng++] = (struct group_view){.path = c->group, .gpu = c->gpu};
        }
        g[k].programs++;
        g[k].share += cv[i].share;
        g[k].kps += cv[i].kernels_per_s;
        g[k].mem += c->device;
    }
    if (!ng)
        return;
    printf("\n%3s %8s %7s %9s %10s %10s  %s\n", "GPU", "PROGRAMS", "GPU%", "KERNEL/S", "MEM_MiB", "LIMIT_MiB", "GROUP");
    for (size_t k = 0; k < ng; k++) {
        char limit[24] = "-";
        for (size_t j = 0; j < r->ngroups; j++)
            if (r->groups[j].gpu == g[k].gpu && !strcmp(r->groups[j].path, g[k].path) && r->groups[j].limit)
                snprintf(limit, sizeof limit, "%.1f", r->groups[j].limit / 1048576.0);
        printf("%3d %8u %6.1f%% %9.0f %10.1f %10s  %.80s\n", g[k].gpu, g[k].programs, g[k].share, g[k].kps,
               g[k].mem / 1048576.0, limit, g[k].path[0] ? g[k].path : "-");
    }
}

static void print_screen(const struct cumux_records *r, const struct gpu_view *gv, const struct client_view *cv,
                         size_t n, double interval, bool live)
{
    if (live)
        fputs("\033[H\033[2J", stdout); /* home, clear */
    printf("cumux top: cumuxd pid %d, %zu client(s), every %.1f s%s\n", r->server_pid, n, interval,
           live ? "   (q quits)" : "");
    for (int i = 0; i < r->ngpus; i++) {
        const struct cumux_record_gpu *g = &r->gpus[i];
        const struct gpu_view *v = &gv[g->index];
        char u[16], a[16], o[16];
        fmt_pct(u, sizeof u, v->util);
        fmt_pct(a, sizeof a, v->sm_activity);
        fmt_pct(o, sizeof o, v->occupancy);
        printf("GPU %d %s, %d SMs: memory %.1f of %.1f GiB; utilization (nvidia-smi) %s, SM activity %s, "
               "occupancy %s\n", g->index, g->name, g->sms, g->used / 1073741824.0, g->total / 1073741824.0, u, a, o);
        if (live && v->nhist > 1) {
            printf("  utilization  ");
            sparkline(v->hist_util, v->nhist, 60);
            printf("  SM activity  ");
            sparkline(v->hist_sm, v->nhist, 60);
        }
    }
    printf("\n%8s %-10s %3s %-6s %5s %7s %9s %10s %10s %7s  %s\n", "PID", "USER", "GPU", "PRIO", "SMS", "GPU%", "KERNEL/S",
           "MEM_MiB", "LIMIT_MiB", "STREAMS", "COMMAND");
    for (size_t i = 0; i < n; i++) {
        const struct cumux_record_client *c = cv[i].c;
        char user[64], limit[24] = "-", sms[16] = "-"; /* SMs: r, reserved for it alone */
        user_name(c->uid, user, sizeof user);
        if (c->limit)
            snprintf(limit, sizeof limit, "%.1f", c->limit / 1048576.0);
        if (c->sms)
            snprintf(sms, sizeof sms, "%u%s", c->sms, c->reserved ? "r" : "");
        printf("%8d %-10.10s %3d %-6s %5s %6.1f%% %9.0f %10.1f %10s %7u  %.60s\n", c->pid, user, c->gpu, c->priority, sms,
               cv[i].share, cv[i].kernels_per_s, c->device / 1048576.0, limit, c->streams, c->cmd);
    }
    print_groups(r, cv, n);
    fflush(stdout);
}

static int by_share(const void *a, const void *b)
{
    double x = ((const struct client_view *)a)->share, y = ((const struct client_view *)b)->share;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Waits `seconds`; true when the user typed q (live, on a terminal). */
static bool wait_or_quit(double seconds, bool live)
{
    double end = seconds_now() + seconds;
    for (;;) {
        double left = end - seconds_now();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        if (live && poll(&p, 1, (int)(left * 1000) + 1) > 0) {
            char ch;
            if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
                return true;
        } else if (!live) {
            struct timespec ts = {(time_t)left, (long)((left - (time_t)left) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
}

static struct termios saved_tty;
static bool tty_raw;
static void restore_tty(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
}
static void on_int(int sig)
{
    (void)sig;
    restore_tty();
    _exit(0);
}

int cli_top(int argc, char **argv)
{
    bool once = false, json = false;
    double interval = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--once"))
            once = true;
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--interval") && i + 1 < argc && (interval = atof(argv[++i])) >= 0.1 &&
                 interval <= 3600)
            ;
        else {
            fprintf(stderr, "usage: cumux top [--once] [--json] [--interval SECONDS (0.1 to 3600)]\n");
            return 2;
        }
    }
    if (json && !once) {
        fprintf(stderr, "cumux top: --json goes with --once\n");
        return 2;
    }
    bool live = !once;
    if (live && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tty) == 0) {
        struct termios raw = saved_tty;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) {
            tty_raw = true;
            atexit(restore_tty);
            signal(SIGINT, on_int);
            signal(SIGTERM, on_int);
        }
    }
    struct cumux_records prev, cur;
    if (cli_records_get(&prev) < 0)
        return 1;
    /* by the GPU's index: a GPU whose worker did not answer one sample leaves the others where they are */
    struct gpu_view gv[CUMUX_RECORD_MAX_GPUS];
    bool opened[CUMUX_RECORD_MAX_GPUS] = {false};
    memset(gv, 0, sizeof gv);
    for (int i = 0; i < prev.ngpus; i++) {
        int g = prev.gpus[i].index;
        if (g >= 0 && g < CUMUX_RECORD_MAX_GPUS && !opened[g])
            gpu_view_open(&gv[g], prev.gpus[i].bus_id), opened[g] = true;
    }
    double t_prev = seconds_now();
    int status = 0;
    for (;;) {
        if (wait_or_quit(interval, live && tty_raw))
            break;
        if (cli_records_get(&cur) < 0) {
            status = 1;
            break;
        }
        double t = seconds_now(), dt = t - t_prev;
        for (int i = 0; i < cur.ngpus; i++) {
            int g = cur.gpus[i].index;
            if (g < 0 || g >= CUMUX_RECORD_MAX_GPUS)
                continue;
            if (!opened[g])
                gpu_view_open(&gv[g], cur.gpus[i].bus_id), opened[g] = true;
            gpu_view_sample(&gv[g]);
        }
        struct client_view *cv = calloc(cur.n ? cur.n : 1, sizeof *cv);
        if (!cv) {
            status = 1;
            break;
        }
        for (size_t i = 0; i < cur.n; i++) {
            const struct cumux_record_client *c = &cur.clients[i], *p = find_client(&prev, c->gpu, c->id);
            unsigned long long g0 = p ? p->gpu_ns : 0, k0 = p ? p->kernels : 0;
            cv[i].c = c;
            cv[i].share = c->gpu_ns >= g0 ? (c->gpu_ns - g0) / 1e9 / dt * 100 : 0;
            cv[i].kernels_per_s = c->kernels >= k0 ? (c->kernels - k0) / dt : 0;
        }
        qsort(cv, cur.n, sizeof *cv, by_share);
        if (json)
            print_json(&cur, gv, cv, cur.n, dt);
        else
            print_screen(&cur, gv, cv, cur.n, dt, live);
        free(cv);
        cli_records_free(&prev);
        prev = cur;
        t_prev = t;
        if (once)
            break;
    }
    cli_records_free(&prev);
    restore_tty();
    return status;
}
