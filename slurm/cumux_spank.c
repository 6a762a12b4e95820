/* cumux's SPANK plugin (issue 42): `srun --cumux` / `sbatch --cumux` runs a job's tasks on the node's cumuxd
 * as one client group (server/groups.c), whatever language they are in.
 *   --cumux                   the job's CUDA programs go through cumux (the shim first on their library path)
 *   --cumux-memory=SIZE       the job's device memory on each GPU at most, all its tasks together
 *   --cumux-priority=CLASS    its programs' class: high, normal or low
 *   --cumux-threads=PERCENT   its programs' kernels on at most that share of the SMs. Without it a gres/mps
 *                             job's programs keep the percentage Slurm gives them (their
 *                             CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, which the shim passes on), and a gres/shard
 *                             job's get its shards' share of a GPU (SLURM_SHARDS_ON_NODE of the GPU's shards)
 *   --cumux-sms=N             N SMs of each GPU reserved for the job's programs alone, from its start
 * plugstack.conf: `optional /usr/lib/x86_64-linux-gnu/slurm-wlm/cumux_spank.so [cumux=PATH] [pipe_dir=DIR]
 * [lib_dir=DIR] [cgroup_root=DIR] [state_dir=DIR] [gres_conf=FILE] [shards_per_gpu=N] [start=CMD]`: the cumux CLI
 * (default /usr/bin/cumux), the server's pipe directory (default /run/cumux), the shim's directory (default
 * /usr/lib/cumux), the cgroup hierarchy the plugin makes job cgroups in when Slurm keeps none of its own
 * (default: the cgroup v2 mount), where a job's group is noted for its epilog (default /run/cumux-slurm),
 * the gres.conf whose shard and gpu counts give a GPU's shards (default: beside slurm.conf), or that
 * number itself, the command that starts cumuxd where a job finds none (default: systemctl start cumuxd
 * where systemd runs, else cumux start; the job prolog, which needs a Prolog= in slurm.conf).
 * As each task ends, the job's GPU time and peak device memory so far go into its AdminComment (scontrol
 * show job; sacct where accounting is kept); at the job's end (the epilog, as root) into slurmd's log, what
 * is left of it is ended, and its group forgotten.
 * The group is the job's cgroup: under proctrack/cgroup (or task/cgroup), the `job_ID` level Slurm made;
 * otherwise the plugin makes `cumux-slurm/job_ID` itself and moves each task into it before it runs. The
 * task does that and gives the group its settings (`cumux set --group`) as root, in the privileged task
 * hook; the environment is set in the task's own. Docs: docs/slurm.md. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "common/cgroup.h"

SPANK_PLUGIN(cumux, 1);

#define PATH_LEN 512

static int use_cumux;
static char opt_memory[64], opt_priority[16], opt_threads[16], opt_sms[16];
static char cumux_cli[PATH_LEN] = "/usr/bin/cumux", pipe_dir[PATH_LEN] = "/run/cumux", lib_dir[PATH_LEN] = "/usr/lib/cumux",
            cgroup_root[PATH_LEN] = "", state_dir[PATH_LEN] = "/run/cumux-slurm", gres_conf[PATH_LEN] = "",
            start_cmd[PATH_LEN] = "";
static long shards_per_gpu; /* 0: from gres.conf */

static int copy_opt(char *dst, size_t cap, const char *v, const char *name)
{
    if (!v || !*v || strlen(v) >= cap || strpbrk(v, " \t\n/")) {
        slurm_error("cumux: --%s: a value is needed, without spaces or slashes", name);
        return -1;
    }
    snprintf(dst, cap, "%s", v);
    use_cumux = 1; /* any cumux option means --cumux */
    return 0;
}

static int on_cumux(int val, const char *optarg, int remote)
{
    (void)val, (void)optarg, (void)remote;
    use_cumux = 1;
    return 0;
}
static int on_memory(int val, const char *optarg, int remote)
{
    (void)val, (void)remote;
    return copy_opt(opt_memory, sizeof opt_memory, optarg, "cumux-memory");
}
static int on_priority(int val, const char *optarg, int remote)
{
    (void)val, (void)remote;
    if (optarg && strcmp(optarg, "high") && strcmp(optarg, "normal") && strcmp(optarg, "low")) {
        slurm_error("cumux: --cumux-priority=%s: not high, normal or low", optarg);
        return -1;
    }
    return copy_opt(opt_priority, sizeof opt_priority, optarg, "cumux-priority");
}
static int on_threads(int val, const char *optarg, int remote)
{
    (void)val, (void)remote;
    char *end;
    long p = optarg ? strtol(optarg, &end, 10) : 0;
    if (!optarg || *end || p < 1 || p > 100) {
        slurm_error("cumux: --cumux-threads=%s: not a percentage from 1 to 100", optarg ? optarg : "");
        return -1;
    }
    return copy_opt(opt_threads, sizeof opt_threads, optarg, "cumux-threads");
}

static int on_sms(int val, const char *optarg, int remote)
{
    (void)val, (void)remote;
    char *end;
    long n = optarg ? strtol(optarg, &end, 10) : 0;
    if (!optarg || *end || n < 1 || n > 4096) {
        slurm_error("cumux: --cumux-sms=%s: not a number of SMs from 1 to 4096", optarg ? optarg : "");
        return -1;
    }
    return copy_opt(opt_sms, sizeof opt_sms, optarg, "cumux-sms");
}

static struct spank_option options[] = {
    {"cumux", NULL, "Run the job's CUDA programs on the node's cumuxd, as one client group", 0, 0, on_cumux},
    {"cumux-memory", "SIZE", "The job's device memory on each GPU at most (4G, 512M), all its tasks together", 1, 0,
     on_memory},
    {"cumux-priority", "CLASS", "Its programs' GPU priority class: high, normal or low", 1, 0, on_priority},
    {"cumux-threads", "PERCENT", "Its programs' kernels on at most PERCENT of the SMs", 1, 0, on_threads},
    {"cumux-sms", "N", "N SMs of each GPU for the job's programs alone", 1, 0, on_sms},
    SPANK_OPTIONS_TABLE_END};

static void plugin_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *eq = strchr(av[i], '=');
        size_t k = eq ? (size_t)(eq - av[i]) : 0;
        if (k == 14 && !strncmp(av[i], "shards_per_gpu", 14)) {
            char *end;
            long n = strtol(eq + 1, &end, 10);
            if (*end || n < 1 || n > 1000000)
                slurm_error("cumux: plugstack argument %s: not a number of shards", av[i]);
            else
                shards_per_gpu = n;
            continue;
        }
        char *dst = !eq ? NULL
                    : k == 5 && !strncmp(av[i], "cumux", 5)        ? cumux_cli
                    : k == 8 && !strncmp(av[i], "pipe_dir", 8)     ? pipe_dir
                    : k == 7 && !strncmp(av[i], "lib_dir", 7)      ? lib_dir
                    : k == 11 && !strncmp(av[i], "cgroup_root", 11) ? cgroup_root
                    : k == 9 && !strncmp(av[i], "state_dir", 9)    ? state_dir
                    : k == 9 && !strncmp(av[i], "gres_conf", 9)    ? gres_conf
                    : k == 5 && !strncmp(av[i], "start", 5)        ? start_cmd
                                                                    : NULL;
        if (dst && strlen(eq + 1) < PATH_LEN && eq[1] == '/')
            snprintf(dst, PATH_LEN, "%s", eq + 1);
        else
            slurm_error("cumux: plugstack argument %s: not cumux=, pipe_dir=, lib_dir=, cgroup_root=, state_dir=, "
                        "gres_conf= or start= with an absolute path, or shards_per_gpu=N", av[i]);
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    plugin_args(ac, av);
    if (spank_context() == S_CTX_SLURMD || spank_context() == S_CTX_JOB_SCRIPT)
        return 0;
    for (struct spank_option *o = options; o->name; o++)
        if (spank_option_register(sp, o) != ESPANK_SUCCESS)
            return -1;
    return 0;
}

/* Where to make job cgroups: the plugstack's cgroup_root, else the cgroup v2 mount (the unified one of a
 * hybrid), else none. */
static const char *cgroup_mount(void)
{
    static const char *const candidates[] = {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"};
    if (cgroup_root[0])
        return cgroup_root;
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++) {
        char probe[PATH_LEN];
        snprintf(probe, sizeof probe, "%s/cgroup.procs", candidates[i]);
        if (access(probe, W_OK) == 0)
            return candidates[i];
    }
    return NULL;
}

/* The job's group: Slurm's job_ID cgroup where it made one, else ours, with this task moved into it. */
static int job_group(uint32_t job, char *out, size_t cap)
{
    char cg[PATH_LEN], want[32];
    snprintf(want, sizeof want, "/job_%u", job);
    cumux_cgroup_of(getpid(), cg, sizeof cg); /* as cumuxd will read the task's (common/cgroup.c) */
    if (strcmp(cg, "/") != 0) {
        char *p = strstr(cg, want);
        if (p && (p[strlen(want)] == 0 || p[strlen(want)] == '/')) {
            p[strlen(want)] = 0;
            snprintf(out, cap, "%s", cg);
            return 0;
        }
    }
    const char *root = cgroup_mount();
    if (!root) {
        slurm_error("cumux: job %u: no cgroup of Slurm's for it and no cgroup hierarchy to make one in", job);
        return -1;
    }
    char dir[PATH_LEN + 64], procs[PATH_LEN + 96];
    snprintf(dir, sizeof dir, "%s/cumux-slurm", root);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -1;
    snprintf(dir, sizeof dir, "%s/cumux-slurm/job_%u", root, job);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        slurm_error("cumux: job %u: cannot make %s: %s", job, dir, strerror(errno));
        return -1;
    }
    snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (fd < 0 || write(fd, pid, (size_t)n) != n) {
        slurm_error("cumux: job %u: cannot move task %s into %s: %s", job, pid, dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    snprintf(out, cap, "/cumux-slurm/job_%u", job);
    return 0;
}

/* argv[0] with argv against the node's server (CUMUX_PIPE_DIRECTORY); its output into out (cap bytes,
 * NULL: none). 0, or -1 (its exit status not 0). */
static int run_argv(char *out, size_t cap, const char *const *argv)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t p = fork();
    if (p < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (p == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        setenv("CUMUX_PIPE_DIRECTORY", pipe_dir, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    char sink[256];
    for (ssize_t n; (n = read(fds[0], out && got + 1 < cap ? out + got : sink,
                              out && got + 1 < cap ? cap - 1 - got : sizeof sink)) != 0;)
        if (n > 0 && out && got + 1 < cap)
            got += (size_t)n;
        else if (n < 0 && errno != EINTR)
            break;
    close(fds[0]);
    if (out && cap)
        out[got] = 0;
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* cumux A B C D E (NULL ends the words). */
static int run_cumux(char *out, size_t cap, const char *a, const char *b, const char *c, const char *d, const char *e)
{
    const char *argv[] = {cumux_cli, a, b, c, d, e, NULL};
    return run_argv(out, cap, argv);
}

/* cumux set --group GROUP --WHAT VALUE; what cumux said goes into the job's error when it fails. */
static int set_group(const char *group, const char *what, const char *value)
{
    char said[512];
    if (run_cumux(said, sizeof said, "set", "--group", group, what, value) < 0) {
        for (char *p = said; *p; p++)
            if (*p == '\n')
                *p = *(p + 1) ? ' ' : 0;
        slurm_error("cumux: %s set --group %s %s %s failed: %s", cumux_cli, group, what, value ? value : "",
                    said[0] ? said : "(nothing said: is cumuxd running?)");
        return -1;
    }
    return 0;
}

/* The job's group is kept in state_dir/job_ID for its epilog, which ends what is left and forgets it. */
static void remember_group(uint32_t job, const char *group)
{
    char path[PATH_LEN + 32];
    mkdir(state_dir, 0700);
    snprintf(path, sizeof path, "%s/job_%u", state_dir, job);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ssize_t w = write(fd, group, strlen(group));
        (void)w;
        close(fd);
    }
}

/* Did the job ask for cumux (any of its options)? */
static bool job_wants_cumux(spank_t sp)
{
    for (struct spank_option *o = options; o->name; o++) {
        char *arg = NULL;
        if (spank_option_getopt(sp, o, &arg) == ESPANK_SUCCESS)
            return true;
    }
    return false;
}

/* Before the job (slurmd's prolog, as root, outside the job's cgroups, so that a server started here is
 * no part of the job): a job that asked for cumux finds the node's cumuxd running. Where none answers, it
 * is started: start=COMMAND, else `systemctl start cumuxd` where systemd runs the node, else `cumux start`
 * with /etc/cumux/cumuxd.conf's settings; then the job waits for it (10 s at most). */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
    plugin_args(ac, av);
    uint32_t job = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    if (!job_wants_cumux(sp) || run_cumux(NULL, 0, "status", NULL, NULL, NULL, NULL) == 0)
        return 0;
    const char *systemctl[] = {"/bin/systemctl", "start", "cumuxd.service", NULL},
               *own[] = {start_cmd, NULL}, *cli[] = {cumux_cli, "start", NULL};
    const char *const *how = start_cmd[0] ? own : access("/run/systemd/system", F_OK) == 0 ? systemctl : cli;
    if (how == cli && access("/etc/cumux/cumuxd.conf", R_OK) == 0)
        setenv("CUMUX_CONFIG", "/etc/cumux/cumuxd.conf", 0);
    char said[512] = "";
    int rc = run_argv(said, sizeof said, how);
    for (int i = 0; i < 100; i++) {
        if (run_cumux(NULL, 0, "status", NULL, NULL, NULL, NULL) == 0) {
            slurm_info("cumux: job %u: started cumuxd (%s)", job, how[0]);
            return 0;
        }
        usleep(100000);
    }
    said[strcspn(said, "\n")] = 0;
    slurm_error("cumux: job %u: no cumuxd answers on %s, and %s did not start one (exit %s): %s", job, pipe_dir,
                how[0], rc == 0 ? "0" : "not 0", said);
    return -1;
}

/* In the task, as root, before it runs: its group, the group's settings. */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!use_cumux)
        return 0;
    uint32_t job = 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return -1;
    char group[PATH_LEN];
    if (job_group(job, group, sizeof group) < 0)
        return -1;
    /* Always a rule of its own: its programs are counted as one group, for its report. (gres/mps's and
     * gres/shard's shares reach the programs through their environment: slurm_spank_task_init.) */
    remember_group(job, group);
    if (set_group(group, "--memory", opt_memory[0] ? opt_memory : "none") < 0 ||
        (opt_priority[0] && set_group(group, "--priority", opt_priority) < 0) ||
        (opt_threads[0] && set_group(group, "--threads", opt_threads) < 0) ||
        (opt_sms[0] && set_group(group, "--sms", opt_sms) < 0))
        return -1;
    return spank_setenv(sp, "CUMUX_SLURM_GROUP", group, 1) == ESPANK_SUCCESS ? 0 : -1;
}

/* A GPU's shards: shards_per_gpu=, else gres.conf's shard count over its GPUs (Name=gpu lines: Count=, else
 * the devices File= names, /dev/nvidia[0-3] being 4); 0 when it does not say. */
static long gpu_shards(spank_t sp)
{
    if (shards_per_gpu)
        return shards_per_gpu;
    char path[PATH_LEN + 16], conf[PATH_LEN] = "";
    if (gres_conf[0]) {
        snprintf(path, sizeof path, "%s", gres_conf);
    } else {
        if (spank_getenv(sp, "SLURM_CONF", conf, sizeof conf) != ESPANK_SUCCESS || !strchr(conf, '/'))
            snprintf(conf, sizeof conf, "/etc/slurm/slurm.conf");
        *strrchr(conf, '/') = 0;
        snprintf(path, sizeof path, "%s/gres.conf", conf);
    }
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    long shards = 0, gpus = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "#\n")] = 0;
        char *name = strstr(line, "Name="), *count = strstr(line, "Count="), *file = strstr(line, "File=");
        if (!name)
            continue;
        long n = count ? strtol(count + 6, NULL, 10) : 0;
        if (!strncmp(name + 5, "shard", 5) && !isalnum((unsigned char)name[10])) {
            shards += n;
        } else if (!strncmp(name + 5, "gpu", 3) && !isalnum((unsigned char)name[8])) {
            long lo, hi;
            char *br = file ? strchr(file, '[') : NULL;
            if (!n && br && sscanf(br, "[%ld-%ld]", &lo, &hi) == 2 && hi >= lo)
                n = hi - lo + 1;
            gpus += n ? n : 1;
        }
    }
    fclose(f);
    return shards > 0 && gpus > 0 ? shards / gpus : 0;
}

/* In the task, as the user: its programs find the shim first, and the server. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!use_cumux)
        return 0;
    /* gres/shard: the job's shards of a GPU become its programs' share of the SMs, as MPS's percentage (the
     * shim asks for it), unless it gave one or gres/mps did. */
    char v[32];
    if (!opt_threads[0] && spank_getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, sizeof v) != ESPANK_SUCCESS &&
        spank_getenv(sp, "SLURM_SHARDS_ON_NODE", v, sizeof v) == ESPANK_SUCCESS) {
        long have = strtol(v, NULL, 10), per = gpu_shards(sp);
        if (have > 0 && per > 0) {
            long pct = (have * 100 + per - 1) / per;
            snprintf(v, sizeof v, "%ld", pct > 100 ? 100 : pct);
            if (spank_setenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, 1) != ESPANK_SUCCESS)
                return -1;
        } else if (have > 0) {
            slurm_error("cumux: the job has %ld shards, but how many a GPU has is not known (gres.conf or "
                        "shards_per_gpu=): its programs may use every SM", have);
        }
    }
    char old[4096] = "", path[4096 + PATH_LEN + 2], name[64];
    uint32_t job = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    if (spank_getenv(sp, "LD_LIBRARY_PATH", old, sizeof old) != ESPANK_SUCCESS)
        old[0] = 0;
    snprintf(path, sizeof path, "%s%s%s", lib_dir, old[0] ? ":" : "", old);
    snprintf(name, sizeof name, "slurm-job-%u", job);
    if (spank_setenv(sp, "LD_LIBRARY_PATH", path, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "CUMUX_PIPE_DIRECTORY", pipe_dir, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "CUMUX_CLIENT_NAME", name, 0) != ESPANK_SUCCESS)
        return -1;
    return 0;
}

/* The job's group, as its first task noted it (state_dir/job_ID); -1 when it is no cumux job here. */
static int noted_group(uint32_t job, char *group, size_t cap, bool forget)
{
    char path[PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/job_%u", state_dir, job);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, group, cap - 1);
    close(fd);
    if (forget)
        unlink(path);
    if (n <= 0)
        return -1;
    group[n] = 0;
    return 0;
}

/* When each of its tasks ends (slurmstepd, as root, the job still running: slurmctld refuses updates
 * to a job that is completing, as at its epilog): the job's use so far goes into its AdminComment, which
 * `scontrol show job` shows and accounting keeps (sacct --format=AdminComment). The last task's is the
 * job's. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!use_cumux || !spank_remote(sp))
        return 0;
    uint32_t job = 0;
    char group[PATH_LEN] = "", out[512], comment[600];
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || noted_group(job, group, sizeof group, false) < 0 ||
        run_cumux(out, sizeof out, "group", group, NULL, NULL, NULL) != 0)
        return 0;
    out[strcspn(out, "\n")] = 0;
    snprintf(comment, sizeof comment, "cumux: %s", out);
    job_desc_msg_t desc;
    slurm_init_job_desc_msg(&desc);
    desc.job_id = job;
    desc.admin_comment = comment;
    if (slurm_update_job(&desc) != SLURM_SUCCESS)
        slurm_info("cumux: job %u: its AdminComment was not set: %s", job, slurm_strerror(slurm_get_errno()));
    return 0;
}

/* The node, when the job ends (as root): its report into slurmd's log, whatever of it is left ended, its
 * group forgotten. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    plugin_args(ac, av); /* slurm_spank_init is not called in every context */
    uint32_t job = 0;
    char group[PATH_LEN] = "", out[512];
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || noted_group(job, group, sizeof group, true) < 0)
        return 0; /* not a cumux job here */
    if (run_cumux(out, sizeof out, "group", group, NULL, NULL, NULL) == 0) {
        out[strcspn(out, "\n")] = 0;
        slurm_info("cumux: job %u: %s", job, out);
    }
    run_cumux(NULL, 0, "kill", "--group", group, NULL, NULL);
    run_cumux(NULL, 0, "set", "--group", group, "--forget", NULL);
    return 0;
}
