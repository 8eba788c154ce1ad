/*
 * statefile_codec.h - the bytes of a state file (statefile_codec.c): its
 * little-endian fields, its CRC-32C, a writer that checksums what it puts
 * into a file or into memory, and a reader that never reads past the end.
 * For statefile.c (the file), statefile_rec.c (a record) and snapshot.c
 * (a store's snapshot, which holds a state file's bytes); the tests of
 * those aside, nothing else includes it.
 */
#ifndef KVS_STATEFILE_CODEC_H
#define KVS_STATEFILE_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvs.h"
#include "base/error.h"

#define KVS__SF_WRITE_BUF ((size_t)1 << 16)

/* ---- Little-endian fields ---------------------------------------------- */

static inline void kvs__le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kvs__le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t kvs__le32_get(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t kvs__le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Bytes of one element of a state buffer: float64 for float64 keys, else
 * float32. */
static inline size_t kvs__sf_state_esize(kvs_dtype_t dtype)
{
    return dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
}

/* CRC-32C of data continued from crc (0 to start): crc32c(crc32c(0, a), b)
 * is the CRC of a followed by b. Thread-safe. */
uint32_t kvs__crc32c(uint32_t crc, const void *data, size_t n);

/* The same CRC by the portable table alone, whatever the CPU offers: for
 * the tests that hold the instruction-based one against it. */
uint32_t kvs__crc32c_table(uint32_t crc, const void *data, size_t n);

/* The CRC of a followed by b, from crc1 = kvs__crc32c(0, a, ...) and crc2 =
 * kvs__crc32c(0, b, len2): for a checksum over bytes that carry a checksum
 * of their own, each computed once. */
uint32_t kvs__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* Opens path to read, never hanging on a FIFO there, and stats it: 0 with
 * *fd (close it) and *st, or -errno with the detail in e ("cannot open
 * 'P': ..."), nothing left open. The caller judges the file's type. */
int kvs__sf_open_read(const char *path, int *fd, struct stat *st, struct kvs__err *e);

/* ---- Writer ------------------------------------------------------------ */

/* Writes to fd through buf, or (fd < 0) into mem, grown as needed; or,
 * with count_only, writes nothing and only counts (a size known before
 * the bytes are written: no buf, no checksum). */
struct kvs__sf_writer {
    int fd;
    int err;                           /* the first -errno; later puts do nothing */
    int count_only;
    uint32_t crc;                      /* of everything put so far (since the caller reset it) */
    uint64_t total;                    /* bytes put so far */
    size_t used;
    uint8_t *buf;                      /* KVS__SF_WRITE_BUF bytes */
    uint8_t *mem;                      /* fd < 0: what was written, mem_len of mem_cap */
    size_t mem_len, mem_cap;
};

/* Appends n bytes to the checksum and the output; a failure sticks in
 * w->err. _flush writes out what is buffered. */
void kvs__sf_put(struct kvs__sf_writer *w, const void *data, size_t n);
void kvs__sf_flush(struct kvs__sf_writer *w);
/* count elements of a float32 or float64 buffer, as little-endian bits. */
void kvs__sf_put_values(struct kvs__sf_writer *w, kvs_dtype_t dtype, const void *buf,
                        size_t count);

static inline void kvs__sf_u8(struct kvs__sf_writer *w, uint8_t v)
{
    kvs__sf_put(w, &v, 1);
}

static inline void kvs__sf_u32(struct kvs__sf_writer *w, uint32_t v)
{
    uint8_t b[4];
    kvs__le32_put(b, v);
    kvs__sf_put(w, b, sizeof b);
}

static inline void kvs__sf_u64(struct kvs__sf_writer *w, uint64_t v)
{
    uint8_t b[8];
    kvs__le64_put(b, v);
    kvs__sf_put(w, b, sizeof b);
}

/* ---- Reader ------------------------------------------------------------ */

struct kvs__sf_reader {
    const uint8_t *p;
    size_t left;
};

/* The next n bytes, or NULL (nothing taken) when fewer are left. */
static inline const uint8_t *kvs__sf_take(struct kvs__sf_reader *r, size_t n)
{
    const uint8_t *p = r->p;

    if (r->left < n)
        return NULL;
    r->p += n;
    r->left -= n;
    return p;
}

/* Fields: 0, or -1 when the bytes run out. */
static inline int kvs__sf_get_u8(struct kvs__sf_reader *r, uint8_t *v)
{
    const uint8_t *p = kvs__sf_take(r, 1);
    if (p == NULL)
        return -1;
    *v = p[0];
    return 0;
}

static inline int kvs__sf_get_u32(struct kvs__sf_reader *r, uint32_t *v)
{
    const uint8_t *p = kvs__sf_take(r, 4);
    if (p == NULL)
        return -1;
    *v = kvs__le32_get(p);
    return 0;
}

static inline int kvs__sf_get_u64(struct kvs__sf_reader *r, uint64_t *v)
{
    const uint8_t *p = kvs__sf_take(r, 8);
    if (p == NULL)
        return -1;
    *v = kvs__le64_get(p);
    return 0;
}

/* A length-prefixed string of min to max bytes, none of them NUL, copied
 * out NUL-terminated (*out malloc'd). Returns 0, -1 (bad), -ENOMEM. */
int kvs__sf_get_string(struct kvs__sf_reader *r, uint32_t min, uint32_t max, char **out);

/* count elements into buf; the caller has checked that they are left. */
void kvs__sf_get_values(struct kvs__sf_reader *r, kvs_dtype_t dtype, void *buf, size_t count);

/* KVS_ECORRUPT with what is wrong first, so that a long path cut from the
 * end of the message never hides it. */
__attribute__((format(printf, 3, 4)))
int kvs__sf_corrupt(struct kvs__err *e, const char *path, const char *fmt, ...);

#endif
