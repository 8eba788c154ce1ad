/*
 * join.h - the mesh of a job's hosts: one authenticated connection from
 * this host to each of the others, made before the links start.
 */
#ifndef KVSD_JOIN_H
#define KVSD_JOIN_H

#include "daemon.h"

struct kvs__secret;                    /* net/auth.h */

/* What the join made of another host: its connection and its name. */
struct join_peer {
    int fd;                            /* -1: none (this host, or not joined yet) */
    uint32_t nworkers;
    char name[KVS__ADDR_MAX + 32];     /* "host 1 (127.0.0.1)" */
};

/* Joins the job's hosts (d->o: nhosts, host, coord, bind, ...) with the
 * job's secret: host 0 takes every other host's join and sends the
 * roster, then each host connects to those of lower rank and takes the
 * connections of those above. peers[d->nhosts] come in with fd -1 and a
 * name; each connection made is in its peer's fd, even when the join
 * fails (the caller closes it). Sets d->rank0 and d->total. Main thread. */
int join_mesh(struct daemon *d, const struct kvs__secret *sec, struct join_peer *peers,
              struct kvs__err *e);

#endif
