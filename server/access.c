/* Who may use cumuxd besides its own user and root (CUMUX_USERS): by default no one, as with MPS's
 * per-user servers. A system service serving a machine's users sets CUMUX_USERS=all, or a list of user
 * names, uids and @groups (CUMUX_USERS=alice,1001,@gpu). Those users' programs get GPU work served (CLIENT,
 * RESUME hellos) and may read `cumux status`; everything that changes the server or another's program
 * (limits, defaults, kill, stop, reload) stays with the server's user and root. The kernel names the user:
 * SO_PEERCRED's uid and gid, and the process's supplementary groups from /proc. The listening sockets are
 * then open to everyone (0666) and the pipe directory may be readable by others (never writable), since
 * the check is here. docs/security.md says what sharing one server means. */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/log.h"
#include "server/main.h"

#define ACCESS_MAX 64

static bool access_all;
static uid_t access_uids[ACCESS_MAX];
static gid_t access_gids[ACCESS_MAX];
static int naccess_uids, naccess_gids;

bool srv_access_parse(const char *spec)
{
    access_all = false;
    naccess_uids = naccess_gids = 0;
    if (!spec || !*spec)
        return true;
    if (!strcmp(spec, "all")) {
        access_all = true;
        return true;
    }
    char *copy = strdup(spec), *save = NULL;
    if (!copy)
        return false;
    bool ok = true;
    for (char *w = strtok_r(copy, ",", &save); ok && w; w = strtok_r(NULL, ",", &save)) {
        char *end;
        if (w[0] == '@') {
            struct group *g = getgrnam(w + 1);
            unsigned long id = strtoul(w + 1, &end, 10);
            ok = naccess_gids < ACCESS_MAX && (g || (w[1] && !*end));
            if (ok)
                access_gids[naccess_gids++] = g ? g->gr_gid : (gid_t)id;
        } else {
            struct passwd *p = getpwnam(w);
            unsigned long id = strtoul(w, &end, 10);
            ok = naccess_uids < ACCESS_MAX && (p || (w[0] && !*end));
            if (ok)
                access_uids[naccess_uids++] = p ? p->pw_uid : (uid_t)id;
        }
        if (!ok)
            fprintf(stderr, "cumuxd: CUMUX_USERS: %s is no user, uid or @group (or more than %d of them)\n", w,
                    ACCESS_MAX);
    }
    free(copy);
    return ok;
}

bool srv_access_open(void)
{
    return access_all || naccess_uids || naccess_gids;
}

/* Is gid one of pid's groups (its credentials' gid, or a supplementary group)? */
static bool in_group(pid_t pid, gid_t peer_gid, gid_t gid)
{
    if (peer_gid == gid)
        return true;
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "Groups:", 7))
            continue;
        char *p = line + 7, *end;
        for (unsigned long v = strtoul(p, &end, 10); end != p; p = end, v = strtoul(p, &end, 10))
            found |= (gid_t)v == gid;
        break;
    }
    if (f)
        fclose(f);
    return found;
}

bool srv_access_may_use(uid_t uid, gid_t gid, pid_t pid)
{
    if (uid == getuid() || uid == 0 || access_all)
        return true;
    for (int i = 0; i < naccess_uids; i++)
        if (access_uids[i] == uid)
            return true;
    for (int i = 0; i < naccess_gids; i++)
        if (in_group(pid, gid, access_gids[i]))
            return true;
    return false;
}
