/* cumux hook: an OCI runtime hook (createRuntime), which the Kubernetes device plugin's CDI devices name
 * (kubernetes/, docs/kubernetes.md). The runtime runs it as root once the container's process is in its
 * cgroup and before the container's program starts, with the container's state (JSON: its pid and the
 * annotations the kubelet gave it) on standard input. It gives the container's cgroup, which cumuxd reads
 * as the group of every program in it, the settings of the allocation (`cumux set --group`), and the
 * pod's names as the group's labels for /metrics. Nothing the container's programs can change is used:
 * the kernel names the cgroup, the kubelet the names. A failure fails the container's start, so that a
 * container never runs without the limits it was allocated.
 *   cumux hook [--memory SIZE] [--sms N] [--threads P] [--priority CLASS]   (state on stdin) */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cgroup.h"
#include "common/priority.h"
#include "common/proto.h"
#include "common/size.h"

#define STATE_MAX (1 << 20)

/* The string value of "key" in the JSON text, copied into out when it holds only [A-Za-z0-9._-] (what
 * Kubernetes names are made of); false when absent or anything else. */
static bool json_name(const char *json, const char *key, char *out, size_t cap)
{
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p)
        return false;
    p += strlen(quoted);
    p += strspn(p, " \t\r\n");
    if (*p++ != ':')
        return false;
    p += strspn(p, " \t\r\n");
    if (*p++ != '"')
        return false;
    size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-");
    if (p[n] != '"' || n == 0 || n >= cap)
        return false;
    memcpy(out, p, n);
    out[n] = 0;
    return true;
}

/* The first of keys the annotations hold (containerd's io.kubernetes.cri.* or CRI-O's io.kubernetes.*). */
static bool annotation(const char *json, const char *const *keys, char *out, size_t cap)
{
    const char *a = strstr(json, "\"annotations\"");
    for (; a && *keys; keys++)
        if (json_name(a, *keys, out, cap))
            return true;
    return false;
}

static int set(const struct cumux_group_name *g, uint32_t what, uint64_t value)
{
    cli_group = g;
    int st = cli_request_each(CUMUX_HELLO_SET_GROUP, what, value, stdout);
    cli_group = NULL;
    return st;
}

int cli_hook(int argc, char **argv)
{
    uint64_t memory = 0;
    uint32_t sms = 0, threads = 0;
    enum cumux_priority prio = CUMUX_PRIORITY_NORMAL;
    bool has_memory = false, has_prio = false;
    for (int i = 1; i < argc; i += 2) {
        bool ok = i + 1 < argc;
        if (ok && !strcmp(argv[i], "--memory"))
            ok = has_memory = cumux_parse_size(argv[i + 1], &memory);
        else if (ok && !strcmp(argv[i], "--sms"))
            ok = cumux_parse_count(argv[i + 1], CUMUX_GROUP_SMS_MAX, &sms) && sms;
        else if (ok && !strcmp(argv[i], "--threads"))
            ok = cumux_parse_count(argv[i + 1], 100, &threads) && threads;
        else if (ok && !strcmp(argv[i], "--priority"))
            ok = has_prio = cumux_priority_parse(argv[i + 1], &prio);
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "usage: cumux hook [--memory SIZE] [--sms N] [--threads P] [--priority CLASS]  "
                            "(an OCI hook: the container's state on stdin)\n");
            return 2;
        }
    }
    char *json = malloc(STATE_MAX + 1);
    size_t got = 0;
    for (ssize_t n; json && got < STATE_MAX && (n = read(STDIN_FILENO, json + got, STATE_MAX - got)) != 0;)
        if (n > 0)
            got += (size_t)n;
        else if (errno != EINTR)
            break;
    if (!json) {
        fprintf(stderr, "cumux hook: out of memory\n");
        return 1;
    }
    json[got] = 0;
    const char *p = strstr(json, "\"pid\"");
    long pid = 0;
    if (p && (p = strchr(p, ':')))
        pid = strtol(p + 1, NULL, 10);
    if (pid <= 0 || pid > 0x7fffffffL) {
        fprintf(stderr, "cumux hook: no pid in the container's state on stdin\n");
        free(json);
        return 1;
    }
    struct cumux_group_name g;
    memset(&g, 0, sizeof g);
    cumux_cgroup_of((pid_t)pid, g.path, sizeof g.path);
    if (!strcmp(g.path, "/")) {
        fprintf(stderr, "cumux hook: the container's process %ld has no cgroup of its own\n", pid);
        free(json);
        return 1;
    }
    static const char *const ns_keys[] = {"io.kubernetes.pod.namespace", "io.kubernetes.cri.sandbox-namespace", NULL},
                             *pod_keys[] = {"io.kubernetes.pod.name", "io.kubernetes.cri.sandbox-name", NULL},
                             *ctr_keys[] = {"io.kubernetes.container.name", "io.kubernetes.cri.container-name", NULL};
    char ns[64], pod[64], ctr[64];
    size_t len = 0;
    if (annotation(json, ns_keys, ns, sizeof ns))
        len += (size_t)snprintf(g.labels + len, sizeof g.labels - len, "namespace=%s", ns);
    if (annotation(json, pod_keys, pod, sizeof pod) && len < sizeof g.labels)
        len += (size_t)snprintf(g.labels + len, sizeof g.labels - len, "%spod=%s", len ? "," : "", pod);
    if (annotation(json, ctr_keys, ctr, sizeof ctr) && len < sizeof g.labels)
        len += (size_t)snprintf(g.labels + len, sizeof g.labels - len, "%scontainer=%s", len ? "," : "", ctr);
    if (len >= sizeof g.labels)
        g.labels[0] = 0; /* too long to say: no labels rather than cut ones */
    free(json);
    /* Only what this allocation asks: a container's other allocations' hooks set the rest. The labels
     * last, always (none where the runtime gave no names): they make the group, counted from its start. */
    int st = has_memory ? set(&g, CUMUX_GROUP_MEMORY, memory) : 0;
    if (st == 0 && sms)
        st = set(&g, CUMUX_GROUP_SMS, sms);
    if (st == 0 && threads)
        st = set(&g, CUMUX_GROUP_THREADS, threads);
    if (st == 0 && has_prio)
        st = set(&g, CUMUX_GROUP_PRIORITY, (uint64_t)prio);
    if (st == 0)
        st = set(&g, CUMUX_GROUP_LABELS_SET, 0);
    if (st != 0) {
        fprintf(stderr, "cumux hook: the group %s could not be given its settings%s\n", g.path,
                st < 0 ? " (no cumuxd answers)" : "");
        return 1;
    }
    return 0;
}
