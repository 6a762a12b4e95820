/* srv_image_fits (server/image.c): a module image whose headers point past its own bytes is refused before
 * the driver parses it. Found by fuzz_server: a fatbin claiming more payload than the client sent made the
 * driver read past the server's mapping of the image. Real images pass: the GPU suite's fatbin and a cubin
 * nvcc made, and every variant with one length or offset pushed out by a byte is refused.
 * usage: test_image_fits FATBIN CUBIN */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "test_util.h"

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "open %s", path);
    static uint8_t buf[2][4 << 20];
    static int k;
    uint8_t *b = buf[k++ % 2];
    *n = fread(b, 1, sizeof buf[0], f);
    fclose(f);
    REQUIRE(*n > 64 && *n < sizeof buf[0], "read %s", path);
    return b;
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_image_fits FATBIN CUBIN\n");
        return 2;
    }
    size_t n;
    uint8_t *fb = read_all(argv[1], &n);
    static uint8_t copy[4 << 20];
    CHECK(srv_image_fits(fb, n), "the GPU suite's fatbin");
    CHECK(!srv_image_fits(fb, n - 1), "the fatbin less its last byte");
    memcpy(copy, fb, n);
    put64(copy + 8, get64(fb + 8) + 1);
    CHECK(!srv_image_fits(copy, n), "a fatbin claiming one more payload byte than it has");
    memcpy(copy, fb, n);
    put64(copy + 8, UINT64_MAX - 8);
    CHECK(!srv_image_fits(copy, n), "a fatbin whose header size + payload wraps");
    memcpy(copy, fb, n);
    uint16_t hs;
    memcpy(&hs, fb + 6, 2);
    put64(copy + hs + 8, get64(fb + hs + 8) + (1ull << 40));
    CHECK(!srv_image_fits(copy, n), "a fatbin entry claiming 1 TiB of payload");
    memcpy(copy, fb, n);
    put64(copy + hs + 8, UINT64_MAX);
    CHECK(!srv_image_fits(copy, n), "a fatbin entry whose end wraps");

    size_t cn;
    uint8_t *cb = read_all(argv[2], &cn);
    CHECK(srv_image_fits(cb, cn), "a cubin from nvcc");
    Elf64_Ehdr eh;
    memcpy(&eh, cb, sizeof eh);
    CHECK(!srv_image_fits(cb, eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize - 1), "a cubin cut inside its section table");
    for (int i = 1; i < eh.e_shnum; i++) {
        memcpy(copy, cb, cn);
        Elf64_Shdr sh;
        memcpy(&sh, cb + eh.e_shoff + (uint64_t)i * eh.e_shentsize, sizeof sh);
        if (sh.sh_type == SHT_NOBITS || sh.sh_type == SHT_NULL)
            continue;
        sh.sh_size = cn - sh.sh_offset + 1;
        memcpy(copy + eh.e_shoff + (uint64_t)i * eh.e_shentsize, &sh, sizeof sh);
        CHECK(!srv_image_fits(copy, cn), "section %d made to end one byte past the cubin", i);
    }
    memcpy(copy, cb, cn);
    Elf64_Ehdr bad = eh;
    bad.e_phoff = UINT64_MAX - 16;
    bad.e_phnum = bad.e_phnum ? bad.e_phnum : 1;
    bad.e_phentsize = sizeof(Elf64_Phdr);
    memcpy(copy, &bad, sizeof bad);
    CHECK(!srv_image_fits(copy, cn), "a cubin whose program header table wraps");

    const char *ptx = ".version 8.0\n.target sm_90\n";
    CHECK(srv_image_fits((const uint8_t *)ptx, strlen(ptx)), "PTX text");
    printf("test_image_fits: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
