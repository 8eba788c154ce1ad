/*
 * train_linreg.c - data-parallel training with a dist_sync store: N workers
 * fit one linear model y = w.x + b to a synthetic data set, each on its own
 * shard. Every step each worker pushes the gradient of its mini-batch; kvsd
 * sums the N gradients and runs sgd on the stored weights (rescale_grad
 * turns the sum into the mean); every worker then pulls the new weights.
 *
 * The data come from a fixed seed, so every machine trains on the same set.
 * Rank 0 prints the loss on the whole set after each epoch, the learned
 * weights and their error against the true ones, then trains once more in
 * this one process, on a `local` store with N times the batch over the same
 * samples, and checks that both runs learned the same weights: N workers
 * with batch B take the same steps as one worker with batch N*B.
 *
 * Run it with 4 workers:
 *     kvsrun -n 4 examples/train_linreg
 * or by hand, starting the job's daemon first:
 *     kvsd --job demo -n 4 -q &
 *     for i in 0 1 2 3; do
 *         KVS_JOB=demo KVS_RANK=$i KVS_NUM_WORKERS=4 examples/train_linreg &
 *     done; wait
 * Run alone (no KVS_NUM_WORKERS), it trains on a `local` store only.
 * Exit status 0 when the checks pass.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvs.h>

#define NSAMPLES 4096
#define NFEAT    8
#define BATCH    32                    /* samples per worker per step */
#define EPOCHS   8
#define LR       0.1
#define NOISE    0.005                 /* standard deviation of the label noise */
#define SEED     42

static const double w_true[NFEAT] = { 0.5, -1, 2, -1.5, 1, 0.25, -0.75, 3 };
static const double b_true = 0.3;

static float X[NSAMPLES][NFEAT], Y[NSAMPLES];

struct model { float w[NFEAT], b; };

/* ---- the data: splitmix64, and Box-Muller for normal numbers ---------- */

static uint64_t rng_state = SEED;

static uint64_t splitmix64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(void)            /* in (0, 1] */
{
    return (double)((splitmix64() >> 11) + 1) / 9007199254740992.0;
}

static double normal(void)
{
    return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
}

static void make_data(void)
{
    for (int i = 0; i < NSAMPLES; i++) {
        double y = b_true + NOISE * normal();

        for (int f = 0; f < NFEAT; f++) {
            X[i][f] = (float)normal();
            y += w_true[f] * X[i][f];
        }
        Y[i] = (float)y;
    }
}

/* ---- training --------------------------------------------------------- */

static void check(kvs_t *kv, int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "train_linreg: %s: %s (%s)\n", what, kvs_strerror(rc),
                kvs_last_error(kv));
        exit(1);
    }
}

static double predict(const struct model *m, int i)
{
    double p = m->b;

    for (int f = 0; f < NFEAT; f++)
        p += (double)m->w[f] * X[i][f];
    return p;
}

static double loss(const struct model *m)          /* mean squared error, whole set */
{
    double sum = 0;

    for (int i = 0; i < NSAMPLES; i++) {
        double err = predict(m, i) - Y[i];

        sum += err * err;
    }
    return sum / NSAMPLES;
}

/* Trains m on the store kv as worker `rank` of `nw`, `batch` samples a step.
 * Step s of an epoch uses samples (s*batch + j)*nw + rank, j < batch: the
 * workers' shards are rank-strided, and together they cover samples
 * s*batch*nw ... (s+1)*batch*nw - 1, just as one worker with nw*batch does. */
static void train(kvs_t *kv, int rank, int nw, int batch, int verbose, struct model *m)
{
    kvs_key_t keys[2] = { KVS_STR_KEY("w"), KVS_STR_KEY("b") };
    struct model g;
    kvs_array_t params[2] = {
        { .data = m->w, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { NFEAT } },
        { .data = &m->b, .dtype = KVS_FLOAT32, .ndim = 0 },   /* a scalar */
    };
    kvs_array_t grads[2] = { params[0], params[1] };
    char spec[128];

    grads[0].data = g.w;
    grads[1].data = &g.b;
    *m = (struct model){ { 0 }, 0 };
    check(kv, kvs_init(kv, 2, keys, params), "init");       /* rank 0's value is kept */
    /* The pushed gradients are sums over batch*nw samples: rescale to the mean. */
    snprintf(spec, sizeof spec, "sgd lr=%g rescale_grad=%.9g", LR, 1.0 / (batch * nw));
    check(kv, kvs_set_optimizer(kv, spec), "set_optimizer");

    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        for (int s = 0; s < NSAMPLES / (batch * nw); s++) {
            double gw[NFEAT] = { 0 }, gb = 0;

            for (int j = 0; j < batch; j++) {
                int i = (s * batch + j) * nw + rank;
                double err = predict(m, i) - Y[i];   /* d/dw of err^2/2 is err * x */

                for (int f = 0; f < NFEAT; f++)
                    gw[f] += err * X[i][f];
                gb += err;
            }
            for (int f = 0; f < NFEAT; f++)
                g.w[f] = (float)gw[f];
            g.b = (float)gb;
            /* Push the gradients, pull the weights kvsd updated with every
             * worker's gradients of this step. */
            check(kv, kvs_pushpull(kv, 2, keys, grads, params, 0), "pushpull");
        }
        if (verbose)
            printf("epoch %d  loss %.6f\n", epoch, loss(m));
    }
}

static double max_error(const struct model *m)
{
    double e = fabs(m->b - b_true);

    for (int f = 0; f < NFEAT; f++)
        e = fmax(e, fabs(m->w[f] - w_true[f]));
    return e;
}

static int report(const struct model *m)
{
    double e = max_error(m);

    printf("learned w:");
    for (int f = 0; f < NFEAT; f++)
        printf(" %.4f", m->w[f]);
    printf("  b: %.4f\n", m->b);
    printf("true    w:");
    for (int f = 0; f < NFEAT; f++)
        printf(" %.4f", w_true[f]);
    printf("  b: %.4f\n", b_true);
    printf("max error against the true weights: %.2e (%s 1e-3)\n", e, e < 1e-3 ? "<" : "NOT <");
    return e < 1e-3;
}

int main(void)
{
    struct model dist, single;
    kvs_t *kv;
    int rank, nw, good;
    double diff;

    make_data();
    if (getenv("KVS_NUM_WORKERS") == NULL) {
        puts("run it with: kvsrun -n 4 examples/train_linreg");
        puts("(no launcher: training in this process only, on a local store, batch 4x32)");
        check(NULL, kvs_create("local", &kv), "create");
        train(kv, 0, 1, 4 * BATCH, 1, &single);
        kvs_close(kv);
        return report(&single) ? 0 : 1;
    }

    check(NULL, kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (rank == 0)
        printf("%d workers, %d samples, batch %d per worker, sgd lr=%g\n", nw, NSAMPLES,
               BATCH, LR);
    train(kv, rank, nw, BATCH, rank == 0, &dist);
    kvs_close(kv);
    if (rank != 0)
        return max_error(&dist) < 1e-3 ? 0 : 1;

    good = report(&dist);
    check(NULL, kvs_create("local", &kv), "create");
    train(kv, 0, 1, nw * BATCH, 0, &single);
    kvs_close(kv);
    diff = fabs(dist.b - single.b);
    for (int f = 0; f < NFEAT; f++)
        diff = fmax(diff, fabs(dist.w[f] - single.w[f]));
    printf("matches a single-process run with %dx the batch: %s (max difference %.1e)\n", nw,
           diff < 1e-5 ? "yes" : "NO", diff);
    return good && diff < 1e-5 ? 0 : 1;
}
