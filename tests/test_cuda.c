/*
 * test_cuda.c - loading the CUDA runtime (src/device/cuda.c), each case in a
 * child process of its own since the outcome is kept per process: a
 * library that does not load, or is no CUDA runtime, or has no device, or
 * lacks the device asked for, gives KVS_EDEVICE and says so; the stand-in
 * (tests/standin/) with its devices counts them; the toolkit's own
 * runtime on a machine without a driver says there is none; and a store
 * refuses a device array with the loader's reason, or host memory that
 * claims to be a device's, changing nothing; the nccl type without NCCL
 * says so; a kernel module that does not load, or is not one, fails a
 * device sum with the loader's reason; device work that never finishes
 * fails at its deadline; device memory shared with another process by
 * CUDA IPC handle.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "device/cuda.h"
#include "device/mem.h"
#include "shm/ring.h"
#include "kvs.h"

struct outcome {
    int rc;
    char msg[KVS__ERR_MSG_MAX];
};

/* kvs__cuda_device(dev) in a child with KVS_CUDART=lib (and
 * KVS_STANDIN_DEVICES=ndev when ndev >= 0). */
static struct outcome device_in_child(const char *lib, int ndev, int dev)
{
    struct outcome o = { 0, "" };
    int fd[2], status;
    pid_t pid;

    assert_int_equal(pipe(fd), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct kvs__err e = { 0, "" };
        char n[16];

        snprintf(n, sizeof n, "%d", ndev);
        setenv("KVS_CUDART", lib, 1);
        if (ndev >= 0)
            setenv("KVS_STANDIN_DEVICES", n, 1);
        o.rc = kvs__cuda_device(dev, &e);
        snprintf(o.msg, sizeof o.msg, "%s", e.msg);
        _exit(write(fd[1], &o, sizeof o) == (ssize_t)sizeof o ? 0 : 1);
    }
    close(fd[1]);
    assert_int_equal(read(fd[0], &o, sizeof o), (ssize_t)sizeof o);
    close(fd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return o;
}

static void expect(struct outcome o, int rc, const char *part)
{
    if (o.rc != rc || (part && !strstr(o.msg, part)))
        fail_msg("expected %d with \"%s\", got %d \"%s\"", rc, part ? part : "", o.rc, o.msg);
}

static void test_no_library(void **state)
{
    (void)state;
    expect(device_in_child("/nonexistent/libcudart.so.13", -1, 0), KVS_EDEVICE,
           "no CUDA runtime: /nonexistent/libcudart.so.13 cannot be loaded");
}

static void test_not_a_runtime(void **state)
{
    (void)state;
    expect(device_in_child("libm.so.6", -1, 0), KVS_EDEVICE,
           "libm.so.6 is not a CUDA runtime: it has no cudaGetDeviceCount");
}

static void test_standin_devices(void **state)
{
    (void)state;
    expect(device_in_child(STANDIN_PATH, 2, 1), 0, NULL);
    expect(device_in_child(STANDIN_PATH, 2, 2), KVS_EDEVICE, "no CUDA device 2 (2 devices)");
    expect(device_in_child(STANDIN_PATH, 1, 3), KVS_EDEVICE, "no CUDA device 3 (1 device)");
    expect(device_in_child(STANDIN_PATH, 0, 0), KVS_EDEVICE, "no CUDA device (");
}

/* The toolkit's runtime, where the toolkit is and no driver: it loads and
 * finds none. Skipped where a driver is present or the toolkit is not. */
static void test_real_runtime_without_driver(void **state)
{
    const char *lib = CUDA_LIB_DIR "/libcudart.so.13";

    (void)state;
    if (access(lib, R_OK) != 0 || access("/dev/nvidiactl", F_OK) == 0)
        skip();
    expect(device_in_child(lib, -1, 0), KVS_EDEVICE, "no CUDA driver");
}

/* Runs body in a child with the stand-in as the runtime (2 devices): the
 * child's exit status is 0 when body's checks held. */
static void in_child(int (*body)(void))
{
    int status;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("KVS_CUDART", STANDIN_PATH, 1);
        setenv("KVS_STANDIN_DEVICES", "2", 1);
        setenv("KVS_CUDA_KERNELS", STANDIN_KERNELS, 1);
        _exit(body());
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A store refuses a device array with the loader's reason, and host
 * memory that says it is a device's, and stores nothing. */
static int store_refuses(void)
{
    float v[4] = { 1, 2, 3, 4 };
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 },
                      .device = KVS_CUDA(5) };
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_t *kv;
    int ok;

    if (kvs_create("local", &kv) != 0)
        return 2;
    ok = kvs_init(kv, 1, &k, &a) == KVS_EDEVICE
         && strstr(kvs_last_error(kv), "is on KVS_CUDA(5): no CUDA device 5 (2 devices)");
    a.device = KVS_CUDA(1);
    ok = ok && kvs_init(kv, 1, &k, &a) == KVS_EDEVICE
         && strstr(kvs_last_error(kv), "says KVS_CUDA(1), but its data is not device memory");
    a.device = KVS_HOST;
    ok = ok && kvs_pull(kv, 1, &k, &a, 0) == KVS_ENOKEY;
    kvs_close(kv);
    return ok ? 0 : 1;
}

static void test_store_refuses(void **state)
{
    (void)state;
    in_child(store_refuses);
}

/* Without NCCL, the nccl type still stores and pulls; a push that needs
 * NCCL (values of a key from two GPUs) fails with the reason and changes
 * nothing. */
static int nccl_missing(void)
{
    float v[4] = { 1, 2, 3, 4 }, got[4] = { 0 };
    kvs_array_t a[2] = { { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 },
                           .device = KVS_CUDA(0) },
                         { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 },
                           .device = KVS_CUDA(1) } };
    kvs_array_t h = { .data = got, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } };
    kvs_key_t k[2] = { KVS_INT_KEY(1), KVS_INT_KEY(1) };
    kvs_t *kv;
    int ok;

    setenv("KVS_NCCL", "/nonexistent/libnccl.so.2", 1);
    for (int i = 0; i < 2; i++)
        if (kvs__mem_alloc(a[i].device, sizeof v, 0, &a[i].data, NULL) != 0
            || kvs__mem_copy(a[i].data, a[i].device, v, KVS_HOST, sizeof v, 1, NULL) != 0)
            return 2;
    if (kvs_create("nccl", &kv) != 0 || kvs_init(kv, 1, k, &a[0]) != 0)
        return 3;
    ok = kvs_push(kv, 2, k, a, 0) == KVS_EDEVICE
         && strstr(kvs_last_error(kv), "libnccl not found: /nonexistent/libnccl.so.2");
    ok = ok && kvs_pull(kv, 1, k, &h, 0) == 0 && memcmp(got, v, sizeof v) == 0;
    kvs_close(kv);
    return ok ? 0 : 1;
}

static void test_nccl_missing(void **state)
{
    (void)state;
    in_child(nccl_missing);
}

/* A sum on a device with the kernel module module: 0 when the push fails
 * with KVS_EDEVICE and why, and the key keeps its value. */
static int kernels_refused(const char *module, const char *why)
{
    float v[4] = { 1, 2, 3, 4 }, got[4] = { 0 };
    kvs_array_t a = { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 }, .device = KVS_CUDA(0) };
    kvs_array_t h = { .data = got, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } };
    kvs_key_t k[2] = { KVS_INT_KEY(1), KVS_INT_KEY(1) };
    kvs_t *kv;
    int ok;

    setenv("KVS_CUDA_KERNELS", module, 1);
    if (kvs__mem_alloc(a.device, sizeof v, 0, &a.data, NULL) != 0
        || kvs__mem_copy(a.data, a.device, v, KVS_HOST, sizeof v, 1, NULL) != 0
        || kvs__mem_finish(NULL) != 0 || kvs_create("local", &kv) != 0
        || kvs_init(kv, 1, k, &a) != 0)
        return 2;
    ok = kvs_push(kv, 2, k, (kvs_array_t[2]){ a, a }, 0) == KVS_EDEVICE
         && strstr(kvs_last_error(kv), why);
    ok = ok && kvs_pull(kv, 1, k, &h, 0) == 0 && memcmp(got, v, sizeof v) == 0;
    kvs_close(kv);
    kvs__mem_free(a.device, a.data);
    return ok ? 0 : 1;
}

static int kernels_missing(void)
{
    return kernels_refused("/nonexistent/libkvs-cuda.so",
                           "no CUDA kernels: /nonexistent/libkvs-cuda.so cannot be loaded");
}

static int kernels_not_a_module(void)
{
    return kernels_refused(STANDIN_PATH, "is not a kernel module of this version");
}

/* Device sums go through the kernel module libkvs loads (KVS_CUDA_KERNELS):
 * one that does not load, or is not a module, fails the push with the
 * reason and changes nothing. */
static void test_kernels_refused(void **state)
{
    (void)state;
    in_child(kernels_missing);
    in_child(kernels_not_a_module);
}

/* Device work that never finishes fails the call at KVS_TIMEOUT, with the
 * device named, and stores nothing. */
static int device_hangs(void)
{
    float v[4] = { 1, 2, 3, 4 };
    kvs_array_t a = { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 }, .device = KVS_CUDA(1) };
    kvs_key_t k = KVS_INT_KEY(1);
    int64_t t0;
    kvs_t *kv;
    int ok;

    setenv("KVS_TIMEOUT", "0.2", 1);
    if (kvs__mem_alloc(a.device, sizeof v, 0, &a.data, NULL) != 0
        || kvs__mem_copy(a.data, a.device, v, KVS_HOST, sizeof v, 1, NULL) != 0
        || kvs_create("local", &kv) != 0)
        return 2;
    setenv("KVS_STANDIN_BUSY_STREAMS", "1", 1);
    t0 = kvs__now_ns();
    ok = kvs_init(kv, 1, &k, &a) == KVS_ETIMEDOUT
         && strstr(kvs_last_error(kv), "KVS_CUDA(1): device work not done after 200 ms")
         && kvs__now_ns() - t0 >= 200000000;
    unsetenv("KVS_STANDIN_BUSY_STREAMS");
    ok = ok && kvs_pull(kv, 1, &k, &a, 0) == KVS_ENOKEY;
    kvs_close(kv);
    return ok ? 0 : 1;
}

static void test_device_hangs(void **state)
{
    (void)state;
    in_child(device_hangs);
}

/* Device memory shared with another process: the exporter names the
 * allocation that holds a range, with the range's offset; the importer
 * (a child: a process cannot open its own handle) sees the allocation's
 * true size and device, reads what the exporter wrote and writes what the
 * exporter then reads. A forged handle, an injected failure and the
 * exporter's own process do not open, nor does host memory export. */
static int ipc_shares(void)
{
    unsigned char want[512], got[512];
    struct kvs__mem_ipc x, forged;
    struct kvs__err e = { 0, "" };
    char *p;
    void *base;
    size_t size;
    int on, status, ok;
    pid_t pid;

    for (size_t i = 0; i < sizeof want; i++)
        want[i] = (unsigned char)(i * 7 + 1);
    if (kvs__mem_alloc(KVS_CUDA(1), 4096, 1, (void **)&p, NULL) != 0
        || kvs__mem_copy(p + 1024, KVS_CUDA(1), want, KVS_HOST, sizeof want, 1, NULL) != 0
        || kvs__mem_finish(NULL) != 0)
        return 2;
    if (kvs__mem_ipc_export(KVS_CUDA(1), p + 1024, 512, &x, &e) != 0 || x.offset != 1024
        || x.size != 4096)
        return 3;
    ok = kvs__mem_ipc_export(KVS_CUDA(1), p + 1024, 4096, &x, &e) == KVS_EDEVICE
         && strstr(e.msg, "overrun their allocation");
    ok = ok && kvs__mem_ipc_export(KVS_CUDA(0), want, sizeof want, &forged, &e) == KVS_EDEVICE;
    ok = ok && kvs__mem_ipc_open(KVS_CUDA(0), x.handle, &base, &size, &on, &e) == KVS_EDEVICE
         && strstr(e.msg, "does not open");
    if (!ok)
        return 4;
    pid = fork();
    if (pid == 0) {
        forged = x;
        forged.handle[8] ^= 0x40;          /* another descriptor */
        if (kvs__mem_ipc_open(KVS_CUDA(0), forged.handle, &base, &size, &on, &e) != KVS_EDEVICE)
            _exit(10);
        setenv("KVS_STANDIN_FAIL_IPC_OPEN", "1", 1);
        if (kvs__mem_ipc_open(KVS_CUDA(0), x.handle, &base, &size, &on, &e) != KVS_EDEVICE)
            _exit(11);
        unsetenv("KVS_STANDIN_FAIL_IPC_OPEN");
        if (kvs__mem_ipc_open(KVS_CUDA(0), x.handle, &base, &size, &on, &e) != 0)
            _exit(12);
        if (size != 4096 || on != KVS_CUDA(1))
            _exit(13);
        if (kvs__mem_copy(got, KVS_HOST, (char *)base + x.offset, on, sizeof got, 1, &e) != 0
            || memcmp(got, want, sizeof got) != 0)
            _exit(14);
        memset(got, 0x5a, sizeof got);
        if (kvs__mem_copy((char *)base + x.offset, on, got, KVS_HOST, sizeof got, 1, &e) != 0
            || kvs__mem_finish(&e) != 0)
            _exit(15);
        kvs__mem_ipc_close(base);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 5;
    if (WEXITSTATUS(status) != 0)
        return WEXITSTATUS(status);
    memset(want, 0x5a, sizeof want);
    ok = kvs__mem_copy(got, KVS_HOST, p + 1024, KVS_CUDA(1), sizeof got, 1, NULL) == 0
         && memcmp(got, want, sizeof got) == 0;
    kvs__mem_free(KVS_CUDA(1), p);
    return ok ? 0 : 6;
}

static void test_ipc_shares(void **state)
{
    (void)state;
    in_child(ipc_shares);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_library),
        cmocka_unit_test(test_not_a_runtime),
        cmocka_unit_test(test_standin_devices),
        cmocka_unit_test(test_real_runtime_without_driver),
        cmocka_unit_test(test_store_refuses),
        cmocka_unit_test(test_nccl_missing),
        cmocka_unit_test(test_kernels_refused),
        cmocka_unit_test(test_device_hangs),
        cmocka_unit_test(test_ipc_shares),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
