/*
 * onecopy.c - the one-copy floor of scripts/bench: what an in-place
 * allreduce of S bytes over N processes costs when each process's array is
 * read once and written once, and nothing else moves (what Open MPI's CMA
 * path and kvsd writing the outs in place aim at). Run through the same
 * harness as kvs and its peers (round.h: the same values, barriers, checks
 * and medians), as impl "floor-1copy".
 *
 *   onecopy -n N [--sizes LIST] [--seconds S] [--min-reps M] [--compute-us N]
 *
 * N processes (this one and N - 1 children) keep their arrays in one
 * shared mapping. In a round, process p takes the p-th slice of the
 * elements: a block at a time (64 KiB, in the cache), it sums the block of
 * every array in rank order and writes the sum into the block of every
 * array; then all meet at a barrier. Bytes through memory per round:
 * N * S read, N * S written: no copy in, no copy out, no store. No system
 * call but the barrier's: it spins 50 us, as MPI's ranks poll, then
 * sleeps on a futex (with more processes than cores, spinning would take
 * the core of the process awaited).
 *
 * The parent prints one "row,allreduce,floor-1copy,..." line per size
 * (rh_print) and nothing else; errors go to stderr and exit 1.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "round.h"

#define DEFAULT_SIZES "4K,256K,4M,64M"
#define BLOCK_FLOATS  16384            /* 64 KiB */
#define MAX_N         RH_MAX_PROCS

/* The control page every process maps: a sense-reversing barrier and the
 * slots of the harness's sums. */
struct shared {
    _Atomic unsigned arrived, sense, sleepers;
    double slot[MAX_N][8];
};

struct proc {
    struct shared *sh;
    int rank, n;
    unsigned sense;                    /* this process's next sense */
    unsigned char *arrays;             /* N arrays of stride bytes */
    size_t stride;
    const struct rh_bufs *b;
    float tmp[BLOCK_FLOATS];
};

static long futex(_Atomic unsigned *w, int op, unsigned v)
{
    return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

/* Spins SPIN_NS as MPI's ranks do, then sleeps (more processes than
 * cores would otherwise spin away the time of the one awaited). */
#define SPIN_NS 50000

static void barrier(void *ctx)
{
    struct proc *p = ctx;
    unsigned s = p->sense ^= 1;

    if (atomic_fetch_add(&p->sh->arrived, 1) + 1 == (unsigned)p->n) {
        atomic_store(&p->sh->arrived, 0);
        atomic_store(&p->sh->sense, s);
        if (atomic_load(&p->sh->sleepers))
            futex(&p->sh->sense, FUTEX_WAKE, INT32_MAX);
        return;
    }
    for (double t0 = rh_now(); atomic_load(&p->sh->sense) != s;) {
        if (rh_now() - t0 < SPIN_NS * 1e-9)
            continue;
        atomic_fetch_add(&p->sh->sleepers, 1);
        if (atomic_load(&p->sh->sense) != s)
            futex(&p->sh->sense, FUTEX_WAIT, s ^ 1);
        atomic_fetch_sub(&p->sh->sleepers, 1);
    }
}

static void sum(void *ctx, double *v, int nv)
{
    struct proc *p = ctx;

    for (int i = 0; i < nv && i < 8; i++)
        p->sh->slot[p->rank][i] = v[i];
    barrier(p);
    for (int i = 0; i < nv && i < 8; i++) {
        v[i] = 0;
        for (int r = 0; r < p->n; r++)
            v[i] += p->sh->slot[r][i];
    }
    barrier(p);
}

/* Process rank's array: its part of the shared mapping. */
static void *alloc(void *ctx, size_t bytes)
{
    struct proc *p = ctx;

    if (bytes > p->stride) {
        fprintf(stderr, "onecopy: %zu bytes do not fit %zu\n", bytes, p->stride);
        exit(1);
    }
    memset(p->arrays + (size_t)p->rank * p->stride, 0, bytes);
    return p->arrays + (size_t)p->rank * p->stride;
}

static void release(void *ctx, void *q)
{
    (void)ctx;
    (void)q;
}

/* The op: this process's slice of every key, a block at a time. */
static void op(void *ctx)
{
    struct proc *p = ctx;
    const struct rh_bufs *b = p->b;

    for (int k = 0; k < b->nkeys; k++) {
        size_t n = (size_t)b->counts[k], per = (n / (size_t)p->n + 15) & ~(size_t)15,
               lo = per * (size_t)p->rank, hi = lo + per < n ? lo + per : n;

        for (size_t i = lo; i < hi; i += BLOCK_FLOATS) {
            size_t m = hi - i < BLOCK_FLOATS ? hi - i : BLOCK_FLOATS;
            float *a[MAX_N];

            for (int r = 0; r < p->n; r++)
                a[r] = (float *)(void *)(p->arrays + (size_t)r * p->stride) + b->offs[k] + i;
            for (size_t j = 0; j < m; j++)
                p->tmp[j] = a[0][j] + a[1][j];
            for (int r = 2; r < p->n; r++)
                for (size_t j = 0; j < m; j++)
                    p->tmp[j] += a[r][j];
            for (int r = 0; r < p->n; r++)
                memcpy(a[r], p->tmp, m * sizeof(float));
        }
    }
    barrier(p);
}

static int run_size(size_t bytes, int n, const struct rh_opts *o)
{
    size_t stride = (bytes + 4096 + 4095) & ~(size_t)4095;
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    unsigned char *arrays = mmap(NULL, stride * (size_t)n, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t kids[MAX_N];
    int rank = 0, st = 0;

    if (sh == MAP_FAILED || arrays == MAP_FAILED) {
        fprintf(stderr, "onecopy: mmap failed\n");
        return 1;
    }
    fflush(stdout);
    for (int r = 1; r < n; r++) {
        if ((kids[r] = fork()) < 0) {
            fprintf(stderr, "onecopy: fork failed\n");
            exit(1);
        }
        if (kids[r] == 0) {
            rank = r;
            break;
        }
    }
    {
        static struct proc p;
        struct rh_comm c = { .rank = rank, .nproc = n, .ctx = &p, .barrier = barrier,
                             .sum = sum };
        long count = (long)(bytes / sizeof(float));
        struct rh_bufs b;
        struct rh_result res;

        p = (struct proc){ .sh = sh, .rank = rank, .n = n, .arrays = arrays, .stride = stride };
        rh_bufs_init(&b, 1, &count, 1, rank, n,
                     &(struct rh_mem){ .alloc = alloc, .release = release, .ctx = &p });
        p.b = &b;
        rh_run(&c, &b, "floor-1copy", op, &p, NULL, o, &res);
        if (rank == 0)
            rh_print("allreduce", "floor-1copy", n, (double)bytes, &res);
        rh_bufs_free(&b);
    }
    if (rank != 0)
        _exit(0);
    for (int r = 1; r < n; r++) {
        int ws;

        if (waitpid(kids[r], &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            st = 1;
    }
    munmap(arrays, stride * (size_t)n);
    munmap(sh, sizeof *sh);
    return st;
}

int main(int argc, char **argv)
{
    struct rh_opts o = { .seconds = 1.0, .min_reps = 10 };
    const char *sizes_arg = DEFAULT_SIZES;
    size_t sizes[RH_MAX_SIZES];
    int n = 2, nsizes;

    rh_who = "onecopy";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";

        if (strcmp(a, "-n") == 0 && ++i < argc)
            n = atoi(v);
        else if (i + 1 < argc && rh_opt(&o, &sizes_arg, a, v))
            i++;
        else {
            fprintf(stderr, "usage: onecopy -n N [--sizes LIST] [--seconds S] [--min-reps M]"
                    " [--compute-us N]\n");
            return 2;
        }
    }
    nsizes = rh_parse_sizes(sizes_arg, sizes, RH_MAX_SIZES);
    if (nsizes < 0 || n < 2 || n > MAX_N || !rh_opts_ok(&o)) {
        fprintf(stderr, "onecopy: bad arguments\n");
        return 2;
    }
    for (int s = 0; s < nsizes; s++)
        if (run_size(sizes[s], n, &o) != 0)
            return 1;
    return 0;
}
