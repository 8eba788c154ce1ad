/*
 * launch.h - what a dist worker learns of its job from the program that
 * started it (launch.c: kvsrun's variables, else torchrun's, Open MPI's,
 * PMI's or Slurm's), and the host's kvsd that the job's first local
 * worker starts on demand when no kvsrun did, which every local worker
 * then waits for (spawn.c). Nothing here is API.
 */
#ifndef KVS_CLIENT_LAUNCH_H
#define KVS_CLIENT_LAUNCH_H

#include <stdint.h>

#include "base/error.h"
#include "proto/head.h"

#define KVS__COORD_MAX 300

/* A worker's place in its job, as its launcher's environment says. */
struct kvs__launch {
    const char *by;                    /* "kvsrun", "torchrun", "Open MPI", "PMI",
                                        * "Slurm", or NULL: no launcher's variables */
    int rank, size;                    /* in the job */
    int local_rank, local_size;        /* on this host */
    int node, nodes;                   /* this host's rank, the job's hosts */
    int on_demand;                     /* KVS_JOB unset and the launcher names its job:
                                        * local rank 0 starts the host's kvsd */
    char job[KVS__JOB_MAX + 1];        /* this host's part, its kvsd's socket: net_job,
                                        * or net_job.hR across hosts */
    char net_job[KVS__JOB_MAX + 1];    /* the job's name */
    char coord[KVS__COORD_MAX];        /* across hosts on demand: HOST:PORT of host 0 */
    const char *secret_file;           /* across hosts on demand: KVS_SECRET_FILE */
};

/* launch.c */

/* Fills *l from the environment: KVS_RANK/KVS_NUM_WORKERS and KVS_JOB
 * win when set; then the first launcher whose rank and size are set.
 * KVS_EBADARG, the variable named, when they contradict each other. */
int kvs__launch_env(struct kvs__launch *l, struct kvs__err *e);

/* spawn.c */

/* Connects to the socket at path (*fd), by deadline. On demand, local
 * rank 0 first starts the host's kvsd unless one listens there already,
 * and every worker waits for the socket to appear; otherwise one try.
 * timeout_ms: the handle's deadline, given to that kvsd as the time its
 * workers have to connect. KVS_ECLOSED when nobody listens, with why. */
int kvs__launch_connect(const struct kvs__launch *l, const char *path, int64_t timeout_ms,
                        int64_t deadline, int *fd, struct kvs__err *e);

#endif
