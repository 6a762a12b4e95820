/* A program's channel across the network (issue 45, docs/remote.md): the relay on the program's machine
 * (cli/relay.c) holds a channel page the program uses as it uses cumuxd's, and the gateway beside cumuxd
 * (cli/gateway_program.c) is a local client of the GPU's worker with a page of its own; each tells the
 * other what changed in the part of the page its side writes, as MSG frames (common/frame.h) whose payload
 * is a struct cumux_mirror_head and its data. The ring's bytes keep their positions on both sides, so that
 * every count of ring bytes (the tail, the told marks' `handled`) means the same in both pages.
 * Neither side trusts the other: every index and length is checked against the page's sizes. */
#ifndef CUMUX_MIRROR_H
#define CUMUX_MIRROR_H

#include <stdint.h>

enum cumux_mirror_what {
    /* relay -> gateway: what the program wrote */
    CUMUX_MIRROR_RING = 1,        /* value: the ring position of the data's first byte; data: whole messages */
    CUMUX_MIRROR_STAGE_DATA = 2,  /* index: a staging slot; data: what the program put in it (then FULL) */
    CUMUX_MIRROR_STAGE_FREE = 3,  /* index: a slot the program emptied (a copy to it is done) */
    CUMUX_MIRROR_IMAGE = 4,       /* data: a piece of the next descriptor's file; index 1: its last piece */
    CUMUX_MIRROR_HOSTFN_DONE = 5, /* value: hostfn_done */
    CUMUX_MIRROR_HOSTFN_WORDS = 6, /* data: (u32 word, u32 value) pairs of hostfn_stream_done */
    CUMUX_MIRROR_PINNED_NEW = 7,  /* index: the reply slot of the HOST_ALLOC that follows; value: its size */
    /* both ways: pinned memory's changed bytes (cli/pinned_mirror.h's records) */
    CUMUX_MIRROR_PINNED = 8,
    /* gateway -> relay: what the server and the GPU wrote */
    CUMUX_MIRROR_WELCOME = 16,    /* data: the worker's struct cumux_welcome, then its text */
    CUMUX_MIRROR_TAIL = 17,       /* value: the ring's tail */
    CUMUX_MIRROR_REPLY = 18,      /* index: a reply slot; value: result (low 32 bits) and length; data */
    CUMUX_MIRROR_STAGE = 19,      /* index: a slot; value: its new state (READY with its data, or FREE) */
    CUMUX_MIRROR_HOSTFN_POST = 20, /* value: hostfn_posted; data: struct cumux_mirror_hostfn for each new one */
    CUMUX_MIRROR_MARK_WORDS = 21, /* data: (u32 word, u32 value) pairs of mark_word */
    CUMUX_MIRROR_MARKS_TOLD = 22, /* data: struct cumux_marks_told (its gen is the receiver's own) */
    CUMUX_MIRROR_CLIENTS = 23,    /* value: server_clients */
    CUMUX_MIRROR_FAULT = 24,      /* value: server_fault (no coming back across the network) */
    CUMUX_MIRROR_STDOUT = 25,     /* data: the program's kernels' printf output */
};

/* The welcome's status where no worker answered (CUDA_ERROR_MPS_CONNECTION_FAILED), or the relay has no room
 * for a page (CUDA_ERROR_OUT_OF_MEMORY): the CLI builds without cuda.h. */
#define CUMUX_MIRROR_CONNECTION_FAILED 805
#define CUMUX_MIRROR_OUT_OF_MEMORY 2

struct cumux_mirror_head {
    uint32_t what;
    uint32_t index;
    uint64_t value;
};

struct cumux_mirror_hostfn {
    uint64_t id;
    uint32_t slot, seq;
};

#endif
