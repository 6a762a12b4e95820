/* cumuxd's settings file (`cumuxd --config FILE`; the service's /etc/cumux/cumuxd.conf): VARIABLE=value
 * lines of the server's CUMUX_* (and CUDA_*) variables, as systemd's EnvironmentFile reads them: blank
 * lines and lines starting with # or ; are skipped, a value may be in single or double quotes. At start
 * the file's entries are put into the environment, over what was there, before anything reads it. On
 * SIGHUP (`cumux reload`, the service's ExecReload) the supervisor reads it again and applies at once what
 * can change under running clients: the defaults that programs connecting from then on get (memory limit,
 * priority, thread percentage) and client groups' settings (CUMUX_GROUPS; a group's memory limit holds at
 * once for its running programs, its priority and SMs for those that connect after). A live setting the file no longer names goes back to what the
 * environment said at start. Any other change is logged as one that waits for the next start. A file
 * that does not read right changes nothing. Clients already running keep what they have. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/priority.h"
#include "common/size.h"
#include "server/config.h"
#include "server/groups.h"
#include "server/server.h"
#include "server/supervisor.h"

#define CONFIG_MAX_ENTRIES 128
#define CONFIG_LINE 1024

struct config_entry {
    char key[64];
    char value[CONFIG_LINE];
};

struct config {
    struct config_entry e[CONFIG_MAX_ENTRIES];
    int n;
};

static char config_path[4096];
static struct config config_now; /* as last read */
/* The live settings' values in the environment at start (NULL: unset), for a file that drops them. */
static const char *const live_keys[] = {"CUMUX_DEFAULT_MEMORY_LIMIT", "CUMUX_DEFAULT_PRIORITY", "CUMUX_DEFAULT_THREADS",
                                        "CUMUX_GROUPS"};
#define NLIVE (sizeof live_keys / sizeof live_keys[0])
static char *live_at_start[NLIVE];

static const char *config_get(const struct config *c, const char *key)
{
    for (int i = c->n - 1; i >= 0; i--) /* the last line naming it, as systemd takes it */
        if (!strcmp(c->e[i].key, key))
            return c->e[i].value;
    return NULL;
}

/* Reads path into *out; false and *why when it cannot be read or has a line that is not VARIABLE=value. */
static bool config_read(const char *path, struct config *out, char *why, size_t why_len)
{
    out->n = 0;
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return false;
    }
    char line[CONFIG_LINE + 80];
    bool ok = true;
    for (int no = 1; ok && fgets(line, sizeof line, f); no++) {
        size_t len = strlen(line);
        if (len && line[len - 1] != '\n' && !feof(f)) {
            snprintf(why, why_len, "%s:%d: line too long", path, no);
            ok = false;
            break;
        }
        while (len && isspace((unsigned char)line[len - 1]))
            line[--len] = 0;
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#' || *p == ';')
            continue;
        char *eq = strchr(p, '=');
        size_t klen = eq ? (size_t)(eq - p) : 0;
        bool name_ok = klen > 0 && klen < sizeof out->e[0].key && (isupper((unsigned char)*p) || *p == '_');
        for (size_t i = 0; name_ok && i < klen; i++)
            name_ok = isupper((unsigned char)p[i]) || isdigit((unsigned char)p[i]) || p[i] == '_';
        if (!name_ok || (strncmp(p, "CUMUX_", 6) && strncmp(p, "CUDA_", 5))) {
            snprintf(why, why_len, "%s:%d: not CUMUX_VARIABLE=value nor CUDA_VARIABLE=value", path, no);
            ok = false;
            break;
        }
        char *v = eq + 1;
        size_t vlen = strlen(v);
        if (vlen >= 2 && (v[0] == '"' || v[0] == '\'') && v[vlen - 1] == v[0]) {
            v[vlen - 1] = 0;
            v++;
        }
        if (out->n == CONFIG_MAX_ENTRIES || strlen(v) >= sizeof out->e[0].value) {
            snprintf(why, why_len, "%s:%d: too many settings or too long a value", path, no);
            ok = false;
            break;
        }
        struct config_entry *e = &out->e[out->n++];
        memcpy(e->key, p, klen);
        e->key[klen] = 0;
        snprintf(e->value, sizeof e->value, "%s", v);
    }
    fclose(f);
    return ok;
}

/* The live settings, checked all before any is applied. */
struct live {
    uint64_t mem[CUMUX_MAX_DEVICES];
    int priority;
    unsigned percent;
};

static bool live_parse(const char *const values[NLIVE], struct live *l, char *why, size_t why_len)
{
    const char *dml = values[0], *prio = values[1], *thr = values[2];
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++) {
        l->mem[g] = 0;
        if (dml && *dml && !cumux_parse_device_limits(dml, g, &l->mem[g])) {
            snprintf(why, why_len, "CUMUX_DEFAULT_MEMORY_LIMIT=%s: not a size (4G, 512M) nor 0=SIZE,1=SIZE", dml);
            return false;
        }
    }
    enum cumux_priority p = CUMUX_PRIORITY_NORMAL;
    if (prio && *prio && !cumux_priority_parse(prio, &p)) {
        snprintf(why, why_len, "CUMUX_DEFAULT_PRIORITY=%s: not high, normal or low", prio);
        return false;
    }
    l->priority = (int)p;
    l->percent = 0;
    if (thr && *thr) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(thr, &end, 10);
        if (errno || *end || end == thr || v < 1 || v > 100) {
            snprintf(why, why_len, "CUMUX_DEFAULT_THREADS=%s: not a percentage from 1 to 100", thr);
            return false;
        }
        l->percent = v >= 100 ? 0 : (unsigned)v;
    }
    return true;
}

/* CUMUX_GROUPS: client groups' settings, "CGROUP:memory=8G,priority=low,threads=50,sms=16 CGROUP2:memory=4G"
 * (entries apart by spaces or semicolons; a setting not named is none), as `cumux set --group` gives. */
#define CONFIG_MAX_GROUPS 64
struct group_entry {
    char path[CUMUX_GROUP_PATH];
    uint64_t memory;
    uint64_t priority; /* CUMUX_GROUP_NONE: none */
    unsigned threads;  /* 0: none */
    unsigned sms;      /* reserved on each GPU; 0: none */
};
static struct group_entry groups_now[CONFIG_MAX_GROUPS]; /* as the file (or start) last gave them */
static int ngroups_now;

static bool groups_parse(const char *spec, struct group_entry *out, int *n, char *why, size_t why_len)
{
    *n = 0;
    if (!spec)
        return true;
    char *copy = strdup(spec), *save = NULL;
    if (!copy) {
        snprintf(why, why_len, "CUMUX_GROUPS: out of memory");
        return false;
    }
    bool ok = true;
    for (char *e = strtok_r(copy, " \t;", &save); ok && e; e = strtok_r(NULL, " \t;", &save)) {
        char *colon = strrchr(e, ':');
        ok = colon && e[0] == '/' && colon - e < CUMUX_GROUP_PATH && *n < CONFIG_MAX_GROUPS;
        if (!ok)
            break;
        struct group_entry *g = &out[(*n)++];
        *g = (struct group_entry){.priority = CUMUX_GROUP_NONE};
        memcpy(g->path, e, (size_t)(colon - e));
        char *save2 = NULL;
        for (char *kv = strtok_r(colon + 1, ",", &save2); ok && kv; kv = strtok_r(NULL, ",", &save2)) {
            char *v = strchr(kv, '=');
            enum cumux_priority p;
            char *end;
            if (!v)
                ok = false;
            else if (!strncmp(kv, "memory=", 7))
                ok = cumux_parse_size(v + 1, &g->memory);
            else if (!strncmp(kv, "priority=", 9))
                ok = !strcmp(v + 1, "none") ? true : cumux_priority_parse(v + 1, &p) && (g->priority = p, true);
            else if (!strncmp(kv, "threads=", 8))
                ok = !strcmp(v + 1, "none") || ((g->threads = (unsigned)strtoul(v + 1, &end, 10)) >= 1 && g->threads <= 100 && !*end);
            else if (!strncmp(kv, "sms=", 4))
                ok = !strcmp(v + 1, "none") || ((g->sms = (unsigned)strtoul(v + 1, &end, 10)) >= 1 &&
                                                g->sms <= CUMUX_GROUP_SMS_MAX && !*end);
            else
                ok = false;
        }
    }
    if (!ok)
        snprintf(why, why_len, "CUMUX_GROUPS=%s: not CGROUP:memory=SIZE,priority=CLASS,threads=PERCENT,sms=N entries "
                 "(a cgroup path, at most %d of them)", spec, CONFIG_MAX_GROUPS);
    free(copy);
    return ok;
}

/* The groups the file names get its settings (those it does not name: none); groups it named before and
 * no longer does lose theirs. */
static void groups_apply(const struct group_entry *g, int n)
{
    char text[512];
    for (int i = 0; i < ngroups_now; i++) {
        bool kept = false;
        for (int j = 0; j < n && !kept; j++)
            kept = !strcmp(groups_now[i].path, g[j].path);
        if (!kept) {
            srv_group_rule_set(groups_now[i].path, CUMUX_GROUP_MEMORY, 0, text, sizeof text);
            srv_group_rule_set(groups_now[i].path, CUMUX_GROUP_PRIORITY, CUMUX_GROUP_NONE, text, sizeof text);
            srv_group_rule_set(groups_now[i].path, CUMUX_GROUP_THREADS, 0, text, sizeof text);
            srv_group_rule_set(groups_now[i].path, CUMUX_GROUP_SMS, 0, text, sizeof text);
        }
    }
    for (int j = 0; j < n; j++) {
        if (srv_group_rule_set(g[j].path, CUMUX_GROUP_MEMORY, g[j].memory, text, sizeof text) < 0 ||
            srv_group_rule_set(g[j].path, CUMUX_GROUP_PRIORITY, g[j].priority, text, sizeof text) < 0 ||
            srv_group_rule_set(g[j].path, CUMUX_GROUP_THREADS, g[j].threads, text, sizeof text) < 0 ||
            srv_group_rule_set(g[j].path, CUMUX_GROUP_SMS, g[j].sms, text, sizeof text) < 0)
            cumux_logf("CUMUX_GROUPS: %s: %.*s", g[j].path, (int)strcspn(text, "\n"), text);
    }
    memcpy(groups_now, g, (size_t)n * sizeof *g);
    ngroups_now = n;
}

static void live_apply(const struct live *l)
{
    for (int g = 0; g < CUMUX_MAX_DEVICES; g++)
        srv_set_default_mem_limit(g, l->mem[g]);
    srv_set_default_priority(l->priority);
    srv_set_default_thread_percent(l->percent);
}

bool srv_config_start(const char *path)
{
    for (size_t i = 0; i < NLIVE; i++) {
        const char *v = getenv(live_keys[i]);
        live_at_start[i] = v ? strdup(v) : NULL;
    }
    char why[512];
    if (path) {
        if (strlen(path) >= sizeof config_path) {
            fprintf(stderr, "cumuxd: --config: path too long\n");
            return false;
        }
        snprintf(config_path, sizeof config_path, "%s", path);
        if (!config_read(path, &config_now, why, sizeof why)) {
            fprintf(stderr, "cumuxd: --config %s\n", why);
            return false;
        }
        for (int i = 0; i < config_now.n; i++)
            setenv(config_now.e[i].key, config_now.e[i].value, 1);
    }
    const char *values[NLIVE];
    for (size_t i = 0; i < NLIVE; i++)
        values[i] = getenv(live_keys[i]);
    struct live l;
    static struct group_entry g[CONFIG_MAX_GROUPS];
    int ng = 0;
    if (!live_parse(values, &l, why, sizeof why) || !groups_parse(values[3], g, &ng, why, sizeof why)) {
        fprintf(stderr, "cumuxd: %s\n", why);
        return false;
    }
    live_apply(&l);
    groups_apply(g, ng); /* kept until the supervisor's page exists (groups.c) */
    return true;
}

/* The outcome, for the worker that asked (CUMUX_HELLO_RELOAD) and the log. */
static void reload_said(bool ok, const char *text)
{
    if (ok)
        cumux_logf("%s", text);
    else
        cumux_logf("reload: %s; nothing changed", text);
    if (sup_page) {
        /* What does not fit is in the log. */
        const char *pre = ok ? "" : "not reloaded: ";
        size_t cap = sizeof sup_page->reload_text, lp = strlen(pre), lt = strlen(text);
        if (lt > cap - 1 - lp)
            lt = cap - 1 - lp;
        memcpy(sup_page->reload_text, pre, lp);
        memcpy(sup_page->reload_text + lp, text, lt);
        sup_page->reload_text[lp + lt] = 0;
        atomic_store(&sup_page->reload_failed, ok ? 0 : 1);
        atomic_fetch_add_explicit(&sup_page->reloads, 1, memory_order_release);
    }
}

void srv_config_reload(void)
{
    if (!config_path[0]) {
        reload_said(false, "cumuxd was started without --config FILE: there is nothing to read again");
        return;
    }
    static struct config next; /* large: not on the stack */
    char why[512];
    if (!config_read(config_path, &next, why, sizeof why)) {
        reload_said(false, why);
        return;
    }
    const char *values[NLIVE];
    for (size_t i = 0; i < NLIVE; i++) {
        values[i] = config_get(&next, live_keys[i]);
        if (!values[i])
            values[i] = live_at_start[i];
    }
    struct live l;
    static struct group_entry g[CONFIG_MAX_GROUPS];
    int ng = 0;
    if (!live_parse(values, &l, why, sizeof why) || !groups_parse(values[3], g, &ng, why, sizeof why)) {
        reload_said(false, why);
        return;
    }
    live_apply(&l);
    groups_apply(g, ng);
    /* What changed that only a start takes: set anew, changed, or no longer set. */
    char later[400] = "";
    size_t used = 0;
    for (int pass = 0; pass < 2; pass++) {
        const struct config *from = pass ? &config_now : &next, *other = pass ? &next : &config_now;
        for (int i = 0; i < from->n; i++) {
            const char *k = from->e[i].key, *mine = config_get(from, k), *theirs = config_get(other, k);
            bool live = false;
            for (size_t j = 0; j < NLIVE; j++)
                live |= !strcmp(k, live_keys[j]);
            if (live || mine != from->e[i].value /* a later line names it */ || (theirs && !strcmp(theirs, mine)) ||
                (pass && theirs))
                continue;
            int w = snprintf(later + used, sizeof later - used, "%s%s", used ? ", " : "", k);
            if (w > 0 && (size_t)w < sizeof later - used)
                used += (size_t)w;
        }
    }
    config_now = next;
    char *text = NULL; /* the path may be long: the page keeps what fits */
    if (asprintf(&text, "reloaded %s: default memory limit %s, priority %s, thread percentage %s, %d group(s)%s%s",
                 config_path, values[0] && *values[0] ? values[0] : "none",
                 cumux_priority_name((enum cumux_priority)l.priority), values[2] && *values[2] ? values[2] : "100", ng,
                 used ? "; changed, for the next start: " : "", later) < 0)
        text = NULL;
    reload_said(true, text ? text : "reloaded");
    free(text);
}
