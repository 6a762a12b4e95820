/* Which client's kernel faulted: read from the GPU coredump the driver writes at the fault.
 *
 * The driver's API does not say which kernel of a context faulted. Its GPU coredumps do: with coredumps on
 * (set for the process before any context exists: cuCoredumpSetAttributeGlobal; the per-context call
 * after creation wrote nothing on the H200), lightweight (no memory contents) and without abort
 * (CU_COREDUMP_SKIP_ABORT), the driver writes an ELF file of a few hundred KB within about 10 ms of the
 * fault and the process lives on. Its SM and warp tables give the PC of the faulting instruction; each
 * loaded module's relocated image (a cubin whose code sections carry their load addresses) and the module
 * table give the module whose code holds that PC; each client's modules are its own CUmodules. When no
 * such PC lies in a module (a device-side assert stops in the driver's handler), the faulting warps'
 * blocks and the grid table name the grid's module (warp_culprits). The format
 * is public (cuda-gdb's cudacoredump.h); this reads only what it needs, every offset bounds-checked.
 *
 * On unless CUMUX_FAULT_COREDUMP=0 (since 2026-12-03; docs/faults.md "Defaults"). What dumps cost the
 * culprit: on the H200 (driver 580) with dumps on, natively too, the faulting stream's synchronize answers CUDA_SUCCESS some 90 ms before the context
 * shows the error and the dump file appears (tools/probe_fault_culprit.c, 12-03: success at 229 ms, error
 * at 317 ms, dump complete at 328 ms). A success answered while a dump exists is held (fault.c
 * srv_fault_hold_if_dumping), which caught the illegal-address culprits of the 50-fault soak; a
 * device-side assert's synchronize still came back CUDA_SUCCESS (12-03), its error at the next call. With
 * dumps off every culprit gets its error at that synchronize, but beside other busy clients is not named. */

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/server.h"

char srv_coredump_path[512];

/* Section types of the CUDA coredump (SHT_LOUSER + n). */
#define CD_RELF_IMG (SHT_LOUSER + 7)
#define CD_SM_TABLE (SHT_LOUSER + 11)
#define CD_GRID_TABLE (SHT_LOUSER + 12)
#define CD_CTA_TABLE (SHT_LOUSER + 13)
#define CD_WP_TABLE (SHT_LOUSER + 14)
#define CD_LN_TABLE (SHT_LOUSER + 15)
#define CD_MOD_TABLE (SHT_LOUSER + 16)

/* Dumps are kept in the log directory for cuda-gdb, one a failed worker: without a bound a server that
 * met thousands of faults would fill the disk. The newest `keep` (CUMUX_COREDUMP_KEEP, default 8) stay;
 * only names this server writes (cumuxd-gpu.DIGITS.core) are touched. Returns how many went. */
struct dump_file {
    struct timespec mtime;
    char name[64];
};

static bool dump_name(const char *n)
{
    const char *p = n + strlen("cumuxd-gpu.");
    if (strncmp(n, "cumuxd-gpu.", strlen("cumuxd-gpu.")) || *p < '0' || *p > '9')
        return false;
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, ".core") && strlen(n) < sizeof(((struct dump_file *)0)->name);
}

static int newest_first(const void *a, const void *b)
{
    const struct timespec *x = &((const struct dump_file *)a)->mtime, *y = &((const struct dump_file *)b)->mtime;
    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? 1 : -1;
    return x->tv_nsec < y->tv_nsec ? 1 : x->tv_nsec > y->tv_nsec ? -1 : 0;
}

size_t srv_coredump_prune(const char *dir, size_t keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dump_file *v = NULL;
    size_t n = 0, cap = 0, gone = 0;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (!dump_name(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            struct dump_file *nv = realloc(v, nc * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = nc;
        }
        size_t len = strlen(e->d_name);
        if (len >= sizeof v[n].name) /* not a name we write: leave it */
            continue;
        v[n].mtime = st.st_mtim;
        memcpy(v[n].name, e->d_name, len + 1);
        n++;
    }
    if (n > keep) {
        qsort(v, n, sizeof *v, newest_first);
        for (size_t i = keep; i < n; i++)
            gone += unlinkat(dirfd(d), v[i].name, 0) == 0 || errno == ENOENT;
    }
    closedir(d);
    free(v);
    return gone;
}

static size_t dumps_to_keep(void)
{
    const char *e = getenv("CUMUX_COREDUMP_KEEP");
    char *end;
    unsigned long v = e && *e ? strtoul(e, &end, 10) : 8;
    return e && *e && (*end || v > 100000) ? 8 : (size_t)v;
}

/* Whether the dump has begun is asked at every successful answer (dispatch.c): a stat each time cost ~1 us
 * a round trip on the H200 (12-03: 170 -> 1,094 ns). An inotify watch on the log directory, set before any
 * context exists, has an event queued the moment the driver creates the file: asking the watch whether
 * anything is queued (FIONREAD) is a cheaper call, and exact. Without a watch, the file system is asked. */
static int dump_watch_fd = -1;
static _Atomic int dump_seen;
static pthread_mutex_t dump_watch_lock = PTHREAD_MUTEX_INITIALIZER;

static void dump_watch_start(const char *dir)
{
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0)
        return;
    if (inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO) < 0) {
        close(fd);
        return;
    }
    dump_watch_fd = fd;
}

/* Something was created in the directory: whether it was the dump (other files: the log, other workers'
 * dumps). */
static void dump_watch_drain(void)
{
    const char *base = strrchr(srv_coredump_path, '/');
    base = base ? base + 1 : srv_coredump_path;
    _Alignas(struct inotify_event) char buf[4096];
    pthread_mutex_lock(&dump_watch_lock);
    ssize_t n;
    while ((n = read(dump_watch_fd, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
            const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
            if (ev->len > (size_t)(n - off) - sizeof *ev)
                break; /* not within what was read (the kernel gives whole events: never seen) */
            if (ev->len && memchr(ev->name, 0, ev->len) && !strcmp(ev->name, base))
                atomic_store(&dump_seen, 1);
            off += (ssize_t)(sizeof *ev + ev->len);
        }
    }
    pthread_mutex_unlock(&dump_watch_lock);
}

bool srv_coredump_begun(void)
{
    if (!srv_coredump_path[0])
        return false;
    if (atomic_load_explicit(&dump_seen, memory_order_acquire))
        return true;
    int queued = 0;
    if (dump_watch_fd < 0 || ioctl(dump_watch_fd, FIONREAD, &queued) != 0)
        return access(srv_coredump_path, F_OK) == 0;
    if (queued > 0)
        dump_watch_drain();
    return atomic_load_explicit(&dump_seen, memory_order_acquire) != 0;
}

void srv_coredump_enable(void)
{
    const char *e = getenv("CUMUX_FAULT_COREDUMP");
    if ((e && !strcmp(e, "0")) || !srv_coredump_path[0]) { /* on unless CUMUX_FAULT_COREDUMP=0 */
        srv_coredump_path[0] = 0;
        return;
    }
    unlink(srv_coredump_path);
    char dir[sizeof srv_coredump_path];
    snprintf(dir, sizeof dir, "%s", srv_coredump_path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        dump_watch_start(dir);
        size_t gone = srv_coredump_prune(dir, dumps_to_keep());
        if (gone)
            cumux_debugf("GPU coredumps: %zu older dump(s) removed from %s (CUMUX_COREDUMP_KEEP)", gone, dir);
    }
    bool on = true; /* a C bool: the driver refuses a 4-byte int here */
    int flags = CU_COREDUMP_LIGHTWEIGHT_FLAGS | CU_COREDUMP_SKIP_ABORT;
    size_t son = sizeof on, sfl = sizeof flags, spath = strlen(srv_coredump_path) + 1;
    CUresult r = cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, srv_coredump_path, &spath);
    if (r == CUDA_SUCCESS)
        r = cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &sfl);
    if (r == CUDA_SUCCESS)
        r = cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &son);
    if (r != CUDA_SUCCESS) {
        cumux_logf("GPU coredumps unavailable (%d): a faulting client will not be named", (int)r);
        srv_coredump_path[0] = 0;
        if (dump_watch_fd >= 0)
            close(dump_watch_fd);
        dump_watch_fd = -1;
    }
}

/* An ELF file in memory. Headers are copied out, never cast: an image inside the dump may sit at any
 * offset. */
struct elf_view {
    const uint8_t *d;
    size_t len;
    uint64_t shoff;
    unsigned nsh, shstrndx;
};

static bool within(size_t len, uint64_t off, uint64_t n)
{
    return off <= len && n <= len - off;
}

static bool elf_open(struct elf_view *v, const uint8_t *d, size_t len)
{
    Elf64_Ehdr eh;
    if (len < sizeof eh)
        return false;
    memcpy(&eh, d, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || !within(len, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr)))
        return false;
    *v = (struct elf_view){d, len, eh.e_shoff, eh.e_shnum, eh.e_shstrndx};
    return true;
}

static Elf64_Shdr shdr(const struct elf_view *v, unsigned i)
{
    Elf64_Shdr s;
    memcpy(&s, v->d + v->shoff + (uint64_t)i * sizeof s, sizeof s);
    return s;
}

static const uint8_t *section(const struct elf_view *v, unsigned i, uint64_t *size)
{
    if (i >= v->nsh)
        return NULL;
    Elf64_Shdr s = shdr(v, i);
    if (s.sh_type == SHT_NOBITS || !within(v->len, s.sh_offset, s.sh_size))
        return NULL;
    *size = s.sh_size;
    return v->d + s.sh_offset;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* The error a program is told for an SM's exception (the debugger API's CUDBGException_t numbers), as the
 * driver tells it without dumps: with dumps on, on the H200 a device-side assert came back as
 * CUDA_ERROR_LAUNCH_FAILED. 0 for one not known here (the driver's own error is told then). */
static CUresult exception_error(uint32_t exc)
{
    switch (exc) {
    case 1:  /* lane illegal address */
    case 5:  /* warp out of range address */
    case 10: /* device illegal address */
    case 14: /* warp illegal address */
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    case 2: /* lane user stack overflow */
    case 3: /* device hardware stack overflow */
    case 9: /* warp hardware stack overflow */
        return CUDA_ERROR_HARDWARE_STACK_ERROR;
    case 4:
        return CUDA_ERROR_ILLEGAL_INSTRUCTION;
    case 6:  /* warp misaligned address */
    case 11: /* lane misaligned address */
        return CUDA_ERROR_MISALIGNED_ADDRESS;
    case 7:
        return CUDA_ERROR_INVALID_ADDRESS_SPACE;
    case 8:
        return CUDA_ERROR_INVALID_PC;
    case 12: /* warp assert */
        return CUDA_ERROR_ASSERT;
    default:
        return CUDA_SUCCESS;
    }
}

/* The faulting PCs: from SMs with an exception, and from warps whose error PC is valid; *error: the
 * error of the first SM exception known (exception_error), else left as it is. */
static size_t error_pcs(const struct elf_view *v, uint64_t *pcs, size_t cap, CUresult *error)
{
    size_t n = 0;
    for (unsigned i = 0; i < v->nsh && n < cap; i++) {
        Elf64_Shdr s = shdr(v, i);
        uint64_t size, es = s.sh_entsize;
        const uint8_t *p = section(v, i, &size);
        if (!p || !es)
            continue;
        for (uint64_t o = 0; o < size && es <= size - o && n < cap; o += es) {
            if (s.sh_type == CD_SM_TABLE && es >= 24 && rd32(p + o + 8) && rd32(p + o + 12)) {
                pcs[n++] = rd64(p + o + 16);
                if (*error == CUDA_SUCCESS)
                    *error = exception_error(rd32(p + o + 8));
            }
            else if (s.sh_type == CD_WP_TABLE && es >= 28 && rd32(p + o + 24))
                pcs[n++] = rd64(p + o);
        }
    }
    return n;
}

/* Whether a relocated cubin has code at pc; kernel (cap bytes, may be NULL): the kernel's name, from its
 * code section's (.text.NAME), or "" where the section says none. */
static bool image_holds(const uint8_t *img, uint64_t len, uint64_t pc, char *kernel, size_t cap)
{
    struct elf_view c;
    if (!elf_open(&c, img, (size_t)len))
        return false;
    for (unsigned i = 0; i < c.nsh; i++) {
        Elf64_Shdr s = shdr(&c, i);
        if (!(s.sh_flags & SHF_EXECINSTR) || !s.sh_addr || pc < s.sh_addr || pc - s.sh_addr >= s.sh_size)
            continue;
        uint64_t nsz;
        const char *names = kernel && cap ? (const char *)section(&c, c.shstrndx, &nsz) : NULL;
        if (names && s.sh_name < nsz) {
            const char *nm = names + s.sh_name;
            size_t n = strnlen(nm, (size_t)(nsz - s.sh_name));
            if (n < nsz - s.sh_name && n > 6 && !memcmp(nm, ".text.", 6)) {
                snprintf(kernel, cap, "%.*s", (int)(n - 6), nm + 6);
                /* The client's own string: printable only, in the log and in status lines. */
                for (char *q = kernel; *q; q++)
                    if (*q < 0x21 || *q > 0x7e || *q == ';')
                        *q = '?';
            }
        }
        return true;
    }
    return false;
}

/* The kernel whose code holds pc in any of the dump's relocated images, into kernel (left as it is where
 * none does). */
static void kernel_at(const struct elf_view *v, uint64_t pc, char *kernel, size_t cap)
{
    for (unsigned i = 0; i < v->nsh && !kernel[0]; i++) {
        uint64_t size;
        const uint8_t *img = shdr(v, i).sh_type == CD_RELF_IMG ? section(v, i, &size) : NULL;
        if (img)
            image_holds(img, size, pc, kernel, cap);
    }
}

/* Appends module to mods[0..*n) unless it is there (the caller keeps *n under the capacity). */
static void add_once(uint64_t *mods, size_t *n, uint64_t module)
{
    for (size_t j = 0; j < *n; j++)
        if (mods[j] == module)
            return;
    mods[(*n)++] = module;
}

/* Row `row` of table section `sec` of type `type`, at least `need` bytes of it; NULL where there is none. A
 * table names the row of its parent table it belongs to by sh_link (the parent's section) and sh_info
 * (the row): lanes belong to a warp, warps to a block (CTA), blocks to an SM. */
static const uint8_t *table_row(const struct elf_view *v, unsigned sec, uint64_t row, uint32_t type, uint64_t need)
{
    uint64_t size;
    const uint8_t *p = sec < v->nsh && shdr(v, sec).sh_type == type ? section(v, sec, &size) : NULL;
    uint64_t es = p ? shdr(v, sec).sh_entsize : 0;
    if (!p || es < need || row >= size / es)
        return NULL;
    return p + row * es;
}

/* The module of the grid that block `cta` (a CTA table's row) belongs to, and its kernel's entry PC: its
 * grid's row in a grid table. */
static bool grid_module(const struct elf_view *v, const uint8_t *cta, uint64_t *module, uint64_t *entry)
{
    uint64_t grid = rd64(cta);
    for (unsigned i = 0; i < v->nsh; i++) {
        if (shdr(v, i).sh_type != CD_GRID_TABLE)
            continue;
        for (uint64_t r = 0;; r++) {
            /* gridId64 contextId function functionEntry moduleHandle */
            const uint8_t *g = table_row(v, i, r, CD_GRID_TABLE, 40);
            if (!g)
                break;
            if (rd64(g) == grid) {
                *module = rd64(g + 32);
                *entry = rd64(g + 24);
                return true;
            }
        }
    }
    return false;
}

/* When no faulting PC lies in a loaded module's code (a device-side assert stops in the driver's own
 * handler), the faulting warps say whose kernel it was: each warp with a valid error PC, and each warp of a
 * lane with an exception, belongs to a block, the block to a grid, and the grid table names the grid's
 * module. *error: the first lane's exception, when the SM table gave none. */
static size_t warp_culprits(const struct elf_view *v, uint64_t *mods, size_t cap, CUresult *error,
                            uint64_t *entry)
{
    size_t n = 0;
    for (unsigned i = 0; i < v->nsh && n < cap; i++) {
        Elf64_Shdr s = shdr(v, i);
        if (s.sh_type != CD_WP_TABLE && s.sh_type != CD_LN_TABLE)
            continue;
        for (uint64_t r = 0; n < cap; r++) {
            unsigned wsec = i;
            uint64_t wrow = r;
            if (s.sh_type == CD_LN_TABLE) { /* virtualPC physPC ln threadIdx[3] exception ... */
                const uint8_t *lane = table_row(v, i, r, CD_LN_TABLE, 36);
                if (!lane)
                    break;
                uint32_t exc = rd32(lane + 32);
                if (!exc)
                    continue;
                if (*error == CUDA_SUCCESS)
                    *error = exception_error(exc);
                wsec = s.sh_link, wrow = s.sh_info;
            }
            const uint8_t *warp = table_row(v, wsec, wrow, CD_WP_TABLE, 28); /* errorPC ... errorPCValid at 24 */
            if (!warp)
                break;
            if (s.sh_type == CD_WP_TABLE && !rd32(warp + 24))
                continue;
            Elf64_Shdr ws = shdr(v, wsec);
            const uint8_t *cta = table_row(v, ws.sh_link, ws.sh_info, CD_CTA_TABLE, 8); /* gridId64 first */
            uint64_t module, its_entry;
            if (!cta || !grid_module(v, cta, &module, &its_entry))
                continue;
            if (!n)
                *entry = its_entry;
            add_once(mods, &n, module);
            if (s.sh_type == CD_LN_TABLE)
                break; /* a lane table is one warp's: its first lane with an exception says it */
        }
    }
    return n;
}

static size_t culprits_in(const uint8_t *d, size_t len, uint64_t *mods, size_t cap, CUresult *error,
                          char *kernel, size_t kcap)
{
    struct elf_view v;
    uint64_t pcs[64];
    if (!elf_open(&v, d, len))
        return 0;
    size_t npc = error_pcs(&v, pcs, 64, error), n = 0;
    for (unsigned i = 0; i < v.nsh && n < cap; i++) {
        Elf64_Shdr s = shdr(&v, i);
        uint64_t size, tsize;
        const uint8_t *img = s.sh_type == CD_RELF_IMG ? section(&v, i, &size) : NULL;
        unsigned table = s.sh_link;
        uint64_t idx = s.sh_info;
        const uint8_t *t =
            img && table < v.nsh && shdr(&v, table).sh_type == CD_MOD_TABLE ? section(&v, table, &tsize) : NULL;
        if (!t || !within((size_t)tsize, idx * 8, 8))
            continue;
        uint64_t handle = rd64(t + idx * 8);
        for (size_t k = 0; k < npc; k++) {
            if (image_holds(img, size, pcs[k], kernel[0] ? NULL : kernel, kcap)) {
                add_once(mods, &n, handle);
                break;
            }
        }
    }
    /* The warps' view: the culprit when no PC lies in a module, the error when the SMs gave none. */
    uint64_t by_warp[8], entry = 0;
    size_t nw = warp_culprits(&v, by_warp, 8, error, &entry);
    for (size_t k = 0; !n && k < nw && k < cap; k++)
        mods[k] = by_warp[k];
    if (!n && nw && entry)
        kernel_at(&v, entry, kernel, kcap); /* the grid's kernel, from its entry */
    return n ? n : (nw < cap ? nw : cap);
}

size_t srv_coredump_culprits(uint64_t *mods, size_t cap, CUresult *error, char *kernel, size_t kcap)
{
    *error = CUDA_SUCCESS;
    if (kcap)
        kernel[0] = 0;
    if (!srv_coredump_path[0])
        return 0;
    /* The driver writes the file as it reports the fault: wait until it exists and stops growing (up to
     * 3 s: the dump of a device-side assert took seconds on the H200). */
    long last = -1;
    for (int i = 0; i < 300; i++) {
        struct stat st;
        long sz = stat(srv_coredump_path, &st) == 0 ? (long)st.st_size : -1;
        if (sz > 0 && sz == last)
            break;
        last = sz;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    FILE *f = fopen(srv_coredump_path, "rb");
    if (!f)
        return 0;
    size_t n = 0;
    uint8_t *d = last > 0 && last < (1l << 30) ? malloc((size_t)last) : NULL;
    if (d && fread(d, 1, (size_t)last, f) == (size_t)last)
        n = culprits_in(d, (size_t)last, mods, cap, error, kernel, kcap);
    free(d);
    fclose(f);
    return n;
}
