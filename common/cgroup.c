/* A process's cgroup (common/cgroup.h). */
#include <stdio.h>
#include <string.h>

#include "common/cgroup.h"
#include "common/proto.h"

void cumux_cgroup_of(pid_t pid, char *out, size_t cap)
{
    /* cgroup v2's line (0::PATH) where it says more than "/", else systemd's v1 hierarchy, else the first */
    char path[64], line[CUMUX_GROUP_PATH + 64], v2[CUMUX_GROUP_PATH] = "", v1[CUMUX_GROUP_PATH] = "",
                                               first[CUMUX_GROUP_PATH] = "";
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(path, "re");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b || b[1] != '/' || strlen(b + 1) >= CUMUX_GROUP_PATH)
            continue;
        const char *p = b + 1;
        if (!strncmp(line, "0::", 3))
            snprintf(v2, sizeof v2, "%s", p);
        else if (!strncmp(a + 1, "name=systemd:", 13))
            snprintf(v1, sizeof v1, "%s", p);
        else if (!first[0])
            snprintf(first, sizeof first, "%s", p);
    }
    if (f)
        fclose(f);
    const char *pick = v2[0] && strcmp(v2, "/") ? v2 : v1[0] ? v1 : first[0] ? first : v2[0] ? v2 : "/";
    snprintf(out, cap, "%s", pick);
    for (char *p = out; *p; p++) /* one word in the records; cgroup paths have no such characters anyway */
        if (*p <= ' ' || *p == '"' || *p == '\\' || *p > '~')
            *p = '_';
}

