/*
 * test_optim.c - unit tests of the built-in optimizers (src/kernels/optim.c): spec
 * parsing, the per-key state, MXNet's update rules checked against numbers
 * worked out by hand from the formulas, and the precision each dtype is
 * computed in. Their state file is tested in test_statefile.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/array.h"
#include "store/engine.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "optimutil.h"

/* ---- Helpers --------------------------------------------------------- */

#define assert_near(actual, expected, tol)                                      \
    do {                                                                        \
        double a_ = (actual), x_ = (expected);                                  \
        if (!(fabs(a_ - x_) <= (tol)))                                          \
            fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #actual, a_,  \
                     x_, (double)(tol));                                        \
    } while (0)

/* float32 results against decimal literals: a few float32 ulps. */
#define F32_TOL 1e-6
#define F64_TOL 1e-15

/* ---- Spec parsing ---------------------------------------------------- */

static void test_parse_defaults(void **state)
{
    struct kvs__optim *o;

    (void)state;
    o = parse_ok("sgd");
    assert_string_equal(kvs__optim_name(o), "sgd");
    assert_string_equal(kvs__optim_spec(o),
                        "sgd lr=0.01 momentum=0 wd=0 rescale_grad=1 clip_gradient=-1 "
                        "lazy_update=1");
    kvs__optim_free(o);

    o = parse_ok("adam");
    assert_string_equal(kvs__optim_name(o), "adam");
    /* The fewest digits that read back exactly: 0.9, not 0.90000000000000002. */
    assert_string_equal(kvs__optim_spec(o),
                        "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-08 "
                        "wd=0 rescale_grad=1 clip_gradient=-1 lazy_update=1");
    kvs__optim_free(o);
}

static void test_parse_values_round_trip(void **state)
{
    static const char *specs[] = {
        "sgd lr=0.1 momentum=0.9 wd=1e-4 rescale_grad=0.25 clip_gradient=5",
        "  sgd\tclip_gradient=5\t\tlr=0.1  \n",
        ("adam lr=3e-4 beta1=0.8 beta2=0.95 epsilon=1e-7 wd=0.01 rescale_grad=0.125 "
         "clip_gradient=10"),
        "adam epsilon=9.3132257461547852e-10 lr=1e-300",
        "SGD lr=1",
    };
    (void)state;

    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        struct kvs__optim *a = parse_ok(specs[i]);
        struct kvs__optim *b = parse_ok(kvs__optim_spec(a));
        /* Parsing the canonical spec gives the same optimizer, which
         * writes the same canonical spec. */
        assert_string_equal(kvs__optim_spec(a), kvs__optim_spec(b));
        assert_string_equal(kvs__optim_name(a), kvs__optim_name(b));
        kvs__optim_free(b);
        kvs__optim_free(a);
    }

    {
        struct kvs__optim *o = parse_ok("  sgd\tclip_gradient=5\t\tlr=0.1  \n");
        assert_string_equal(kvs__optim_spec(o),
                            "sgd lr=0.1 momentum=0 wd=0 rescale_grad=1 clip_gradient=5 "
                            "lazy_update=1");
        kvs__optim_free(o);
        /* Short, and still exact: 1/3 needs 16 digits. */
        o = parse_ok("sgd lr=0.33333333333333331 wd=1e-300");
        assert_string_equal(kvs__optim_spec(o),
                            "sgd lr=0.3333333333333333 momentum=0 wd=1e-300 rescale_grad=1 "
                            "clip_gradient=-1 lazy_update=1");
        kvs__optim_free(o);
        /* lazy_update is a flag, written out and parsed back. */
        o = parse_ok("adam lazy_update=0");
        assert_int_equal(kvs__optim_lazy(o), 0);
        assert_non_null(strstr(kvs__optim_spec(o), " lazy_update=0"));
        kvs__optim_free(o);
        o = parse_ok("sgd");
        assert_int_equal(kvs__optim_lazy(o), 1);
        kvs__optim_free(o);
        o = parse_ok("SGD lr=1");
        assert_string_equal(kvs__optim_name(o), "sgd");
        kvs__optim_free(o);
    }
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *spec;
        const char *part;
    } cases[] = {
        { "foo", "unknown optimizer 'foo'" },
        { "foo lr=1", "unknown optimizer 'foo'" },
        { "sgd lrx=0.1", "sgd: unknown parameter 'lrx'" },
        { "sgd lazy_update=2", "lazy_update '2' is out of range: it must be 0 or 1" },
        { "adam lazy_update=0.5", "lazy_update '0.5' is out of range" },
        { "adam momentum=0.9", "adam: unknown parameter 'momentum'" },
        { "sgd beta1=0.9", "sgd: unknown parameter 'beta1'" },
        { "sgd =0.1", "sgd: unknown parameter ''" },
        { "sgd lr=0.1 lr=0.2", "'lr' given twice" },
        { "sgd lr", "'lr' has no '=value'" },
        { "sgd lr =0.1", "'lr' has no '=value'" },
        { "", "empty" },
        { " \t ", "empty" },
        { "sgd lr=", "lr '' is not a finite decimal number" },
        { "sgd lr=abc", "lr 'abc' is not a finite decimal number" },
        { "sgd lr=0.1x", "lr '0.1x' is not a finite decimal number" },
        { "sgd lr=0.1=2", "is not a finite decimal number" },
        { "sgd wd=inf", "wd 'inf' is not a finite decimal number" },
        { "sgd wd=nan", "is not a finite decimal number" },
        { "sgd lr=0x10", "lr '0x10' is not a finite decimal number" },
        { "sgd lr=0", "lr '0' is out of range: it must be > 0" },
        { "sgd lr=-0.1", "lr '-0.1' is out of range" },
        { "sgd momentum=1", "momentum '1' is out of range: it must be in [0, 1)" },
        { "sgd momentum=-0.5", "momentum '-0.5' is out of range" },
        { "sgd wd=-1", "wd '-1' is out of range: it must be >= 0" },
        { "adam beta1=1", "beta1 '1' is out of range: it must be in [0, 1)" },
        { "adam beta2=1.5", "beta2 '1.5' is out of range" },
        { "adam epsilon=-1e-8", "epsilon '-1e-8' is out of range" },
        { "sgd lr=1e999", "is not a finite decimal number" },
        { "adam beta2=-INFINITY", "is not a finite decimal number" },
    };
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kvs__optim *o = (struct kvs__optim *)&o;   /* must be reset to NULL */
        struct kvs__err e = { 0 };
        int rc = kvs__optim_parse(cases[i].spec, &o, &e);

        if (rc != KVS_ESPEC)
            fail_msg("\"%s\": rc %d, expected KVS_ESPEC", cases[i].spec, rc);
        assert_null(o);
        assert_int_equal(e.code, KVS_ESPEC);
        if (strstr(e.msg, cases[i].part) == NULL)
            fail_msg("\"%s\": detail \"%s\" lacks \"%s\"", cases[i].spec, e.msg, cases[i].part);
    }

    {
        struct kvs__optim *o = NULL;
        struct kvs__err e = { 0 };
        assert_int_equal(kvs__optim_parse(NULL, &o, &e), KVS_EBADARG);
        assert_int_equal(kvs__optim_parse("sgd", NULL, &e), KVS_EBADARG);
        /* NULL error record: the code still comes back. */
        assert_int_equal(kvs__optim_parse("bogus", &o, NULL), KVS_ESPEC);
    }
}

/* ---- State ----------------------------------------------------------- */

static void test_state_shapes(void **state)
{
    struct kvs__optim *sgd = parse_ok("sgd");
    struct kvs__optim *mom = parse_ok("sgd momentum=0.9");
    struct kvs__optim *adam = parse_ok("adam");
    struct kvs__optim_state *s;
    (void)state;

    assert_int_equal(kvs__optim_nbuf(sgd), 0);
    assert_int_equal(kvs__optim_nbuf(mom), 1);
    assert_int_equal(kvs__optim_nbuf(adam), 2);

    s = state_ok(sgd, KVS_FLOAT32, 5);
    assert_int_equal(s->nbuf, 0);            /* MXNet keeps no state for plain sgd */
    assert_int_equal(s->dtype, KVS_FLOAT32);
    assert_int_equal(s->count, 5);
    assert_int_equal(s->t, 0);
    kvs__optim_state_free(s);

    {
        /* MXNet runs the momentum rule only for momentum > 0. */
        struct kvs__optim *neg = parse_ok("sgd momentum=0");
        s = state_ok(neg, KVS_FLOAT32, 5);
        assert_int_equal(s->nbuf, 0);
        assert_int_equal(kvs__optim_nbuf(neg), 0);
        kvs__optim_state_free(s);
        kvs__optim_free(neg);
    }

    s = state_ok(mom, KVS_FLOAT16, 4);
    assert_int_equal(s->nbuf, 1);
    assert_int_equal(s->dtype, KVS_FLOAT32);   /* half keys keep float32 state */
    for (int i = 0; i < 4; i++)
        assert_true(((float *)s->buf[0])[i] == 0.0f);
    kvs__optim_state_free(s);

    s = state_ok(adam, KVS_FLOAT64, 3);
    assert_int_equal(s->nbuf, 2);
    assert_int_equal(s->dtype, KVS_FLOAT64);
    for (int i = 0; i < 3; i++) {
        assert_true(((double *)s->buf[0])[i] == 0.0);
        assert_true(((double *)s->buf[1])[i] == 0.0);
    }
    kvs__optim_state_free(s);

    s = state_ok(adam, KVS_BFLOAT16, 0);       /* an empty key has an empty state */
    assert_int_equal(s->nbuf, 2);
    assert_int_equal(s->count, 0);
    kvs__optim_state_free(s);

    kvs__optim_state_free(NULL);
    kvs__optim_free(NULL);
    kvs__optim_free(adam);
    kvs__optim_free(mom);
    kvs__optim_free(sgd);
}

static void test_state_int_dtypes(void **state)
{
    static const kvs_dtype_t bad[] = { KVS_INT32, KVS_INT64, KVS_UINT8, (kvs_dtype_t)42 };
    struct kvs__optim *o = parse_ok("adam");
    (void)state;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kvs__optim_state *s = (struct kvs__optim_state *)&s;
        struct kvs__err e = { 0 };
        assert_int_equal(kvs__optim_state_new(o, bad[i], 4, KVS_HOST, &s, &e), KVS_EDTYPE);
        assert_null(s);
        assert_non_null(strstr(e.msg, "not a float type"));
    }
    kvs__optim_free(o);
}

/* Runs steps updates of a float32 key with the same gradient each time. */
static struct kvs__optim_state *run_f32(const char *spec, float *w, const float *g, size_t n,
                                        int steps)
{
    struct kvs__optim *o = parse_ok(spec);
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT32, n);

    for (int i = 0; i < steps; i++)
        kvs__optim_update(o, s, KVS_FLOAT32, w, g, n);
    kvs__optim_free(o);
    return s;
}

/* The weight of a one-element float32 key that starts at w and takes steps
 * updates with gradient g, for checks that need no look at the state. */
static float updated_f32(const char *spec, float w, float g, int steps)
{
    kvs__optim_state_free(run_f32(spec, &w, &g, 1, steps));
    return w;
}

/* ---- SGD ------------------------------------------------------------- */

static void test_sgd_plain(void **state)
{
    float w[2] = { 1.0f, -2.0f };
    const float g[2] = { 1.0f, 0.5f };
    struct kvs__optim_state *s;
    (void)state;

    /* w' = (1 - lr*wd)*w - lr*rescale*g, lr=0.1, wd=0
     *   w0 = 1 - 0.1*1    = 0.9
     *   w1 = -2 - 0.1*0.5 = -2.05 */
    s = run_f32("sgd lr=0.1", w, g, 2, 1);
    assert_near(w[0], 0.9, F32_TOL);
    assert_near(w[1], -2.05, F32_TOL);
    assert_int_equal(s->t, 1);
    kvs__optim_state_free(s);

    /* The default lr is 0.01: w' = 1 - 0.01*1 = 0.99 */
    assert_near(updated_f32("sgd", 1.0f, 1.0f, 1), 0.99, F32_TOL);
}

/* Float32 rounding as MXNet 1.9 rounds: its SGD sends dense weights to
 * multi_sgd_update, which computes w + (0 - (lr*wd)*w - (lr*rescale)*g),
 * not sgd_update's (1 - lr*wd)*w - (lr*rescale)*g. The two agree in real
 * arithmetic and differ in the last bit for some inputs, such as these. */
static void test_sgd_float32_rounding(void **state)
{
    float w = -0.963f;                 /* 0xbf76872b */
    const float g = -1.063f;           /* 0xbf881062 */
    uint32_t bits;
    struct kvs__optim_state *s;
    (void)state;

    /* -0.963 - 0.1*0.01*-0.963 - 0.1*-1.063 = -0.963 + 0.000963 + 0.1063 = -0.855737
     * multi_sgd_update rounds it to 0xbf5b1194 (-0.85573697);
     * sgd_update's order would give 0xbf5b1195. */
    s = run_f32("sgd lr=0.1 wd=0.01", &w, &g, 1, 1);
    memcpy(&bits, &w, sizeof bits);
    assert_int_equal(bits, 0xbf5b1194u);
    assert_near(w, -0.855737, F32_TOL);
    kvs__optim_state_free(s);
}

static void test_sgd_momentum_three_steps(void **state)
{
    struct kvs__optim *o = parse_ok("sgd lr=0.1 momentum=0.9");
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT32, 1);
    float w = 1.0f;
    const float g = 1.0f;
    /* mom = momentum*mom - lr*wd*w - lr*rescale*g; w += mom
     *   step 1: mom = 0.9*0     - 0.1*1 = -0.1;   w = 1    - 0.1   = 0.9
     *   step 2: mom = 0.9*-0.1  - 0.1   = -0.19;  w = 0.9  - 0.19  = 0.71
     *   step 3: mom = 0.9*-0.19 - 0.1   = -0.271; w = 0.71 - 0.271 = 0.439 */
    static const double mom_want[3] = { -0.1, -0.19, -0.271 };
    static const double w_want[3] = { 0.9, 0.71, 0.439 };
    (void)state;

    assert_int_equal(s->nbuf, 1);
    for (int i = 0; i < 3; i++) {
        kvs__optim_update(o, s, KVS_FLOAT32, &w, &g, 1);
        assert_near(((float *)s->buf[0])[0], mom_want[i], F32_TOL);
        assert_near(w, w_want[i], F32_TOL);
        assert_int_equal(s->t, (uint64_t)i + 1);
    }
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

static void test_sgd_weight_decay(void **state)
{
    float w = 1.0f;
    const float g = 1.0f;
    struct kvs__optim_state *s;
    (void)state;

    /* w=1, g=1, lr=0.1, wd=0.01: w' = (1 - 0.1*0.01)*1 - 0.1*1 = 0.999 - 0.1 = 0.899 */
    assert_near(updated_f32("sgd lr=0.1 wd=0.01", 1.0f, 1.0f, 1), 0.899, F32_TOL);

    /* With momentum 0.5, two steps:
     *   step 1: mom = 0.5*0 - 0.1*0.01*1 - 0.1*1 = -0.101;  w = 1 - 0.101 = 0.899
     *   step 2: mom = 0.5*-0.101 - 0.001*0.899 - 0.1
     *               = -0.0505 - 0.000899 - 0.1 = -0.151399; w = 0.899 - 0.151399 = 0.747601 */
    s = run_f32("sgd lr=0.1 wd=0.01 momentum=0.5", &w, &g, 1, 2);
    assert_near(((float *)s->buf[0])[0], -0.151399, F32_TOL);
    assert_near(w, 0.747601, F32_TOL);
    kvs__optim_state_free(s);
}

static void test_sgd_rescale_grad(void **state)
{
    (void)state;

    /* w' = 1 - (0.1*0.5)*4 = 1 - 0.2 = 0.8 */
    assert_near(updated_f32("sgd lr=0.1 rescale_grad=0.5", 1.0f, 4.0f, 1), 0.8, F32_TOL);

    /* momentum: mom = 0 - 0.1*0.5*4 = -0.2; w = 1 - 0.2 = 0.8 */
    assert_near(updated_f32("sgd lr=0.1 rescale_grad=0.5 momentum=0.9", 1.0f, 4.0f, 1), 0.8,
                F32_TOL);
}

static void test_sgd_clip_gradient(void **state)
{
    float w[3] = { 1.0f, 1.0f, 1.0f };
    const float g[3] = { 3.0f, -3.0f, 0.25f };
    float w2 = 10.0f;
    const float g2 = 3.0f;
    struct kvs__optim_state *s;
    (void)state;

    /* Rescale first, then clip: rescale*g = {6, -6, 0.5} -> clip(1) = {1, -1, 0.5}
     *   w' = 1 - 0.1*{1, -1, 0.5} = {0.9, 1.1, 0.95} */
    s = run_f32("sgd lr=0.1 rescale_grad=2 clip_gradient=1", w, g, 3, 1);
    assert_near(w[0], 0.9, F32_TOL);
    assert_near(w[1], 1.1, F32_TOL);
    assert_near(w[2], 0.95, F32_TOL);
    kvs__optim_state_free(s);

    /* Weight decay stays outside the clip in sgd: w=10, g=3, lr=0.1, wd=0.1, clip=1
     *   w' = (1 - 0.1*0.1)*10 - 0.1*clip(3) = 9.9 - 0.1*1 = 9.8
     * (clipping g + wd*w = 4 instead would give 10 - 0.1*1 = 9.9) */
    assert_near(updated_f32("sgd lr=0.1 wd=0.1 clip_gradient=1", w2, g2, 1), 9.8, 4 * F32_TOL);

    /* Same with momentum: mom = 0 - 0.1*0.1*10 - 0.1*1 = -0.2; w = 10 - 0.2 = 9.8 */
    s = run_f32("sgd lr=0.1 wd=0.1 clip_gradient=1 momentum=0.9", &w2, &g2, 1, 1);
    assert_near(((float *)s->buf[0])[0], -0.2, F32_TOL);
    assert_near(w2, 9.8, 4 * F32_TOL);
    kvs__optim_state_free(s);

    /* clip_gradient=0 is "off", as in MXNet's Python optimizer (falsy):
     *   w' = 1 - 0.1*3 = 0.7 */
    assert_near(updated_f32("sgd lr=0.1 clip_gradient=0", 1.0f, g[0], 1), 0.7, F32_TOL);
}

/* ---- Adam ------------------------------------------------------------ */

static void test_adam_three_steps(void **state)
{
    struct kvs__optim *o = parse_ok("adam lr=0.1 beta1=0.5 beta2=0.75 epsilon=0");
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT32, 1);
    float w = 1.0f;
    static const float g[3] = { 2.0f, 1.0f, 4.0f };
    /*
     * mean = b1*mean + (1-b1)*g; var = b2*var + (1-b2)*g*g
     * lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t);  w -= lr_t*mean/(sqrt(var) + eps)
     * t=1, g=2: mean = 0.5*0 + 0.5*2 = 1;  var = 0.75*0 + 0.25*4  = 1
     *           lr_t = 0.1*sqrt(0.25)/0.5 = 0.1;         w = 1 - 0.1*1/1 = 0.9
     * t=2, g=1: mean = 0.5*1 + 0.5*1 = 1;  var = 0.75*1 + 0.25*1  = 1
     *           lr_t = 0.1*sqrt(1-0.5625)/(1-0.25) = 0.1*0.66143782776/0.75
     *                = 0.0881917103688;                  w = 0.9 - 0.0881917103688
     *                                                      = 0.8118082896312
     * t=3, g=4: mean = 0.5*1 + 0.5*4 = 2.5; var = 0.75*1 + 0.25*16 = 4.75
     *           lr_t = 0.1*sqrt(1-0.421875)/(1-0.125) = 0.1*0.76034531629/0.875
     *                = 0.0868966075757
     *           w = 0.8118082896312 - 0.0868966075757*2.5/2.17944947177
     *             = 0.8118082896312 - 0.0996772449892 = 0.7121310446420
     * (without bias correction t=2 would step by 0.1*1/1 = 0.1 after mean
     * and var of 1 as well, but t=3 would step 0.1*2.5/2.179 = 0.1147)
     */
    static const double mean_want[3] = { 1.0, 1.0, 2.5 };
    static const double var_want[3] = { 1.0, 1.0, 4.75 };
    static const double w_want[3] = { 0.9, 0.8118082896312, 0.7121310446420 };
    (void)state;

    for (int i = 0; i < 3; i++) {
        kvs__optim_update(o, s, KVS_FLOAT32, &w, &g[i], 1);
        assert_int_equal(s->t, (uint64_t)i + 1);
        assert_near(((float *)s->buf[0])[0], mean_want[i], F32_TOL);
        assert_near(((float *)s->buf[1])[0], var_want[i], F32_TOL);
        assert_near(w, w_want[i], F32_TOL);
    }
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

static void test_adam_defaults_two_steps(void **state)
{
    struct kvs__optim *o = parse_ok("adam");
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT32, 1);
    float w = 1.0f;
    static const float g[2] = { 0.5f, -0.25f };
    (void)state;

    /* lr=0.001, b1=0.9, b2=0.999, eps=1e-8
     * t=1: mean = 0.1*0.5 = 0.05; var = 0.001*0.25 = 0.00025
     *      lr_t = 0.001*sqrt(0.001)/0.1 = 3.16227766e-4
     *      w = 1 - 3.16227766e-4*0.05/(0.0158113883 + 1e-8) = 1 - 9.9999937e-4
     *        = 0.99900000063 */
    /* The state is float32 and so are MXNet's 1 - beta1 and 1 - beta2:
     * 1 - 0.9f and 1 - 0.999f are off by 2.4e-7 and 1.3e-5 relative, so
     * mean and var are checked to that. */
    kvs__optim_update(o, s, KVS_FLOAT32, &w, &g[0], 1);
    assert_near(((float *)s->buf[0])[0], 0.05, 1e-7);
    assert_near(((float *)s->buf[1])[0], 0.00025, 1e-8);
    assert_near(w, 0.99900000063, F32_TOL);

    /* t=2: mean = 0.9*0.05 + 0.1*-0.25 = 0.045 - 0.025 = 0.02
     *      var  = 0.999*0.00025 + 0.001*0.0625 = 0.00024975 + 0.0000625 = 0.00031225
     *      lr_t = 0.001*sqrt(1-0.998001)/(1-0.81) = 0.001*0.0447101778/0.19
     *           = 2.35316725e-4
     *      w = 0.99900000063 - 2.35316725e-4*0.02/(0.0176705970 + 1e-8)
     *        = 0.99900000063 - 2.6633689e-4 = 0.99873366374 */
    kvs__optim_update(o, s, KVS_FLOAT32, &w, &g[1], 1);
    assert_near(((float *)s->buf[0])[0], 0.02, 1e-7);
    assert_near(((float *)s->buf[1])[0], 0.00031225, 1e-8);
    assert_near(w, 0.99873366374, F32_TOL);
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

static void test_adam_wd_inside_clip(void **state)
{
    float w = 2.0f;
    const float g = 0.25f;
    struct kvs__optim_state *s;
    (void)state;

    /* Adam adds weight decay before clipping: w=2, g=0.25, rescale=2, wd=0.5, clip=1
     *   gr = 0.25*2 + 2*0.5 = 1.5 -> clip -> 1
     *   mean = 0.5*1 = 0.5; var = 0.25*1*1 = 0.25   (b1=0.5, b2=0.75)
     *   lr_t = 0.1*sqrt(0.25)/0.5 = 0.1; w = 2 - 0.1*0.5/0.5 = 1.9
     * (clipping before adding wd would give gr = 0.5 + 1 = 1.5, mean 0.75) */
    s = run_f32("adam lr=0.1 beta1=0.5 beta2=0.75 epsilon=0 wd=0.5 rescale_grad=2 "
                "clip_gradient=1", &w, &g, 1, 1);
    assert_near(((float *)s->buf[0])[0], 0.5, F32_TOL);
    assert_near(((float *)s->buf[1])[0], 0.25, F32_TOL);
    assert_near(w, 1.9, F32_TOL);
    kvs__optim_state_free(s);

    /* No clipping: gr = 1.5; mean = 0.75; var = 0.25*2.25 = 0.5625;
     *   w = 2 - 0.1*0.75/0.75 = 1.9 */
    w = 2.0f;
    s = run_f32("adam lr=0.1 beta1=0.5 beta2=0.75 epsilon=0 wd=0.5 rescale_grad=2", &w, &g, 1,
                1);
    assert_near(((float *)s->buf[0])[0], 0.75, F32_TOL);
    assert_near(((float *)s->buf[1])[0], 0.5625, F32_TOL);
    assert_near(w, 1.9, F32_TOL);
    kvs__optim_state_free(s);
}

/* ---- Precision per dtype --------------------------------------------- */

static void test_float64_path(void **state)
{
    struct kvs__optim *o = parse_ok("sgd lr=0.1 momentum=0.9");
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT64, 1);
    double w = 1.0;
    const double g = 1.0;
    static const double w_want[3] = { 0.9, 0.71, 0.439 };   /* as the float32 test */
    (void)state;

    assert_int_equal(s->dtype, KVS_FLOAT64);
    for (int i = 0; i < 3; i++) {
        kvs__optim_update(o, s, KVS_FLOAT64, &w, &g, 1);
        assert_near(w, w_want[i], F64_TOL);
    }
    assert_near(((double *)s->buf[0])[0], -0.271, F64_TOL);
    kvs__optim_state_free(s);
    kvs__optim_free(o);

    /* Double precision really: 1 - 1*1e-10 = 0.9999999999, which float32
     * cannot tell from 1. */
    o = parse_ok("sgd lr=1");
    s = state_ok(o, KVS_FLOAT64, 1);
    {
        double wd = 1.0, gd = 1e-10;
        float wf = 1.0f, gf = 1e-10f;
        struct kvs__optim_state *sf = state_ok(o, KVS_FLOAT32, 1);

        kvs__optim_update(o, s, KVS_FLOAT64, &wd, &gd, 1);
        assert_near(wd, 0.9999999999, 1e-16);
        kvs__optim_update(o, sf, KVS_FLOAT32, &wf, &gf, 1);
        assert_true(wf == 1.0f);
        kvs__optim_state_free(sf);
    }
    kvs__optim_state_free(s);
    kvs__optim_free(o);

    /* Adam in float64, the first float32 case's numbers to 1e-15. */
    o = parse_ok("adam lr=0.1 beta1=0.5 beta2=0.75 epsilon=0");
    s = state_ok(o, KVS_FLOAT64, 1);
    {
        static const double gs[3] = { 2.0, 1.0, 4.0 };
        /* 0.9, then 0.9 - 0.1*sqrt(0.4375)/0.75, then minus
         * 0.1*sqrt(0.578125)/0.875 * 2.5/sqrt(4.75), to 17 digits */
        static const double want[3] = { 0.9, 0.81180828963118035, 0.71213104464198596 };
        w = 1.0;
        for (int i = 0; i < 3; i++) {
            kvs__optim_update(o, s, KVS_FLOAT64, &w, &gs[i], 1);
            assert_near(w, want[i], 4e-16);
        }
    }
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

static void test_float16_path(void **state)
{
    struct kvs__optim *o = parse_ok("sgd lr=0.1 momentum=0.9");
    struct kvs__optim_state *s = state_ok(o, KVS_FLOAT16, 4);
    /* w = {1, -2, 0.5, 3}, g = {0.5, 1, -0.25, 0.0999755859375 (f16 of 0.1)} */
    uint16_t w[4] = { 0x3c00, 0xc000, 0x3800, 0x4200 };
    const uint16_t g[4] = { 0x3800, 0x3c00, 0xb400, 0x2e66 };
    /*
     * Step 1, in float32: mom = -0.1*g = {-0.05, -0.1, 0.025, -0.00999756}
     *   w + mom = {0.95, -2.1, 0.525, 2.99000244}, each rounded once to half:
     *   0.95 -> 0.9501953125 (0x3b9a), -2.1 -> -2.099609375 (0xc033),
     *   0.525 -> 0.52490234375 (0x3833), 2.99000244 -> 2.990234375 (0x41fb)
     * Step 2: mom = 0.9*mom - 0.1*g = -0.19*g = {-0.095, -0.19, 0.0475, -0.0189954}
     *   w + mom = {0.8551953, -2.2896094, 0.5724023, 2.9712391} ->
     *   0.85498046875 (0x3ad7), -2.2890625 (0xc094), 0.572265625 (0x3894),
     *   2.970703125 (0x41f1)
     */
    static const uint16_t want1[4] = { 0x3b9a, 0xc033, 0x3833, 0x41fb };
    static const uint16_t want2[4] = { 0x3ad7, 0xc094, 0x3894, 0x41f1 };
    static const double mom2[4] = { -0.095, -0.19, 0.0475, -0.019 * 0.999755859375 };
    (void)state;

    kvs__optim_update(o, s, KVS_FLOAT16, w, g, 4);
    assert_memory_equal(w, want1, sizeof want1);
    /* The momentum is float32, never rounded to half: -0.05 stays -0.05
     * (half would make it -0.0499878). */
    assert_near(((float *)s->buf[0])[0], -0.05, 1e-9);
    kvs__optim_update(o, s, KVS_FLOAT16, w, g, 4);
    assert_memory_equal(w, want2, sizeof want2);
    for (int i = 0; i < 4; i++)
        assert_near(((float *)s->buf[0])[i], mom2[i], 1e-8);
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

static void test_bfloat16_path(void **state)
{
    struct kvs__optim *o = parse_ok("sgd lr=0.5");
    struct kvs__optim_state *s = state_ok(o, KVS_BFLOAT16, 3);
    /* w = {1, 3, -0.5}; g = {0.010009765625, 0.333984375, 0.25} (bf16 of 0.01, 1/3) */
    uint16_t w[3] = { 0x3f80, 0x4040, 0xbf00 };
    const uint16_t g[3] = { 0x3c24, 0x3eab, 0x3e80 };
    /* w' = w - 0.5*g = {0.994995117, 2.833007813, -0.625}, rounded to bfloat16:
     *   0.994995117 -> 0.99609375 (0x3f7f), 2.833007813 -> 2.828125 (0x4035),
     *   -0.625 (0xbf20) exact */
    static const uint16_t want[3] = { 0x3f7f, 0x4035, 0xbf20 };
    (void)state;

    kvs__optim_update(o, s, KVS_BFLOAT16, w, g, 3);
    assert_memory_equal(w, want, sizeof want);
    kvs__optim_state_free(s);
    kvs__optim_free(o);
}

/* Half keys longer than one conversion chunk: every element must see its
 * own state, as in the float32 path (float32 of a half is exact, so the
 * float32 path on the widened values is the reference). */
static void test_float16_long_key(void **state)
{
    enum { N = 1000 };
    struct kvs__optim *o = parse_ok("adam lr=0.01 wd=0.001");
    struct kvs__optim_state *sh = state_ok(o, KVS_FLOAT16, N);
    struct kvs__optim_state *sf = state_ok(o, KVS_FLOAT32, N);
    uint16_t wh[N], gh[N];
    float wf[N], gf[N];
    (void)state;

    for (int i = 0; i < N; i++) {
        wh[i] = kvs__f32_to_f16((float)(i % 17) * 0.125f - 1.0f);
        gh[i] = kvs__f32_to_f16((float)((i * 7) % 13) * 0.0625f - 0.375f);
        wf[i] = kvs__f16_to_f32(wh[i]);
        gf[i] = kvs__f16_to_f32(gh[i]);
    }
    for (int step = 0; step < 3; step++) {
        kvs__optim_update(o, sh, KVS_FLOAT16, wh, gh, N);
        kvs__optim_update(o, sf, KVS_FLOAT32, wf, gf, N);
        for (int i = 0; i < N; i++) {
            /* The same float32 state; the weight differs only by the
             * rounding of each step's result to half. */
            assert_true(wh[i] == kvs__f32_to_f16(wf[i]));
            wf[i] = kvs__f16_to_f32(wh[i]);
        }
        assert_memory_equal(sh->buf[0], sf->buf[0], N * sizeof(float));
        assert_memory_equal(sh->buf[1], sf->buf[1], N * sizeof(float));
    }
    kvs__optim_state_free(sf);
    kvs__optim_state_free(sh);
    kvs__optim_free(o);
}

/* ---- Updates of a sum, over threads ---------------------------------- */

/* An element's value, exact in every float dtype: small multiples of 1/8. */
static double pattern(size_t i, int j)
{
    return (double)(int)((i * 7 + (size_t)j * 13) % 17) / 8.0 - 1.0;
}

static void fill(kvs_dtype_t dtype, void *p, size_t n, int j)
{
    for (size_t i = 0; i < n; i++) {
        double v = pattern(i, j);

        switch (dtype) {
        case KVS_FLOAT64:  ((double *)p)[i] = v; break;
        case KVS_FLOAT32:  ((float *)p)[i] = (float)v; break;
        case KVS_FLOAT16:  ((uint16_t *)p)[i] = kvs__f32_to_f16((float)v); break;
        default:           ((uint16_t *)p)[i] = kvs__f32_to_bf16((float)v); break;
        }
    }
}

/* A source over an array of this process (ctx), as kvsd's reads of a
 * worker's memory. */
static int mem_read(const void *ctx, size_t off, void *buf, size_t len)
{
    memcpy(buf, (const unsigned char *)ctx + off, len);
    return 0;
}

/* kvs__optim_update_sum and kvs__optim_update_many against kvs__sum into a
 * buffer then kvs__optim_update: the same bits, for every float dtype, sgd
 * with and without momentum and adam, keys big enough to be split over
 * threads and keys of a few elements, three steps each; and
 * kvs__optim_update_many with an input read through a source (array.h),
 * a block at a time, as kvsd reads a worker's memory. */
static void test_update_sum_same_bits(void **state)
{
    static const char *const specs[] = { "sgd lr=0.1 wd=0.01", "sgd lr=0.1 momentum=0.9",
                                         "adam lr=0.01 wd=0.001 clip_gradient=0.5" };
    static const kvs_dtype_t dtypes[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16 };
    enum { K = 3, KEYS = 3 };
    const size_t counts[KEYS] = { (size_t)3 << 18, 5, 1 };   /* 786,432: several chunks */

    (void)state;
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        for (size_t di = 0; di < sizeof dtypes / sizeof *dtypes; di++) {
            kvs_dtype_t dt = dtypes[di];
            size_t es = kvs_dtype_size(dt);
            struct kvs__optim *o = parse_ok(specs[si]);
            void *w[4][KEYS], *in[KEYS][K], *sum = malloc(counts[0] * es);
            struct kvs__optim_state *st[4][KEYS];
            struct kvs__optim_item items[KEYS], fetched[KEYS];
            struct kvs__source src[KEYS][K];
            const void *part[KEYS][K];

            assert_non_null(sum);
            for (int key = 0; key < KEYS; key++) {
                for (int way = 0; way < 4; way++) {
                    w[way][key] = malloc(counts[key] * es);
                    assert_non_null(w[way][key]);
                    fill(dt, w[way][key], counts[key], 99);
                    st[way][key] = state_ok(o, dt, counts[key]);
                }
                for (int j = 0; j < K; j++) {
                    in[key][j] = malloc(counts[key] * es);
                    assert_non_null(in[key][j]);
                    fill(dt, in[key][j], counts[key], j + key);
                    part[key][j] = j == 1 ? NULL : in[key][j];
                    src[key][j] = (struct kvs__source){ j == 1 ? mem_read : NULL, in[key][j] };
                }
            }
            for (int step = 0; step < 3; step++) {
                for (int key = 0; key < KEYS; key++) {
                    const void *const *ins = (const void *const *)in[key];

                    kvs__sum(dt, sum, ins, K, counts[key], 1);
                    kvs__optim_update(o, st[0][key], dt, w[0][key], sum, counts[key]);
                    kvs__optim_update_sum(o, st[1][key], dt, w[1][key], ins, K, counts[key], 2);
                    items[key] = (struct kvs__optim_item){ st[2][key], dt, w[2][key], ins, K,
                                                           counts[key], 0, 0, NULL };
                    fetched[key] = (struct kvs__optim_item){ st[3][key], dt, w[3][key],
                                                             part[key], K, counts[key], 0, 0,
                                                             src[key] };
                }
                assert_int_equal(kvs__optim_update_many(o, items, KEYS, 2), 0);
                assert_int_equal(kvs__optim_update_many(o, fetched, KEYS, 2), 0);
            }
            for (int key = 0; key < KEYS; key++) {
                if (memcmp(w[0][key], w[1][key], counts[key] * es) != 0 ||
                    memcmp(w[0][key], w[2][key], counts[key] * es) != 0 ||
                    memcmp(w[0][key], w[3][key], counts[key] * es) != 0)
                    fail_msg("%s, %s, key %d: the updates of a sum differ",
                             specs[si], kvs_dtype_name(dt), key);
                for (int way = 0; way < 4; way++) {
                    free(w[way][key]);
                    kvs__optim_state_free(st[way][key]);
                }
                for (int j = 0; j < K; j++)
                    free(in[key][j]);
            }
            free(sum);
            kvs__optim_free(o);
        }
    }
}

/* kvsd's hosts each update one range of a big key: engines that push
 * ranges [0, 520) and [520, 1001) of a float16 key under adam, three times,
 * end with exactly what one engine pushing the whole key has, range by
 * range (a float16 key keeps a float32 state); so does a fourth engine
 * pushing both ranges, in either order, as one step each time (its state
 * counting 3 steps, not 6). Range pushes past the key, or under an
 * updater, are refused and change nothing. */
static int nop_updater(kvs_key_t key, const kvs_array_t *in, kvs_array_t *stored, void *ctx)
{
    (void)key, (void)in, (void)stored, (void)ctx;
    return 0;
}

static void test_engine_range_push(void **state)
{
    enum { N = 1001, CUT = 520 };
    struct kvs__engine *eng[4];
    struct kvs__entry_info info[4];
    struct kvs__err e;
    kvs_key_t k = KVS_INT_KEY(1);
    uint16_t w[N], g[N], out[4][N];
    kvs_array_t a = { .data = w, .dtype = KVS_FLOAT16, .ndim = 1, .shape = { N } };

    (void)state;
    for (int i = 0; i < N; i++)
        w[i] = kvs__f32_to_f16((float)(i % 13) * 0.5f);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(kvs__engine_new(NULL, &eng[j], &e), 0);
        assert_int_equal(kvs__engine_init(eng[j], 1, &k, &a, 0, &e), 0);
        assert_int_equal(kvs__engine_set_optimizer(eng[j], "adam lr=0.1", &e), 0);
        assert_int_equal(kvs__engine_lookup(eng[j], k, &info[j], &e), 0);
    }
    for (int step = 0; step < 3; step++) {
        const void *in[1] = { g };
        const void *lo[1] = { g }, *hi[1] = { g + CUT };
        struct kvs__push_item whole = { info[0].entry, 1, in, NULL, NULL, NULL };
        struct kvs__push_item first = { info[1].entry, 1, lo, NULL, NULL, NULL };
        struct kvs__push_item second = { info[2].entry, 1, hi, NULL, NULL, NULL };
        struct kvs__push_item both_lo = { info[3].entry, 1, lo, NULL, NULL, NULL };
        struct kvs__push_item both_hi = { info[3].entry, 1, hi, NULL, NULL, NULL };
        uint64_t next = kvs__engine_steps(eng[3], info[3].entry) + 1;

        for (int i = 0; i < N; i++)
            g[i] = kvs__f32_to_f16((float)((i * 7 + step) % 5) - 2.0f);
        assert_int_equal(kvs__engine_push_entries(eng[0], 1, &whole, &e), 0);
        assert_int_equal(kvs__engine_push_range(eng[1], &first, 0, CUT, 0, &e), 0);
        assert_int_equal(kvs__engine_push_range(eng[2], &second, CUT, N - CUT, 0, &e), 0);
        if (step == 1) {
            assert_int_equal(kvs__engine_push_range(eng[3], &both_hi, CUT, N - CUT, next, &e), 0);
            assert_int_equal(kvs__engine_push_range(eng[3], &both_lo, 0, CUT, next, &e), 0);
        } else {
            assert_int_equal(kvs__engine_push_range(eng[3], &both_lo, 0, CUT, next, &e), 0);
            assert_int_equal(kvs__engine_push_range(eng[3], &both_hi, CUT, N - CUT, next, &e), 0);
        }
    }
    assert_int_equal(kvs__engine_steps(eng[3], info[3].entry), 3);
    assert_int_equal(kvs__engine_steps(eng[1], info[1].entry), 3);
    for (int j = 0; j < 4; j++) {
        kvs_array_t o = a;

        o.data = out[j];
        assert_int_equal(kvs__engine_pull(eng[j], 1, &k, &o, &e), 0);
    }
    assert_memory_equal(out[1], out[0], CUT * sizeof w[0]);
    assert_memory_equal(out[2] + CUT, out[0] + CUT, (N - CUT) * sizeof w[0]);
    assert_memory_equal(out[1] + CUT, w + CUT, (N - CUT) * sizeof w[0]);   /* untouched */
    assert_memory_equal(out[3], out[0], N * sizeof w[0]);
    {
        const void *in[1] = { g };
        struct kvs__push_item it = { info[1].entry, 1, in, NULL, NULL, NULL };

        assert_int_equal(kvs__engine_push_range(eng[1], &it, CUT, N - CUT + 1, 0, &e),
                         KVS_EBADARG);
        assert_non_null(strstr(e.msg, "range"));
        kvs__engine_set_updater(eng[1], nop_updater, NULL);
        assert_int_equal(kvs__engine_push_range(eng[1], &it, 0, CUT, 0, &e), KVS_EBADARG);
        assert_non_null(strstr(e.msg, "updater"));
    }
    for (int j = 0; j < 4; j++)
        kvs__engine_free(eng[j]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_defaults),
        cmocka_unit_test(test_parse_values_round_trip),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_state_shapes),
        cmocka_unit_test(test_state_int_dtypes),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_float32_rounding),
        cmocka_unit_test(test_sgd_momentum_three_steps),
        cmocka_unit_test(test_sgd_weight_decay),
        cmocka_unit_test(test_sgd_rescale_grad),
        cmocka_unit_test(test_sgd_clip_gradient),
        cmocka_unit_test(test_adam_three_steps),
        cmocka_unit_test(test_adam_defaults_two_steps),
        cmocka_unit_test(test_adam_wd_inside_clip),
        cmocka_unit_test(test_float64_path),
        cmocka_unit_test(test_float16_path),
        cmocka_unit_test(test_bfloat16_path),
        cmocka_unit_test(test_float16_long_key),
        cmocka_unit_test(test_update_sum_same_bits),
        cmocka_unit_test(test_engine_range_push),
    };

    return cmocka_run_group_tests_name("optim", tests, NULL, NULL);
}
