/* A client's completion marks (marks.c): the streams it asked about, what its channel says of them, and
 * the timing rules that keep marks out of a library's timed spans. */
#ifndef CUMUX_SERVER_CLIENT_MARKS_H
#define CUMUX_SERVER_CLIENT_MARKS_H

#include <cuda.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/proto.h"

#define SRV_MARKS_ASKED 4

struct srv_client_marks {
    CUdeviceptr mark_words; /* the device's address of shm->mark_word, 0 when not registered */
    /* A timing event was recorded and the worker has not gone idle since (stream.c op_event_record): work
     * being timed may follow after some host work of the client's, and a worker woken from sleep would
     * add its wake-up to the time (client.c keeps looking instead, CUMUX_TIMING_POLL_US). */
    bool timing_window;
    /* Launches after the last record of a timing event before which marks.c queues no mark (usage.c
     * counts them down): a library times a candidate kernel between two events, and a mark's own GPU work
     * would lengthen that span. */
    uint8_t timing_quiet;
    /* Streams the client asked about lately, by handle, and when */
    uint32_t marks_asked[SRV_MARKS_ASKED];
    uint64_t marks_asked_ns[SRV_MARKS_ASKED];
    uint64_t marks_answered; /* questions answered from a mark */
    uint64_t marks_queued, marks_withheld; /* marks queued; idle moments with none queued (timing_quiet) */
    struct cumux_marks_told told; /* what the channel says of marks now (the worker's copy: never read back) */
    uint32_t told_gen;
    uint32_t launched_on[8]; /* worker: streams with launches since all were last known to have ended */
    uint32_t nlaunched_on;   /* (usage.c); more than 8: not known which */
    /* The same for the fault watch (marks.c srv_marks_client_done), which runs beside the worker: whether
     * every stream with launches not known to have ended was among those told, the launches counted then,
     * and the marks (the server's own words and their numbers); a seqlock, told_seq odd while written. */
    _Atomic uint32_t told_seq;
    _Atomic bool told_complete;
    _Atomic uint64_t told_units;
    _Atomic uint32_t told_n, told_slot[SRV_MARKS_ASKED], told_value[SRV_MARKS_ASKED];
};

#endif
