/*
 * bench_snapshot.c - how long a store's snapshot takes: kvs__snapshot_write
 * to shared memory (not durable) and to a disk directory (durable),
 * kvs__snapshot_open (map and CRC check) and kvs__snapshot_restore into an
 * empty engine, for a store of float32 keys of 64 MiB each, with and
 * without sgd momentum states; beside them the machine's memcpy bandwidth
 * and a plain sequential write of as many bytes, the floors they are held
 * against (bench/NOTES.md §21); and the states image that kvsd's hosts
 * exchange (kvs__engine_encode_states), which a snapshot no longer makes.
 *
 *   bench_snapshot [--mib N] [--key-mib K] [--runs R] [--shm DIR] [--disk DIR]
 *                  [--no-disk] [--only plain|momentum]
 *
 * Unlike the other benchmarks it calls the library's internals (the
 * snapshot sits below the API); it prints medians of R runs, one line per
 * step, and removes every file it makes.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/engine.h"
#include "store/snapshot.h"
#include "store/statefile_codec.h"

#define MIB ((size_t)1 << 20)
#define RUNS_MAX 15

static struct kvs__err err;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "bench_snapshot: %s: %s (%d)\n", what, err.msg, rc);
        exit(1);
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static void row(const char *what, double *t, int n, uint64_t bytes)
{
    double m = median(t, n);

    printf("%-34s %8.3f s  %7.2f GB/s  (%.0f MiB)\n", what, m, (double)bytes / m / 1e9,
           (double)bytes / (double)MIB);
    fflush(stdout);
}

static void *big_alloc(size_t n)
{
    void *p = malloc(n);

    if (!p) {
        fprintf(stderr, "bench_snapshot: out of memory for %zu bytes\n", n);
        exit(1);
    }
    return p;
}

/* A store of nkeys float32 keys of key_bytes each, values not all zero;
 * with spec, one push makes every key's optimizer state. */
static struct kvs__engine *make_store(int nkeys, size_t key_bytes, const char *spec)
{
    struct kvs__engine *eng;
    size_t count = key_bytes / sizeof(float);
    float *v = big_alloc(key_bytes);

    for (size_t i = 0; i < count; i++)
        v[i] = (float)(i % 1000) * 0.001f;
    check(kvs__engine_new(NULL, &eng, &err), "engine");
    if (spec)
        check(kvs__engine_set_optimizer(eng, spec, &err), "optimizer");
    for (int k = 0; k < nkeys; k++) {
        kvs_key_t key = { .id = k };
        kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1,
                          .shape = { (int64_t)count }, .device = KVS_HOST };

        check(kvs__engine_init(eng, 1, &key, &a, 0, &err), "init");
        if (spec)
            check(kvs__engine_push(eng, 1, &key, &a, &err), "push");
    }
    free(v);
    return eng;
}

/* The floors: memcpy between two buffers of n bytes, and write() of n
 * bytes in 1 MiB pieces to a new file in dir (synced when durable). */
static void floors(size_t n, int runs, const char *shm, const char *disk)
{
    double t[RUNS_MAX];
    uint8_t *a = big_alloc(n), *b = big_alloc(n);
    char path[4096];

    memset(a, 1, n);
    memset(b, 2, n);
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        memcpy(b, a, n);
        t[r] = now() - t0;
        a[r] ^= b[n - 1 - (size_t)r];
    }
    row("memcpy", t, runs, n);
    /* What a restore must pay at least: the copy into memory never touched. */
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        uint8_t *c = big_alloc(n);
        memcpy(c, a, n);
        t[r] = now() - t0;
        a[r] ^= c[n - 1 - (size_t)r];
        free(c);
    }
    row("memcpy into fresh memory", t, runs, n);
    for (int d = 0; d < 2; d++) {
        const char *dir = d ? disk : shm;

        if (!dir)
            continue;
        snprintf(path, sizeof path, "%s/bench_snapshot.dd.%ld", dir, (long)getpid());
        for (int r = 0; r < runs; r++) {
            double t0 = now();
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0) {
                perror(path);
                exit(1);
            }
            for (size_t off = 0; off < n; off += MIB)
                if (write(fd, a + off, n - off < MIB ? n - off : MIB) < 0) {
                    perror(path);
                    exit(1);
                }
            if (d)
                fsync(fd);
            close(fd);
            t[r] = now() - t0;
            unlink(path);
        }
        row(d ? "dd write 1M, fsync (disk)" : "dd write 1M (shm)", t, runs, n);
    }
    free(a);
    free(b);
}

/* RUNS writes of ENG's snapshot to PATH, fsynced when DURABLE; the
 * median is the row "WHAT, LABEL". Each file is removed but a shm one's
 * last. */
static void time_writes(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                        const char *path, int durable, int runs, const char *what,
                        const char *label, uint64_t *bytes)
{
    double t[RUNS_MAX];
    char name[96];

    for (int r = 0; r < runs; r++) {
        double t0 = now();
        check(kvs__snapshot_write(eng, meta, NULL, NULL, path, durable, bytes, &err),
              durable ? "write (disk)" : "write");
        t[r] = now() - t0;
        if (durable || r + 1 < runs)
            unlink(path);
    }
    snprintf(name, sizeof name, "%s, %s", what, label);
    row(name, t, runs, *bytes);
}

/* Which steps of reading a snapshot back a run of time_reads times. */
enum { T_OPEN = 1, T_RESTORE = 2 };

/* RUNS reads of the snapshot at PATH, each timing the steps in TIMED
 * (opening it: map and CRC; restoring it into a new store); the median is
 * the row "WHAT, LABEL". */
static void time_reads(const char *path, int timed, int runs, const char *what,
                       const char *label, uint64_t bytes)
{
    double t[RUNS_MAX];
    char name[96];

    for (int r = 0; r < runs; r++) {
        struct kvs__snapshot *s;
        struct kvs__engine *back = NULL;
        double t0;

        if (timed & T_RESTORE)
            check(kvs__engine_new(NULL, &back, &err), "engine");
        if (!(timed & T_OPEN))
            check(kvs__snapshot_open(path, &s, &err), "open");
        t0 = now();
        if (timed & T_OPEN)
            check(kvs__snapshot_open(path, &s, &err), "open");
        if (timed & T_RESTORE)
            check(kvs__snapshot_restore(back, s, NULL, NULL, &err), "restore");
        t[r] = now() - t0;
        kvs__snapshot_free(s);
        if (back)
            kvs__engine_free(back);
    }
    snprintf(name, sizeof name, "%s, %s", what, label);
    row(name, t, runs, bytes);
}

static void one_store(int nkeys, size_t key_bytes, const char *spec, int runs, const char *shm,
                      const char *disk)
{
    struct kvs__snap_meta meta = { .step = 1, .nworkers = 1, .sync = -1, .seq = 1 };
    struct kvs__engine *eng = make_store(nkeys, key_bytes, spec);
    const char *label = spec ? "momentum" : "plain";
    char path[4096], dpath[4096];
    double t[RUNS_MAX];
    uint64_t bytes = 0;

    snprintf(path, sizeof path, "%s/bench_snapshot.%ld.snap", shm, (long)getpid());
    if (disk)
        snprintf(dpath, sizeof dpath, "%s/bench_snapshot.%ld.snap", disk, (long)getpid());
    printf("-- %d keys of %zu MiB, %s\n", nkeys, key_bytes / MIB,
           spec ? spec : "no optimizer");
    if (spec) {
        for (int r = 0; r < runs; r++) {
            uint8_t *img;
            size_t len;
            double t0 = now();
            check(kvs__engine_encode_states(eng, NULL, NULL, &img, &len, &err), "states");
            t[r] = now() - t0;
            free(img);
            bytes = len;
        }
        row("states image (encode_states)", t, runs, bytes);
    }
    if (disk)
        time_writes(eng, &meta, dpath, 1, runs, "write durable (disk)", label, &bytes);
    /* The last one stays, for the reads. */
    time_writes(eng, &meta, path, 0, runs, "write (shm)", label, &bytes);
    /* The store's memory back before the restores make another. */
    kvs__engine_free(eng);
    time_reads(path, T_OPEN, runs, "open (map + CRC)", label, bytes);
    time_reads(path, T_RESTORE, runs, "restore", label, bytes);
    /* What kvsd's --restore pays: both, on one mapping. */
    time_reads(path, T_OPEN | T_RESTORE, runs, "open + restore", label, bytes);
    unlink(path);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_snapshot [--mib N] [--key-mib K] [--runs R] [--shm DIR] "
                    "[--disk DIR] [--no-disk] [--only plain|momentum]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long mib = 1024, key_mib = 64;
    int runs = 3, plain = 1, momentum = 1;
    const char *shm = "/dev/shm", *disk = getenv("TMPDIR");
    char buf[64];

    if (!disk || !disk[0])
        disk = "/var/tmp";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--no-disk")) {
            disk = NULL;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--mib"))
            mib = atol(v);
        else if (!strcmp(a, "--key-mib"))
            key_mib = atol(v);
        else if (!strcmp(a, "--runs"))
            runs = atoi(v);
        else if (!strcmp(a, "--shm"))
            shm = v;
        else if (!strcmp(a, "--disk"))
            disk = v;
        else if (!strcmp(a, "--only") && !strcmp(v, "plain"))
            momentum = 0;
        else if (!strcmp(a, "--only") && !strcmp(v, "momentum"))
            plain = 0;
        else
            usage();
    }
    if (mib < 1 || key_mib < 1 || key_mib > mib || runs < 1 || runs > RUNS_MAX)
        usage();
    snprintf(buf, sizeof buf, "%s", kvs__crc32c(0, "123456789", 9) == 0xe3069283u
                                        ? "ok" : "WRONG");
    printf("bench_snapshot: %ld MiB store, %ld MiB keys, medians of %d; CRC check %s\n", mib,
           key_mib, runs, buf);
    {
        double t[RUNS_MAX];
        size_t n = (size_t)mib * MIB;
        uint8_t *p = big_alloc(n);

        memset(p, 3, n);
        for (int r = 0; r < runs; r++) {
            double t0 = now();
            volatile uint32_t c = kvs__crc32c(0, p, n);
            (void)c;
            t[r] = now() - t0;
        }
        row("crc32c", t, runs, n);
        for (int r = 0; r < runs; r++) {
            double t0 = now();
            volatile uint32_t c = kvs__crc32c_table(0, p, n);
            (void)c;
            t[r] = now() - t0;
        }
        row("crc32c (table)", t, runs, n);
        free(p);
    }
    floors((size_t)mib * MIB, runs, shm, disk);
    if (plain)
        one_store((int)(mib / key_mib), (size_t)key_mib * MIB, NULL, runs, shm, disk);
    if (momentum)
        one_store((int)(mib / key_mib), (size_t)key_mib * MIB, "sgd lr=0.01 momentum=0.9",
                  runs, shm, disk);
    return 0;
}
