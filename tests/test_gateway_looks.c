/* What the gateway looks at of pinned memory after the GPU ran a program's work (cli/gateway_program.c,
 * note_look and answered_look; the spec's look=; issue 45). Its file is compiled into this one to reach
 * them. Checked, with messages as the relay forwards them and answers as the worker posts them:
 * - a copy's range is looked at from its message on; an asynchronous copy's stays until an answered
 *   CTX_SYNC sent after it, a synchronous copy's until its own answer; an unrelated answer ends neither;
 * - a launch (look=all) makes every look a whole one until an answered CTX_SYNC sent after it; a launch
 *   after that synchronize is not covered by it;
 * - with a second context made, a CTX_SYNC covers nothing (its context's work only);
 * - more ranges than the gateway keeps: a whole look;
 * - look=none messages (a query) leave nothing to look at.
 * No pinned byte changes here, so no look sends anything (the link is not needed). */
#include "cli/gateway_program.c"

#include "tests/check.h"

static size_t put(uint8_t *buf, size_t off, uint16_t op, uint16_t reply, const void *body, size_t len)
{
    struct cumux_msg_hdr h = {op, reply, (uint32_t)(sizeof h + ((len + 7) & ~(size_t)7))};
    memcpy(buf + off, &h, sizeof h);
    memset(buf + off + sizeof h, 0, h.size - sizeof h);
    memcpy(buf + off + sizeof h, body, len);
    return off + h.size;
}

static struct gw *gateway(void)
{
    struct gw *g = calloc(1, sizeof *g);
    if (!g)
        abort();
    g->out_fd = -1;
    pinned_init(&g->pinned);
    pthread_mutex_init(&g->look_lock, NULL);
    pthread_mutex_init(&g->dtoh_lock, NULL);
    return g;
}

static void done(struct gw *g)
{
    pinned_fini(&g->pinned);
    free(g);
}

/* An answer on slot `slot` seen by the watcher (255: none). */
static long long answer(struct gw *g, int slot)
{
    uint8_t answered[CUMUX_REPLY_SLOTS] = {0};
    if (slot < CUMUX_REPLY_SLOTS)
        answered[slot] = 1;
    return answered_look(g, false, answered);
}

int main(void)
{
    uint8_t buf[4096];
    struct cumux_copy dtoh = {.kind = CUMUX_COPY_DTOH, .dst = 0x7f0000000000ull, .src = 0x200000000ull, .size = 4096};
    struct cumux_ctx_sync sync = {.ctx = 1};
    uint64_t launch_body[2] = {0};

    /* Copies' ranges. */
    struct gw *g = gateway();
    size_t n = put(buf, 0, CUMUX_OP_COPY, CUMUX_NO_REPLY, &dtoh, sizeof dtoh); /* asynchronous */
    n = put(buf, n, CUMUX_OP_COPY, 3, &dtoh, sizeof dtoh);                     /* synchronous, slot 3 */
    note_messages(g, buf, n);
    CHECK(g->looks.n == 2 && g->looks.all_seq == 0, "two copies' ranges (%u), no whole look", g->looks.n);
    CHECK(answer(g, 5) == 0 && g->looks.n == 2, "an unrelated answer ends neither");
    CHECK(answer(g, 3) == 0 && g->looks.n == 1 && g->looks.v[0].reply == CUMUX_NO_REPLY,
          "the synchronous copy's answer ends its own range");
    n = put(buf, 0, CUMUX_OP_STREAM_QUERY, 4, launch_body, 8);
    note_messages(g, buf, n);
    CHECK(g->looks.n == 1 && g->looks.all_seq == 0, "a query adds nothing");
    n = put(buf, 0, CUMUX_OP_CTX_SYNC, 2, &sync, sizeof sync);
    note_messages(g, buf, n);
    CHECK(answer(g, 4) == 0 && g->looks.n == 1, "the query's answer ends nothing");
    CHECK(answer(g, 2) == 0 && g->looks.n == 0, "the CTX_SYNC's answer ends the asynchronous copy's range");
    done(g);

    /* Launches. */
    g = gateway();
    n = put(buf, 0, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, launch_body, sizeof launch_body);
    n = put(buf, n, CUMUX_OP_CTX_SYNC, 2, &sync, sizeof sync);
    n = put(buf, n, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, launch_body, sizeof launch_body); /* after it */
    note_messages(g, buf, n);
    uint64_t last = g->looks.all_seq;
    CHECK(last == 3, "the last launch is message 3 (%llu)", (unsigned long long)last);
    CHECK(answer(g, 2) == 0 && g->looks.all_seq == last, "a launch after the CTX_SYNC is not covered by it");
    n = put(buf, 0, CUMUX_OP_CTX_SYNC, 6, &sync, sizeof sync);
    note_messages(g, buf, n);
    CHECK(answer(g, 1) == 0 && g->looks.all_seq == last, "an unrelated answer: still whole looks");
    CHECK(answer(g, 6) == 0 && g->looks.all_seq == 0, "the second CTX_SYNC's answer covers it");
    done(g);

    /* Two contexts: a CTX_SYNC covers its own context only. */
    g = gateway();
    uint64_t ctx_body[4] = {0};
    n = put(buf, 0, CUMUX_OP_CTX_CREATE, 1, ctx_body, sizeof ctx_body);
    n = put(buf, n, CUMUX_OP_CTX_CREATE, 2, ctx_body, sizeof ctx_body);
    n = put(buf, n, CUMUX_OP_LAUNCH, CUMUX_NO_REPLY, launch_body, sizeof launch_body);
    n = put(buf, n, CUMUX_OP_COPY, CUMUX_NO_REPLY, &dtoh, sizeof dtoh);
    n = put(buf, n, CUMUX_OP_CTX_SYNC, 3, &sync, sizeof sync);
    note_messages(g, buf, n);
    CHECK(answer(g, 3) == 0 && g->looks.all_seq != 0 && g->looks.n == 1, "with two contexts nothing is covered");
    done(g);

    /* More ranges than kept: a whole look. */
    g = gateway();
    size_t off = 0;
    for (int i = 0; i <= GW_LOOK_RANGES; i++)
        off = put(buf, off, CUMUX_OP_COPY, CUMUX_NO_REPLY, &dtoh, sizeof dtoh);
    note_messages(g, buf, off);
    CHECK(g->looks.n == GW_LOOK_RANGES && g->looks.all_seq == GW_LOOK_RANGES + 1,
          "the range past %d makes looks whole (n %u)", GW_LOOK_RANGES, g->looks.n);
    done(g);

    /* A copy body too short to read its ranges: a whole look, not none. */
    g = gateway();
    n = put(buf, 0, CUMUX_OP_COPY, CUMUX_NO_REPLY, &dtoh, 8);
    note_messages(g, buf, n);
    CHECK(g->looks.all_seq == 1 && g->looks.n == 0, "a short copy body: whole looks");
    done(g);

    if (failures) {
        printf("FAIL gateway_looks: %lu of %lu checks\n", failures, checks);
        return 1;
    }
    printf("PASS gateway_looks (%lu checks)\n", checks);
    return 0;
}
