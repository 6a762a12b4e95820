/* cumux control: the command lines of NVIDIA's nvidia-cuda-mps-control, read from stdin one a line (or
 * given as arguments, as one line), so that scripts written for MPS move over unchanged. cumux has one
 * server for every GPU; it answers to its supervisor's pid, and to each GPU worker's. What cumux does not do yet is said
 * on stderr and makes the exit status 1; nothing is silently ignored. docs/compatibility.md has the table. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/priority.h"
#include "common/proto.h"
#include "common/size.h"

static bool is_server(const struct cumux_records *r, const char *pid)
{
    char *end;
    long p = strtol(pid, &end, 10);
    bool ok = !*end && *pid && (p == r->server_pid || p == r->worker_pid);
    for (int i = 0; !ok && !*end && *pid && i < r->ngpus; i++)
        ok = p == r->gpus[i].worker_pid;
    if (!ok)
        fprintf(stderr, "cumux control: no server with pid %s (cumuxd's is %d)\n", pid, r->server_pid);
    return ok;
}

static void print_limit(unsigned long long b)
{
    if (!b)
        printf("none\n");
    else if (b % (1ull << 30) == 0)
        printf("%lluG\n", b >> 30);
    else if (b % (1ull << 20) == 0)
        printf("%lluM\n", b >> 20);
    else
        printf("%llu\n", b);
}

/* A device as MPS's commands name it: the server's number of one of its GPUs; -1 (said) when it is none. */
static int device_of(const char *dev)
{
    char *end;
    long d = strtol(dev, &end, 10);
    int n = cli_gpu_count();
    if (n < 0)
        return -1;
    if (*end || !*dev || d < 0 || d >= n) {
        fprintf(stderr, "cumux control: device %s: cumuxd serves GPUs 0 to %d\n", dev, n - 1);
        return -1;
    }
    return (int)d;
}

/* The limit of new clients on GPU gpu (every GPU: -1). */
static int set_default_limit(int gpu, const char *value)
{
    uint64_t b;
    if (!cumux_parse_size(value, &b)) {
        fprintf(stderr, "cumux control: %s is not a size (4G, 512M)\n", value);
        return 1;
    }
    return cli_request(CUMUX_HELLO_SET_DEFAULT_MEMORY, (uint32_t)(gpu + 1), b, NULL) == 0 ? 0 : 1;
}

/* One command line; 0 when done, 1 when refused or failed (said on stderr). */
/* A percentage as MPS takes it (a decimal above 0, at most 100), rounded up to a whole one; 0 (said)
 * when it is none. */
static unsigned parse_percent(const char *s)
{
    char *end;
    double p = strtod(s, &end);
    if (*end || !(p > 0 && p <= 100)) {
        fprintf(stderr, "cumux control: %s is not a percentage (above 0, at most 100)\n", s);
        return 0;
    }
    unsigned whole = (unsigned)p;
    return whole + (p > whole);
}

static int run_line(char **w, int n)
{
    const char *cmd = w[0];
    struct cumux_records r;
#define NEED(k)                                                                                        \
    do {                                                                                               \
        if (n != (k) + 1) {                                                                            \
            fprintf(stderr, "cumux control: %s takes %d argument(s)\n", cmd, (k));                     \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)
    if (!strcmp(cmd, "get_server_list")) {
        NEED(0);
        if (cli_records_get(&r) < 0)
            return 1;
        printf("%d\n", r.server_pid);
        cli_records_free(&r);
        return 0;
    }
    if (!strcmp(cmd, "get_client_list") || !strcmp(cmd, "ps")) {
        bool ps = cmd[0] == 'p';
        if (!ps)
            NEED(1);
        if (cli_records_get(&r) < 0)
            return 1;
        if (!ps && !is_server(&r, w[1])) {
            cli_records_free(&r);
            return 1;
        }
        if (ps)
            printf("%-8s %-4s %-8s %-6s %s\n", "PID", "ID", "SERVER", "DEVICE", "COMMAND");
        for (size_t i = 0; i < r.n; i++) {
            if (ps)
                printf("%-8d %-4u %-8d %-6d %s\n", r.clients[i].pid, r.clients[i].id, r.server_pid, r.clients[i].gpu,
                       r.clients[i].cmd);
            else
                printf("%d\n", r.clients[i].pid);
        }
        cli_records_free(&r);
        return 0;
    }
    if (!strcmp(cmd, "terminate_client")) {
        NEED(2);
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = is_server(&r, w[1]);
        cli_records_free(&r);
        char *end;
        long pid = strtol(w[2], &end, 10);
        if (!ok || *end || pid <= 0 || pid > INT32_MAX) {
            if (ok)
                fprintf(stderr, "cumux control: terminate_client: %s is not a pid\n", w[2]);
            return 1;
        }
        return cli_request_each(CUMUX_HELLO_KILL, (uint32_t)pid, 0, stdout) == 0 ? 0 : 1;
    }
    /* One server: its limit for new clients on a GPU is that GPU's default. */
    if (!strcmp(cmd, "set_default_device_pinned_mem_limit")) {
        NEED(2);
        int dev = device_of(w[1]);
        return dev >= 0 ? set_default_limit(dev, w[2]) : 1;
    }
    if (!strcmp(cmd, "set_device_pinned_mem_limit")) {
        NEED(3);
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = is_server(&r, w[1]);
        cli_records_free(&r);
        int dev = ok ? device_of(w[2]) : -1;
        return dev >= 0 ? set_default_limit(dev, w[3]) : 1;
    }
    if (!strcmp(cmd, "get_default_device_pinned_mem_limit") || !strcmp(cmd, "get_device_pinned_mem_limit")) {
        bool per_server = strncmp(cmd, "get_default", 11) != 0;
        NEED(per_server ? 2 : 1);
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = !per_server || is_server(&r, w[1]);
        int dev = ok ? device_of(w[per_server ? 2 : 1]) : -1;
        const struct cumux_record_gpu *g = dev >= 0 ? cumux_records_gpu(&r, dev) : NULL;
        if (dev >= 0 && !g)
            fprintf(stderr, "cumux control: GPU %d's worker does not answer\n", dev);
        ok = g != NULL;
        if (ok)
            print_limit(g->default_limit);
        cli_records_free(&r);
        return ok ? 0 : 1;
    }
    /* MPS's levels: 0 normal, 1 below normal; cumux's names (high, normal, low) too. */
    if (!strcmp(cmd, "set_default_client_priority")) {
        NEED(1);
        enum cumux_priority p;
        if (!cumux_priority_parse(w[1], &p)) {
            fprintf(stderr, "cumux control: %s is not a priority (0, 1, high, normal, low)\n", w[1]);
            return 1;
        }
        return cli_request(CUMUX_HELLO_SET_DEFAULT_PRIORITY, 0, (uint64_t)p, NULL) == 0 ? 0 : 1;
    }
    if (!strcmp(cmd, "get_default_client_priority")) {
        NEED(0);
        if (cli_records_get(&r) < 0)
            return 1;
        const char *p = r.default_priority;
        printf("%s\n", !strcmp(p, "normal") ? "0" : !strcmp(p, "low") ? "1" : p);
        cli_records_free(&r);
        return 0;
    }
    /* One server, of this user: it is started, listed and stopped as MPS's per-user servers are. */
    if (!strcmp(cmd, "start_server")) {
        if (n != 3 || strcmp(w[1], "-uid") != 0) {
            fprintf(stderr, "cumux control: start_server -uid UID\n");
            return 1;
        }
        char *end;
        long uid = strtol(w[2], &end, 10);
        if (*end || uid != (long)getuid()) {
            fprintf(stderr, "cumux control: cumuxd serves its own user (uid %u), not uid %s\n", (unsigned)getuid(), w[2]);
            return 1;
        }
        return cli_ensure_server() == 0 ? 0 : 1;
    }
    if (!strcmp(cmd, "shutdown_server")) {
        if (n < 2 || n > 3 || (n == 3 && strcmp(w[2], "-f") != 0)) {
            fprintf(stderr, "cumux control: shutdown_server PID [-f]\n");
            return 1;
        }
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = is_server(&r, w[1]);
        cli_records_free(&r);
        return ok ? (cli_stop() == 0 ? 0 : 1) : 1; /* at once, clients disconnected: as -f */
    }
    if (!strcmp(cmd, "get_server_status")) {
        NEED(1);
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = is_server(&r, w[1]);
        if (ok)
            printf("ACTIVE\n");
        cli_records_free(&r);
        return ok ? 0 : 1;
    }
    if (!strcmp(cmd, "get_device_client_list")) {
        if (n > 2) {
            fprintf(stderr, "cumux control: get_device_client_list [PID]\n");
            return 1;
        }
        if (cli_records_get(&r) < 0)
            return 1;
        bool ok = n == 1 || is_server(&r, w[1]);
        for (size_t i = 0; ok && i < r.n; i++) {
            const struct cumux_record_gpu *g = cumux_records_gpu(&r, r.clients[i].gpu);
            printf("%s:%d\n", g ? g->bus_id : "-", r.clients[i].pid);
        }
        cli_records_free(&r);
        return ok ? 0 : 1;
    }
    if (!strcmp(cmd, "quit")) {
        /* MPS's "quit -t SECONDS" waits that long for clients to finish: cumux stops at once. */
        return cli_stop();
    }
    /* MPS's active thread percentage: for the server's PID, the default of clients that connect from now
     * on (as MPS); for a client's PID (cumux's own), that client's, from its next kernel on. */
    if (!strcmp(cmd, "set_default_active_thread_percentage") || !strcmp(cmd, "set_active_thread_percentage")) {
        bool per_pid = cmd[4] == 'a';
        NEED(per_pid ? 2 : 1);
        unsigned pct = parse_percent(w[per_pid ? 2 : 1]);
        if (!pct)
            return 1;
        if (cli_records_get(&r) < 0)
            return 1;
        long pid = per_pid ? strtol(w[1], NULL, 10) : r.server_pid;
        bool server = pid == r.server_pid, client = false;
        for (size_t i = 0; i < r.n; i++)
            client |= r.clients[i].pid == pid;
        cli_records_free(&r);
        if (!server && !client) {
            fprintf(stderr, "cumux control: %s is neither cumuxd's pid nor a client's\n", w[1]);
            return 1;
        }
        if (server)
            return cli_request(CUMUX_HELLO_SET_DEFAULT_THREADS, 0, pct, NULL) == 0 ? 0 : 1;
        return cli_request_each(CUMUX_HELLO_SET_SMS, (uint32_t)pid, (uint64_t)pct << 32 | CUMUX_SMS_KEEP, NULL) == 0 ? 0
                                                                                                          : 1;
    }
    if (!strcmp(cmd, "get_default_active_thread_percentage") || !strcmp(cmd, "get_active_thread_percentage")) {
        bool per_pid = cmd[4] == 'a';
        NEED(per_pid ? 1 : 0);
        if (cli_records_get(&r) < 0)
            return 1;
        long pid = per_pid ? strtol(w[1], NULL, 10) : r.server_pid;
        int found = pid == r.server_pid ? (int)r.default_percent : -1;
        for (size_t i = 0; i < r.n && found < 0; i++)
            if (r.clients[i].pid == pid)
                found = (int)r.clients[i].percent;
        cli_records_free(&r);
        if (found < 0) {
            fprintf(stderr, "cumux control: %s is neither cumuxd's pid nor a client's\n", w[1]);
            return 1;
        }
        printf("%.1f\n", (double)found);
        return 0;
    }
    fprintf(stderr, "cumux control: unknown command %s\n", cmd);
    return 1;
#undef NEED
}

int cli_control(int argc, char **argv)
{
    if (argc > 1)
        return run_line(argv + 1, argc - 1);
    int failed = 0;
    char line[1024];
    while (fgets(line, sizeof line, stdin)) {
        char *w[8];
        int n = 0;
        for (char *save, *tok = strtok_r(line, " \t\r\n", &save); tok && n < 8; tok = strtok_r(NULL, " \t\r\n", &save))
            w[n++] = tok;
        if (n == 0 || w[0][0] == '#')
            continue;
        failed |= run_line(w, n);
        fflush(stdout);
    }
    return failed;
}
