/*
 * statefile_codec.c - the bytes of a state file: the CRC-32C over them,
 * a buffered writer to a file or to memory, and the bounded reads of
 * length-prefixed strings and value buffers (statefile_codec.h).
 *
 * It must never read a byte past the end it was handed nor trust a length
 * it reads; it knows nothing of what the fields mean: the layout is
 * statefile.c's and a record's is statefile_rec.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/crc32c_x86.h"
#include "store/statefile_codec.h"

#define SF_CHUNK 4096                  /* bytes of values converted per round */
#define SF_PIECE ((size_t)256 << 10)   /* big data: checksummed and written per piece */

/* ---- CRC-32C --------------------------------------------------------- */

/* The CPU's crc32 instruction where it has one (crc32c_x86.c, many GB/s);
 * else slicing by 8 bytes: the file may hold gigabytes of state, and a
 * bytewise table would make the checksum the slow part of a save. */
#define CRC32C_POLY 0x82f63b78u        /* Castagnoli, bit-reflected */

static uint32_t crc_table[8][256];
static kvs__crc32c_fn crc_fast;        /* NULL: the table */
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
    crc_fast = kvs__crc32c_x86();
}

uint32_t kvs__crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    if (crc_fast)
        return ~crc_fast(~crc, data, n);
    return kvs__crc32c_table(crc, data, n);
}

uint32_t kvs__crc32c_table(uint32_t crc, const void *data, size_t n)
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

/* Shifting a CRC over len2 bytes is multiplying it by x^(8 len2) modulo
 * the polynomial; the powers x^(2^k) come by squaring, so a shift of any
 * length takes at most 64 products. Bit-reflected, as the CRC is: x^0 is
 * the top bit. */
static uint32_t gf_mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;

    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m)
            p ^= b;
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

uint32_t kvs__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t sq = 1u << 23;            /* x^8: one byte */
    uint32_t x = 1u << 31;             /* x^0 */

    for (; len2 != 0; len2 >>= 1) {
        if (len2 & 1)
            x = gf_mul(x, sq);
        sq = gf_mul(sq, sq);
    }
    return gf_mul(x, crc1) ^ crc2;
}

int kvs__sf_open_read(const char *path, int *fd, struct stat *st, struct kvs__err *e)
{
    int rc;

    /* O_NONBLOCK: a FIFO at the path must not hang the caller in open(). */
    do
        *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    while (*fd < 0 && errno == EINTR);
    if (*fd < 0) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot open '%s': %s", path, kvs_strerror(rc));
    }
    if (fstat(*fd, st) != 0) {
        rc = -errno;
        close(*fd);
        *fd = -1;
        return kvs__fail(e, rc, "cannot stat '%s': %s", path, kvs_strerror(rc));
    }
    return 0;
}

/* ---- Writer ---------------------------------------------------------- */

static int mem_append(struct kvs__sf_writer *w, const uint8_t *p, size_t n)
{
    if (n > w->mem_cap - w->mem_len) {
        size_t cap = w->mem_cap ? w->mem_cap : KVS__SF_WRITE_BUF;
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

static int w_write(struct kvs__sf_writer *w, const uint8_t *p, size_t n)
{
    return w->fd < 0 ? mem_append(w, p, n) : write_all(w->fd, p, n);
}

void kvs__sf_flush(struct kvs__sf_writer *w)
{
    if (w->err == 0 && w->used > 0)
        w->err = w_write(w, w->buf, w->used);
    w->used = 0;
}

void kvs__sf_put(struct kvs__sf_writer *w, const void *data, size_t n)
{
    const uint8_t *p = data;

    if (w->err != 0)
        return;
    w->total += n;
    if (w->count_only)
        return;
    if (n > KVS__SF_WRITE_BUF - w->used) {
        kvs__sf_flush(w);
        /* Big data goes out straight, a piece at a time, each piece
         * checksummed just before it is written: the write then reads it
         * from the cache, and the data crosses the memory bus once, not
         * twice. */
        while (n >= KVS__SF_WRITE_BUF && w->err == 0) {
            size_t k = n < SF_PIECE ? n : SF_PIECE;

            w->crc = kvs__crc32c(w->crc, p, k);
            w->err = w_write(w, p, k);
            p += k;
            n -= k;
        }
        if (w->err != 0 || n == 0)
            return;
    }
    w->crc = kvs__crc32c(w->crc, p, n);
    memcpy(w->buf + w->used, p, n);
    w->used += n;
}

void kvs__sf_put_values(struct kvs__sf_writer *w, kvs_dtype_t dtype, const void *buf,
                        size_t count)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The file's byte order is the host's: the values go as they lie. */
    if (count)
        kvs__sf_put(w, buf, count * kvs__sf_state_esize(dtype));
#else
    uint8_t chunk[SF_CHUNK];
    size_t esize = kvs__sf_state_esize(dtype);
    size_t per = sizeof chunk / esize;

    for (size_t off = 0; off < count && w->err == 0; off += per) {
        size_t n = count - off < per ? count - off : per;
        for (size_t i = 0; i < n; i++) {
            if (dtype == KVS_FLOAT64) {
                uint64_t bits;
                memcpy(&bits, (const double *)buf + off + i, sizeof bits);
                kvs__le64_put(chunk + i * 8, bits);
            } else {
                uint32_t bits;
                memcpy(&bits, (const float *)buf + off + i, sizeof bits);
                kvs__le32_put(chunk + i * 4, bits);
            }
        }
        kvs__sf_put(w, chunk, n * esize);
    }
#endif
}

/* ---- Reader ---------------------------------------------------------- */

int kvs__sf_get_string(struct kvs__sf_reader *r, uint32_t min, uint32_t max, char **out)
{
    const uint8_t *p;
    uint32_t len;
    char *s;

    if (kvs__sf_get_u32(r, &len) != 0 || len < min || len > max ||
        (p = kvs__sf_take(r, len)) == NULL)
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

void kvs__sf_get_values(struct kvs__sf_reader *r, kvs_dtype_t dtype, void *buf,
                        size_t count)
{
    /* The caller has checked that count elements are left. */
    const uint8_t *p = kvs__sf_take(r, count * kvs__sf_state_esize(dtype));

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (count)                         /* the host's byte order: a copy */
        memcpy(buf, p, count * kvs__sf_state_esize(dtype));
#else
    for (size_t i = 0; i < count; i++) {
        if (dtype == KVS_FLOAT64) {
            uint64_t bits = kvs__le64_get(p + i * 8);
            memcpy((double *)buf + i, &bits, sizeof bits);
        } else {
            uint32_t bits = kvs__le32_get(p + i * 4);
            memcpy((float *)buf + i, &bits, sizeof bits);
        }
    }
#endif
}

int kvs__sf_corrupt(struct kvs__err *e, const char *path, const char *fmt, ...)
{
    char what[KVS__ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kvs__fail(e, KVS_ECORRUPT, "%s (state file '%s')", what, path);
}

