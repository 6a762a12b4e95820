/* The shim's table of remembered answers (shim/answers.c), alone: an answer comes back only for the very
 * same kind, key bytes and answer size; a key or answer over the limits is never kept; a set that takes
 * more keys than it has ways forgets the oldest, never gives a wrong answer; threads may ask at once. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "shim/client.h"

static void key_of(uint8_t *k, size_t len, uint32_t n)
{
    memset(k, 0, len);
    for (size_t i = 0; i < len; i++)
        k[i] = (uint8_t)(n * 131u + i * 7u);
    memcpy(k, &n, sizeof n);
}

static void *asker(void *arg)
{
    uint32_t base = (uint32_t)(uintptr_t)arg;
    uint8_t k[64];
    for (uint32_t i = 0; i < 20000; i++) {
        uint32_t n = base + i % 500;
        key_of(k, sizeof k, n);
        uint64_t v = 0;
        if (shim_answer_lookup(7, k, sizeof k, &v, sizeof v))
            CHECK(v == (uint64_t)n * 3, "thread %u: key %u answered %llu", base, n, (unsigned long long)v);
        else
            shim_answer_store(7, k, sizeof k, &(uint64_t){(uint64_t)n * 3}, sizeof v);
    }
    return NULL;
}

int main(void)
{
    uint8_t k[SHIM_ANSWER_KEY_MAX + 8], v[SHIM_ANSWER_VALUE_MAX + 8], out[SHIM_ANSWER_VALUE_MAX + 8];
    key_of(k, 144, 1);
    memset(v, 0xab, sizeof v);
    CHECK(!shim_answer_lookup(1, k, 144, out, 128), "an answer before any was stored");
    shim_answer_store(1, k, 144, v, 128);
    memset(out, 0, sizeof out);
    CHECK(shim_answer_lookup(1, k, 144, out, 128) && !memcmp(out, v, 128), "the stored answer");
    CHECK(!shim_answer_lookup(2, k, 144, out, 128), "another kind, the same key");
    CHECK(!shim_answer_lookup(1, k, 143, out, 128), "a shorter key");
    CHECK(!shim_answer_lookup(1, k, 144, out, 8), "another answer size");
    k[77] ^= 1;
    CHECK(!shim_answer_lookup(1, k, 144, out, 128), "a key one bit away");
    k[77] ^= 1;

    /* Over the limits: not kept (and nothing written past them). */
    key_of(k, sizeof k, 2);
    shim_answer_store(3, k, SHIM_ANSWER_KEY_MAX + 1, v, 8);
    CHECK(!shim_answer_lookup(3, k, SHIM_ANSWER_KEY_MAX + 1, out, 8), "a key over the limit was kept");
    shim_answer_store(3, k, 16, v, SHIM_ANSWER_VALUE_MAX + 1);
    CHECK(!shim_answer_lookup(3, k, 16, out, SHIM_ANSWER_VALUE_MAX + 1), "an answer over the limit was kept");
    shim_answer_store(3, k, SHIM_ANSWER_KEY_MAX, v, SHIM_ANSWER_VALUE_MAX);
    CHECK(shim_answer_lookup(3, k, SHIM_ANSWER_KEY_MAX, out, SHIM_ANSWER_VALUE_MAX), "a key and answer at the limits");

    /* Many more keys than the table holds: each answer that comes back is its own key's. */
    unsigned found = 0;
    for (uint32_t n = 0; n < 10000; n++) {
        key_of(k, 40, 1000 + n);
        shim_answer_store(5, k, 40, &(uint64_t){n}, 8);
    }
    for (uint32_t n = 0; n < 10000; n++) {
        key_of(k, 40, 1000 + n);
        uint64_t a = UINT64_MAX;
        if (shim_answer_lookup(5, k, 40, &a, 8)) {
            found++;
            CHECK(a == n, "key %u answered %llu", 1000 + n, (unsigned long long)a);
        }
    }
    CHECK(found > 0 && found < 10000, "%u of 10000 answers kept: the table keeps some, and not all", found);
    key_of(k, 40, 1000 + 9999);
    uint64_t last = 0;
    CHECK(shim_answer_lookup(5, k, 40, &last, 8) && last == 9999, "the last answer stored is kept");

    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, asker, (void *)(100000 + i * 250)); /* overlapping keys */
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);

    printf("test_answers: %lu checks, %lu failed\n", checks, failures);
    return failures ? 1 : 0;
}
