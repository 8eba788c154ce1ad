/*
 * heap.c - the engine's default memory for stored values: the C heap,
 * each block 64-byte aligned and rounded up to a multiple of 64 bytes.
 *
 * It must never know of entries or stores: it hands out bytes. Whether a
 * store's values are heap memory is known by comparing its provider's
 * alloc with kvs__heap_alloc.
 */
#include <stdlib.h>

#include "store/heap.h"

void *kvs__heap_alloc(void *ctx, size_t bytes)
{
    size_t size = (bytes + 63) & ~(size_t)63;

    (void)ctx;
    return aligned_alloc(64, size ? size : 64);
}

void kvs__heap_free(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    free(p);
}
