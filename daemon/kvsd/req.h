/*
 * req.h - request records: made, freed, and what a request names (its
 * key, its array, where its data is).
 */
#ifndef KVSD_REQ_H
#define KVSD_REQ_H

#include "daemon.h"

/* A new request of worker wi, cut from the current block; NULL without
 * memory. req_free frees it (its copy, name and table with it). */
struct req *req_new(struct daemon *d, int wi);
void req_free(struct daemon *d, struct req *r);

/* Frees the request blocks kept for reuse (at teardown). */
void req_cache_free(struct daemon *d);

/* A request's key, its array (data: where its value lies), and where its
 * data is now (kvsd's copy, or the worker's staging; NULL while a remote
 * push's is still in its worker's memory) and on which device. */
kvs_key_t req_key(const struct rargs *s);
kvs_array_t req_array(const struct rargs *s, void *data);
void *req_data(const struct daemon *d, const struct req *r);
int req_device(const struct req *r);

/* A 2bit push (KVS__SQE_2BIT): its words dequantized from staging into
 * its copy (and, across hosts, kept as they came). 0 or -ENOMEM. */
int req_decode_2bit(struct daemon *d, struct req *r, struct kvs__err *e);

#endif
