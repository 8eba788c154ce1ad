/*
 * dist_restart.c - a worker of tests/test_recover_client.sh: its handle's
 * link to a kvsd --recover that the test kills (-9) and, but in one case,
 * replaces with a new kvsd of the same job. Scenarios (argv[1]):
 *   blocked   kvsd dies while the worker waits in a pull for a round that
 *             never closes (the other rank pushes another key)
 *   idle      kvsd dies and comes back while the worker sleeps between
 *             calls; its next call finds out
 *   threads   kvsd dies while two threads of the worker wait in pulls
 *             for rounds that never close: each gets KVS_ERESTART
 *   geometry  as idle, but the new kvsd has another staging size: the
 *             old buffer is no live buffer any more, a new one works
 *   committed kvs_commit(5) after a round, another round, then kvsd
 *             dies and a kvsd --restore comes: KVS_ERESTART, resume step
 *             5, the committed value pulled, rounds go on
 *   none      no kvsd comes back: KVS_ECLOSED once the handle's timeout
 *             (2 s here) has passed
 * The first two: the call returns KVS_ERESTART once, kvs_resume_step then
 * says -1 (the new kvsd has no snapshot), the worker inits again, and a
 * kvs_array_alloc buffer written before keeps its address and bytes and
 * is pushed from with the right sum after. $KVS_TEST_DIR holds the files
 * the test and the workers meet on: ready.RANK (written by the worker),
 * restarted (by the test).
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "distutil.h"

#define N 6

static const char *dir;

static void touch(const char *name)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "w")))
        die("cannot write %s", path);
    fclose(f);
}

/* Waits for the test's file name, 60 s at most. */
static void await(const char *name)
{
    char path[512];

    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; access(path, F_OK) != 0; i++) {
        if (i > 600)
            die("no %s within 60 s", path);
        usleep(100 * 1000);
    }
}

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Keys 1 (summed by both ranks), 10 + rank and 20 + rank (pushed by one
 * rank only: their rounds never close). */
static void init_keys(void)
{
    float z[N] = { 0 };
    kvs_key_t keys[5] = { KVS_INT_KEY(1), KVS_INT_KEY(10), KVS_INT_KEY(11), KVS_INT_KEY(20),
                          KVS_INT_KEY(21) };
    kvs_array_t vals[5];

    for (int i = 0; i < 5; i++)
        vals[i] = f32(z, 2, 3);
    ok(kvs_init(kv, 5, keys, vals), "init");
}

/* One round of key 1 from the buffer: every rank's rank + 1, summed. */
static void round_from(kvs_array_t *buf, float mine)
{
    kvs_key_t k = KVS_INT_KEY(1);
    float o[N];
    kvs_array_t out = f32(o, 2, 3);

    fill(buf->data, N, mine);
    ok(kvs_pushpull(kv, 1, &k, buf, &out, 0), "pushpull from the buffer");
    expect(o, N, nw * (nw + 1) / 2.0f, "key 1's round");
}

/* The call got KVS_ERESTART with its detail. */
static void check_restart(int rc, const char *call)
{
    if (rc != KVS_ERESTART)
        die("%s with kvsd replaced: %s (%s), expected KVS_ERESTART", call, kvs_err_name(rc),
            kvs_last_error(kv));
    if (!strstr(kvs_last_error(kv), "went away: the job rolls back to its last commit"))
        die("%s: the detail '%s' does not say kvsd went away", call, kvs_last_error(kv));
}

/* After its KVS_ERESTART the handle works again: no snapshot, the buffer
 * where it was with its bytes, keys inited again, right sums. */
static void works_again(kvs_array_t *buf, void *addr, float stamp)
{
    int64_t step = 0;

    ok(kvs_resume_step(kv, &step), "resume_step");
    if (step != -1)
        die("resume step %lld after a restart with no snapshot, expected -1", (long long)step);
    if (buf->data != addr)
        die("the buffer moved");
    expect(buf->data, N, stamp, "the buffer's bytes after the restart");
    init_keys();
    round_from(buf, (float)(rank + 1));
    round_from(buf, (float)(rank + 1));
}

static void alloc_buf(kvs_array_t *buf)
{
    ok(kvs_array_alloc(kv, KVS_FLOAT32, 2, (int64_t[]){ 2, 3 }, buf), "array_alloc");
}

/* The keys inited, a buffer of kvsd's, one round of key 1 from it. */
static void first_round(kvs_array_t *buf)
{
    init_keys();
    alloc_buf(buf);
    round_from(buf, (float)(rank + 1));
}

/* Tells the test this rank is ready, waits for kvsd's restart, and sees
 * it: KVS_ERESTART at the next call, then the resume step WANT. */
static void restarted(int64_t want)
{
    int64_t step = 0;

    touch(rank ? "ready.1" : "ready.0");
    await("restarted");
    check_restart(kvs_barrier(kv), "the next call (a barrier)");
    ok(kvs_resume_step(kv, &step), "resume_step");
    if (step != want)
        die("resume step %lld after the restart, expected %lld", (long long)step,
            (long long)want);
}

static void blocked(void)
{
    kvs_key_t mine = KVS_INT_KEY(10 + rank);
    float v[N], o[N];
    kvs_array_t a = f32(v, 2, 3), out = f32(o, 2, 3), buf;
    void *addr;
    int rc;

    first_round(&buf);
    addr = buf.data;
    fill(buf.data, N, 40.0f + rank);
    fill(v, N, 1);
    ok(kvs_push(kv, 1, &mine, &a, 0), "push");
    touch(rank ? "ready.1" : "ready.0");
    rc = kvs_pull(kv, 1, &mine, &out, 0);
    check_restart(rc, "a pull waiting for a round");
    works_again(&buf, addr, 40.0f + rank);
    ok(kvs_array_free(kv, &buf), "array_free");
}

static void idle(void)
{
    kvs_array_t buf;
    void *addr;
    int rc;

    first_round(&buf);
    addr = buf.data;
    fill(buf.data, N, 50.0f + rank);
    touch(rank ? "ready.1" : "ready.0");
    await("restarted");
    rc = kvs_barrier(kv);
    check_restart(rc, "the next call (a barrier)");
    works_again(&buf, addr, 50.0f + rank);
    ok(kvs_array_free(kv, &buf), "array_free");
}

/* A thread's push of key arg + rank, then its pull, which waits. */
static void *waiter(void *arg)
{
    kvs_key_t k = KVS_INT_KEY((intptr_t)arg + rank);
    float v[N], o[N];
    kvs_array_t a = f32(v, 2, 3), out = f32(o, 2, 3);

    fill(v, N, 1);
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    return (void *)(intptr_t)kvs_pull(kv, 1, &k, &out, 0);
}

static void threads(void)
{
    pthread_t t[2];
    kvs_array_t buf;
    void *addr, *rc;

    first_round(&buf);
    addr = buf.data;
    fill(buf.data, N, 60.0f + rank);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, waiter, (void *)(intptr_t)(10 + 10 * i)) != 0)
            die("pthread_create");
    touch(rank ? "ready.1" : "ready.0");
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], &rc);
        if ((intptr_t)rc != KVS_ERESTART)
            die("thread %d's pull with kvsd replaced: %s, expected KVS_ERESTART", i,
                kvs_err_name((int)(intptr_t)rc));
    }
    works_again(&buf, addr, 60.0f + rank);
    ok(kvs_array_free(kv, &buf), "array_free");
}

static void geometry(void)
{
    kvs_array_t buf, old;
    int rc;

    first_round(&old);
    restarted(-1);
    if ((rc = kvs_array_free(kv, &old)) != KVS_EBADARG)
        die("kvs_array_free of a buffer of the kvsd gone: %s, expected KVS_EBADARG",
            kvs_err_name(rc));
    first_round(&buf);
    ok(kvs_array_free(kv, &buf), "array_free");
}

static void committed(void)
{
    kvs_key_t k = KVS_INT_KEY(1);
    float o[N];
    kvs_array_t out = f32(o, 2, 3), buf;
    void *addr;

    first_round(&buf);
    ok(kvs_commit(kv, 5), "commit");
    fill(buf.data, N, 10.0f * (rank + 1));
    ok(kvs_pushpull(kv, 1, &k, &buf, &out, 0), "pushpull after the commit");
    expect(o, N, 10.0f * nw * (nw + 1) / 2, "key 1 after the commit");
    addr = buf.data;
    fill(buf.data, N, 70.0f + rank);
    restarted(5);
    if (buf.data != addr)
        die("the buffer moved");
    expect(buf.data, N, 70.0f + rank, "the buffer's bytes after the restart");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull after the restore");
    expect(o, N, nw * (nw + 1) / 2.0f, "key 1 as committed");
    round_from(&buf, (float)(rank + 1));
    ok(kvs_array_free(kv, &buf), "array_free");
}

static void none(void)
{
    kvs_key_t k = KVS_INT_KEY(1);
    float o[N];
    kvs_array_t out = f32(o, 2, 3), buf;
    double t0, took;
    int rc;

    ok(kvs_set_option(kv, KVS_OPT_TIMEOUT_MS, 2000), "set_option");
    first_round(&buf);
    touch(rank ? "ready.1" : "ready.0");
    await("killed");
    t0 = now_s();
    rc = kvs_pull(kv, 1, &k, &out, 0);
    took = now_s() - t0;
    if (rc != KVS_ECLOSED)
        die("with no kvsd back: %s (%s), expected KVS_ECLOSED", kvs_err_name(rc),
            kvs_last_error(kv));
    if (took < 1.5 || took > 10)
        die("KVS_ECLOSED after %.1f s, expected about the handle's 2 s", took);
    if ((rc = kvs_barrier(kv)) != KVS_ECLOSED)
        die("the call after: %s, expected KVS_ECLOSED", kvs_err_name(rc));
}

int main(int argc, char **argv)
{
    scenario = argc > 1 ? argv[1] : "blocked";
    if (!(dir = getenv("KVS_TEST_DIR")))
        die("KVS_TEST_DIR is not set");
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "blocked") == 0)
        blocked();
    else if (strcmp(scenario, "idle") == 0)
        idle();
    else if (strcmp(scenario, "threads") == 0)
        threads();
    else if (strcmp(scenario, "geometry") == 0)
        geometry();
    else if (strcmp(scenario, "committed") == 0)
        committed();
    else if (strcmp(scenario, "none") == 0)
        none();
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
