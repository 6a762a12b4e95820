/* fakecuda's GPU coredumps: cuCoredumpSetAttributeGlobal, and at a fault (the fault_store kernel) a dump
 * with what cumuxd reads from a real one (server/coredump.c): one SM with an exception and its error PC, the
 * module table, and the faulting module's relocated image, whose code section holds that PC. The layout is
 * that of the CUDA coredump (ELF, sections of type SHT_LOUSER + n); the fake's "code address" of a kernel
 * is its function object's address. */
#include <elf.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dump_layout.h"
#include "fake.h"

static pthread_mutex_t cd_mu = PTHREAD_MUTEX_INITIALIZER;
static bool cd_on;
static int cd_flags;
static char cd_file[512];

CUresult cuCoredumpSetAttributeGlobal(CUcoredumpSettings attr, void *value, size_t *size)
{
    if (!value || !size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cd_mu);
    switch (attr) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION:
        if (*size != sizeof(bool)) /* as the driver: a bool, nothing wider */
            r = CUDA_ERROR_INVALID_VALUE;
        else
            cd_on = *(bool *)value;
        break;
    case CU_COREDUMP_GENERATION_FLAGS:
        if (*size != sizeof(int))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            cd_flags = *(int *)value;
        break;
    case CU_COREDUMP_FILE:
        if (*size == 0 || *size > sizeof cd_file || memchr(value, 0, *size) == NULL)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            memcpy(cd_file, value, *size);
        break;
    default:
        r = CUDA_ERROR_NOT_SUPPORTED;
        break;
    }
    pthread_mutex_unlock(&cd_mu);
    return r;
}

#define CODE_BYTES 0x100u
#define PC_OFFSET 0x40u

/* A cubin with one code section at `code`, named for the kernel (.text.NAME), as nvcc names them. */
static size_t image(uint8_t *out, size_t cap, uint64_t code, const char *kernel)
{
    char names[96];
    int nl = snprintf(names, sizeof names, "%c.shstrtab%c.text.%s", 0, 0, kernel);
    if (nl < 0 || (size_t)nl >= sizeof names)
        return 0;
    size_t names_len = (size_t)nl + 1;
    Elf64_Ehdr eh = {.e_type = ET_EXEC, .e_machine = 190 /* EM_CUDA */, .e_version = EV_CURRENT,
                     .e_ehsize = sizeof eh, .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = 3, .e_shstrndx = 1};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    size_t names_at = sizeof eh, sh_at = (names_at + names_len + 7) & ~(size_t)7;
    size_t len = sh_at + 3 * sizeof(Elf64_Shdr);
    if (len > cap)
        return 0;
    eh.e_shoff = sh_at;
    Elf64_Shdr sh[3] = {{0},
                        {.sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = names_at, .sh_size = names_len},
                        {.sh_name = 11, .sh_type = SHT_NOBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR, .sh_addr = code,
                         .sh_size = CODE_BYTES}};
    memset(out, 0, len);
    memcpy(out, &eh, sizeof eh);
    memcpy(out + names_at, names, names_len);
    memcpy(out + sh_at, sh, sizeof sh);
    return len;
}

/* A device-side assert (exception 12), as the H200's dumps are thought to show one (2026-12-03: its dump
 * named no module by PC): no exception in the SM table, the warp stopped at a PC in the driver's own
 * assert handler (outside every module's code), the exception on the warp's lane; the warp's block, and
 * the block's grid in the grid table, say whose kernel it was. Any other exception: the SM table has it,
 * with the PC in the faulting kernel's code. */
#define HANDLER_PC 0xfff0000000ull

bool fc_coredump_fault(const struct fc_launch *l, uint32_t exception)
{
    pthread_mutex_lock(&cd_mu);
    bool on = cd_on && cd_file[0];
    char file[sizeof cd_file];
    memcpy(file, cd_file, sizeof file);
    pthread_mutex_unlock(&cd_mu);
    if (!on)
        return false;
    bool by_warp = exception == 12;
    uint64_t code = (uint64_t)(uintptr_t)l->fn, module = (uint64_t)(uintptr_t)l->fn->mod, grid_id = 7;
    struct dump d = {.len = sizeof(Elf64_Ehdr)};
    static const char names[] = "\0.shstrtab\0.cudbg.smtbl.dev0\0.cudbg.modtbl.dev0.ctx0\0.cudbg.relfimg.dev0.ctx0"
                                "\0.cudbg.gridtbl.dev0\0.cudbg.ctatbl.dev0.sm0\0.cudbg.wptbl.dev0.sm0.cta0"
                                "\0.cudbg.lntbl.dev0.sm0.cta0.wp0";
    size_t names_at = dump_put(&d, names, sizeof names);
    /* CudbgSmTableEntry: smId, padding, exception, errorPCValid, errorPC, cluster fields. */
    uint8_t sm[48] = {0};
    uint32_t exc = by_warp ? 0 : exception, valid = by_warp || !exception ? 0 : 1; /* 0: names no one */
    uint64_t pc = code + PC_OFFSET;
    memcpy(sm + 8, &exc, 4);
    memcpy(sm + 12, &valid, 4);
    memcpy(sm + 16, &pc, 8);
    size_t sm_at = dump_put(&d, sm, sizeof sm);
    size_t mod_at = dump_put(&d, &module, sizeof module);
    uint8_t img[512];
    size_t img_len = image(img, sizeof img, code, l->fn->def->name);
    size_t img_at = dump_put(&d, img, img_len);
    /* CudbgGridTableEntry: gridId64 contextId function functionEntry moduleHandle ...; CTA: gridId64
     * blockIdx[3] pad; warp: errorPC warpId validLanes activeLanes isWarpBroken errorPCValid pad; lane:
     * virtualPC physPC ln threadIdx[3] exception ... */
    uint8_t grid[120] = {0}, cta[24] = {0}, warp[32] = {0}, lane[48] = {0};
    uint64_t hpc = HANDLER_PC;
    uint32_t one = 1, lanes = 1;
    memcpy(grid, &grid_id, 8);
    memcpy(grid + 16, &code, 8);
    memcpy(grid + 24, &code, 8); /* the kernel's entry */
    memcpy(grid + 32, &module, 8);
    memcpy(cta, &grid_id, 8);
    memcpy(warp, &hpc, 8);
    memcpy(warp + 12, &lanes, 4);
    memcpy(warp + 24, &one, 4);
    memcpy(lane, &hpc, 8);
    memcpy(lane + 32, &exception, 4);
    size_t grid_at = 1, cta_at = 1, warp_at = 1, lane_at = 1; /* not 0: "did not fit" */
    if (by_warp) {
        grid_at = dump_put(&d, grid, sizeof grid);
        cta_at = dump_put(&d, cta, sizeof cta);
        warp_at = dump_put(&d, warp, sizeof warp);
        lane_at = dump_put(&d, lane, sizeof lane);
    }
    Elf64_Shdr sh[9] = {
        {0},
        {.sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = names_at, .sh_size = sizeof names},
        {.sh_name = 11, .sh_type = SHT_LOUSER + 11, .sh_offset = sm_at, .sh_size = sizeof sm, .sh_entsize = sizeof sm},
        {.sh_name = 29, .sh_type = SHT_LOUSER + 16, .sh_offset = mod_at, .sh_size = 8, .sh_entsize = 8},
        {.sh_name = 53, .sh_type = SHT_LOUSER + 7, .sh_offset = img_at, .sh_size = img_len, .sh_link = 3, .sh_info = 0},
        {.sh_name = 78, .sh_type = SHT_LOUSER + 12, .sh_offset = grid_at, .sh_size = sizeof grid, .sh_entsize = sizeof grid},
        {.sh_name = 98, .sh_type = SHT_LOUSER + 13, .sh_offset = cta_at, .sh_size = sizeof cta, .sh_entsize = sizeof cta,
         .sh_link = 2, .sh_info = 0},
        {.sh_name = 121, .sh_type = SHT_LOUSER + 14, .sh_offset = warp_at, .sh_size = sizeof warp,
         .sh_entsize = sizeof warp, .sh_link = 6, .sh_info = 0},
        {.sh_name = 148, .sh_type = SHT_LOUSER + 15, .sh_offset = lane_at, .sh_size = sizeof lane,
         .sh_entsize = sizeof lane, .sh_link = 7, .sh_info = 0},
    };
    unsigned nsh = by_warp ? 9 : 5;
    size_t sh_at = dump_put(&d, sh, nsh * sizeof sh[0]);
    if (!names_at || !sm_at || !mod_at || !img_len || !img_at || !grid_at || !cta_at || !warp_at || !lane_at || !sh_at)
        return false;
    Elf64_Ehdr eh = {.e_type = ET_CORE, .e_machine = 190, .e_version = EV_CURRENT, .e_ehsize = sizeof eh,
                     .e_shoff = sh_at, .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = (uint16_t)nsh, .e_shstrndx = 1};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_ident[EI_OSABI] = 0x33; /* ELFOSABI_CUDA */
    memcpy(d.b, &eh, sizeof eh);
    FILE *f = fopen(file, "wb");
    if (!f)
        return false;
    fwrite(d.b, 1, d.len, f);
    fclose(f);
    return true;
}
