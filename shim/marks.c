/* Questions answered from completion marks with no round trip (issue 12). The server's worker, when it runs
 * out of commands, writes a fresh number behind the work of the streams this program keeps asking about,
 * into a word of this program's channel, and tells in the channel which streams and contexts those numbers
 * answer for (server/marks.c tell). While the ring's head is where the server had handled everything (this
 * program has sent nothing since) and the number has landed, the stream has ended all its work, which is
 * what the server would answer: no error of one-way work was left to report then. Anything else asks. */
#include "common/log.h"
#include "shim/client.h"

static _Atomic uint64_t answered_here;

/* Whether the told marks say stream `stream` (or, with ctx nonzero, every stream of context `ctx`) has
 * ended all its work. */
static bool told_idle(uint32_t stream, uint32_t ctx)
{
    struct cumux_shm *m = shim_chan_of_handle(ctx ? ctx : stream)->shm; /* the marks of that worker */
    if (!m)
        return false;
    struct cumux_marks_told *t = &m->marks_told;
    uint32_t gen = atomic_load_explicit(&t->gen, memory_order_acquire);
    if (gen & 1)
        return false;
    uint64_t handled = t->handled;
    if (!handled || handled != atomic_load_explicit(&m->head, memory_order_relaxed))
        return false;
    uint32_t mask = 0;
    for (unsigned i = 0; i < CUMUX_MARKS_TOLD; i++) {
        if (ctx && t->ctx[i].ctx == ctx)
            mask = t->ctx[i].mask;
        if (!ctx && stream && t->stream[i].stream == stream)
            mask = 1u << i;
    }
    if (!mask || mask >> CUMUX_MARKS_TOLD)
        return false;
    for (unsigned i = 0; i < CUMUX_MARKS_TOLD; i++) {
        if (!(mask >> i & 1))
            continue;
        uint32_t value = t->stream[i].value, word = t->stream[i].word;
        if (value && (word >= CUMUX_MARK_WORDS ||
                      atomic_load_explicit(&m->mark_word[word], memory_order_acquire) != value))
            return false;
    }
    /* All of it read within one telling, and the worker has not failed meanwhile. */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&t->gen, memory_order_relaxed) != gen || atomic_load(&m->server_fault))
        return false;
    atomic_fetch_add_explicit(&answered_here, 1, memory_order_relaxed);
    return true;
}

bool shim_marks_stream_idle(uint32_t stream)
{
    return told_idle(stream, 0);
}

bool shim_marks_ctx_idle(uint32_t ctx)
{
    return told_idle(0, ctx);
}

__attribute__((destructor)) static void say_answered(void)
{
    uint64_t n = atomic_load(&answered_here);
    if (n)
        cumux_debugf("%llu questions answered here from completion marks", (unsigned long long)n);
}
