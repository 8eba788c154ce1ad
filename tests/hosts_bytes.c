/*
 * hosts_bytes.c - a worker of the job of tests/test_hosts_bytes.sh: 2 hosts
 * x 2 workers in dist_sync push rows of a big table and pull rows back, and
 * the first worker of each host checks, from its kvsd's `kvsctl stats`,
 * that the bytes its host sent over the link per step follow the rows,
 * not the table.
 *
 * The table: T_ROWS x T_COLS float32 (32 MiB), lazy adam, split over the
 * two hosts in parts, each host owning one half of its rows (the key's
 * owner the first half, the other the second; which is which is the
 * key's hash, and the counts below are the same either way). Each step
 * each worker pushes R rows, R / 2 in each half, and pulls R rows (its
 * next step's) as a compact pull. Every row id of the job is distinct:
 * worker g of step s has the slots [(s * nw + g) * R / 2, + R / 2), each
 * mapped into both halves by one odd multiplier.
 *
 * What crosses the wire, per host and step (the "rows pushed and pulled"
 * of a step on the wire):
 *   - rows pushed: this host's sum of its workers' rows goes to the owner
 *     of each part as one rows message (PARTIAL); the rows in the other
 *     host's half are sent: 2 workers x R / 2 = R rows;
 *   - rows pulled: as owner, this host sends the rows its update changed
 *     (under lazy adam the union of every host's rows of its parts) back
 *     to the other host (VALUE): 4 workers x R / 2 = 2R rows;
 *   - compact pulls read this host's own copy and send nothing.
 * So each host sends 3R rows a step, and kvsd counts them for the key
 * (kvsctl stats: SENT, and RECEIVED on the other side). The link's bytes
 * (frames as they went on the wire, heads included) must be at most
 * BOUND x 3R x the row's bytes: the rows' ids (8 bytes a row) and each
 * part's frame and message heads are the rest, and so are the barriers'
 * frames and heartbeats in the window. A dense transfer of the table
 * would be 32 MiB a step, ~80x over. Counting bytes is deterministic:
 * this is a check of values, not of time.
 *
 * Usage: hosts_bytes; kvsrun's environment (KVS_JOB, KVS_RANK, ...) and
 * KVS_TEST_KVSCTL, the kvsctl to ask.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Not every helper of the shared header is used here. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "distutil.h"

#define T_ROWS   262144                /* the table's rows: 32 MiB of float32 */
#define T_COLS   32                    /* a row: 128 bytes */
#define R        1024                  /* rows a worker pushes, and pulls, a step */
#define STEPS    4
#define BOUND    1.2                   /* the issue's: bytes sent <= 1.2 x rows x row bytes */
#define MULT     40503                 /* odd: a permutation of a half's rows */

/* What kvsctl stats says of this host: its link to the other host and the
 * key's rows. */
struct seen {
    uint64_t frames_out, bytes_out, frames_in, bytes_in;
    uint64_t pushed, pulled, sent, received;
    uint64_t rows_sent;                /* "rows sent to other hosts", over every key */
};

/* Row id of slot `slot` in half h (0 or 1). */
static int64_t row_of(uint64_t slot, int h)
{
    return (int64_t)(h * (T_ROWS / 2) + (slot * MULT) % (T_ROWS / 2));
}

/* Worker g's rows of step s: R / 2 in each half, none another worker's or
 * step's. */
static void rows_of(int g, int s, int64_t *idx)
{
    for (int j = 0; j < R / 2; j++) {
        uint64_t slot = ((uint64_t)s * (uint64_t)nw + (uint64_t)g) * (R / 2) + (uint64_t)j;

        idx[j] = row_of(slot, 0);
        idx[R / 2 + j] = row_of(slot, 1);
    }
}

/* The last n words of line (split by spaces) as numbers: 1 when there are
 * n and they are. */
static int tail_numbers(const char *line, int n, uint64_t *v)
{
    const char *w[64];
    char buf[1024], *save = NULL, *tok;
    int k = 0;

    snprintf(buf, sizeof buf, "%s", line);
    for (tok = strtok_r(buf, " \n", &save); tok && k < 64; tok = strtok_r(NULL, " \n", &save))
        w[k++] = tok;
    if (k < n + 1)
        return 0;
    for (int i = 0; i < n; i++) {
        char *end;

        v[i] = strtoull(w[k - n + i], &end, 10);
        if (*end)
            return 0;
    }
    return 1;
}

/* Asks this host's kvsd (kvsctl stats) about the link to host `other` and
 * key `key` (listed once it has rows counted; need: it must be); dies
 * when something is missing. */
static void ask(int other, int key, int need, struct seen *out)
{
    const char *ctl = getenv("KVS_TEST_KVSCTL");
    char cmd[512], line[1024], want[32];
    int rows_table = 0, got_link = 0, got_key = 0, got_total = 0;
    uint64_t v[4];
    FILE *f;

    if (!ctl || !*ctl)
        die("KVS_TEST_KVSCTL is not set");
    snprintf(cmd, sizeof cmd, "%s -j %s stats", ctl, getenv("KVS_JOB"));
    snprintf(want, sizeof want, "host %d", other);
    memset(out, 0, sizeof *out);
    if (!(f = popen(cmd, "r")))
        die("popen %s", cmd);
    while (fgets(line, sizeof line, f)) {
        size_t wl = strlen(want);

        if (strncmp(line, "rows sent to other hosts:", 25) == 0)
            got_total = sscanf(line + 25, "%" SCNu64, &out->rows_sent) == 1;
        if (strncmp(line, want, wl) == 0 && (line[wl] == ' ' || line[wl] == '\n')
            && tail_numbers(line, 4, v)) {
            out->frames_out = v[0], out->bytes_out = v[1];
            out->frames_in = v[2], out->bytes_in = v[3];
            got_link = 1;
        }
        if (strncmp(line, "KEY", 3) == 0)
            rows_table = strstr(line, "PUSHED") != NULL;
        if (rows_table && atoi(line) == key && line[0] >= '0' && line[0] <= '9'
            && tail_numbers(line, 4, v)) {
            out->pushed = v[0], out->pulled = v[1], out->sent = v[2], out->received = v[3];
            got_key = 1;
        }
    }
    if (pclose(f) != 0)
        die("%s failed", cmd);
    if (!got_link || !got_total)
        die("kvsctl stats has no link to host %d, or no total of rows sent", other);
    if (need && !got_key)
        die("kvsctl stats lists no rows of key %d", key);
}

int main(void)
{
    const int key = 5;
    kvs_key_t k = KVS_INT_KEY(key);
    static int64_t idx[R], pidx[R], oidx[R];
    static float d[R * T_COLS], od[R * T_COLS];
    kvs_row_sparse_t z = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2,
                           .shape = { T_ROWS, T_COLS } };
    kvs_array_t ida = { .data = pidx, .dtype = KVS_INT64, .ndim = 1, .shape = { R } };
    struct seen a, b;
    int host, reader;

    scenario = "bytes";
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (nw != 4)
        die("a job of 2 hosts x 2 workers, not %d workers", nw);
    host = rank / 2;                   /* kvsrun: host h's workers are ranks 2h, 2h + 1 */
    reader = rank % 2 == 0;
    ok(kvs_init_row_sparse(kv, 1, &k, &z), "init_row_sparse");
    ok(kvs_set_optimizer(kv, "adam lr=0.01"), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    if (reader)
        ask(1 - host, key, 0, &a);
    ok(kvs_barrier(kv), "barrier");
    for (int s = 0; s < STEPS; s++) {
        rows_of(rank, s, idx);
        for (int j = 0; j < R * T_COLS; j++)
            d[j] = (float)((j + s + rank) % 5) - 2.0f;
        kvs_row_sparse_t v = { .data = d, .indices = idx, .nnz = R, .dtype = KVS_FLOAT32,
                               .ndim = 2, .shape = { T_ROWS, T_COLS } };
        kvs_row_sparse_t out = { .data = od, .indices = oidx, .nnz = R };

        ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
        rows_of(rank, s + 1, pidx);    /* the next step's rows */
        ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows");
        if (out.nnz != R)
            die("a compact pull of %d distinct ids gave %" PRId64 " rows", R, out.nnz);
    }
    ok(kvs_barrier(kv), "barrier");
    if (reader) {
        uint64_t rows = (uint64_t)STEPS * 3 * R, row_bytes = T_COLS * sizeof(float);
        uint64_t sent;
        double per_step, bound = BOUND * 3 * R * (double)row_bytes;

        ask(1 - host, key, 1, &b);
        sent = b.bytes_out - a.bytes_out;
        per_step = (double)sent / STEPS;
        printf("host %d: %" PRIu64 " bytes in %" PRIu64 " frames sent in %d steps: %.0f a "
               "step, %.3fx (3R = %d rows of %" PRIu64 " bytes a step), bound %.1fx\n", host,
               sent, b.frames_out - a.frames_out, STEPS, per_step,
               per_step / (3.0 * R * (double)row_bytes), 3 * R, row_bytes, BOUND);
        /* The rows and their ids went, at the least. */
        if (sent < rows * (row_bytes + 8))
            die("host %d counted %" PRIu64 " bytes sent in %d steps, fewer than the %" PRIu64
                " rows' own and their ids'", host, sent, STEPS, rows);
        if (per_step > bound)
            die("host %d sent %.0f bytes a step to host %d, over %.1fx the %d rows it sent "
                "(%.0f bytes)", host, per_step, 1 - host, BOUND, 3 * R, bound);
        if (b.pushed - a.pushed != (uint64_t)STEPS * 2 * R
            || b.pulled - a.pulled != (uint64_t)STEPS * 2 * R)
            die("key %d: kvsctl stats counted %" PRIu64 " rows pushed and %" PRIu64 " pulled "
                "by this host's workers in %d steps, expected %d each", key, b.pushed - a.pushed,
                b.pulled - a.pulled, STEPS, STEPS * 2 * R);
        if (b.sent - a.sent != rows || b.received - a.received != rows
            || b.rows_sent - a.rows_sent != rows)
            die("key %d: kvsctl stats counted %" PRIu64 " rows sent (%" PRIu64 " over every "
                "key) and %" PRIu64 " received in %d steps, expected %" PRIu64 " each (R to "
                "the other owner, 2R back a step)", key, b.sent - a.sent,
                b.rows_sent - a.rows_sent, b.received - a.received, STEPS, rows);
        if (b.bytes_in - a.bytes_in == 0 || b.frames_in - a.frames_in == 0)
            die("the link from host %d counted nothing received", 1 - host);
        {
            char want[200];

            /* The rows no longer change; the link's bytes may (heartbeats). */
            snprintf(want, sizeof want, "{\"key\": %d, \"pushed\": %" PRIu64 ", \"pulled\": %"
                     PRIu64 ", \"sent\": %" PRIu64 ", \"received\": %" PRIu64 "}", key, b.pushed,
                     b.pulled, b.sent, b.received);
            if (!kvsctl_json_has(want))
                die("kvsctl stats --json has no %s", want);
            snprintf(want, sizeof want, "\"links\": [\n  {\"host\": %d, \"frames_out\": ",
                     1 - host);
            if (!kvsctl_json_has(want))
                die("kvsctl stats --json has no link to host %d", 1 - host);
        }
    }
    ok(kvs_barrier(kv), "barrier");
    kvs_close(kv);
    return 0;
}
