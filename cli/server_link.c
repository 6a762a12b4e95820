/* The CLI's link to the server: where cumuxd and the shim are, connecting, a request and its answer,
 * starting and stopping the server. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ask.h"
#include "common/proto.h"
#include "common/records.h"
#include "common/sock.h"
#include "cli/cli.h"

static char exe_dir[PATH_MAX]; /* cumux's own directory (cli_find_exe_dir) */

int cli_find_exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *d = dirname(buf);
    if (strlen(d) >= sizeof exe_dir)
        return -1;
    memcpy(exe_dir, d, strlen(d) + 1);
    return 0;
}

static int cli_first_existing(char *out, size_t len, const char *env, const char *const *candidates, int mode)
{
    const char *e = getenv(env);
    if (e && *e) {
        snprintf(out, len, "%s", e);
        return 0;
    }
    for (int i = 0; candidates[i]; i++) {
        int n = snprintf(out, len, "%s/%s", exe_dir, candidates[i]);
        if (n > 0 && (size_t)n < len && access(out, mode) == 0)
            return 0;
    }
    return -1;
}

/* The server binary: $CUMUX_SERVER_BINARY, installed (sbin beside bin, or beside cumux), or in the build tree. */
static int server_path(char *out, size_t len)
{
    static const char *const c[] = {"../sbin/cumuxd", "cumuxd", "../server/cumuxd", NULL};
    return cli_first_existing(out, len, "CUMUX_SERVER_BINARY", c, X_OK);
}

/* The directory holding the shim libcuda.so.1. */
int cli_shim_dir(char *out, size_t len)
{
    /* Installed first: under a prefix such as /usr, ../lib/libcuda.so.1 may well be NVIDIA's driver. */
    static const char *const c[] = {"../lib/cumux/libcuda.so.1", "../lib64/cumux/libcuda.so.1", "../lib/libcuda.so.1", NULL};
    if (cli_first_existing(out, len, "CUMUX_LIB_DIRECTORY", c, R_OK) < 0)
        return -1;
    if (!getenv("CUMUX_LIB_DIRECTORY")) {
        char tmp[PATH_MAX];
        if (strlen(out) >= sizeof tmp)
            return -1;
        memcpy(tmp, out, strlen(out) + 1);
        char *real = realpath(dirname(tmp), NULL);
        if (!real)
            return -1;
        snprintf(out, len, "%s", real);
        free(real);
    }
    return 0;
}

/* A connection to the server, checked to be ours (cumux_connect_checked) before anything is sent. -1 with
 * errno EPERM (said on stderr) when another user's process holds the pipe directory; -1 with another
 * errno when no server runs. */
int cli_connect_server(void)
{
    char path[256], err[512];
    if (cumux_socket_path(path, sizeof path) < 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int s = cumux_connect_checked(path, err, sizeof err);
    if (s < 0 && errno == EPERM) {
        fprintf(stderr, "cumux: another user's process holds the pipe directory %s: %s. Use another "
                        "CUMUX_PIPE_DIRECTORY.\n", cumux_pipe_directory(), err);
        errno = EPERM;
    }
    return s;
}

const struct cumux_group_name *cli_group; /* set: requests carry it (SET_GROUP) */

int cli_request_gpu(int gpu, uint32_t kind, uint32_t flags, uint64_t arg, FILE *out)
{
    struct cumux_hello h = {.magic = CUMUX_MAGIC, .version = CUMUX_PROTO_VERSION, .kind = kind, .flags = flags,
                            .arg = arg};
    char *text = NULL, err[512];
    /* another GPU's worker may be in the middle of a takeover: it answers within seconds, or not at all */
    bool g = kind == CUMUX_HELLO_SET_GROUP && cli_group;
    const char *remote = getenv("CUMUX_SERVER");
    int st = remote && *remote ? cli_remote_ask(remote, gpu, &h, g ? cli_group : NULL, g ? sizeof *cli_group : 0, &text, err, sizeof err)
                               : cumux_ask_extra(gpu, &h, g ? cli_group : NULL, g ? sizeof *cli_group : 0, gpu ? 5000 : 0, &text,
                                                 err, sizeof err);
    if (st < 0 && remote && *remote && !text)
        fprintf(stderr, "cumux: %s\n", err);
    if (st < 0 && errno == EPERM)
        fprintf(stderr, "cumux: another user's process holds the pipe directory %s: %s. Use another "
                        "CUMUX_PIPE_DIRECTORY.\n", cumux_pipe_directory(), err);
    if (text && out)
        fputs(text, out);
    else if (text && st > 0) /* a refusal says why, even where the answer was not wanted */
        fprintf(stderr, "cumux: %s%s", text, text[0] && text[strlen(text) - 1] == '\n' ? "" : "\n");
    free(text);
    return st;
}

int cli_request(uint32_t kind, uint32_t flags, uint64_t arg, FILE *out)
{
    return cli_request_gpu(0, kind, flags, arg, out);
}

int cli_gpu_count(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return -1;
    int st = cli_request_gpu(0, CUMUX_HELLO_STATUS, CUMUX_STATUS_RECORDS, 0, f); /* says why when it is EPERM */
    fclose(f);
    struct cumux_records r;
    int n = -1;
    if (st == 0 && cumux_records_parse(text, &r, false) == 0) {
        n = r.gpu_count > 0 ? r.gpu_count : 1;
        cumux_records_free(&r);
    }
    free(text);
    return n;
}

int cli_request_each(uint32_t kind, uint32_t flags, uint64_t arg, FILE *out)
{
    int n = cli_gpu_count();
    if (n < 0)
        return cli_request(kind, flags, arg, out); /* says why (or -1 with errno) as for one */
    int best = -1, first_err = 0, saved_errno = 0;
    char *first_text = NULL;
    size_t first_len = 0;
    for (int g = 0; g < n; g++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        int st = f ? cli_request_gpu(g, kind, flags, arg, f) : -1;
        if (f)
            fclose(f);
        if (st == 0) {
            if (out && text)
                fputs(text, out);
            best = 0;
        } else if (!first_err && st != 0) {
            first_err = st;
            saved_errno = errno;
            first_text = text;
            first_len = len;
            text = NULL;
        }
        free(text);
    }
    /* none of them had it: the first refusal, as one worker says it */
    if (best != 0 && out && first_text && first_len)
        fputs(first_text, out);
    free(first_text);
    if (best == 0)
        return 0;
    errno = saved_errno;
    return first_err;
}

/* LD_LIBRARY_PATH without the shim's directory: the server needs the real driver. */
static void strip_shim_from_env(const char *dir)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    if (!llp)
        return;
    char *copy = strdup(llp), *outp = calloc(1, strlen(llp) + 1);
    if (!copy || !outp)
        exit(1);
    for (char *save, *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        char *real = realpath(tok, NULL);
        bool same = real && !strcmp(real, dir);
        free(real);
        if (same)
            continue;
        if (*outp)
            strcat(outp, ":");
        strcat(outp, tok);
    }
    setenv("LD_LIBRARY_PATH", outp, 1);
    free(copy);
    free(outp);
}

int cli_start_server(bool foreground, bool every_gpu)
{
    char srv[PATH_MAX], lib[PATH_MAX];
    if (server_path(srv, sizeof srv) < 0) {
        fprintf(stderr, "cumux: cannot find cumuxd (set CUMUX_SERVER_BINARY)\n");
        return 1;
    }
    if (cli_shim_dir(lib, sizeof lib) == 0)
        strip_shim_from_env(lib);
    if (foreground) {
        execl(srv, "cumuxd", "--foreground", (char *)NULL);
        fprintf(stderr, "cumux: cannot run %s: %s\n", srv, strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        /* Started for a program (`cumux run`): the server serves every GPU, and the program's own
         * CUDA_VISIBLE_DEVICES picks among them (the shim reads it). */
        if (every_gpu)
            unsetenv("CUDA_VISIBLE_DEVICES");
        execl(srv, "cumuxd", (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    return 0;
}

int cli_stop(void)
{
    if (cli_request(CUMUX_HELLO_STOP, 0, 0, NULL) < 0) {
        if (errno == EPERM)
            return 1;
        fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
        return 1;
    }
    /* Stopped when the server has let go of its lock, that is when its process is gone. */
    char lock_path[512];
    snprintf(lock_path, sizeof lock_path, "%s/cumuxd.lock", cumux_pipe_directory());
    for (int i = 0; i < 1500; i++) {
        int fd = open(lock_path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            printf("cumuxd stopped\n");
            return 0;
        }
        int free_now = flock(fd, LOCK_EX | LOCK_NB) == 0;
        close(fd);
        if (free_now) {
            printf("cumuxd stopped\n");
            return 0;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "cumux: cumuxd was asked to stop but still runs after 30 s\n");
    return 1;
}

int cli_ensure_server(void)
{
    int s = cli_connect_server();
    if (s < 0 && errno == EPERM)
        return 1; /* someone else's: starting ours there would fail, and the user must choose */
    if (s < 0 && cli_start_server(false, true) != 0) {
        /* Another `cumux run` may have started it at the same moment: give it a few seconds. */
        for (int t = 0; t < 100 && (s = cli_connect_server()) < 0 && errno != EPERM; t++) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (s < 0 && errno == EPERM)
            return 1;
        if (s < 0) {
            fprintf(stderr, "cumux: cannot start cumuxd\n");
            return 1;
        }
    }
    if (s >= 0)
        close(s);
    return 0;
}
