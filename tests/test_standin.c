/*
 * test_standin.c - unit tests of the CUDA runtime and NCCL stand-in
 * (tests/standin/), loaded with dlopen as libkvs loads the real ones:
 * devices from the environment, copies and their checks, device memory
 * that the CPU faults on, work that runs only when synchronised with and
 * then in stream order (so that a missing wait gives another result),
 * the host build of the kernel module on a stream, IPC handles opened by
 * a forked child, injected failures, and NCCL collectives whose results
 * are compared bit for bit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define API(X)                                                                            \
    X(cudaGetErrorName) X(cudaGetLastError) X(cudaPeekAtLastError)                       \
    X(cudaRuntimeGetVersion) X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice)     \
    X(cudaDeviceCanAccessPeer) X(cudaDeviceEnablePeerAccess) X(cudaDeviceSynchronize)   \
    X(cudaMalloc) X(cudaFree)                                                            \
    X(cudaPointerGetAttributes) X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaMemcpyPeer)       \
    X(cudaMemset) X(cudaStreamCreate) X(cudaStreamDestroy) X(cudaStreamSynchronize)      \
    X(cudaStreamWaitEvent) X(cudaEventCreate) X(cudaEventCreateWithFlags)                \
    X(cudaEventRecord) X(cudaEventQuery) X(cudaEventSynchronize) X(cudaEventElapsedTime) \
    X(cudaEventDestroy) X(cudaIpcGetMemHandle) X(cudaIpcOpenMemHandle)                   \
    X(cudaStreamQuery) X(cudaStreamCreateWithFlags) X(cudaMemsetAsync) X(cudaLaunchHostFunc) \
    X(cudaIpcCloseMemHandle) X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitAll)     \
    X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommCount) X(ncclCommCuDevice)          \
    X(ncclCommUserRank) X(ncclGroupStart) X(ncclGroupEnd) X(ncclAllReduce)               \
    X(ncclBroadcast) X(ncclReduce)

/* The stand-in's functions, typed by the toolkit's own declarations. */
static struct {
#define FIELD(name) __typeof__(name) *name;
    API(FIELD)
#undef FIELD
} rt;

/* The host build of the kernel module (cuda_kernels.h's entry points). */
static struct {
    int (*abi)(void);
    int (*sum)(int dtype, void *out, const void *const *in, int k, size_t n, void *stream);
} kernels;

static const char *const env_vars[] = {"KVS_STANDIN_DEVICES", "KVS_STANDIN_FAIL_MALLOC",
                                       "KVS_STANDIN_FAIL_IPC_OPEN", "KVS_STANDIN_LOST_DEVICE"};

static void load(void)
{
    void *lib = dlopen(STANDIN_PATH, RTLD_NOW | RTLD_LOCAL);

    if (!lib)
        fail_msg("%s", dlerror());
#define RESOLVE(name)                                                                     \
    rt.name = (__typeof__(name) *)dlsym(lib, #name);                                      \
    if (!rt.name)                                                                         \
        fail_msg("%s is missing", #name);
    API(RESOLVE)
#undef RESOLVE
    /* After the runtime, as libkvs loads it: the module needs it loaded. */
    if (!(lib = dlopen(STANDIN_KERNELS, RTLD_NOW | RTLD_LOCAL)))
        fail_msg("%s", dlerror());
    *(void **)&kernels.abi = dlsym(lib, "kvs_cuda_kernels_abi");
    *(void **)&kernels.sum = dlsym(lib, "kvs_cuda_sum");
    if (!kernels.abi || !kernels.sum)
        fail_msg("%s is not a kernel module", STANDIN_KERNELS);
}

/* Every test starts from the default environment on device 0. */
static int reset(void **state)
{
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
        unsetenv(env_vars[i]);
    rt.cudaGetLastError();
    return rt.cudaSetDevice(0) == cudaSuccess ? 0 : -1;
}

static void test_devices(void **state)
{
    int n = -1, version = 0, device = -1, can = -1;

    assert_int_equal(rt.cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 2);
    setenv("KVS_STANDIN_DEVICES", "3", 1);
    assert_int_equal(rt.cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 3);
    assert_int_equal(rt.cudaSetDevice(2), cudaSuccess);
    assert_int_equal(rt.cudaGetDevice(&device), cudaSuccess);
    assert_int_equal(device, 2);
    assert_int_equal(rt.cudaSetDevice(3), cudaErrorInvalidDevice);
    assert_int_equal(rt.cudaPeekAtLastError(), cudaErrorInvalidDevice);
    assert_int_equal(rt.cudaGetLastError(), cudaErrorInvalidDevice);
    assert_int_equal(rt.cudaGetLastError(), cudaSuccess);
    assert_int_equal(rt.cudaDeviceCanAccessPeer(&can, 0, 2), cudaSuccess);
    assert_int_equal(can, 1);
    assert_int_equal(rt.cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
    assert_int_equal(rt.cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled);
    assert_int_equal(rt.cudaRuntimeGetVersion(&version), cudaSuccess);
    assert_int_equal(version, CUDART_VERSION);
    setenv("KVS_STANDIN_DEVICES", "0", 1);
    assert_int_equal(rt.cudaGetDeviceCount(&n), cudaErrorNoDevice);
    assert_int_equal(n, 0);
    assert_string_equal(rt.cudaGetErrorName(rt.cudaGetLastError()), "cudaErrorNoDevice");
}

static void test_memory(void **state)
{
    float host[256], back[256];
    struct cudaPointerAttributes attr;
    float *d0, *d1;
    unsigned char bytes[16];

    for (int i = 0; i < 256; i++)
        host[i] = (float)i * 0.5f;
    assert_int_equal(rt.cudaSetDevice(1), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&d1, sizeof host), cudaSuccess);
    assert_int_equal(rt.cudaSetDevice(0), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&d0, sizeof host), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(d0, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyPeer(d1, 1, d0, 0, sizeof host), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(back, d1, sizeof back, cudaMemcpyDefault), cudaSuccess);
    assert_memory_equal(back, host, sizeof host);

    assert_int_equal(rt.cudaMemset(d1 + 4, 0xab, sizeof bytes), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(bytes, d1 + 4, sizeof bytes, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (size_t i = 0; i < sizeof bytes; i++)
        assert_int_equal(bytes[i], 0xab);

    assert_int_equal(rt.cudaPointerGetAttributes(&attr, d1 + 10), cudaSuccess);
    assert_int_equal(attr.type, cudaMemoryTypeDevice);
    assert_int_equal(attr.device, 1);
    assert_int_equal(rt.cudaPointerGetAttributes(&attr, host), cudaSuccess);
    assert_int_equal(attr.type, cudaMemoryTypeUnregistered);

    /* What would fault on a GPU fails here: wrong direction, overrun, bad free. */
    assert_int_equal(rt.cudaMemcpy(back, host, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(rt.cudaMemcpy(back, d0 + 255, 8, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    assert_int_equal(rt.cudaMemcpy(back, d0, 4, (enum cudaMemcpyKind)9),
                     cudaErrorInvalidMemcpyDirection);
    assert_int_equal(rt.cudaFree(host), cudaErrorInvalidValue);
    assert_int_equal(rt.cudaFree(d0 + 1), cudaErrorInvalidValue);
    assert_int_equal(rt.cudaFree(d0), cudaSuccess);
    assert_int_equal(rt.cudaFree(d1), cudaSuccess);
    assert_int_equal(rt.cudaFree(d1), cudaErrorInvalidValue);
}

static void test_streams_events(void **state)
{
    cudaStream_t s0, s1;
    cudaEvent_t start, stop, untimed;
    float ms = -1, host[64] = {1}, back[64];
    float *d;

    assert_int_equal(rt.cudaStreamCreate(&s0), cudaSuccess);
    assert_int_equal(rt.cudaEventCreate(&start), cudaSuccess);
    assert_int_equal(rt.cudaEventCreate(&stop), cudaSuccess);
    assert_int_equal(rt.cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&d, sizeof host), cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(start, s0), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(stop, s0), cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(untimed, NULL), cudaSuccess);
    assert_int_equal(rt.cudaStreamWaitEvent(NULL, stop, 0), cudaSuccess);
    assert_int_equal(rt.cudaEventSynchronize(stop), cudaSuccess);
    assert_int_equal(rt.cudaEventQuery(stop), cudaSuccess);
    assert_int_equal(rt.cudaStreamSynchronize(s0), cudaSuccess);
    assert_memory_equal(back, host, sizeof host);
    assert_int_equal(rt.cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
    assert_true(ms >= 0);
    assert_int_equal(rt.cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);

    /* An event of device 0 cannot be recorded into a stream of device 1. */
    assert_int_equal(rt.cudaSetDevice(1), cudaSuccess);
    assert_int_equal(rt.cudaStreamCreate(&s1), cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(start, s1), cudaErrorInvalidResourceHandle);
    assert_int_equal(rt.cudaStreamDestroy(s1), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);

    assert_int_equal(rt.cudaFree(d), cudaSuccess);
    assert_int_equal(rt.cudaEventDestroy(start), cudaSuccess);
    assert_int_equal(rt.cudaEventDestroy(stop), cudaSuccess);
    assert_int_equal(rt.cudaEventDestroy(untimed), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(s0), cudaSuccess);
}

/* What a forked child does to a device pointer: read it, or write it. */
enum touch { READ, WRITE };

static volatile char *touched;
static size_t touched_bytes;

/* Exits 0 when the fault is at the device pointer touched. */
static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    const volatile char *at = si->si_addr;

    (void)sig;
    (void)ctx;
    _exit(at >= touched && at < touched + touched_bytes ? 0 : 3);
}

static int touch_in_child(volatile char *p, size_t bytes, enum touch how)
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        struct sigaction sa;

        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO;
        touched = p;
        touched_bytes = bytes;
        if (sigaction(SIGSEGV, &sa, NULL) != 0)
            _exit(4);
        if (how == READ)
            _exit(p[bytes / 2] == 0x5a ? 1 : 2);
        p[bytes / 2] = 1;
        _exit(1);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The CPU faults on device memory, reading or writing, as on a GPU's;
 * the runtime's own calls reach it. */
static void test_device_memory_faults(void **state)
{
    unsigned char host[256], back[256];
    char *d;

    memset(host, 0x5a, sizeof host);
    assert_int_equal(rt.cudaMalloc((void **)&d, sizeof host), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(touch_in_child(d, sizeof host, READ), 0);
    assert_int_equal(touch_in_child(d, sizeof host, WRITE), 0);
    assert_int_equal(rt.cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, host, sizeof host);
    assert_int_equal(rt.cudaFree(d), cudaSuccess);
}

static void set_flag(void *arg)
{
    *(int *)arg = 1;
}

static void fill_floats(float *v, size_t n, float x)
{
    for (size_t i = 0; i < n; i++)
        v[i] = x;
}

static void expect_floats(const float *v, size_t n, float x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] != x)
            fail_msg("element %zu is %g, not %g", i, (double)v[i], (double)x);
}

/* Queued work runs only when someone synchronises with it, in stream
 * order, after the events its stream waits for: a reader that does not
 * wait for the writer's stream reads the old value. */
static void test_work_runs_at_synchronize(void **state)
{
    enum { N = 64 };
    float old[N], fresh[N], back[N];
    cudaStream_t s0, s1, free_running;
    cudaEvent_t ev;
    float *d;
    int ran = 0;

    fill_floats(old, N, 1);
    fill_floats(fresh, N, 2);
    assert_int_equal(rt.cudaMalloc((void **)&d, sizeof old), cudaSuccess);
    assert_int_equal(rt.cudaStreamCreate(&s0), cudaSuccess);
    assert_int_equal(rt.cudaStreamCreate(&s1), cudaSuccess);
    assert_int_equal(rt.cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking),
                     cudaSuccess);
    assert_int_equal(rt.cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(d, old, sizeof old, cudaMemcpyHostToDevice), cudaSuccess);

    /* Nothing runs until the stream is asked. */
    fill_floats(back, N, 0);
    assert_int_equal(rt.cudaMemcpyAsync(d, fresh, sizeof fresh, cudaMemcpyHostToDevice, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaLaunchHostFunc(s0, set_flag, &ran), cudaSuccess);
    expect_floats(back, N, 0);
    assert_int_equal(ran, 0);
    assert_int_equal(rt.cudaStreamQuery(s0), cudaSuccess);
    expect_floats(back, N, 2);
    assert_int_equal(ran, 1);

    /* A stream that does not wait for another reads what was there. */
    assert_int_equal(rt.cudaMemcpy(d, old, sizeof old, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(d, fresh, sizeof fresh, cudaMemcpyHostToDevice, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s1),
                     cudaSuccess);
    assert_int_equal(rt.cudaStreamSynchronize(s1), cudaSuccess);
    expect_floats(back, N, 1);
    assert_int_equal(rt.cudaStreamSynchronize(s0), cudaSuccess);

    /* Made to wait for an event of the writer's stream, it reads the write. */
    assert_int_equal(rt.cudaMemcpy(d, old, sizeof old, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(d, fresh, sizeof fresh, cudaMemcpyHostToDevice, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(ev, s0), cudaSuccess);
    assert_int_equal(rt.cudaStreamWaitEvent(s1, ev, 0), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s1),
                     cudaSuccess);
    assert_int_equal(rt.cudaStreamSynchronize(s1), cudaSuccess);
    expect_floats(back, N, 2);

    /* An event completes what came before it, not after. */
    assert_int_equal(rt.cudaMemcpyAsync(d, old, sizeof old, cudaMemcpyHostToDevice, s0),
                     cudaSuccess);
    assert_int_equal(rt.cudaEventRecord(ev, s0), cudaSuccess);
    assert_int_equal(rt.cudaMemsetAsync(d, 0, sizeof old, s0), cudaSuccess);
    assert_int_equal(rt.cudaEventSynchronize(ev), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost,
                                        free_running), cudaSuccess);
    assert_int_equal(rt.cudaStreamSynchronize(free_running), cudaSuccess);
    expect_floats(back, N, 1);

    /* A synchronous copy, on the legacy stream, waits for the blocking
     * streams: the memset queued above is done. */
    assert_int_equal(rt.cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    expect_floats(back, N, 0);

    /* The device synchronises everything. */
    assert_int_equal(rt.cudaMemcpyAsync(d, fresh, sizeof fresh, cudaMemcpyHostToDevice,
                                        free_running), cudaSuccess);
    assert_int_equal(rt.cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost,
                                        free_running), cudaSuccess);
    expect_floats(back, N, 0);
    assert_int_equal(rt.cudaDeviceSynchronize(), cudaSuccess);
    expect_floats(back, N, 2);

    assert_int_equal(rt.cudaEventDestroy(ev), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(s0), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(s1), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(free_running), cudaSuccess);
    assert_int_equal(rt.cudaFree(d), cudaSuccess);
}

/* The host build of the kernel module: a sum queued on a stream, run
 * when the stream is synchronised, from device memory into device
 * memory. */
static void test_kernel_module(void **state)
{
    enum { N = 100 };
    float a[N], b[N], back[N];
    const void *in[2];
    cudaStream_t s;
    float *da, *db, *dout;

    assert_int_equal(kernels.abi(), 1);
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f;
    }
    assert_int_equal(rt.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&da, sizeof a), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&db, sizeof b), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&dout, sizeof back), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaMemset(dout, 0, sizeof back), cudaSuccess);
    in[0] = da;
    in[1] = db;
    assert_int_equal(kernels.sum(0, dout, in, 2, N, s), 0);     /* float32 */
    in[0] = in[1] = NULL;              /* the launch has its own copy */
    assert_int_equal(rt.cudaMemcpy(back, dout, sizeof back, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    expect_floats(back, N, 0);         /* a non-blocking stream: not waited for */
    assert_int_equal(rt.cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(rt.cudaMemcpy(back, dout, sizeof back, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (int i = 0; i < N; i++)
        assert_true(back[i] == (float)i + 0.5f);
    assert_int_equal(rt.cudaFree(da), cudaSuccess);
    assert_int_equal(rt.cudaFree(db), cudaSuccess);
    assert_int_equal(rt.cudaFree(dout), cudaSuccess);
    assert_int_equal(rt.cudaStreamDestroy(s), cudaSuccess);
}

/* What a forked child does with the parent's handle; 0 when every step
 * gave what it should, else the number of the step that did not. */
enum child_job { WRITE_PATTERN, EXPECT_STALE, EXPECT_INJECTED };

static int child(enum child_job job, cudaIpcMemHandle_t handle, size_t n)
{
    cudaIpcMemHandle_t bad;
    static uint32_t v[4096];
    uint32_t *p;

    if (job == EXPECT_STALE)
        return rt.cudaIpcOpenMemHandle((void **)&p, handle, cudaIpcMemLazyEnablePeerAccess) ==
                       cudaErrorInvalidResourceHandle ? 0 : 1;
    if (job == EXPECT_INJECTED) {
        setenv("KVS_STANDIN_FAIL_IPC_OPEN", "1", 1);
        return rt.cudaIpcOpenMemHandle((void **)&p, handle, cudaIpcMemLazyEnablePeerAccess) ==
                       cudaErrorMapBufferObjectFailed ? 0 : 2;
    }
    memset(&bad, 0x5a, sizeof bad);
    if (rt.cudaIpcOpenMemHandle((void **)&p, bad, 0) != cudaErrorInvalidResourceHandle)
        return 3;
    if (rt.cudaIpcOpenMemHandle((void **)&p, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
        return 4;
    if (n > sizeof v / sizeof v[0]
        || rt.cudaMemcpy(v, p, n * sizeof *p, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 5;
    for (size_t i = 0; i < n; i++) {
        if (v[i] != 7)
            return 5;
        v[i] = (uint32_t)(i * 3 + 1);
    }
    if (rt.cudaMemcpy(p, v, n * sizeof *p, cudaMemcpyHostToDevice) != cudaSuccess)
        return 7;
    return rt.cudaIpcCloseMemHandle(p) == cudaSuccess ? 0 : 6;
}

static int run_child(enum child_job job, cudaIpcMemHandle_t handle, size_t n)
{
    int status;
    pid_t pid = fork();

    if (pid == 0)
        _exit(child(job, handle, n));
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_ipc(void **state)
{
    enum { N = 4096 };
    cudaIpcMemHandle_t handle;
    uint32_t *d, *self;
    static uint32_t back[N];

    assert_int_equal(rt.cudaSetDevice(1), cudaSuccess);
    assert_int_equal(rt.cudaMalloc((void **)&d, N * sizeof *d), cudaSuccess);
    for (int i = 0; i < N; i++)
        back[i] = 7;
    assert_int_equal(rt.cudaMemcpy(d, back, sizeof back, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(rt.cudaIpcGetMemHandle(&handle, d), cudaSuccess);
    assert_int_equal(rt.cudaIpcOpenMemHandle((void **)&self, handle, 0),
                     cudaErrorInvalidResourceHandle);

    assert_int_equal(run_child(WRITE_PATTERN, handle, N), 0);
    assert_int_equal(rt.cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], (uint32_t)(i * 3 + 1));
    assert_int_equal(run_child(EXPECT_INJECTED, handle, N), 0);

    assert_int_equal(rt.cudaFree(d), cudaSuccess);
    assert_int_equal(run_child(EXPECT_STALE, handle, N), 0);
}

static void test_injected(void **state)
{
    void *a = NULL, *b = NULL;

    setenv("KVS_STANDIN_FAIL_MALLOC", "2", 1);
    assert_int_equal(rt.cudaMalloc(&a, 64), cudaSuccess);
    assert_int_equal(rt.cudaMalloc(&b, 64), cudaErrorMemoryAllocation);
    assert_int_equal(rt.cudaGetLastError(), cudaErrorMemoryAllocation);
    assert_int_equal(rt.cudaMalloc(&b, 64), cudaSuccess);
    assert_int_equal(rt.cudaFree(b), cudaSuccess);
    setenv("KVS_STANDIN_FAIL_MALLOC", "all", 1);
    assert_int_equal(rt.cudaMalloc(&b, 64), cudaErrorMemoryAllocation);
    assert_int_equal(rt.cudaMalloc(&b, 64), cudaErrorMemoryAllocation);
    unsetenv("KVS_STANDIN_FAIL_MALLOC");

    assert_int_equal(rt.cudaSetDevice(1), cudaSuccess);
    assert_int_equal(rt.cudaMalloc(&b, 64), cudaSuccess);
    setenv("KVS_STANDIN_LOST_DEVICE", "1", 1);
    assert_int_equal(rt.cudaMemset(b, 0, 64), cudaErrorDevicesUnavailable);
    assert_int_equal(rt.cudaMemset(a, 0, 64), cudaSuccess);
    assert_int_equal(rt.cudaSetDevice(1), cudaErrorDevicesUnavailable);
    assert_int_equal(rt.cudaDeviceSynchronize(), cudaErrorDevicesUnavailable);
    /* Freed all the same: the loss is reported, the memory not leaked. */
    assert_int_equal(rt.cudaFree(b), cudaErrorDevicesUnavailable);
    assert_int_equal(rt.cudaFree(b), cudaErrorInvalidValue);
    assert_int_equal(rt.cudaFree(a), cudaSuccess);
}

/* ---- NCCL ------------------------------------------------------------- */

enum { RANKS = 3, COUNT = 5 };

struct clique {
    ncclComm_t comms[RANKS];
    void *bufs[RANKS];
};

static void clique_open(struct clique *c, size_t bytes)
{
    int n, device, rank;

    setenv("KVS_STANDIN_DEVICES", "3", 1);
    assert_int_equal(rt.ncclCommInitAll(c->comms, RANKS, NULL), ncclSuccess);
    for (int r = 0; r < RANKS; r++) {
        assert_int_equal(rt.ncclCommCount(c->comms[r], &n), ncclSuccess);
        assert_int_equal(rt.ncclCommCuDevice(c->comms[r], &device), ncclSuccess);
        assert_int_equal(rt.ncclCommUserRank(c->comms[r], &rank), ncclSuccess);
        assert_int_equal(n, RANKS);
        assert_int_equal(device, r);
        assert_int_equal(rank, r);
        assert_int_equal(rt.cudaSetDevice(r), cudaSuccess);
        assert_int_equal(rt.cudaMalloc(&c->bufs[r], bytes), cudaSuccess);
    }
}

static void clique_close(struct clique *c)
{
    for (int r = 0; r < RANKS; r++) {
        assert_int_equal(rt.cudaFree(c->bufs[r]), cudaSuccess);
        assert_int_equal(rt.ncclCommDestroy(c->comms[r]), ncclSuccess);
    }
}

static void put(struct clique *c, int rank, const void *values, size_t bytes)
{
    assert_int_equal(rt.cudaMemcpy(c->bufs[rank], values, bytes, cudaMemcpyHostToDevice),
                     cudaSuccess);
}

static void expect(struct clique *c, int rank, const void *values, size_t bytes)
{
    unsigned char back[64];

    assert_true(bytes <= sizeof back);
    assert_int_equal(rt.cudaMemcpy(back, c->bufs[rank], bytes, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_memory_equal(back, values, bytes);
}

/* In place on every rank, inside one group, as one thread drives InitAll comms. */
static ncclResult_t allreduce_all(struct clique *c, ncclDataType_t dtype, ncclRedOp_t op)
{
    ncclResult_t res = ncclSuccess;

    assert_int_equal(rt.ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < RANKS && res == ncclSuccess; r++)
        res = rt.ncclAllReduce(c->bufs[r], c->bufs[r], COUNT, dtype, op, c->comms[r], NULL);
    assert_int_equal(rt.ncclGroupEnd(), ncclSuccess);
    return res;
}

static void test_nccl_allreduce(void **state)
{
    struct clique c;
    float f32[COUNT], f32_sum[COUNT];
    int version = 0;
    /* 1 + 2^-11 + 2^-11: halves summed one by one give 1 (the first sum is
     * a tie, rounded to even); summed in float32 and rounded once, 1 + 2^-10. */
    static const uint16_t f16[RANKS][COUNT] = {
        {0x3c00, 0x4000, 0x0000, 0xbc00, 0x7bff},
        {0x1000, 0x4200, 0x0001, 0x3c00, 0x0000},
        {0x1000, 0x3c00, 0x0001, 0x3800, 0x5800},
    };
    static const uint16_t f16_sum[COUNT] = {0x3c01, 0x4600, 0x0002, 0x3800, 0x7c00};

    assert_int_equal(rt.ncclGetVersion(&version), ncclSuccess);
    assert_int_equal(version, NCCL_VERSION_CODE);
    clique_open(&c, 64);
    for (int i = 0; i < COUNT; i++)
        f32_sum[i] = 3.0f * (float)i + 0.75f;
    for (int r = 0; r < RANKS; r++) {
        for (int i = 0; i < COUNT; i++)
            f32[i] = (float)i + 0.25f * (float)r;
        put(&c, r, f32, sizeof f32);
    }
    assert_int_equal(allreduce_all(&c, ncclFloat32, ncclSum), ncclSuccess);
    for (int r = 0; r < RANKS; r++)
        expect(&c, r, f32_sum, sizeof f32_sum);

    for (int r = 0; r < RANKS; r++)
        put(&c, r, f16[r], sizeof f16[r]);
    assert_int_equal(allreduce_all(&c, ncclFloat16, ncclSum), ncclSuccess);
    for (int r = 0; r < RANKS; r++)
        expect(&c, r, f16_sum, sizeof f16_sum);

    assert_int_equal(allreduce_all(&c, ncclFloat8e4m3, ncclSum), ncclInvalidArgument);
    assert_int_equal(allreduce_all(&c, ncclFloat32, ncclAvg), ncclInvalidArgument);
    assert_int_equal(rt.ncclAllReduce(c.bufs[0], c.bufs[0], COUNT, ncclFloat32, ncclSum,
                                      c.comms[0], NULL), ncclInvalidUsage);
    assert_int_equal(rt.ncclGroupStart(), ncclSuccess);
    assert_int_equal(rt.ncclAllReduce(f32, f32, COUNT, ncclFloat32, ncclSum, c.comms[0], NULL),
                     ncclInvalidArgument);
    assert_int_equal(rt.ncclGroupEnd(), ncclSuccess);
    assert_int_equal(rt.ncclGroupEnd(), ncclInvalidUsage);
    clique_close(&c);
}

static void test_nccl_broadcast_reduce(void **state)
{
    struct clique c;
    int32_t v[COUNT], max[COUNT] = {20, 21, 22, 23, 24};
    const int32_t root_values[COUNT] = {-5, 7, 9, 11, 13};

    clique_open(&c, 64);
    for (int r = 0; r < RANKS; r++) {
        for (int i = 0; i < COUNT; i++)
            v[i] = r == 1 ? root_values[i] : -1;
        put(&c, r, v, sizeof v);
    }
    assert_int_equal(rt.ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(rt.ncclBroadcast(c.bufs[r], c.bufs[r], COUNT, ncclInt32, 1, c.comms[r],
                                          NULL), ncclSuccess);
    assert_int_equal(rt.ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < RANKS; r++)
        expect(&c, r, root_values, sizeof root_values);

    for (int r = 0; r < RANKS; r++) {
        for (int i = 0; i < COUNT; i++)
            v[i] = r * 10 + i;
        put(&c, r, v, sizeof v);
    }
    assert_int_equal(rt.ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(rt.ncclReduce(c.bufs[r], c.bufs[r], COUNT, ncclInt32, ncclMax, 0,
                                       c.comms[r], NULL), ncclSuccess);
    assert_int_equal(rt.ncclGroupEnd(), ncclSuccess);
    expect(&c, 0, max, sizeof max);
    for (int i = 0; i < COUNT; i++)
        v[i] = 10 + i; /* rank 1 is not the root: its buffer is left alone */
    expect(&c, 1, v, sizeof v);
    clique_close(&c);
}

/* Ranks on threads, joined by a unique id, each calling outside a group. */
struct rank_thread {
    ncclUniqueId id;
    int rank;
    ncclResult_t init, reduce;
    double result;
};

static void *rank_main(void *arg)
{
    struct rank_thread *t = arg;
    ncclComm_t comm;
    double *d, value = 1.5 * (t->rank + 1);

    rt.cudaSetDevice(t->rank);
    t->init = rt.ncclCommInitRank(&comm, 2, t->id, t->rank);
    if (t->init != ncclSuccess || rt.cudaMalloc((void **)&d, sizeof *d) != cudaSuccess)
        return NULL;
    rt.cudaMemcpy(d, &value, sizeof value, cudaMemcpyHostToDevice);
    t->reduce = rt.ncclAllReduce(d, d, 1, ncclFloat64, ncclSum, comm, NULL);
    rt.cudaMemcpy(&t->result, d, sizeof t->result, cudaMemcpyDeviceToHost);
    rt.cudaFree(d);
    rt.ncclCommDestroy(comm);
    return NULL;
}

static void test_nccl_init_rank(void **state)
{
    struct rank_thread t[2];
    pthread_t threads[2];
    ncclUniqueId id;

    assert_int_equal(rt.ncclGetUniqueId(&id), ncclSuccess);
    for (int r = 0; r < 2; r++) {
        t[r] = (struct rank_thread){.id = id, .rank = r, .init = ncclInternalError,
                                    .reduce = ncclInternalError};
        assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &t[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
        assert_int_equal(pthread_join(threads[r], NULL), 0);
        assert_int_equal(t[r].init, ncclSuccess);
        assert_int_equal(t[r].reduce, ncclSuccess);
        assert_true(t[r].result == 4.5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_devices, reset),
        cmocka_unit_test_setup(test_memory, reset),
        cmocka_unit_test_setup(test_streams_events, reset),
        cmocka_unit_test_setup(test_device_memory_faults, reset),
        cmocka_unit_test_setup(test_work_runs_at_synchronize, reset),
        cmocka_unit_test_setup(test_kernel_module, reset),
        cmocka_unit_test_setup(test_ipc, reset),
        cmocka_unit_test_setup(test_injected, reset),
        cmocka_unit_test_setup(test_nccl_allreduce, reset),
        cmocka_unit_test_setup(test_nccl_broadcast_reduce, reset),
        cmocka_unit_test_setup(test_nccl_init_rank, reset),
    };

    load();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
