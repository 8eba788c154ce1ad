/*
 * statefile.h - the optimizer state file (statefile.c): saved and loaded
 * as a whole, or encoded and decoded in memory for states that cross
 * between hosts. Knows nothing of stores: it writes the records it is
 * handed and hands back the records it read.
 */
#ifndef KVS_STATEFILE_H
#define KVS_STATEFILE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "kernels/optim.h"
#include "store/statefile_rec.h"         /* struct kvs__state_rec */


/* Writes the state file atomically (temp file, fsync, rename, fsync dir).
 * The file: magic, format version, optimizer name, the full spec when
 * dump_optimizer, the records, a checksum over everything.
 * Errors: KVS_EBADARG, -errno. */
int kvs__optim_save(const char *path, const struct kvs__optim *o, int dump_optimizer,
                    const struct kvs__state_rec *recs, size_t n, struct kvs__err *e);

struct kvs__state_file {
    char *optim_name;                  /* the optimizer the states are for */
    struct kvs__optim *optim;          /* parsed dumped spec, or NULL */
    size_t n;
    struct kvs__state_rec *recs;
};

/* Reads and checks a whole state file into memory. Nothing of the caller
 * changes. Errors: KVS_ECORRUPT (magic, version, checksum, lengths, a bad
 * record), -errno, -ENOMEM. */
int kvs__optim_load(const char *path, struct kvs__state_file **out, struct kvs__err *e);
void kvs__state_file_free(struct kvs__state_file *f);        /* NULL is a no-op */

/* The same in memory, for states that cross between hosts: _encode makes
 * the bytes a save would write (*out malloc'd); _decode reads and checks
 * them as a load does (what: names them in messages). */
int kvs__optim_encode(const struct kvs__optim *o, int dump_optimizer,
                      const struct kvs__state_rec *recs, size_t n, uint8_t **out, size_t *len,
                      struct kvs__err *e);
/* The same bytes put into w after what it holds (a snapshot streams them
 * into its file, no image in memory); w->crc is reset first and is the
 * state file's own CRC after, w->total grows by their length; a write
 * failure is in w->err. Errors: KVS_EBADARG. */
struct kvs__sf_writer;
int kvs__optim_encode_to(const struct kvs__optim *o, int dump_optimizer,
                         const struct kvs__state_rec *recs, size_t n,
                         struct kvs__sf_writer *w, struct kvs__err *e);
int kvs__optim_decode(const uint8_t *data, size_t size, const char *what,
                      struct kvs__state_file **out, struct kvs__err *e);
/* A state file's bytes as they are (*out malloc'd), for _decode elsewhere:
 * a regular file of a state file's least size to its most. */
int kvs__optim_read(const char *path, uint8_t **out, size_t *size, struct kvs__err *e);

#endif
