/* A process's cgroup, as cumux names groups by it (server/groups.c, the CLI's OCI hook). */
#ifndef CUMUX_CGROUP_H
#define CUMUX_CGROUP_H

#include <stddef.h>
#include <sys/types.h>

/* The cgroup of process pid: cgroup v2's line (0::PATH) where it says more than "/", else systemd's v1
 * hierarchy, else the first; one word (characters outside ! to ~, " and \ become _); "/" when unknown. */
void cumux_cgroup_of(pid_t pid, char *out, size_t cap);

#endif
