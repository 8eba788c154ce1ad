/*
 * wire_roster.h - the payloads that tell the hosts of a job where each
 * listens (wire_roster.c): a host's join to host 0, and host 0's roster
 * of every host.
 */
#ifndef KVS_PROTO_WIRE_ROSTER_H
#define KVS_PROTO_WIRE_ROSTER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/wire_frame.h"

struct kvs__wire_join {
    uint16_t port;                     /* where the host listens for the others */
    char addr[KVS__ADDR_MAX];          /* its numeric address; "": the one host 0 sees */
    uint32_t generation;               /* its kvsd's restarts so far (kvsd --generation) */
    uint32_t nsteps;                   /* a job that recovers: the steps of the snapshots */
    int64_t steps[KVS__WIRE_JOIN_STEPS];   /* the host holds whole (>= 0), for host 0 to
                                            * pick the newest every host holds */
};

struct kvs__wire_place {
    uint32_t nworkers;                 /* 1..1024 */
    uint16_t port;
    char addr[KVS__ADDR_MAX];          /* numeric; host 0's own is "" */
};

void kvs__wire_join_encode(const struct kvs__wire_join *m, void *buf);
int kvs__wire_join_decode(const void *buf, size_t len, struct kvs__wire_join *m,
                          struct kvs__err *e);

/* The bytes of a roster of n hosts. step: the snapshot's step every host
 * restores (-1: none, an empty store). */
size_t kvs__wire_roster_bytes(uint32_t n);
void kvs__wire_roster_encode(const struct kvs__wire_place *hosts, uint32_t n, int64_t step,
                             void *buf);
/* Reads a roster of exactly n hosts (len must be kvs__wire_roster_bytes(n))
 * into hosts[n] and *step: workers 1..1024 each, at most 1024 in all,
 * addresses NUL-terminated with zeros after, a step of -1 or more. */
int kvs__wire_roster_decode(const void *buf, size_t len, uint32_t n,
                            struct kvs__wire_place *hosts, int64_t *step, struct kvs__err *e);

#endif
