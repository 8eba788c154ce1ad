/*
 * test_api_update.c - behaviour tests of the update rules of the public API
 * (kvs.h) on the in-process "local" store: what a push does to the stored
 * value under an updater callback and under the built-in optimizers (SGD
 * with momentum, Adam, checked against MXNet's formulas), and gradient
 * compression. After each failing call the store is checked to be exactly
 * as it was. The store basics are test_api.c's; saving and loading
 * optimizer states, test_api_states.c's. Uses only kvs.h; knows nothing
 * of the library's insides.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------- */

static void expect_near_at(const float *got, const double *want, size_t n, double tol, int line)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("line %d: element %zu: got %.9g, want %.9g (+-%g)", line, i,
                     (double)got[i], want[i], tol);
}
#define EXPECT_NEAR(got, want, n, tol) expect_near_at((got), (want), (n), (tol), __LINE__)

/* ---- updater ---------------------------------------------------------- */

struct call_log {
    int n;
    int64_t key[16];
    char name[16][32];
    float in0[16];
    float st0[16];
    int bad;        /* a check inside the callback failed */
    int fail_key;   /* return non-zero for this key id (-1: never) */
    void *expect_ctx;
    void *ctx_seen;
};

static int logging_updater(kvs_key_t key, const kvs_array_t *in, kvs_array_t *st, void *ctx)
{
    struct call_log *log = ctx;
    size_t n = 1;
    log->ctx_seen = ctx;
    if (in == NULL || st == NULL || in->dtype != st->dtype || in->ndim != st->ndim ||
        in->device != KVS_HOST || st->device != KVS_HOST) {
        log->bad = 1;
        return 0;
    }
    for (int d = 0; d < st->ndim; d++) {
        if (in->shape[d] != st->shape[d])
            log->bad = 1;
        n *= (size_t)st->shape[d];
    }
    if (log->n < 16) {
        log->key[log->n] = key.id;
        snprintf(log->name[log->n], sizeof log->name[0], "%s", key.name ? key.name : "(int)");
        if (st->dtype == KVS_FLOAT32) {
            log->in0[log->n] = ((const float *)in->data)[0];
            log->st0[log->n] = ((const float *)st->data)[0];
        }
    }
    log->n++;
    if (st->dtype == KVS_FLOAT32)
        for (size_t i = 0; i < n; i++)
            ((float *)st->data)[i] += 10.0f * ((const float *)in->data)[i];
    if (key.name == NULL && key.id == log->fail_key)
        return -1;
    return 0;
}

static void test_updater_once_per_key_in_order(void **state)
{
    kvs_t *kv = new_store("local");
    struct call_log log = { .fail_key = -1 };
    const float one = 1, two = 2, three = 3;
    float out;
    (void)state;
    OK(kvs_init(kv, 3, (kvs_key_t[]){ IK(5), IK(7), IK(9) },
                (kvs_array_t[]){ ARR(&one, KVS_FLOAT32, 0, 0), ARR(&two, KVS_FLOAT32, 0, 0),
                                 ARR(&three, KVS_FLOAT32, 0, 0) }));
    OK(kvs_set_updater(kv, logging_updater, &log));
    /* keys 7, 5, 7, 9, 5: updater(7, 1+3), updater(5, 2+3), updater(9, 1) */
    OK(kvs_push(kv, 5, (kvs_key_t[]){ IK(7), IK(5), IK(7), IK(9), IK(5) },
                (kvs_array_t[]){ ARR(&one, KVS_FLOAT32, 0, 0), ARR(&two, KVS_FLOAT32, 0, 0),
                                 ARR(&three, KVS_FLOAT32, 0, 0), ARR(&one, KVS_FLOAT32, 0, 0),
                                 ARR(&three, KVS_FLOAT32, 0, 0) },
                0));
    assert_false(log.bad);
    assert_ptr_equal(log.ctx_seen, &log);
    assert_int_equal(log.n, 3);
    assert_int_equal(log.key[0], 7);
    assert_int_equal(log.key[1], 5);
    assert_int_equal(log.key[2], 9);
    assert_string_equal(log.name[0], "(int)");
    assert_true(log.in0[0] == 4 && log.in0[1] == 5 && log.in0[2] == 1);
    assert_true(log.st0[0] == 2 && log.st0[1] == 1 && log.st0[2] == 3);
    /* stored += 10 * input */
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(7) }, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0));
    assert_true(out == 42);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0));
    assert_true(out == 51);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(9) }, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0));
    assert_true(out == 13);
    /* pull does not call it */
    assert_int_equal(log.n, 3);
    kvs_close(kv);
}

static void test_updater_string_key_name(void **state)
{
    kvs_t *kv = new_store("local");
    struct call_log log = { .fail_key = -1 };
    const float v[2] = { 1, 2 };
    float out[2];
    char name[16];
    (void)state;
    OK(kvs_init(kv, 2, (kvs_key_t[]){ SK("weight"), SK("bias") },
                (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 2), ARR(v, KVS_FLOAT32, 1, 2) }));
    OK(kvs_set_updater(kv, logging_updater, &log));
    snprintf(name, sizeof name, "bias");
    OK(kvs_push(kv, 2, (kvs_key_t[]){ SK(name), SK("weight") },
                (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 2), ARR(v, KVS_FLOAT32, 1, 2) }, 0));
    assert_false(log.bad);
    assert_int_equal(log.n, 2);
    assert_string_equal(log.name[0], "bias");
    assert_string_equal(log.name[1], "weight");
    PULL_F32(kv, SK("bias"), out, 1, 2);
    EXPECT_F32(out, ((const float[]){ 11, 22 }), 2);
    kvs_close(kv);
}

static void test_updater_failure_changes_nothing(void **state)
{
    kvs_t *kv = *state;
    struct call_log log = { .fail_key = 7 };
    const float t3[6] = { 1, 1, 1, 1, 1, 1 }, t5[4] = { 1, 1, 1, 1 };
    const int32_t t7[4] = { 1, 1, 1, 1 };
    float out[6];

    OK(kvs_set_updater(kv, logging_updater, &log));
    /* keys 3 and 5 run before key 7 fails: all three stay as they were */
    EXPECT_FAIL(kv, kvs_push(kv, 3, (kvs_key_t[]){ IK(3), IK(5), IK(7) },
                             (kvs_array_t[]){ ARR(t3, KVS_FLOAT32, 2, 2, 3),
                                              ARR(t5, KVS_FLOAT32, 1, 4),
                                              ARR(t7, KVS_INT32, 2, 2, 2) },
                             0),
                KVS_EUPDATER, NULL);
    assert_true(log.n >= 3);
    assert_int_equal(log.key[0], 3);
    assert_int_equal(log.key[1], 5);
    assert_int_equal(log.key[2], 7);
    /* pushpull: the same, and no out is written */
    {
        float o3[6], o5[4];
        int32_t o7[4];
        memset(o3, SENTINEL, sizeof o3);
        memset(o5, SENTINEL, sizeof o5);
        memset(o7, SENTINEL, sizeof o7);
        EXPECT_FAIL(kv, kvs_pushpull(kv, 3, (kvs_key_t[]){ IK(3), IK(5), IK(7) },
                                     (kvs_array_t[]){ ARR(t3, KVS_FLOAT32, 2, 2, 3),
                                                      ARR(t5, KVS_FLOAT32, 1, 4),
                                                      ARR(t7, KVS_INT32, 2, 2, 2) },
                                     (kvs_array_t[]){ ARR(o3, KVS_FLOAT32, 2, 2, 3),
                                                      ARR(o5, KVS_FLOAT32, 1, 4),
                                                      ARR(o7, KVS_INT32, 2, 2, 2) },
                                     0),
                    KVS_EUPDATER, NULL);
        EXPECT_UNTOUCHED(o3, sizeof o3);
        EXPECT_UNTOUCHED(o5, sizeof o5);
        EXPECT_UNTOUCHED(o7, sizeof o7);
    }
    /* the same keys again without the failing one: applied once, from the
     * untouched values */
    log.n = 0;
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                (kvs_array_t[]){ ARR(t3, KVS_FLOAT32, 2, 2, 3), ARR(t5, KVS_FLOAT32, 1, 4) }, 0));
    assert_int_equal(log.n, 2);
    PULL_F32(kv, IK(3), out, 2, 2, 3);
    EXPECT_F32(out, ((const float[]){ 11, 12, 13, 14, 15, 16 }), 6);
    PULL_F32(kv, IK(5), out, 1, 4);
    EXPECT_F32(out, ((const float[]){ 20, 30, 40, 50 }), 4);
}

static void test_updater_null_restores_assign(void **state)
{
    kvs_t *kv = *state;
    int calls = 0;
    const float t5[4] = { 1, 2, 3, 4 };
    float out[4];
    OK(kvs_set_updater(kv, add_f32, &calls));
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(t5, KVS_FLOAT32, 1, 4) }, 0));
    assert_int_equal(calls, 1);
    PULL_F32(kv, IK(5), out, 1, 4);
    EXPECT_F32(out, ((const float[]){ 11, 22, 33, 44 }), 4);
    OK(kvs_set_updater(kv, NULL, NULL));
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(t5, KVS_FLOAT32, 1, 4) }, 0));
    assert_int_equal(calls, 1);
    PULL_F32(kv, IK(5), out, 1, 4);
    EXPECT_F32(out, t5, 4);
}

static void test_updater_not_called_on_invalid_push(void **state)
{
    kvs_t *kv = *state;
    int calls = 0;
    const float v[6] = { 1, 1, 1, 1, 1, 1 };
    OK(kvs_set_updater(kv, count_calls, &calls));
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(999) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, 2, 3),
                                              ARR(v, KVS_FLOAT32, 2, 2, 3) },
                             0),
                KVS_ENOKEY, "999");
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, 2, 3),
                                              ARR(v, KVS_FLOAT32, 2, 2, 3) },
                             0),
                KVS_ESHAPE, "5");
    assert_int_equal(calls, 0);
}

/* ---- optimizers ------------------------------------------------------- */

static kvs_t *opt_store(const char *spec, const float *w0, int n)
{
    kvs_t *kv = new_store("local");
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(w0, KVS_FLOAT32, 1, n) }));
    if (spec != NULL)
        OK(kvs_set_optimizer(kv, spec));
    return kv;
}

static void push3(kvs_t *kv, const float *g, int n)
{
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(g, KVS_FLOAT32, 1, n) }, 0));
}

static void pull3(kvs_t *kv, float *w, int n)
{
    PULL_F32(kv, IK(3), w, 1, n);
}

/* MXNet's sgd_mom_update, in double:
 *   mom = momentum*mom - lr*wd*w - lr*clip(rescale*g); w += mom */
static void sgd_ref(double *w, double *mom, const float *g, int n, double lr, double momentum,
                    double wd, double rescale, double clip)
{
    for (int i = 0; i < n; i++) {
        double gr = rescale * g[i];
        if (clip >= 0)
            gr = gr > clip ? clip : (gr < -clip ? -clip : gr);
        mom[i] = momentum * mom[i] - lr * wd * w[i] - lr * gr;
        w[i] += mom[i];
    }
}

static void test_sgd_default_docstring(void **state)
{
    /* MXNet's set_optimizer docstring: zeros (2,2), default SGD, push ones
     * -> -0.01 everywhere. */
    const float z[4] = { 0 }, g[4] = { 1, 1, 1, 1 };
    kvs_t *kv = opt_store("sgd", z, 4);
    float w[4];
    (void)state;
    push3(kv, g, 4);
    pull3(kv, w, 4);
    EXPECT_NEAR(w, ((const double[]){ -0.01, -0.01, -0.01, -0.01 }), 4, 1e-9);
    kvs_close(kv);
}

static void test_sgd_momentum_wd(void **state)
{
    const float w0[4] = { 1, -2, 0.5f, 0 };
    const float g1[4] = { 1, 0.5f, -1, 2 }, g2[4] = { 0.5f, 1, 1, -1 };
    double w[4] = { 1, -2, 0.5, 0 }, mom[4] = { 0 };
    float got[4];
    kvs_t *kv = opt_store("sgd lr=0.1 momentum=0.9 wd=0.01", w0, 4);
    (void)state;
    push3(kv, g1, 4);
    sgd_ref(w, mom, g1, 4, 0.1, 0.9, 0.01, 1, -1);
    pull3(kv, got, 4);
    EXPECT_NEAR(got, w, 4, 1e-6);
    /* first step by hand: mom = -0.1*0.01*1 - 0.1*1 = -0.101, w = 0.899 */
    assert_true(fabs(got[0] - 0.899) < 1e-6);
    push3(kv, g2, 4);
    sgd_ref(w, mom, g2, 4, 0.1, 0.9, 0.01, 1, -1);
    pull3(kv, got, 4);
    EXPECT_NEAR(got, w, 4, 1e-6);
    /* second step: mom = 0.9*-0.101 - 0.001*0.899 - 0.05 = -0.141799 */
    assert_true(fabs(got[0] - (0.899 - 0.141799)) < 1e-6);
    kvs_close(kv);
}

static void test_sgd_rescale_clip(void **state)
{
    const float w0[4] = { 0, 0, 0, 0 }, g[4] = { 8, -2, 0.5f, -100 };
    float got[4];
    /* rescale then clip: {2, -0.5, 0.125, -25} -> {1, -0.5, 0.125, -1} */
    kvs_t *kv = opt_store("sgd lr=0.5 rescale_grad=0.25 clip_gradient=1", w0, 4);
    (void)state;
    push3(kv, g, 4);
    pull3(kv, got, 4);
    EXPECT_NEAR(got, ((const double[]){ -0.5, 0.25, -0.0625, 0.5 }), 4, 1e-7);
    /* several spaces and an exponent are fine */
    OK(kvs_set_optimizer(kv, "sgd  lr=5e-1   momentum=0"));
    push3(kv, (const float[]){ 1, 1, 1, 1 }, 4);
    pull3(kv, got, 4);
    EXPECT_NEAR(got, ((const double[]){ -1, -0.25, -0.5625, 0 }), 4, 1e-7);
    kvs_close(kv);
}

static void test_adam(void **state)
{
    const float w0[2] = { 1, 1 }, g[2] = { 1, 1 };
    float got[2];
    /* one step: lr_t = 0.1*sqrt(1-0.999)/(1-0.9), m = 0.1, v = 0.001,
     * w = 1 - lr_t * 0.1/(sqrt(0.001)+1e-8) = 0.9000000316227666 */
    kvs_t *kv = opt_store("adam lr=0.1", w0, 2);
    double w1 = 1.0 - 0.1 * (sqrt(1 - 0.999) / (1 - 0.9)) * (0.1 / (sqrt(0.001) + 1e-8));
    (void)state;
    assert_true(fabs(w1 - 0.9000000316227666) < 1e-15);
    push3(kv, g, 2);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, ((const double[]){ 0.9000000316227666, 0.9000000316227666 }), 2, 1e-6);
    /* second step, t = 2: m = 0.19, v = 0.001999,
     * w -= 0.1*sqrt(1-0.999^2)/(1-0.9^2) * m/(sqrt(v)+1e-8) -> 0.8000000539890344 */
    push3(kv, g, 2);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, ((const double[]){ 0.8000000539890344, 0.8000000539890344 }), 2, 2e-6);
    /* every parameter spelled out */
    OK(kvs_set_optimizer(kv, "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-8 wd=0 "
                             "rescale_grad=1 clip_gradient=-1"));
    kvs_close(kv);

    /* MXNet's default lr, 0.001: one step from 1 is 0.999 */
    kv = opt_store("adam", w0, 2);
    push3(kv, g, 2);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, ((const double[]){ 0.999, 0.999 }), 2, 1e-6);
    kvs_close(kv);
}

/* MXNet's Adam: bias correction folded into lr (in double, as Python does)
 * with the key's own update count t; the kernel's constants are float32,
 * so 1 - beta2 is 1 - 0.999f = 0.00099998713 (it moves the result by
 * parts in 1e6 after a few steps); the rest in double. */
static void adam_ref(double *w, double *m, double *v, int t, const float *g, int n, double lr)
{
    const double b1 = 0.9f, b2 = 0.999f, omb1 = 1.0f - 0.9f, omb2 = 1.0f - 0.999f;
    const double eps = 1e-8;
    double lr_t = lr * sqrt(1 - pow(0.999, t)) / (1 - pow(0.9, t));
    for (int i = 0; i < n; i++) {
        m[i] = b1 * m[i] + omb1 * g[i];
        v[i] = b2 * v[i] + omb2 * (double)g[i] * g[i];
        w[i] -= lr_t * m[i] / (sqrt(v[i]) + eps);
    }
}

static void test_adam_update_count_is_per_key(void **state)
{
    kvs_t *kv = new_store("local");
    const float w0[2] = { 1, -0.5f }, g[2] = { 0.5f, -2 };
    double w3[2] = { 1, -0.5 }, m3[2] = { 0 }, v3[2] = { 0 };
    double w5[2] = { 1, -0.5 }, m5[2] = { 0 }, v5[2] = { 0 };
    float got[2];
    (void)state;
    OK(kvs_init(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                (kvs_array_t[]){ ARR(w0, KVS_FLOAT32, 1, 2), ARR(w0, KVS_FLOAT32, 1, 2) }));
    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    /* key 3 steps twice alone, then both step together: key 3 is at t = 3,
     * key 5 at t = 1 */
    push3(kv, g, 2);
    push3(kv, g, 2);
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(5), IK(3) },
                (kvs_array_t[]){ ARR(g, KVS_FLOAT32, 1, 2), ARR(g, KVS_FLOAT32, 1, 2) }, 0));
    for (int t = 1; t <= 3; t++)
        adam_ref(w3, m3, v3, t, g, 2, 0.1);
    adam_ref(w5, m5, v5, 1, g, 2, 0.1);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, w3, 2, 5e-7);
    PULL_F32(kv, IK(5), got, 1, 2);
    EXPECT_NEAR(got, w5, 2, 2e-7);
    kvs_close(kv);
}

static void test_set_optimizer_drops_state(void **state)
{
    const float w0[2] = { 1, 2 }, g[2] = { 1, -1 };
    const char *spec = "sgd lr=0.1 momentum=0.9";
    kvs_t *kv = opt_store(spec, w0, 2);
    kvs_t *fresh;
    float a[2], b[2], w2[2];
    int calls = 0;
    (void)state;
    push3(kv, g, 2);
    push3(kv, g, 2);
    pull3(kv, w2, 2);
    /* the same spec again: momentum starts from zero */
    OK(kvs_set_optimizer(kv, spec));
    push3(kv, g, 2);
    pull3(kv, a, 2);
    fresh = opt_store(spec, w2, 2);
    push3(fresh, g, 2);
    pull3(fresh, b, 2);
    EXPECT_F32(a, b, 2);
    /* through an updater and back: the same */
    push3(kv, g, 2);
    OK(kvs_set_updater(kv, count_calls, &calls));
    OK(kvs_set_optimizer(kv, spec));
    pull3(kv, w2, 2);
    push3(kv, g, 2);
    pull3(kv, a, 2);
    assert_int_equal(calls, 0);
    kvs_close(fresh);
    fresh = opt_store(spec, w2, 2);
    push3(fresh, g, 2);
    pull3(fresh, b, 2);
    EXPECT_F32(a, b, 2);
    kvs_close(fresh);
    kvs_close(kv);
}

static void test_optimizer_bad_specs(void **state)
{
    static const char *const bad[] = {
        "foo",          "sgd lrx=1",      "sgd lr=abc",   "sgd lr=1 lr=2", "sgd lr=nan",
        "",             "sgd lr",         "sgd lr=",      "sgd =1",        "sgd lr=inf",
        "sgd lr=1e999", "sgd lr=0.1x",    "sgd beta1=0.9", "adam momentum=0.9",
        "adam lr=-inf", "sgd lr=1 foo=2",
    };
    const float w0[2] = { 1, 1 }, g[2] = { 1, 2 };
    float got[2];
    kvs_t *kv = opt_store("sgd lr=0.5", w0, 2);
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = kvs_set_optimizer(kv, bad[i]);
        if (rc != KVS_ESPEC)
            fail_msg("kvs_set_optimizer(\"%s\") = %d (%s), want KVS_ESPEC", bad[i], rc,
                     kvs_err_name(rc));
        EXPECT_DETAIL(kv, NULL);
    }
    EXPECT_RC(kvs_set_optimizer(kv, NULL), KVS_EBADARG);
    EXPECT_RC(kvs_set_optimizer(kv, "sgd lrx=1"), KVS_ESPEC);
    EXPECT_DETAIL(kv, "lrx");
    /* the optimizer set before is still in force */
    push3(kv, g, 2);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, ((const double[]){ 0.5, 0.0 }), 2, 1e-7);
    kvs_close(kv);
}

static void test_optimizer_int_key(void **state)
{
    kvs_t *kv = *state;
    const int32_t t7[4] = { 1, 1, 1, 1 };
    const float t3[6] = { 1, 1, 1, 1, 1, 1 };
    OK(kvs_set_optimizer(kv, "sgd lr=0.5"));
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(7) },
                             (kvs_array_t[]){ ARR(t7, KVS_INT32, 2, 2, 2) }, 0),
                KVS_EDTYPE, "7");
    /* a float key first in the list is not updated either */
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(7) },
                             (kvs_array_t[]){ ARR(t3, KVS_FLOAT32, 2, 2, 3),
                                              ARR(t7, KVS_INT32, 2, 2, 2) },
                             0),
                KVS_EDTYPE, "7");
}

static void test_optimizer_other_float_dtypes(void **state)
{
    kvs_t *kv = new_store("local");
    const uint16_t h1[2] = { 0x3C00, 0x4000 }, b1[2] = { 0x3F80, 0x4000 }; /* 1, 2 */
    const double d1[2] = { 1, 2 };
    uint16_t h[2], b[2];
    double d[2];
    (void)state;
    OK(kvs_init(kv, 3, (kvs_key_t[]){ IK(1), IK(2), IK(3) },
                (kvs_array_t[]){ ARR(h1, KVS_FLOAT16, 1, 2), ARR(b1, KVS_BFLOAT16, 1, 2),
                                 ARR(d1, KVS_FLOAT64, 1, 2) }));
    OK(kvs_set_optimizer(kv, "sgd lr=0.25"));
    /* w - 0.25*g with g = w: 1 -> 0.75, 2 -> 1.5 */
    OK(kvs_push(kv, 3, (kvs_key_t[]){ IK(1), IK(2), IK(3) },
                (kvs_array_t[]){ ARR(h1, KVS_FLOAT16, 1, 2), ARR(b1, KVS_BFLOAT16, 1, 2),
                                 ARR(d1, KVS_FLOAT64, 1, 2) },
                0));
    OK(kvs_pull(kv, 3, (kvs_key_t[]){ IK(1), IK(2), IK(3) },
                (kvs_array_t[]){ ARR(h, KVS_FLOAT16, 1, 2), ARR(b, KVS_BFLOAT16, 1, 2),
                                 ARR(d, KVS_FLOAT64, 1, 2) },
                0));
    EXPECT_INTS(h, ((const uint16_t[]){ 0x3A00, 0x3E00 }), 2, KVS_FLOAT16);
    EXPECT_INTS(b, ((const uint16_t[]){ 0x3F40, 0x3FC0 }), 2, KVS_BFLOAT16);
    EXPECT_F64(d, ((const double[]){ 0.75, 1.5 }), 2);
    /* float64 is computed in double: 1 - 0.01*0.1 keeps double precision */
    OK(kvs_set_optimizer(kv, "sgd lr=0.01"));
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(3) },
                (kvs_array_t[]){ ARR(((const double[]){ 0.1, 0 }), KVS_FLOAT64, 1, 2) }, 0));
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 1, 2) }, 0));
    assert_true(fabs(d[0] - (0.75 - 0.001)) < 1e-15);
    assert_true(d[1] == 1.5);
    kvs_close(kv);
}

static void test_optimizer_repeated_key_summed_once(void **state)
{
    const float w0[2] = { 0, 0 };
    kvs_t *kv = opt_store("sgd lr=0.1 momentum=0.5", w0, 2);
    float got[2];
    double w[2] = { 0, 0 }, mom[2] = { 0, 0 };
    const float g[2] = { 1, 2 }, g2[2] = { 2, 4 };
    (void)state;
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                (kvs_array_t[]){ ARR(g, KVS_FLOAT32, 1, 2), ARR(g, KVS_FLOAT32, 1, 2) }, 0));
    sgd_ref(w, mom, g2, 2, 0.1, 0.5, 0, 1, -1);
    pull3(kv, got, 2);
    EXPECT_NEAR(got, w, 2, 1e-7);
    kvs_close(kv);
}

static void test_optimizer_and_updater_replace_each_other(void **state)
{
    const float w0[2] = { 1, 1 }, g[2] = { 1, 1 };
    kvs_t *kv = opt_store("sgd lr=0.5", w0, 2);
    int calls = 0;
    float got[2];
    char *dir = make_tmpdir();
    char path[4200];
    (void)state;
    snprintf(path, sizeof path, "%s/st", dir);
    OK(kvs_set_updater(kv, add_f32, &calls));
    push3(kv, g, 2);
    assert_int_equal(calls, 1);
    pull3(kv, got, 2);
    EXPECT_F32(got, ((const float[]){ 2, 2 }), 2);
    /* the optimizer is gone */
    EXPECT_RC(kvs_save_optimizer_states(kv, path, 0), KVS_ENOOPT);
    OK(kvs_set_optimizer(kv, "sgd lr=0.5"));
    push3(kv, g, 2);
    assert_int_equal(calls, 1);
    pull3(kv, got, 2);
    EXPECT_F32(got, ((const float[]){ 1.5f, 1.5f }), 2);
    /* and back to ASSIGN */
    OK(kvs_set_updater(kv, NULL, NULL));
    push3(kv, g, 2);
    pull3(kv, got, 2);
    EXPECT_F32(got, g, 2);
    kvs_close(kv);
    remove_tmpdir(dir);
}

static void test_reinit_drops_optimizer_state(void **state)
{
    const float w0[2] = { 1, 1 }, g[2] = { 1, 1 };
    kvs_t *kv = opt_store("sgd lr=0.1 momentum=0.9", w0, 2);
    kvs_t *fresh = opt_store("sgd lr=0.1 momentum=0.9", w0, 2);
    float a[2], b[2];
    (void)state;
    push3(kv, g, 2);
    push3(kv, g, 2);
    OK(kvs_reinit(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(w0, KVS_FLOAT32, 1, 2) }));
    push3(kv, g, 2);
    push3(fresh, g, 2);
    pull3(kv, a, 2);
    pull3(fresh, b, 2);
    EXPECT_F32(a, b, 2);
    EXPECT_NEAR(a, ((const double[]){ 0.9, 0.9 }), 2, 1e-6);
    kvs_close(kv);
    kvs_close(fresh);
}

/* ---- gradient compression --------------------------------------------- */

static void test_gradient_compression_local(void **state)
{
    kvs_t *kv = *state;
    EXPECT_RC(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), KVS_ENOTSUP);
    EXPECT_DETAIL(kv, NULL);
    EXPECT_RC(kvs_set_gradient_compression(kv, "2bit"), KVS_ENOTSUP);
    EXPECT_RC(kvs_set_gradient_compression(NULL, "2bit"), KVS_EBADARG);
    FX_UNCHANGED(kv);
}

/* ---- main ------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_updater_once_per_key_in_order),
        cmocka_unit_test(test_updater_string_key_name),
        FX(test_updater_failure_changes_nothing),
        FX(test_updater_null_restores_assign),
        FX(test_updater_not_called_on_invalid_push),
        cmocka_unit_test(test_sgd_default_docstring),
        cmocka_unit_test(test_sgd_momentum_wd),
        cmocka_unit_test(test_sgd_rescale_clip),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_update_count_is_per_key),
        cmocka_unit_test(test_set_optimizer_drops_state),
        cmocka_unit_test(test_optimizer_bad_specs),
        FX(test_optimizer_int_key),
        cmocka_unit_test(test_optimizer_other_float_dtypes),
        cmocka_unit_test(test_optimizer_repeated_key_summed_once),
        cmocka_unit_test(test_optimizer_and_updater_replace_each_other),
        cmocka_unit_test(test_reinit_drops_optimizer_state),
        FX(test_gradient_compression_local),
    };
    return cmocka_run_group_tests_name("api_update", tests, NULL, NULL);
}
