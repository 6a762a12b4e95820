/* Tensor maps (cuTensorMap*): the server encodes them with the driver (server/tensor_map.c). The shim
 * copies rank entries of each array into the message; the map comes back as the driver wrote it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

/* Maps encoded before, by the message that asked for them. Encoding is a pure function of its arguments,
 * which the message holds whole (the server checks nothing else, server/tensor_map.c), and libraries encode
 * the same maps again and again: cuDNN's Hopper kernels take maps of their operands, encoded at every
 * execution, also inside the spans its benchmark mode times, where a round trip each would count against
 * those kernels. A set-associative table, filled on success only (a refusal goes to the server each time). */
union tmap_key_space {
    struct cumux_tensor_map_tiled tiled;
    struct cumux_tensor_map_im2col im2col;
    struct cumux_tensor_map_replace replace;
};
enum { TMAP_SETS = 256, TMAP_WAYS = 4 };
struct tmap_entry {
    uint64_t hash; /* 0: empty */
    uint16_t op;
    uint16_t len;
    uint8_t key[sizeof(union tmap_key_space)];
    uint64_t map[16];
};
static struct tmap_entry *tmap_table; /* TMAP_SETS * TMAP_WAYS, made at the first encode */
static unsigned tmap_next_way[TMAP_SETS];
static pthread_mutex_t tmap_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t tmap_hash(uint16_t op, const void *key, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ op; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const uint8_t *)key)[i]) * 1099511628211ull;
    return h ? h : 1;
}

static bool tmap_lookup(uint16_t op, const void *key, size_t len, uint64_t hash, CUtensorMap *map)
{
    bool hit = false;
    pthread_mutex_lock(&tmap_lock);
    if (tmap_table) {
        struct tmap_entry *set = &tmap_table[(hash % TMAP_SETS) * TMAP_WAYS];
        for (int w = 0; w < TMAP_WAYS && !hit; w++) {
            if (set[w].hash == hash && set[w].op == op && set[w].len == len && !memcmp(set[w].key, key, len)) {
                memcpy(map->opaque, set[w].map, sizeof map->opaque);
                hit = true;
            }
        }
    }
    pthread_mutex_unlock(&tmap_lock);
    return hit;
}

static void tmap_store(uint16_t op, const void *key, size_t len, uint64_t hash, const CUtensorMap *map)
{
    pthread_mutex_lock(&tmap_lock);
    if (!tmap_table)
        tmap_table = calloc((size_t)TMAP_SETS * TMAP_WAYS, sizeof *tmap_table);
    if (tmap_table) {
        unsigned s = (unsigned)(hash % TMAP_SETS);
        struct tmap_entry *e = &tmap_table[s * TMAP_WAYS + tmap_next_way[s]];
        tmap_next_way[s] = (tmap_next_way[s] + 1) % TMAP_WAYS;
        e->hash = hash;
        e->op = op;
        e->len = (uint16_t)len;
        memcpy(e->key, key, len);
        memcpy(e->map, map->opaque, sizeof e->map);
    }
    pthread_mutex_unlock(&tmap_lock);
}

/* The map for message m of op: from the table, else from the server (and then kept). */
static CUresult encode(uint16_t op, const void *m, size_t len, CUtensorMap *map)
{
    _Static_assert(sizeof(((struct cumux_tensor_map *)0)->opaque) == sizeof map->opaque, "a tensor map is 16 u64");
    uint64_t hash = tmap_hash(op, m, len);
    if (tmap_lookup(op, m, len, hash, map))
        return CUDA_SUCCESS;
    struct cumux_tensor_map rep;
    CUresult r = shim_call(op, m, (uint32_t)len, &rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS) {
        memcpy(map->opaque, rep.opaque, sizeof map->opaque);
        tmap_store(op, m, len, hash, map);
    }
    return r;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                const cuuint64_t *dim, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map || rank == 0 || rank > 5 || !dim || (rank > 1 && !strides) || !box || !element_strides)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_tiled m;
    memset(&m, 0, sizeof m); /* every byte, padding too: the message is the table's key */
    m.data_type = (uint32_t)type;
    m.rank = rank;
    m.global_address = (uint64_t)(uintptr_t)address;
    m.interleave = (uint32_t)interleave;
    m.swizzle = (uint32_t)swizzle;
    m.l2_promotion = (uint32_t)l2;
    m.oob_fill = (uint32_t)oob;
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    if (rank > 1)
        memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.box_dim, box, rank * sizeof *box);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    return encode(CUMUX_OP_TENSOR_MAP_ENCODE_TILED, &m, sizeof m, map);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                 const cuuint64_t *dim, const cuuint64_t *strides, const int *lower,
                                 const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                 const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
                                 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map || rank < 3 || rank > 5 || !dim || !strides || !lower || !upper || !element_strides)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_im2col m;
    memset(&m, 0, sizeof m);
    m.data_type = (uint32_t)type;
    m.rank = rank;
    m.global_address = (uint64_t)(uintptr_t)address;
    m.channels_per_pixel = channels;
    m.pixels_per_column = pixels;
    m.interleave = (uint32_t)interleave;
    m.swizzle = (uint32_t)swizzle;
    m.l2_promotion = (uint32_t)l2;
    m.oob_fill = (uint32_t)oob;
    memcpy(m.global_dim, dim, rank * sizeof *dim);
    memcpy(m.global_strides, strides, (rank - 1) * sizeof *strides);
    memcpy(m.lower_corner, lower, (rank - 2) * sizeof *lower);
    memcpy(m.upper_corner, upper, (rank - 2) * sizeof *upper);
    memcpy(m.element_strides, element_strides, rank * sizeof *element_strides);
    return encode(CUMUX_OP_TENSOR_MAP_ENCODE_IM2COL, &m, sizeof m, map);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *address)
{
    CUresult r = shim_require_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!map)
        return CUDA_ERROR_INVALID_VALUE;
    struct cumux_tensor_map_replace m;
    memset(&m, 0, sizeof m);
    m.global_address = (uint64_t)(uintptr_t)address;
    memcpy(m.map, map->opaque, sizeof m.map);
    return encode(CUMUX_OP_TENSOR_MAP_REPLACE_ADDRESS, &m, sizeof m, map);
}
