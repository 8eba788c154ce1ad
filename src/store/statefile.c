/*
 * statefile.c - the optimizer state file: kvs__optim_save writes it
 * atomically, kvs__optim_load reads and checks the whole of it. Owns the
 * file format (below): its header, its list of records and the checksum
 * that closes it. A record's fields are statefile_rec.c's, the bytes
 * (fields, checksum, buffered writes, bounded reads) statefile_codec.c's.
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/statefile.h"
#include "store/statefile_codec.h"
#include "store/statefile_rec.h"

#define SF_MAGIC "KVSOPTST"
#define SF_MAGIC_LEN 8
#define SF_VERSION 1u
#define SF_FLAG_SPEC 1u
#define SF_NAME_MAX 64
#define SF_SPEC_MAX 4096
/* magic, version, flags, name length, a 1-byte name, record count, CRC */
#define SF_FILE_MIN (SF_MAGIC_LEN + 4 + 4 + 4 + 1 + 8 + 4)
/* No state kvs keeps comes near this; a bigger "file" is a device or a
 * mistake, and reading it whole would only end in ENOMEM or worse. */
#define SF_FILE_MAX ((uint64_t)1 << 40)

/* ---- Save ------------------------------------------------------------ */

static void write_contents(struct kvs__sf_writer *w, const struct kvs__optim *o,
                           int dump_optimizer, const struct kvs__state_rec *recs, size_t n)
{
    const char *name = kvs__optim_name(o);
    uint8_t trailer[4];

    kvs__sf_put(w, SF_MAGIC, SF_MAGIC_LEN);
    kvs__sf_u32(w, SF_VERSION);
    kvs__sf_u32(w, dump_optimizer ? SF_FLAG_SPEC : 0);
    kvs__sf_u32(w, (uint32_t)strlen(name));
    kvs__sf_put(w, name, strlen(name));
    if (dump_optimizer) {
        const char *spec = kvs__optim_spec(o);
        kvs__sf_u32(w, (uint32_t)strlen(spec));
        kvs__sf_put(w, spec, strlen(spec));
    }
    kvs__sf_u64(w, n);

    for (size_t i = 0; i < n; i++)
        kvs__sf_rec_write(w, &recs[i]);

    kvs__le32_put(trailer, w->crc);
    kvs__sf_put(w, trailer, sizeof trailer);
    kvs__sf_flush(w);
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
        if ((rc = kvs__sf_rec_check(&recs[i], i, path, e)) != 0)
            return rc;
    }

    rc = kvs__sf_key_clash(recs, n, what, sizeof what);
    if (rc < 0)
        return kvs__fail(e, rc, "save optimizer states to '%s': out of memory", path);
    if (rc > 0)
        return kvs__fail(e, KVS_EBADARG, "save optimizer states to '%s': %s", path, what);
    return 0;
}

int kvs__optim_save(const char *path, const struct kvs__optim *o, int dump_optimizer,
                    const struct kvs__state_rec *recs, size_t n, struct kvs__err *e)
{
    static const char suffix[] = ".tmp.XXXXXX";
    struct kvs__sf_writer w = { .fd = -1 };
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
    w.buf = malloc(KVS__SF_WRITE_BUF);
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
    rc = kvs__file_finish(w.fd, tmp, path, 1, e);
    w.fd = -1;
    if (rc != 0)
        goto fail_file;
    free(tmp);

    /* The new file is in place; a failure here only means the rename might
     * not survive a power cut, which the caller should still hear about. */
    return kvs__fsync_dir_of(path, e);

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
    struct kvs__sf_writer w = { .fd = -1 };
    int rc;

    if ((rc = check_save_args("(memory)", o, recs, n, e)) != 0)
        return rc;
    if (!(w.buf = malloc(KVS__SF_WRITE_BUF)))
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

int kvs__optim_encode_to(const struct kvs__optim *o, int dump_optimizer,
                         const struct kvs__state_rec *recs, size_t n,
                         struct kvs__sf_writer *w, struct kvs__err *e)
{
    int rc;

    if ((rc = check_save_args("(stream)", o, recs, n, e)) != 0)
        return rc;
    w->crc = 0;
    write_contents(w, o, dump_optimizer, recs, n);
    return 0;
}

/* ---- Load ------------------------------------------------------------ */

int kvs__optim_read(const char *path, uint8_t **out, size_t *out_size, struct kvs__err *e)
{
    struct stat st;
    uint8_t *data = NULL;
    size_t size, got = 0;
    int fd, rc;

    if ((rc = kvs__sf_open_read(path, &fd, &st, e)) != 0)
        return rc;
    if (S_ISDIR(st.st_mode)) {
        rc = kvs__fail(e, -EISDIR, "cannot load '%s': %s", path, kvs_strerror(-EISDIR));
        goto fail_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = kvs__fail(e, -EINVAL, "cannot load '%s': not a regular file", path);
        goto fail_fd;
    }
    if (st.st_size < (off_t)SF_FILE_MIN) {
        rc = kvs__sf_corrupt(e, path, "%jd bytes, too short for a state file",
                             (intmax_t)st.st_size);
        goto fail_fd;
    }
    if ((uint64_t)st.st_size > SF_FILE_MAX || (uint64_t)st.st_size > SIZE_MAX) {
        rc = kvs__sf_corrupt(e, path, "%jd bytes, more than any state file",
                             (intmax_t)st.st_size);
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
            rc = kvs__sf_corrupt(e, path, "file shrank while being read");
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

/* Magic and version first: a file of another kind or of a later format
 * gets a message saying so, not a checksum error. Works on a file whose
 * size is at least SF_FILE_MIN. */
static int check_frame(const uint8_t *data, size_t size, const char *path, struct kvs__err *e)
{
    uint32_t version, stored, computed;

    if (memcmp(data, SF_MAGIC, SF_MAGIC_LEN) != 0)
        return kvs__sf_corrupt(e, path, "not an optimizer state file (bad magic)");
    version = kvs__le32_get(data + SF_MAGIC_LEN);
    if (version != SF_VERSION)
        return kvs__sf_corrupt(e, path, "format version %" PRIu32 ", this build reads "
                               "version %u", version, SF_VERSION);
    stored = kvs__le32_get(data + size - 4);
    computed = kvs__crc32c(0, data, size - 4);
    if (stored != computed)
        return kvs__sf_corrupt(e, path, "checksum mismatch (stored %08" PRIx32 ", computed %08"
                               PRIx32 "): the file is damaged or truncated", stored, computed);
    return 0;
}

/* The dumped spec: it must parse and be for the optimizer the file names;
 * it then fixes the records' buffer count. */
static int read_spec(struct kvs__sf_reader *r, struct kvs__state_file *f,
                     struct kvs__sf_nbuf_rule *rule, const char *path, struct kvs__err *e)
{
    struct kvs__err pe = { 0 };
    char *spec = NULL;
    int rc;

    rc = kvs__sf_get_string(r, 1, SF_SPEC_MAX, &spec);
    if (rc == -ENOMEM)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc != 0)
        return kvs__sf_corrupt(e, path, "optimizer spec truncated, empty, longer than %d bytes "
                               "or holding a NUL byte", SF_SPEC_MAX);
    rc = kvs__optim_parse(spec, &f->optim, &pe);
    free(spec);
    if (rc == -ENOMEM)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc != 0)
        return kvs__sf_corrupt(e, path, "saved optimizer spec does not parse: %s", pe.msg);
    if (strcmp(kvs__optim_name(f->optim), f->optim_name) != 0)
        return kvs__sf_corrupt(e, path, "saved spec is for %s, the states for %s",
                               kvs__optim_name(f->optim), f->optim_name);
    rule->exact = kvs__optim_nbuf(f->optim);
    rule->max = rule->exact;
    return 0;
}

/* Flags, the optimizer's name and its spec when dumped; *rule is then what
 * the records' buffer counts must follow. */
static int read_header(struct kvs__sf_reader *r, struct kvs__state_file *f,
                       struct kvs__sf_nbuf_rule *rule, const char *path, struct kvs__err *e)
{
    uint32_t flags;
    int rc;

    if (kvs__sf_get_u32(r, &flags) != 0)
        return kvs__sf_corrupt(e, path, "truncated in the header");
    if ((flags & ~SF_FLAG_SPEC) != 0)
        return kvs__sf_corrupt(e, path, "unknown flags %08" PRIx32, flags);

    rc = kvs__sf_get_string(r, 1, SF_NAME_MAX, &f->optim_name);
    if (rc == -ENOMEM)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc != 0)
        return kvs__sf_corrupt(e, path, "optimizer name truncated, empty, longer than %d bytes "
                               "or holding a NUL byte", SF_NAME_MAX);
    for (const char *c = f->optim_name; *c != '\0'; c++) {
        if (*c <= ' ' || *c > '~')
            return kvs__sf_corrupt(e, path, "optimizer name holds a byte that is not a visible "
                                   "ASCII character");
    }

    *rule = (struct kvs__sf_nbuf_rule){ .optim = f->optim_name, .exact = -1, .max = 2 };
    if (flags & SF_FLAG_SPEC)
        return read_spec(r, f, rule, path, e);
    if (strcmp(f->optim_name, "adam") == 0) {
        rule->exact = 2;
        rule->max = 2;
    } else if (strcmp(f->optim_name, "sgd") == 0) {
        rule->max = 1;
    }
    return 0;
}

/* The record count, then every record; nothing may follow the last. */
static int read_records(struct kvs__sf_reader *r, struct kvs__sf_nbuf_rule rule,
                        struct kvs__state_file *f, const char *path, struct kvs__err *e)
{
    uint64_t count;
    size_t bytes;
    int rc;

    if (kvs__sf_get_u64(r, &count) != 0)
        return kvs__sf_corrupt(e, path, "truncated before the record count");
    /* Bounded by the bytes left before anything is allocated for it. */
    if (count > r->left / KVS__SF_RECORD_MIN)
        return kvs__sf_corrupt(e, path, "%" PRIu64 " records cannot fit in the file", count);
    if (count > 0) {
        if (__builtin_mul_overflow((size_t)count, sizeof *f->recs, &bytes))
            return kvs__sf_corrupt(e, path, "%" PRIu64 " records cannot fit in the file",
                                   count);
        f->recs = calloc((size_t)count, sizeof *f->recs);
        if (f->recs == NULL)
            return kvs__fail(e, -ENOMEM, "cannot load '%s': out of memory", path);
        f->n = (size_t)count;
    }
    for (size_t i = 0; i < f->n; i++) {
        rc = kvs__sf_rec_read(r, i, rule, &f->recs[i], path, e);
        if (rc != 0)
            return rc;
    }
    if (r->left != 0)
        return kvs__sf_corrupt(e, path, "%zu bytes after the last record", r->left);
    return 0;
}

/* Works on a file whose size is at least SF_FILE_MIN. */
static int parse_file(const uint8_t *data, size_t size, const char *path,
                      struct kvs__state_file *f, struct kvs__err *e)
{
    struct kvs__sf_reader r;
    struct kvs__sf_nbuf_rule rule;
    char what[KVS__ERR_MSG_MAX];
    int rc;

    if ((rc = check_frame(data, size, path, e)) != 0)
        return rc;
    /* Between the version and the checksum. */
    r.p = data + SF_MAGIC_LEN + 4;
    r.left = size - SF_MAGIC_LEN - 4 - 4;
    if ((rc = read_header(&r, f, &rule, path, e)) != 0 ||
        (rc = read_records(&r, rule, f, path, e)) != 0)
        return rc;

    rc = kvs__sf_key_clash(f->recs, f->n, what, sizeof what);
    if (rc < 0)
        return kvs__fail(e, rc, "cannot load '%s': out of memory", path);
    if (rc > 0)
        return kvs__sf_corrupt(e, path, "%s", what);
    return 0;
}

int kvs__optim_decode(const uint8_t *data, size_t size, const char *what,
                      struct kvs__state_file **out, struct kvs__err *e)
{
    struct kvs__state_file *f;
    int rc;

    if (size < SF_FILE_MIN)
        return kvs__sf_corrupt(e, what, "%zu bytes, shorter than any state file", size);
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
