/*
 * residual.c - a worker's 2bit residuals (see residual.h): per key, what
 * quantizing its pushes cut off, added to its next push, as MXNet keeps
 * them on the sender.
 *
 * A chained hash table of keys, each with its residual. A push quantizes
 * from a copy of the residual (kvs__residual_quantize) and the copy
 * replaces the residual only once kvsd took the push (commit), so that a
 * push kvsd refuses changes nothing here either. The table's lock covers
 * lookups and commits, never a quantization.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/compress.h"
#include "store/key.h"
#include "client/residual.h"

struct resid {
    struct resid *next;
    uint64_t hash;
    kvs_key_t key;                     /* key.name: in name */
    size_t n;
    float *r;                          /* n values, zero at first */
    char name[];
};

struct kvs__residuals {
    pthread_mutex_t lock;
    size_t len, cap;                   /* cap: 0 or a power of two */
    struct resid **b;
};

int kvs__residuals_new(struct kvs__residuals **out)
{
    struct kvs__residuals *t = calloc(1, sizeof *t);

    if (!t)
        return -ENOMEM;
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return 0;
}

void kvs__residuals_free(struct kvs__residuals *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->cap; i++)
        for (struct resid *x = t->b[i], *next; x; x = next) {
            next = x->next;
            free(x->r);
            free(x);
        }
    free(t->b);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void kvs__residuals_zero(struct kvs__residuals *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->cap; i++)
        for (struct resid *x = t->b[i]; x; x = x->next)
            memset(x->r, 0, x->n * sizeof *x->r);
    pthread_mutex_unlock(&t->lock);
}

static int key_is(const struct resid *x, uint64_t hash, kvs_key_t key)
{
    if (x->hash != hash || !x->key.name != !key.name)
        return 0;
    return key.name ? strcmp(x->key.name, key.name) == 0 : x->key.id == key.id;
}

/* The key's entry (hash: its hash), or NULL. t->lock held. */
static struct resid *find(const struct kvs__residuals *t, kvs_key_t key, uint64_t hash)
{
    for (struct resid *x = t->cap ? t->b[hash & (t->cap - 1)] : NULL; x; x = x->next)
        if (key_is(x, hash, key))
            return x;
    return NULL;
}

/* The key's entry, made (with a zero residual of n values) when missing.
 * t->lock held. NULL without memory. */
static struct resid *entry(struct kvs__residuals *t, kvs_key_t key, size_t n)
{
    uint64_t hash = kvs__key_hash(key);
    size_t nl = key.name ? strlen(key.name) + 1 : 0;
    struct resid *x = find(t, key, hash);

    if (x)
        return x;
    if (t->len >= t->cap) {            /* grow: at most one key per bucket on average */
        size_t cap = t->cap ? 2 * t->cap : 64;
        struct resid **b = calloc(cap, sizeof *b);

        if (!b)
            return NULL;
        for (size_t i = 0; i < t->cap; i++)
            for (struct resid *y = t->b[i], *next; y; y = next) {
                next = y->next;
                y->next = b[y->hash & (cap - 1)];
                b[y->hash & (cap - 1)] = y;
            }
        free(t->b);
        t->b = b;
        t->cap = cap;
    }
    if (!(x = calloc(1, sizeof *x + nl)) || !(x->r = calloc(n ? n : 1, sizeof *x->r))) {
        free(x);
        return NULL;
    }
    x->hash = hash;
    x->n = n;
    x->key = key;
    if (key.name) {
        memcpy(x->name, key.name, nl);
        x->key.name = x->name;
    }
    x->next = t->b[hash & (t->cap - 1)];
    t->b[hash & (t->cap - 1)] = x;
    t->len++;
    return x;
}

int kvs__residual_quantize(struct kvs__residuals *t, kvs_key_t key, const float *grad,
                           size_t n, float threshold, uint32_t *out, float **next,
                           struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct resid *x;
    float *r;

    if (!(r = malloc((n ? n : 1) * sizeof *r)))
        return kvs__fail(e, -ENOMEM, "out of memory for a 2bit residual");
    pthread_mutex_lock(&t->lock);
    if (!(x = entry(t, key, n))) {
        pthread_mutex_unlock(&t->lock);
        free(r);
        return kvs__fail(e, -ENOMEM, "out of memory for a 2bit residual");
    }
    if (x->n != n) {
        size_t had = x->n;

        pthread_mutex_unlock(&t->lock);
        free(r);
        kvs__key_str(ks, sizeof ks, key);
        return kvs__fail(e, KVS_ESHAPE, "key %s: a push of %zu values, where its earlier "
                         "pushes had %zu", ks, n, had);
    }
    memcpy(r, x->r, n * sizeof *r);
    pthread_mutex_unlock(&t->lock);
    kvs__gc_2bit_quantize(grad, r, out, n, threshold);
    *next = r;
    return 0;
}

void kvs__residual_commit(struct kvs__residuals *t, kvs_key_t key, float *next)
{
    struct resid *x;

    pthread_mutex_lock(&t->lock);
    if ((x = find(t, key, kvs__key_hash(key))) != NULL) {    /* always: quantize made it */
        float *old = x->r;

        x->r = next;
        next = old;
    }
    pthread_mutex_unlock(&t->lock);
    free(next);
}
