/*
 * bench_recover.c - what recovery costs a job of 2 workers (scripts/bench's
 * recover step runs it under `kvsrun -n 2 --restarts 1 [--checkpoint DIR]`):
 * the workers' wait in kvs_commit of a store of --bytes, the rounds right
 * after a commit (when a checkpoint's disk write runs) against the others,
 * and the time from a death to the job's next successful round: of a
 * worker (rank 1 kills itself after a commit; the round needs its
 * replacement) and of kvsd (rank 0 kills it). That round is of a small key,
 * after every worker has pulled its weights back, as a program resuming
 * does: the time is the roll back's, not that of a round of the store.
 *
 * usage: bench_recover --mark FILE [--bytes SIZE] [--commits N] [--compute S]
 *   --mark FILE   where rank 1 leaves the time of its death for rank 0
 *   --bytes SIZE  the store's values, in keys of 64 MiB at most (default 1G)
 *   --commits N   commits timed (default 5)
 *   --compute S   seconds each worker spends after each timed commit
 *                 before the next step's push, as a training step's
 *                 compute would (default 0: none)
 * Rank 0 prints "name seconds" lines: commit_wait (median), round (median
 * of the rounds not after a commit), round_after_commit (median),
 * recover_worker, recover_kvsd.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "kvsd_pid.h"

#define KEY_MAX ((size_t)64 << 20)

#define TICK 1024                      /* floats of the key a recovery is timed by */

static kvs_t *kv;
static kvs_key_t tick_key;
static kvs_array_t tick_arr;
static float *tick;
static int rank, nkeys;
static kvs_key_t *keys;
static kvs_array_t *arrs;

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The values a fresh job inits its keys with. */
static void fill(void)
{
    for (int k = 0; k < nkeys; k++) {
        float *p = arrs[k].data;

        for (int64_t i = 0; i < arrs[k].shape[0]; i++)
            p[i] = 0.001f * (float)(i % 1000);
    }
}

/* 1 after KVS_ERESTART (the caller resumes); any other failure ends it. */
static int restarted(int rc, const char *what)
{
    if (rc == KVS_ERESTART)
        return 1;
    check_kvs(rc, kv, what);
    return 0;
}

static void put_mark(const char *path, double t)
{
    char tmp[4200];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w")) || fprintf(f, "%.9f\n", t) < 0 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write %s\n", bench_who, path);
        exit(1);
    }
}

static double get_mark(const char *path)
{
    double t = 0;
    FILE *f = fopen(path, "r");

    if (!f || fscanf(f, "%lf", &t) != 1) {
        fprintf(stderr, "%s: no mark in %s\n", bench_who, path);
        exit(1);
    }
    fclose(f);
    return t;
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)1 << 30;
    long commits = 5;
    double compute = 0;
    const char *mark = NULL, *v;
    double *wait, *round, *after, fault = 0, rec_worker = -1, rec_kvsd = -1;
    long nwait = 0, nround = 0, nafter = 0;
    int kvsd_killed = 0;
    int replacement = getenv("KVS_RESTART_COUNT") && atoi(getenv("KVS_RESTART_COUNT")) > 0;
    int resumed = replacement;         /* the next round is the first after a roll back */

    rank = getenv("KVS_RANK") ? atoi(getenv("KVS_RANK")) : 0;
    bench_who = rank ? "bench_recover rank 1" : "bench_recover rank 0";
    for (int i = 1; i < argc; i++) {
        if ((v = opt_value(argc, argv, &i, "--mark", rank == 0)) != NULL)
            mark = v;
        else if ((v = opt_value(argc, argv, &i, "--bytes", rank == 0)) != NULL) {
            if (parse_size(v, &bytes) != 0 || bytes < 4096) {
                fprintf(stderr, "%s: bad --bytes '%s'\n", bench_who, v);
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--commits", rank == 0)) != NULL) {
            commits = atol(v);
            if (commits < 1 || commits > 1000) {
                fprintf(stderr, "%s: bad --commits '%s'\n", bench_who, v);
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--compute", rank == 0)) != NULL) {
            compute = atof(v);
            if (!(compute >= 0 && compute <= 60)) {
                fprintf(stderr, "%s: bad --compute '%s'\n", bench_who, v);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_recover --mark FILE [--bytes SIZE] [--commits N] "
                    "[--compute S]\n");
            return 2;
        }
    }
    if (!mark) {
        fprintf(stderr, "%s: --mark FILE is required\n", bench_who);
        return 2;
    }
    nkeys = (int)((bytes + KEY_MAX - 1) / KEY_MAX);
    keys = xalloc(sizeof *keys * (size_t)nkeys);
    arrs = xalloc(sizeof *arrs * (size_t)nkeys);
    for (int k = 0; k < nkeys; k++) {
        size_t b = k < nkeys - 1 ? KEY_MAX : bytes - KEY_MAX * (size_t)(nkeys - 1);
        float *p = xalloc(b);

        keys[k] = (kvs_key_t){ .id = k };
        arrs[k] = (kvs_array_t){ .data = p, .dtype = KVS_FLOAT32, .ndim = 1,
                                 .shape = { (int64_t)(b / 4) } };
    }
    tick = xalloc(TICK * sizeof(float));
    memset(tick, 0, TICK * sizeof(float));
    tick_key = (kvs_key_t){ .id = nkeys };
    tick_arr = (kvs_array_t){ .data = tick, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { TICK } };
    wait = alloc_times(commits);
    round = alloc_times(commits + 16);
    after = alloc_times(commits + 16);
    check_kvs(kvs_create("dist_sync", &kv), kv, "create");

    /* Steps 1..commits: a commit after each; then a commit at commits+2
     * after which rank 1 dies (once), and one at commits+4 after which
     * rank 0 kills kvsd (once). */
    const int64_t total = commits + 7;
    for (;;) {
        int64_t from;
        int again = 0;

        check_kvs(kvs_resume_step(kv, &from), kv, "resume_step");
        if (from < 0) {
            fill();
            if (restarted(kvs_init(kv, nkeys, keys, arrs), "init") ||
                restarted(kvs_init(kv, 1, &tick_key, &tick_arr), "init") ||
                restarted(kvs_set_optimizer(kv, "sgd lr=0.001"), "set_optimizer"))
                continue;
        } else if (restarted(kvs_pull(kv, nkeys, keys, arrs, 0), "pull")) {
            continue;                         /* a program resuming pulls its weights */
        }
        if (resumed) {
            /* Back at work: every worker's first round after the roll back
             * is of a small key, so that the time is the recovery's, not a
             * big round's. */
            if (restarted(kvs_pushpull(kv, 1, &tick_key, &tick_arr, &tick_arr, 0), "pushpull"))
                continue;
            resumed = 0;
            if (fault > 0 && kvsd_killed)
                rec_kvsd = wall_s() - fault;
            else if (fault > 0)
                rec_worker = wall_s() - fault;
            fault = 0;
        }
        for (int64_t step = from + 1; step <= total && !again; step++) {
            double t = now_s();

            if ((again = restarted(kvs_pushpull(kv, nkeys, keys, arrs, arrs, 0), "pushpull")))
                break;
            t = now_s() - t;
            if (step > 1 && step <= commits + 1) {
                after[nafter++] = t;
            } else if (step > commits + 1 && step != commits + 3 && step != commits + 5) {
                round[nround++] = t;
            }
            if (step <= commits || step == commits + 2 || step == commits + 4) {
                double c = now_s();
                if ((again = restarted(kvs_commit(kv, step), "commit")))
                    break;
                if (step <= commits)
                    wait[nwait++] = now_s() - c;
            }
            if (step == commits + 2 && rank == 1 && !replacement) {
                put_mark(mark, wall_s());
                raise(SIGKILL);
            }
            if (step == commits + 4 && rank == 0 && !kvsd_killed) {
                pid_t p = find_kvsd();
                if (p <= 0) {
                    fprintf(stderr, "%s: kvsd not found\n", bench_who);
                    return 1;
                }
                kvsd_killed = 1;
                fault = wall_s();
                kill(p, SIGKILL);
            }
            if (compute > 0 && step <= commits) {  /* after the timed commits only */
                struct timespec ts = { (time_t)compute,
                                       (long)((compute - (double)(time_t)compute) * 1e9) };
                nanosleep(&ts, NULL);
            }
        }
        if (!again)
            break;
        resumed = 1;
        if (rank == 0 && !kvsd_killed)
            fault = get_mark(mark);           /* rank 1 died */
    }
    if (rank == 0) {
        printf("commit_wait %.6f\n", nwait ? rh_median(wait, nwait) : -1);
        printf("round %.6f\n", nround ? rh_median(round, nround) : -1);
        printf("round_after_commit %.6f\n", nafter ? rh_median(after, nafter) : -1);
        printf("recover_worker %.6f\n", rec_worker);
        printf("recover_kvsd %.6f\n", rec_kvsd);
    }
    kvs_close(kv);
    return 0;
}
