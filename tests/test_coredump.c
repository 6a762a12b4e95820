/* The GPU coredump reader (server/coredump.c), on dumps made here in the layout of cuda-gdb's
 * cudacoredump.h: the culprit's module from an SM's faulting PC inside a module's relocated code; from the
 * warp tables when no PC lies in a module (a device-side assert: the warp's block, its grid, the grid's
 * module), with the lane's exception as the error; nobody from a dump whose PC lies nowhere and has no
 * warps. Then every prefix of a dump, and dumps whose tables point outside the file or past their rows:
 * read without a fault (ASan in CI), and never a module that is not in the dump. The faulting kernel's
 * name, the client's string, comes out printable on one line. Last, old dumps pruned
 * from the log directory: the newest kept, nothing else touched. */
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/server.h"
#include "test_util.h"
#include "tests/fakecuda/dump_layout.h"

/* What coredump.c calls but this test never reaches (coredumps are not turned on here). */
CUresult cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
    (void)attrib, (void)value, (void)size;
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define MODULE 0x7f0000001000ull
#define CODE 0x7e0000000000ull
#define HANDLER 0xfff0000000ull

static size_t put(struct dump *d, const void *p, size_t n)
{
    size_t at = dump_put(d, p, n);
    REQUIRE(at, "dump buffer");
    return at;
}

/* The kernel's code section's name: the client chose it, with a line break and a ';' to forge lines. */
static const char KERNEL_SECTION[] = ".text._Z5spoof\nfault 9: culprit;x";
#define KERNEL_TOLD "_Z5spoof?fault?9:?culprit?x"

/* A module's relocated image: one code section at CODE, 0x100 bytes, named KERNEL_SECTION. */
static size_t image(uint8_t *out)
{
    Elf64_Ehdr eh = {.e_type = ET_EXEC, .e_machine = 190, .e_version = EV_CURRENT, .e_ehsize = sizeof eh,
                     .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = 3, .e_shoff = sizeof eh, .e_shstrndx = 2};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    size_t names_at = sizeof eh + 3 * sizeof(Elf64_Shdr);
    Elf64_Shdr sh[3] = {{0},
                        {.sh_name = 1, .sh_type = SHT_NOBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR, .sh_addr = CODE,
                         .sh_size = 0x100},
                        {.sh_type = SHT_STRTAB, .sh_offset = names_at, .sh_size = 1 + sizeof KERNEL_SECTION}};
    memcpy(out, &eh, sizeof eh);
    memcpy(out + sizeof eh, sh, sizeof sh);
    out[names_at] = 0;
    memcpy(out + names_at + 1, KERNEL_SECTION, sizeof KERNEL_SECTION);
    return names_at + 1 + sizeof KERNEL_SECTION;
}

/* by_warp: an assert's shape (no SM exception, the PC in a handler, exception 12 on the lane); else an
 * illegal address (SM exception 14 at a PC in the module's code). sm_pc: the SM's error PC. */
static void make(struct dump *d, bool by_warp, uint64_t sm_pc)
{
    memset(d, 0, sizeof *d);
    d->len = sizeof(Elf64_Ehdr);
    uint8_t sm[48] = {0}, grid[120] = {0}, cta[24] = {0}, warp[32] = {0}, lane[48] = {0}, img[512];
    uint32_t exc = by_warp ? 0 : 14, valid = by_warp ? 0 : 1, one = 1, assert_exc = 12;
    uint64_t module = MODULE, grid_id = 9, hpc = HANDLER;
    memcpy(sm + 8, &exc, 4);
    memcpy(sm + 12, &valid, 4);
    memcpy(sm + 16, &sm_pc, 8);
    memcpy(grid, &grid_id, 8);
    uint64_t entry = CODE;
    memcpy(grid + 24, &entry, 8);
    memcpy(grid + 32, &module, 8);
    memcpy(cta, &grid_id, 8);
    memcpy(warp, &hpc, 8);
    memcpy(warp + 24, &one, 4);
    memcpy(lane, &hpc, 8);
    memcpy(lane + 32, &assert_exc, 4);
    size_t sm_at = put(d, sm, sizeof sm), mod_at = put(d, &module, 8), img_at = put(d, img, image(img));
    size_t img_len = d->len - img_at;
    size_t grid_at = put(d, grid, sizeof grid), cta_at = put(d, cta, sizeof cta);
    size_t warp_at = put(d, warp, sizeof warp), lane_at = put(d, lane, sizeof lane);
    Elf64_Shdr sh[8] = {
        {0},
        {.sh_type = SHT_LOUSER + 11, .sh_offset = sm_at, .sh_size = sizeof sm, .sh_entsize = sizeof sm},
        {.sh_type = SHT_LOUSER + 16, .sh_offset = mod_at, .sh_size = 8, .sh_entsize = 8},
        {.sh_type = SHT_LOUSER + 7, .sh_offset = img_at, .sh_size = img_len, .sh_link = 2, .sh_info = 0},
        {.sh_type = SHT_LOUSER + 12, .sh_offset = grid_at, .sh_size = sizeof grid, .sh_entsize = sizeof grid},
        {.sh_type = SHT_LOUSER + 13, .sh_offset = cta_at, .sh_size = sizeof cta, .sh_entsize = sizeof cta,
         .sh_link = 1},
        {.sh_type = SHT_LOUSER + 14, .sh_offset = warp_at, .sh_size = sizeof warp, .sh_entsize = sizeof warp,
         .sh_link = 5},
        {.sh_type = SHT_LOUSER + 15, .sh_offset = lane_at, .sh_size = sizeof lane, .sh_entsize = sizeof lane,
         .sh_link = 6},
    };
    unsigned nsh = by_warp ? 8 : 4;
    size_t sh_at = put(d, sh, nsh * sizeof sh[0]);
    Elf64_Ehdr eh = {.e_type = ET_CORE, .e_machine = 190, .e_version = EV_CURRENT, .e_ehsize = sizeof eh,
                     .e_shoff = sh_at, .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = (uint16_t)nsh};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    memcpy(d->b, &eh, sizeof eh);
}

static char kernel[64]; /* the faulting kernel read_back found */

static size_t read_back(const void *b, size_t len, uint64_t *mods, CUresult *error)
{
    FILE *f = fopen(srv_coredump_path, "wb");
    REQUIRE(f && fwrite(b, 1, len, f) == len && fclose(f) == 0, "writing %s", srv_coredump_path);
    return srv_coredump_culprits(mods, 8, error, kernel, sizeof kernel);
}

/* The section header i of d, to change. */
static Elf64_Shdr *header(struct dump *d, unsigned i)
{
    Elf64_Ehdr eh;
    memcpy(&eh, d->b, sizeof eh);
    return (Elf64_Shdr *)(d->b + eh.e_shoff + i * sizeof(Elf64_Shdr));
}

/* A mangled dump names no module but the dump's own, and is read without a fault. */
static void expect_safe(const struct dump *d, size_t len, const char *what)
{
    uint64_t mods[8];
    CUresult e = CUDA_SUCCESS;
    size_t n = read_back(d->b, len, mods, &e);
    CHECK(n <= 1 && (n == 0 || mods[0] == MODULE), "%s: %zu module(s), the first %#llx", what, n,
          n ? (unsigned long long)mods[0] : 0ull);
    for (const char *q = kernel; *q; q++) /* whatever is read of a name: printable, one line */
        CHECK(*q > 0x20 && *q < 0x7f && *q != ';', "%s: a kernel name with byte %#x", what, (unsigned)(uint8_t)*q);
}

/* 12 dumps of different ages beside files that are not this server's: the 8 newest dumps stay. */
static void prune_checks(void)
{
    char dir[] = "/tmp/cumux-test-prune.XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *others[] = {"cumuxd.log", "cumuxd-gpu.12.core.txt", "cumuxd-gpu..core", "cumuxd-gpu.x1.core",
                            "core", "cumuxd-gpu.7.cor"};
    char path[256];
    for (int i = 0; i < 12; i++) {
        snprintf(path, sizeof path, "%s/cumuxd-gpu.%d.core", dir, 1000 + i);
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        CHECK(fd >= 0, "create %s", path);
        close(fd);
        /* Ages out of order with the pids: pid 1000+i is i*7 % 12 minutes old. */
        struct timespec t[2] = {{.tv_sec = 1700000000 - (long)((i * 7) % 12) * 60}, {0}};
        t[1] = t[0];
        CHECK(utimensat(AT_FDCWD, path, t, 0) == 0, "utimensat");
    }
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        close(fd);
    }
    snprintf(path, sizeof path, "%s/cumuxd-gpu.99.core", dir); /* a directory of that name: not a dump */
    CHECK(mkdir(path, 0700) == 0, "mkdir");
    CHECK(srv_coredump_prune(dir, 8) == 4, "pruning 12 dumps to 8 did not remove 4");
    for (int i = 0; i < 12; i++) {
        snprintf(path, sizeof path, "%s/cumuxd-gpu.%d.core", dir, 1000 + i);
        bool old = (i * 7) % 12 >= 8;
        CHECK((access(path, F_OK) == 0) == !old, "dump %d (%d minutes old) %s", 1000 + i, (i * 7) % 12,
              old ? "kept" : "removed");
    }
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        CHECK(access(path, F_OK) == 0, "%s removed", others[i]);
        unlink(path);
    }
    CHECK(srv_coredump_prune(dir, 8) == 0, "a second pruning removed more");
    CHECK(srv_coredump_prune("/nonexistent-cumux-dir", 0) == 0, "pruning a missing directory");
    snprintf(path, sizeof path, "%s/cumuxd-gpu.99.core", dir);
    rmdir(path);
    for (int i = 0; i < 12; i++) {
        snprintf(path, sizeof path, "%s/cumuxd-gpu.%d.core", dir, 1000 + i);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    snprintf(srv_coredump_path, sizeof srv_coredump_path, "/tmp/cumux-test-coredump.%d", (int)getpid());
    struct dump d;
    uint64_t mods[8];
    CUresult e;

    /* An illegal address: the SM's PC in the module's code. */
    make(&d, false, CODE + 0x40);
    e = CUDA_SUCCESS;
    size_t n = read_back(d.b, d.len, mods, &e);
    CHECK(n == 1 && mods[0] == MODULE, "illegal address: %zu module(s)", n);
    CHECK(e == CUDA_ERROR_ILLEGAL_ADDRESS, "illegal address: error %d", (int)e);
    CHECK(!strcmp(kernel, KERNEL_TOLD), "illegal address: kernel \"%s\"", kernel);

    /* A PC in no module, no warps: nobody. */
    make(&d, false, HANDLER);
    e = CUDA_SUCCESS;
    CHECK(read_back(d.b, d.len, mods, &e) == 0, "a PC in no module named someone");
    CHECK(!kernel[0], "a PC in no module named kernel \"%s\"", kernel);

    /* An assert: the warp's block, its grid, the grid's module; the lane's exception. */
    make(&d, true, 0);
    e = CUDA_SUCCESS;
    n = read_back(d.b, d.len, mods, &e);
    CHECK(n == 1 && mods[0] == MODULE, "assert: %zu module(s)", n);
    CHECK(e == CUDA_ERROR_ASSERT, "assert: error %d", (int)e);
    CHECK(!strcmp(kernel, KERNEL_TOLD), "assert: kernel \"%s\" (from the grid's entry)", kernel);

    /* A grid table that names another grid: nobody. */
    make(&d, true, 0);
    uint64_t other = 10;
    memcpy(d.b + header(&d, 4)->sh_offset, &other, 8);
    e = CUDA_SUCCESS;
    CHECK(read_back(d.b, d.len, mods, &e) == 0, "a block of a grid the table does not list named someone");

    /* Every prefix of both kinds (the file cut short anywhere). */
    for (int kind = 0; kind < 2; kind++) {
        make(&d, kind, CODE + 0x40);
        for (size_t len = 1; len < d.len; len += 11)
            expect_safe(&d, len, "a prefix");
    }

    /* Tables pointing where they must not: each section's link, row, offset and entry size mangled. */
    const uint64_t bad[] = {0, 1, 7, 1000, UINT32_MAX, UINT64_MAX / 2, UINT64_MAX};
    for (unsigned s = 1; s < 8; s++) {
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            for (int field = 0; field < 5; field++) {
                make(&d, true, 0);
                Elf64_Shdr *h = header(&d, s);
                switch (field) {
                case 0: h->sh_link = (uint32_t)bad[k]; break;
                case 1: h->sh_info = (uint32_t)bad[k]; break;
                case 2: h->sh_offset = bad[k]; break;
                case 3: h->sh_size = bad[k]; break;
                default: h->sh_entsize = bad[k]; break;
                }
                expect_safe(&d, d.len, "a mangled table");
            }
        }
    }
    unlink(srv_coredump_path);
    prune_checks();
    printf("test_coredump: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
