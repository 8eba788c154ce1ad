/*
 * launch.c - a dist worker's place in its job, from the environment of
 * the program that started it. One table of launchers says where each
 * keeps the worker's rank and count in the job and on its host, the
 * host's rank and count, and the job's id: kvsrun (KVS_*, which win),
 * torchrun, Open MPI, PMI, Slurm. The job's name is KVS_JOB, else made
 * from the launcher's id (then local rank 0 starts the host's kvsd on
 * demand: spawn.c), else "default".
 *
 * It reads the environment and checks it; it starts nothing and connects
 * nowhere. A launcher's variables that contradict each other are the
 * caller's KVS_EBADARG, naming them, never a guess.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spec.h"
#include "client/launch.h"
#include "shm/shm.h"

#define RANKS_MAX   1024                /* workers in a job: kvsd's */
#define HOSTS_MAX   4096                /* hosts in a job: kvsd's */
#define NET_JOB_MAX (KVS__JOB_MAX - 6)  /* room for a host's ".h4095" */

struct launcher {
    const char *name, *prefix;          /* prefix: of the job's name made from its id */
    const char *rank, *size;            /* set together, or neither */
    const char *local_rank, *local_size; /* NULL: not kept there */
    const char *node, *nodes[2];        /* NULL: from the local rank and count */
    /* The launcher's id of the job into buf: 1, else 0 (it has none). */
    int (*job_id)(char *buf, size_t size);
    /* Where the local count is a list (Slurm's tasks per node): 1 with *n,
     * 0 when unset, or an error. */
    int (*local_count)(int node, int *n, const char **var, struct kvs__err *e);
};

static const char *env(const char *name)
{
    const char *s = getenv(name);

    return s && *s ? s : NULL;
}

/* torchrun's run id, unless "none" (its default with a static
 * rendezvous): then its master's address and port, which every host of
 * the run shares. */
static int torch_id(char *buf, size_t size)
{
    const char *id = env("TORCHELASTIC_RUN_ID"), *addr = env("MASTER_ADDR");
    const char *port = env("MASTER_PORT");

    if (id && strcmp(id, "none") != 0)
        snprintf(buf, size, "%s", id);
    else if (addr && port)
        snprintf(buf, size, "%s:%s", addr, port);
    else
        return 0;
    return 1;
}

/* Open MPI 4's job id (ORTE), else PMIx's namespace (Open MPI 5). */
static int ompi_id(char *buf, size_t size)
{
    const char *id = env("OMPI_MCA_ess_base_jobid");

    if (!id)
        id = env("PMIX_NAMESPACE");
    if (!id)
        return 0;
    snprintf(buf, size, "%s", id);
    return 1;
}

/* Slurm's job and step: JOB.STEP. */
static int slurm_id(char *buf, size_t size)
{
    const char *job = env("SLURM_JOB_ID"), *step = env("SLURM_STEP_ID");

    if (!step)
        step = env("SLURM_STEPID");
    if (!job)
        return 0;
    snprintf(buf, size, "%s%s%s", job, step ? "." : "", step ? step : "");
    return 1;
}

/* The count of node's entry in Slurm's list of tasks per node,
 * "2(x3),1" for 2, 2, 2 and 1: 0, or -1 when the list is malformed or
 * shorter. */
static int tasks_of_node(const char *s, int node, int *n)
{
    long first = 0;

    while (*s) {
        char *end;
        long c = strtol(s, &end, 10), reps = 1;

        if (end == s || c < 1 || c > RANKS_MAX)
            return -1;
        s = end;
        if (s[0] == '(') {
            if (s[1] != 'x')
                return -1;
            reps = strtol(s + 2, &end, 10);
            if (end == s + 2 || *end != ')' || reps < 1 || reps > HOSTS_MAX)
                return -1;
            s = end + 1;
        }
        if (node < first + reps) {
            *n = (int)c;
            return 0;
        }
        first += reps;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return -1;
}

/* This host's tasks under Slurm: its entry of the step's tasks per node,
 * else the job's, else --ntasks-per-node's. */
static int slurm_count(int node, int *n, const char **var, struct kvs__err *e)
{
    static const char *const vars[] = { "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE" };

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = env(vars[i]);

        if (!s)
            continue;
        *var = vars[i];
        if (tasks_of_node(s, node, n) != 0)
            return kvs__fail(e, KVS_EBADARG, "%s=%.64s has no count of tasks for node %d "
                             "(SLURM_NODEID)", vars[i], s, node);
        return 1;
    }
    *var = "SLURM_NTASKS_PER_NODE";
    return kvs__env_int(*var, 1, RANKS_MAX, n, e);
}

static const struct launcher launchers[] = {
    { .name = "kvsrun", .rank = "KVS_RANK", .size = "KVS_NUM_WORKERS" },
    { .name = "torchrun", .prefix = "torch-", .rank = "RANK", .size = "WORLD_SIZE",
      .local_rank = "LOCAL_RANK", .local_size = "LOCAL_WORLD_SIZE", .node = "GROUP_RANK",
      .nodes = { "GROUP_WORLD_SIZE" }, .job_id = torch_id },
    { .name = "Open MPI", .prefix = "mpi-", .rank = "OMPI_COMM_WORLD_RANK",
      .size = "OMPI_COMM_WORLD_SIZE", .local_rank = "OMPI_COMM_WORLD_LOCAL_RANK",
      .local_size = "OMPI_COMM_WORLD_LOCAL_SIZE", .job_id = ompi_id },
    { .name = "PMI", .rank = "PMI_RANK", .size = "PMI_SIZE", .local_rank = "MPI_LOCALRANKID",
      .local_size = "MPI_LOCALNRANKS" },
    { .name = "Slurm", .prefix = "slurm-", .rank = "SLURM_PROCID", .size = "SLURM_NTASKS",
      .local_rank = "SLURM_LOCALID", .node = "SLURM_NODEID",
      .nodes = { "SLURM_STEP_NUM_NODES", "SLURM_NNODES" }, .job_id = slurm_id,
      .local_count = slurm_count },
};

/* The first of names that is set, into *v and *var: 1, 0 when none is. */
static int env_first(const char *const *names, size_t n, long lo, long hi, int *v,
                     const char **var, struct kvs__err *e)
{
    for (size_t i = 0; i < n && names[i]; i++) {
        int rc = kvs__env_int(names[i], lo, hi, v, e);

        if (rc != 0) {
            *var = names[i];
            return rc;
        }
    }
    return 0;
}

/* This host's place: local rank and count, host rank and count, from the
 * launcher's variables (KVS_NODES and KVS_NODE_RANK, kvsrun's, first);
 * what it leaves out comes from the others where a rule gives it (hosts of
 * equal counts, ranks host-major, as the launchers place them by
 * default), else is the caller's error. */
static int place(struct kvs__launch *l, const struct launcher *lr, struct kvs__err *e)
{
    const char *knodes[] = { "KVS_NODES" }, *krank[] = { "KVS_NODE_RANK" };
    const char *vnode = NULL, *vnodes = NULL, *vlr = NULL, *vls = NULL;
    int hn, hnodes, hl, hs;

    if ((hnodes = env_first(knodes, 1, 1, HOSTS_MAX, &l->nodes, &vnodes, e)) == 0)
        hnodes = env_first(lr->nodes, 2, 1, HOSTS_MAX, &l->nodes, &vnodes, e);
    if ((hn = env_first(krank, 1, 0, HOSTS_MAX - 1, &l->node, &vnode, e)) == 0)
        hn = env_first(&lr->node, 1, 0, HOSTS_MAX - 1, &l->node, &vnode, e);
    hl = env_first(&lr->local_rank, 1, 0, RANKS_MAX - 1, &l->local_rank, &vlr, e);
    if (hnodes < 0 || hn < 0 || hl < 0)
        return KVS_EBADARG;
    hs = lr->local_count ? lr->local_count(l->node, &l->local_size, &vls, e)
                         : env_first(&lr->local_size, 1, 1, RANKS_MAX, &l->local_size, &vls, e);
    if (hs < 0)
        return hs;
    if (!hl && !hs) {
        if (hnodes && l->nodes > 1)
            return kvs__fail(e, KVS_EBADARG, "%s=%d: a job across hosts needs the worker's "
                             "local rank and count (%s and %s under %s)", vnodes, l->nodes,
                             lr->local_rank, lr->local_count ? "SLURM_STEP_TASKS_PER_NODE"
                             : lr->local_size, lr->name);
        l->local_rank = l->rank;
        l->local_size = l->size;
        l->node = 0;
        l->nodes = 1;
        return 0;
    }
    if (!hl || !hs)
        return kvs__fail(e, KVS_EBADARG, "%s and %s must be set together",
                         lr->local_rank, vls ? vls : lr->local_size);
    if (l->local_rank >= l->local_size)
        return kvs__fail(e, KVS_EBADARG, "%s=%d is not below %s=%d", vlr, l->local_rank, vls,
                         l->local_size);
    if (l->local_size > l->size)
        return kvs__fail(e, KVS_EBADARG, "%s=%d is above %s=%d", vls, l->local_size, lr->size,
                         l->size);
    if (!hnodes) {
        if (l->size % l->local_size)
            return kvs__fail(e, KVS_EBADARG, "%s=%d is not a multiple of %s=%d: with hosts "
                             "of different counts, set KVS_NODES and KVS_NODE_RANK", lr->size,
                             l->size, vls, l->local_size);
        l->nodes = l->size / l->local_size;
        vnodes = "the hosts' count";
    }
    if (!hn) {
        int first = l->rank - l->local_rank;

        if (first < 0 || first % l->local_size)
            return kvs__fail(e, KVS_EBADARG, "%s=%d with %s=%d is not host-major placement "
                             "on hosts of %d workers: set KVS_NODE_RANK", lr->rank, l->rank,
                             vlr, l->local_rank, l->local_size);
        l->node = first / l->local_size;
        vnode = "the host's rank";
    }
    if (l->node >= l->nodes)
        return kvs__fail(e, KVS_EBADARG, "%s %d is not below %s %d", vnode, l->node, vnodes,
                         l->nodes);
    if (l->nodes == 1 && l->local_size != l->size)
        return kvs__fail(e, KVS_EBADARG, "one host (%s=1), but %s=%d is not %s=%d", vnodes,
                         vls, l->local_size, lr->size, l->size);
    return 0;
}

/* The job's name from a launcher's id: prefix and id, each byte that a
 * job name cannot hold made '_'; one too long keeps its head and a hash
 * of the whole, so that two ids cut alike still differ (but for a hash
 * collision). */
static void name_from_id(const char *prefix, const char *id, char *out, size_t size)
{
    char full[512];
    uint32_t h = 2166136261u;          /* FNV-1a */
    size_t n;

    n = (size_t)snprintf(full, sizeof full, "%s%s", prefix, id);
    if (n >= sizeof full)
        n = sizeof full - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)full[i];

        h = (h ^ c) * 16777619u;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '.' || c == '_' || c == '-'))
            full[i] = '_';
    }
    if (n <= NET_JOB_MAX && n < size)
        memcpy(out, full, n + 1);
    else
        snprintf(out, size, "%.*s-%08x", NET_JOB_MAX - 9, full, (unsigned)h);
}

/* Across hosts on demand: host 0's kvsd at KVS_COORD, else at MASTER_ADDR
 * on MASTER_PORT + 1 (the launcher's own store has MASTER_PORT); and the
 * secret the hosts prove, which such a job must have. */
static int hosts_env(struct kvs__launch *l, struct kvs__err *e)
{
    const char *coord = env("KVS_COORD"), *addr = env("MASTER_ADDR");
    int port = 0, rc;

    if (coord)
        rc = snprintf(l->coord, sizeof l->coord, "%s", coord);
    else if (addr && (rc = kvs__env_int("MASTER_PORT", 1, 65534, &port, e)) != 0) {
        if (rc < 0)
            return rc;
        rc = snprintf(l->coord, sizeof l->coord, "%s:%d", addr, port + 1);
    } else
        return kvs__fail(e, KVS_EBADARG, "a job of %d hosts started by %s needs host 0's "
                         "address: KVS_COORD=HOST:PORT, or MASTER_ADDR and MASTER_PORT (then "
                         "port MASTER_PORT+1)", l->nodes, l->by);
    if (rc < 0 || (size_t)rc >= sizeof l->coord)
        return kvs__fail(e, KVS_EBADARG, "host 0's address '%.64s...' is too long", l->coord);
    if (!(l->secret_file = env("KVS_SECRET_FILE")))
        return kvs__fail(e, KVS_EBADARG, "a job of %d hosts started by %s needs the job's "
                         "secret: KVS_SECRET_FILE=FILE (mode 0600, the same bytes on every "
                         "host)", l->nodes, l->by);
    return 0;
}

int kvs__launch_env(struct kvs__launch *l, struct kvs__err *e)
{
    const struct launcher *lr = NULL;
    const char *job = env("KVS_JOB");
    char id[256];
    int rc;

    memset(l, 0, sizeof *l);
    l->size = l->local_size = l->nodes = 1;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
        int r = 0, s = 1, hr, hs;

        if ((hr = kvs__env_int(launchers[i].rank, 0, RANKS_MAX - 1, &r, e)) < 0)
            return hr;
        if ((hs = kvs__env_int(launchers[i].size, 1, RANKS_MAX, &s, e)) < 0)
            return hs;
        if (!hr && !hs)
            continue;
        if (!hr || !hs)
            return kvs__fail(e, KVS_EBADARG, "%s and %s must be set together",
                             launchers[i].rank, launchers[i].size);
        if (r >= s)
            return kvs__fail(e, KVS_EBADARG, "%s=%d is not below %s=%d", launchers[i].rank, r,
                             launchers[i].size, s);
        l->rank = r;
        l->size = s;
        lr = &launchers[i];
        l->by = lr->name;
        break;
    }
    l->local_rank = l->rank;
    l->local_size = l->size;
    if (job) {
        if ((rc = kvs__job_name_check(job, e)) != 0)
            return rc;
        snprintf(l->job, sizeof l->job, "%s", job);
        snprintf(l->net_job, sizeof l->net_job, "%s", job);
        return 0;
    }
    if (!lr || !lr->job_id || !lr->job_id(id, sizeof id)) {
        snprintf(l->job, sizeof l->job, "default");
        snprintf(l->net_job, sizeof l->net_job, "default");
        return 0;
    }
    if ((rc = place(l, lr, e)) != 0)
        return rc;
    l->on_demand = 1;
    name_from_id(lr->prefix, id, l->net_job, sizeof l->net_job);
    if (l->nodes == 1)
        snprintf(l->job, sizeof l->job, "%s", l->net_job);
    else {
        char local[2 * KVS__JOB_MAX];

        /* At most KVS__JOB_MAX: the name left room for the host's part. */
        snprintf(local, sizeof local, "%s.h%d", l->net_job, l->node);
        snprintf(l->job, sizeof l->job, "%.*s", KVS__JOB_MAX, local);
        if ((rc = hosts_env(l, e)) != 0)
            return rc;
    }
    return kvs__job_name_check(l->job, e);
}
