/*
 * snapshot.c - a store's snapshot (snapshot.h): every key of an engine
 * with its value and round count, the optimizer's spec and states, and the
 * job's step, as one checksummed image; written to a file (a new file
 * renamed over the old), or to memory; read back (a file is mapped, not
 * copied) and checked whole; restored into an empty engine. A checkpoint
 * folder of them is ckpt.c's.
 *
 * It owns the snapshot format (below); the optimizer states inside are a
 * state file's bytes, engine_states.c's and statefile.c's to make and to
 * check. It must never trust a byte it reads: every length is checked
 * against the bytes left before it is used, nothing is allocated by a size
 * read before that size is known to fit, and a file failing a check is
 * KVS_ECORRUPT, never a crash. It must never leave a half-written file at
 * the path it was asked to write, nor a temporary file beside it. It never
 * holds a whole image in memory to write a file: values and optimizer
 * states go from the engine's memory into the file, each byte read once
 * (checksummed a piece at a time just before the piece is written); the
 * states' own checksum is joined into the image's, not computed twice.
 *
 * Format 1. Integers are little-endian, written byte by byte; values are
 * their elements' bytes, little-endian (the only hosts kvs builds on).
 *
 *   8   magic "KVSSNAPS"
 *   4   format version (1)
 *   4   flags (0)
 *   8   step (>= 0)
 *   4   length of the job's name (0..64), then its bytes
 *   4   nworkers (>= 1)
 *   4   sync (-1, 0, 1)
 *   8   seq
 *   8   made_ns
 *   4   length of the optimizer's spec (0: none; up to 64 KiB), then its bytes
 *   8   number of keys; then each key, in kvs__engine_foreach's order:
 *       1   kind: 0 int, 1 string
 *       8   int key: its id; string key: 4 length (0..KVS_MAX_KEY_LEN), bytes
 *       4   dtype
 *       4   ndim (0..KVS_MAX_NDIM), then ndim extents of 8 bytes each
 *       8   round count
 *       8   value bytes (the shape's elements times the dtype's size),
 *           then the value
 *   8   length of the optimizer states (0: none), then a state file's bytes
 *   4   CRC-32C of every byte before it
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "store/snapshot.h"
#include "store/statefile_codec.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot.c writes values as they lie in memory: little-endian hosts only"
#endif

#define SN_MAGIC "KVSSNAPS"
#define SN_MAGIC_LEN 8
#define SN_VERSION 1u
#define SN_JOB_MAX 64
#define SN_SPEC_MAX 65536u
/* magic, version, flags, step, job, nworkers, sync, seq, made_ns, spec,
 * key count, states length, CRC */
#define SN_FILE_MIN (SN_MAGIC_LEN + 4 + 4 + 8 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4)
/* The smallest key record: a string key of no bytes, a scalar of none. */
#define SN_KEY_MIN (1 + 4 + 4 + 4 + 8 + 8)

struct kvs__snapshot {
    struct kvs__snap_meta meta;
    const uint8_t *img;                /* the whole image, len bytes */
    size_t len;
    int mapped;                        /* munmap img, else free it */
    char *what;                        /* names the image in messages */
    char *spec;                        /* NULL: none */
    size_t nkeys;
    size_t keys_off;                   /* where the first key record starts */
    const uint8_t *states;             /* a state file's bytes; NULL: none */
    size_t states_len;
};

/* One key record, as read: name and value point into the image. */
struct rec {
    kvs_key_t key;                     /* name: NULL for an int key, else below */
    char name[KVS_MAX_KEY_LEN + 1];
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t rounds;
    const uint8_t *value;
    size_t bytes;
};

/* ---- Capturing ------------------------------------------------------- */

/* A key as captured: its record's fields, and where its value lies. */
struct cap_key {
    size_t name_off;                   /* in the capture's names; SIZE_MAX: an int key */
    int64_t id;
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t rounds;
    const uint8_t *value;              /* the engine's value, live */
    size_t bytes;
};

struct kvs__snap_capture {
    struct kvs__snap_meta meta;
    char *spec;                        /* NULL: none */
    struct cap_key *keys;
    size_t nkeys;
    char *names;                       /* string keys' names, each NUL-terminated */
    size_t names_len, names_cap;
    uint64_t keys_size;                /* bytes of the key records */
    struct kvs__engine *eng;           /* live states: put from here at the write */
    uint8_t *states;                   /* else the states' bytes as captured (NULL: none) */
    uint64_t states_len;
};

struct cap_ctx {
    struct kvs__snap_capture *c;
    kvs__snap_rounds_fn rounds;
    void *ctx;
    struct kvs__err *e;
};

static int key_fail(struct kvs__err *e, int code, kvs_key_t key, const char *why)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    kvs__key_str(ks, sizeof ks, key);
    return kvs__fail(e, code, "snapshot: key %s %s", ks, why);
}

static uint64_t rec_size(kvs_key_t key, const struct kvs__entry_info *info)
{
    uint64_t n = 1 + (key.name ? 4 + strlen(key.name) : 8) + 4 + 4 + 8 * (uint64_t)info->ndim
                 + 8 + 8;
    return n + info->bytes;
}

/* One key into the capture: every value must be in host memory. */
static int capture_key(void *arg, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct cap_ctx *x = arg;
    struct kvs__snap_capture *c = x->c;
    struct cap_key *k;

    if (info->device != KVS_HOST)
        return key_fail(x->e, KVS_ENOTSUP, key,
                        "has its value on a GPU; snapshots take host values only");
    if (c->nkeys == kvs__engine_nkeys(c->eng))  /* the engine did not change: never */
        return kvs__fail(x->e, -EIO, "snapshot: more keys than the engine counts");
    k = &c->keys[c->nkeys];
    k->name_off = SIZE_MAX;
    if (key.name) {
        size_t n = strlen(key.name) + 1;

        if (n > c->names_cap - c->names_len) {
            size_t cap = c->names_cap ? c->names_cap * 2 : 4096;
            char *p;

            while (cap - c->names_len < n)
                cap *= 2;
            if (!(p = realloc(c->names, cap)))
                return kvs__fail(x->e, -ENOMEM, "snapshot: out of memory for key names");
            c->names = p;
            c->names_cap = cap;
        }
        memcpy(c->names + c->names_len, key.name, n);
        k->name_off = c->names_len;
        c->names_len += n;
    }
    k->id = key.id;
    k->dtype = info->dtype;
    k->ndim = info->ndim;
    for (int d = 0; d < info->ndim; d++)
        k->shape[d] = info->shape[d];
    k->rounds = x->rounds ? x->rounds(x->ctx, info) : 0;
    k->value = info->value;
    k->bytes = info->bytes;
    c->keys_size += rec_size(key, info);
    c->nkeys++;
    return 0;
}

void kvs__capture_free(struct kvs__snap_capture *c)
{
    if (!c)
        return;
    free(c->spec);
    free(c->keys);
    free(c->names);
    free(c->states);
    free(c);
}

size_t kvs__capture_nkeys(const struct kvs__snap_capture *c)
{
    return c->nkeys;
}

/* live_states: the states are put from eng when the image is written
 * (the caller keeps eng unchanged until then), not copied now. */
static int capture(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                   kvs__snap_rounds_fn rounds, void *ctx, int live_states,
                   struct kvs__snap_capture **out, struct kvs__err *e)
{
    struct kvs__snap_capture *c;
    struct cap_ctx x = { .rounds = rounds, .ctx = ctx, .e = e };
    const char *spec;
    size_t n;
    int rc;

    *out = NULL;
    if (!eng || !meta)
        return kvs__fail(e, KVS_EBADARG, "snapshot: %s is NULL", eng ? "meta" : "engine");
    if (meta->step < 0)
        return kvs__fail(e, KVS_EBADARG, "snapshot: step %" PRId64 " < 0", meta->step);
    if (strnlen(meta->job, sizeof meta->job) > SN_JOB_MAX)
        return kvs__fail(e, KVS_EBADARG, "snapshot: job name longer than %d bytes",
                         SN_JOB_MAX);
    if (meta->nworkers < 1 || meta->sync < -1 || meta->sync > 1)
        return kvs__fail(e, KVS_EBADARG, "snapshot: nworkers %" PRId32 ", sync %" PRId32,
                         meta->nworkers, meta->sync);
    spec = kvs__engine_optimizer(eng);
    if (spec && strlen(spec) > SN_SPEC_MAX)
        return kvs__fail(e, KVS_EBADARG, "snapshot: optimizer spec longer than %u bytes",
                         SN_SPEC_MAX);
    n = kvs__engine_nkeys(eng);
    if (!(c = calloc(1, sizeof *c)) || !(c->keys = malloc(sizeof *c->keys * (n ? n : 1)))
        || (spec && !(c->spec = strdup(spec)))) {
        kvs__capture_free(c);
        return kvs__fail(e, -ENOMEM, "snapshot: out of memory for %zu keys", n);
    }
    c->meta = *meta;
    c->meta.job[sizeof c->meta.job - 1] = '\0';
    c->eng = eng;
    x.c = c;
    if ((rc = kvs__engine_foreach(eng, capture_key, &x, e)) != 0)
        goto fail;
    if (c->spec) {
        struct kvs__sf_writer cw = { .fd = -1, .count_only = 1 };
        size_t len;

        if (live_states) {
            if ((rc = kvs__engine_put_states(eng, &cw, e)) != 0)
                goto fail;
            c->states_len = cw.total;
        } else {
            if ((rc = kvs__engine_encode_states(eng, NULL, NULL, &c->states, &len, e)) != 0)
                goto fail;
            c->states_len = len;
        }
    }
    if (!live_states)
        c->eng = NULL;                 /* never touched again */
    *out = c;
    return 0;
fail:
    kvs__capture_free(c);
    return rc;
}

int kvs__snapshot_capture(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                          kvs__snap_rounds_fn rounds, void *ctx,
                          struct kvs__snap_capture **out, struct kvs__err *e)
{
    if (!out)
        return kvs__fail(e, KVS_EBADARG, "snapshot: output is NULL");
    return capture(eng, meta, rounds, ctx, 0, out, e);
}

static uint64_t image_size(const struct kvs__snap_capture *c)
{
    return SN_FILE_MIN + strnlen(c->meta.job, sizeof c->meta.job)
           + (c->spec ? strlen(c->spec) : 0) + c->keys_size + c->states_len;
}

/* ---- Writing --------------------------------------------------------- */

/* A value's bytes read a piece at a time through a source, so that the
 * front's lock is held for a piece's write only. */
#define SN_SOURCE_PIECE ((size_t)1 << 20)

static void put_value(struct kvs__sf_writer *w, const struct cap_key *k, size_t i,
                      const struct kvs__snap_source *src)
{
    if (!src) {
        if (k->bytes)
            kvs__sf_put(w, k->value, k->bytes);
        return;
    }
    for (uint64_t off = 0; off < k->bytes && w->err == 0;) {
        size_t n = k->bytes - off < SN_SOURCE_PIECE ? (size_t)(k->bytes - off)
                                                    : SN_SOURCE_PIECE;

        kvs__sf_put(w, src->begin(src->ctx, i, k->value, off, n), n);
        src->end(src->ctx, i, off, n);
        off += n;
    }
}

static void put_key(struct kvs__sf_writer *w, const struct kvs__snap_capture *c, size_t i,
                    const struct kvs__snap_source *src)
{
    const struct cap_key *k = &c->keys[i];

    if (k->name_off != SIZE_MAX) {
        const char *name = c->names + k->name_off;
        size_t n = strlen(name);

        kvs__sf_u8(w, 1);
        kvs__sf_u32(w, (uint32_t)n);
        kvs__sf_put(w, name, n);
    } else {
        kvs__sf_u8(w, 0);
        kvs__sf_u64(w, (uint64_t)k->id);
    }
    kvs__sf_u32(w, (uint32_t)k->dtype);
    kvs__sf_u32(w, (uint32_t)k->ndim);
    for (int d = 0; d < k->ndim; d++)
        kvs__sf_u64(w, (uint64_t)k->shape[d]);
    kvs__sf_u64(w, k->rounds);
    kvs__sf_u64(w, k->bytes);
    put_value(w, k, i, src);
}

/* The whole image into w, its CRC last; a write failure is in w->err, a
 * failure of the live states returned. */
static int put_image(struct kvs__sf_writer *w, const struct kvs__snap_capture *c,
                     const struct kvs__snap_source *src, struct kvs__err *e)
{
    const struct kvs__snap_meta *meta = &c->meta;
    size_t jlen = strnlen(meta->job, sizeof meta->job);
    uint8_t trailer[4];
    int rc;

    kvs__sf_put(w, SN_MAGIC, SN_MAGIC_LEN);
    kvs__sf_u32(w, SN_VERSION);
    kvs__sf_u32(w, 0);
    kvs__sf_u64(w, (uint64_t)meta->step);
    kvs__sf_u32(w, (uint32_t)jlen);
    kvs__sf_put(w, meta->job, jlen);
    kvs__sf_u32(w, (uint32_t)meta->nworkers);
    kvs__sf_u32(w, (uint32_t)meta->sync);
    kvs__sf_u64(w, meta->seq);
    kvs__sf_u64(w, (uint64_t)meta->made_ns);
    kvs__sf_u32(w, c->spec ? (uint32_t)strlen(c->spec) : 0);
    if (c->spec)
        kvs__sf_put(w, c->spec, strlen(c->spec));
    kvs__sf_u64(w, c->nkeys);
    /* A failed write stops the walk at once: the rest would be wasted. */
    for (size_t i = 0; i < c->nkeys && w->err == 0; i++)
        put_key(w, c, i, src);
    kvs__sf_u64(w, c->states_len);
    if (c->states) {
        kvs__sf_put(w, c->states, c->states_len);
    } else if (c->spec && c->eng) {
        uint32_t crc = w->crc;
        uint64_t at = w->total;

        if ((rc = kvs__engine_put_states(c->eng, w, e)) != 0)
            return rc;
        if (w->err == 0 && w->total - at != c->states_len)
            return kvs__fail(e, -EIO, "snapshot: optimizer states of %" PRIu64
                             " bytes, counted %" PRIu64, w->total - at, c->states_len);
        w->crc = kvs__crc32c_combine(crc, w->crc, c->states_len);
    }
    kvs__le32_put(trailer, w->crc);
    kvs__sf_put(w, trailer, sizeof trailer);
    kvs__sf_flush(w);
    return 0;
}

int kvs__snapshot_encode(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                         kvs__snap_rounds_fn rounds, void *ctx, uint8_t **out, size_t *len,
                         struct kvs__err *e)
{
    struct kvs__sf_writer w = { .fd = -1 };
    struct kvs__snap_capture *c = NULL;
    uint64_t size;
    int rc;

    if (!out || !len)
        return kvs__fail(e, KVS_EBADARG, "snapshot: output is NULL");
    if ((rc = capture(eng, meta, rounds, ctx, 1, &c, e)) != 0)
        goto out;
    size = image_size(c);
    /* The exact size at once: no doubling of a big store's image. */
    if (size > SIZE_MAX || !(w.mem = malloc((size_t)size))
        || !(w.buf = malloc(KVS__SF_WRITE_BUF))) {
        rc = kvs__fail(e, -ENOMEM, "snapshot: out of memory for %" PRIu64 " bytes", size);
        goto out;
    }
    w.mem_cap = (size_t)size;
    if ((rc = put_image(&w, c, NULL, e)) != 0)
        goto out;
    if (w.err) {
        rc = kvs__fail(e, w.err, "snapshot: out of memory for %" PRIu64 " bytes", size);
        goto out;
    }
    *out = w.mem;
    *len = w.mem_len;
    w.mem = NULL;
out:
    kvs__capture_free(c);
    free(w.mem);
    free(w.buf);
    return rc;
}

static char *tmp_name(const char *path)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);

    if (tmp)
        snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    return tmp;
}

/* The image of c written to path, its values read through src (NULL:
 * as they lie now). */
static int write_capture(const struct kvs__snap_capture *c, const struct kvs__snap_source *src,
                         const char *path, int durable, uint64_t *bytes, struct kvs__err *e)
{
    struct kvs__sf_writer w = { .fd = -1 };
    char *tmp = NULL;
    int rc, renamed = 0;

    if (!(tmp = tmp_name(path)) || !(w.buf = malloc(KVS__SF_WRITE_BUF))) {
        rc = kvs__fail(e, -ENOMEM, "snapshot: out of memory");
        goto out;
    }
    if ((w.fd = kvs__file_create(tmp, e)) < 0) {
        rc = w.fd;
        w.fd = -1;
        goto out;
    }
    if ((rc = put_image(&w, c, src, e)) != 0)
        goto out;
    if (w.err) {
        rc = kvs__fail(e, w.err, "cannot write '%s': %s", tmp, kvs_strerror(w.err));
        goto out;
    }
    rc = kvs__file_finish(w.fd, tmp, path, durable, e);
    w.fd = -1;
    if (rc != 0)
        goto out;
    renamed = 1;
    if (bytes)
        *bytes = image_size(c);
    /* The new file is in place; a failure here only means the rename might
     * not survive a power cut, which the caller still hears of. */
    if (durable)
        rc = kvs__fsync_dir_of(path, e);
out:
    if (w.fd >= 0)
        close(w.fd);
    if (tmp && !renamed)
        unlink(tmp);
    free(tmp);
    free(w.buf);
    return rc;
}

int kvs__snapshot_write(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                        kvs__snap_rounds_fn rounds, void *ctx, const char *path,
                        int durable, uint64_t *bytes, struct kvs__err *e)
{
    struct kvs__snap_capture *c = NULL;
    int rc;

    if (!path || !path[0])
        return kvs__fail(e, KVS_EBADARG, "snapshot: %s path", path ? "empty" : "NULL");
    if ((rc = capture(eng, meta, rounds, ctx, 1, &c, e)) != 0)
        return rc;
    rc = write_capture(c, NULL, path, durable, bytes, e);
    kvs__capture_free(c);
    return rc;
}

int kvs__snapshot_write_capture(const struct kvs__snap_capture *c,
                                const struct kvs__snap_source *src, const char *path,
                                int durable, uint64_t *bytes, struct kvs__err *e)
{
    if (!c || !path || !path[0])
        return kvs__fail(e, KVS_EBADARG, "snapshot: %s", !c ? "no capture"
                         : path ? "empty path" : "NULL path");
    if (src && (!src->begin || !src->end))
        return kvs__fail(e, KVS_EBADARG, "snapshot: a source without its calls");
    return write_capture(c, src, path, durable, bytes, e);
}

/* ---- Reading --------------------------------------------------------- */

static int corrupt(struct kvs__err *e, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int corrupt(struct kvs__err *e, const char *what, const char *fmt, ...)
{
    char msg[KVS__ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kvs__fail(e, KVS_ECORRUPT, "%s (snapshot '%s')", msg, what);
}

/* The next key record of r into *k; prev_kind: that of the records
 * before (-1: none). */
static int read_key(struct kvs__sf_reader *r, size_t i, int prev_kind, struct rec *k,
                    const char *what, struct kvs__err *e)
{
    uint8_t kind;
    uint32_t u, ndim;
    uint64_t v, count = 1, bytes;
    const uint8_t *p;

    if (kvs__sf_get_u8(r, &kind) != 0)
        return corrupt(e, what, "key record %zu truncated", i);
    if (kind > 1 || (prev_kind >= 0 && kind != prev_kind))
        return corrupt(e, what, "key record %zu: bad key kind %u", i, kind);
    if (kind == 0) {
        if (kvs__sf_get_u64(r, &v) != 0)
            return corrupt(e, what, "key record %zu truncated", i);
        k->key = KVS_INT_KEY((int64_t)v);
    } else {
        if (kvs__sf_get_u32(r, &u) != 0 || u > KVS_MAX_KEY_LEN || !(p = kvs__sf_take(r, u))
            || memchr(p, 0, u))
            return corrupt(e, what, "key record %zu: bad or truncated key name", i);
        memcpy(k->name, p, u);
        k->name[u] = '\0';
        k->key = KVS_STR_KEY(k->name);
    }
    if (kvs__sf_get_u32(r, &u) != 0 || kvs__sf_get_u32(r, &ndim) != 0)
        return corrupt(e, what, "key record %zu truncated", i);
    if (u > KVS_UINT8 || ndim > KVS_MAX_NDIM)
        return corrupt(e, what, "key record %zu: dtype %" PRIu32 ", ndim %" PRIu32, i, u,
                       ndim);
    k->dtype = (kvs_dtype_t)u;
    k->ndim = (int)ndim;
    for (uint32_t d = 0; d < ndim; d++) {
        if (kvs__sf_get_u64(r, &v) != 0)
            return corrupt(e, what, "key record %zu truncated", i);
        if (v > INT64_MAX || __builtin_mul_overflow(count, v, &count))
            return corrupt(e, what, "key record %zu: extent %" PRIu64, i, v);
        k->shape[d] = (int64_t)v;
    }
    if (kvs__sf_get_u64(r, &k->rounds) != 0 || kvs__sf_get_u64(r, &bytes) != 0)
        return corrupt(e, what, "key record %zu truncated", i);
    if (__builtin_mul_overflow(count, (uint64_t)kvs_dtype_size(k->dtype), &v) || v != bytes)
        return corrupt(e, what, "key record %zu: %" PRIu64 " value bytes for its shape", i,
                       bytes);
    if (bytes > r->left || !(k->value = kvs__sf_take(r, (size_t)bytes)))
        return corrupt(e, what, "key record %zu: value truncated", i);
    k->bytes = (size_t)bytes;
    return 0;
}

/* Checks the image of s (img, len set) whole and fills in the rest. */
static int parse(struct kvs__snapshot *s, struct kvs__err *e)
{
    const uint8_t *img = s->img;
    const char *what = s->what;
    struct kvs__sf_reader r;
    struct kvs__snap_meta *m = &s->meta;
    uint32_t u, flags, stored, computed;
    uint64_t v;
    const uint8_t *p;
    int kind = -1;
    struct rec *k;
    int rc = 0;

    if (s->len < SN_FILE_MIN)
        return corrupt(e, what, "%zu bytes, too short for a snapshot", s->len);
    if (memcmp(img, SN_MAGIC, SN_MAGIC_LEN) != 0)
        return corrupt(e, what, "not a snapshot (bad magic)");
    if ((u = kvs__le32_get(img + SN_MAGIC_LEN)) != SN_VERSION)
        return corrupt(e, what, "format version %" PRIu32 ", this build reads version %u", u,
                       SN_VERSION);
    stored = kvs__le32_get(img + s->len - 4);
    computed = kvs__crc32c(0, img, s->len - 4);
    if (stored != computed)
        return corrupt(e, what, "checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
                       "): damaged or truncated", stored, computed);
    r.p = img + SN_MAGIC_LEN + 4;
    r.left = s->len - SN_MAGIC_LEN - 4 - 4;
    memset(m, 0, sizeof *m);
    if (kvs__sf_get_u32(&r, &flags) != 0 || kvs__sf_get_u64(&r, &v) != 0)
        return corrupt(e, what, "truncated in the header");
    if (flags != 0)
        return corrupt(e, what, "unknown flags %08" PRIx32, flags);
    if (v > INT64_MAX)
        return corrupt(e, what, "step %" PRIu64, v);
    m->step = (int64_t)v;
    if (kvs__sf_get_u32(&r, &u) != 0 || u > SN_JOB_MAX || !(p = kvs__sf_take(&r, u))
        || memchr(p, 0, u))
        return corrupt(e, what, "bad or truncated job name");
    memcpy(m->job, p, u);
    m->job[u] = '\0';
    if (kvs__sf_get_u32(&r, &u) != 0)
        return corrupt(e, what, "truncated in the header");
    m->nworkers = (int32_t)u;
    if (kvs__sf_get_u32(&r, &u) != 0)
        return corrupt(e, what, "truncated in the header");
    m->sync = (int32_t)u;
    if (m->nworkers < 1 || m->sync < -1 || m->sync > 1)
        return corrupt(e, what, "nworkers %" PRId32 ", sync %" PRId32, m->nworkers, m->sync);
    if (kvs__sf_get_u64(&r, &m->seq) != 0 || kvs__sf_get_u64(&r, &v) != 0)
        return corrupt(e, what, "truncated in the header");
    m->made_ns = (int64_t)v;
    if (kvs__sf_get_u32(&r, &u) != 0 || u > SN_SPEC_MAX || !(p = kvs__sf_take(&r, u))
        || memchr(p, 0, u))
        return corrupt(e, what, "bad or truncated optimizer spec");
    if (u > 0) {
        if (!(s->spec = malloc((size_t)u + 1)))
            return kvs__fail(e, -ENOMEM, "out of memory");
        memcpy(s->spec, p, u);
        s->spec[u] = '\0';
    }
    if (kvs__sf_get_u64(&r, &v) != 0)
        return corrupt(e, what, "truncated before the key count");
    if (v > r.left / SN_KEY_MIN)
        return corrupt(e, what, "%" PRIu64 " keys cannot fit in the file", v);
    s->nkeys = (size_t)v;
    s->keys_off = (size_t)(r.p - img);
    if (!(k = malloc(sizeof *k)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (size_t i = 0; i < s->nkeys && rc == 0; i++) {
        rc = read_key(&r, i, kind, k, what, e);
        kind = k->key.name ? 1 : 0;
    }
    free(k);
    if (rc != 0)
        return rc;
    if (kvs__sf_get_u64(&r, &v) != 0 || v != r.left)
        return corrupt(e, what, "optimizer states' length does not match the file's");
    if (v > 0 && !s->spec)
        return corrupt(e, what, "optimizer states without an optimizer");
    s->states_len = (size_t)v;
    s->states = v ? kvs__sf_take(&r, (size_t)v) : NULL;
    return 0;
}

static int snapshot_new(const char *what, struct kvs__snapshot **out, struct kvs__err *e)
{
    struct kvs__snapshot *s = calloc(1, sizeof *s);

    if (!s || !(s->what = strdup(what ? what : "(memory)"))) {
        free(s);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

int kvs__snapshot_open(const char *path, struct kvs__snapshot **out, struct kvs__err *e)
{
    struct kvs__snapshot *s;
    struct stat st;
    void *m;
    int fd, rc;

    if (!path || !out)
        return kvs__fail(e, KVS_EBADARG, "snapshot: %s is NULL", path ? "output" : "path");
    *out = NULL;
    if ((rc = kvs__sf_open_read(path, &fd, &st, e)) != 0)
        return rc;
    if (!S_ISREG(st.st_mode)) {
        rc = kvs__fail(e, -EINVAL, "cannot read snapshot '%s': not a regular file", path);
        goto fail_fd;
    }
    if (st.st_size < (off_t)SN_FILE_MIN || (uint64_t)st.st_size > SIZE_MAX) {
        rc = corrupt(e, path, "%jd bytes, not the size of a snapshot", (intmax_t)st.st_size);
        goto fail_fd;
    }
    if ((rc = snapshot_new(path, &s, e)) != 0)
        goto fail_fd;
    /* Mapped, not read: a big store's snapshot is not copied into memory.
     * The file is renamed into place whole and never written again. */
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        kvs__fail(e, rc, "cannot map '%s': %s", path, kvs_strerror(rc));
        kvs__snapshot_free(s);
        goto fail_fd;
    }
    close(fd);
    s->img = m;
    s->len = (size_t)st.st_size;
    s->mapped = 1;
    if ((rc = parse(s, e)) != 0) {
        kvs__snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
fail_fd:
    close(fd);
    return rc;
}

int kvs__snapshot_from(const uint8_t *img, size_t len, const char *what,
                       struct kvs__snapshot **out, struct kvs__err *e)
{
    struct kvs__snapshot *s;
    uint8_t *copy;
    int rc;

    if (!out || (!img && len))
        return kvs__fail(e, KVS_EBADARG, "snapshot: %s is NULL", out ? "image" : "output");
    *out = NULL;
    if ((rc = snapshot_new(what, &s, e)) != 0)
        return rc;
    if (!(copy = malloc(len ? len : 1))) {
        kvs__snapshot_free(s);
        return kvs__fail(e, -ENOMEM, "out of memory for a %zu-byte snapshot", len);
    }
    if (len)
        memcpy(copy, img, len);
    s->img = copy;
    s->len = len;
    if ((rc = parse(s, e)) != 0) {
        kvs__snapshot_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

const struct kvs__snap_meta *kvs__snapshot_meta(const struct kvs__snapshot *s)
{
    return &s->meta;
}

size_t kvs__snapshot_nkeys(const struct kvs__snapshot *s)
{
    return s->nkeys;
}

uint64_t kvs__snapshot_bytes(const struct kvs__snapshot *s)
{
    return s->len;
}

void kvs__snapshot_free(struct kvs__snapshot *s)
{
    if (!s)
        return;
    if (s->mapped)
        munmap((void *)s->img, s->len);
    else
        free((void *)s->img);
    free(s->spec);
    free(s->what);
    free(s);
}

int kvs__snapshot_restore(struct kvs__engine *eng, const struct kvs__snapshot *s,
                          kvs__snap_made_fn made, void *ctx, struct kvs__err *e)
{
    struct kvs__sf_reader r;
    struct kvs__entry_info info;
    struct rec *k;
    int rc = 0;

    if (!eng || !s)
        return kvs__fail(e, KVS_EBADARG, "snapshot restore: %s is NULL",
                         eng ? "snapshot" : "engine");
    if (kvs__engine_nkeys(eng) != 0)
        return kvs__fail(e, KVS_EKEYEXISTS, "snapshot restore: the store holds %zu keys "
                         "already", kvs__engine_nkeys(eng));
    if (!(k = malloc(sizeof *k)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    r.p = s->img + s->keys_off;
    r.left = s->len - s->keys_off;
    for (size_t i = 0; i < s->nkeys && rc == 0; i++) {
        kvs_array_t a = { 0 };

        if ((rc = read_key(&r, i, -1, k, s->what, e)) != 0)
            break;
        a.data = (void *)k->value;
        a.dtype = k->dtype;
        a.ndim = k->ndim;
        memcpy(a.shape, k->shape, sizeof a.shape);
        a.device = KVS_HOST;
        rc = kvs__engine_init(eng, 1, &k->key, &a, 0, e);
        if (rc == KVS_EKEYEXISTS)      /* the engine was empty: the image names it twice */
            rc = corrupt(e, s->what, "key record %zu repeats a key", i);
        if (rc == 0 && made && (rc = kvs__engine_lookup(eng, k->key, &info, e)) == 0)
            rc = made(ctx, k->key, &info, k->rounds, e);
    }
    free(k);
    if (rc != 0)
        return rc;
    if (s->spec && (rc = kvs__engine_set_optimizer(eng, s->spec, e)) != 0)
        return rc;
    if (s->states_len)
        rc = kvs__engine_load_image(eng, s->states, s->states_len, s->what, NULL, NULL, e);
    return rc;
}
