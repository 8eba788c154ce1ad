/*
 * statefile_rec.h - one record of a state file (statefile_rec.c): a key's
 * optimizer state written, read back and checked, and the check that a
 * file's keys could have come from one store. Its calls are for
 * statefile.c; others take struct kvs__state_rec through statefile.h.
 */
#ifndef KVS_STATEFILE_REC_H
#define KVS_STATEFILE_REC_H

#include <stddef.h>

#include "kvs.h"
#include "base/error.h"

struct kvs__optim_state;
struct kvs__sf_writer;
struct kvs__sf_reader;

/* One key's state, as saved and loaded. */
struct kvs__state_rec {
    kvs_key_t key;                     /* in a loaded file: name owned by the file */
    kvs_dtype_t key_dtype;
    struct kvs__optim_state *state;    /* in a loaded file: owned by the file */
};

/* The smallest record: an empty string key and no buffers. */
#define KVS__SF_RECORD_MIN (1 + 4 + 4 + 4 + 8 + 8 + 4)

/* Limits on a record's buffers that the optimizer implies. */
struct kvs__sf_nbuf_rule {
    const char *optim;                 /* its name, for messages */
    int exact;                         /* -1: any up to max */
    int max;
};

/* 0 when record i can be saved, else KVS_EBADARG naming path and what is
 * wrong. */
int kvs__sf_rec_check(const struct kvs__state_rec *rec, size_t i, const char *path,
                      struct kvs__err *e);

/* Puts a record checked by kvs__sf_rec_check. */
void kvs__sf_rec_write(struct kvs__sf_writer *w, const struct kvs__state_rec *rec);

/* Reads and checks record i into *rec, whose key name and state are the
 * caller's to free even when it fails. Errors: KVS_ECORRUPT, -ENOMEM. */
int kvs__sf_rec_read(struct kvs__sf_reader *r, size_t i, struct kvs__sf_nbuf_rule rule,
                     struct kvs__state_rec *rec, const char *path, struct kvs__err *e);

/* Finds keys of both kinds, or a key twice: a file with either could not
 * have come from one store. Returns 0 (none), 1 (what describes the clash)
 * or -ENOMEM. */
int kvs__sf_key_clash(const struct kvs__state_rec *recs, size_t n, char *what,
                      size_t what_size);

#endif
