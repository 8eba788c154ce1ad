/*
 * dist_cow.c - a worker of the tests of commits written while rounds go
 * on (test_recover_cow.sh): usage dist_cow SCENARIO. dist_sync, three
 * keys (a big one between two small ones), sgd with momentum, gradients
 * of the step and rank, so that a run restored from a commit can be
 * compared bit for bit with one that was not interrupted. kvsd writes
 * each commit's snapshot while the next rounds change every key. Rank 0
 * makes $KVS_TEST_DIR/hold before commit 2, which kvsd is told of
 * (KVS_TEST_SNAPSHOT_HOLD): its write stops half done until the test
 * removes the file.
 *   run      steps 0..2, commit 2, the values then written to
 *            $KVS_TEST_DIR/committed.RANK; steps 3..5 at once (while the
 *            file is written), the value after step 3 to after.RANK;
 *            then ready.RANK (its pid), and it waits to be killed
 *   two      steps 0..1, commit 1 (values to committed.RANK), step 2
 *            (after.RANK), commit 2 (held), then ready.RANK at once and
 *            it waits to be killed (with kvsd, during the write)
 *   resume   resume_step must be $KVS_TEST_STEP; the pull of every key
 *            must equal committed.RANK, and the next step after.RANK,
 *            byte for byte (with KVS_TEST_AFTER set: the pull must equal
 *            after.RANK, "two"'s second commit)
 */
#define _GNU_SOURCE
#include "distutil.h"

#include <stdint.h>

#define NK 3
#define SPEC "sgd lr=0.05 momentum=0.9"

static const int64_t sizes[NK] = { 33, 4 << 20, 1000 };   /* floats: 16 MiB in the middle */
static kvs_key_t keys[NK] = { { .id = 1 }, { .id = 2 }, { .id = 7 } };
static float *vals[NK], *grads[NK];
static kvs_array_t va[NK], ga[NK];
static size_t total;

static void setup(void)
{
    for (int k = 0; k < NK; k++) {
        if (!(vals[k] = malloc(sizeof(float) * (size_t)sizes[k]))
            || !(grads[k] = malloc(sizeof(float) * (size_t)sizes[k])))
            die("out of memory");
        va[k] = (kvs_array_t){ .data = vals[k], .dtype = KVS_FLOAT32, .ndim = 1,
                               .shape = { sizes[k] } };
        ga[k] = va[k];
        ga[k].data = grads[k];
        total += (size_t)sizes[k];
    }
}

static void pull_all(void)
{
    ok(kvs_pull(kv, NK, keys, va, 0), "pull");
}

/* One step: every key pushed and pulled. */
static void step(int64_t s)
{
    for (int k = 0; k < NK; k++)
        for (int64_t i = 0; i < sizes[k]; i++)
            grads[k][i] = 0.001f * (float)(i % 997) * (float)(rank + 1) + 0.01f * (float)s
                          + 0.1f * (float)k;
    ok(kvs_push(kv, NK, keys, ga, 0), "push");
    pull_all();
}

static void put_all(const char *what)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s.%d", getenv("KVS_TEST_DIR"), what, rank);
    if (!(f = fopen(path, "wb")))
        die("cannot write %s", path);
    for (int k = 0; k < NK; k++)
        if (fwrite(vals[k], sizeof(float), (size_t)sizes[k], f) != (size_t)sizes[k])
            die("cannot write %s", path);
    if (fclose(f) != 0)
        die("cannot write %s", path);
}

/* Commit 2, its write held: the hold file exists before kvsd captures
 * (which it does once every rank asked). */
static void commit_held(void)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/hold", getenv("KVS_TEST_DIR"));
    if (rank == 0 && (!(f = fopen(path, "w")) || fclose(f) != 0))
        die("cannot write %s", path);
    ok(kvs_commit(kv, 2), "commit");
}

/* The values equal the file's, byte for byte. */
static void same_as(const char *what, const char *when)
{
    char path[512];
    FILE *f;
    float *want = malloc(sizeof(float) * (size_t)sizes[1]);

    snprintf(path, sizeof path, "%s/%s.%d", getenv("KVS_TEST_DIR"), what, rank);
    if (!want || !(f = fopen(path, "rb")))
        die("cannot read %s", path);
    for (int k = 0; k < NK; k++) {
        if (fread(want, sizeof(float), (size_t)sizes[k], f) != (size_t)sizes[k])
            die("%s is short", path);
        for (int64_t i = 0; i < sizes[k]; i++)
            if (memcmp(&want[i], &vals[k][i], sizeof(float)) != 0)
                die("%s: key %lld element %lld is %.9g, expected %.9g", when,
                    (long long)keys[k].id, (long long)i, vals[k][i], want[i]);
    }
    fclose(f);
    free(want);
}

static _Noreturn void ready_and_wait(void)
{
    char path[512], tmp[520];
    FILE *f;

    /* Renamed into place: the test reads a whole pid once it is there. */
    snprintf(path, sizeof path, "%s/ready.%d", getenv("KVS_TEST_DIR"), rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w")) || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0
        || rename(tmp, path) != 0)
        die("cannot write %s", path);
    sleep(120);                        /* the test kills it */
    die("not killed");
}

static void start(void)
{
    for (int k = 0; k < NK; k++)
        fill(vals[k], (size_t)sizes[k], 0.5f);
    ok(kvs_init(kv, NK, keys, va), "init");
    ok(kvs_set_optimizer(kv, SPEC), "set_optimizer");
    pull_all();
    for (int k = 0; k < NK; k++)
        expect(vals[k], (size_t)sizes[k], 0.5f, "a value after init");
}

static void run(void)
{
    start();
    for (int64_t s = 0; s <= 2; s++)
        step(s);
    put_all("committed");
    commit_held();
    step(3);
    put_all("after");
    step(4);
    step(5);
    ready_and_wait();
}

static void two(void)
{
    start();
    for (int64_t s = 0; s <= 1; s++)
        step(s);
    put_all("committed");
    ok(kvs_commit(kv, 1), "commit");
    step(2);
    put_all("after");
    commit_held();
    ready_and_wait();
}

static void resume(void)
{
    const char *want = getenv("KVS_TEST_STEP");
    int64_t rs;

    ok(kvs_resume_step(kv, &rs), "resume_step");
    if (!want || rs != atoll(want))
        die("resume_step %lld, expected %s", (long long)rs, want ? want : "(unset)");
    ok(kvs_set_optimizer(kv, SPEC), "set_optimizer");
    pull_all();
    if (getenv("KVS_TEST_AFTER")) {    /* "two"'s second commit: after step 2 */
        same_as("after", "the pull after the restore");
        return;
    }
    same_as("committed", "the pull after the restore");
    ok(kvs_barrier(kv), "barrier");    /* every rank pulled before the next push */
    step(rs + 1);
    same_as("after", "the step after the restore");
}

int main(int argc, char **argv)
{
    scenario = argc > 1 ? argv[1] : "run";
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    setup();
    if (strcmp(scenario, "run") == 0)
        run();
    else if (strcmp(scenario, "two") == 0)
        two();
    else if (strcmp(scenario, "resume") == 0)
        resume();
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
