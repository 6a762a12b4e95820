/* Objects by server handle (the shim hands the program one object per server handle: a graph, a node, a
 * function, so that the same server object is always the same pointer to the program), and lists of every
 * object of a kind (made again after a resume). */
#include <stdlib.h>
#include <string.h>

#include "shim/client.h"

/* A server handle's place: its index and its worker's GPU (handles of different workers share indices). */
uint32_t shim_table_key(uint32_t handle)
{
    return CUMUX_HANDLE_INDEX(handle) * CUMUX_MAX_DEVICES + (uint32_t)CUMUX_HANDLE_GPU(handle);
}

void **shim_table_slot(struct shim_table *t, uint32_t handle)
{
    uint32_t k = shim_table_key(handle);
    if (k >= t->cap) {
        uint32_t cap = k * 2 + 64;
        void **v = realloc(t->v, cap * sizeof *v);
        if (!v)
            return NULL;
        memset(v + t->cap, 0, (cap - t->cap) * sizeof *v);
        t->v = v;
        t->cap = cap;
    }
    return &t->v[k];
}

void *shim_table_get(const struct shim_table *t, uint32_t handle)
{
    uint32_t k = shim_table_key(handle);
    return k < t->cap ? t->v[k] : NULL;
}

void shim_list_add(struct shim_list *l, void *p)
{
    pthread_mutex_lock(&l->lock);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void **v = realloc(l->v, cap * sizeof *v);
        if (v) {
            l->v = v;
            l->cap = cap;
        }
    }
    if (l->n < l->cap) /* else, out of memory, it will not be made again after a resume */
        l->v[l->n++] = p;
    pthread_mutex_unlock(&l->lock);
}
