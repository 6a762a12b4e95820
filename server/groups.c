/* Client groups (issue 41): what people share a GPU between is jobs and containers, not processes. A group
 * is named by the kernel, never by the program: a client's cgroup, read from /proc of the pid the socket's
 * SO_PEERCRED gave when it connected. The administrator gives a group settings with `cumux set --group
 * PATH` (hello SET_GROUP): its programs are those whose cgroup is PATH or below it (a pod's containers lie
 * under the pod's cgroup; the deepest rule a client falls under is its group).
 * - Memory: the group's device memory on each GPU at most; each member sees its GPU as that much, less
 *   what the others of the group hold (cuMemGetInfo, cuDeviceTotalMem), and an allocation past what the
 *   group has left fails with CUDA_ERROR_OUT_OF_MEMORY. Its own limit (cumux run --memory...) holds too.
 * - Priority and active thread percentage: every member's, as `cumux set PID` would set them, from its
 *   connection on (and at once for members already there when the rule changes).
 * The rules live in the supervisor's page (every GPU's worker and any replacement sees them); what a
 * group holds on a GPU is counted by that GPU's worker (all its members there are its clients), under
 * groups_lock. `cumux status`, the records and /metrics name each client's group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cgroup.h"
#include "common/log.h"
#include "common/priority.h"
#include "server/groups.h"
#include "server/handlers.h"
#include "server/supervisor.h"

/* What a group's members hold on this worker's GPU. */
struct srv_group {
    int rule;     /* index in sup_page->groups */
    uint32_t gen; /* of the rule then: another generation is another group */
    uint64_t bytes, peak;
    uint64_t gpu_ns_gone; /* GPU time of members that went */
    unsigned members;
    struct srv_group *next;
};

static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;
static struct srv_group *groups;

/* The rules: the supervisor's page once it is there; before (the settings file at start), these, which
 * srv_groups_page_ready hands over. */
static struct sup_groups pending;
static struct sup_groups *T(void)
{
    return sup_page ? &sup_page->groups : &pending;
}

void srv_groups_page_ready(void)
{
    if (sup_page && atomic_load(&pending.n))
        memcpy(&sup_page->groups, &pending, sizeof pending); /* before any worker: no one else reads them */
}

static void rules_lock(void)
{
    while (atomic_exchange_explicit(&T()->lock, 1, memory_order_acquire))
        ;
}

static void rules_unlock(void)
{
    atomic_store_explicit(&T()->lock, 0, memory_order_release);
}

/* Is cgroup at rule (or below it)? */
static bool under(const char *cgroup, const char *rule)
{
    size_t n = strlen(rule);
    while (n > 1 && rule[n - 1] == '/')
        n--;
    if (n == 1 && rule[0] == '/')
        return true;
    return !strncmp(cgroup, rule, n) && (cgroup[n] == 0 || cgroup[n] == '/');
}

/* The deepest rule the cgroup falls under, or -1. */
static int rule_of(const char *cgroup)
{
    int best = -1;
    size_t best_len = 0;
    rules_lock();
    uint32_t n = atomic_load(&T()->n);
    for (uint32_t i = 0; i < n && i < SRV_GROUPS_MAX; i++) {
        const char *r = T()->rule[i].path;
        size_t l = strlen(r);
        if (r[0] && under(cgroup, r) && (best < 0 || l > best_len)) {
            best = (int)i;
            best_len = l;
        }
    }
    rules_unlock();
    return best;
}

/* c joins the counter of rule r (-1: none). groups_lock held. */
static void attach(struct srv_client *c, int r)
{
    struct srv_group *old = c->group.group, *g = NULL;
    if (!old && r < 0)
        return;
    if (old && r >= 0 && r < SRV_GROUPS_MAX && old->rule == r && old->gen == atomic_load(&T()->rule[r].gen))
        return;
    if (r >= 0) {
        uint32_t gen = atomic_load(&T()->rule[r].gen);
        for (struct srv_group **p = &groups; *p;) { /* counts of forgotten rules that nobody holds go */
            struct srv_group *x = *p;
            if (x->gen != atomic_load(&T()->rule[x->rule].gen) && !x->members && x != old) {
                *p = x->next;
                free(x);
            } else {
                p = &x->next;
            }
        }
        for (g = groups; g && !(g->rule == r && g->gen == gen);)
            g = g->next;
        if (!g && (g = calloc(1, sizeof *g))) {
            g->rule = r;
            g->gen = gen;
            g->next = groups;
            groups = g;
        }
        if (!g)
            cumux_logf("client %u: out of memory for its group's count: not counted in the group", c->id);
    }
    uint64_t held = atomic_load(&c->memory.mem_bytes);
    if (old) {
        old->bytes -= held < old->bytes ? held : old->bytes;
        old->members--;
    }
    if (g) {
        g->bytes += held;
        g->members++;
    }
    c->group.group = g;
    srv_placement_in_group(c, g ? g->rule : -1, g ? g->gen : 0); /* the group's SMs, where it has some */
}

/* A rule added since c's group was found (the settings file reloaded, another worker's `cumux set
 * --group`) may be its group now. groups_lock held. */
static void refresh(struct srv_client *c)
{
    uint32_t v = atomic_load(&T()->version);
    if (v != c->group.seen_version) {
        c->group.seen_version = v;
        attach(c, rule_of(c->group.cgroup));
    }
}

/* A rule's priority and thread percentage, on member c. */
static void apply_rule(struct srv_client *c, int r)
{
    if (r < 0)
        return;
    int32_t prio = atomic_load(&T()->rule[r].priority);
    uint32_t pct = atomic_load(&T()->rule[r].percent);
    if (prio >= 0)
        atomic_store(&c->streams.priority, (int)prio);
    if (pct) {
        char why[200];
        if (srv_placement_want(c, atomic_load(&c->placement.want_sms), pct, why, sizeof why) != 0)
            cumux_logf("client %u: its group's thread percentage %u: %s", c->id, pct, why);
    }
}

void srv_group_join(struct srv_client *c)
{
    cumux_cgroup_of(c->pid, c->group.cgroup, sizeof c->group.cgroup);
    c->group.seen_version = atomic_load(&T()->version);
    int r = rule_of(c->group.cgroup);
    pthread_mutex_lock(&groups_lock);
    attach(c, r);
    pthread_mutex_unlock(&groups_lock);
    int32_t prio = r >= 0 ? atomic_load(&T()->rule[r].priority) : -1;
    if (prio >= 0) /* its thread percentage comes with its INIT (srv_group_wants) */
        atomic_store(&c->streams.priority, (int)prio);
}

void srv_group_wants(struct srv_client *c, int *priority, uint32_t *percent)
{
    pthread_mutex_lock(&groups_lock);
    int r = c->group.group ? c->group.group->rule : -1;
    pthread_mutex_unlock(&groups_lock);
    if (r < 0)
        return;
    int32_t prio = atomic_load(&T()->rule[r].priority);
    uint32_t pct = atomic_load(&T()->rule[r].percent);
    if (prio >= 0)
        *priority = (int)prio;
    if (pct)
        *percent = pct;
}

void srv_group_leave(struct srv_client *c)
{
    srv_usage_refresh(c);
    pthread_mutex_lock(&groups_lock);
    if (c->group.group)
        c->group.group->gpu_ns_gone += atomic_load(&c->usage.gpu_ns);
    attach(c, -1);
    pthread_mutex_unlock(&groups_lock);
}

/* No rule was ever made (the count only grows): no client is in a group, and the allocation paths need
 * not take the lock every client's allocations share. */
static bool no_groups(void)
{
    return atomic_load_explicit(&T()->n, memory_order_acquire) == 0;
}

/* This worker's reservation for rule r follows the rule's SMs on its GPU (quiet: a failure said once). */
static int follow_rule(int r, bool again, char *why, size_t cap)
{
    int g = srv_gpu_served;
    if (g < 0 || g >= CUMUX_MAX_DEVICES)
        return 0;
    uint32_t gen = atomic_load(&T()->rule[r].gen), sms = atomic_load(&T()->rule[r].sms[g]);
    return srv_placement_group(r, gen, sms, again, why, cap);
}

static uint32_t followed_version = 0;
void srv_groups_follow(void)
{
    if (no_groups() || !sup_page)
        return;
    uint32_t v = atomic_load(&T()->sms_version);
    if (v == followed_version)
        return;
    followed_version = v;
    uint32_t n = atomic_load(&T()->n);
    for (uint32_t i = 0; i < n && i < SRV_GROUPS_MAX; i++) {
        char why[200];
        if (follow_rule((int)i, false, why, sizeof why) == -1) {
            rules_lock();
            cumux_logf("group %s: its SMs: %s", T()->rule[i].path, why);
            rules_unlock();
        }
    }
}

CUresult srv_group_charge(struct srv_client *c, uint64_t size)
{
    if (no_groups())
        return CUDA_SUCCESS;
    pthread_mutex_lock(&groups_lock);
    refresh(c);
    struct srv_group *g = c->group.group;
    uint64_t limit = g ? atomic_load(&T()->rule[g->rule].mem_limit[srv_gpu_served]) : 0;
    CUresult r = limit && (size > limit || g->bytes > limit - size) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && g && (g->bytes += size) > g->peak)
        g->peak = g->bytes;
    pthread_mutex_unlock(&groups_lock);
    return r;
}

void srv_group_uncharge(struct srv_client *c, uint64_t size)
{
    if (no_groups())
        return;
    pthread_mutex_lock(&groups_lock);
    struct srv_group *g = c->group.group;
    if (g)
        g->bytes -= size < g->bytes ? size : g->bytes;
    pthread_mutex_unlock(&groups_lock);
}

uint64_t srv_group_room(struct srv_client *c)
{
    if (no_groups())
        return UINT64_MAX;
    pthread_mutex_lock(&groups_lock);
    refresh(c);
    struct srv_group *g = c->group.group;
    uint64_t limit = g ? atomic_load(&T()->rule[g->rule].mem_limit[srv_gpu_served]) : 0, room = UINT64_MAX;
    if (limit) {
        uint64_t mine = atomic_load(&c->memory.mem_bytes), others = g->bytes > mine ? g->bytes - mine : 0;
        room = others < limit ? limit - others : 0;
    }
    pthread_mutex_unlock(&groups_lock);
    return room;
}

void srv_group_label(struct srv_client *c, char *out, size_t cap)
{
    pthread_mutex_lock(&groups_lock);
    int r = c->group.group ? c->group.group->rule : -1;
    pthread_mutex_unlock(&groups_lock);
    if (r >= 0) {
        rules_lock();
        snprintf(out, cap, "%s", T()->rule[r].path);
        rules_unlock();
    } else {
        snprintf(out, cap, "%s", c->group.cgroup[0] ? c->group.cgroup : "/");
    }
}

size_t srv_groups_snapshot(struct srv_group_stat *out, size_t max)
{
    size_t n = 0;
    rules_lock();
    uint32_t nr = atomic_load(&T()->n);
    for (uint32_t i = 0; i < nr && i < SRV_GROUPS_MAX && n < max; i++) {
        struct sup_group_rule *r = &T()->rule[i];
        if (!r->path[0]) /* forgotten */
            continue;
        out[n] = (struct srv_group_stat){.limit = atomic_load(&r->mem_limit[srv_gpu_served]),
                                         .priority = atomic_load(&r->priority), .percent = atomic_load(&r->percent),
                                         .sms = atomic_load(&r->sms[srv_gpu_served])};
        snprintf(out[n].path, sizeof out[n].path, "%s", r->path);
        snprintf(out[n].labels, sizeof out[n].labels, "%s", r->labels);
        out[n++].rule = (int)i;
    }
    rules_unlock();
    pthread_mutex_lock(&groups_lock);
    for (size_t k = 0; k < n; k++)
        for (struct srv_group *g = groups; g; g = g->next)
            if (g->rule == out[k].rule && g->gen == atomic_load(&T()->rule[g->rule].gen)) {
                out[k].bytes = g->bytes;
                out[k].peak = g->peak;
                out[k].gpu_ns = g->gpu_ns_gone; /* the live members' is added by the caller */
                out[k].members = g->members;
            }
    pthread_mutex_unlock(&groups_lock);
    return n;
}

/* The rule's SMs: a worker reserves them on its GPU at once (the request fails, the old setting kept,
 * where they cannot be had there); elsewhere (the supervisor: the settings file) every GPU's, which each
 * worker follows. */
static int sms_set(int r, uint32_t sms, char *text, size_t cap)
{
    struct sup_group_rule *g = &T()->rule[r];
    int d = srv_gpu_served;
    if (d < 0 || d >= CUMUX_MAX_DEVICES) {
        for (int k = 0; k < CUMUX_MAX_DEVICES; k++)
            atomic_store(&g->sms[k], sms);
        atomic_fetch_add(&T()->sms_version, 1);
        return r;
    }
    uint32_t before = atomic_exchange(&g->sms[d], sms);
    char why[200];
    if (follow_rule(r, true, why, sizeof why) != 0) {
        atomic_store(&g->sms[d], before);
        snprintf(text, cap, "GPU %d: %s\n", d, why);
        return -1;
    }
    atomic_fetch_add(&T()->sms_version, 1);
    return r;
}

int srv_group_rule_set(const char *path, uint32_t what, uint64_t value, char *text, size_t cap)
{
    size_t len = strnlen(path, CUMUX_GROUP_PATH);
    if (len == 0 || len >= CUMUX_GROUP_PATH || path[0] != '/' || strstr(path, "//") || strstr(path, "/../") ||
        (len >= 3 && !strcmp(path + len - 3, "/..")) || strpbrk(path, " \t\n\"\\")) {
        snprintf(text, cap, "a group is a cgroup path: /a/b (read in /proc/PID/cgroup)\n");
        return -1;
    }
    if (what == CUMUX_GROUP_KILL)
        return -2; /* no rule: control.c ends the programs */
    if ((what == CUMUX_GROUP_PRIORITY && value != CUMUX_GROUP_NONE && (value < CUMUX_PRIORITY_LOW || value > CUMUX_PRIORITY_HIGH)) ||
        (what == CUMUX_GROUP_THREADS && value > 100) || (what == CUMUX_GROUP_SMS && value > CUMUX_GROUP_SMS_MAX) ||
        (what != CUMUX_GROUP_MEMORY && what != CUMUX_GROUP_PRIORITY && what != CUMUX_GROUP_THREADS &&
         what != CUMUX_GROUP_FORGET && what != CUMUX_GROUP_SMS && what != CUMUX_GROUP_LABELS_SET)) {
        snprintf(text, cap, "not a group setting\n");
        return -1;
    }
    rules_lock();
    uint32_t n = atomic_load(&T()->n);
    int r = -1;
    for (uint32_t i = 0; i < n && i < SRV_GROUPS_MAX && r < 0; i++)
        if (!strcmp(T()->rule[i].path, path))
            r = (int)i;
    if (what == CUMUX_GROUP_FORGET) {
        if (r >= 0) {
            struct sup_group_rule *g = &T()->rule[r];
            g->path[0] = 0;
            g->labels[0] = 0;
            for (int d = 0; d < CUMUX_MAX_DEVICES; d++)
                atomic_store(&g->mem_limit[d], 0);
            atomic_store(&g->priority, -1);
            atomic_store(&g->percent, 0);
            for (int d = 0; d < CUMUX_MAX_DEVICES; d++)
                atomic_store(&g->sms[d], 0);
            atomic_fetch_add(&g->gen, 1);
            atomic_fetch_add(&T()->version, 1); /* its programs find their group again */
            atomic_fetch_add(&T()->sms_version, 1);
        }
        rules_unlock();
        srv_groups_follow(); /* its SMs go (every worker does so: the rule is gone for the next one) */
        snprintf(text, cap, r >= 0 ? "group %s forgotten\n" : "no group %s\n", path);
        return -3;
    }
    if (r < 0) { /* a forgotten rule's slot, else a new one */
        uint32_t free_slot = n;
        for (uint32_t i = 0; i < n && free_slot == n; i++)
            if (!T()->rule[i].path[0])
                free_slot = i;
        if (free_slot < SRV_GROUPS_MAX) {
            struct sup_group_rule *g = &T()->rule[free_slot];
            snprintf(g->path, sizeof g->path, "%s", path);
            atomic_store(&g->priority, -1);
            r = (int)free_slot;
            if (free_slot == n)
                atomic_store(&T()->n, n + 1);
            atomic_fetch_add(&T()->version, 1);
        }
    }
    if (r >= 0) {
        struct sup_group_rule *g = &T()->rule[r];
        if (what == CUMUX_GROUP_MEMORY)
            for (int d = 0; d < CUMUX_MAX_DEVICES; d++)
                atomic_store(&g->mem_limit[d], value);
        else if (what == CUMUX_GROUP_PRIORITY)
            atomic_store(&g->priority, value == CUMUX_GROUP_NONE ? -1 : (int32_t)value);
        else if (what == CUMUX_GROUP_THREADS)
            atomic_store(&g->percent, value >= 100 ? 0 : (uint32_t)value);
    }
    rules_unlock();
    if (r < 0) {
        snprintf(text, cap, "cumuxd keeps at most %d groups\n", SRV_GROUPS_MAX);
        return -1;
    }
    if (what == CUMUX_GROUP_SMS)
        return sms_set(r, (uint32_t)value, text, cap);
    return r;
}

bool srv_group_regroup(struct srv_client *c, int rule, uint32_t what)
{
    uint32_t v = atomic_load(&T()->version);
    int cr = rule_of(c->group.cgroup);
    pthread_mutex_lock(&groups_lock);
    c->group.seen_version = v;
    attach(c, cr);
    pthread_mutex_unlock(&groups_lock);
    if (cr != rule)
        return false;
    if (what != CUMUX_GROUP_MEMORY)
        apply_rule(c, rule);
    return true;
}

void srv_group_describe(const char *path, uint32_t what, uint64_t value, unsigned members, char *text, size_t cap)
{
    char v[48];
    if (what == CUMUX_GROUP_MEMORY)
        snprintf(v, sizeof v, value ? "%.1f MiB" : "none", value / 1048576.0);
    else if (what == CUMUX_GROUP_PRIORITY)
        snprintf(v, sizeof v, "%s", value == CUMUX_GROUP_NONE ? "none" : cumux_priority_name((enum cumux_priority)value));
    else if (what == CUMUX_GROUP_SMS)
        snprintf(v, sizeof v, value ? "%llu reserved" : "none", (unsigned long long)value);
    else
        snprintf(v, sizeof v, value && value < 100 ? "%llu%%" : "none", (unsigned long long)value);
    snprintf(text, cap, "GPU %d: group %s: %s %s; %u program(s) in it here\n", srv_gpu_served, path,
             what == CUMUX_GROUP_MEMORY     ? "device memory limit"
             : what == CUMUX_GROUP_PRIORITY ? "priority"
             : what == CUMUX_GROUP_SMS      ? "SMs"
                                            : "thread percentage",
             v, members);
    cumux_logf("%.*s", (int)strcspn(text, "\n"), text);
}

/* K=V,K=V: at most 4, keys [a-z_][a-z0-9_]* (Prometheus label names, not ours), values [A-Za-z0-9._:/-]. */
static bool labels_ok(const char *s)
{
    size_t n = strnlen(s, CUMUX_GROUP_LABELS);
    if (n >= CUMUX_GROUP_LABELS)
        return false;
    static const char *const ours[] = {"pid", "user", "name", "gpu", "client", "group", "job"};
    unsigned pairs = 0;
    for (const char *p = s; *p;) {
        size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyz_0123456789");
        if (k == 0 || (p[0] >= '0' && p[0] <= '9') || p[k] != '=' || ++pairs > 4)
            return false;
        for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
            if (strlen(ours[i]) == k && !strncmp(p, ours[i], k))
                return false;
        const char *v = p + k + 1;
        size_t l = strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/-");
        if (v[l] != 0 && v[l] != ',')
            return false;
        p = v + l + (v[l] == ',');
        if (v[l] == ',' && !*p)
            return false;
    }
    return true;
}

int srv_group_rule_labels(const char *path, const char *labels, char *text, size_t cap)
{
    if (memchr(labels, 0, CUMUX_GROUP_LABELS) == NULL || !labels_ok(labels)) {
        snprintf(text, cap, "labels are up to 4 KEY=VALUE, comma-separated: keys of a-z, 0-9 and _ (not one of "
                 "cumux's own), values of letters, digits and ._-:/\n");
        return -1;
    }
    int r = srv_group_rule_set(path, CUMUX_GROUP_LABELS_SET, 0, text, cap); /* the rule, made if need be */
    if (r < 0)
        return -1;
    rules_lock();
    snprintf(T()->rule[r].labels, sizeof T()->rule[r].labels, "%s", labels);
    rules_unlock();
    snprintf(text, cap, "GPU %d: group %s: labels %s\n", srv_gpu_served, path, labels[0] ? labels : "none");
    return 0;
}

bool srv_group_contains(const char *path, const struct srv_client *c)
{
    return c->group.cgroup[0] && under(c->group.cgroup, path);
}
