/* Running a client's commands: validation of every message, the table from command to handler, handles,
 * the legacy-stream rule, and the cleanup of a client that is gone. The handlers are in one file per
 * concern: context.c, memory.c, copy.c, module.c, launch.c, graph.c. */

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/channel.h"
#include "common/log.h"
#include "common/priority.h"
#include "server/groups.h"
#include "server/handlers.h"
#define SRV_ROUTES_IMPL
#include "server/generated/routes.h"

/* ---------------------------------------------------------------- init */

CUresult op_init(struct srv_client *c, uint8_t *out, uint32_t *out_len)
{
    struct cumux_init_reply rep = {.driver_version = srv_driver_version, .device_count = srv_gpu_count,
                                   .client_id = c->id};
    memcpy(out, &rep, sizeof rep);
    /* A client with a limit sees a GPU of that size; in a group with one, of what the group leaves it. */
    uint64_t limit = atomic_load(&c->memory.mem_limit), room = srv_group_room(c);
    if (room != UINT64_MAX && (!limit || room < limit))
        limit = room ? room : 1;
    for (int i = 0; i < srv_gpu_count; i++) {
        struct cumux_device_info info = srv_gpus[i].info;
        if (limit && limit < info.total_mem)
            info.total_mem = limit;
        memcpy(out + sizeof rep + (size_t)i * sizeof info, &info, sizeof info);
    }
    *out_len = (uint32_t)(sizeof rep + (size_t)srv_gpu_count * sizeof(struct cumux_device_info));
    return CUDA_SUCCESS;
}

CUresult op_client_info(struct srv_client *c, const struct cumux_client_info *m)
{
    /* Its name, once: printable, without the characters that quote it in /metrics and the records. */
    if (!atomic_load(&c->named)) {
        size_t i = 0;
        for (; i + 1 < sizeof c->name && i < sizeof m->name && m->name[i]; i++) {
            unsigned char ch = (unsigned char)m->name[i];
            c->name[i] = ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\' ? '_' : (char)ch;
        }
        c->name[i] = 0;
        atomic_store(&c->named, true);
    }
    /* Its priority class, if it asked for one (else the server's default, set when it connected); its
     * group's, where the group has one (the administrator's, over the program's). */
    int prio = m->priority >= CUMUX_PRIORITY_LOW && m->priority <= CUMUX_PRIORITY_HIGH ? (int)m->priority : -1;
    /* Its SMs: a reservation, a thread percentage (else the server's default; its group's over both). A
     * reservation that cannot be had is logged, and the program runs on the shared SMs. */
    uint32_t pct = m->thread_percent ? m->thread_percent : srv_default_thread_percent();
    srv_group_wants(c, &prio, &pct);
    if (prio >= 0)
        atomic_store(&c->streams.priority, prio);
    if (m->sms || (pct && pct < 100)) {
        char why[256];
        int rc = srv_placement_want(c, m->sms, pct, why, sizeof why);
        cumux_logf("client %u (pid %d): %s%s", c->id, (int)c->pid, rc ? "its SMs as asked cannot be had: " : "",
                   why);
    }
    return CUDA_SUCCESS;
}

/* A call a remote program made that its relay could not carry across the network (cli/relay.c): an error,
 * said once per op, never a success. */
CUresult op_not_carried(struct srv_client *c, const struct cumux_not_carried *m, const uint8_t *payload,
                        uint32_t payload_len, bool answered)
{
    (void)payload, (void)payload_len, (void)answered;
    static _Atomic uint64_t said[(CUMUX_OP_COUNT + 63) / 64];
    unsigned op = m->op < CUMUX_OP_COUNT ? m->op : 0;
    if (!(atomic_fetch_or(&said[op / 64], 1ull << (op % 64)) & (1ull << (op % 64))))
        cumux_logf("client %u (pid %d): op %u of a remote program cannot cross the network: "
                   "CUDA_ERROR_NOT_SUPPORTED (docs/remote.md)", c->id, (int)c->pid, m->op);
    return CUDA_ERROR_NOT_SUPPORTED;
}

_Static_assert(sizeof(struct cumux_init_reply) + CUMUX_MAX_DEVICES * sizeof(struct cumux_device_info) <= CUMUX_REPLY_DATA,
               "init reply must fit a reply slot");

/* ---------------------------------------------------------------- dispatch */

int srv_dispatch(struct srv_client *c, void *msg, uint32_t size)
{
    const struct cumux_msg_hdr *hdr = msg;
    if (hdr->op == CUMUX_OP_PAD || hdr->op >= CUMUX_OP_COUNT)
        return -1;
    uint32_t body_len = size - (uint32_t)sizeof *hdr;
    if (body_len < srv_op_shape[hdr->op].body)
        return -1;
    bool answered = hdr->reply != CUMUX_NO_REPLY;
    if (answered && hdr->reply >= CUMUX_REPLY_SLOTS)
        return -1;
    uint8_t direction = srv_op_shape[hdr->op].direction; /* 0 answered, 1 one-way, 2 either */
    if ((direction == 1 && answered) || (direction == 0 && !answered))
        return -1;
    const void *body = hdr + 1;
    const uint8_t *payload = (const uint8_t *)body + srv_op_shape[hdr->op].body;
    uint32_t payload_len = body_len - srv_op_shape[hdr->op].body;

    /* Handlers write their reply here, in server memory, never straight into the reply slot: the slot is
     * shared memory the client may rewrite while a handler runs, so nothing there may be read back. */
    static __thread uint8_t scratch[CUMUX_REPLY_DATA];
    struct cumux_reply_slot *slot = answered ? &c->shm->replies[hdr->reply] : NULL;
    uint8_t *out = scratch;
    uint32_t out_len = 0;
    CUresult r;
    /* Anything but a question of completion may queue work: streams known idle before are not now. */
    if (!cumux_op_question(hdr->op))
        c->obj.work_gen++;
    if (srv_route(c, hdr->op, body, payload, payload_len, answered, out, &out_len, &r) < 0)
        return -1;
    if (slot) {
        if (r != CUDA_SUCCESS)
            out_len = 0;
        if (srv_fault_is_fatal(r))
            r = srv_fault_answer(c, r); /* never returns for a client that comes back */
        else if (r == CUDA_SUCCESS && srv_coredump_path[0])
            srv_fault_hold_if_dumping(); /* a success the driver gives while it dumps a fault is not one */
        cumux_reply_post(slot, r, out, out_len);
    } else if (r != CUDA_SUCCESS && c->obj.pending_error == CUDA_SUCCESS) {
        c->obj.pending_error = r; /* reported by the next synchronizing call (invariant 2) */
    }
    return 0;
}

