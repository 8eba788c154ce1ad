/*
 * dist_worker_jobs.c - the test jobs' worker's scenarios of the job's life
 * rather than its values (one program with dist_worker.c, whose main runs
 * them): a peer, kvsd or a host killed or stopped while the workers wait,
 * a round past its deadline, pushes past the staging area and keys past
 * the arena, and jobs held in a known state for kvsctl (hold), kvsctl top
 * (busy) and the timeline (straggler).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvs.h>

#include "dist_worker.h"

/* The last rank is killed mid-job: the others' round fails with
 * KVS_EPEERDEAD within 2 s, and so does every later call. */
void peer_dies(void)
{
    float v[2] = { 1, 1 };
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 2 } };
    double t0;
    int rc;

    ok(kvs_init(kv, 1, &k, &a), "init");
    if (rank == nw - 1) {
        usleep(300 * 1000);
        raise(SIGKILL);
    }
    /* The push returns once taken; the pull waits for the round the dead
     * peer never joins. */
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    t0 = now();
    rc = kvs_pull(kv, 1, &k, &a, 0);
    if (rc != KVS_EPEERDEAD)
        die("pull with a dead peer: %s, expected KVS_EPEERDEAD", kvs_err_name(rc));
    /* doc/dist.md: "within 2 s" of the death, which came after t0. */
    if (now() - t0 > 2.0)
        die("the dead peer was noticed after %.2f s, expected at most 2 s", now() - t0);
    if ((rc = kvs_barrier(kv)) != KVS_EPEERDEAD)
        die("later call: %s, expected KVS_EPEERDEAD", kvs_err_name(rc));
}


/* Something this worker's job depends on is killed (or stopped) by the
 * test script while this loops on barriers: the script writes the time
 * it did so, in ms since the epoch, to $KVS_TEST_DIR/killed. Rank R
 * writes $KVS_TEST_DIR/ready.R first. Returns the failing call's code
 * once the loop fails (60 s at most), and checks that it failed within
 * $KVS_TEST_WITHIN seconds of the kill. */
static int barrier_until_killed(void)
{
    float v[2] = { 1, 1 };
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 2 } };
    const char *dir = getenv("KVS_TEST_DIR"), *within = getenv("KVS_TEST_WITHIN");
    struct timespec ts;
    char path[512];
    double t0, ms, killed = 0;
    FILE *f;
    int rc = 0;

    if (!dir || !within)
        die("KVS_TEST_DIR and KVS_TEST_WITHIN must be set");
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_barrier(kv), "barrier");
    snprintf(path, sizeof path, "%s/ready.%d", dir, rank);
    if (!(f = fopen(path, "w")))
        die("cannot write %s", path);
    fclose(f);
    t0 = now();
    while (now() - t0 < 60 && (rc = kvs_barrier(kv)) == 0)
        usleep(10 * 1000);
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    snprintf(path, sizeof path, "%s/killed", dir);
    if ((f = fopen(path, "r"))) {
        if (fscanf(f, "%lf", &killed) != 1)
            killed = 0;
        fclose(f);
    }
    if (rc == 0)
        die("every barrier succeeded for 60 s: nothing was killed");
    if (killed <= 0 || ms - killed > atof(within) * 1e3)
        die("the failure (%s) came %.0f ms after the kill, expected at most %s s (%s)",
            kvs_err_name(rc), killed > 0 ? ms - killed : -1.0, within, kvs_last_error(kv));
    return rc;
}

/* kvsd is killed: the next call fails with KVS_ECLOSED within
 * $KVS_TEST_WITHIN seconds (doc/dist.md: 2 s). */
void daemon_dies(void)
{
    int rc = barrier_until_killed();

    if (rc != KVS_ECLOSED)
        die("with kvsd gone: %s, expected KVS_ECLOSED", kvs_err_name(rc));
}

/* Across hosts: another host's kvsd is killed or stopped. The loop fails
 * with KVS_EPEERDEAD naming the host, or KVS_ECLOSED on the host whose
 * kvsd it was. */
void host_dies(void)
{
    int rc = barrier_until_killed();

    if (rc != KVS_EPEERDEAD && rc != KVS_ECLOSED)
        die("with a host gone: %s, expected KVS_EPEERDEAD or KVS_ECLOSED", kvs_err_name(rc));
    if (rc == KVS_EPEERDEAD && !strstr(kvs_last_error(kv), "host "))
        die("the error does not name the host: '%s'", kvs_last_error(kv));
}

/* Holds a known job still while test_kvsctl.sh looks at it: int keys 1
 * (float32 (2,3)) and 2 (int32 (4,)), three sync rounds pushed to key 1
 * and one pull of it, a barrier; then rank 0 writes $KVS_TEST_DIR/held and
 * every rank waits for $KVS_TEST_DIR/release (30 s at most). With
 * $KVS_TEST_EXPECT_CLOSED set, kvsd has been stopped meanwhile: the next
 * call must fail with KVS_ECLOSED. */
void hold(void)
{
    const char *dir = getenv("KVS_TEST_DIR");
    float v[6], o[6];
    int32_t iv[4] = { 0 };
    kvs_key_t keys[2] = { KVS_INT_KEY(1), KVS_INT_KEY(2) };
    kvs_array_t vals[2] = { f32(v, 2, 3),
                            { .data = iv, .dtype = KVS_INT32, .ndim = 1, .shape = { 4 } } };
    kvs_array_t out = f32(o, 2, 3);
    char path[512];
    double t0;
    int rc;

    if (!dir)
        die("KVS_TEST_DIR is not set");
    fill(v, 6, 0);
    ok(kvs_init(kv, 2, keys, vals), "init");
    for (int round = 0; round < 3; round++) {
        fill(v, 6, (float)(rank + 1));
        ok(kvs_push(kv, 1, &keys[0], &vals[0], 0), "push");
    }
    ok(kvs_pull(kv, 1, &keys[0], &out, 0), "pull");
    expect(o, 6, nw * (nw + 1) / 2.0f, "key 1 after three rounds");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0) {
        FILE *f;

        snprintf(path, sizeof path, "%s/held", dir);
        if (!(f = fopen(path, "w")) || fclose(f) != 0)
            die("cannot write %s", path);
    }
    snprintf(path, sizeof path, "%s/release", dir);
    t0 = now();
    while (access(path, F_OK) != 0) {
        if (now() - t0 > 30)
            die("%s did not appear within 30 s", path);
        usleep(10 * 1000);
    }
    if (getenv("KVS_TEST_EXPECT_CLOSED")) {
        if ((rc = kvs_barrier(kv)) != KVS_ECLOSED)
            die("with kvsd stopped: %s, expected KVS_ECLOSED", kvs_err_name(rc));
    }
}

/* A job kept busy for kvsctl top (test_top.sh): string keys "small"
 * (float32 (2,3): the workers combine its rounds, by default) and
 * "big \"one\"\t2" (float32, 128 Ki values: 512 KiB, above the combine
 * bound: kvsd runs its rounds), pushed in one call and pulled in another,
 * round after round, each pull checked, until $KVS_TEST_DIR/release
 * appears ($KVS_TEST_BUSY_S seconds at most, 60 unless set). Rank
 * $KVS_TEST_SLOW_RANK sleeps $KVS_TEST_SLOW_MS ms (50 unless set) before
 * each round, so the others wait for it. Rank 0 writes $KVS_TEST_DIR/busy
 * after the first round.
 * The ranks stop after the same round: each looks for the file on its
 * own, at its own time, so a rank that saw it and left would leave the
 * others in a round that closes without it (wrong sums). The last value
 * of "small" carries the votes instead: each rank adds VOTE when it has
 * seen the file, and every rank stops after the round whose sum has one. */
void busy(void)
{
    enum { BIG = 128 << 10 };
    const float VOTE = 1000;
    const char *dir = getenv("KVS_TEST_DIR"), *slow = getenv("KVS_TEST_SLOW_RANK"),
               *ms = getenv("KVS_TEST_SLOW_MS"), *max_s = getenv("KVS_TEST_BUSY_S");
    float small[6], *big = malloc(BIG * sizeof *big);
    kvs_key_t keys[2] = { KVS_STR_KEY("small"), KVS_STR_KEY("big \"one\"\t2") };
    kvs_array_t vals[2] = { f32(small, 2, 3), f32(big, 1, BIG) };
    useconds_t nap = (useconds_t)(ms ? atoi(ms) : 50) * 1000;
    double limit = max_s && atoi(max_s) > 0 ? atoi(max_s) : 60;
    float sum = nw * (nw + 1) / 2.0f, votes = 0;
    char path[512];
    double t0 = now();

    if (!dir || !big)
        die(!dir ? "KVS_TEST_DIR is not set" : "out of memory");
    fill(small, 6, 0);
    fill(big, BIG, 0);
    ok(kvs_init(kv, 2, keys, vals), "init");
    snprintf(path, sizeof path, "%s/release", dir);
    for (int round = 0; votes == 0; round++) {
        int seen = access(path, F_OK) == 0;

        if (!seen && now() - t0 > limit)
            die("%s did not appear within %g s", path, limit);
        if (slow && atoi(slow) == rank)
            usleep(nap);
        fill(small, 6, (float)(rank + 1));
        small[5] += seen ? VOTE : 0;
        fill(big, BIG, (float)(rank + 1));
        ok(kvs_push(kv, 2, keys, vals, 0), "push");
        ok(kvs_pull(kv, 2, keys, vals, 0), "pull");
        expect(small, 5, sum, "small");
        votes = roundf((small[5] - sum) / VOTE);
        if (votes < 0 || votes > nw || fabsf(small[5] - sum - votes * VOTE) > 1e-3f)
            die("small: element 5 is %g, expected %g and a vote of up to %d ranks", small[5],
                sum, nw);
        expect(big, BIG, sum, "big");
        if (round == 0 && rank == 0) {
            char busy_path[512];
            FILE *f;

            snprintf(busy_path, sizeof busy_path, "%s/busy", dir);
            if (!(f = fopen(busy_path, "w")) || fclose(f) != 0)
                die("cannot write %s", busy_path);
        }
    }
    free(big);
}

/* kvsd is stopped (kvsctl stop) while rank 0 waits in a sync round rank 1
 * never pushes to, and rank 1 in a barrier rank 0 never reaches: both
 * calls must fail with KVS_ECLOSED. Rank 1 writes $KVS_TEST_DIR/waiting a
 * second after the barrier, time enough for rank 0's push to be in kvsd. */
void stop_waits(void)
{
    const char *dir = getenv("KVS_TEST_DIR");
    float v[6];
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = f32(v, 2, 3);
    char path[512];
    FILE *f;
    int rc;

    if (!dir)
        die("KVS_TEST_DIR is not set");
    fill(v, 6, 1);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0) {
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
        if ((rc = kvs_pull(kv, 1, &k, &a, 0)) != KVS_ECLOSED)
            die("pull while kvsd stops: %s, expected KVS_ECLOSED", kvs_err_name(rc));
        return;
    }
    usleep(1000 * 1000);
    snprintf(path, sizeof path, "%s/waiting", dir);
    if (!(f = fopen(path, "w")) || fclose(f) != 0)
        die("cannot write %s", path);
    if ((rc = kvs_barrier(kv)) != KVS_ECLOSED)
        die("barrier while kvsd stops: %s, expected KVS_ECLOSED", kvs_err_name(rc));
}

/* Rank 0 pushes more than its staging area holds (5 keys of 64 MiB, 256
 * MiB of staging) before the other ranks push anything: kvsd reads pushes
 * from staging until their rounds close, so rank 0 runs out of room and
 * has kvsd copy what it holds, instead of waiting for the others. Then
 * every rank pushes in the reverse order and pulls the sums. */
void spill(void)
{
    enum { NK = 5 };
    const int64_t n = 16 << 20;        /* floats: 64 MiB */
    float *v = malloc((size_t)n * sizeof *v), *o = malloc((size_t)n * sizeof *o);
    kvs_key_t k[NK];
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { n } }, out = a;
    float total = nw * (nw + 1) / 2.0f;

    if (!v || !o)
        die("out of memory");
    out.data = o;
    fill(v, (size_t)n, 0);
    for (int i = 0; i < NK; i++) {
        k[i] = KVS_INT_KEY(i + 1);
        ok(kvs_init(kv, 1, &k[i], &a), "init");
    }
    if (rank != 0)
        usleep(500 * 1000);            /* rank 0's pushes wait in open rounds */
    for (int i = 0; i < NK; i++) {
        int j = rank == 0 ? i : NK - 1 - i;

        fill(v, (size_t)n, (float)(rank + 1 + j));
        ok(kvs_push(kv, 1, &k[j], &a, 0), "push");
    }
    for (int i = 0; i < NK; i++) {
        ok(kvs_pull(kv, 1, &k[i], &out, 0), "pull");
        expect(o, (size_t)n, total + (float)(nw * i), "sum after a spill");
    }
    free(v);
    free(o);
}

/* A store bigger than the 4 GiB kvsd once capped its arena at: 25 keys of
 * 200 MB (5 GB), with kvsd's default flags; the first and last key are
 * pulled back and checked. */
void arena_big(void)
{
    enum { NK = 25 };
    const int64_t n = 50 << 20;        /* floats: 200 MiB */
    float *v = malloc((size_t)n * sizeof *v);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { n } };

    if (!v)
        die("out of memory");
    for (int i = 0; i < NK; i++) {
        kvs_key_t k = KVS_INT_KEY(i);

        v[0] = v[n - 1] = (float)i;
        ok(kvs_init(kv, 1, &k, &a), "init");
    }
    for (int i = 0; i < NK; i += NK - 1) {
        kvs_key_t k = KVS_INT_KEY(i);

        v[0] = v[n - 1] = -1;
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        if (v[0] != (float)i || v[n - 1] != (float)i)
            die("key %d: pulled %g .. %g", i, v[0], v[n - 1]);
    }
    free(v);
}

/* kvsd started with --arena 100M: a second key of 64 MiB does not fit,
 * and the error says that the arena is full and how to make it bigger. */
void arena_full(void)
{
    const int64_t n = 16 << 20;        /* floats: 64 MiB */
    float *v = calloc((size_t)n, sizeof *v);
    kvs_key_t k[2] = { KVS_INT_KEY(1), KVS_INT_KEY(2) };
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { n } };
    int rc;

    if (!v)
        die("out of memory");
    ok(kvs_init(kv, 1, &k[0], &a), "init");
    rc = kvs_init(kv, 1, &k[1], &a);
    if (rc != -ENOMEM || !strstr(kvs_last_error(kv), "arena is full")
        || !strstr(kvs_last_error(kv), "--arena"))
        die("init past the arena: %s (%s)", kvs_err_name(rc), kvs_last_error(kv));
    if ((rc = kvs_pull(kv, 1, &k[1], &a, 0)) != KVS_ENOKEY)
        die("a key that did not fit: %s, want KVS_ENOKEY", kvs_err_name(rc));
    ok(kvs_pull(kv, 1, &k[0], &a, 0), "the key that fit");
    free(v);
}

/* Rank 0 gives up waiting (a 1 s deadline) for a round rank 2 never
 * pushes to: its error says what it waited for (the call, the key, the
 * round, the missing rank), and the others get that cause, not a bare
 * "rank 0 died". */
void timeout_says(void)
{
    float v[2] = { 1, 1 };
    kvs_key_t k = KVS_INT_KEY(7);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 2 } };
    const char *msg;
    int rc;

    if (nw != 3)
        die("needs 3 workers");
    ok(kvs_init(kv, 1, &k, &a), "init");
    if (rank == 0) {
        ok(kvs_set_option(kv, KVS_OPT_TIMEOUT_MS, 1000), "timeout");
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
        rc = kvs_pull(kv, 1, &k, &a, 0);
        msg = kvs_last_error(kv);
        if (rc != KVS_ETIMEDOUT || !strstr(msg, "kvs_pull") || !strstr(msg, "key 7")
            || !strstr(msg, "round 1") || !strstr(msg, "rank 2") || strstr(msg, "rank 1"))
            die("pull past the deadline: %s (%s)", kvs_err_name(rc), msg);
        return;
    }
    if (rank == 1) {
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
        rc = kvs_pull(kv, 1, &k, &a, 0);
    } else {
        rc = kvs_barrier(kv);
    }
    msg = kvs_last_error(kv);
    if (rc != KVS_ETIMEDOUT || !strstr(msg, "rank 0 gave up") || !strstr(msg, "key 7"))
        die("after rank 0 gave up: %s (%s)", kvs_err_name(rc), msg);
}

/* Rounds of two string keys pushed as one list, then pulled; the last
 * rank sleeps STRAGGLER_MS (default 40) before each push, so that the
 * others wait for it in every round (test_timeline.sh reads the waits
 * off the job's timeline). */
void straggler(void)
{
    const char *ms = getenv("STRAGGLER_MS");
    int sleep_ms = ms && *ms ? atoi(ms) : 40;
    float w[1024], b[16], ow[1024], ob[16];
    kvs_key_t keys[2] = { KVS_STR_KEY("layer1.weight"), KVS_STR_KEY("layer1.bias") };
    kvs_array_t vals[2] = { f32(w, 1, 1024), f32(b, 1, 16) };
    kvs_array_t outs[2] = { f32(ow, 1, 1024), f32(ob, 1, 16) };

    fill(w, 1024, 0);
    fill(b, 16, 0);
    ok(kvs_init(kv, 2, keys, vals), "init");
    for (int round = 1; round <= 8; round++) {
        fill(w, 1024, (float)(rank + 1));
        fill(b, 16, (float)round);
        if (rank == nw - 1)
            usleep((useconds_t)sleep_ms * 1000);
        ok(kvs_push(kv, 2, keys, vals, 0), "push");
        ok(kvs_pull(kv, 2, keys, outs, 0), "pull");
        expect(ow, 1024, nw * (nw + 1) / 2.0f, "layer1.weight");
        expect(ob, 16, (float)(nw * round), "layer1.bias");
    }
}
