/*
 * placement.c - where the job's parts go: the hosts of the job and this
 * host's rank among them (options, then KVS_*, then Slurm's or Open MPI's
 * variables, so that srun or mpirun can start one kvsrun per host), the
 * job's name and this host's part of it, the job's files in the runtime
 * directory, the global ranks kvsd says are this host's, and the
 * variables each worker starts with. It starts nothing and waits on
 * nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvsrun.h"
#include "shm/shm.h"
#include "base/spec.h"

/* The first host of a Slurm node list: "gpu[07-09,12],cpu1" is gpu07. */
static void slurm_first_host(const char *list, char *out, size_t size)
{
    size_t n = strcspn(list, ",[");

    if (n >= size)
        n = size - 1;
    memcpy(out, list, n);
    out[n] = '\0';
    if (list[n] == '[') {
        size_t m = strcspn(list + n + 1, ",-]");

        if (n + m >= size)
            m = size - 1 - n;
        memcpy(out + n, list + n + 1, m);
        out[n + m] = '\0';
    }
}

/* The hosts of the job: options first, then KVS_*, then Slurm's, then
 * Open MPI's variables (a launcher's rank and size count hosts: one kvsrun
 * per host). -1 to go on, else the exit status (said). */
int hosts_options(struct options *o)
{
    static const char *const vars[][2] = {
        { "KVS_NODES", "KVS_NODE_RANK" },
        { "SLURM_NNODES", "SLURM_NODEID" },
        { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK" },
    };
    const int nvars = (int)(sizeof vars / sizeof vars[0]);
    const char *coord = getenv("KVS_COORD");
    /* Under Slurm KVS_COORD may give the port alone (":PORT" or "PORT"). */
    int port_only = coord && *coord
                    && (coord[0] == ':' || strspn(coord, "0123456789") == strlen(coord));
    struct kvs__err e = { 0, "" };
    int from = -1;

    if (!o->secret_file && getenv("KVS_SECRET_FILE") && *getenv("KVS_SECRET_FILE"))
        o->secret_file = getenv("KVS_SECRET_FILE");
    for (int i = 0; i < nvars && (o->nodes < 0 || o->node_rank < 0); i++) {
        int n = -1, r = -1, hn, hr;

        if ((hn = kvs__env_int(vars[i][0], 1, 4096, &n, &e)) < 0
            || (hr = kvs__env_int(vars[i][1], 0, 4095, &r, &e)) < 0) {
            fprintf(stderr, "kvsrun: %s\n", e.msg);
            return 2;
        }
        if (!hn && !hr)
            continue;
        if (o->nodes < 0 && hn)
            o->nodes = n;
        if (o->node_rank < 0 && hr)
            o->node_rank = r;
        from = i;
    }
    if (o->nodes < 0)
        o->nodes = 1;
    if (o->nodes == 1)
        return -1;
    if (o->node_rank < 0 || o->node_rank >= o->nodes) {
        fprintf(stderr, "kvsrun: a job of %d hosts needs this host's rank in 0..%d "
                "(--node-rank, KVS_NODE_RANK)\n", o->nodes, o->nodes - 1);
        return 2;
    }
    if (!o->coord[0] && coord && *coord && !port_only)
        snprintf(o->coord, sizeof o->coord, "%s", coord);
    if (!o->coord[0] && from == 1 && getenv("SLURM_JOB_NODELIST")) {
        char host[256];
        const char *port = port_only ? coord + (coord[0] == ':') : COORD_PORT;

        slurm_first_host(getenv("SLURM_JOB_NODELIST"), host, sizeof host);
        snprintf(o->coord, sizeof o->coord, "%s:%s", host, port);
    }
    if (!o->coord[0]) {
        fprintf(stderr, "kvsrun: a job of %d hosts needs host 0's address (--coord HOST:PORT, "
                "KVS_COORD)\n", o->nodes);
        return 2;
    }
    return -1;
}

int name_job(struct options *o)
{
    struct kvs__err e = { 0, "" };

    if (!o->job[0] && o->nodes > 1) {
        fprintf(stderr, "kvsrun: a job across hosts needs its name (-j), the same on every "
                "host\n");
        return 2;
    }
    if (!o->job[0]) {
        snprintf(o->job, sizeof o->job, "run-%ld", (long)getpid());
        o->job_picked = 1;
    }
    snprintf(o->net_job, sizeof o->net_job, "%s", o->job);
    if (o->nodes > 1) {
        char local[2 * KVS__JOB_MAX];

        snprintf(local, sizeof local, "%s.h%d", o->net_job, o->node_rank);
        if (kvs__job_name_check(local, &e) != 0) {
            fprintf(stderr, "kvsrun: this host's part of job '%s' is named '%s': %s\n",
                    o->net_job, local, e.msg);
            return 2;
        }
        memcpy(o->job, local, strlen(local) + 1);  /* checked: at most KVS__JOB_MAX */
    }
    return -1;
}

int job_paths(struct run *r)
{
    struct kvs__err e = { 0, "" };
    struct sockaddr_un a;

    if (kvs__runtime_dir(r->dir, sizeof r->dir, &e) != 0) {
        fprintf(stderr, "kvsrun: %s\n", e.msg);
        return 1;
    }
    snprintf(r->sock_path, sizeof r->sock_path, "%s/%s.sock", r->dir, r->o.job);
    snprintf(r->lock_path, sizeof r->lock_path, "%s/%s.lock", r->dir, r->o.job);
    snprintf(r->run_path, sizeof r->run_path, "%s/%s.run", r->dir, r->o.job);
    if (strlen(r->sock_path) >= sizeof a.sun_path) {
        fprintf(stderr, "kvsrun: socket path %s is longer than a Unix socket's %zu bytes\n",
                r->sock_path, sizeof a.sun_path - 1);
        return 1;
    }
    return 0;
}

int worker_env(const struct run *r, int rank)
{
    char num[16];

    snprintf(num, sizeof num, "%d", r->rank0 + rank);
    if (setenv("KVS_RANK", num, 1) != 0)
        return -1;
    snprintf(num, sizeof num, "%d", r->total);
    if (setenv("KVS_NUM_WORKERS", num, 1) != 0 || setenv("KVS_JOB", r->o.job, 1) != 0)
        return -1;
    if (r->o.timeout && setenv("KVS_TIMEOUT", r->o.timeout, 1) != 0)
        return -1;
    snprintf(num, sizeof num, "%d", r->w[rank].restarts);
    if (r->recover && setenv("KVS_RESTART_COUNT", num, 1) != 0)
        return -1;
    return 0;
}

int read_ready(struct run *r, int fd, char *buf, size_t *got, size_t size)
{
    ssize_t n = read(fd, buf + *got, size - 1 - *got);

    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0)
        return -1;
    *got += (size_t)n;
    buf[*got] = '\0';
    if (!strchr(buf, '\n'))
        return *got + 1 < size ? 0 : -1;
    if (sscanf(buf, "%d %d", &r->rank0, &r->total) != 2 || r->rank0 < 0 || r->total < 1
        || r->total > MAX_WORKERS || r->rank0 + r->o.nworkers > r->total)
        return -1;
    return 1;
}
