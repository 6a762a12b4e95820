/* A virtual-memory allocation shared between two processes through a file descriptor handle, as
 * PyTorch's expandable segments share CUDA tensors: the owner creates, maps and fills it and exports it
 * (cuMemExportToShareableHandle); the descriptor travels over a Unix socket; the other process imports
 * it, maps it into a reservation of its own, checks the owner's values and writes its own, which the owner
 * then reads. GT_VMM_OWNER_DEVICES and GT_VMM_IMPORTER_DEVICES, when set, are each process's
 * CUDA_VISIBLE_DEVICES: on different GPUs, the importer maps the owner's GPU's memory with access for its
 * own (peer access). The parent forks before any CUDA call and only coordinates. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "gpu_test.h"
#include "mp_util.h"

static void send_fd(int sock, int fd)
{
    char byte = 'F';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1)
        gt_fail("sendmsg: %s", strerror(errno));
}

static int recv_fd(int sock)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    if (recvmsg(sock, &msg, 0) != 1)
        gt_fail("recvmsg: %s", strerror(errno));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        gt_fail("no descriptor came");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static CUmemAllocationProp prop_of(CUdevice dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = (int)dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Reserve, map and open for read and write `size` bytes of allocation h; its address. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size, CUdevice dev)
{
    CUdeviceptr p;
    CK(cuMemAddressReserve(&p, size, 0, 0, 0));
    CK(cuMemMap(p, size, 0, h, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(p, size, &acc, 1));
    return p;
}

static void owner(int sock)
{
    CK(cuInit(0));
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmemAllocationProp prop = prop_of(dev);
    size_t gran;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, gran, &prop, 0));
    CUdeviceptr p = map_rw(h, gran, dev);
    CK(cuMemsetD32(p, 0x11111111u, gran / 4));
    CK(cuCtxSynchronize());
    int fd = -1;
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (write(sock, &gran, sizeof gran) != (ssize_t)sizeof gran)
        gt_fail("write: %s", strerror(errno));
    send_fd(sock, fd);
    close(fd);
    char done;
    if (read(sock, &done, 1) != 1 || done != 'D')
        gt_fail("the importer did not finish");
    uint32_t got[16];
    CK(cuMemcpyDtoH(got, p, sizeof got));
    for (int i = 0; i < 16; i++)
        if (got[i] != 0x22222222u)
            gt_fail("owner: word %d is %#x after the importer wrote 0x22222222", i, got[i]);
    CK(cuMemUnmap(p, gran));
    CK(cuMemAddressFree(p, gran));
    CK(cuMemRelease(h));
    gt_pass();
}

static void importer(int sock)
{
    size_t gran;
    if (read(sock, &gran, sizeof gran) != (ssize_t)sizeof gran)
        gt_fail("no size from the owner");
    int fd = recv_fd(sock);
    CK(cuInit(0));
    CUdevice dev;
    gt_primary_ctx(0, &dev);
    CUmemGenericAllocationHandle h;
    CK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUdeviceptr p = map_rw(h, gran, dev);
    uint32_t got[16];
    CK(cuMemcpyDtoH(got, p + gran - sizeof got, sizeof got));
    for (int i = 0; i < 16; i++)
        if (got[i] != 0x11111111u)
            gt_fail("importer: word %d is %#x, the owner wrote 0x11111111", i, got[i]);
    CK(cuMemsetD32(p, 0x22222222u, 16));
    CK(cuCtxSynchronize());
    if (write(sock, "D", 1) != 1)
        gt_fail("write: %s", strerror(errno));
    CK(cuMemUnmap(p, gran));
    CK(cuMemAddressFree(p, gran));
    CK(cuMemRelease(h));
    gt_pass();
}

int main(void)
{
    gt_begin("vmm_share");
    gt_require_gpu_in_child(); /* skips here when there is no GPU; the parent stays CUDA-free */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        gt_fail("socketpair: %s", strerror(errno));
    fflush(NULL);
    pid_t imp = fork();
    if (imp < 0)
        gt_fail("fork: %s", strerror(errno));
    if (imp == 0) {
        close(sv[0]);
        gt_begin("vmm_share (importer)");
        const char *v = getenv("GT_VMM_IMPORTER_DEVICES");
        if (v)
            setenv("CUDA_VISIBLE_DEVICES", v, 1);
        importer(sv[1]);
    }
    pid_t own = fork();
    if (own < 0)
        gt_fail("fork: %s", strerror(errno));
    if (own == 0) {
        close(sv[1]);
        gt_begin("vmm_share (owner)");
        const char *v = getenv("GT_VMM_OWNER_DEVICES");
        if (v)
            setenv("CUDA_VISIBLE_DEVICES", v, 1);
        owner(sv[0]);
    }
    close(sv[0]);
    close(sv[1]);
    int so = 0, si = 0;
    waitpid(own, &so, 0);
    waitpid(imp, &si, 0);
    if (!WIFEXITED(so) || WEXITSTATUS(so) != 0 || !WIFEXITED(si) || WEXITSTATUS(si) != 0)
        gt_fail("owner exited %#x, importer %#x", so, si);
    gt_pass();
}
