/* Issue 10: can a GPU coredump name the client whose kernel faulted in a shared context? Two host threads
 * stand for two cumux clients: each loads its own copy of the module (as each client does) and launches on
 * its own stream; A runs a long kernel, B stores to an illegal address. GPU coredumps are on, lightweight and
 * without abort (CU_COREDUMP_SKIP_ABORT), written to a file. Afterwards the dump (an ELF file, format in
 * cuda-gdb's cudacoredump.h) is read: the SMs' and lanes' exceptions, the grid of each faulting block, and
 * that grid's launching host thread, module and function, compared with B's. Also: does the process live
 * on, when is the file complete, and how long after the fault; and what B's own synchronize right after its
 * launch returns (under cumux with dumps on, the faulting program was answered CUDA_SUCCESS: is that the
 * driver's answer to the faulting stream while it writes the dump?). `abort`: the same without
 * CU_COREDUMP_SKIP_ABORT, in a child process: what B's synchronize returns before the driver ends the process,
 * how the process ends, and whether the dump is complete (for a worker that lets the driver end it).
 * `assert FATBIN`: as `global`, B failing a device-side assert (the GPU suite's fault_assert kernel, from
 * the suite's fatbin) instead of the store: under cumux with dumps on, such a fault's dump took 3 s, named no
 * client, and the driver said CUDA_ERROR_LAUNCH_FAILED (2026-12-03): what do its SM, warp and grid tables
 * hold, and where does the faulting PC lie (the modules' code ranges are printed)?
 * Run on a GPU:  gcc -O2 -pthread -I/usr/local/cuda/include tools/probe_fault_culprit.c -o /tmp/pfc -lcuda
 *   /tmp/pfc global|context|abort|assert FATBIN */
#define _GNU_SOURCE
#include <cuda.h>
#include <elf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_util.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry fault_write(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
                          " ld.param.u64 %rd1, [p];\n mov.u32 %r1, 1;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n"
                          ".visible .entry spin(.param .u64 cycles)\n{\n .reg .pred %p<2>;\n .reg .b64 %rd<6>;\n"
                          " ld.param.u64 %rd1, [cycles];\n mov.u64 %rd2, %clock64;\nL:\n mov.u64 %rd3, %clock64;\n"
                          " sub.s64 %rd4, %rd3, %rd2;\n setp.lt.s64 %p1, %rd4, %rd1;\n @%p1 bra L;\n ret;\n}\n";

static CUcontext ctx;
static const char *assert_fatbin; /* `assert` mode: B's module */
struct client {
    const char *name;
    pid_t tid;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    bool faulty;
    CUresult launch;
    CUresult sync;  /* B: its stream's synchronize right after the launch */
    double sync_at; /* when it returned (now_ms) */
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    c->tid = gettid();
    cuCtxSetCurrent(ctx);
    CUresult lr = c->faulty && assert_fatbin ? cuModuleLoad(&c->mod, assert_fatbin) : cuModuleLoadData(&c->mod, ptx);
    const char *fname = !c->faulty ? "spin" : assert_fatbin ? "fault_assert" : "fault_write";
    if (lr || cuModuleGetFunction(&c->fn, c->mod, fname) || cuStreamCreate(&c->s, CU_STREAM_NON_BLOCKING)) {
        printf("%s: its module or function %s: %s\n", c->name, fname, ename(lr));
        c->launch = CUDA_ERROR_UNKNOWN;
        return NULL;
    }
    if (c->faulty) {
        usleep(200000);
        CUdeviceptr bad = 0x10; /* fault_assert asserts that its argument is null */
        void *args[] = {&bad};
        c->launch = cuLaunchKernel(c->fn, 2, 1, 1, 64, 1, 1, 0, c->s, args, NULL);
        c->sync = cuStreamSynchronize(c->s);
        c->sync_at = now_ms();
        printf("B: its synchronize right after the launch returned %s\n", ename(c->sync));
    } else {
        unsigned long long cycles = 4000000000ull; /* ~2 s */
        void *args[] = {&cycles};
        c->launch = cuLaunchKernel(c->fn, 4, 1, 1, 32, 1, 1, 0, c->s, args, NULL);
    }
    return NULL;
}

static const char *exc_name(unsigned e)
{
    static const char *n[] = {"none", "lane illegal address", "lane user stack overflow", "device hw stack overflow",
                              "warp illegal instruction", "warp out of range address", "warp misaligned address",
                              "warp invalid address space", "warp invalid pc", "warp hw stack overflow",
                              "device illegal address", "lane misaligned address", "warp assert"};
    return e < sizeof n / sizeof *n ? n[e] : "other";
}

/* The dump's sections, and the grid table of device 0. */
static void read_dump(const char *path, struct client *cl, int ncl)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("dump: cannot open %s\n", path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)len);
    if (!d || fread(d, 1, (size_t)len, f) != (size_t)len) {
        printf("dump: cannot read\n");
        fclose(f);
        return;
    }
    fclose(f);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)d;
    if (len < (long)sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG)) {
        printf("dump: not an ELF file (%ld bytes)\n", len);
        return;
    }
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(d + eh->e_shoff);
    const char *names = (const char *)(d + sh[eh->e_shstrndx].sh_offset);
    printf("dump: %ld bytes, %u sections, abi %u, machine %u\n", len, eh->e_shnum, eh->e_ident[EI_OSABI],
           eh->e_machine);
    /* grid table rows: gridId64 contextId function functionEntry moduleHandle parentGridId64 paramsOffset
     * kernelType origin gridStatus numRegs gridDim[3] blockDim[3] attrLaunchBlocking attrHostTid ... */
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        const char *nm = names + sh[i].sh_name;
        if (!strncmp(nm, ".cudbg.gridtbl", 14)) {
            size_t es = sh[i].sh_entsize ? sh[i].sh_entsize : 120;
            for (size_t o = 0; o + 112 <= sh[i].sh_size; o += es) {
                const unsigned char *r = d + sh[i].sh_offset + o;
                uint64_t q[7];
                uint32_t w[14];
                memcpy(q, r, sizeof q);
                memcpy(w, r + 56, sizeof w);
                const char *who = "?";
                for (int k = 0; k < ncl; k++)
                    if ((pid_t)w[13] == cl[k].tid)
                        who = cl[k].name;
                const char *mod = "?", *fn = "?";
                for (int k = 0; k < ncl; k++) {
                    if (q[4] == (uint64_t)(uintptr_t)cl[k].mod)
                        mod = cl[k].name;
                    if (q[2] == (uint64_t)(uintptr_t)cl[k].fn)
                        fn = cl[k].name;
                }
                printf("grid %#llx: ctx %#llx function %#llx (client %s) entry %#llx module %#llx (client %s) status %u "
                       "grid %ux%ux%u block %ux%ux%u host tid %u (client %s)\n",
                       (unsigned long long)q[0], (unsigned long long)q[1], (unsigned long long)q[2], fn,
                       (unsigned long long)q[3], (unsigned long long)q[4], mod, w[2], w[4], w[5], w[6], w[7], w[8], w[9],
                       w[11], who);
            }
        } else if (!strncmp(nm, ".cudbg.smtbl", 12)) {
            size_t es = sh[i].sh_entsize ? sh[i].sh_entsize : 8;
            unsigned n = 0, with = 0;
            for (size_t o = 0; o + es <= sh[i].sh_size; o += es, n++) {
                const unsigned char *r = d + sh[i].sh_offset + o;
                uint32_t id, exc = 0;
                memcpy(&id, r, 4);
                if (es >= 12)
                    memcpy(&exc, r + 8, 4);
                if (exc && with++ < 4) {
                    uint64_t pc = 0;
                    if (es >= 24)
                        memcpy(&pc, r + 16, 8);
                    printf("SM %u: exception %u (%s), error pc %#llx\n", id, exc, exc_name(exc), (unsigned long long)pc);
                }
            }
            printf("%s: %u SMs (entry %zu bytes), %u with an exception\n", nm, n, es, with);
        } else if (!strncmp(nm, ".cudbg.wptbl", 12)) {
            /* warp table rows: errorPC (u64) ... errorPCValid (u32 at 24); exceptions per warp follow */
            size_t es = sh[i].sh_entsize;
            unsigned shown = 0;
            for (size_t o = 0; es >= 28 && o + es <= sh[i].sh_size && shown < 4; o += es) {
                const unsigned char *r = d + sh[i].sh_offset + o;
                uint64_t pc;
                uint32_t valid;
                memcpy(&pc, r, 8);
                memcpy(&valid, r + 24, 4);
                if (valid) {
                    printf("%s (entry %zu): warp %zu error pc %#llx; words:", nm, es, o / es, (unsigned long long)pc);
                    for (size_t k = 0; k + 4 <= es && k < 64; k += 4) {
                        uint32_t x;
                        memcpy(&x, r + k, 4);
                        printf(" %x", x);
                    }
                    printf("\n");
                    shown++;
                }
            }
        } else if (sh[i].sh_type == SHT_LOUSER + 7) { /* a module's relocated image: its code's addresses */
            const unsigned char *img = d + sh[i].sh_offset;
            Elf64_Ehdr ie;
            if (sh[i].sh_size < sizeof ie)
                continue;
            memcpy(&ie, img, sizeof ie);
            for (unsigned k = 0; k < ie.e_shnum && ie.e_shoff + (k + 1) * sizeof(Elf64_Shdr) <= sh[i].sh_size; k++) {
                Elf64_Shdr cs;
                memcpy(&cs, img + ie.e_shoff + k * sizeof cs, sizeof cs);
                if ((cs.sh_flags & SHF_EXECINSTR) && cs.sh_addr)
                    printf("%s (link %u): code [%#llx, +%llu)\n", nm, sh[i].sh_link, (unsigned long long)cs.sh_addr,
                           (unsigned long long)cs.sh_size);
            }
        } else if (!strncmp(nm, ".cudbg.ctatbl", 13)) {
            size_t es = sh[i].sh_entsize ? sh[i].sh_entsize : 24;
            for (size_t o = 0; o + 16 <= sh[i].sh_size; o += es) {
                uint64_t g;
                uint32_t b[3];
                memcpy(&g, d + sh[i].sh_offset + o, 8);
                memcpy(b, d + sh[i].sh_offset + o + 8, 12);
                printf("%s: block (%u,%u,%u) of grid %#llx\n", nm, b[0], b[1], b[2], (unsigned long long)g);
            }
        } else if (!strncmp(nm, ".cudbg.lntbl", 12)) {
            size_t es = sh[i].sh_entsize ? sh[i].sh_entsize : 48;
            for (size_t o = 0; o + 36 <= sh[i].sh_size; o += es) {
                uint32_t exc;
                memcpy(&exc, d + sh[i].sh_offset + o + 32, 4);
                if (exc) {
                    printf("%s: a lane with exception %u (%s)\n", nm, exc, exc_name(exc));
                    break;
                }
            }
        } else if (!strncmp(nm, ".cudbg.ctxtbl", 13) || !strncmp(nm, ".cudbg.modtbl", 13) ||
                   !strncmp(nm, ".cudbg.devtbl", 13) || !strncmp(nm, ".cudbg.meta", 11)) {
            printf("%s: %llu bytes, entry %llu\n", nm, (unsigned long long)sh[i].sh_size,
                   (unsigned long long)sh[i].sh_entsize);
            if (!strncmp(nm, ".cudbg.modtbl", 13))
                for (size_t o = 0; o + 8 <= sh[i].sh_size; o += 8) {
                    uint64_t h;
                    memcpy(&h, d + sh[i].sh_offset + o, 8);
                    printf("  module %#llx\n", (unsigned long long)h);
                }
        }
    }
    free(d);
}

static int probe(bool global, bool skip_abort, char *core);

int main(int argc, char **argv)
{
    bool global = !(argc > 1 && !strcmp(argv[1], "context"));
    bool abort_mode = argc > 1 && !strcmp(argv[1], "abort");
    if (argc > 2 && !strcmp(argv[1], "assert"))
        assert_fatbin = argv[2];
    setvbuf(stdout, NULL, _IOLBF, 0);
    char core[256];
    snprintf(core, sizeof core, "/tmp/cumux-probe-culprit.%d.core", (int)getpid());
    if (!abort_mode)
        return probe(global, true, core);
    /* The driver ends the process after the dump: the probe runs in a child, watched from here. */
    double t0 = now_ms();
    pid_t child = fork();
    if (child == 0)
        _exit(probe(true, false, core));
    int st = 0;
    waitpid(child, &st, 0);
    double t_end = now_ms() - t0;
    struct stat sb;
    long sz = stat(core, &sb) == 0 ? (long)sb.st_size : -1;
    printf("abort mode: the child %s %d at %.1f ms after its start; dump %ld bytes\n",
           WIFSIGNALED(st) ? "ended by signal" : "exited with status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
           t_end, sz);
    struct client none[2] = {{.name = "A"}, {.name = "B"}};
    if (sz > 0)
        read_dump(core, none, 2);
    printf("SUMMARY abort: child %s %d at %.1f ms, dump %ld bytes\n", WIFSIGNALED(st) ? "signal" : "status",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), t_end, sz);
    return 0;
}

static int probe(bool global, bool skip_abort, char *core)
{
    bool on = true; /* a C bool: a 4-byte int is refused (CUDA_ERROR_INVALID_VALUE) */
    int flags = CU_COREDUMP_LIGHTWEIGHT_FLAGS | (skip_abort ? CU_COREDUMP_SKIP_ABORT : 0);
    size_t son = sizeof on, sfl = sizeof flags, sco = strlen(core) + 1;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0)) {
        printf("SKIP: no usable CUDA GPU\n");
        return 0;
    }
    if (global)
        printf("coredump (global) on: %s, flags: %s, file: %s\n",
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &son)),
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &sfl)),
               ename(cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, core, &sco)));
    if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("SKIP: no context\n");
        return 0;
    }
    if (!global)
        printf("coredump (context) on: %s, flags: %s, file: %s\n",
               ename(cuCoredumpSetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &son)),
               ename(cuCoredumpSetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &sfl)),
               ename(cuCoredumpSetAttribute(CU_COREDUMP_FILE, core, &sco)));
    struct client cl[2] = {{.name = "A"}, {.name = "B", .faulty = true}};
    pthread_t t[2];
    double t0 = now_ms();
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, client_main, &cl[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("A: tid %d module %p function %p launch %s; B: tid %d module %p function %p launch %s\n", (int)cl[0].tid,
           (void *)cl[0].mod, (void *)cl[0].fn, ename(cl[0].launch), (int)cl[1].tid, (void *)cl[1].mod,
           (void *)cl[1].fn, ename(cl[1].launch));
    CUresult q = CUDA_ERROR_NOT_READY;
    double t_err = -1;
    while (now_ms() - t0 < 10000) {
        q = cuStreamQuery(cl[0].s);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) {
            t_err = now_ms() - t0;
            break;
        }
        usleep(1000);
    }
    printf("sticky error %s seen %.1f ms after the start (B launched at ~200 ms)\n", ename(q), t_err);
    /* The file: when does it appear, when does it stop growing. */
    long last = -1;
    double t_stable = -1;
    for (int i = 0; i < 1000; i++) { /* 10 s: an assert's dump took 3 s under cumux */
        struct stat st;
        long sz = stat(core, &st) == 0 ? (long)st.st_size : -1;
        if (sz > 0 && sz == last) {
            t_stable = now_ms() - t0;
            break;
        }
        last = sz;
        usleep(10000);
    }
    printf("dump %s: %ld bytes, stable at %.1f ms after the start; the process is alive\n", core, last, t_stable);
    if (last > 0)
        read_dump(core, cl, 2);
    printf("SUMMARY %s: error %s at %.1f ms, dump %ld bytes at %.1f ms; B's synchronize %s at %.1f ms, again %s\n",
           assert_fatbin ? "assert" : global ? "global" : "context", ename(q), t_err, last, t_stable, ename(cl[1].sync), cl[1].sync_at - t0,
           ename(cuStreamSynchronize(cl[1].s)));
    /* Not through exit: the driver's teardown after a device-side assert crashed the probe (SIGSEGV, H200,
     * 12-03), which is not what it probes; the kernel frees everything. */
    fflush(NULL);
    _exit(0);
}
