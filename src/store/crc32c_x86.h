/*
 * crc32c_x86.h - CRC-32C with the SSE4.2 crc32 instruction: what
 * statefile_codec.c's kvs__crc32c calls when the CPU has it (and the tests,
 * to hold it against the table).
 */
#ifndef KVS_STORE_CRC32C_X86_H
#define KVS_STORE_CRC32C_X86_H

#include <stddef.h>
#include <stdint.h>

/* The CRC register after n bytes of data, starting from state: the raw
 * register, neither inverted on the way in nor out (the caller does that),
 * so that the result is the table's bit for bit. NULL when this CPU or
 * build lacks the instruction. Thread-safe. */
typedef uint32_t (*kvs__crc32c_fn)(uint32_t state, const void *data, size_t n);
kvs__crc32c_fn kvs__crc32c_x86(void);

#endif
