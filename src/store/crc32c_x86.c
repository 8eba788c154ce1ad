/*
 * crc32c_x86.c - CRC-32C at memory speed on x86-64 CPUs with SSE4.2: the
 * crc32 instruction, eight bytes at a time, on three streams at once.
 *
 * The instruction takes three cycles and the CPU starts one each cycle, so
 * one stream runs at a third of what the unit can do: a big buffer is cut
 * into blocks of three equal parts, each part's CRC computed from zero in
 * the same loop, and the three joined by shifting the earlier ones over the
 * later parts' length (CRC is linear: crc(s, A|B) = shift(crc(s, A), |B|)
 * ^ crc(0, B)); the shifts are two fixed linear maps, kept as byte tables.
 * The result is the raw register, bit for bit the table's (tests compare
 * them); only statefile_codec.c calls in here, and only after
 * kvs__crc32c_x86 gave it the function. Elsewhere the file compiles to a
 * kvs__crc32c_x86 that always gives NULL.
 */
#include <pthread.h>
#include <string.h>

#include "store/crc32c_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <nmmintrin.h>

#define TARGET __attribute__((target("sse4.2")))

/* Bytes of one of a block's three parts: big enough that joining them (16
 * table reads) is nothing beside the part's 1024 instructions, small
 * enough that buffers of tens of KiB take the fast loop. */
#define PART 8192u

/* shift_t[j][k][b]: the register b << (8 * k) shifted over (j + 1) * PART
 * zero bytes. */
static uint32_t shift_t[2][4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

TARGET static uint32_t zeros(uint32_t c, size_t n)
{
    uint64_t r = c;

    for (size_t i = 0; i < n / 8; i++)
        r = _mm_crc32_u64(r, 0);
    return (uint32_t)r;
}

TARGET static void shift_init(void)
{
    for (int j = 0; j < 2; j++) {
        uint32_t bit[32];

        for (int i = 0; i < 32; i++)
            bit[i] = zeros(1u << i, (size_t)(j + 1) * PART);
        /* The map is linear: a byte's image is the XOR of its bits'. */
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++) {
                uint32_t v = 0;
                for (int i = 0; i < 8; i++)
                    if (b & (1u << i))
                        v ^= bit[8 * k + i];
                shift_t[j][k][b] = v;
            }
    }
}

static inline uint32_t shift(int j, uint32_t c)
{
    return shift_t[j][0][c & 0xff] ^ shift_t[j][1][(c >> 8) & 0xff] ^
           shift_t[j][2][(c >> 16) & 0xff] ^ shift_t[j][3][c >> 24];
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof v);           /* little-endian: the CRC's byte order */
    return v;
}

TARGET static uint32_t crc32c_sse42(uint32_t state, const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t c0 = state;

    /* Single bytes up to an 8-byte boundary: aligned loads after. */
    while (n > 0 && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    if (n >= 3 * PART) {
        pthread_once(&shift_once, shift_init);
        while (n >= 3 * PART) {
            uint64_t c1 = 0, c2 = 0;

            for (size_t i = 0; i < PART; i += 8) {
                c0 = _mm_crc32_u64(c0, load64(p + i));
                c1 = _mm_crc32_u64(c1, load64(p + PART + i));
                c2 = _mm_crc32_u64(c2, load64(p + 2 * PART + i));
            }
            c0 = shift(1, (uint32_t)c0) ^ shift(0, (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * PART;
            n -= 3 * PART;
        }
    }
    for (; n >= 8; n -= 8, p += 8)
        c0 = _mm_crc32_u64(c0, load64(p));
    while (n-- > 0)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}

kvs__crc32c_fn kvs__crc32c_x86(void)
{
    unsigned a, b, c, d;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_2))
        return NULL;
    return crc32c_sse42;
}

#else

kvs__crc32c_fn kvs__crc32c_x86(void)
{
    return NULL;
}

#endif
