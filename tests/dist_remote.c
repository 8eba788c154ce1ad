/*
 * dist_remote.c - one worker of a test_dist_remote.sh job whose pushpulls
 * kvsd reads straight out of the worker's memory (KVS_REMOTE). argv[1]
 * names the scenario: "remote" (every value checked, and with
 * KVS_TEST_KVSCTL what kvsctl stats counts) or "remote_gone" (an array
 * unmapped while lent fails the job, naming its rank). KVS_TEST_NODUMP=1
 * makes the process not dumpable before kvs_create, which keeps kvsd from
 * reading it. Exits 0 when everything is right, 1 with a message when not.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <kvs.h>

#include "distutil.h"

/* Pushpulls of ordinary arrays big enough for kvsd to read them out of
 * this process's memory (KVS_REMOTE), for a key alone and in a list of
 * tables mixing big arrays with one too small to be read so; in place and
 * into outs; then under sgd. Every value is checked. When
 * KVS_TEST_KVSCTL is set, rank 0 checks at the end that `kvsctl stats`
 * counts KVS_TEST_READERS workers kvsd reads, and remote pushes when
 * there are any. KVS_TEST_NODUMP=1: the process is not dumpable (set
 * before kvs_create), which keeps kvsd from reading it. */
static void remote(void)
{
    enum { NK = 20, BIG = 1 << 18, ONE = 1 << 21 };
    size_t n[NK + 1];
    kvs_key_t keys[NK + 1], one = KVS_INT_KEY(200), wk = KVS_INT_KEY(201);
    kvs_array_t vals[NK + 1], outs[NK + 1], a1, o1;
    float *v[NK + 1], *o[NK + 1], *x = malloc(ONE * sizeof *x), *y = malloc(ONE * sizeof *y);
    float total = nw * (nw + 1) / 2.0f, w = 1.0f;
    const char *ctl = getenv("KVS_TEST_KVSCTL");

    for (int i = 0; i <= NK; i++) {
        n[i] = i == NK ? 100 : BIG + (size_t)i;   /* the last: 400 bytes, always copied */
        keys[i] = KVS_INT_KEY(100 + i);
        v[i] = malloc(n[i] * sizeof *v[i]);
        o[i] = malloc(n[i] * sizeof *o[i]);
        if (!v[i] || !o[i])
            die("out of memory");
        fill(v[i], n[i], 0);
        vals[i] = f32(v[i], 1, (int64_t)n[i]);
        outs[i] = f32(o[i], 1, (int64_t)n[i]);
    }
    if (!x || !y)
        die("out of memory");
    fill(x, ONE, 0);
    a1 = f32(x, 2, ONE / 2);
    o1 = f32(y, 2, ONE / 2);
    ok(kvs_init(kv, NK + 1, keys, vals), "init");
    ok(kvs_init(kv, 1, &one, &a1), "init one");
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i <= NK; i++)
            for (size_t j = 0; j < n[i]; j++)
                v[i][j] = (float)((rank + 1) * round) + (float)(j % 7);
        for (size_t j = 0; j < ONE; j++)
            x[j] = (float)(rank + 1) + (float)(j % 5);
        ok(kvs_pushpull(kv, NK + 1, keys, vals, outs, 0), "pushpull (list)");
        ok(kvs_pushpull(kv, 1, &one, &a1, NULL, 0), "pushpull (in place)");
        for (int i = 0; i <= NK; i++)
            for (size_t j = 0; j < n[i]; j++)
                if (o[i][j] != total * (float)round + (float)nw * (float)(j % 7))
                    die("round %d, key %d, element %zu: %g", round, 100 + i, j,
                        (double)o[i][j]);
        for (size_t j = 0; j < ONE; j++)
            if (x[j] != total + (float)nw * (float)(j % 5))
                die("round %d, key 200, element %zu: %g", round, j, (double)x[j]);
    }
    /* Under sgd: w -= 0.5 * (sum of gradients), each worker pushing 1. */
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0)
        ok(kvs_set_optimizer(kv, "sgd lr=0.5"), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    fill(y, ONE, 1);
    ok(kvs_init(kv, 1, &wk, &o1), "init w");
    for (int round = 0; round < 2; round++) {
        fill(y, ONE, 1);
        ok(kvs_pushpull(kv, 1, &wk, &o1, NULL, 0), "pushpull (sgd)");
        w -= 0.5f * (float)nw;
        expect(y, ONE, w, "w under sgd");
    }
    ok(kvs_barrier(kv), "barrier");
    if (ctl && rank == 0) {
        char cmd[512], line[256];
        long readers = -1, want = strtol(getenv("KVS_TEST_READERS"), NULL, 10);
        unsigned long long pushes = 0, combined = 0;
        size_t cbkeys = 0;
        int want_cb = getenv("KVS_TEST_COMBINED") != NULL;
        FILE *f;

        snprintf(cmd, sizeof cmd, "%s -j %s stats", ctl, getenv("KVS_JOB"));
        if (!(f = popen(cmd, "r")))
            die("popen %s", cmd);
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "remote pushes: %llu (workers whose memory kvsd reads: %ld)",
                       &pushes, &readers) != 2)
                sscanf(line, "combined rounds: %llu (keys the workers combine: %zu)", &combined,
                       &cbkeys);
        if (pclose(f) != 0 || readers != want || (want > 0) != (pushes > 0))
            die("kvsctl stats: %llu remote pushes, %ld workers read, expected %ld workers",
                pushes, readers, want);
        /* KVS_COMBINE=1: the list's small key, 3 rounds; the big keys go
         * through kvsd. */
        if (want_cb ? combined != 3 || cbkeys != 1 : combined != 0 || cbkeys != 0)
            die("kvsctl stats: %llu combined rounds of %zu keys", combined, cbkeys);
        /* Per round: every worker's list (20 big keys) and its one key. */
        if (want == nw && pushes != (unsigned long long)(nw * (NK + 1) * 3 + nw * 2))
            die("kvsctl stats: %llu remote pushes, expected %d", pushes,
                nw * (NK + 1) * 3 + nw * 2);
    }
    ok(kvs_barrier(kv), "barrier");
    for (int i = 0; i <= NK; i++) {
        free(v[i]);
        free(o[i]);
    }
    free(x);
    free(y);
}

static void *unmap_later(void *p)
{
    usleep(300000);
    munmap(p, (size_t)8 << 20);
    return NULL;
}

/* Rank 0 lends kvsd an array of its memory (a pushpull of 8 MiB) and
 * unmaps it while the round waits for rank 1: kvsd cannot read it when the
 * round closes, evicts rank 0 (whose link then closes, as for any evicted
 * worker) and fails the job: rank 1's call says why. */
static void remote_gone(void)
{
    enum { N = 2 << 20 };
    kvs_key_t k = KVS_INT_KEY(300);
    float *v = mmap(NULL, N * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    kvs_array_t a = f32(v, 1, N);
    pthread_t t;
    int rc;

    if (v == MAP_FAILED)
        die("mmap");
    fill(v, N, 1);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0 && pthread_create(&t, NULL, unmap_later, v) != 0)
        die("pthread_create");
    if (rank != 0)
        usleep(1000000);
    rc = kvs_pushpull(kv, 1, &k, &a, rank == 0 ? NULL : &a, 0);
    if (rank == 0 ? rc != KVS_ECLOSED && rc != KVS_EPEERDEAD
                  : rc != KVS_EPEERDEAD || !strstr(kvs_last_error(kv), "rank 0 (pid")
                        || !strstr(kvs_last_error(kv), "could not read a push"))
        die("pushpull: %s (%s)", kvs_err_name(rc), kvs_last_error(kv));
    if (rank == 0)
        pthread_join(t, NULL);
    else
        munmap(v, N * sizeof *v);
}

int main(int argc, char **argv)
{
    scenario = argc > 1 ? argv[1] : "remote";
    if (getenv("KVS_TEST_NODUMP") && strcmp(getenv("KVS_TEST_NODUMP"), "1") == 0)
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "remote") == 0)
        remote();
    else if (strcmp(scenario, "remote_gone") == 0)
        remote_gone();
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
