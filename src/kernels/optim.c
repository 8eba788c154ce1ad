/*
 * optim.c - the built-in optimizers: parsing a spec ("sgd lr=0.1 ..."),
 * and MXNet 1.9's update rules for sgd and adam over the per-key state they
 * keep (momentum; adam's mean and variance and its update count).
 *
 * Owns the parsed optimizer. It must never allocate state buffers (that
 * takes a memory provider, a layer above: store/optim_state.c), look keys
 * up, lock, or touch a store: the engine hands in one key's weight,
 * gradient and state at a time. An update must never fail and never
 * allocate: by the time it runs, the engine has committed to the push.
 * It must never change the formulas' order of operations either: results
 * are meant to match MXNet's kernels to the last bit in float32.
 * The state file is store/statefile.c's business.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/array.h"
#include "kernels/cuda_kernels.h"
#include "kernels/optim.h"
#include "base/pool.h"
#include "base/spec.h"

#define OPTIM_MAX_PARAMS 8
#define OPTIM_SPEC_MAX 512             /* the canonical spec: names + 8 numbers of <= 24 chars */
#define OPTIM_NUMBER_MAX 128           /* longer values are refused: never a sensible number */
#define OPTIM_CHUNK 1024               /* elements summed and updated per round of a loop */

enum optim_kind { OPTIM_SGD, OPTIM_ADAM };

/* The values MXNet's optimizers make sense of (its own checks, and where
 * its formulas stop meaning anything: a negative lr ascends, beta or
 * momentum 1 never forgets). */
enum range { ANY, POSITIVE, NONNEG, UNIT, FLAG };   /* (-inf,inf) (0,inf) [0,inf) [0,1) {0,1} */

struct param_def {
    const char *name;
    double dflt;                       /* MXNet 1.9's default */
    enum range range;
};

struct optim_def {
    const char *name;
    enum optim_kind kind;
    size_t nparams;
    const struct param_def *params;
};

/* Index of each parameter in kvs__optim.p; the tables below follow it. */
enum { SGD_LR, SGD_MOMENTUM, SGD_WD, SGD_RESCALE, SGD_CLIP, SGD_LAZY, SGD_NPARAMS };
enum { ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON, ADAM_WD, ADAM_RESCALE, ADAM_CLIP,
       ADAM_LAZY, ADAM_NPARAMS };

/* clip_gradient -1 stands for MXNet's None. lr 0.01 is the Optimizer base
 * class's learning_rate, which SGD inherits. lazy_update (1: MXNet's
 * default) says how a row-sparse gradient updates: only its rows and their
 * state (1), or as a dense gradient, zeros included (0); it changes
 * nothing for dense pushes. */
static const struct param_def sgd_params[SGD_NPARAMS] = {
    [SGD_LR]       = { "lr",            0.01,  POSITIVE },
    [SGD_MOMENTUM] = { "momentum",      0.0,   UNIT },
    [SGD_WD]       = { "wd",            0.0,   NONNEG },
    [SGD_RESCALE]  = { "rescale_grad",  1.0,   ANY },
    [SGD_CLIP]     = { "clip_gradient", -1.0,  ANY },
    [SGD_LAZY]     = { "lazy_update",   1.0,   FLAG },
};

static const struct param_def adam_params[ADAM_NPARAMS] = {
    [ADAM_LR]      = { "lr",            0.001, POSITIVE },
    [ADAM_BETA1]   = { "beta1",         0.9,   UNIT },
    [ADAM_BETA2]   = { "beta2",         0.999, UNIT },
    [ADAM_EPSILON] = { "epsilon",       1e-8,  NONNEG },
    [ADAM_WD]      = { "wd",            0.0,   NONNEG },
    [ADAM_RESCALE] = { "rescale_grad",  1.0,   ANY },
    [ADAM_CLIP]    = { "clip_gradient", -1.0,  ANY },
    [ADAM_LAZY]    = { "lazy_update",   1.0,   FLAG },
};

static int in_range(double v, enum range r)
{
    switch (r) {
    case POSITIVE: return v > 0;
    case NONNEG: return v >= 0;
    case UNIT: return v >= 0 && v < 1;
    case FLAG: return v == 0 || v == 1;
    default: return 1;
    }
}

static const char *range_text(enum range r)
{
    switch (r) {
    case POSITIVE: return "> 0";
    case NONNEG: return ">= 0";
    case UNIT: return "in [0, 1)";
    case FLAG: return "0 or 1";
    default: return "finite";
    }
}

static const struct optim_def optim_defs[] = {
    { "sgd",  OPTIM_SGD,  SGD_NPARAMS,  sgd_params },
    { "adam", OPTIM_ADAM, ADAM_NPARAMS, adam_params },
};

struct kvs__optim {
    const struct optim_def *def;
    double p[OPTIM_MAX_PARAMS];
    char spec[OPTIM_SPEC_MAX];         /* canonical: every parameter written out */
};

/* ---- Spec ------------------------------------------------------------ */

/* Writes o->spec, each number in the fewest digits that parse back to it
 * ("lr=0.1", not "lr=0.10000000000000001"): what a person wrote is what
 * they see again, in kvsctl status and in messages. */
static int format_spec(struct kvs__optim *o)
{
    size_t used;
    int n;

    n = snprintf(o->spec, sizeof o->spec, "%s", o->def->name);
    used = n < 0 ? sizeof o->spec : (size_t)n;
    for (size_t i = 0; i < o->def->nparams && used < sizeof o->spec; i++) {
        char num[32];

        kvs__spec_format_double(num, sizeof num, o->p[i]);
        n = snprintf(o->spec + used, sizeof o->spec - used, " %s=%s", o->def->params[i].name,
                     num);
        used = n < 0 ? sizeof o->spec : used + (size_t)n;
    }
    return used < sizeof o->spec ? 0 : -1;
}

int kvs__optim_parse(const char *spec, struct kvs__optim **out, struct kvs__err *e)
{
    const struct optim_def *def = NULL;
    struct kvs__optim *o;
    struct kvs__spec sp;
    struct kvs__spec_param par;
    const char *name;
    size_t len;
    unsigned given = 0;                /* bit i: parameter i was set */
    int rc;

    if (spec == NULL || out == NULL)
        return kvs__fail(e, KVS_EBADARG, "optimizer: %s is NULL",
                         spec == NULL ? "spec" : "output");
    *out = NULL;

    len = kvs__spec_begin(&sp, spec, &name);
    if (len == 0)
        return kvs__fail(e, KVS_ESPEC,
                         "empty optimizer spec (expected \"sgd ...\" or \"adam ...\")");
    /* MXNet looks optimizer names up in lower case, so "SGD" is sgd. */
    for (size_t i = 0; i < sizeof optim_defs / sizeof optim_defs[0]; i++) {
        if (strlen(optim_defs[i].name) == len && strncasecmp(name, optim_defs[i].name, len) == 0)
            def = &optim_defs[i];
    }
    if (def == NULL)
        return kvs__fail(e, KVS_ESPEC, "unknown optimizer '%.*s' (expected sgd or adam)",
                         kvs__spec_shown(len), name);

    o = calloc(1, sizeof *o);
    if (o == NULL)
        return kvs__fail(e, -ENOMEM, "optimizer %s: out of memory", def->name);
    o->def = def;
    for (size_t i = 0; i < def->nparams; i++)
        o->p[i] = def->params[i].dflt;

    while (kvs__spec_next_param(&sp, &par)) {
        size_t i;

        if (par.value == NULL) {
            rc = kvs__fail(e, KVS_ESPEC, "%s: parameter '%.*s' has no '=value'", def->name,
                           kvs__spec_shown(par.key_len), par.key);
            goto fail;
        }
        for (i = 0; i < def->nparams; i++) {
            if (kvs__spec_is(par.key, par.key_len, def->params[i].name))
                break;
        }
        if (i == def->nparams) {
            rc = kvs__fail(e, KVS_ESPEC, "%s: unknown parameter '%.*s'", def->name,
                           kvs__spec_shown(par.key_len), par.key);
            goto fail;
        }
        if (given & (1u << i)) {
            rc = kvs__fail(e, KVS_ESPEC, "%s: parameter '%s' given twice", def->name,
                           def->params[i].name);
            goto fail;
        }
        given |= 1u << i;
        if (par.value_len > OPTIM_NUMBER_MAX ||
            kvs__spec_double(par.value, par.value_len, &o->p[i]) != 0) {
            rc = kvs__fail(e, KVS_ESPEC, "%s: %s '%.*s' is not a finite decimal number",
                           def->name, def->params[i].name, kvs__spec_shown(par.value_len),
                           par.value);
            goto fail;
        }
        if (!in_range(o->p[i], def->params[i].range)) {
            rc = kvs__fail(e, KVS_ESPEC, "%s: %s '%.*s' is out of range: it must be %s",
                           def->name, def->params[i].name, kvs__spec_shown(par.value_len),
                           par.value, range_text(def->params[i].range));
            goto fail;
        }
    }

    if (format_spec(o) != 0) {
        /* Cannot happen with the tables above; kept so that a longer table
         * fails loudly instead of saving a cut spec. */
        rc = kvs__fail(e, KVS_ESPEC, "%s: canonical spec longer than %d bytes", def->name,
                  OPTIM_SPEC_MAX - 1);
        goto fail;
    }
    *out = o;
    return 0;

fail:
    free(o);
    return rc;
}

void kvs__optim_free(struct kvs__optim *o)
{
    free(o);
}

const char *kvs__optim_name(const struct kvs__optim *o)
{
    return o->def->name;
}

const char *kvs__optim_spec(const struct kvs__optim *o)
{
    return o->spec;
}

int kvs__optim_lazy(const struct kvs__optim *o)
{
    return o->p[o->def->kind == OPTIM_ADAM ? ADAM_LAZY : SGD_LAZY] != 0.0;
}

/* ---- State ----------------------------------------------------------- */

/* MXNet 1.9's SGD runs the momentum rule only when momentum > 0, and the
 * plain rule otherwise (a negative momentum included: it then keeps a
 * buffer it never uses, which we do not). */
int kvs__optim_nbuf(const struct kvs__optim *o)
{
    if (o->def->kind == OPTIM_ADAM)
        return 2;
    return o->p[SGD_MOMENTUM] > 0.0 ? 1 : 0;
}

/* ---- Update rules ---------------------------------------------------- */

/*
 * The kernels of MXNet 1.9 (src/operator/optimizer_op-inl.h), one element
 * at a time, in the kernel's own order of operations so that float32
 * results round the same way. T is the type MXNet's DType would be: the
 * key's own for float32 and float64, float32 for the half types (what
 * multi-precision mode computes in). The parameters come in already
 * converted to T, as MXNet's static_cast<DType>(param.x) does.
 *
 * mshadow_op::clip::Map(x, b): b when x > b, -b when x < -b, else x.
 * Clipping is on when clip_gradient > 0: MXNet's Python optimizer passes
 * clip_gradient to the kernel only when it is truthy, so 0 and None (our
 * negative values) both mean no clipping.
 */
#define KVS__CLIP(x, b) ((x) > (b) ? (b) : (x) < -(b) ? -(b) : (x))

/* Plain sgd. MXNet 1.9's SGD sends dense weights to multi_sgd_update
 * (SGD._update_impl aggregates every dense weight, even one alone), whose
 * MultiSGDKernel is the momentum rule below with momentum 0 and a zero
 * momentum that is not kept:
 *   mom = 0*0 - lr*wd*w - lr*clip(rescale*g)     (clipping)
 *   mom = 0*0 - lr*wd*w - lr*rescale*g           (no clipping)
 *   w = w + mom
 * This is SGDKernel's (1 - lr*wd)*w - lr*rescale*g, rounded as 1.9 rounds
 * it. Weight decay is outside the clip. */
#define KVS__DEFINE_SGD(T, SFX)                                                \
    static void sgd_##SFX(T *restrict w, const T *restrict g, size_t n, T lr,  \
                          T wd, T rescale, T clip, int clipping)               \
    {                                                                          \
        if (clipping) {                                                        \
            for (size_t i = 0; i < n; i++) {                                   \
                T cg = rescale * g[i];                                         \
                T mom = (T)0 - lr * wd * w[i] - lr * KVS__CLIP(cg, clip);      \
                w[i] = w[i] + mom;                                             \
            }                                                                  \
        } else {                                                               \
            KVS__FOR_EACH(i, n, w[i] = w[i] + ((T)0 - lr * wd * w[i]           \
                                               - lr * rescale * g[i]));        \
        }                                                                      \
    }

/* SGDMomKernel, and MultiSGDKernel with momentum (what 1.9 runs for dense
 * weights), both in this order:
 *   mom = momentum*mom - lr*wd*w - lr*clip(rescale*g)
 *   mom = momentum*mom - lr*wd*w - lr*rescale*g   (no clipping)
 *   w = w + mom */
#define KVS__DEFINE_SGD_MOM(T, SFX)                                            \
    static void sgd_mom_##SFX(T *restrict w, const T *restrict g,              \
                              T *restrict mom, size_t n, T lr, T momentum,     \
                              T wd, T rescale, T clip, int clipping)           \
    {                                                                          \
        if (clipping) {                                                        \
            for (size_t i = 0; i < n; i++) {                                   \
                T cg = rescale * g[i];                                         \
                mom[i] = momentum * mom[i] - lr * wd * w[i]                    \
                         - lr * KVS__CLIP(cg, clip);                           \
                w[i] = w[i] + mom[i];                                          \
            }                                                                  \
        } else {                                                               \
            KVS__FOR_EACH(i, n, {                                              \
                mom[i] = momentum * mom[i] - lr * wd * w[i]                    \
                         - lr * rescale * g[i];                                \
                w[i] = w[i] + mom[i];                                          \
            });                                                                \
        }                                                                      \
    }

/* AdamUpdateKernel: gr = g*rescale + w*wd, then gr = clip(gr) (weight
 * decay is inside the clip, unlike sgd)
 *     mean = beta1*mean + (1 - beta1)*gr
 *     var  = beta2*var + (1 - beta2)*gr*gr
 *     w    = w - lr*mean / (sqrt(var) + epsilon)
 * lr here is already bias-corrected by the caller. */
#define KVS__DEFINE_ADAM(T, SFX, SQRT)                                         \
    static void adam_##SFX(T *w, const T *g, T *mean, T *var, size_t n, T lr,  \
                           T beta1, T beta2, T epsilon, T wd, T rescale,       \
                           T clip, int clipping)                               \
    {                                                                          \
        for (size_t i = 0; i < n; i++) {                                       \
            T gr = g[i] * rescale + w[i] * wd;                                 \
            if (clipping)                                                      \
                gr = KVS__CLIP(gr, clip);                                      \
            mean[i] = beta1 * mean[i] + ((T)1 - beta1) * gr;                   \
            var[i] = beta2 * var[i] + ((T)1 - beta2) * gr * gr;                \
            w[i] = w[i] - lr * mean[i] / (SQRT(var[i]) + epsilon);             \
        }                                                                      \
    }

KVS__DEFINE_SGD(float, f32)
KVS__DEFINE_SGD(double, f64)
KVS__DEFINE_SGD_MOM(float, f32)
KVS__DEFINE_SGD_MOM(double, f64)
KVS__DEFINE_ADAM(float, f32, sqrtf)
KVS__DEFINE_ADAM(double, f64, sqrt)

/* Runs the rule on float32 values: the key's own memory for float32, a
 * converted chunk for the half types. buf are the state buffers at the
 * chunk's first element. The constants are converted from double here, as
 * MXNet's static_cast<DType>(param.x) converts them. */
static void step_f32(const struct kvs_cuda_step *st, void *const *buf, float *w, const float *g,
                     size_t n)
{
    if (st->kind == OPTIM_SGD) {
        if (st->mom)
            sgd_mom_f32(w, g, buf[0], n, (float)st->lr, (float)st->momentum, (float)st->wd,
                        (float)st->rescale, (float)st->clip, st->clipping);
        else
            sgd_f32(w, g, n, (float)st->lr, (float)st->wd, (float)st->rescale,
                    (float)st->clip, st->clipping);
    } else {
        adam_f32(w, g, buf[0], buf[1], n, (float)st->lr, (float)st->beta1, (float)st->beta2,
                 (float)st->epsilon, (float)st->wd, (float)st->rescale, (float)st->clip,
                 st->clipping);
    }
}

static void step_f64(const struct kvs_cuda_step *st, void *const *buf, double *w,
                     const double *g, size_t n)
{
    if (st->kind == OPTIM_SGD) {
        if (st->mom)
            sgd_mom_f64(w, g, buf[0], n, st->lr, st->momentum, st->wd, st->rescale, st->clip,
                        st->clipping);
        else
            sgd_f64(w, g, n, st->lr, st->wd, st->rescale, st->clip, st->clipping);
    } else {
        adam_f64(w, g, buf[0], buf[1], n, st->lr, st->beta1, st->beta2, st->epsilon, st->wd,
                 st->rescale, st->clip, st->clipping);
    }
}

/* One update of a key, split over threads: the rule's constants, and the
 * gradient as the sum of k inputs. */
struct update_job {
    struct kvs_cuda_step st;
    kvs_dtype_t dtype;
    char *weight;
    const void *const *in;
    int k;
    char *buf[2];                      /* the state buffers at weight[0]'s element */
    const struct kvs__source *src;     /* NULL, or the inputs' sources */
};

/* Elements [begin, end) of one update, a chunk at a time: the chunk's
 * gradient is summed next to the update (an input read in place when it is
 * the only one), and half types are widened to float32 and rounded back
 * once. Every element sees what a whole sum then a whole update would give
 * it. */
static void update_range(void *ctx, size_t begin, size_t end)
{
    const struct update_job *job = ctx;
    size_t es = kvs_dtype_size(job->dtype);
    size_t ses = job->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);

    for (size_t off = begin; off < end; off += OPTIM_CHUNK) {
        size_t n = end - off < OPTIM_CHUNK ? end - off : OPTIM_CHUNK;
        char *w = job->weight + off * es;
        const void *g = (const char *)job->in[0] + off * es;
        void *buf[2] = { job->buf[0] ? job->buf[0] + off * ses : NULL,
                         job->buf[1] ? job->buf[1] + off * ses : NULL };
        union { float f[OPTIM_CHUNK]; double d[OPTIM_CHUNK]; uint16_t h[OPTIM_CHUNK]; } sum;
        float wf[OPTIM_CHUNK], gf[OPTIM_CHUNK];

        if (job->k > 1) {
            kvs__sum_part(job->dtype, &sum, job->in, job->k, off, n);
            g = &sum;
        }
        switch (job->dtype) {
        case KVS_FLOAT64:
            step_f64(&job->st, buf, (double *)w, g, n);
            break;
        case KVS_FLOAT32:
            step_f32(&job->st, buf, (float *)w, g, n);
            break;
        default:
            kvs__to_f32(job->dtype, wf, w, n);
            kvs__to_f32(job->dtype, gf, g, n);
            step_f32(&job->st, buf, wf, gf, n);
            kvs__from_f32(job->dtype, w, wf, n);
            break;
        }
    }
}

/* Elements [b, e) of one update whose inputs blk[] point at element b. */
static void update_block(void *arg, size_t b, size_t e, const void *const *blk)
{
    const struct update_job *job = arg;
    size_t es = kvs_dtype_size(job->dtype);
    size_t ses = job->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
    struct update_job at = *job;

    at.weight += b * es;
    at.in = blk;
    for (int i = 0; i < 2; i++)
        at.buf[i] = job->buf[i] ? job->buf[i] + b * ses : NULL;
    update_range(&at, 0, e - b);
}

/* Elements [begin, end) of an update with sources, read a block at a
 * time into f; the first failure is kept in *err. */
static void update_fetched(const struct update_job *job, size_t begin, size_t end,
                           struct kvs__fetch *f, _Atomic int *err)
{
    int rc, none = 0;

    if (atomic_load_explicit(err, memory_order_relaxed) != 0)
        return;
    rc = kvs__fetch_blocks(f, job->in, job->src, job->k, kvs_dtype_size(job->dtype), begin,
                           end, update_block, (void *)job);
    if (rc != 0)
        atomic_compare_exchange_strong(err, &none, rc);
}

void kvs__optim_update(const struct kvs__optim *o, struct kvs__optim_state *s,
                       kvs_dtype_t dtype, void *weight, const void *grad, size_t count)
{
    kvs__optim_update_sum(o, s, dtype, weight, &grad, 1, count, 1);
}

int kvs__optim_prepare(const struct kvs__optim *o, struct kvs__optim_state *s,
                       kvs_dtype_t dtype, size_t first, size_t count, int k, uint64_t step,
                       struct kvs_cuda_step *st)
{
    kvs_dtype_t want = dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32;

    if (!kvs__dtype_is_float(dtype) || s->dtype != want || first > s->count
        || count > s->count - first || s->nbuf != kvs__optim_nbuf(o) || k < 1)
        return -1;
    for (int i = 0; i < s->nbuf; i++) {
        if (count != 0 && s->buf[i] == NULL)
            return -1;
    }

    s->t = step ? step : s->t + 1;
    memset(st, 0, sizeof *st);
    st->kind = o->def->kind;
    if (st->kind == OPTIM_SGD) {
        st->mom = s->nbuf == 1;
        st->clipping = o->p[SGD_CLIP] > 0.0;
        st->lr = o->p[SGD_LR];
        st->momentum = o->p[SGD_MOMENTUM];
        st->wd = o->p[SGD_WD];
        st->rescale = o->p[SGD_RESCALE];
        st->clip = o->p[SGD_CLIP];
    } else {
        /* Adam.update in python/mxnet/optimizer/optimizer.py, in Python's
         * double precision before the kernel converts it:
         *   coef1 = 1 - beta1**t;  coef2 = 1 - beta2**t
         *   lr *= sqrt(coef2) / coef1                                    */
        double t = (double)s->t;
        double coef1 = 1.0 - pow(o->p[ADAM_BETA1], t);
        double coef2 = 1.0 - pow(o->p[ADAM_BETA2], t);
        st->clipping = o->p[ADAM_CLIP] > 0.0;
        st->lr = o->p[ADAM_LR] * (sqrt(coef2) / coef1);
        st->beta1 = o->p[ADAM_BETA1];
        st->beta2 = o->p[ADAM_BETA2];
        st->epsilon = o->p[ADAM_EPSILON];
        st->wd = o->p[ADAM_WD];
        st->rescale = o->p[ADAM_RESCALE];
        st->clip = o->p[ADAM_CLIP];
    }
    return 0;
}

/* Fixes one update's constants and counts the step in the key's state;
 * -1 for a state that does not fit the range (first, count) of its key,
 * which is then left alone (a state made for another key is the engine's
 * bug; writing past a buffer would turn it into memory corruption). */
static int update_prepare(const struct kvs__optim *o, const struct kvs__optim_item *it,
                          struct update_job *job)
{
    size_t ses = it->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);

    if (kvs__optim_prepare(o, it->s, it->dtype, it->first, it->count, it->k, it->step,
                           &job->st) != 0)
        return -1;
    job->dtype = it->dtype;
    job->weight = it->weight;
    job->in = it->in;
    job->k = it->k;
    job->src = it->src;
    for (int i = 0; i < 2; i++)
        job->buf[i] = i < it->s->nbuf ? (char *)it->s->buf[i] + it->first * ses : NULL;
    return 0;
}

/* Elements per chunk a thread takes: about a megabyte of float32 weights,
 * as sums split. */
#define UPDATE_GRAIN ((size_t)1 << 18)

void kvs__optim_update_sum(const struct kvs__optim *o, struct kvs__optim_state *s,
                           kvs_dtype_t dtype, void *weight, const void *const *in, int k,
                           size_t count, int nthreads)
{
    struct kvs__optim_item it = { .s = s, .dtype = dtype, .weight = weight, .in = in, .k = k,
                                  .count = count };

    kvs__optim_update_many(o, &it, 1, nthreads);
}

void kvs__optim_run(const struct kvs_cuda_step *st, kvs_dtype_t dtype, void *weight,
                    const void *const *in, int k, void *buf0, void *buf1, size_t count,
                    int nthreads)
{
    struct update_job job = { .st = *st, .dtype = dtype, .weight = weight, .in = in, .k = k,
                              .buf = { buf0, buf1 } };

    kvs__parallel_for(count, UPDATE_GRAIN, nthreads, update_range, &job);
}

/* The updates of many keys as one job: their elements laid end to end. */
struct many_updates {
    struct update_job *jobs;
    size_t *start;                     /* m + 1 element offsets: job i is [start[i], start[i+1]) */
    int m;
    _Atomic int err;                   /* the first source's error, or 0 */
};

/* Asks for the first PREFETCH_BYTES of job j's weight and state, which
 * a lazy update's next rows need: those rows lie far apart in a big
 * table, and each one's misses (in memory and in the TLB) then overlap
 * the work on the rows before it instead of following it (bench/NOTES.md
 * 19). */
#define PREFETCH_AHEAD 4               /* jobs */
#define PREFETCH_BYTES 512

static void prefetch_job(const struct update_job *j, size_t n)
{
    size_t bytes = n * kvs_dtype_size(j->dtype);

    if (bytes > PREFETCH_BYTES)
        bytes = PREFETCH_BYTES;
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(j->weight + o, 1);
        if (j->buf[0])
            __builtin_prefetch(j->buf[0] + o, 1);
        if (j->buf[1])
            __builtin_prefetch(j->buf[1] + o, 1);
    }
}

static void many_range(void *ctx, size_t begin, size_t end)
{
    struct many_updates *mu = ctx;
    struct kvs__fetch f = { NULL, 0 };
    int first = kvs__span_first(mu->start, mu->m, begin);

    for (int i = first; i < mu->m && i < first + PREFETCH_AHEAD && mu->start[i] < end; i++)
        prefetch_job(&mu->jobs[i], mu->start[i + 1] - mu->start[i]);
    for (int i = first; i < mu->m && mu->start[i] < end; i++) {
        size_t s = mu->start[i], n = mu->start[i + 1] - s;
        size_t b = begin > s ? begin - s : 0, e = end - s < n ? end - s : n;
        int a = i + PREFETCH_AHEAD;

        if (a < mu->m && mu->start[a] < end)
            prefetch_job(&mu->jobs[a], mu->start[a + 1] - mu->start[a]);
        if (b >= e)
            continue;
        if (mu->jobs[i].src)
            update_fetched(&mu->jobs[i], b, e, &f, &mu->err);
        else
            update_range(&mu->jobs[i], b, e);
    }
    free(f.buf);
}

/* One key's update, as a job of its own (without memory for a batch). */
static int update_one(const struct kvs__optim *o, const struct kvs__optim_item *it,
                      int nthreads)
{
    struct update_job job;
    size_t start[2] = { 0, it->count };
    struct many_updates mu = { &job, start, 1, 0 };

    if (update_prepare(o, it, &job) != 0)
        return 0;
    kvs__parallel_for(it->count, UPDATE_GRAIN, nthreads, many_range, &mu);
    return atomic_load(&mu.err);
}

int kvs__optim_update_many(const struct kvs__optim *o, const struct kvs__optim_item *items,
                           int m, int nthreads)
{
    struct many_updates mu = { .jobs = malloc(sizeof *mu.jobs * (size_t)(m > 0 ? m : 1)),
                               .start = malloc(sizeof *mu.start * (size_t)(m + 1)) };
    int rc = 0;

    if (!mu.jobs || !mu.start) {       /* without memory for the batch: one by one */
        for (int i = 0; i < m && rc == 0; i++)
            rc = update_one(o, &items[i], nthreads);
        goto out;
    }
    mu.start[0] = 0;
    for (int i = 0; i < m; i++) {
        struct update_job *job = &mu.jobs[mu.m];

        if (update_prepare(o, &items[i], job) != 0)
            continue;
        mu.start[mu.m + 1] = mu.start[mu.m] + items[i].count;
        mu.m++;
    }
    kvs__parallel_for(mu.start[mu.m], UPDATE_GRAIN, nthreads, many_range, &mu);
    rc = atomic_load(&mu.err);
out:
    free(mu.jobs);
    free(mu.start);
    return rc;
}
