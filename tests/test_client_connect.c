/* The shim as a program sees it, against a running cumuxd (CI: one serving no GPU): cuInit and the calls
 * answered from what the server told, without a server (the error and its message), and clients that
 * fork, exit, _exit or get killed: the server must notice each and go on serving.
 * usage: test_client_connect SHIM_LIB CUMUX_CLI   (CUMUX_PIPE_DIRECTORY: the server's pipe directory;
 *        CUMUX_TEST_DEVICE_COUNT, when set: the device count the server must report) */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "test_util.h"

static const char *cli;

/* The shim's entry points, looked up by name as a program linked against libcuda would bind them. */
static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    REQUIRE(p != NULL, "the shim does not export %s", name);
    return p;
}

static void load_shim(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != NULL, "dlopen %s: %s", path, dlerror());
    *(void **)&p_cuInit = sym(lib, "cuInit");
    *(void **)&p_cuDeviceGetCount = sym(lib, "cuDeviceGetCount");
    *(void **)&p_cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&p_cuDriverGetVersion = sym(lib, "cuDriverGetVersion");
    *(void **)&p_cuCtxGetCurrent = sym(lib, "cuCtxGetCurrent");
    *(void **)&p_cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&p_cuGetProcAddress_v2 = sym(lib, "cuGetProcAddress_v2");
}

static int expected_devices(void)
{
    const char *e = getenv("CUMUX_TEST_DEVICE_COUNT");
    return e ? atoi(e) : -1;
}

/* ---- no server: cuInit fails with 805 and says where it looked and what to do ---- */
static void no_server(void)
{
    char dir[] = "/tmp/cumux-test-noserver.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    int err[2];
    REQUIRE(pipe(err) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        /* A fresh process whose shim has not connected yet, looking at an empty pipe directory. */
        if (setenv("CUMUX_PIPE_DIRECTORY", dir, 1) != 0 || dup2(err[1], STDERR_FILENO) < 0 || close(err[0]) != 0 ||
            close(err[1]) != 0)
            _exit(100);
        CUresult r = p_cuInit(0);
        int n = 7;
        CUresult rc = p_cuDeviceGetCount(&n);
        /* Exit status: 0 when both failed as they should. */
        _exit(r == CUDA_ERROR_MPS_CONNECTION_FAILED && rc == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
    }
    REQUIRE(close(err[1]) == 0, "close");
    char text[4096];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof text - 1 && (n = read(err[0], text + len, sizeof text - 1 - len)) > 0)
        len += (size_t)n;
    text[len] = 0;
    REQUIRE(close(err[0]) == 0, "close");
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "without a server: cuInit must return CUDA_ERROR_MPS_CONNECTION_FAILED and cuDeviceGetCount "
          "CUDA_ERROR_NOT_INITIALIZED (child status %#x)", st);
    CHECK(strstr(text, dir) != NULL, "the message does not name the pipe directory %s: \"%s\"", dir, text);
    CHECK(strstr(text, "cumux start") != NULL, "the message does not say `cumux start`: \"%s\"", text);
    CHECK(rmdir(dir) == 0, "the pipe directory %s was not left empty: %s", dir, strerror(errno));
}

/* ---- a connected process ---- */
static void basics(int base_clients)
{
    int n = -7, v = -7;
    CHECK(p_cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
    CHECK(p_cuDriverGetVersion(&v) == CUDA_SUCCESS && v == CUDA_VERSION,
          "cuDriverGetVersion before cuInit: %d, expected the built-for version %d", v, CUDA_VERSION);
    CHECK(p_cuInit(1) == CUDA_ERROR_INVALID_VALUE, "cuInit with flags");
    CUresult r = p_cuInit(0);
    REQUIRE(r == CUDA_SUCCESS, "cuInit: %d", (int)r);
    CHECK(p_cuInit(0) == CUDA_SUCCESS, "second cuInit");
    int clients = -1;
    CHECK(test_cumux_status(cli, &clients) == 0 && clients == base_clients + 1,
          "after cuInit (twice): %d clients, expected %d", clients, base_clients + 1);

    r = p_cuDeviceGetCount(&n);
    CHECK(r == CUDA_SUCCESS && n >= 0, "cuDeviceGetCount: %d, count %d", (int)r, n);
    if (expected_devices() >= 0)
        CHECK(n == expected_devices(), "cuDeviceGetCount: %d, expected %d", n, expected_devices());
    CUdevice d = -1;
    CHECK(p_cuDeviceGet(&d, n) == CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet one past the count");
    CHECK(p_cuDeviceGetCount(NULL) == CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount(NULL)");
    v = -7;
    r = p_cuDriverGetVersion(&v);
    CHECK(r == CUDA_SUCCESS && v >= 0, "cuDriverGetVersion: %d, version %d", (int)r, v);

    CUcontext ctx = (CUcontext)(uintptr_t)0x1234;
    r = p_cuCtxGetCurrent(&ctx);
    CHECK(r == CUDA_SUCCESS && ctx == NULL, "cuCtxGetCurrent without a context: %d, %p", (int)r, (void *)ctx);
    CUdeviceptr dp = 0;
    r = p_cuMemAlloc(&dp, 4096);
    CHECK(r == CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc without a context: %d", (int)r);

    void *fn = NULL;
    CUdriverProcAddressQueryResult qs = (CUdriverProcAddressQueryResult)77;
    r = p_cuGetProcAddress_v2("cuInit", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &qs);
    CHECK(r == CUDA_SUCCESS && qs == CU_GET_PROC_ADDRESS_SUCCESS && fn == (void *)p_cuInit,
          "cuGetProcAddress_v2(cuInit): %d, status %d, %p vs %p", (int)r, (int)qs, fn, *(void **)&p_cuInit);
    if (fn == (void *)p_cuInit)
        CHECK(((CUresult(*)(unsigned))fn)(0) == CUDA_SUCCESS, "cuInit through cuGetProcAddress");
}

/* ---- children: each connects on its own, then ends one way or another ---- */
enum end_kind { END_EXIT, END_UNDERSCORE_EXIT, END_KILLED };

/* Child: connect, report on `ready`, wait for the parent to close `go`, end as told. */
static void child(enum end_kind how, int ready, int go)
{
    int n = -1;
    char ok = p_cuInit(0) == CUDA_SUCCESS && p_cuDeviceGetCount(&n) == CUDA_SUCCESS &&
                      (expected_devices() < 0 || n == expected_devices())
                  ? 'y'
                  : 'n';
    if (write(ready, &ok, 1) != 1)
        _exit(3);
    char b;
    while (read(go, &b, 1) < 0 && errno == EINTR) {
    }
    switch (how) {
    case END_EXIT:
        exit(ok == 'y' ? 0 : 1);
    case END_UNDERSCORE_EXIT:
        _exit(ok == 'y' ? 0 : 1);
    case END_KILLED:
        for (;;)
            pause();
    }
}

static void children(int base_clients, int per_kind)
{
    static const char *const names[] = {"exit", "_exit", "SIGKILL"};
    int ready[2], go[2];
    REQUIRE(pipe(ready) == 0 && pipe(go) == 0, "pipe");
    int total = 3 * per_kind;
    pid_t *pids = calloc((size_t)total, sizeof *pids);
    REQUIRE(pids != NULL, "calloc");
    fflush(NULL);
    for (int i = 0; i < total; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0, "fork");
        if (pids[i] == 0) {
            free(pids); /* the child ends with exit(): nothing of the parent's may look leaked */
            if (close(ready[0]) != 0 || close(go[1]) != 0)
                _exit(4);
            child((enum end_kind)(i % 3), ready[1], go[0]);
        }
    }
    REQUIRE(close(ready[1]) == 0 && close(go[0]) == 0, "close");
    int ok = 0;
    for (int i = 0; i < total; i++) {
        char b;
        ssize_t n = read(ready[0], &b, 1);
        REQUIRE(n == 1, "a child ended before it reported (read %zd)", n);
        ok += b == 'y';
    }
    CHECK(ok == total, "%d of %d children could not connect", total - ok, total);
    /* All connected at once, each with a channel of its own besides the parent's. */
    int clients = -1;
    CHECK(test_cumux_status(cli, &clients) == 0 && clients == base_clients + 1 + total,
          "with %d children connected: %d clients, expected %d", total, clients, base_clients + 1 + total);
    REQUIRE(close(go[1]) == 0, "close"); /* go */
    for (int i = 0; i < total; i++)
        if (i % 3 == END_KILLED)
            REQUIRE(kill(pids[i], SIGKILL) == 0, "kill");
    for (int i = 0; i < total; i++) {
        int st;
        REQUIRE(waitpid(pids[i], &st, 0) == pids[i], "waitpid");
        if (i % 3 == END_KILLED)
            CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child %d (%s): status %#x", i, names[i % 3], st);
        else
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d (%s): status %#x", i, names[i % 3], st);
    }
    REQUIRE(close(ready[0]) == 0, "close");
    free(pids);
    /* The server noticed every one of them. */
    int n = test_wait_clients(cli, base_clients + 1, 10000);
    CHECK(n == base_clients + 1, "after the children ended: %d clients, expected %d", n, base_clients + 1);
}

/* After all that, a new process is served. */
static void fresh_client(void)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        int n = -1;
        _exit(p_cuInit(0) == CUDA_SUCCESS && p_cuDeviceGetCount(&n) == CUDA_SUCCESS &&
                      (expected_devices() < 0 || n == expected_devices())
                  ? 0
                  : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a new client after the others: status %#x", st);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_client_connect SHIM_LIB CUMUX_CLI\n");
        return 2;
    }
    cli = argv[2];
    load_shim(argv[1]);
    int base = -1;
    REQUIRE(test_cumux_status(cli, &base) == 0 && base >= 0, "cumux status before the test (clients %d)", base);

    no_server();
    basics(base);
    children(base, 4);
    children(base, 1);
    fresh_client();
    int n = test_wait_clients(cli, base + 1, 5000);
    CHECK(n == base + 1, "at the end: %d clients, expected %d (this process)", n, base + 1);
    printf("test_client_connect: %lu checks, %lu failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}
