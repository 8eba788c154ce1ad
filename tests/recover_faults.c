/*
 * recover_faults.c - a worker of test_recover_faults.sh's jobs: under
 * `kvsrun --restarts N`, it trains STEPS steps in dist_sync or dist_async,
 * commits every EVERY steps, resumes from the last commit after
 * KVS_ERESTART (or as a replacement worker), and meets one fault on its
 * first life (KVS_RESTART_COUNT 0, or on every life with ":all").
 * The optimizer is sgd lr=1 without momentum and the gradients are small
 * integers, so a key's value is its first value minus the sum of every
 * push, exact in any order: in dist_async too the final values are known.
 * Rank 0 checks every key at the end and exits 3 when one is wrong.
 *
 * usage: recover_faults TYPE STEPS EVERY DIR [FAULT [BIG]]
 *   TYPE   dist_sync or dist_async
 *   DIR    where rank R writes DIR/paused.R (a "pause" fault) and each
 *          step's number into DIR/steps.R
 *   FAULT  none, or KIND:RANKS:POINT:STEP[:MS][:all], RANKS a comma list
 *          KIND  die    SIGKILL of itself
 *                stall  SIGSTOP of itself
 *                pause  DIR/paused.R made, then MS ms of sleep
 *          POINT step      before the step's pushpull
 *                commit    before the step's commit (the others wait in it)
 *                incommit  MS ms into its own kvs_commit (die only)
 *                after     after the step's commit returned
 *   BIG    the floats of one more key that is never pushed (default 0):
 *          a bigger snapshot, so that writing it takes longer
 * Prints "rank R life L: resume S" each time it (re)starts from step S
 * (-1: an empty store), "rank R life L: restart" at each KVS_ERESTART,
 * and rank 0 "values right" at the end.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvs.h>

#define NKEYS 3
static int64_t rows[NKEYS] = { 1, 64, 1 };
static int64_t cols[NKEYS] = { 1000, 64, 0 };
static const char *spec = "sgd lr=1";

static int life, nworkers, sync_mode;
static float *grad[NKEYS], *val[NKEYS];
static kvs_key_t keys[NKEYS];
static int nkeys = 2;
static const char *dir;

#include "recoverutil.h"

static void on_restart(void)
{
    printf("rank %d life %d: restart\n", rank, life);
    fflush(stdout);
}

static struct {
    char kind[8], point[12];
    int ranks[16], nranks;
    int64_t step;
    int ms, all, done;
} fault;

static float first(int k, size_t i)
{
    return (float)((int)((i + (size_t)k) % 13) - 6);
}

static float gradient(int64_t step, int r, int k, size_t i)
{
    return (float)((int)((step * 131 + r * 17 + (int64_t)i * 7 + k) % 9) - 4);
}

static void msleep(int ms)
{
    nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000 }, NULL);
}

static void *killer(void *arg)
{
    msleep(*(int *)arg);
    kill(getpid(), SIGKILL);
    return NULL;
}

/* The fault, when this rank meets it at this point of this step. */
static void maybe_fault(const char *point, int64_t step)
{
    int mine = 0;
    char path[4096];
    FILE *f;

    if (fault.done || !fault.kind[0] || step != fault.step || strcmp(point, fault.point) != 0
        || (life > 0 && !fault.all))
        return;
    for (int i = 0; i < fault.nranks; i++)
        mine |= fault.ranks[i] == rank;
    if (!mine)
        return;
    fault.done = 1;
    if (strcmp(fault.kind, "die") == 0 && strcmp(point, "incommit") == 0) {
        static pthread_t t;

        pthread_create(&t, NULL, killer, &fault.ms);
    } else if (strcmp(fault.kind, "die") == 0) {
        kill(getpid(), SIGKILL);
    } else if (strcmp(fault.kind, "stall") == 0) {
        raise(SIGSTOP);
    } else if (strcmp(fault.kind, "pause") == 0) {
        snprintf(path, sizeof path, "%s/paused.%d", dir, rank);
        if ((f = fopen(path, "w")))
            fclose(f);
        msleep(fault.ms);
    }
}

static int start(void)
{
    kvs_array_t a[NKEYS];

    for (int k = 0; k < nkeys; k++) {
        for (size_t i = 0; i < count(k); i++)
            val[k][i] = first(k, i);
        a[k] = arr(val[k], k);
    }
    if (check(kvs_init(kv, nkeys, keys, a), "init"))
        return 1;
    return check(kvs_set_optimizer(kv, spec), "set_optimizer");
}

/* Runs the steps after the last commit; 0 when all are done, 1 after a
 * roll back. */
static int train(int64_t steps, int64_t every, FILE *log)
{
    kvs_array_t in[2], out[NKEYS];
    int64_t from;

    if (check(kvs_resume_step(kv, &from), "resume_step"))
        return 1;
    printf("rank %d life %d: resume %lld\n", rank, life, (long long)from);
    fflush(stdout);
    if (from < 0) {                    /* a fresh store: step 1 is the first */
        if (start())
            return 1;
        from = 0;
    }
    for (int k = 0; k < nkeys; k++) {
        if (k < 2)
            in[k] = arr(grad[k], k);
        out[k] = arr(val[k], k);
    }
    for (int64_t step = from + 1; step <= steps; step++) {
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < count(k); i++)
                grad[k][i] = gradient(step, rank, k, i);
        maybe_fault("step", step);
        if (sync_mode) {
            if (check(kvs_pushpull(kv, 2, keys, in, out, 0), "pushpull"))
                return 1;
        } else if (check(kvs_push(kv, 2, keys, in, 0), "push")
                   || check(kvs_pull(kv, 2, keys, out, 0), "pull")) {
            return 1;
        }
        fprintf(log, "%lld\n", (long long)step);
        fflush(log);
        if (step % every == 0 || step == steps) {
            maybe_fault("commit", step);
            maybe_fault("incommit", step);
            if (check(kvs_commit(kv, step), "commit"))
                return 1;
            maybe_fault("after", step);
        }
    }
    return check(kvs_pull(kv, nkeys, keys, out, 0), "final pull");
}

/* 0 when every key holds its first value minus every push of every step. */
static int values_right(int64_t steps)
{
    int bad = 0;

    for (int k = 0; k < nkeys; k++)
        for (size_t i = 0; i < count(k); i++) {
            float want = first(k, i);

            if (k < 2)
                for (int64_t s = 1; s <= steps; s++)
                    for (int r = 0; r < nworkers; r++)
                        want -= gradient(s, r, k, i);
            if (val[k][i] != want && bad++ < 5)
                fprintf(stderr, "recover_faults: key %d [%zu] is %g, not %g\n", k, i,
                        (double)val[k][i], (double)want);
        }
    return bad;
}

static int parse_fault(const char *s)
{
    char buf[256], *p, *save = NULL, *field[6];
    int n = 0;

    if (strcmp(s, "none") == 0)
        return 0;
    snprintf(buf, sizeof buf, "%s", s);
    for (p = strtok_r(buf, ":", &save); p && n < 6; p = strtok_r(NULL, ":", &save))
        field[n++] = p;
    if (n < 4)
        return -1;
    snprintf(fault.kind, sizeof fault.kind, "%s", field[0]);
    snprintf(fault.point, sizeof fault.point, "%s", field[2]);
    fault.step = atoll(field[3]);
    for (int i = 4; i < n; i++) {
        if (strcmp(field[i], "all") == 0)
            fault.all = 1;
        else
            fault.ms = atoi(field[i]);
    }
    for (p = strtok_r(field[1], ",", &save); p && fault.nranks < 16; p = strtok_r(NULL, ",", &save))
        fault.ranks[fault.nranks++] = atoi(p);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t steps, every;
    char logpath[4096];
    FILE *log;
    int rc;

    if (argc < 5 || (steps = atoll(argv[2])) < 1 || (every = atoll(argv[3])) < 1
        || (argc > 5 && parse_fault(argv[5]) != 0)) {
        fprintf(stderr, "usage: recover_faults TYPE STEPS EVERY DIR [FAULT [BIG]]\n");
        return 2;
    }
    sync_mode = strcmp(argv[1], "dist_sync") == 0;
    dir = argv[4];
    if (argc > 6 && (cols[2] = atoll(argv[6])) > 0)
        nkeys = 3;
    rank = getenv("KVS_RANK") ? atoi(getenv("KVS_RANK")) : 0;
    life = getenv("KVS_RESTART_COUNT") ? atoi(getenv("KVS_RESTART_COUNT")) : 0;
    nworkers = getenv("KVS_NUM_WORKERS") ? atoi(getenv("KVS_NUM_WORKERS")) : 1;
    snprintf(logpath, sizeof logpath, "%s/steps.%d", dir, rank);
    if (!(log = fopen(logpath, "a"))) {
        perror(logpath);
        return 1;
    }
    for (int k = 0; k < nkeys; k++) {
        keys[k] = (kvs_key_t){ .id = k };
        grad[k] = malloc(count(k) * sizeof(float));
        val[k] = malloc(count(k) * sizeof(float));
        if (!grad[k] || !val[k])
            return 1;
    }
    if ((rc = kvs_create(argv[1], &kv)) != 0)
        die("create", rc);
    while (train(steps, every, log))
        ;
    rc = 0;
    if (rank == 0) {
        if ((rc = values_right(steps)) != 0)
            rc = 3;
        else
            printf("values right\n");
    }
    kvs_close(kv);
    fclose(log);
    for (int k = 0; k < nkeys; k++) {
        free(grad[k]);
        free(val[k]);
    }
    return rc;
}
