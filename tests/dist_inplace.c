/*
 * dist_inplace.c - one worker of a test_dist_inplace.sh job whose
 * pushpulls kvsd may answer by writing the value straight into the
 * worker's out (process_vm_writev). Every out (and every array summed in
 * place) lies right before a canary and a guard page (PROT_NONE), checked
 * after every call. argv[1] names the scenario:
 *
 *   values   float32 and float64 keys of sizes around the bound
 *            (KVS_TEST_BOUND bytes, the job's KVS_REMOTE_MIN), alone and
 *            in a list of three, into outs and in place, a list whose
 *            first out is its second array, and (the smallest size) a
 *            list of 16 sent as tables, two rounds each: every
 *            element equal, bit for bit, to the sum in rank order;
 *            rank 0 then checks that `kvsctl stats` counts KVS_TEST_WRITES
 *            outs written in place (-1: any number). KVS_TEST_RO=1: each
 *            out is read-only while lent, made writable by a SIGSEGV
 *            handler on the worker's own first write: kvsd's writes fail
 *            and the worker copies every value itself.
 *   timeout  rank 0 gives up waiting (a 1 s deadline) on a round rank 1
 *            pushes only later: its call fails, and its out and canary are
 *            never written afterwards, while rank 1 pushes.
 *   killed   rank 1 is killed (SIGKILL) with its push waiting in the round;
 *   exits    rank 1 exits with it: rank 0's call fails, and its out is
 *            never written after the call returned.
 *
 * KVS_TEST_NODUMP=1 makes the process not dumpable before kvs_create.
 * Exits 0 when everything is right, 1 with a message when not.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <kvs.h>

#include "distutil.h"

#define CANARY 64

/* An array that ends CANARY bytes before a guard page, with a canary
 * between them and a known pattern before it. */
struct guarded {
    unsigned char *map;
    size_t maplen, head;
    unsigned char *p;
    size_t bytes;
};

static void guarded_new(struct guarded *g, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (bytes + CANARY + page - 1) / page * page;

    g->maplen = body + page;
    g->map = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED || mprotect(g->map + body, page, PROT_NONE) != 0)
        die("mmap");
    g->bytes = bytes;
    g->head = body - CANARY - bytes;
    g->p = g->map + g->head;
    memset(g->map, 0x5a, g->head);
    memset(g->p + bytes, 0xa5, CANARY);
}

static void guarded_check(const struct guarded *g, const char *what)
{
    for (size_t i = 0; i < g->head; i++)
        if (g->map[i] != 0x5a)
            die("%s: byte %zu before the array was written", what, g->head - i);
    for (size_t i = 0; i < CANARY; i++)
        if (g->p[g->bytes + i] != 0xa5)
            die("%s: canary byte %zu after the array was written", what, i);
}

static void guarded_free(struct guarded *g)
{
    munmap(g->map, g->maplen);
}

static kvs_array_t arr(kvs_dtype_t dt, void *p, int64_t n)
{
    return (kvs_array_t){ .data = p, .dtype = dt, .ndim = 1, .shape = { n } };
}

/* Worker r's input, element i, of key k in round t: not an integer, so
 * that the order of the additions shows in the bits. */
static double input(int r, int64_t i, int k, int t)
{
    return (r + 1) * 0.3 + (double)(i % 997) * 0.001 + k * 0.01 + t;
}

static void fill_input(kvs_array_t *a, int k, int t)
{
    for (int64_t i = 0; i < a->shape[0]; i++)
        elem_set(a, i, input(rank, i, k, t));
}

/* The sum in rank order, in the array's dtype, compared bit for bit. */
static void check_sum(const kvs_array_t *a, int k, int t, const char *what)
{
    for (int64_t i = 0; i < a->shape[0]; i++) {
        if (a->dtype == KVS_FLOAT64) {
            double s = input(0, i, k, t), got = ((const double *)a->data)[i];

            for (int r = 1; r < nw; r++)
                s = s + input(r, i, k, t);
            if (memcmp(&s, &got, sizeof s) != 0)
                die("%s: key %d round %d element %" PRId64 " is %.17g, expected %.17g", what,
                    k, t, i, got, s);
        } else {
            float s = (float)input(0, i, k, t), got = ((const float *)a->data)[i];

            for (int r = 1; r < nw; r++)
                s = s + (float)input(r, i, k, t);
            if (memcmp(&s, &got, sizeof s) != 0)
                die("%s: key %d round %d element %" PRId64 " is %.9g, expected %.9g", what, k,
                    t, i, (double)got, (double)s);
        }
    }
}

/* KVS_TEST_RO: outs read-only while lent; the worker's own first write
 * into one makes it writable again and is counted. */
static struct guarded *ro_out;
static volatile sig_atomic_t ro_faults;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    unsigned char *a = si->si_addr;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    (void)uc;
    if (!ro_out || a < ro_out->map || a >= ro_out->map + ro_out->maplen - page) {
        signal(sig, SIG_DFL);
        return;                        /* faults again, and dies of it */
    }
    mprotect(ro_out->map, ro_out->maplen - page, PROT_READ | PROT_WRITE);
    ro_faults++;
}

static int lent_ro(struct guarded *g)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (!getenv("KVS_TEST_RO") || strcmp(getenv("KVS_TEST_RO"), "1") != 0)
        return 0;
    ro_out = g;
    if (mprotect(g->map, g->maplen - page, PROT_READ) != 0)
        die("mprotect");
    return 1;
}

/* One pushpull of keys [k0, k0 + m) of n elements each, into guarded
 * outs (in_place: of the inputs themselves), checked; returns the outs
 * kvsd may have written (the call lends at least bound bytes, each of at
 * least 64 KiB). */
static int one_call(kvs_dtype_t dt, int k0, int m, int64_t n, int t, int in_place,
                    size_t bound)
{
    size_t bytes = (size_t)n * kvs_dtype_size(dt);
    struct guarded gv[16], go[16];
    kvs_array_t v[16], o[16];
    kvs_key_t keys[16];
    char what[96];
    int ro = 0, faults = ro_faults;

    if (m > 16)
        die("at most 16 keys");
    snprintf(what, sizeof what, "%s %s of %d key(s) of %zu bytes",
             dt == KVS_FLOAT64 ? "float64" : "float32", in_place ? "in place" : "into outs",
             m, bytes);
    for (int j = 0; j < m; j++) {
        keys[j] = KVS_INT_KEY(k0 + j);
        guarded_new(&gv[j], bytes);
        v[j] = arr(dt, gv[j].p, n);
        fill_input(&v[j], k0 + j, t);
        if (!in_place) {
            guarded_new(&go[j], bytes);
            o[j] = arr(dt, go[j].p, n);
            memset(go[j].p, 0xee, bytes);
        }
    }
    if (m == 1 && !in_place)
        ro = lent_ro(&go[0]);
    ok(kvs_pushpull(kv, m, keys, v, in_place ? NULL : o, 0), what);
    for (int j = 0; j < m; j++) {
        check_sum(in_place ? &v[j] : &o[j], k0 + j, t, what);
        guarded_check(&gv[j], what);
        if (!in_place)
            guarded_check(&go[j], what);
        guarded_free(&gv[j]);
        if (!in_place)
            guarded_free(&go[j]);
    }
    ro_out = NULL;
    if (ro && ro_faults == faults)
        die("%s: the out was read-only, yet the worker never wrote it", what);
    /* A list of 16 keys and more goes as tables, whose outs are copied. */
    return bytes * (size_t)m >= bound && bytes >= ((size_t)64 << 10) && m < 16 ? m : 0;
}

/* Keys k0 and k0 + 1 in one call, key k0's out the array of key k0 + 1:
 * kvsd writes no out of such a call (key k0's round may close before key
 * k0 + 1's reads its array), and both values come out right. */
static void alias_call(kvs_dtype_t dt, int k0, int64_t n, int t)
{
    size_t bytes = (size_t)n * kvs_dtype_size(dt);
    struct guarded gv[2], go;
    kvs_array_t v[2], o[2];
    kvs_key_t keys[2] = { KVS_INT_KEY(k0), KVS_INT_KEY(k0 + 1) };
    const char *what = "an out that is another key's array";

    for (int j = 0; j < 2; j++) {
        guarded_new(&gv[j], bytes);
        v[j] = arr(dt, gv[j].p, n);
        fill_input(&v[j], k0 + j, t);
    }
    guarded_new(&go, bytes);
    o[0] = v[1];
    o[1] = arr(dt, go.p, n);
    ok(kvs_pushpull(kv, 2, keys, v, o, 0), what);
    check_sum(&o[0], k0, t, what);
    check_sum(&o[1], k0 + 1, t, what);
    guarded_check(&gv[0], what);
    guarded_check(&gv[1], what);
    guarded_check(&go, what);
    guarded_free(&gv[0]);
    guarded_free(&gv[1]);
    guarded_free(&go);
}

/* kvsctl stats' count of outs written in place. */
static long long outs_written(void)
{
    char cmd[512], line[256];
    long long n = -1;
    FILE *f;

    snprintf(cmd, sizeof cmd, "%s -j %s stats", getenv("KVS_TEST_KVSCTL"), getenv("KVS_JOB"));
    if (!(f = popen(cmd, "r")))
        die("popen %s", cmd);
    while (fgets(line, sizeof line, f))
        sscanf(line, "outs written in place: %lld", &n);
    if (pclose(f) != 0)
        die("%s failed", cmd);
    return n;
}

static void values(void)
{
    static const kvs_dtype_t dts[2] = { KVS_FLOAT32, KVS_FLOAT64 };
    size_t bound = (size_t)strtoull(getenv("KVS_TEST_BOUND"), NULL, 10);
    size_t sizes[4] = { bound - 4096, bound, bound + 8, 3 * bound + 24 };
    long long want = strtoll(getenv("KVS_TEST_WRITES"), NULL, 10), lent = 0, got;
    struct sigaction sa = { .sa_sigaction = on_segv, .sa_flags = SA_SIGINFO };

    if (sigaction(SIGSEGV, &sa, NULL) != 0)
        die("sigaction");
    for (int d = 0; d < 2; d++) {
        for (int s = 0; s < 4; s++) {
            int64_t n = (int64_t)(sizes[s] / kvs_dtype_size(dts[d]));
            int k0 = 100 * (d * 4 + s + 1);
            kvs_key_t keys[20];
            kvs_array_t z[20];
            void *zero = calloc((size_t)n, kvs_dtype_size(dts[d]));

            if (!zero)
                die("out of memory");
            for (int j = 0; j < 20; j++) {
                keys[j] = KVS_INT_KEY(k0 + j);
                z[j] = arr(dts[d], zero, n);
            }
            ok(kvs_init(kv, 20, keys, z), "init");
            free(zero);
            for (int t = 0; t < 2; t++) {
                lent += one_call(dts[d], k0, 1, n, t, 0, bound);
                lent += one_call(dts[d], k0, 1, n, t, 1, bound);
                lent += one_call(dts[d], k0 + 1, 3, n, t, 0, bound);
                alias_call(dts[d], k0 + 2, n, t);
                if (s == 0)            /* a list sent as tables: copied */
                    lent += one_call(dts[d], k0 + 4, 16, n, t, 0, bound);
            }
        }
    }
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0 && getenv("KVS_TEST_KVSCTL")) {
        if (want < 0 ? (got = outs_written()) < 0 : (got = outs_written()) != want * lent * nw)
            die("kvsctl stats: %lld outs written in place, expected %lld", got,
                want * lent * nw);
        if (want > 0 && lent == 0)
            die("no call lent kvsd an out");
    }
    ok(kvs_barrier(kv), "barrier");
}

/* The key of the failure scenarios, 8 MiB of float32. */
enum { FN = 2 << 20, FK = 77 };

static void *push_forever(void *p)
{
    kvs_key_t k = KVS_INT_KEY(FK);
    kvs_array_t a = arr(KVS_FLOAT32, p, FN);

    kvs_pushpull(kv, 1, &k, &a, NULL, 0);
    return NULL;
}

/* After rank 0's call failed (rc), its out and canary stay as the call
 * left them while the peer goes on, for wait_s seconds. */
static void never_after(const struct guarded *g, int rc, const char *what, double wait_s)
{
    unsigned char *snap = malloc(g->bytes);

    if (rc == 0)
        die("%s: the call succeeded", what);
    if (!snap)
        die("out of memory");
    guarded_check(g, what);
    memcpy(snap, g->p, g->bytes);
    usleep((useconds_t)(wait_s * 1e6));
    if (memcmp(snap, g->p, g->bytes) != 0)
        die("%s: the out was written after the call returned", what);
    guarded_check(g, what);
    free(snap);
}

static void failures(void)
{
    kvs_key_t k = KVS_INT_KEY(FK);
    struct guarded gv, go;
    kvs_array_t v, o;
    pthread_t th;
    int rc;

    guarded_new(&gv, (size_t)FN * 4);
    guarded_new(&go, (size_t)FN * 4);
    v = arr(KVS_FLOAT32, gv.p, FN);
    o = arr(KVS_FLOAT32, go.p, FN);
    fill((float *)(void *)gv.p, FN, 1);
    ok(kvs_init(kv, 1, &k, &v), "init");
    expect((float *)(void *)gv.p, FN, 1, "the input after init");
    ok(kvs_barrier(kv), "barrier");
    if (strcmp(scenario, "timeout") == 0) {
        if (rank == 0) {
            ok(kvs_set_option(kv, KVS_OPT_TIMEOUT_MS, 1000), "timeout");
            memset(go.p, 0xee, go.bytes);
            rc = kvs_pushpull(kv, 1, &k, &v, &o, 0);
            if (rc != KVS_ETIMEDOUT)
                die("pushpull past the deadline: %s (%s)", kvs_err_name(rc),
                    kvs_last_error(kv));
            never_after(&go, rc, "timed out", 3.0);
        } else {
            usleep(2500000);           /* rank 0 gave up 1 s ago */
            rc = kvs_pushpull(kv, 1, &k, &v, &o, 0);
            if (rc == 0)
                die("pushpull after rank 0 gave up succeeded");
        }
        return;
    }
    /* killed, exits: rank 1's push waits in the round when it goes. */
    if (rank == 1) {
        if (pthread_create(&th, NULL, push_forever, gv.p) != 0)
            die("pthread_create");
        usleep(500000);
        if (strcmp(scenario, "killed") == 0)
            raise(SIGKILL);
        _exit(3);
    }
    usleep(1000000);
    memset(go.p, 0xee, go.bytes);
    rc = kvs_pushpull(kv, 1, &k, &v, &o, 0);
    if (rc != KVS_EPEERDEAD && rc != KVS_ECLOSED)
        die("pushpull with rank 1 gone: %s (%s)", kvs_err_name(rc), kvs_last_error(kv));
    never_after(&go, rc, scenario, 1.0);
}

int main(int argc, char **argv)
{
    scenario = argc > 1 ? argv[1] : "values";
    if (getenv("KVS_TEST_NODUMP") && strcmp(getenv("KVS_TEST_NODUMP"), "1") == 0)
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "values") == 0)
        values();
    else if (strcmp(scenario, "timeout") == 0 || strcmp(scenario, "killed") == 0
             || strcmp(scenario, "exits") == 0)
        failures();
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
