/*
 * heap.h - the engine's default memory for stored values (heap.c): the C
 * heap, 64-byte aligned. A struct kvs__mem of these two is what
 * kvs__engine_new takes when handed none.
 */
#ifndef KVS_HEAP_H
#define KVS_HEAP_H

#include <stddef.h>

/* aligned_alloc of bytes rounded up to 64 (64 for none); ctx unused.
 * NULL when out of memory. */
void *kvs__heap_alloc(void *ctx, size_t bytes);
void kvs__heap_free(void *ctx, void *p, size_t bytes);   /* NULL is a no-op */

#endif
