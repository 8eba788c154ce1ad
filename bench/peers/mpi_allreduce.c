/*
 * mpi_allreduce.c - Open MPI as the peer of kvs in scripts/bench: the same
 * cases through the same harness (../round.h), with MPI_Allreduce
 * (MPI_SUM, float32, MPI_IN_PLACE) as the collective.
 *
 *   mpirun -np N mpi_allreduce [--sizes LIST] [--resnet] [--seconds S] [--min-reps M]
 *                              [--compute-us N]
 *       one MPI_Allreduce of S bytes per rank, per size; with --resnet, a
 *       step of 161 MPI_Allreduce calls, one per ResNet-50 tensor
 *       (../resnet50_sizes.h), in the model's order. --compute-us N: N µs
 *       of CPU work after each round's barrier, before the op (round.h).
 *   mpirun -np N mpi_allreduce --idle [--sleep S]
 *       rank 0 enters MPI_Barrier at once, the others sleep S seconds
 *       (default 2) first: prints the CPU seconds rank 0 used meanwhile.
 *
 * Rank 0 prints one "row,..." line per case (rh_print in round.h). Built
 * by scripts/bench with mpicc; not part of the kvs build.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "round.h"
#include "resnet50_sizes.h"

#define DEFAULT_SIZES "4K,256K,4M,64M"

static void job_barrier(void *ctx)
{
    (void)ctx;
    MPI_Barrier(MPI_COMM_WORLD);
}

static void job_sum(void *ctx, double *v, int n)
{
    (void)ctx;
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

/* The op: one MPI_Allreduce per key, in place, on the one buffer. */
static void op_allreduce(void *ctx)
{
    const struct rh_bufs *b = ctx;

    for (int k = 0; k < b->nkeys; k++) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, b->buf[0] + b->offs[k], (int)b->counts[k],
                               MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

        if (rc != MPI_SUCCESS) {
            fprintf(stderr, "mpi_allreduce: MPI_Allreduce failed (%d)\n", rc);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

int main(int argc, char **argv)
{
    struct rh_opts o = { .seconds = 1.0, .min_reps = 10 };
    struct rh_comm c = { .barrier = job_barrier, .sum = job_sum };
    const char *sizes_arg = NULL;
    size_t sizes[RH_MAX_SIZES];
    int nsizes, resnet = 0, idle = 0;
    double sleep_s = 2.0;
    static char who[48];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.nproc);
    snprintf(who, sizeof who, "mpi_allreduce rank %d", c.rank);
    rh_who = who;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";

        if (strcmp(a, "--resnet") == 0)
            resnet = 1;
        else if (strcmp(a, "--idle") == 0)
            idle = 1;
        else if (i + 1 < argc && rh_opt(&o, &sizes_arg, a, v))
            i++;
        else if (strcmp(a, "--sleep") == 0 && ++i < argc)
            sleep_s = atof(v);
        else {
            if (c.rank == 0)
                fprintf(stderr, "usage: mpi_allreduce [--sizes LIST] [--resnet] [--seconds S]"
                        " [--min-reps M] [--compute-us N] | --idle [--sleep S]\n");
            MPI_Finalize();
            return 2;
        }
    }
    nsizes = rh_parse_sizes(sizes_arg ? sizes_arg : resnet ? "" : DEFAULT_SIZES, sizes,
                            RH_MAX_SIZES);
    if (nsizes < 0 || !rh_opts_ok(&o) || !(sleep_s >= 0 && sleep_s <= 600)
        || c.nproc > RH_MAX_PROCS) {
        if (c.rank == 0)
            fprintf(stderr, "mpi_allreduce: bad arguments\n");
        MPI_Finalize();
        return 2;
    }

    if (idle) {
        rh_idle(&c, "mpi", sleep_s, NULL);
        MPI_Finalize();
        return 0;
    }

    for (int s = 0; s < nsizes; s++) {
        long count = (long)(sizes[s] / sizeof(float));
        struct rh_bufs b;
        struct rh_result r;

        rh_bufs_init(&b, 1, &count, 1, c.rank, c.nproc, NULL);
        rh_run(&c, &b, "MPI_Allreduce", op_allreduce, &b, NULL, &o, &r);
        if (c.rank == 0)
            rh_print("allreduce", "mpi", c.nproc, (double)sizes[s], &r);
        rh_bufs_free(&b);
    }
    if (resnet) {
        struct rh_bufs b;
        struct rh_result r;

        rh_bufs_init(&b, RESNET50_NTENSORS, resnet50_sizes, 1, c.rank, c.nproc, NULL);
        rh_run(&c, &b, "MPI_Allreduce", op_allreduce, &b, NULL, &o, &r);
        if (c.rank == 0)
            rh_print("resnet50", "mpi", c.nproc, (double)RESNET50_NVALUES * sizeof(float), &r);
        rh_bufs_free(&b);
    }
    MPI_Finalize();
    return 0;
}
