/* Export tables (cuGetExportTable) under the tracer: every function slot of a table the traced library
 * hands out is pointed, in place, at a trampoline that logs "export table NAME slot N" with the six
 * integer argument registers, counts the call, calls the original function with every argument register
 * and the first 8 stack words as they were, and logs what it returned and which words it changed behind
 * the pointers among its arguments. The signatures need not be known.
 *
 * In place, not in a copy: the runtime's integrity check (INTEGRITY_CHECK slot 1) hashes the addresses
 * of the CUDART_INTERFACE table, of the INTEGRITY_CHECK table and of that slot's function, as the
 * runtime sees them, and the driver hashes its own; a copy would make them differ. So the table keeps
 * its address (read-only pages are made writable for the patch and back), and INTEGRITY_CHECK slot 1
 * is left alone. Trampolines exist on x86-64 only; elsewhere tables are handed out untouched. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace/trace.h"

#define TR_TABLES 32
#define TR_SLOTS 128 /* words per table that can be traced */

int tr_tables_enabled = 1;
int tr_tables_dump;

struct tr_table {
    const void **words;
    char name[40];
    tr_fn orig[TR_SLOTS];
    atomic_ullong calls[TR_SLOTS];
};

static struct tr_table tr_tables[TR_TABLES];
static atomic_int tr_ntables;
static pthread_mutex_t tr_tables_lock = PTHREAD_MUTEX_INITIALIZER;

/* Names the community uses for the tables the CUDA runtime asks for (docs/export-tables.md). */
static const struct {
    const char *name;
    unsigned char uuid[16];
} known[] = {
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}},
    {"CONTEXT_LOCAL_STORAGE", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}},
    {"INTEGRITY_CHECK", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}},
    /* Named after the driver's symbols for them (CU_ETID_ToolsContext, CU_ETID_ToolsModule): */
    {"TOOLS_CONTEXT", {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}},
    {"TOOLS_MODULE", {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}},
    /* Named by cumux for what it holds (docs/export-tables.md): */
    {"ARCH_DATA", {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}},
    {"COMPILE_CACHE", {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28}},
};

static void table_name(const CUuuid *id, char *out, size_t size)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (!memcmp(known[i].uuid, id->bytes, 16)) {
            snprintf(out, size, "%s", known[i].name);
            return;
        }
    }
    for (int i = 0; i < 16 && (size_t)(2 * i + 2) < size; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)id->bytes[i]);
}

#if defined(__x86_64__)
/* TR_TABLES * TR_SLOTS entry points, 16 bytes apart: entry i puts i in r11 and joins the common part.
 * It saves the argument registers (rdi, rsi, rdx, rcx, r8, r9, rax for varargs, r10, xmm0-7) in its
 * frame, calls tr_slot_enter(i, saved), which logs the call and snapshots the memory the arguments point
 * at, restores the registers, copies the caller's first 8 stack words (arguments past the sixth) below
 * itself and calls the original function. On return it calls tr_slot_exit(i, saved), which logs the
 * result and what the function wrote, and returns rax, rdx, xmm0 and xmm1 as the function left them.
 * Frame, from the aligned rsp: [0,64) stack arguments, [64,256) saved registers (struct tr_regs),
 * 256 id, 264 rax, 272 rdx, 288 xmm0, 304 xmm1, [320,712) snapshots. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl tr_tramp_pool\n"
        ".hidden tr_tramp_pool\n"
        ".type tr_tramp_pool, @function\n"
        "tr_tramp_pool:\n"
        ".set tr_tramp_i, 0\n"
        ".rept 4096\n" /* TR_TABLES * TR_SLOTS */
        "  .p2align 4\n"
        "  endbr64\n"
        "  movl $tr_tramp_i, %r11d\n"
        "  jmp tr_tramp_common\n"
        "  .set tr_tramp_i, tr_tramp_i + 1\n"
        ".endr\n"
        ".size tr_tramp_pool, . - tr_tramp_pool\n"
        ".p2align 4\n"
        ".type tr_tramp_common, @function\n"
        "tr_tramp_common:\n"
        "  .cfi_startproc\n"
        "  pushq %rbp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbp, -16\n"
        "  movq %rsp, %rbp\n"
        "  .cfi_def_cfa_register %rbp\n"
        "  subq $768, %rsp\n"
        "  andq $-16, %rsp\n"
        "  movq %rdi, 64(%rsp)\n"
        "  movq %rsi, 72(%rsp)\n"
        "  movq %rdx, 80(%rsp)\n"
        "  movq %rcx, 88(%rsp)\n"
        "  movq %r8, 96(%rsp)\n"
        "  movq %r9, 104(%rsp)\n"
        "  movq %rax, 112(%rsp)\n"
        "  movq %r10, 120(%rsp)\n"
        "  movdqa %xmm0, 128(%rsp)\n"
        "  movdqa %xmm1, 144(%rsp)\n"
        "  movdqa %xmm2, 160(%rsp)\n"
        "  movdqa %xmm3, 176(%rsp)\n"
        "  movdqa %xmm4, 192(%rsp)\n"
        "  movdqa %xmm5, 208(%rsp)\n"
        "  movdqa %xmm6, 224(%rsp)\n"
        "  movdqa %xmm7, 240(%rsp)\n"
        "  movq %r11, 256(%rsp)\n"
        "  movl %r11d, %edi\n"
        "  leaq 64(%rsp), %rsi\n"
        "  call tr_slot_enter\n"
        "  movq %rax, %r11\n"
        "  movq 16(%rbp), %rax\n"
        "  movq %rax, 0(%rsp)\n"
        "  movq 24(%rbp), %rax\n"
        "  movq %rax, 8(%rsp)\n"
        "  movq 32(%rbp), %rax\n"
        "  movq %rax, 16(%rsp)\n"
        "  movq 40(%rbp), %rax\n"
        "  movq %rax, 24(%rsp)\n"
        "  movq 48(%rbp), %rax\n"
        "  movq %rax, 32(%rsp)\n"
        "  movq 56(%rbp), %rax\n"
        "  movq %rax, 40(%rsp)\n"
        "  movq 64(%rbp), %rax\n"
        "  movq %rax, 48(%rsp)\n"
        "  movq 72(%rbp), %rax\n"
        "  movq %rax, 56(%rsp)\n"
        "  movq 64(%rsp), %rdi\n"
        "  movq 72(%rsp), %rsi\n"
        "  movq 80(%rsp), %rdx\n"
        "  movq 88(%rsp), %rcx\n"
        "  movq 96(%rsp), %r8\n"
        "  movq 104(%rsp), %r9\n"
        "  movq 112(%rsp), %rax\n"
        "  movq 120(%rsp), %r10\n"
        "  movdqa 128(%rsp), %xmm0\n"
        "  movdqa 144(%rsp), %xmm1\n"
        "  movdqa 160(%rsp), %xmm2\n"
        "  movdqa 176(%rsp), %xmm3\n"
        "  movdqa 192(%rsp), %xmm4\n"
        "  movdqa 208(%rsp), %xmm5\n"
        "  movdqa 224(%rsp), %xmm6\n"
        "  movdqa 240(%rsp), %xmm7\n"
        "  call *%r11\n"
        "  movq %rax, 264(%rsp)\n"
        "  movq %rdx, 272(%rsp)\n"
        "  movdqa %xmm0, 288(%rsp)\n"
        "  movdqa %xmm1, 304(%rsp)\n"
        "  movl 256(%rsp), %edi\n"
        "  leaq 64(%rsp), %rsi\n"
        "  call tr_slot_exit\n"
        "  movq 264(%rsp), %rax\n"
        "  movq 272(%rsp), %rdx\n"
        "  movdqa 288(%rsp), %xmm0\n"
        "  movdqa 304(%rsp), %xmm1\n"
        "  movq %rbp, %rsp\n"
        "  popq %rbp\n"
        "  .cfi_def_cfa %rsp, 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size tr_tramp_common, . - tr_tramp_common\n");

extern const char tr_tramp_pool[] TR_HIDDEN;
#define TR_HAVE_TRAMPOLINES 1
_Static_assert(TR_TABLES * TR_SLOTS == 4096, "the .rept count above");

/* The trampoline's frame from its saved registers on (see the layout above). */
#define TR_SNAP 64 /* bytes looked at behind each pointer argument */
struct tr_regs {
    uint64_t arg[6], rax, r10;
    uint64_t xmm[16];
    uint64_t id, ret_rax, ret_rdx, pad;
    uint64_t ret_xmm[4];
    unsigned char snap[6][TR_SNAP];
    uint32_t snap_len[6];
    uint64_t t0;
};
_Static_assert(offsetof(struct tr_regs, id) == 192 && offsetof(struct tr_regs, ret_rax) == 200 &&
                   offsetof(struct tr_regs, ret_xmm) == 224 && sizeof(struct tr_regs) <= 768 - 64 - 16,
               "the frame layout in the trampoline");

/* Up to TR_SNAP bytes at addr, without faulting on an address that is not mapped: the kernel copies
 * them (process_vm_readv of our own process stops at the first unreadable page). */
static uint32_t safe_read(uint64_t addr, unsigned char *to)
{
    if (addr < 65536 || addr > 0x7fffffffffffULL)
        return 0;
    struct iovec local = {to, TR_SNAP}, remote = {(void *)(uintptr_t)addr, TR_SNAP};
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == TR_SNAP)
        return TR_SNAP;
    /* A shorter object at the end of a mapping: read what lies before the page boundary. */
    size_t to_page_end = 4096 - (size_t)(addr & 4095);
    if (to_page_end >= TR_SNAP)
        return 0;
    remote.iov_len = local.iov_len = to_page_end;
    n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return n == (ssize_t)to_page_end ? (uint32_t)n : 0;
}

/* CUMUX_TRACE_DUMP=1: "  argK: " and the words behind each pointer argument; a word that points at
 * text is followed by the text. For working out what an undocumented slot takes. */
static void dump_args(const struct tr_regs *r)
{
    for (int a = 0; a < 6; a++) {
        if (!r->snap_len[a])
            continue;
        char line[2048];
        size_t n = (size_t)snprintf(line, sizeof line, "      arg%d:", a);
        for (uint32_t off = 0; off + 8 <= r->snap_len[a] && n < sizeof line - 160; off += 8) {
            uint64_t w;
            memcpy(&w, r->snap[a] + off, 8);
            int m = snprintf(line + n, sizeof line - n, " %#llx", (unsigned long long)w);
            n += m > 0 ? (size_t)m : 0;
            unsigned char text[TR_SNAP];
            uint32_t len = safe_read(w, text), k = 0;
            while (k < len && text[k] >= 0x20 && text[k] < 0x7f)
                k++;
            if (k >= 4 && k < len && text[k] == 0) {
                m = snprintf(line + n, sizeof line - n, "=\"%.*s\"", (int)k, (const char *)text);
                n += m > 0 ? (size_t)m : 0;
            }
        }
        if (n > sizeof line - 2)
            n = sizeof line - 2;
        line[n++] = '\n';
        tr_write(line, n);
    }
}

TR_HIDDEN tr_fn tr_slot_enter(unsigned id, struct tr_regs *r);
TR_HIDDEN tr_fn tr_slot_enter(unsigned id, struct tr_regs *r)
{
    int saved = errno;
    struct tr_table *t = &tr_tables[id / TR_SLOTS];
    unsigned s = id % TR_SLOTS;
    atomic_fetch_add_explicit(&t->calls[s], 1, memory_order_relaxed);
    for (int a = 0; a < 6; a++)
        r->snap_len[a] = safe_read(r->arg[a], r->snap[a]);
    char line[768];
    size_t n = (size_t)tr_prefix(line, sizeof line, tr_now());
    int m = snprintf(line + n, sizeof line - n, "export table %s slot %u (%#llx, %#llx, %#llx, %#llx, %#llx, %#llx)",
                     t->name, s, (unsigned long long)r->arg[0], (unsigned long long)r->arg[1],
                     (unsigned long long)r->arg[2], (unsigned long long)r->arg[3], (unsigned long long)r->arg[4],
                     (unsigned long long)r->arg[5]);
    n += m > 0 ? (size_t)m : 0;
    /* An argument that points at text (a kernel's name, say) is shown as the text. */
    for (int a = 0; a < 6 && n < sizeof line - TR_SNAP - 16; a++) {
        uint32_t len = 0;
        while (len < r->snap_len[a] && r->snap[a][len] >= 0x20 && r->snap[a][len] < 0x7f)
            len++;
        if (len >= 4 && (len == r->snap_len[a] || r->snap[a][len] == 0)) {
            m = snprintf(line + n, sizeof line - n, " arg%d=\"%.*s\"%s", a, (int)len, (const char *)r->snap[a],
                         len == r->snap_len[a] ? "..." : "");
            n += m > 0 ? (size_t)m : 0;
        }
    }
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    tr_write(line, n);
    if (tr_tables_dump)
        dump_args(r);
    r->t0 = tr_now();
    errno = saved;
    return t->orig[s];
}

/* "export table NAME slot N returned R (time) wrote argK+OFF=VALUE ...": the words that changed behind
 * each pointer argument, which is most of what an undocumented slot's contract is. */
TR_HIDDEN void tr_slot_exit(unsigned id, struct tr_regs *r);
TR_HIDDEN void tr_slot_exit(unsigned id, struct tr_regs *r)
{
    int saved = errno;
    uint64_t t1 = tr_now();
    struct tr_table *t = &tr_tables[id / TR_SLOTS];
    unsigned s = id % TR_SLOTS;
    char line[1024];
    size_t n = (size_t)tr_prefix(line, sizeof line, t1);
    int m = snprintf(line + n, sizeof line - n, "export table %s slot %u returned %#llx (%.1f us)", t->name, s,
                     (unsigned long long)r->ret_rax, (double)(t1 - r->t0) / 1e3);
    n += m > 0 ? (size_t)m : 0;
    int shown = 0;
    for (int a = 0; a < 6 && n < sizeof line - 64; a++) {
        unsigned char now[TR_SNAP];
        uint32_t len = r->snap_len[a];
        if (!len || safe_read(r->arg[a], now) < len)
            continue;
        for (uint32_t off = 0; off + 8 <= len && n < sizeof line - 64; off += 8) {
            uint64_t before, after;
            memcpy(&before, r->snap[a] + off, 8);
            memcpy(&after, now + off, 8);
            if (before == after)
                continue;
            m = snprintf(line + n, sizeof line - n, "%s arg%d+%u=%#llx", shown++ ? "," : " wrote", a, off,
                         (unsigned long long)after);
            n += m > 0 ? (size_t)m : 0;
        }
    }
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    tr_write(line, n);
    errno = saved;
}
#else
#define TR_HAVE_TRAMPOLINES 0
#endif

/* Code lies in an executable segment of a loaded object; data slots (TOOLS_TLS has some) do not. */
static int code_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t a = *(const uintptr_t *)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && a >= lo && a < lo + ph->p_memsz)
            return 1;
    }
    return 0;
}

static int is_code(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return p && dl_iterate_phdr(code_cb, &a) == 1;
}

/* The protection of the page at addr, from /proc/self/maps; -1 when not mapped. */
static int page_prot(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -1;
    char line[512];
    int prot = -1;
    while (prot < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi)
            prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                   (perms[2] == 'x' ? PROT_EXEC : 0);
    }
    fclose(f);
    return prot;
}

/* words[i] = vals[i] for the n words, making read-only pages writable for it and back. 0 on success. */
static int patch(const void **words, const void *const *vals, const unsigned char *which, unsigned n)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)words & ~(uintptr_t)(ps - 1);
    uintptr_t last = ((uintptr_t)(words + n) - 1) & ~(uintptr_t)(ps - 1);
    int prot[2] = {-1, -1};
    for (uintptr_t p = first, k = 0; p <= last; p += (uintptr_t)ps, k++) {
        prot[k] = page_prot(p);
        if (prot[k] < 0)
            return -1;
    }
    int made_writable[2] = {0, 0};
    int err = 0;
    for (uintptr_t p = first, k = 0; p <= last && !err; p += (uintptr_t)ps, k++) {
        if (prot[k] & PROT_WRITE)
            continue;
        if (mprotect((void *)p, (size_t)ps, prot[k] | PROT_WRITE) != 0)
            err = 1;
        else
            made_writable[k] = 1;
    }
    if (!err)
        for (unsigned i = 0; i < n; i++)
            if (which[i])
                __atomic_store_n(&words[i], vals[i], __ATOMIC_RELEASE);
    for (uintptr_t p = first, k = 0; p <= last; p += (uintptr_t)ps, k++)
        if (made_writable[k])
            mprotect((void *)p, (size_t)ps, prot[k]);
    return err ? -1 : 0;
}

void tr_hook_export_table(struct tr_call *c, const void **table, const CUuuid *id)
{
    if (!c->ok || !table || !*table || !id)
        return;
    const void **words = (const void **)*table;
    char name[40];
    table_name(id, name, sizeof name);
    c->note = c->note_buf;
    pthread_mutex_lock(&tr_tables_lock);
    int nt = atomic_load(&tr_ntables);
    for (int i = 0; i < nt; i++) {
        if (tr_tables[i].words == words) {
            snprintf(c->note_buf, sizeof c->note_buf, "[%s: slots traced since an earlier call]", name);
            pthread_mutex_unlock(&tr_tables_lock);
            return;
        }
    }
    if (!tr_tables_enabled || !TR_HAVE_TRAMPOLINES || nt == TR_TABLES) {
        snprintf(c->note_buf, sizeof c->note_buf, "[%s: slots not traced: %s]", name,
                 !tr_tables_enabled ? "CUMUX_TRACE_EXPORT_TABLES=0"
                 : !TR_HAVE_TRAMPOLINES ? "no trampolines on this architecture"
                                        : "too many tables");
        pthread_mutex_unlock(&tr_tables_lock);
        return;
    }
    /* Either a size word (bytes) and that many bytes of slots, or slots up to a NULL. */
    uintptr_t w0 = (uintptr_t)words[0];
    unsigned first = 0, n = 0;
    if (w0 >= 16 && w0 < 4096 && w0 % sizeof(void *) == 0) {
        first = 1;
        n = (unsigned)(w0 / sizeof(void *));
    } else {
        while (n < TR_SLOTS && words[n])
            n++;
    }
    unsigned limit = n < TR_SLOTS ? n : TR_SLOTS;
    struct tr_table *t = &tr_tables[nt];
    memset(t->orig, 0, sizeof t->orig);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->words = words;
    const void *vals[TR_SLOTS];
    unsigned char which[TR_SLOTS] = {0};
    unsigned traced = 0;
    int integrity = !strcmp(name, "INTEGRITY_CHECK");
    for (unsigned s = first; s < limit; s++) {
        if (!is_code(words[s]) || (integrity && s == 1))
            continue;
#if TR_HAVE_TRAMPOLINES
        t->orig[s] = (tr_fn)words[s];
        vals[s] = (const void *)(tr_tramp_pool + 16 * ((unsigned)nt * TR_SLOTS + s));
        which[s] = 1;
        traced++;
#endif
    }
    int err = traced ? patch(words, vals, which, limit) : 0;
    if (!err)
        atomic_store(&tr_ntables, nt + 1);
    snprintf(c->note_buf, sizeof c->note_buf, "[%s: %u of %u words %s%s%s%s]", name, traced, n,
             err ? "NOT traced: cannot write the table: " : "traced through trampolines", err ? strerror(errno) : "",
             n > TR_SLOTS ? "; words past 128 untouched" : "", integrity && n > 1 ? "; slot 1 left alone" : "");
    pthread_mutex_unlock(&tr_tables_lock);
}

void tr_tables_summary(void)
{
    int nt = atomic_load(&tr_ntables);
    int header = 0;
    for (int i = 0; i < nt; i++) {
        for (unsigned s = 0; s < TR_SLOTS; s++) {
            unsigned long long n = atomic_load(&tr_tables[i].calls[s]);
            if (!n)
                continue;
            static const char head[] = "  export table slot                                   calls\n";
            if (!header++)
                tr_write(head, sizeof head - 1);
            char line[128];
            int k = snprintf(line, sizeof line, "  %-36s slot %2u %10llu\n", tr_tables[i].name, s, n);
            if (k > 0)
                tr_write(line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
        }
    }
}

void tr_tables_after_fork(void)
{
    int nt = atomic_load(&tr_ntables);
    for (int i = 0; i < nt; i++)
        for (unsigned s = 0; s < TR_SLOTS; s++)
            atomic_store(&tr_tables[i].calls[s], 0);
}
