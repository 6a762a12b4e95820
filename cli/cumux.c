/* cumux: the command line. start/stop/status of the server, and `run` to put a program under it. */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdbool.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proto.h"
#include "common/priority.h"
#include "common/size.h"
#include "common/sock.h"
#include "cli/cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: cumux <command> [args]\n"
               "  start [--foreground]   start the server (cumuxd) for this pipe directory\n"
               "  stop                   stop it; its clients are disconnected\n"
               "  status                 the server's pid, GPUs, clients and recent faults\n"
               "  cdi [--output FILE]    a CDI spec (cumux.io/gpu=all) that puts containers' programs on cumuxd\n"
               "  gateway --listen [ADDR:]PORT --key FILE   serve other machines' CLI requests and programs\n"
               "                         (CUMUX_SERVER=host:port, CUMUX_KEY_FILE there) over TLS with this key\n"
               "  keygen FILE [IDENTITY]  a new key file (mode 0600) for gateway and CUMUX_KEY_FILE\n"
               "  relay --server HOST:PORT --key FILE [--pipe-directory DIR]   programs here run on the cumuxd\n"
               "                         behind that gateway (cumux run does it itself where CUMUX_SERVER is set)\n"
               "  hook [--memory SIZE] [--sms N] [--threads P] [--priority C]   an OCI hook (the container's\n"
               "                         state on stdin): its cgroup a group with those settings, the pod's names\n"
               "                         its labels (the Kubernetes plugin's CDI devices run it)\n"
               "  reload                 the server reads its settings file (cumuxd --config) again and applies\n"
               "                         the defaults for programs that connect from then on; none is dropped\n"
               "  kill PID               end the GPU work of client process PID; its calls fail from then on\n"
               "  kill --group CGROUP    end the GPU work of every program of that cgroup and below\n"
               "  group CGROUP           a group's programs, memory (and peak), limit and GPU time so far\n"
               "  run [--memory SIZE] [--priority high|normal|low] [--sms N] [--threads P] -- CMD [ARGS...]\n"
               "                         run CMD under cumux (starts the server if none runs); --memory:\n"
               "                         its device memory at most SIZE (4G, 512M), which it sees as the\n"
               "                         GPU's size (also CUMUX_MEMORY_LIMIT, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT);\n"
               "                         --priority: its streams' class (also CUMUX_PRIORITY); --sms: N SMs\n"
               "                         for its kernels alone (also CUMUX_SMS); --threads: its kernels on at\n"
               "                         most P%% of the SMs (also CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)\n"
               "  set PID --memory SIZE  change the device memory limit of client process PID (none: no limit)\n"
               "  set PID --priority P   change the class of the streams client process PID makes from now on\n"
               "  set PID --sms N|none   reserve N SMs for client process PID alone, from its next operation on\n"
               "  set PID --threads P|none   its kernels on at most P%% of the SMs, from its next operation on\n"
               "  set --group CGROUP --memory SIZE|none | --priority P|none | --threads P|none | --sms N|none\n"
               "                         a client group's settings: the programs of that cgroup and below share\n"
               "                         the memory limit (each GPU's) and the SMs reserved; each gets the priority\n"
               "  top [--once [--json]] [--interval S]   live view: per client GPU time share,\n"
               "                         kernels/s, memory and limit; per GPU utilization and SM activity\n"
               "  control [COMMAND...]   nvidia-cuda-mps-control's commands, one a line on stdin (or the\n"
               "                         arguments as one): get_server_list, get_client_list, ps,\n"
               "                         terminate_client, *_device_pinned_mem_limit,\n"
               "                         *_active_thread_percentage, *_client_priority, quit\n"
               "  trace [--native] [-o FILE] -- CMD [ARGS...]   run CMD with every driver call logged\n"
               "                         (also CUMUX_TRACE=1 with run; see docs/trace.md)\n"
               "  --version              cumux's version\n"
               "Environment: CUMUX_PIPE_DIRECTORY (default %s), CUMUX_LOG_DIRECTORY, CUMUX_DEBUG.\n",
            CUMUX_DEFAULT_PIPE_DIRECTORY);
}

static int request(uint32_t kind, FILE *out)
{
    return cli_request(kind, 0, 0, out);
}

static int cmd_start(int argc, char **argv)
{
    bool fg = argc > 1 && (!strcmp(argv[1], "--foreground") || !strcmp(argv[1], "-f"));
    int s = cli_connect_server();
    if (s >= 0) {
        close(s);
        fprintf(stderr, "cumux: cumuxd already runs on %s\n", cumux_pipe_directory());
        return 0;
    }
    if (errno == EPERM)
        return 1;
    int r = cli_start_server(fg, false);
    if (r == 0)
        printf("cumuxd started (pipe directory %s)\n", cumux_pipe_directory());
    return r;
}

/* cumux kill PID: as MPS's terminate_client, the client's GPU work ends and its calls fail from now on
 * (CUDA_ERROR_MPS_CLIENT_TERMINATED); the process itself is not signalled. */
/* cumux group CGROUP: what the group's programs use and used, on every GPU (a job's end report). */
static int cmd_group(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cumux group CGROUP|NAME   (a group given settings with cumux set --group; NAME: the\n"
                        "       last part of its path, e.g. job_42)\n");
        return 2;
    }
    struct cumux_records r;
    if (cli_records_get(&r) < 0)
        return 1;
    unsigned long long used = 0, peak = 0, gpu_ns = 0, limit = 0;
    unsigned programs = 0, gpus = 0;
    for (size_t i = 0; i < r.ngroups; i++) {
        const struct cumux_record_group *g = &r.groups[i];
        /* a path, or its last part (job_42: whatever cgroup the job's is) */
        size_t pl = strlen(g->path), al = strlen(argv[1]);
        bool tail = !strchr(argv[1], '/') && pl > al && g->path[pl - al - 1] == '/' && !strcmp(g->path + pl - al, argv[1]);
        if (strcmp(g->path, argv[1]) && !tail)
            continue;
        gpus++;
        used += g->used;
        peak = g->peak > peak ? g->peak : peak;
        gpu_ns += g->gpu_ns;
        programs += g->programs;
        limit = g->limit;
    }
    cli_records_free(&r);
    if (!gpus) {
        fprintf(stderr, "cumux: no group %s (cumux set --group gives one settings)\n", argv[1]);
        return 1;
    }
    char lim[32] = "none";
    if (limit)
        snprintf(lim, sizeof lim, "%.1f MiB", limit / 1048576.0);
    printf("group %s: %u program(s) now, device memory %.1f MiB (peak %.1f MiB on one GPU), limit %s, GPU time "
           "%.3f s\n", argv[1], programs, used / 1048576.0, peak / 1048576.0, lim, gpu_ns / 1e9);
    return 0;
}

static int cmd_kill(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--group")) {
        struct cumux_group_name g;
        memset(&g, 0, sizeof g);
        if (strlen(argv[2]) >= sizeof g.path)
            return 2;
        snprintf(g.path, sizeof g.path, "%s", argv[2]);
        cli_group = &g;
        int st = cli_request_each(CUMUX_HELLO_SET_GROUP, CUMUX_GROUP_KILL, 0, stdout);
        cli_group = NULL;
        return st == 0 ? 0 : 1;
    }
    char *end = NULL;
    long pid = argc == 2 ? strtol(argv[1], &end, 10) : 0;
    if (argc != 2 || !end || *end || pid <= 0 || pid > INT32_MAX) {
        fprintf(stderr, "usage: cumux kill PID\n");
        return 2;
    }
    int st = cli_request_each(CUMUX_HELLO_KILL, (uint32_t)pid, 0, stdout);
    if (st < 0 && errno != EPERM)
        fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
    return st == 0 ? 0 : 1;
}

/* cumux reload: the server reads its settings file again (as systemctl reload asks with SIGHUP) and says
 * what it applied; clients keep running. */
static int cmd_reload(void)
{
    int st = cli_request(CUMUX_HELLO_RELOAD, 0, 0, stdout);
    if (st < 0 && errno != EPERM)
        fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
    return st == 0 ? 0 : 1;
}

/* cumux set PID --memory SIZE: the client's device memory limit from its next allocation on (what it holds
 * already stays); "none" or 0 lifts it. cumux set PID --priority CLASS: its new streams' class. */
/* cumux set --group CGROUP --memory SIZE|none | --priority CLASS|none | --threads PERCENT|none | --sms N|none: the
 * group's setting on every GPU's worker (server/groups.c). */
static int cmd_set_group(int argc, char **argv)
{
    uint64_t value = 0;
    uint32_t what = 0, count = 0;
    enum cumux_priority prio;
    bool none = argc == 4 && !strcmp(argv[3], "none");
    if (argc == 4 && !strcmp(argv[2], "--memory") && cumux_parse_size(argv[3], &value))
        what = CUMUX_GROUP_MEMORY;
    else if (argc == 4 && !strcmp(argv[2], "--priority") && (none || cumux_priority_parse(argv[3], &prio)))
        what = CUMUX_GROUP_PRIORITY, value = none ? CUMUX_GROUP_NONE : (uint64_t)prio;
    else if (argc == 4 && !strcmp(argv[2], "--threads") && (none || cumux_parse_count(argv[3], 100, &count)))
        what = CUMUX_GROUP_THREADS, value = none ? 0 : count;
    else if (argc == 4 && !strcmp(argv[2], "--sms") && (none || (cumux_parse_count(argv[3], CUMUX_GROUP_SMS_MAX, &count) && count)))
        what = CUMUX_GROUP_SMS, value = none ? 0 : count;
    else if (argc == 3 && !strcmp(argv[2], "--forget"))
        what = CUMUX_GROUP_FORGET;
    struct cumux_group_name g;
    memset(&g, 0, sizeof g);
    if (argc == 4 && !strcmp(argv[2], "--labels") && strlen(argv[3]) < sizeof g.labels) {
        what = CUMUX_GROUP_LABELS_SET;
        snprintf(g.labels, sizeof g.labels, "%s", strcmp(argv[3], "none") ? argv[3] : "");
    }
    if (!what || strlen(argv[1]) >= sizeof g.path) {
        fprintf(stderr, "usage: cumux set --group CGROUP --memory SIZE|none\n"
                        "       cumux set --group CGROUP --priority high|normal|low|none\n"
                        "       cumux set --group CGROUP --threads PERCENT|none\n"
                        "       cumux set --group CGROUP --sms N|none   (N SMs of each GPU for its programs alone)\n"
                        "       cumux set --group CGROUP --labels K=V,...|none   (its /metrics labels, e.g. a pod's names)\n"
                        "       cumux set --group CGROUP --forget   (its settings and counts go)\n"
                        "  CGROUP: a cgroup path, as /proc/PID/cgroup names it; its programs are those at it or below\n");
        return 2;
    }
    snprintf(g.path, sizeof g.path, "%s", argv[1]);
    cli_group = &g;
    int st = cli_request_each(CUMUX_HELLO_SET_GROUP, what, value, stdout);
    cli_group = NULL;
    if (st < 0 && errno != EPERM)
        fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
    return st == 0 ? 0 : 1;
}

static int cmd_set(int argc, char **argv)
{
    if ((argc == 5 || argc == 4) && !strcmp(argv[1], "--group"))
        return cmd_set_group(argc - 1, argv + 1);
    char *end = NULL;
    long pid = argc == 4 ? strtol(argv[1], &end, 10) : 0;
    uint64_t value = 0;
    enum cumux_priority prio;
    bool memory = argc == 4 && !strcmp(argv[2], "--memory") && cumux_parse_size(argv[3], &value);
    bool priority = argc == 4 && !strcmp(argv[2], "--priority") && cumux_priority_parse(argv[3], &prio);
    uint32_t count = 0;
    bool sms = argc == 4 && !strcmp(argv[2], "--sms") && cumux_parse_count(argv[3], 4096, &count);
    bool threads = argc == 4 && !strcmp(argv[2], "--threads") && cumux_parse_count(argv[3], 100, &count);
    if (!end || *end || pid <= 0 || pid > INT32_MAX || !(memory || priority || sms || threads)) {
        fprintf(stderr, "usage: cumux set PID --memory SIZE   (SIZE: 4G, 512M, none)\n"
                        "       cumux set PID --priority high|normal|low\n"
                        "       cumux set PID --sms N|none\n"
                        "       cumux set PID --threads PERCENT|none\n");
        return 2;
    }
    /* The SMs' request changes one of the two and keeps the other (CUMUX_SMS_KEEP). */
    uint64_t sm_arg = sms ? (uint64_t)CUMUX_SMS_KEEP << 32 | count : (uint64_t)count << 32 | CUMUX_SMS_KEEP;
    /* its clients are on the GPUs it uses: each GPU's worker changes its own */
    int st = memory     ? cli_request_each(CUMUX_HELLO_SET_MEMORY, (uint32_t)pid, value, stdout)
             : priority ? cli_request_each(CUMUX_HELLO_SET_PRIORITY, (uint32_t)pid, (uint64_t)prio, stdout)
                        : cli_request_each(CUMUX_HELLO_SET_SMS, (uint32_t)pid, sm_arg, stdout);
    if (st < 0 && errno != EPERM)
        fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
    return st == 0 ? 0 : 1;
}

/* GPU 0's worker tells the server's part and its GPU's, each other GPU's worker its own. */
static int cmd_status(void)
{
    int n = cli_gpu_count();
    if (n < 0 || request(CUMUX_HELLO_STATUS, stdout) < 0) {
        if (errno == EPERM)
            return 1;
        printf("cumuxd is not running (pipe directory %s)\n", cumux_pipe_directory());
        return 1;
    }
    for (int g = 1; g < n; g++)
        if (cli_request_gpu(g, CUMUX_HELLO_STATUS, CUMUX_STATUS_GPU_PART, 0, stdout) != 0)
            printf("GPU %d: its worker does not answer (%s)\n", g, strerror(errno));
    return 0;
}

static int prepend_library_path(const char *dir)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    char *nl = malloc(strlen(dir) + (llp ? strlen(llp) : 0) + 2);
    if (!nl)
        return -1;
    sprintf(nl, "%s%s%s", dir, llp && *llp ? ":" : "", llp && *llp ? llp : "");
    setenv("LD_LIBRARY_PATH", nl, 1);
    free(nl);
    return 0;
}

/* ---- trace (docs/trace.md) ---- */

/* The tracing libcuda.so.1's directory: trace/ under the shim's. */
static int trace_dir(const char *shim, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/trace", shim);
    char lib[PATH_MAX];
    if (n < 0 || (size_t)n >= len || snprintf(lib, sizeof lib, "%s/libcuda.so.1", out) >= (int)sizeof lib ||
        access(lib, R_OK) != 0) {
        fprintf(stderr, "cumux: cannot find the tracing libcuda.so.1 in %s\n", out);
        return -1;
    }
    return 0;
}

/* A 64-bit ELF shared object for this machine. */
static bool native_elf(const char *path)
{
    unsigned char h[20];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = read(fd, h, sizeof h) == (ssize_t)sizeof h && !memcmp(h, "\177ELF", 4) && h[4] == 2;
    close(fd);
#if defined(__x86_64__)
    return ok && h[18] == 62 && h[19] == 0;
#elif defined(__aarch64__)
    return ok && h[18] == 183 && h[19] == 0;
#else
    return ok;
#endif
}

/* dir (resolved) is one of the excluded directories. */
static bool excluded_dir(const char *dir, const char *const *exclude)
{
    char *rd = realpath(dir, NULL);
    bool hit = false;
    for (int i = 0; rd && !hit && exclude[i]; i++) {
        char *e = realpath(exclude[i], NULL);
        hit = e && !strcmp(rd, e);
        free(e);
    }
    free(rd);
    return hit;
}

/* The candidate is a driver library, not one of cumux's: neither it nor what it links to lies in a
 * cumux directory. out: its path, made absolute. */
static bool driver_candidate(const char *path, const char *const *exclude, char *out, size_t len)
{
    char *real = realpath(path, NULL), *given = strdup(path), *target = real ? strdup(real) : NULL;
    char *dir = given ? realpath(dirname(given), NULL) : NULL;
    bool ok = real && dir && target && native_elf(real) && !excluded_dir(dir, exclude) &&
              !excluded_dir(dirname(target), exclude);
    if (ok)
        snprintf(out, len, "%s/%s", dir, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    free(real);
    free(given);
    free(target);
    free(dir);
    return ok;
}

/* NVIDIA's libcuda.so.1 for --native: the directories of LD_LIBRARY_PATH, then the linker cache
 * (ldconfig -p), then the usual driver directories; cumux's own directories never count. */
static int find_native_driver(const char *const *exclude, char *out, size_t len)
{
    char cand[PATH_MAX];
    const char *llp = getenv("LD_LIBRARY_PATH");
    if (llp) {
        char *copy = strdup(llp);
        for (char *save, *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save)) {
            snprintf(cand, sizeof cand, "%s/libcuda.so.1", tok);
            if (driver_candidate(cand, exclude, out, len)) {
                free(copy);
                return 0;
            }
        }
        free(copy);
    }
    static const char *const ldconfig[] = {"/sbin/ldconfig", "/usr/sbin/ldconfig", NULL};
    for (int i = 0; ldconfig[i]; i++) {
        if (access(ldconfig[i], X_OK) != 0)
            continue;
        char cmd[64];
        snprintf(cmd, sizeof cmd, "%s -p 2>/dev/null", ldconfig[i]);
        FILE *p = popen(cmd, "r");
        if (!p)
            break;
        char line[PATH_MAX + 128];
        bool found = false;
        while (fgets(line, sizeof line, p)) {
            char *arrow = strstr(line, "=> ");
            if (found || !arrow || strncmp(line + strspn(line, " \t"), "libcuda.so.1 ", 13))
                continue;
            arrow[3 + strcspn(arrow + 3, "\n")] = 0;
            found = driver_candidate(arrow + 3, exclude, out, len);
        }
        pclose(p);
        if (found)
            return 0;
        break;
    }
    static const char *const dirs[] = {
        "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64", "/usr/lib", "/lib64", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/wsl/lib",
        NULL};
    for (int i = 0; dirs[i]; i++) {
        snprintf(cand, sizeof cand, "%s/libcuda.so.1", dirs[i]);
        if (driver_candidate(cand, exclude, out, len))
            return 0;
    }
    return -1;
}

/* Environment of a traced program: CUMUX_TRACE_TARGET (the traced library), CUMUX_TRACE_FILE (made
 * absolute, emptied) and the tracing library's directory first on LD_LIBRARY_PATH. */
static int setup_trace(const char *shim, const char *target, const char *file)
{
    char dir[PATH_MAX];
    if (trace_dir(shim, dir, sizeof dir) < 0)
        return -1;
    setenv("CUMUX_TRACE_TARGET", target, 1);
    if (file) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "cumux: cannot write %s: %s\n", file, strerror(errno));
            return -1;
        }
        close(fd);
        char *abs = realpath(file, NULL);
        setenv("CUMUX_TRACE_FILE", abs ? abs : file, 1);
        free(abs);
    }
    return prepend_library_path(dir);
}

static bool trace_requested(void)
{
    const char *e = getenv("CUMUX_TRACE");
    return e && *e && strcmp(e, "0") != 0;
}

static int cmd_run(int argc, char **argv)
{
    int i = 1;
    while (i + 1 < argc && (!strcmp(argv[i], "--memory") || !strcmp(argv[i], "--priority") ||
                            !strcmp(argv[i], "--sms") || !strcmp(argv[i], "--threads"))) {
        if (!strcmp(argv[i], "--sms") || !strcmp(argv[i], "--threads")) {
            bool sms = argv[i][2] == 's';
            uint32_t n;
            if (!cumux_parse_count(argv[i + 1], sms ? 4096 : 100, &n) || n == 0) {
                fprintf(stderr, "cumux run: %s %s: not %s\n", argv[i], argv[i + 1],
                        sms ? "a number of SMs" : "a percentage (1 to 100)");
                return 2;
            }
            char v[16];
            snprintf(v, sizeof v, "%u", n);
            setenv(sms ? "CUMUX_SMS" : "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, 1);
        } else if (argv[i][2] == 'm') {
            uint64_t limit;
            if (!cumux_parse_size(argv[i + 1], &limit)) {
                fprintf(stderr, "cumux run: --memory %s: not a size (4G, 512M, none)\n", argv[i + 1]);
                return 2;
            }
            char v[32];
            snprintf(v, sizeof v, "%llu", (unsigned long long)limit);
            setenv("CUMUX_MEMORY_LIMIT", v, 1);
        } else {
            enum cumux_priority p;
            if (!cumux_priority_parse(argv[i + 1], &p)) {
                fprintf(stderr, "cumux run: --priority %s: not high, normal or low\n", argv[i + 1]);
                return 2;
            }
            setenv("CUMUX_PRIORITY", cumux_priority_name(p), 1);
        }
        i += 2;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    char lib[PATH_MAX];
    if (cli_shim_dir(lib, sizeof lib) < 0) {
        fprintf(stderr, "cumux: cannot find the shim libcuda.so.1 (set CUMUX_LIB_DIRECTORY)\n");
        return 1;
    }
    /* CUMUX_SERVER: the program runs on that machine's cumuxd, through a relay of its own here. */
    const char *remote = getenv("CUMUX_SERVER");
    if (remote && *remote) {
        char dir[PATH_MAX];
        if (cli_relay_start(remote, getenv("CUMUX_KEY_FILE"), getpid(), dir, sizeof dir) < 0)
            return 1;
        setenv("CUMUX_PIPE_DIRECTORY", dir, 1);
    } else if (cli_ensure_server() != 0) {
        return 1;
    }
    if (prepend_library_path(lib) < 0)
        return 1;
    if (trace_requested()) {
        char target[PATH_MAX + 16];
        snprintf(target, sizeof target, "%s/libcuda.so.1", lib);
        if (setup_trace(lib, target, NULL) < 0)
            return 1;
    }
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "cumux: cannot run %s: %s\n", argv[i], strerror(errno));
    return 127;
}

static int cmd_trace(int argc, char **argv)
{
    bool native = false;
    const char *file = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        if (!strcmp(argv[i], "--native")) {
            native = true;
        } else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) {
            file = argv[++i];
        } else if (!strncmp(argv[i], "--output=", 9)) {
            file = argv[i] + 9;
        } else {
            fprintf(stderr, "cumux trace: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    char lib[PATH_MAX], target[PATH_MAX + 16];
    if (cli_shim_dir(lib, sizeof lib) < 0) {
        fprintf(stderr, "cumux: cannot find the shim libcuda.so.1 (set CUMUX_LIB_DIRECTORY)\n");
        return 1;
    }
    if (native) {
        char tdir[PATH_MAX];
        if (trace_dir(lib, tdir, sizeof tdir) < 0)
            return 1;
        const char *exclude[] = {lib, tdir, NULL};
        if (find_native_driver(exclude, target, sizeof target) < 0) {
            fprintf(stderr, "cumux trace: cannot find NVIDIA's libcuda.so.1 (put its directory on "
                            "LD_LIBRARY_PATH)\n");
            return 1;
        }
    } else {
        if (cli_ensure_server() != 0)
            return 1;
        snprintf(target, sizeof target, "%s/libcuda.so.1", lib);
        if (prepend_library_path(lib) < 0)
            return 1;
    }
    if (setup_trace(lib, target, file) < 0)
        return 1;
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "cumux: cannot run %s: %s\n", argv[i], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    cli_find_exe_dir();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "start"))
        return cmd_start(argc - 1, argv + 1);
    if (!strcmp(cmd, "stop"))
        return cli_stop();
    if (!strcmp(cmd, "status"))
        return cmd_status();
    if (!strcmp(cmd, "kill"))
        return cmd_kill(argc - 1, argv + 1);
    if (!strcmp(cmd, "group"))
        return cmd_group(argc - 1, argv + 1);
    if (!strcmp(cmd, "reload") && argc == 2)
        return cmd_reload();
    if (!strcmp(cmd, "cdi"))
        return cli_cdi(argc - 1, argv + 1);
    if (!strcmp(cmd, "hook"))
        return cli_hook(argc - 1, argv + 1);
    if (!strcmp(cmd, "gateway"))
        return cli_gateway(argc - 1, argv + 1);
    if (!strcmp(cmd, "keygen"))
        return cli_keygen(argc - 1, argv + 1);
    if (!strcmp(cmd, "set"))
        return cmd_set(argc - 1, argv + 1);
    if (!strcmp(cmd, "control"))
        return cli_control(argc - 1, argv + 1);
    if (!strcmp(cmd, "top"))
        return cli_top(argc - 1, argv + 1);
    if (!strcmp(cmd, "relay"))
        return cli_relay(argc - 1, argv + 1);
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "trace"))
        return cmd_trace(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("cumux %s (protocol %u)\n", CUMUX_VERSION, (unsigned)CUMUX_PROTO_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "cumux: unknown command %s\n", cmd);
    usage(stderr);
    return 2;
}
