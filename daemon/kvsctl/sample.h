/*
 * sample.h - kvsd's sample (proto.h, KVS__CTL_SAMPLE) as kvsctl reads it
 * (sample.c): parsed and checked, and written as JSON. For stats --json
 * (status.c) and top (top.c); it asks no kvsd itself.
 */
#ifndef KVSCTL_SAMPLE_H
#define KVSCTL_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvs.h"
#include "base/latency.h"

#define SAMPLE_KEY_TEXT (4 * KVS_MAX_KEY_LEN + 3)
#define SAMPLE_COUNTERS 32
#define SAMPLE_NAME_MAX 32

struct sample_worker {
    int rank;
    long pid;
    uint64_t pushes, bytes, wait_ns;
};

struct sample_key {
    char text[SAMPLE_KEY_TEXT + 1];    /* as kvsd wrote it: 7, or "name" escaped; printable */
    int is_str;
    int64_t id;                        /* an int key's */
    char name[KVS_MAX_KEY_LEN + 1];    /* a string key's, unescaped (no NUL inside) */
    size_t name_len;
    int combined;                      /* the workers run its rounds */
    uint64_t rounds;
    uint64_t lat[KVS__LAT_BUCKETS];
};

/* A link to another host (sample 2): the frames and bytes each way. */
struct sample_link {
    int host;
    uint64_t frames_out, bytes_out, frames_in, bytes_in;
};

/* A key's rows (sample 2): its key as in struct sample_key (text, is_str,
 * id, name), its rows pushed, pulled, sent and received. */
struct sample_rows {
    struct sample_key key;             /* rounds, lat: unused */
    uint64_t pushed, pulled, sent, received;
};

#define SAMPLE_LINKS 1024              /* links a sample takes at most */

struct sample {
    int version;                       /* the format's: 1 or 2 */
    int64_t clock;                     /* kvsd's CLOCK_MONOTONIC, ns */
    uint64_t cpu_user, cpu_sys;        /* kvsd's CPU time, ns */
    char mode[8];                      /* sync, async, unknown */
    int expected, live, left, dead;
    int failed;
    int ncounters;
    struct { char name[SAMPLE_NAME_MAX]; uint64_t v; } counters[SAMPLE_COUNTERS];
    int nworkers;
    struct sample_worker *workers;     /* rank order as kvsd listed them */
    size_t nkeys;
    struct sample_key *keys;           /* the busiest first */
    int nlinks;
    struct sample_link *links;         /* host order */
    size_t nrows;
    struct sample_rows *rows;          /* the most rows first */
    uint64_t more_workers, more_keys, more_rows;   /* left out by kvsd: its text was full */
};

/* Parses and checks the text (len bytes, as the reply decoder let it
 * through) of a sample into *s: every line, word and number of the format
 * in proto.h. 0; or -1 with why in msg (size bytes), *s then empty.
 * sample_free frees what a parse made (an empty sample: nothing). */
int sample_parse(const char *text, size_t len, struct sample *s, char *msg, size_t size);
void sample_free(struct sample *s);

/* The counter called name, or 0 when the sample has none. */
uint64_t sample_counter(const struct sample *s, const char *name);

/* Writes s of job as one JSON object on f (key names escaped, int keys as
 * numbers, string keys as strings). 0, or -1 when f failed. */
int sample_json(FILE *f, const char *job, const struct sample *s);

#endif
