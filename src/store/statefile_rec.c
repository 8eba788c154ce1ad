/*
 * statefile_rec.c - what goes in one record of a state file: a key (int or
 * string), its dtype, the state's dtype, step count and element count, and
 * its buffers; written as statefile.c's format comment lays it out, read
 * back and checked field by field, and the check that no key appears twice.
 *
 * It must never trust a field it reads: a dtype, a buffer count or an
 * element count is checked before it sizes anything, and no buffer is
 * allocated before its bytes are known to be in the file. It knows nothing
 * of the file around a record (header, record count, checksum): that is
 * statefile.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/statefile_codec.h"
#include "store/statefile_rec.h"

#define SF_KEY_INT 0
#define SF_KEY_STRING 1

static int is_float_dtype(uint32_t d)
{
    return d == KVS_FLOAT32 || d == KVS_FLOAT64 || d == KVS_FLOAT16 || d == KVS_BFLOAT16;
}

/* Bytes of one element of a float key dtype (checked by is_float_dtype). */
static size_t key_esize(uint32_t d)
{
    return d == KVS_FLOAT64 ? 8 : d == KVS_FLOAT32 ? 4 : 2;
}

/* ---- Keys ------------------------------------------------------------ */

static int rec_cmp(const void *a, const void *b)
{
    const struct kvs__state_rec *x = *(const struct kvs__state_rec *const *)a;
    const struct kvs__state_rec *y = *(const struct kvs__state_rec *const *)b;

    if ((x->key.name == NULL) != (y->key.name == NULL))
        return x->key.name == NULL ? -1 : 1;
    if (x->key.name == NULL)
        return (x->key.id > y->key.id) - (x->key.id < y->key.id);
    return strcmp(x->key.name, y->key.name);
}

int kvs__sf_key_clash(const struct kvs__state_rec *recs, size_t n, char *what,
                      size_t what_size)
{
    const struct kvs__state_rec **sorted;
    size_t bytes;
    int rc = 0;

    if (n < 2)
        return 0;
    if (__builtin_mul_overflow(n, sizeof *sorted, &bytes))
        return -ENOMEM;
    sorted = malloc(bytes);
    if (sorted == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        sorted[i] = &recs[i];
    qsort(sorted, n, sizeof *sorted, rec_cmp);

    if (sorted[0]->key.name == NULL && sorted[n - 1]->key.name != NULL) {
        snprintf(what, what_size, "int and string keys mixed");
        rc = 1;
    }
    for (size_t i = 1; rc == 0 && i < n; i++) {
        if (rec_cmp(&sorted[i - 1], &sorted[i]) == 0) {
            char key[KVS_MAX_KEY_LEN + 8];
            kvs__key_str(key, sizeof key, sorted[i]->key);
            snprintf(what, what_size, "key %.200s appears twice", key);
            rc = 1;
        }
    }
    free(sorted);
    return rc;
}

/* ---- Save ------------------------------------------------------------ */

int kvs__sf_rec_check(const struct kvs__state_rec *rec, size_t i, const char *path,
                      struct kvs__err *e)
{
    const struct kvs__optim_state *s = rec->state;
    size_t bytes;

    if (s == NULL)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu has "
                         "no state", path, i);
    if (rec->key.name != NULL &&
        strnlen(rec->key.name, KVS_MAX_KEY_LEN + 1) > KVS_MAX_KEY_LEN)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: key "
                         "longer than %d bytes", path, i, KVS_MAX_KEY_LEN);
    if (!is_float_dtype((uint32_t)rec->key_dtype) ||
        (s->dtype != KVS_FLOAT32 && s->dtype != KVS_FLOAT64) ||
        s->nbuf < 0 || s->nbuf > 2)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: bad "
                         "dtype or buffer count", path, i);
    if (__builtin_mul_overflow(s->count, kvs__sf_state_esize(s->dtype), &bytes))
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: %zu "
                         "elements is too many", path, i, s->count);
    for (int b = 0; b < s->nbuf; b++) {
        if (s->count > 0 && s->buf[b] == NULL)
            return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: "
                             "buffer %d is NULL", path, i, b);
    }
    return 0;
}

void kvs__sf_rec_write(struct kvs__sf_writer *w, const struct kvs__state_rec *r)
{
    const struct kvs__optim_state *s = r->state;

    if (r->key.name == NULL) {
        kvs__sf_u8(w, SF_KEY_INT);
        kvs__sf_u64(w, (uint64_t)r->key.id);
    } else {
        size_t len = strlen(r->key.name);
        kvs__sf_u8(w, SF_KEY_STRING);
        kvs__sf_u32(w, (uint32_t)len);
        kvs__sf_put(w, r->key.name, len);
    }
    kvs__sf_u32(w, (uint32_t)r->key_dtype);
    kvs__sf_u32(w, (uint32_t)s->dtype);
    kvs__sf_u64(w, s->t);
    kvs__sf_u64(w, s->count);
    kvs__sf_u32(w, (uint32_t)s->nbuf);
    for (int b = 0; b < s->nbuf; b++)
        kvs__sf_put_values(w, s->dtype, s->buf[b], s->count);
}

/* ---- Load ------------------------------------------------------------ */

/* The fields of a record after its key, as read and before they are
 * trusted. */
struct rec_head {
    uint32_t key_dtype, state_dtype, nbuf;
    uint64_t t, count;
};

static int read_key(struct kvs__sf_reader *r, size_t i, struct kvs__state_rec *rec,
                    const char *path, struct kvs__err *e)
{
    uint8_t kind;
    uint64_t id;
    int rc;

    if (kvs__sf_get_u8(r, &kind) != 0)
        return kvs__sf_corrupt(e, path, "record %zu: truncated", i);
    if (kind == SF_KEY_INT) {
        if (kvs__sf_get_u64(r, &id) != 0)
            return kvs__sf_corrupt(e, path, "record %zu: truncated in the key", i);
        /* Two's complement back to int64 without relying on how C
         * converts an out-of-range unsigned value. */
        rec->key.id = id <= (uint64_t)INT64_MAX ? (int64_t)id : -(int64_t)(~id) - 1;
        rec->key.name = NULL;
    } else if (kind == SF_KEY_STRING) {
        char *name = NULL;
        rc = kvs__sf_get_string(r, 0, KVS_MAX_KEY_LEN, &name);
        if (rc == -ENOMEM)
            return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
        if (rc != 0)
            return kvs__sf_corrupt(e, path, "record %zu: string key truncated, longer than %d "
                                   "bytes or holding a NUL byte", i, KVS_MAX_KEY_LEN);
        rec->key.id = 0;
        rec->key.name = name;
    } else {
        return kvs__sf_corrupt(e, path, "record %zu: key kind %u is neither int (0) nor "
                               "string (1)", i, (unsigned)kind);
    }
    return 0;
}

/* Reads the fields after the key and checks them against each other and
 * the optimizer's rule; *buf_bytes is then one buffer's size, and all its
 * buffers are known to be in the file. */
static int read_head(struct kvs__sf_reader *r, size_t i, struct kvs__sf_nbuf_rule rule,
                     struct rec_head *h, size_t *buf_bytes, const char *path,
                     struct kvs__err *e)
{
    size_t key_bytes, all_bytes;

    if (kvs__sf_get_u32(r, &h->key_dtype) != 0 || kvs__sf_get_u32(r, &h->state_dtype) != 0 ||
        kvs__sf_get_u64(r, &h->t) != 0 || kvs__sf_get_u64(r, &h->count) != 0 ||
        kvs__sf_get_u32(r, &h->nbuf) != 0)
        return kvs__sf_corrupt(e, path, "record %zu: truncated", i);
    if (!is_float_dtype(h->key_dtype))
        return kvs__sf_corrupt(e, path, "record %zu: key dtype %" PRIu32 " is not a float "
                               "dtype", i, h->key_dtype);
    if (h->state_dtype != (h->key_dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32))
        return kvs__sf_corrupt(e, path, "record %zu: state dtype %" PRIu32 " does not go "
                               "with key dtype %" PRIu32, i, h->state_dtype, h->key_dtype);
    if (h->nbuf > 2 || (int)h->nbuf > rule.max || (rule.exact >= 0 && (int)h->nbuf != rule.exact))
        return kvs__sf_corrupt(e, path, "record %zu: %" PRIu32 " state buffers do not go "
                               "with optimizer %s", i, h->nbuf, rule.optim);
    /* The key's own byte size must be a size too, even with no buffers. */
    if (h->count > SIZE_MAX ||
        __builtin_mul_overflow((size_t)h->count, key_esize(h->key_dtype), &key_bytes) ||
        __builtin_mul_overflow((size_t)h->count,
                               kvs__sf_state_esize((kvs_dtype_t)h->state_dtype), buf_bytes) ||
        __builtin_mul_overflow(*buf_bytes, (size_t)h->nbuf, &all_bytes) || all_bytes > r->left)
        return kvs__sf_corrupt(e, path, "record %zu: %" PRIu64 " elements do not fit in the "
                               "file", i, h->count);
    return 0;
}

/* The state a checked head describes, its buffers read from the file. */
static int read_state(struct kvs__sf_reader *r, const struct rec_head *h, size_t buf_bytes,
                      struct kvs__state_rec *rec, const char *path, struct kvs__err *e)
{
    struct kvs__optim_state *s = calloc(1, sizeof *s);

    if (s == NULL)
        return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory", path);
    rec->state = s;                    /* freed with the file from here on */
    s->t = h->t;
    s->dtype = (kvs_dtype_t)h->state_dtype;
    s->count = (size_t)h->count;
    for (uint32_t b = 0; b < h->nbuf; b++) {
        if (buf_bytes > 0) {
            s->buf[b] = malloc(buf_bytes);
            if (s->buf[b] == NULL)
                return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory for %zu bytes",
                                 path, buf_bytes);
        }
        s->nbuf = (int)b + 1;
        kvs__sf_get_values(r, s->dtype, s->buf[b], s->count);
    }
    return 0;
}

int kvs__sf_rec_read(struct kvs__sf_reader *r, size_t i, struct kvs__sf_nbuf_rule rule,
                     struct kvs__state_rec *rec, const char *path, struct kvs__err *e)
{
    struct rec_head h = { 0 };
    size_t buf_bytes = 0;
    int rc;

    if ((rc = read_key(r, i, rec, path, e)) != 0 ||
        (rc = read_head(r, i, rule, &h, &buf_bytes, path, e)) != 0)
        return rc;
    rec->key_dtype = (kvs_dtype_t)h.key_dtype;
    return read_state(r, &h, buf_bytes, rec, path, e);
}
