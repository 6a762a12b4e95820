/* cumux cdi: a Container Device Interface spec (github.com/cncf-tags/container-device-interface, spec
 * 0.6.0) for device cumux.io/gpu=all: what a CDI-aware runtime (podman --device cumux.io/gpu=all, containerd,
 * CRI-O) does to a container so that its CUDA programs run on this machine's cumuxd. The shim is mounted
 * read-only over the container's libcuda.so.1 where NVIDIA's container toolkit puts the driver's, and
 * beside it in a directory of its own that LD_LIBRARY_PATH names first; the pipe directory is mounted at
 * /run/cumux, and CUMUX_PIPE_DIRECTORY says so. The container's programs are then one client group, its
 * cgroup (server/groups.c), which `cumux set --group` gives a memory limit, priority and SMs: the spec
 * carries no limit, since a container may change its environment but not its cgroup. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/sock.h"

/* A JSON string of s (paths and variables: only quote and backslash need escaping; control characters are
 * refused earlier). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

int cli_cdi(int argc, char **argv)
{
    const char *out_path = NULL, *lib_in = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--output") && i + 1 < argc) {
            out_path = argv[++i];
        } else if (!strcmp(argv[i], "--driver-path") && i + 1 < argc) {
            lib_in = argv[++i];
        } else {
            fprintf(stderr, "usage: cumux cdi [--output FILE] [--driver-path PATH_IN_CONTAINER]\n"
                            "  a CDI spec for cumux.io/gpu=all (e.g. --output /etc/cdi/cumux.json), for this\n"
                            "  pipe directory (CUMUX_PIPE_DIRECTORY) and this cumux's shim; PATH_IN_CONTAINER:\n"
                            "  where the container's libcuda.so.1 is (default %s)\n", lib_in);
            return 2;
        }
    }
    char dir[PATH_MAX], shim[PATH_MAX + 16], pipe[PATH_MAX];
    if (cli_shim_dir(dir, sizeof dir) < 0) {
        fprintf(stderr, "cumux: cannot find the shim libcuda.so.1 (set CUMUX_LIB_DIRECTORY)\n");
        return 1;
    }
    snprintf(shim, sizeof shim, "%s/libcuda.so.1", dir);
    if (!realpath(cumux_pipe_directory(), pipe)) {
        fprintf(stderr, "cumux: the pipe directory %s does not exist: start cumuxd first (or make it)\n",
                cumux_pipe_directory());
        return 1;
    }
    if (!printable(shim) || !printable(pipe) || !printable(lib_in) || lib_in[0] != '/') {
        fprintf(stderr, "cumux: a path with control characters, or a relative --driver-path\n");
        return 2;
    }
    FILE *f = out_path ? fopen(out_path, "we") : stdout;
    if (!f) {
        perror(out_path);
        return 1;
    }
    fprintf(f, "{\n  \"cdiVersion\": \"0.6.0\",\n  \"kind\": \"cumux.io/gpu\",\n  \"devices\": [\n    {\n"
               "      \"name\": \"all\",\n      \"containerEdits\": {\n        \"env\": [\n");
    fprintf(f, "          \"CUMUX_PIPE_DIRECTORY=/run/cumux\",\n          \"LD_LIBRARY_PATH=/usr/local/cumux/lib\"\n");
    fprintf(f, "        ],\n        \"mounts\": [\n");
    const char *targets[] = {"/usr/local/cumux/lib/libcuda.so.1", lib_in};
    for (int i = 0; i < 2; i++) {
        fprintf(f, "          {\"hostPath\": ");
        json_string(f, shim);
        fprintf(f, ", \"containerPath\": ");
        json_string(f, targets[i]);
        fprintf(f, ", \"options\": [\"ro\", \"nosuid\", \"nodev\", \"bind\"]},\n");
    }
    fprintf(f, "          {\"hostPath\": ");
    json_string(f, pipe);
    fprintf(f, ", \"containerPath\": \"/run/cumux\", \"options\": [\"rw\", \"nosuid\", \"nodev\", \"bind\"]}\n");
    fprintf(f, "        ]\n      }\n    }\n  ]\n}\n");
    if (out_path && fclose(f) != 0) {
        perror(out_path);
        return 1;
    }
    return 0;
}
