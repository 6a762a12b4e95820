/* The worker stays awake after a timing event's record (server/client.c, the timing window): work timed
 * between two events must not pay the worker's wake-up, while a worker with nothing to time still sleeps
 * 50 us after its last message. Against the fake driver, with the window's length set by the test
 * (CUMUX_TIMING_POLL_US in the server's environment):
 *   test_timing_window open POLL_US   a record of a timing event keeps the worker awake about POLL_US, then
 *                                     it sleeps; a record of an event without timing does not
 *   test_timing_window closed         (server with CUMUX_TIMING_POLL_US=0) no record keeps it awake
 * Observed through the channel's server_sleeping word, which the worker sets only while in its futex wait;
 * the times are generous (the window is seconds long), so that a loaded machine cannot fail it. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "raw_client.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Milliseconds until the worker sleeps, looking every 5 ms for up to limit_ms; -1 if it never did. */
static long ms_until_asleep(struct conn *c, unsigned limit_ms)
{
    uint64_t t0 = cumux_now_ns();
    for (;;) {
        if (atomic_load(&c->shm->server_sleeping))
            return (long)((cumux_now_ns() - t0) / 1000000);
        if (cumux_now_ns() - t0 > (uint64_t)limit_ms * 1000000)
            return -1;
        sleep_ms(5);
    }
}

static uint32_t event_new(struct conn *c, uint32_t ctx, uint32_t flags)
{
    struct cumux_event_create ec = {.ctx = ctx, .flags = flags};
    struct cumux_u64_reply rep = {0};
    uint32_t len = 0;
    int r = call_slot(c, 0, CUMUX_OP_EVENT_CREATE, &ec, sizeof ec, &rep, sizeof rep, &len);
    REQUIRE(r == CUDA_SUCCESS && len == sizeof rep && rep.value, "EVENT_CREATE flags %u: %d", flags, r);
    return (uint32_t)rep.value;
}

static void record(struct conn *c, uint32_t event, uint32_t stream)
{
    struct cumux_event_record er = {.event = event, .stream = stream};
    put_msg(c, CUMUX_OP_EVENT_RECORD, CUMUX_NO_REPLY, &er, sizeof er);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "open") && strcmp(argv[1], "closed")) || (!strcmp(argv[1], "open") && argc < 3)) {
        fprintf(stderr, "usage: test_timing_window open POLL_US | closed\n");
        return 2;
    }
    bool open = !strcmp(argv[1], "open");
    long window_ms = open ? strtol(argv[2], NULL, 10) / 1000 : 0;
    if (open && window_ms < 1000) {
        fprintf(stderr, "test_timing_window: POLL_US of a second or more, for a loaded machine\n");
        return 2;
    }
    struct conn c;
    conn_open(&c);
    struct cumux_ctx_create cc = {.device = 0};
    struct cumux_ctx_reply cr;
    uint32_t len = 0;
    REQUIRE(call_slot(&c, 0, CUMUX_OP_CTX_CREATE, &cc, sizeof cc, &cr, sizeof cr, &len) == CUDA_SUCCESS,
            "CTX_CREATE");
    uint32_t untimed = event_new(&c, cr.ctx, CU_EVENT_DISABLE_TIMING);
    uint32_t timed = event_new(&c, cr.ctx, CU_EVENT_DEFAULT);

    /* An event without timing: the worker sleeps soon after, as after any message. */
    CHECK(ms_until_asleep(&c, 2000) >= 0, "the worker never slept after its last answer");
    record(&c, untimed, cr.legacy_stream);
    sleep_ms(50);
    long t = ms_until_asleep(&c, 2000);
    CHECK(t >= 0 && t < 1000, "after the record of an event without timing the worker slept after %ld ms", t);

    /* A timing event: awake for the window (polling, never in its futex), then asleep. */
    record(&c, timed, cr.legacy_stream);
    uint64_t t0 = cumux_now_ns();
    sleep_ms(50);
    t = ms_until_asleep(&c, (unsigned)window_ms + 5000);
    long since = (long)((cumux_now_ns() - t0) / 1000000);
    if (open)
        CHECK(t >= 0 && since >= window_ms / 2 && since <= window_ms + 4000,
              "after a timing event's record the worker slept %ld ms later (window %ld ms)", since, window_ms);
    else
        CHECK(t >= 0 && since < 1000, "with no timing window the worker slept %ld ms after the record", since);

    /* The window closes once idle: the next record of an event without timing sleeps soon again. */
    record(&c, untimed, cr.legacy_stream);
    sleep_ms(50);
    t = ms_until_asleep(&c, 2000);
    CHECK(t >= 0 && t < 1000, "after the window, a record without timing: slept after %ld ms", t);

    /* The events were real: the stream's work is done and the timing event has a time. */
    struct handle_body h = {.handle = cr.legacy_stream};
    CHECK(call(&c, CUMUX_OP_STREAM_SYNC, &h, sizeof h) == CUDA_SUCCESS, "STREAM_SYNC");
    conn_close(&c);
    printf("test_timing_window %s: %lu checks, %lu failed\n", argv[1], test_checks, test_failures);
    return test_failures ? 1 : 0;
}
