/*
 * plan.h - kvsctl plan: the bytes each host of a job of H hosts would
 * send and receive per sync round for a model's tensors, under kvsd's own
 * sharding rule (src/proto/shard.c), and the round time that takes on given
 * links. It models; it asks no kvsd.
 */
#ifndef KVSCTL_PLAN_H
#define KVSCTL_PLAN_H

/* Runs `kvsctl plan`: argv[0] is "plan", the rest its options. Prints
 * on stdout, errors on stderr; returns the exit status (0; 1 for a shapes
 * file that cannot be read or has a bad line; 2 for a usage error). Not
 * for threads: it uses getopt. */
int plan_main(int argc, char **argv);

#endif
