/* Answers the server gave that the shim gives again itself: a table of (kind, question) -> answer, for
 * questions whose answer is a pure function of what the question holds. Libraries ask some of these around
 * every launch (cuDNN encodes its Hopper kernels' tensor maps at each execution, cuBLAS asks a kernel's
 * cluster occupancy more often than it launches), each a round trip queued behind the client's work,
 * where natively it is a host computation. Set-associative, filled on success only: a refusal goes to the
 * server each time. The caller makes the question's bytes whole (padding zeroed) and puts in it whatever
 * the answer depends on beyond the message (a function's attribute generation). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

enum { ANSWER_SETS = 512, ANSWER_WAYS = 4 };
struct answer_entry {
    uint64_t hash; /* 0: empty */
    uint16_t kind;
    uint16_t key_len;
    uint16_t value_len;
    uint8_t key[SHIM_ANSWER_KEY_MAX];
    uint8_t value[SHIM_ANSWER_VALUE_MAX];
};
static struct answer_entry *table; /* ANSWER_SETS * ANSWER_WAYS, made at the first store */
static unsigned next_way[ANSWER_SETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t answer_hash(uint16_t kind, const void *key, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ kind; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const uint8_t *)key)[i]) * 1099511628211ull;
    return h ? h : 1;
}

bool shim_answer_lookup(uint16_t kind, const void *key, size_t key_len, void *value, size_t value_len)
{
    if (key_len > SHIM_ANSWER_KEY_MAX || value_len > SHIM_ANSWER_VALUE_MAX)
        return false;
    uint64_t hash = answer_hash(kind, key, key_len);
    bool hit = false;
    pthread_mutex_lock(&table_lock);
    if (table) {
        struct answer_entry *set = &table[(hash % ANSWER_SETS) * ANSWER_WAYS];
        for (int w = 0; w < ANSWER_WAYS && !hit; w++) {
            struct answer_entry *e = &set[w];
            if (e->hash == hash && e->kind == kind && e->key_len == key_len && e->value_len == value_len &&
                !memcmp(e->key, key, key_len)) {
                memcpy(value, e->value, value_len);
                hit = true;
            }
        }
    }
    pthread_mutex_unlock(&table_lock);
    return hit;
}

void shim_answer_store(uint16_t kind, const void *key, size_t key_len, const void *value, size_t value_len)
{
    if (key_len > SHIM_ANSWER_KEY_MAX || value_len > SHIM_ANSWER_VALUE_MAX)
        return;
    uint64_t hash = answer_hash(kind, key, key_len);
    pthread_mutex_lock(&table_lock);
    if (!table)
        table = calloc((size_t)ANSWER_SETS * ANSWER_WAYS, sizeof *table);
    if (table) {
        unsigned s = (unsigned)(hash % ANSWER_SETS);
        struct answer_entry *e = &table[s * ANSWER_WAYS + next_way[s]];
        next_way[s] = (next_way[s] + 1) % ANSWER_WAYS;
        e->hash = hash;
        e->kind = kind;
        e->key_len = (uint16_t)key_len;
        e->value_len = (uint16_t)value_len;
        memcpy(e->key, key, key_len);
        memcpy(e->value, value, value_len);
    }
    pthread_mutex_unlock(&table_lock);
}
