/*
 * engine_states.c - the optimizer's per-key states of a store: saved to a
 * file or to a state file's bytes (for kvsd's hosts, each owning some
 * keys), loaded back from either. statefile.c owns the format; this file
 * picks the states out of the key table and puts them back, every record
 * checked against the store before anything changes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "store/engine.h"
#include "store/engine_model.h"
#include "store/table.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/statefile.h"

static void copies_free(struct kvs__optim_state **copies, size_t n)
{
    for (size_t i = 0; copies && i < n; i++)
        kvs__optim_state_free(copies[i]);
    free(copies);
}

/* The states of the keys keep accepts (every key when keep is NULL), in
 * *recs (malloc'd) and *n: the entries' own states, or host copies of
 * those on a device, which *copies holds (n of them, NULL for none) for
 * copies_free. */
static int states_of(const struct kvs__engine *eng, kvs__key_filter keep, void *ctx,
                     struct kvs__state_rec **recs, size_t *n,
                     struct kvs__optim_state ***copies, struct kvs__err *e)
{
    size_t len = eng->len ? eng->len : 1;
    int rc;

    if (!eng->optim)
        return kvs__fail(e, KVS_ENOOPT, "no optimizer set: call kvs_set_optimizer first");
    *recs = calloc(len, sizeof **recs);
    *copies = calloc(len, sizeof **copies);
    if (!*recs || !*copies) {
        free(*recs);
        free(*copies);
        return kvs__fail(e, -ENOMEM, "out of memory for %zu state records", eng->len);
    }
    *n = 0;
    for (size_t i = 0; i < eng->cap; i++) {
        const struct entry *ent = eng->slots[i].ent;
        struct kvs__optim_state *s;

        if (!ent || !ent->ostate || (keep && !keep(ctx, ent->key)))
            continue;
        s = ent->ostate;
        if (s->device != KVS_HOST) {
            if ((rc = kvs__optim_state_copy(s, KVS_HOST, &(*copies)[*n], e)) != 0) {
                copies_free(*copies, *n);
                free(*recs);
                return rc;
            }
            s = (*copies)[*n];
        }
        (*recs)[(*n)++] = (struct kvs__state_rec){ ent->key, ent->dtype, s };
    }
    return 0;
}

int kvs__engine_encode_states(struct kvs__engine *eng, kvs__key_filter keep, void *ctx,
                              uint8_t **out, size_t *len, struct kvs__err *e)
{
    struct kvs__optim_state **copies;
    struct kvs__state_rec *recs;
    size_t n;
    int rc;

    if ((rc = states_of(eng, keep, ctx, &recs, &n, &copies, e)) != 0)
        return rc;
    rc = kvs__optim_encode(eng->optim, 0, recs, n, out, len, e);
    copies_free(copies, n);
    free(recs);
    return rc;
}

int kvs__engine_put_states(struct kvs__engine *eng, struct kvs__sf_writer *w,
                           struct kvs__err *e)
{
    struct kvs__optim_state **copies;
    struct kvs__state_rec *recs;
    size_t n;
    int rc;

    if ((rc = states_of(eng, NULL, NULL, &recs, &n, &copies, e)) != 0)
        return rc;
    rc = kvs__optim_encode_to(eng->optim, 0, recs, n, w, e);
    copies_free(copies, n);
    free(recs);
    return rc;
}

/* A copy of state s into *out, the buffers of every record but the first
 * of its key in recs (n, whose sources are who[]) spliced into it where
 * part says they hold the key's state. 0, or an error (-ENOMEM, or
 * KVS_ECORRUPT for a key that two sources hold whole). */
static int splice_state(const struct kvs__state_rec *recs, const int *who, size_t n,
                        size_t at, const struct kvs__states_split *split,
                        struct kvs__optim_state **out, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    const struct kvs__optim_state *s = recs[at].state;
    size_t es = s->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
    struct kvs__optim_state *t = calloc(1, sizeof *t);

    if (!t)
        return kvs__fail(e, -ENOMEM, "out of memory for a state");
    *t = *s;
    t->buf[0] = t->buf[1] = NULL;
    for (int b = 0; b < s->nbuf; b++)
        if (s->count && !(t->buf[b] = malloc(s->count * es))) {
            kvs__optim_state_free(t);
            return kvs__fail(e, -ENOMEM, "out of memory for a state of %zu elements",
                             s->count);
        }
    for (size_t i = at; i < n; i++) {
        const struct kvs__optim_state *r = recs[i].state;
        size_t first, count;

        if (i != at && !kvs__key_eq(recs[i].key, recs[at].key))
            continue;
        if (!split->part(split->ctx, recs[i].key, who[i], &first, &count)
            || r->count != s->count || r->nbuf != s->nbuf || r->dtype != s->dtype
            || first > s->count || count > s->count - first) {
            kvs__optim_state_free(t);
            return kvs__fail(e, KVS_ECORRUPT, "key %s: states from two hosts that do not "
                             "each keep a part of it", KEYSTR(ks, recs[at].key));
        }
        for (int b = 0; b < s->nbuf; b++)
            memcpy((char *)t->buf[b] + first * es, (const char *)r->buf[b] + first * es,
                   count * es);
    }
    *out = t;
    return 0;
}

/* Merges the records of keys kept in parts (repeated in recs[n], whose
 * sources are who[]) into one each, a spliced copy in the place of the
 * first (kept in *made, n of them, to free), and drops the others. */
static int merge_parts(struct kvs__state_rec *recs, const int *who, size_t *n,
                       const struct kvs__states_split *split,
                       struct kvs__optim_state **made, struct kvs__err *e)
{
    kvs_key_t *keys = malloc(sizeof *keys * (*n ? *n : 1));
    int *gid = malloc(sizeof *gid * 2 * (*n ? *n : 1)), *count, rc = 0;
    size_t m = 0;

    if (!keys || !gid || *n > INT32_MAX) {
        free(keys);
        free(gid);
        return kvs__fail(e, -ENOMEM, "out of memory for %zu state records", *n);
    }
    for (size_t i = 0; i < *n; i++)
        keys[i] = recs[i].key;
    if ((rc = kvs__group_keys((int)*n, keys, gid, gid + *n, e)) < 0)
        goto out;
    count = gid + *n;                  /* group sizes now, not first places */
    memset(count, 0, sizeof *count * *n);
    for (size_t i = 0; i < *n; i++)
        count[gid[i]]++;
    rc = 0;
    for (size_t i = 0; i < *n; i++) {
        if (count[gid[i]] < 0)
            continue;                  /* a later record of a merged key */
        made[i] = NULL;
        if (count[gid[i]] > 1
            && (rc = splice_state(recs, who, *n, i, split, &made[i], e)) != 0)
            goto out;
        count[gid[i]] = -1;
        recs[m] = recs[i];
        if (made[i])
            recs[m].state = made[i];
        m++;
    }
    *n = m;
out:
    free(keys);
    free(gid);
    return rc;
}

int kvs__engine_save_states_with(struct kvs__engine *eng, const char *path, int dump_optimizer,
                                 kvs__key_filter keep, void *ctx,
                                 const uint8_t *const *img, const size_t *len, int nimg,
                                 const struct kvs__states_split *split, struct kvs__err *e)
{
    struct kvs__state_file **f = NULL;
    struct kvs__state_rec *recs = NULL;
    struct kvs__optim_state **made = NULL, **copies;
    int *who = NULL;
    size_t n = 0, total = 0, own;
    int rc;

    if (!path)
        return kvs__fail(e, KVS_EBADARG, "path is NULL");
    if ((rc = states_of(eng, keep, ctx, &recs, &n, &copies, e)) != 0)
        return rc;
    own = n;
    if (nimg > 0 && !(f = calloc((size_t)nimg, sizeof *f))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for states");
        goto out;
    }
    total = n;
    for (int i = 0; i < nimg; i++) {
        if ((rc = kvs__optim_decode(img[i], len[i], "another host's states", &f[i], e)) != 0)
            goto out;
        total += f[i]->n;
    }
    if (total > n) {
        struct kvs__state_rec *all = realloc(recs, sizeof *all * total);

        if (!all) {
            rc = kvs__fail(e, -ENOMEM, "out of memory for %zu state records", total);
            goto out;
        }
        recs = all;
    }
    if (split && (!(who = malloc(sizeof *who * (total ? total : 1)))
                  || !(made = calloc(total ? total : 1, sizeof *made)))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for %zu state records", total);
        goto out;
    }
    for (size_t i = 0; who && i < n; i++)
        who[i] = split->me;
    for (int i = 0; i < nimg; i++) {
        memcpy(recs + n, f[i]->recs, sizeof *recs * f[i]->n);
        for (size_t j = 0; who && j < f[i]->n; j++)
            who[n + j] = split->who[i];
        n += f[i]->n;
    }
    if (split && (rc = merge_parts(recs, who, &n, split, made, e)) != 0)
        goto out;
    rc = kvs__optim_save(path, eng->optim, dump_optimizer, recs, n, e);
out:
    for (size_t i = 0; made && i < total; i++)
        kvs__optim_state_free(made[i]);
    for (int i = 0; f && i < nimg; i++)
        kvs__state_file_free(f[i]);
    copies_free(copies, own);
    free(made);
    free(who);
    free(f);
    free(recs);
    return rc;
}

int kvs__engine_save_states(struct kvs__engine *eng, const char *path, int dump_optimizer,
                            struct kvs__err *e)
{
    return kvs__engine_save_states_with(eng, path, dump_optimizer, NULL, NULL, NULL, NULL, 0,
                                        NULL, e);
}

const struct kvs__optim_state *kvs__engine_state(const struct kvs__engine *eng,
                                                 const void *entry)
{
    const struct entry *ent = entry;

    (void)eng;
    return ent ? ent->ostate : NULL;
}

/* Checks that a loaded record fits the store and the optimizer o. */
static int check_record(const struct kvs__engine *eng, const struct kvs__optim *o,
                        const struct kvs__state_rec *r, const char *path, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], shape[KVS_MAX_NDIM * 21 + 4];
    const struct entry *ent;
    const struct kvs__optim_state *s = r->state;
    kvs_dtype_t sdt;

    KEYSTR(ks, r->key);
    if (eng->kind != KIND_NONE && kind_of(r->key) != eng->kind)
        return kvs__fail(e, KVS_EKEYKIND, "state file '%s': %s key %s in a store of %s keys",
                         path, kind_name(kind_of(r->key)), ks, kind_name(eng->kind));
    if (!(ent = table_get(eng, r->key)))
        return kvs__fail(e, KVS_ENOKEY, "state file '%s': key %s not initialised", path, ks);
    if (r->key_dtype != ent->dtype)
        return kvs__fail(e, KVS_EDTYPE, "state file '%s': key %s state for %s, stored is %s",
                         path, ks, kvs_dtype_name(r->key_dtype), kvs_dtype_name(ent->dtype));
    sdt = ent->dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32;
    if (s->count != ent->count || s->dtype != sdt) {
        kvs__shape_str(shape, sizeof shape, ent->ndim, ent->shape);
        return kvs__fail(e, KVS_ESHAPE, "state file '%s': key %s has a state of %zu %s, the "
                         "stored key is %s %s (%zu elements)", path, ks, s->count,
                         kvs_dtype_name(s->dtype), kvs_dtype_name(ent->dtype), shape,
                         ent->count);
    }
    if (s->nbuf != kvs__optim_nbuf(o))
        return kvs__fail(e, KVS_ESPEC, "state file '%s': key %s has %d state arrays, %s "
                         "keeps %d", path, ks, s->nbuf, kvs__optim_spec(o),
                         kvs__optim_nbuf(o));
    return 0;
}

/* Takes the states of f (read from what) that keep accepts, and its
 * optimizer when it has one, once every record is checked. Frees f. */
static int take_states(struct kvs__engine *eng, struct kvs__state_file *f, const char *path,
                       kvs__key_filter keep, void *ctx, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    const struct kvs__optim *o;
    kvs_key_t *keys = NULL;
    int rc;

    o = f->optim ? f->optim : eng->optim;
    if (!o) {
        rc = kvs__fail(e, KVS_ENOOPT, "%s: no optimizer set and none saved in the file", path);
        goto out;
    }
    if (strcmp(kvs__optim_name(o), f->optim_name) != 0) {
        rc = kvs__fail(e, KVS_ESPEC, "%s: states of optimizer %s, the store's is %s", path,
                       f->optim_name, kvs__optim_name(o));
        goto out;
    }
    if (f->n > INT32_MAX) {
        rc = kvs__fail(e, KVS_ECORRUPT, "%s: %zu state records", path, f->n);
        goto out;
    }
    keys = malloc(sizeof *keys * (f->n ? f->n : 1));
    if (!keys) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for %zu state records", f->n);
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) {
        if ((rc = check_record(eng, o, &f->recs[i], path, e)) != 0)
            goto out;
        keys[i] = f->recs[i].key;
    }
    if ((rc = kvs__find_repeat((int)f->n, keys, e)) < 0)
        goto out;
    if ((size_t)rc != f->n) {
        rc = kvs__fail(e, KVS_ECORRUPT, "%s: key %s has two state records", path,
                       KEYSTR(ks, keys[rc]));
        goto out;
    }
    /* States of keys on a device go there before anything changes. */
    for (size_t i = 0; i < f->n; i++) {
        const struct entry *ent = table_get(eng, f->recs[i].key);
        struct kvs__optim_state *s;

        if (ent->device == KVS_HOST || (keep && !keep(ctx, f->recs[i].key)))
            continue;
        if ((rc = kvs__optim_state_copy(f->recs[i].state, ent->device, &s, e)) != 0)
            goto out;
        kvs__optim_state_free(f->recs[i].state);
        f->recs[i].state = s;
    }
    rc = 0;
    if (f->optim) {                    /* the file's optimizer replaces the store's */
        kvs__engine_set_updater(eng, NULL, NULL);
        eng->optim = f->optim;
        f->optim = NULL;
    }
    kvs__engine_drop_states(eng);
    for (size_t i = 0; i < f->n; i++) {
        if (keep && !keep(ctx, f->recs[i].key))
            continue;
        table_get(eng, f->recs[i].key)->ostate = f->recs[i].state;
        f->recs[i].state = NULL;
    }
out:
    free(keys);
    kvs__state_file_free(f);
    return rc;
}

int kvs__engine_load_states(struct kvs__engine *eng, const char *path, struct kvs__err *e)
{
    struct kvs__state_file *f;
    int rc;

    if (!path)
        return kvs__fail(e, KVS_EBADARG, "path is NULL");
    if ((rc = kvs__optim_load(path, &f, e)) != 0)
        return rc;
    return take_states(eng, f, path, NULL, NULL, e);
}

int kvs__engine_load_image(struct kvs__engine *eng, const uint8_t *img, size_t len,
                           const char *what, kvs__key_filter keep, void *ctx,
                           struct kvs__err *e)
{
    struct kvs__state_file *f;
    int rc;

    if ((rc = kvs__optim_decode(img, len, what, &f, e)) != 0)
        return rc;
    return take_states(eng, f, what, keep, ctx, e);
}

