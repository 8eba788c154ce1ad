/*
 * launch_worker.c - one worker of a job that no kvsrun started, run by
 * test_launch.sh under the environment a launcher (torchrun, Open MPI,
 * Slurm) gives. argv[1] names the scenario:
 *   sums    its rank and count are KVS_TEST_RANK and KVS_TEST_NW; a few
 *           rounds of init, push and pull give the sums over the workers
 *   alone   the job's count is never reached: init fails with
 *           KVS_ETIMEDOUT within KVS_TEST_WITHIN seconds
 *   refused kvs_create fails with KVS_TEST_CODE (KVS_EBADARG unless
 *           set), its message holding KVS_TEST_MSG
 * Exits 0 when all is as expected, 1 with a message when not.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvs.h>

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "launch_worker: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

static int env_int(const char *name)
{
    const char *s = getenv(name);

    if (!s)
        die("not set", name);
    return atoi(s);
}

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void sums(kvs_t *kv)
{
    int rank = kvs_rank(kv), nw = kvs_num_workers(kv);
    float v[64], o[64], total = nw * (nw + 1) / 2.0f;
    kvs_key_t k = KVS_INT_KEY(3);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 64 } };
    kvs_array_t out = a;

    out.data = o;
    if (rank != env_int("KVS_TEST_RANK") || nw != env_int("KVS_TEST_NW")) {
        char msg[128];

        snprintf(msg, sizeof msg, "rank %d of %d, expected %d of %d", rank, nw,
                 env_int("KVS_TEST_RANK"), env_int("KVS_TEST_NW"));
        die("placed wrong", msg);
    }
    for (int i = 0; i < 64; i++)
        v[i] = (float)(rank * 100 + i);
    if (kvs_init(kv, 1, &k, &a) != 0)
        die("init", kvs_last_error(kv));
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < 64; i++)
            v[i] = (float)(rank + 1) * round;
        if (kvs_push(kv, 1, &k, &a, 0) != 0 || kvs_pull(kv, 1, &k, &out, 0) != 0)
            die("push or pull", kvs_last_error(kv));
        for (int i = 0; i < 64; i++)
            if (o[i] != total * round)
                die("wrong sum", kvs_last_error(kv));
    }
}

static void alone(kvs_t *kv)
{
    float v[4] = { 1, 2, 3, 4 };
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } };
    double t0 = now(), within = atof(getenv("KVS_TEST_WITHIN") ? getenv("KVS_TEST_WITHIN")
                                                                 : "30");
    int rc = kvs_init(kv, 1, &k, &a);

    /* kvsd's cause ("1 of 2 workers connected within"), or this call's
     * own deadline if it came first: the test reads kvsd's log. */
    if (rc != KVS_ETIMEDOUT)
        die(kvs_err_name(rc), kvs_last_error(kv));
    if (now() - t0 > within)
        die("the missing worker was given up on too late", kvs_last_error(kv));
}

int main(int argc, char **argv)
{
    kvs_t *kv = NULL;
    int rc;

    if (argc < 2)
        die("usage", "launch_worker sums|alone|refused");
    rc = kvs_create("dist_sync", &kv);
    if (strcmp(argv[1], "refused") == 0) {
        const char *want = getenv("KVS_TEST_MSG"), *code = getenv("KVS_TEST_CODE");

        if (strcmp(kvs_err_name(rc), code ? code : "KVS_EBADARG") != 0 || !want
            || !strstr(kvs_last_error(NULL), want))
            die(kvs_err_name(rc), kvs_last_error(NULL));
        return 0;
    }
    if (rc != 0)
        die("create", kvs_last_error(NULL));
    if (strcmp(argv[1], "sums") == 0)
        sums(kv);
    else if (strcmp(argv[1], "alone") == 0)
        alone(kv);
    else
        die("unknown scenario", argv[1]);
    kvs_close(kv);
    return 0;
}
