/* mmap for memory that instrumented code reads (shared channels, client memory, module images).
 *
 * Under AddressSanitizer (the CI build), GCC 12's runtime does not clear the shadow of a range on munmap:
 * when the kernel hands the same addresses back for a new mapping, the shadow may still say "ASan
 * internal" or "freed" from the range's last life (thread descriptors, for one), and the first read of
 * the new mapping is reported as a wild access. A fresh mapping is all addressable, so its shadow is
 * cleared here. Without ASan this is mmap. */
#ifndef CUMUX_MAP_H
#define CUMUX_MAP_H

#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

#if defined(__SANITIZE_ADDRESS__)
#define CUMUX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUMUX_ASAN 1
#endif
#endif

#ifdef CUMUX_ASAN
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif

/* Makes a range that instrumented code may now read all addressable to ASan (see above). */
static inline void cumux_unpoison(void *p, size_t len)
{
#ifdef CUMUX_ASAN
    __asan_unpoison_memory_region(p, len);
#else
    (void)p;
    (void)len;
#endif
}

static inline void *cumux_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = mmap(addr, len, prot, flags, fd, off);
#ifdef CUMUX_ASAN
    if (p != MAP_FAILED)
        __asan_unpoison_memory_region(p, len);
#endif
    return p;
}

#endif
