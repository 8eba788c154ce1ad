/*
 * dist_commit.c - a worker of the commit and restore tests
 * (test_recover_kvsd.sh): usage dist_commit SCENARIO [TYPE]. Its training
 * is deterministic, so that a run restored from a commit can be compared
 * bit for bit with one that was not interrupted:
 *   run      init, sgd with momentum, steps 0..5 committing at steps 2, 4
 *            and 6 (the last push of each before the commit unpulled: the
 *            commit must wait for it), the value at the last commit
 *            written to $KVS_TEST_DIR/committed.RANK, one more step's to
 *            after.RANK; then ready.RANK (its pid), and it waits to be killed
 *   resume   resume_step must be 6; the pull must equal committed.RANK and
 *            the next step after.RANK, byte for byte; an init of the key
 *            with its shape keeps the value, with another shape fails
 *            naming the snapshot's step; then a commit at step 7
 *   step     resume_step must be $KVS_TEST_STEP
 *   badstep  rank R commits step R: KVS_EBADARG naming two ranks
 *   hoststep across hosts of one worker each, rank R commits step R:
 *            KVS_EBADARG for every worker, naming a host; then a commit of
 *            one step succeeds
 * In dist_async the ranks push in turn, a barrier between, so that the
 * order of the updates is fixed too.
 */
#define _GNU_SOURCE
#include "distutil.h"

#define ROWS 4
#define COLS 8
#define N (ROWS * COLS)
#define SPEC "sgd lr=0.1 momentum=0.9"

static const kvs_key_t K = { .id = 3, .name = NULL };
static int async_mode;

static void grad(float *g, int64_t step)
{
    for (int i = 0; i < N; i++)
        g[i] = 0.01f * (float)(i + 1) * (float)(rank + 1) + 0.1f * (float)step;
}

static void pull(float *v)
{
    kvs_array_t a = f32(v, ROWS, COLS);

    ok(kvs_pull(kv, 1, &K, &a, 0), "pull");
}

/* One step's push (dist_async: rank by rank); pulled unless told not to. */
static void step(int64_t s, float *v, int pull_after)
{
    float g[N];
    kvs_array_t a = f32(g, ROWS, COLS);

    grad(g, s);
    if (!async_mode) {
        ok(kvs_push(kv, 1, &K, &a, 0), "push");
    } else {
        for (int r = 0; r < nw; r++) {
            if (r == rank) {
                ok(kvs_push(kv, 1, &K, &a, 0), "push");
                pull(v);
            }
            ok(kvs_barrier(kv), "barrier");
        }
    }
    if (pull_after)
        pull(v);
}

static void put_file(const char *what, const void *p, size_t n)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s.%d", getenv("KVS_TEST_DIR"), what, rank);
    if (!(f = fopen(path, "wb")) || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        die("cannot write %s", path);
}

static void get_file(const char *what, void *p, size_t n)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s.%d", getenv("KVS_TEST_DIR"), what, rank);
    if (!(f = fopen(path, "rb")) || fread(p, 1, n, f) != n)
        die("cannot read %s", path);
    fclose(f);
}

static void same(const float *a, const float *b, const char *what)
{
    for (int i = 0; i < N; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            die("%s: element %d is %.9g, expected %.9g", what, i, a[i], b[i]);
}

static void run(void)
{
    float v[N];
    kvs_array_t a = f32(v, ROWS, COLS);
    int64_t rs;

    ok(kvs_resume_step(kv, &rs), "resume_step");
    if (rs != -1)
        die("resume_step %lld before any commit, expected -1", (long long)rs);
    fill(v, N, 1.0f);
    ok(kvs_init(kv, 1, &K, &a), "init");
    ok(kvs_set_optimizer(kv, SPEC), "set_optimizer");
    pull(v);
    expect(v, N, 1.0f, "the value after init");
    ok(kvs_barrier(kv), "barrier");
    for (int64_t s = 0; s < 6; s++) {
        step(s, v, s % 2 == 0);
        if (s % 2 == 1) {
            ok(kvs_commit(kv, s + 1), "commit");
            ok(kvs_resume_step(kv, &rs), "resume_step");
            if (rs != s + 1)
                die("resume_step %lld after the commit of step %lld", (long long)rs,
                    (long long)(s + 1));
        }
    }
    pull(v);
    put_file("committed", v, sizeof v);
    ok(kvs_barrier(kv), "barrier");    /* every rank pulled before the next push */
    step(6, v, 1);
    put_file("after", v, sizeof v);
    {
        char pid[32];

        put_file("ready", pid, (size_t)snprintf(pid, sizeof pid, "%d\n", (int)getpid()));
    }
    sleep(60);                         /* the test kills it */
    die("not killed");
}

static void resume(void)
{
    float v[N], want[N], other[N * 2];
    kvs_array_t a = f32(v, ROWS, COLS), b = f32(other, ROWS * 2, COLS);
    int64_t rs;
    int rc;

    ok(kvs_resume_step(kv, &rs), "resume_step");
    if (rs != 6)
        die("resume_step %lld, expected 6", (long long)rs);
    /* Written otherwise than the run did: the same optimizer, its state kept. */
    ok(kvs_set_optimizer(kv, "sgd momentum=0.9  lr=0.1"), "set_optimizer");
    pull(v);
    get_file("committed", want, sizeof want);
    same(v, want, "the pull after the restore");
    fill(v, N, 42.0f);
    ok(kvs_init(kv, 1, &K, &a), "init of a restored key, its shape");
    pull(v);
    same(v, want, "the pull after an init of a restored key");
    ok(kvs_barrier(kv), "barrier");
    fill(other, N * 2, 1.0f);
    rc = kvs_init(kv, 1, &K, &b);
    if (rc != KVS_ESHAPE || !strstr(kvs_last_error(kv), "restored from the snapshot of step 6"))
        die("init of another shape: %s (%s), expected KVS_ESHAPE naming step 6",
            kvs_err_name(rc), kvs_last_error(kv));
    step(6, v, 1);
    get_file("after", want, sizeof want);
    same(v, want, "the step after the restore");
    ok(kvs_commit(kv, 7), "commit");
}

static void resume_at(void)
{
    const char *want = getenv("KVS_TEST_STEP");
    int64_t rs;

    ok(kvs_resume_step(kv, &rs), "resume_step");
    if (!want || rs != atoll(want))
        die("resume_step %lld, expected %s", (long long)rs, want ? want : "(unset)");
}

static void badstep(void)
{
    int rc = kvs_commit(kv, rank);

    if (rc != KVS_EBADARG || !strstr(kvs_last_error(kv), "rank 0 committed step 0")
        || !strstr(kvs_last_error(kv), "rank 1"))
        die("commit of differing steps: %s (%s), expected KVS_EBADARG naming the ranks",
            kvs_err_name(rc), kvs_last_error(kv));
}

static void hoststep(void)
{
    int rc = kvs_commit(kv, rank);

    if (rc != KVS_EBADARG || !strstr(kvs_last_error(kv), "host")
        || !strstr(kvs_last_error(kv), "the workers must commit the same step"))
        die("commit of steps differing between hosts: %s (%s), expected KVS_EBADARG naming "
            "a host", kvs_err_name(rc), kvs_last_error(kv));
    ok(kvs_commit(kv, 9), "commit of one step after");
}

int main(int argc, char **argv)
{
    const char *type = argc > 2 ? argv[2] : "dist_sync";

    scenario = argc > 1 ? argv[1] : "run";
    async_mode = strcmp(type, "dist_async") == 0;
    ok(kvs_create(type, &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "run") == 0)
        run();
    else if (strcmp(scenario, "resume") == 0)
        resume();
    else if (strcmp(scenario, "step") == 0)
        resume_at();
    else if (strcmp(scenario, "badstep") == 0)
        badstep();
    else if (strcmp(scenario, "hoststep") == 0)
        hoststep();
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
