/*
 * bytes.h - fixed-offset little-endian fields of messages and slots, for
 * the codecs (proto/: worker and kvsd; proto/wire_*.c: kvsd and kvsd across
 * hosts): one load or store each, the layout independent of the compiler's
 * padding and the host's byte order.
 */
#ifndef KVS_BYTES_H
#define KVS_BYTES_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put_u8(unsigned char *p, size_t off, uint8_t v)
{
    p[off] = v;
}

static inline void put_u16(unsigned char *p, size_t off, uint16_t v)
{
    p[off] = (unsigned char)v;
    p[off + 1] = (unsigned char)(v >> 8);
}

/* Little-endian fields through memcpy and the <endian.h> swaps: one load
 * or store each where byte loops took some fifty instructions, and a
 * request slot has thirteen 64-bit fields. */
static inline void put_u32(unsigned char *p, size_t off, uint32_t v)
{
    v = htole32(v);
    memcpy(p + off, &v, sizeof v);
}

static inline void put_u64(unsigned char *p, size_t off, uint64_t v)
{
    v = htole64(v);
    memcpy(p + off, &v, sizeof v);
}

static inline void put_i32(unsigned char *p, size_t off, int32_t v)
{
    put_u32(p, off, (uint32_t)v);      /* modulo 2^32: defined for every value */
}

static inline void put_i64(unsigned char *p, size_t off, int64_t v)
{
    put_u64(p, off, (uint64_t)v);
}

static inline uint8_t get_u8(const unsigned char *p, size_t off)
{
    return p[off];
}

static inline uint16_t get_u16(const unsigned char *p, size_t off)
{
    return (uint16_t)(p[off] | (unsigned)p[off + 1] << 8);
}

static inline uint32_t get_u32(const unsigned char *p, size_t off)
{
    uint32_t v;

    memcpy(&v, p + off, sizeof v);
    return le32toh(v);
}

static inline uint64_t get_u64(const unsigned char *p, size_t off)
{
    uint64_t v;

    memcpy(&v, p + off, sizeof v);
    return le64toh(v);
}

/* Two's complement back to signed without implementation-defined
 * conversions of out-of-range values. */
static inline int32_t get_i32(const unsigned char *p, size_t off)
{
    uint32_t u = get_u32(p, off);

    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) + INT32_MIN;
}

static inline int64_t get_i64(const unsigned char *p, size_t off)
{
    uint64_t u = get_u64(p, off);

    return u <= INT64_MAX ? (int64_t)u : (int64_t)(u - 0x8000000000000000u) + INT64_MIN;
}

/* Copies n bytes that another process may be rewriting into a private
 * buffer. The barrier tells the compiler that the source may have changed
 * after the copy, so it can never replace a read of the copy by a second
 * read of the source (a double fetch the checks would not see). */
static inline void copy_once(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
    __asm__ __volatile__("" : : "r"(dst) : "memory");
}

/* Writes a string into a field of `size` bytes: at most size - 1 bytes of
 * it, a NUL, and zeros to the end, so a reused slot keeps nothing of its
 * last message. */
static inline void put_text(unsigned char *p, size_t off, size_t size, const char *s)
{
    size_t n = strnlen(s, size - 1);

    memcpy(p + off, s, n);
    memset(p + off + n, 0, size - n);
}

/* 1 when bytes [off, off + n) are all zero. Eight bytes a step: a request
 * slot has some 400 bytes that must be zero, and kvsd checks every slot it
 * reads (byte by byte that was most of kvsd's instructions in a stream of
 * small pushes). */
static inline int zeros(const unsigned char *p, size_t off, size_t n)
{
    uint64_t acc = 0, w;
    size_t i = 0;

    for (; i + sizeof w <= n; i += sizeof w) {
        memcpy(&w, p + off + i, sizeof w);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= p[off + i];
    return acc == 0;
}


/* Reads a NUL-terminated text field into out (size bytes): the NUL must
 * lie within the field and every byte after it be zero. Returns the
 * length, or -1. */
static inline long get_text(const unsigned char *p, size_t off, size_t size, char *out)
{
    const unsigned char *nul = memchr(p + off, 0, size);
    size_t n;

    if (nul == NULL)
        return -1;
    n = (size_t)(nul - (p + off));
    if (!zeros(p, off + n, size - n))
        return -1;
    memcpy(out, p + off, n);
    memset(out + n, 0, size - n);
    return (long)n;
}

#endif
