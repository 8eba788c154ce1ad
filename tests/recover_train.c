/*
 * recover_train.c - a training job that survives its faults, for the kill
 * loop (tests/test_recover_loop.sh, bench/scripts/chaos): under
 * `kvsrun --restarts N`, each worker pushes gradients that are a function of
 * the step and its rank only, commits every K steps, and on KVS_ERESTART (or
 * as a replacement worker) resumes from the last commit. So the final values
 * are those of the same job run without a fault, bit for bit, however often
 * a worker or kvsd is killed: the gradients are small integers, whose sum is
 * exact in any order, and the rest is the optimizer's own deterministic
 * arithmetic on the restored state.
 *
 * usage: recover_train STEPS EVERY OUT [STEP_MS]
 *   STEPS    the steps to train (1..)
 *   EVERY    commit after every EVERY steps
 *   OUT      rank 0 writes every key's final value there (written whole,
 *            then renamed); each rank appends one line per step it ran to
 *            OUT.rankR, for the count of steps redone; each resume says
 *            its step on stderr ("recover_train rank R: resumed at step S")
 *   STEP_MS  milliseconds of "compute" per step (default 0)
 * KVS_TEST_STORE=dist_async runs the same in dist_async; KVS_TEST_LINGER_MS=N
 * has rank 0 (or KVS_TEST_LINGER_RANK) wait N ms before its final pull (once,
 * not after a restart).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvs.h>

#define NKEYS 3
static const int64_t rows[NKEYS] = { 1, 256, 300 };
static const int64_t cols[NKEYS] = { 1000, 256, 100 };
static const char *spec = "sgd lr=0.0625 momentum=0.5 wd=0.001";

static float *grad[NKEYS], *val[NKEYS];
static kvs_key_t keys[NKEYS];
static int restarts;

#include "recoverutil.h"

static void on_restart(void)
{
    restarts++;
}

/* A fresh job (or a roll back before the first commit): the keys' first
 * values and the optimizer. 0, or 1 for another roll back meanwhile. */
static int start(void)
{
    kvs_array_t a[NKEYS];

    for (int k = 0; k < NKEYS; k++) {
        for (size_t i = 0; i < count(k); i++)
            val[k][i] = (float)((int)(i % 13) - 6) * 0.25f;
        a[k] = arr(val[k], k);
    }
    if (check(kvs_init(kv, NKEYS, keys, a), "init"))
        return 1;
    return check(kvs_set_optimizer(kv, spec), "set_optimizer");
}

static void gradients(int64_t step)
{
    for (int k = 0; k < NKEYS; k++)
        for (size_t i = 0; i < count(k); i++)
            grad[k][i] = (float)((int)((step * 131 + rank * 17 + (int64_t)i * 7 + k) % 9) - 4);
}

/* Runs the steps after the last commit; 0 when all are done, 1 after a
 * roll back. */
static int train(int64_t steps, int64_t every, int step_ms, FILE *log)
{
    kvs_array_t in[NKEYS], out[NKEYS];
    int64_t from;

    if (check(kvs_resume_step(kv, &from), "resume_step"))
        return 1;
    if (from < 0 && start())
        return 1;
    if (from >= 0)
        fprintf(stderr, "recover_train rank %d: resumed at step %lld\n", rank, (long long)from);
    for (int k = 0; k < NKEYS; k++) {
        in[k] = arr(grad[k], k);
        out[k] = arr(val[k], k);
    }
    for (int64_t step = from + 1; step <= steps; step++) {
        gradients(step);
        if (check(kvs_pushpull(kv, NKEYS, keys, in, out, 0), "pushpull"))
            return 1;
        fprintf(log, "%lld\n", (long long)step);
        fflush(log);
        if (step_ms > 0)
            nanosleep(&(struct timespec){ step_ms / 1000, (long)(step_ms % 1000) * 1000000 },
                      NULL);
        if ((step % every == 0 || step == steps) && check(kvs_commit(kv, step), "commit"))
            return 1;
    }
    /* KVS_TEST_LINGER_MS: rank KVS_TEST_LINGER_RANK (0) waits before its
     * final pull, so that a fault may come once the other workers (another
     * host's) have ended. */
    if (rank == (getenv("KVS_TEST_LINGER_RANK") ? atoi(getenv("KVS_TEST_LINGER_RANK")) : 0)
        && getenv("KVS_TEST_LINGER_MS") && !restarts)
        nanosleep(&(struct timespec){ atoi(getenv("KVS_TEST_LINGER_MS")) / 1000,
                                      (long)(atoi(getenv("KVS_TEST_LINGER_MS")) % 1000) * 1000000 },
                  NULL);
    return check(kvs_pull(kv, NKEYS, keys, out, 0), "final pull");
}

static void write_values(const char *path)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "wb"))) {
        perror(tmp);
        _exit(1);
    }
    for (int k = 0; k < NKEYS; k++)
        fwrite(val[k], sizeof(float), count(k), f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        _exit(1);
    }
}

int main(int argc, char **argv)
{
    int64_t steps, every;
    int step_ms, rc;
    char logpath[4096];
    FILE *log;

    if (argc < 4 || (steps = atoll(argv[1])) < 1 || (every = atoll(argv[2])) < 1) {
        fprintf(stderr, "usage: recover_train STEPS EVERY OUT [STEP_MS]\n");
        return 2;
    }
    step_ms = argc > 4 ? atoi(argv[4]) : 0;
    rank = getenv("KVS_RANK") ? atoi(getenv("KVS_RANK")) : 0;
    snprintf(logpath, sizeof logpath, "%s.rank%d", argv[3], rank);
    if (!(log = fopen(logpath, "a"))) {
        perror(logpath);
        return 1;
    }
    for (int k = 0; k < NKEYS; k++) {
        keys[k] = (kvs_key_t){ .id = k };
        grad[k] = malloc(count(k) * sizeof(float));
        val[k] = malloc(count(k) * sizeof(float));
        if (!grad[k] || !val[k])
            return 1;
    }
    /* KVS_TEST_STORE=dist_async: the same job's pushes applied as they
     * come (values then depend on their order: not for bit comparisons). */
    if ((rc = kvs_create(getenv("KVS_TEST_STORE") ? getenv("KVS_TEST_STORE") : "dist_sync",
                         &kv)) != 0)
        die("create", rc);
    while (train(steps, every, step_ms, log))
        ;
    if (rank == 0)
        write_values(argv[3]);
    if (restarts)
        fprintf(stderr, "recover_train rank %d: resumed %d times\n", rank, restarts);
    kvs_close(kv);
    fclose(log);
    for (int k = 0; k < NKEYS; k++) {
        free(grad[k]);
        free(val[k]);
    }
    return 0;
}
