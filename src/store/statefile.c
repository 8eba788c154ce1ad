/*
 * statefile.c - the optimizer state file: kvs__optim_save writes it
 * atomically, kvs__optim_load reads and checks the whole of it. Owns the
 * file format (below) and its checksum.
 *
 * It must never trust a byte of a file it reads: every length is checked
 * against the bytes left before it is used, nothing is allocated by a size
 * from the file before that size is known to fit in the file, and a file
 * failing any check leaves nothing behind. It must never leave a
 * half-written file at the path it was asked to write, nor a temporary file
 * beside it. It knows nothing of stores: it writes the records the engine
 * hands in and hands back the records it read.
 *
 * Format 1. Every integer is little-endian and written byte by byte, so the
 * file reads the same on any host; state values are IEEE-754 bit patterns,
 * little-endian, element by element.
 *
 *   8   magic "KVSOPTST"
 *   4   format version (1)
 *   4   flags: bit 0 = the optimizer's spec follows; other bits are 0
 *   4   length of the optimizer's name (1..64), then its bytes
 *       if flag bit 0: 4 length of the spec (1..4096), then its bytes
 *   8   number of records; then each record:
 *       1   key kind: 0 int, 1 string
 *       8   int key: its id (two's complement)
 *           string key: 4 length (0..KVS_MAX_KEY_LEN), then the bytes
 *       4   key dtype (a float kvs_dtype_t)
 *       4   state dtype (KVS_FLOAT64 for float64 keys, else KVS_FLOAT32)
 *       8   t, updates applied so far
 *       8   count, elements per buffer
 *       4   nbuf (0..2), then nbuf buffers of count elements each
 *   4   CRC-32C (Castagnoli) of every byte before it
 *
 * A new layout takes a new version number; readers refuse versions they do
 * not know rather than guess.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* mkostemp, strndup */
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/statefile.h"

#define SF_MAGIC "KVSOPTST"
#define SF_MAGIC_LEN 8
#define SF_VERSION 1u
#define SF_FLAG_SPEC 1u
#define SF_NAME_MAX 64
#define SF_SPEC_MAX 4096
#define SF_KEY_INT 0
#define SF_KEY_STRING 1
/* magic, version, flags, name length, a 1-byte name, record count, CRC */
#define SF_FILE_MIN (SF_MAGIC_LEN + 4 + 4 + 4 + 1 + 8 + 4)
/* the smallest record: an empty string key and no buffers */
#define SF_RECORD_MIN (1 + 4 + 4 + 4 + 8 + 8 + 4)
/* No state kvs keeps comes near this; a bigger "file" is a device or a
 * mistake, and reading it whole would only end in ENOMEM or worse. */
#define SF_FILE_MAX ((uint64_t)1 << 40)
#define SF_WRITE_BUF ((size_t)1 << 16)
#define SF_CHUNK 4096                  /* bytes of values converted per round */

/* ---- CRC-32C --------------------------------------------------------- */

/* Slicing by 8 bytes: the file may hold gigabytes of state, and a bytewise
 * table would make the checksum the slow part of a save. */
#define CRC32C_POLY 0x82f63b78u        /* Castagnoli, bit-reflected */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
    }
}

/* CRC-32C of data continued from crc (0 to start): crc32c(crc32c(0, a), b)
 * is the CRC of a followed by b. */
static uint32_t crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;

    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- Little-endian fields -------------------------------------------- */

static void le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t le32_get(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t state_esize(kvs_dtype_t dtype)
{
    return dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
}

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

/* Finds keys of both kinds, or a key twice: a file with either could not
 * have come from one store. Returns 0 (none), 1 (what describes the clash)
 * or -ENOMEM. */
static int find_key_clash(const struct kvs__state_rec *recs, size_t n, char *what,
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

/* Writes to fd through buf, or (fd < 0) into mem, grown as needed. */
struct writer {
    int fd;
    int err;                           /* the first -errno; later puts do nothing */
    uint32_t crc;                      /* of everything put so far */
    size_t used;
    uint8_t *buf;                      /* SF_WRITE_BUF bytes */
    uint8_t *mem;                      /* fd < 0: what was written, mem_len of mem_cap */
    size_t mem_len, mem_cap;
};

static int mem_append(struct writer *w, const uint8_t *p, size_t n)
{
    if (n > w->mem_cap - w->mem_len) {
        size_t cap = w->mem_cap ? w->mem_cap : SF_WRITE_BUF;
        uint8_t *m;

        while (cap - w->mem_len < n) {
            if (cap > SIZE_MAX / 2)
                return -ENOMEM;
            cap *= 2;
        }
        if (!(m = realloc(w->mem, cap)))
            return -ENOMEM;
        w->mem = m;
        w->mem_cap = cap;
    }
    memcpy(w->mem + w->mem_len, p, n);
    w->mem_len += n;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n > (size_t)SSIZE_MAX ? (size_t)SSIZE_MAX : n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            return -EIO;               /* a regular file never takes nothing; do not spin */
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int w_write(struct writer *w, const uint8_t *p, size_t n)
{
    return w->fd < 0 ? mem_append(w, p, n) : write_all(w->fd, p, n);
}

static void w_flush(struct writer *w)
{
    if (w->err == 0 && w->used > 0)
        w->err = w_write(w, w->buf, w->used);
    w->used = 0;
}

static void w_put(struct writer *w, const void *data, size_t n)
{
    if (w->err != 0)
        return;
    w->crc = crc32c(w->crc, data, n);
    if (n > SF_WRITE_BUF - w->used) {
        w_flush(w);
        if (n >= SF_WRITE_BUF) {
            if (w->err == 0)
                w->err = w_write(w, data, n);
            return;
        }
    }
    memcpy(w->buf + w->used, data, n);
    w->used += n;
}

static void w_u8(struct writer *w, uint8_t v)
{
    w_put(w, &v, 1);
}

static void w_u32(struct writer *w, uint32_t v)
{
    uint8_t b[4];
    le32_put(b, v);
    w_put(w, b, sizeof b);
}

static void w_u64(struct writer *w, uint64_t v)
{
    uint8_t b[8];
    le64_put(b, v);
    w_put(w, b, sizeof b);
}

/* count elements of a float32 or float64 buffer, as little-endian bits. */
static void w_values(struct writer *w, kvs_dtype_t dtype, const void *buf, size_t count)
{
    uint8_t chunk[SF_CHUNK];
    size_t esize = state_esize(dtype);
    size_t per = sizeof chunk / esize;

    for (size_t off = 0; off < count && w->err == 0; off += per) {
        size_t n = count - off < per ? count - off : per;
        for (size_t i = 0; i < n; i++) {
            if (dtype == KVS_FLOAT64) {
                uint64_t bits;
                memcpy(&bits, (const double *)buf + off + i, sizeof bits);
                le64_put(chunk + i * 8, bits);
            } else {
                uint32_t bits;
                memcpy(&bits, (const float *)buf + off + i, sizeof bits);
                le32_put(chunk + i * 4, bits);
            }
        }
        w_put(w, chunk, n * esize);
    }
}

static void write_contents(struct writer *w, const struct kvs__optim *o, int dump_optimizer,
                           const struct kvs__state_rec *recs, size_t n)
{
    const char *name = kvs__optim_name(o);
    uint8_t trailer[4];

    w_put(w, SF_MAGIC, SF_MAGIC_LEN);
    w_u32(w, SF_VERSION);
    w_u32(w, dump_optimizer ? SF_FLAG_SPEC : 0);
    w_u32(w, (uint32_t)strlen(name));
    w_put(w, name, strlen(name));
    if (dump_optimizer) {
        const char *spec = kvs__optim_spec(o);
        w_u32(w, (uint32_t)strlen(spec));
        w_put(w, spec, strlen(spec));
    }
    w_u64(w, n);

    for (size_t i = 0; i < n; i++) {
        const struct kvs__state_rec *r = &recs[i];
        const struct kvs__optim_state *s = r->state;

        if (r->key.name == NULL) {
            w_u8(w, SF_KEY_INT);
            w_u64(w, (uint64_t)r->key.id);
        } else {
            size_t len = strlen(r->key.name);
            w_u8(w, SF_KEY_STRING);
            w_u32(w, (uint32_t)len);
            w_put(w, r->key.name, len);
        }
        w_u32(w, (uint32_t)r->key_dtype);
        w_u32(w, (uint32_t)s->dtype);
        w_u64(w, s->t);
        w_u64(w, s->count);
        w_u32(w, (uint32_t)s->nbuf);
        for (int b = 0; b < s->nbuf; b++)
            w_values(w, s->dtype, s->buf[b], s->count);
    }

    le32_put(trailer, w->crc);
    w_put(w, trailer, sizeof trailer);
    w_flush(w);
}

/* Everything a save needs is checked before a file is created, so that a
 * bad argument never costs a temporary file. */
static int check_save_args(const char *path, const struct kvs__optim *o,
                           const struct kvs__state_rec *recs, size_t n, struct kvs__err *e)
{
    char what[KVS__ERR_MSG_MAX];
    int rc;

    if (path == NULL || path[0] == '\0')
        return kvs__fail(e, KVS_EBADARG, "save optimizer states: %s path",
                         path == NULL ? "NULL" : "empty");
    if (o == NULL)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': no optimizer", path);
    if (n > 0 && recs == NULL)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': NULL records", path);

    for (size_t i = 0; i < n; i++) {
        const struct kvs__optim_state *s = recs[i].state;
        size_t bytes;

        if (s == NULL)
            return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu has "
                             "no state", path, i);
        if (recs[i].key.name != NULL &&
            strnlen(recs[i].key.name, KVS_MAX_KEY_LEN + 1) > KVS_MAX_KEY_LEN)
            return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: key "
                             "longer than %d bytes", path, i, KVS_MAX_KEY_LEN);
        if (!is_float_dtype((uint32_t)recs[i].key_dtype) ||
            (s->dtype != KVS_FLOAT32 && s->dtype != KVS_FLOAT64) ||
            s->nbuf < 0 || s->nbuf > 2)
            return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: bad "
                             "dtype or buffer count", path, i);
        if (__builtin_mul_overflow(s->count, state_esize(s->dtype), &bytes))
            return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: %zu "
                             "elements is too many", path, i, s->count);
        for (int b = 0; b < s->nbuf; b++) {
            if (s->count > 0 && s->buf[b] == NULL)
                return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': record %zu: "
                                 "buffer %d is NULL", path, i, b);
        }
    }

    rc = find_key_clash(recs, n, what, sizeof what);
    if (rc < 0)
        return kvs__fail(e, rc, "save optimizer states to '%s': out of memory", path);
    if (rc > 0)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': %s", path, what);
    return 0;
}

static int fsync_retry(int fd)
{
    while (fsync(fd) != 0) {
        if (errno != EINTR)
            return -errno;
    }
    return 0;
}

/* Makes the rename itself durable. */
static int fsync_dir_of(const char *path, struct kvs__err *e)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int fd, rc;

    if (slash == NULL)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL)
        return kvs__fail(e, -ENOMEM, "save optimizer states to '%s': out of memory", path);

    do
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = -errno;
        kvs__fail(e, rc, "cannot open directory '%s' to sync it: %s", dir, kvs_strerror(rc));
        goto out;
    }
    rc = fsync_retry(fd);
    /* Some file systems cannot sync a directory and say so; the file
     * itself is synced, which is all they offer. */
    if (rc == -EINVAL || rc == -ENOTSUP)
        rc = 0;
    if (rc != 0)
        kvs__fail(e, rc, "cannot sync directory '%s': %s", dir, kvs_strerror(rc));
    close(fd);
out:
    free(dir);
    return rc;
}

int kvs__optim_save(const char *path, const struct kvs__optim *o, int dump_optimizer,
                    const struct kvs__state_rec *recs, size_t n, struct kvs__err *e)
{
    static const char suffix[] = ".tmp.XXXXXX";
    struct writer w = { .fd = -1 };
    size_t plen, tlen;
    char *tmp;
    int rc;

    rc = check_save_args(path, o, recs, n, e);
    if (rc != 0)
        return rc;

    plen = strlen(path);
    if (__builtin_add_overflow(plen, sizeof suffix, &tlen))
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%.64s...': path too long",
                         path);
    tmp = malloc(tlen);
    if (tmp == NULL)
        return kvs__fail(e, -ENOMEM, "save optimizer states to '%s': out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, suffix, sizeof suffix);

    /* Beside the target, so that rename() replaces it in one step. */
    w.fd = mkostemp(tmp, O_CLOEXEC);
    if (w.fd < 0) {
        rc = -errno;
        kvs__fail(e, rc, "cannot create a temporary file for '%s': %s", path, kvs_strerror(rc));
        goto fail_name;
    }
    w.buf = malloc(SF_WRITE_BUF);
    if (w.buf == NULL) {
        rc = kvs__fail(e, -ENOMEM, "save optimizer states to '%s': out of memory", path);
        goto fail_file;
    }

    write_contents(&w, o, dump_optimizer, recs, n);
    free(w.buf);
    w.buf = NULL;
    if (w.err != 0) {
        rc = kvs__fail(e, w.err, "cannot write '%s': %s", tmp, kvs_strerror(w.err));
        goto fail_file;
    }
    rc = fsync_retry(w.fd);
    if (rc != 0) {
        kvs__fail(e, rc, "cannot sync '%s': %s", tmp, kvs_strerror(rc));
        goto fail_file;
    }
    /* Not retried on EINTR: Linux has closed the descriptor by then. */
    rc = close(w.fd) != 0 ? -errno : 0;
    w.fd = -1;
    if (rc != 0 && rc != -EINTR) {
        kvs__fail(e, rc, "cannot close '%s': %s", tmp, kvs_strerror(rc));
        goto fail_file;
    }
    if (rename(tmp, path) != 0) {
        rc = -errno;
        kvs__fail(e, rc, "cannot rename '%s' to '%s': %s", tmp, path, kvs_strerror(rc));
        goto fail_file;
    }
    free(tmp);

    /* The new file is in place; a failure here only means the rename might
     * not survive a power cut, which the caller should still hear about. */
    return fsync_dir_of(path, e);

fail_file:
    if (w.fd >= 0)
        close(w.fd);
    unlink(tmp);
fail_name:
    free(tmp);
    return rc;
}

int kvs__optim_encode(const struct kvs__optim *o, int dump_optimizer,
                      const struct kvs__state_rec *recs, size_t n, uint8_t **out, size_t *len,
                      struct kvs__err *e)
{
    struct writer w = { .fd = -1 };
    int rc;

    if ((rc = check_save_args("(memory)", o, recs, n, e)) != 0)
        return rc;
    if (!(w.buf = malloc(SF_WRITE_BUF)))
        return kvs__fail(e, -ENOMEM, "out of memory encoding optimizer states");
    write_contents(&w, o, dump_optimizer, recs, n);
    free(w.buf);
    if (w.err != 0) {
        free(w.mem);
        return kvs__fail(e, w.err, "out of memory encoding optimizer states");
    }
    *out = w.mem;
    *len = w.mem_len;
    return 0;
}

/* ---- Load ------------------------------------------------------------ */

/* KVS_ECORRUPT with what is wrong first, so that a long path cut from the
 * end of the message never hides it. */
__attribute__((format(printf, 3, 4)))
static int corrupt(struct kvs__err *e, const char *path, const char *fmt, ...)
{
    char what[KVS__ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kvs__fail(e, KVS_ECORRUPT, "%s (state file '%s')", what, path);
}

int kvs__optim_read(const char *path, uint8_t **out, size_t *out_size, struct kvs__err *e)
{
    struct stat st;
    uint8_t *data = NULL;
    size_t size, got = 0;
    int fd, rc;

    /* O_NONBLOCK: a FIFO at the path must not hang the caller in open(). */
    do
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot open '%s': %s", path, kvs_strerror(rc));
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        kvs__fail(e, rc, "cannot stat '%s': %s", path, kvs_strerror(rc));
        goto fail_fd;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = kvs__fail(e, -EISDIR, "cannot load '%s': %s", path, kvs_strerror(-EISDIR));
        goto fail_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = kvs__fail(e, -EINVAL, "cannot load '%s': not a regular file", path);
        goto fail_fd;
    }
    if (st.st_size < (off_t)SF_FILE_MIN) {
        rc = corrupt(e, path, "%jd bytes, too short for a state file", (intmax_t)st.st_size);
        goto fail_fd;
    }
    if ((uint64_t)st.st_size > SF_FILE_MAX || (uint64_t)st.st_size > SIZE_MAX) {
        rc = corrupt(e, path, "%jd bytes, more than any state file", (intmax_t)st.st_size);
        goto fail_fd;
    }
    size = (size_t)st.st_size;
    data = malloc(size);
    if (data == NULL) {
        rc = kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory for %zu bytes", path, size);
        goto fail_fd;
    }

    while (got < size) {
        size_t want = size - got > (size_t)SSIZE_MAX ? (size_t)SSIZE_MAX : size - got;
        ssize_t k = read(fd, data + got, want);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            kvs__fail(e, rc, "cannot read '%s': %s", path, kvs_strerror(rc));
            goto fail_data;
        }
        if (k == 0) {
            rc = corrupt(e, path, "file shrank while being read");
            goto fail_data;
        }
        got += (size_t)k;
    }
    close(fd);
    *out = data;
    *out_size = size;
    return 0;

fail_data:
    free(data);
fail_fd:
    close(fd);
    return rc;
}

struct reader {
    const uint8_t *p;
    size_t left;
};

static const uint8_t *r_take(struct reader *r, size_t n)
{
    const uint8_t *p = r->p;

    if (r->left < n)
        return NULL;
    r->p += n;
    r->left -= n;
    return p;
}

static int r_u8(struct reader *r, uint8_t *v)
{
    const uint8_t *p = r_take(r, 1);
    if (p == NULL)
        return -1;
    *v = p[0];
    return 0;
}

static int r_u32(struct reader *r, uint32_t *v)
{
    const uint8_t *p = r_take(r, 4);
    if (p == NULL)
        return -1;
    *v = le32_get(p);
    return 0;
}

static int r_u64(struct reader *r, uint64_t *v)
{
    const uint8_t *p = r_take(r, 8);
    if (p == NULL)
        return -1;
    *v = le64_get(p);
    return 0;
}

/* A length-prefixed string of at most max bytes, none of them NUL, copied
 * out NUL-terminated. Returns 0, -1 (bad), -ENOMEM. */
static int r_string(struct reader *r, uint32_t min, uint32_t max, char **out)
{
    const uint8_t *p;
    uint32_t len;
    char *s;

    if (r_u32(r, &len) != 0 || len < min || len > max || (p = r_take(r, len)) == NULL)
        return -1;
    if (memchr(p, '\0', len) != NULL)
        return -1;
    s = malloc((size_t)len + 1);
    if (s == NULL)
        return -ENOMEM;
    memcpy(s, p, len);
    s[len] = '\0';
    *out = s;
    return 0;
}

static void r_values(struct reader *r, kvs_dtype_t dtype, void *buf, size_t count)
{
    /* The caller has checked that count elements are left. */
    const uint8_t *p = r_take(r, count * state_esize(dtype));

    for (size_t i = 0; i < count; i++) {
        if (dtype == KVS_FLOAT64) {
            uint64_t bits = le64_get(p + i * 8);
            memcpy((double *)buf + i, &bits, sizeof bits);
        } else {
            uint32_t bits = le32_get(p + i * 4);
            memcpy((float *)buf + i, &bits, sizeof bits);
        }
    }
}

/* Limits on a record's buffers that the optimizer implies. */
struct nbuf_rule {
    const char *optim;                 /* its name, for messages */
    int exact;                         /* -1: any up to max */
    int max;
};

static int read_record(struct reader *r, size_t i, struct nbuf_rule rule,
                       struct kvs__state_rec *rec, const char *path, struct kvs__err *e)
{
    struct kvs__optim_state *s;
    uint8_t kind;
    uint32_t key_dtype, state_dtype, nbuf;
    uint64_t t, count, id;
    size_t esize, key_bytes, buf_bytes, all_bytes;
    int rc;

    if (r_u8(r, &kind) != 0)
        return corrupt(e, path, "record %zu: truncated", i);
    if (kind == SF_KEY_INT) {
        if (r_u64(r, &id) != 0)
            return corrupt(e, path, "record %zu: truncated in the key", i);
        /* Two's complement back to int64 without relying on how C
         * converts an out-of-range unsigned value. */
        rec->key.id = id <= (uint64_t)INT64_MAX ? (int64_t)id : -(int64_t)(~id) - 1;
        rec->key.name = NULL;
    } else if (kind == SF_KEY_STRING) {
        char *name = NULL;
        rc = r_string(r, 0, KVS_MAX_KEY_LEN, &name);
        if (rc == -ENOMEM)
            return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
        if (rc != 0)
            return corrupt(e, path, "record %zu: string key truncated, longer than %d bytes "
                           "or holding a NUL byte", i, KVS_MAX_KEY_LEN);
        rec->key.id = 0;
        rec->key.name = name;
    } else {
        return corrupt(e, path, "record %zu: key kind %u is neither int (0) nor string (1)", i,
                       (unsigned)kind);
    }

    if (r_u32(r, &key_dtype) != 0 || r_u32(r, &state_dtype) != 0 || r_u64(r, &t) != 0 ||
        r_u64(r, &count) != 0 || r_u32(r, &nbuf) != 0)
        return corrupt(e, path, "record %zu: truncated", i);
    if (!is_float_dtype(key_dtype))
        return corrupt(e, path, "record %zu: key dtype %" PRIu32 " is not a float dtype", i,
                       key_dtype);
    if (state_dtype != (key_dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32))
        return corrupt(e, path, "record %zu: state dtype %" PRIu32 " does not go with key dtype %"
                       PRIu32, i, state_dtype, key_dtype);
    if (nbuf > 2 || (int)nbuf > rule.max || (rule.exact >= 0 && (int)nbuf != rule.exact))
        return corrupt(e, path, "record %zu: %" PRIu32 " state buffers do not go with "
                       "optimizer %s", i, nbuf, rule.optim);

    rec->key_dtype = (kvs_dtype_t)key_dtype;
    esize = state_esize((kvs_dtype_t)state_dtype);
    /* The key's own byte size must be a size too, even with no buffers. */
    if (count > SIZE_MAX ||
        __builtin_mul_overflow((size_t)count, key_esize(key_dtype), &key_bytes) ||
        __builtin_mul_overflow((size_t)count, esize, &buf_bytes) ||
        __builtin_mul_overflow(buf_bytes, (size_t)nbuf, &all_bytes) || all_bytes > r->left)
        return corrupt(e, path, "record %zu: %" PRIu64 " elements do not fit in the file", i,
                       count);

    s = calloc(1, sizeof *s);
    if (s == NULL)
        return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory", path);
    rec->state = s;                    /* freed with the file from here on */
    s->t = t;
    s->dtype = (kvs_dtype_t)state_dtype;
    s->count = (size_t)count;
    for (uint32_t b = 0; b < nbuf; b++) {
        if (buf_bytes > 0) {
            s->buf[b] = malloc(buf_bytes);
            if (s->buf[b] == NULL)
                return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory for %zu bytes",
                                 path, buf_bytes);
        }
        s->nbuf = (int)b + 1;
        r_values(r, s->dtype, s->buf[b], s->count);
    }
    return 0;
}

/* Works on a file whose size is at least SF_FILE_MIN. */
static int parse_file(const uint8_t *data, size_t size, const char *path,
                      struct kvs__state_file *f, struct kvs__err *e)
{
    struct reader r;
    struct nbuf_rule rule = { .optim = NULL, .exact = -1, .max = 2 };
    uint32_t version, flags, stored, computed;
    uint64_t count;
    size_t bytes;
    char what[KVS__ERR_MSG_MAX];
    int rc;

    /* Magic and version first: a file of another kind or of a later format
     * gets a message saying so, not a checksum error. */
    if (memcmp(data, SF_MAGIC, SF_MAGIC_LEN) != 0)
        return corrupt(e, path, "not an optimizer state file (bad magic)");
    version = le32_get(data + SF_MAGIC_LEN);
    if (version != SF_VERSION)
        return corrupt(e, path, "format version %" PRIu32 ", this build reads version %u",
                       version, SF_VERSION);
    stored = le32_get(data + size - 4);
    computed = crc32c(0, data, size - 4);
    if (stored != computed)
        return corrupt(e, path, "checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
                       "): the file is damaged or truncated", stored, computed);

    r.p = data + SF_MAGIC_LEN + 4;
    r.left = size - SF_MAGIC_LEN - 4 - 4;
    if (r_u32(&r, &flags) != 0)
        return corrupt(e, path, "truncated in the header");
    if ((flags & ~SF_FLAG_SPEC) != 0)
        return corrupt(e, path, "unknown flags %08" PRIx32, flags);

    rc = r_string(&r, 1, SF_NAME_MAX, &f->optim_name);
    if (rc == -ENOMEM)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc != 0)
        return corrupt(e, path, "optimizer name truncated, empty, longer than %d bytes or "
                       "holding a NUL byte", SF_NAME_MAX);
    for (const char *c = f->optim_name; *c != '\0'; c++) {
        if (*c <= ' ' || *c > '~')
            return corrupt(e, path, "optimizer name holds a byte that is not a visible "
                           "ASCII character");
    }

    rule.optim = f->optim_name;
    if (flags & SF_FLAG_SPEC) {
        struct kvs__err pe = { 0 };
        char *spec = NULL;

        rc = r_string(&r, 1, SF_SPEC_MAX, &spec);
        if (rc == -ENOMEM)
            return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
        if (rc != 0)
            return corrupt(e, path, "optimizer spec truncated, empty, longer than %d bytes "
                           "or holding a NUL byte", SF_SPEC_MAX);
        rc = kvs__optim_parse(spec, &f->optim, &pe);
        free(spec);
        if (rc == -ENOMEM)
            return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
        if (rc != 0)
            return corrupt(e, path, "saved optimizer spec does not parse: %s", pe.msg);
        if (strcmp(kvs__optim_name(f->optim), f->optim_name) != 0)
            return corrupt(e, path, "saved spec is for %s, the states for %s",
                           kvs__optim_name(f->optim), f->optim_name);
        rule.exact = kvs__optim_nbuf(f->optim);
        rule.max = rule.exact;
    } else if (strcmp(f->optim_name, "adam") == 0) {
        rule.exact = 2;
        rule.max = 2;
    } else if (strcmp(f->optim_name, "sgd") == 0) {
        rule.max = 1;
    }

    if (r_u64(&r, &count) != 0)
        return corrupt(e, path, "truncated before the record count");
    /* Bounded by the bytes left before anything is allocated for it. */
    if (count > r.left / SF_RECORD_MIN)
        return corrupt(e, path, "%" PRIu64 " records cannot fit in the file", count);
    if (count > 0) {
        if (__builtin_mul_overflow((size_t)count, sizeof *f->recs, &bytes))
            return corrupt(e, path, "%" PRIu64 " records cannot fit in the file", count);
        f->recs = calloc((size_t)count, sizeof *f->recs);
        if (f->recs == NULL)
            return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory", path);
        f->n = (size_t)count;
    }
    for (size_t i = 0; i < f->n; i++) {
        rc = read_record(&r, i, rule, &f->recs[i], path, e);
        if (rc != 0)
            return rc;
    }
    if (r.left != 0)
        return corrupt(e, path, "%zu bytes after the last record", r.left);

    rc = find_key_clash(f->recs, f->n, what, sizeof what);
    if (rc < 0)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc > 0)
        return corrupt(e, path, "%s", what);
    return 0;
}

int kvs__optim_decode(const uint8_t *data, size_t size, const char *what,
                      struct kvs__state_file **out, struct kvs__err *e)
{
    struct kvs__state_file *f;
    int rc;

    if (size < SF_FILE_MIN)
        return corrupt(e, what, "%zu bytes, shorter than any state file", size);
    if (!(f = calloc(1, sizeof *f)))
        return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory", what);
    if ((rc = parse_file(data, size, what, f, e)) != 0) {
        kvs__state_file_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int kvs__optim_load(const char *path, struct kvs__state_file **out, struct kvs__err *e)
{
    uint8_t *data = NULL;
    size_t size = 0;
    int rc;

    if (path == NULL || out == NULL)
        return kvs__fail(e, KVS_EBADARG, "load optimizer states: %s is NULL",
                         path == NULL ? "path" : "output");
    *out = NULL;
    if ((rc = kvs__optim_read(path, &data, &size, e)) == 0)
        rc = kvs__optim_decode(data, size, path, out, e);
    free(data);
    return rc;
}

void kvs__state_file_free(struct kvs__state_file *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free((char *)f->recs[i].key.name);
        kvs__optim_state_free(f->recs[i].state);
    }
    free(f->recs);
    kvs__optim_free(f->optim);
    free(f->optim_name);
    free(f);
}
