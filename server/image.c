/* Module images are parsed by the driver, which trusts the lengths and offsets written in them: a fatbin
 * says how long it is, an ELF cubin where its tables and sections are. The client wrote those numbers,
 * so before the driver sees an image the server checks that everything its headers point at lies inside
 * the bytes the client sent (the mapping of `size` bytes, followed by a page of zeros). What the driver
 * then reads inside those bounds is its own business; it cannot leave them by following a header. */
#include <elf.h>
#include <string.h>

#include "common/ranges.h"
#include "server/server.h"

#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

/* Does [off, off + len) lie within size? */
static bool inside(uint64_t off, uint64_t len, uint64_t size)
{
    uint64_t end;
    return cumux_add_u64(off, len, &end) && end <= size;
}

/* A fatbin container: a 16-byte header (magic, version, header size, payload size), then entries, each
 * with a header of its own (kind, version, header size, payload size) and its payload. */
static bool fatbin_fits(const uint8_t *p, uint64_t size)
{
    uint32_t magic;
    uint16_t hsize;
    uint64_t fat;
    if (size < 16)
        return false;
    memcpy(&magic, p, 4);
    memcpy(&hsize, p + 6, 2);
    memcpy(&fat, p + 8, 8);
    if (magic != FATBIN_MAGIC || hsize < 16 || !inside(hsize, fat, size))
        return false;
    uint64_t off = hsize, end = hsize + fat;
    while (off < end) {
        uint32_t ehsize;
        uint64_t payload;
        if (!inside(off, 16, end))
            return false;
        memcpy(&ehsize, p + off + 4, 4);
        memcpy(&payload, p + off + 8, 8);
        uint64_t next;
        if (ehsize < 16 || !cumux_add_u64(off, ehsize, &next) || !cumux_add_u64(next, payload, &next) || next > end)
            return false;
        off = next;
    }
    return true;
}

static bool elf_fits(const uint8_t *p, uint64_t size)
{
    Elf64_Ehdr eh;
    if (size < sizeof eh)
        return false;
    memcpy(&eh, p, sizeof eh);
    if (eh.e_ident[EI_CLASS] != ELFCLASS64)
        return false; /* device code is 64-bit ELF only */
    uint64_t sh_bytes = (uint64_t)eh.e_shnum * eh.e_shentsize, ph_bytes = (uint64_t)eh.e_phnum * eh.e_phentsize;
    if ((eh.e_shnum && (eh.e_shentsize < sizeof(Elf64_Shdr) || !inside(eh.e_shoff, sh_bytes, size))) ||
        (eh.e_phnum && (eh.e_phentsize < sizeof(Elf64_Phdr) || !inside(eh.e_phoff, ph_bytes, size))))
        return false;
    for (uint32_t i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, p + eh.e_shoff + (uint64_t)i * eh.e_shentsize, sizeof sh);
        if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !inside(sh.sh_offset, sh.sh_size, size))
            return false;
    }
    for (uint32_t i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, p + eh.e_phoff + (uint64_t)i * eh.e_phentsize, sizeof ph);
        if (!inside(ph.p_offset, ph.p_filesz, size))
            return false;
    }
    return true;
}

bool srv_image_fits(const uint8_t *p, uint64_t size)
{
    uint32_t magic = 0;
    if (size >= 4)
        memcpy(&magic, p, 4);
    if (magic == FATBIN_WRAPPER_MAGIC)
        return false; /* a pointer to the client's memory: meaningless here (the shim sends what it points at) */
    if (magic == FATBIN_MAGIC)
        return fatbin_fits(p, size);
    if (size >= SELFMAG && !memcmp(p, ELFMAG, SELFMAG))
        return elf_fits(p, size);
    return true; /* text (PTX): it ends at the first NUL, at the latest in the zeros after the mapping */
}
