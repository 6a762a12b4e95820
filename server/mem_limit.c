/* A client's device memory against its limit (`cumux run --memory`, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
 * `cumux set`, CUMUX_DEFAULT_MEMORY_LIMIT): what it holds is counted where it is allocated (memory.c,
 * vmm.c, array.c) and checked here; the limit itself is kept in the client (srv_client.mem_limit), and
 * its group's (groups.c) in the supervisor's page. */
#include "server/groups.h"
#include "server/handlers.h"

CUresult srv_mem_charge(struct srv_client *c, uint64_t size)
{
    /* Only the client's worker adds; others may take away meanwhile, which errs on the safe side. Its
     * group's count (groups.c) is taken under the groups' lock, since its members add at once. */
    uint64_t limit = atomic_load(&c->memory.mem_limit), used = atomic_load(&c->memory.mem_bytes);
    if (limit && (size > limit || used > limit - size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CHECK(srv_group_charge(c, size));
    atomic_fetch_add(&c->memory.mem_bytes, size);
    return CUDA_SUCCESS;
}

void srv_mem_uncharge(struct srv_client *c, uint64_t size)
{
    srv_group_uncharge(c, size);
    atomic_fetch_sub(&c->memory.mem_bytes, size);
}

CUresult srv_mem_fits(struct srv_client *c, uint64_t size)
{
    uint64_t limit = atomic_load(&c->memory.mem_limit), used = atomic_load(&c->memory.mem_bytes);
    if (limit && (size > limit || used > limit - size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t room = srv_group_room(c); /* counts what it holds */
    return room != UINT64_MAX && (size > room || used > room - size) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
