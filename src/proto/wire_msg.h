/*
 * wire_msg.h - the messages between hosts once the roster is made
 * (wire_msg.c): a body that names a key, its dtype and shape, and
 * carries data; how a big key is cut into parts, and the pieces of
 * 2bit-compressed data.
 */
#ifndef KVS_PROTO_WIRE_MSG_H
#define KVS_PROTO_WIRE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "proto/ops.h"
#include "proto/wire_frame.h"

/* The body of a message frame. Which fields a type uses: PARTIAL, VALUE,
 * FORWARD, ARRIVE and DONE name a key, with its dtype and shape; data is a
 * value of exactly that dtype and shape for PARTIAL, FORWARD (or pieces,
 * below), a VALUE or a DONE of op init with status 0, and a text (no NUL,
 * at most KVS__WIRE_TEXT_MAX bytes) for OPTIMIZER, FAIL and a failed VALUE,
 * DONE or STATES; a STATES_ASK of op load and a STATES of op save with
 * status 0 carry bytes the decoder does not read (a state file's, checked
 * where they are used); other types carry no data. Unused fields are zero. */
struct kvs__wire_msg {
    uint8_t op;                        /* ARRIVE, DONE: KVS__OP_INIT, KVS__OP_BARRIER or
                                        * KVS__OP_COMMIT (a = the step, b = its phase);
                                        * STATES_ASK, STATES: KVS__OP_SAVE_STATES or
                                        * KVS__OP_LOAD_STATES */
    int32_t status;                    /* VALUE, DONE, FAIL, STATES: 0 or a kvs/errno code */
    kvs_key_t key;                     /* key.name: encode reads it; decode points it
                                        * at name */
    char name[KVS_MAX_KEY_LEN + 1];
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t a, b;                     /* see the frame types */
    int32_t priority;                  /* PARTIAL, VALUE, FORWARD: the highest of their
                                        * pushes' (kvs_push's priority), which orders
                                        * them on the wire */
    uint32_t pieces;                   /* PARTIAL, FORWARD of a float32 key: 0 for a value,
                                        * else data is that many 2bit-compressed values
                                        * (1 to 1024; a FORWARD's 1), each a piece */
    uint32_t part, nparts;             /* PARTIAL, VALUE, FORWARD: nparts 0 for the whole
                                        * key; else (2 to KVS__PARTS_MAX) the data (value
                                        * or pieces) is elements kvs__wire_part of the key's
                                        * only: a big key is split over the hosts */
    uint8_t rows;                      /* PARTIAL, FORWARD, VALUE with status 0: 1 when
                                        * data is rows (kvs__wire_rows_bytes): nnz, then
                                        * nnz row ids, ascending, each a row of the key
                                        * (of the part's rows when nparts), then their
                                        * rows */
    uint8_t rest_zero;                 /* VALUE with rows: the other rows (of the part)
                                        * are zero now */
    uint64_t nnz;                      /* decode, with rows: how many */
    const int64_t *ids;                /* decode, with rows: the ids, in the buffer */
    const void *row_data;              /* decode, with rows: the rows, in the buffer */
    const void *data;                  /* decode: points into the decoded buffer */
    uint64_t len;
};

/* The data of a rows message of nnz rows of row_bytes each: a u64 count,
 * the ids (i64), the rows; put writes the count and ids at data and
 * returns where the rows go. Values and ids travel in the hosts' own byte
 * order, as a dense value does. */
uint64_t kvs__wire_rows_bytes(uint64_t nnz, uint64_t row_bytes);
void *kvs__wire_rows_put(void *data, uint64_t nnz, const int64_t *ids);

/* Part `part` of a key of count elements of esize bytes split in nparts
 * (>= 1), whose rows are row elements each (kvs__wire_row): elements
 * [*first, *first + *n). Parts but the last have the same number of
 * elements, rounded up to a multiple of both 64 bytes' worth and a row,
 * so that each starts on a cache line of the value, (float32) on a 2bit
 * word, and on a row, which so has one owner (its update and its
 * optimizer state live there: a row-sparse push's rows go to one host);
 * trailing parts may be empty. */
void kvs__wire_part(uint64_t count, uint64_t esize, uint64_t row, uint32_t nparts,
                    uint32_t part, uint64_t *first, uint64_t *n);
/* The elements of one row of a value of shape[0..ndim): 1 for a scalar or
 * a vector (an element is a row), else the product of the other extents
 * (1 when the value is empty). */
uint64_t kvs__wire_row(int ndim, const int64_t *shape);

/* A piece: the threshold (a float's bits), 4 zero bytes, then the value's
 * kvs__gc_2bit_words(count) words as compress.c writes them, zeros to the
 * next 8 bytes. kvs__wire_piece_bytes: a piece's bytes for a value of count
 * elements; put writes one at p; get reads piece i of a decoded message m
 * (checked by the decoder): its threshold, and *words where its words lie. */
size_t kvs__wire_piece_bytes(uint64_t count);
void kvs__wire_piece_put(void *p, float threshold, const uint32_t *words, uint64_t count);
float kvs__wire_piece_get(const struct kvs__wire_msg *m, uint64_t count, uint32_t i,
                          const uint32_t **words);

/* The bytes of m's body before its data (the data follows it). */
size_t kvs__wire_msg_bytes(const struct kvs__wire_msg *m);
/* Writes the body of a message of type, not its data, at buf
 * (kvs__wire_msg_bytes(m) bytes). Fields the type does not use must be
 * zero in m (key.name NULL). */
void kvs__wire_msg_encode(int type, const struct kvs__wire_msg *m, void *buf);
/* Reads a whole payload of a message frame of type, len bytes, into *m,
 * checking every field as above; m->data points into buf. */
int kvs__wire_msg_decode(int type, const void *buf, size_t len, struct kvs__wire_msg *m,
                         struct kvs__err *e);

/* What a job lets a message carry, as the daemon that receives it knows
 * the job: value, the bytes of the largest key it may name (its value, or
 * a part of it); pieces, the 2bit pieces a PARTIAL may carry (the sending
 * host's workers; a FORWARD carries one); states, a state file's bytes. */
struct kvs__wire_bounds {
    uint64_t value;
    uint32_t pieces;
    uint64_t states;
    uint64_t rows;                     /* the rows of the key with the most (0: none),
                                        * whose ids a rows message adds to a value */
};

/* The most payload bytes a message frame of type may have within b: its
 * body with the longest shape and key name, and the most data the type
 * carries (a value or its pieces, or its rows and their ids, a text, a
 * state file); 0 for a type
 * that is no message. Saturates at UINT64_MAX; never above what the
 * frame head allows (KVS__WIRE_PAYLOAD_MAX). */
uint64_t kvs__wire_msg_max(int type, const struct kvs__wire_bounds *b);

/* A decoded message's text (a reason, a spec) as a string in buf, of
 * KVS__WIRE_TEXT_MAX + 1 bytes (the decoder bounds its length). */
const char *kvs__wire_msg_text(const struct kvs__wire_msg *m, char *buf);

#endif
