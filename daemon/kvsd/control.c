/*
 * control.c - kvsctl's channel into kvsd: the queue of checked control
 * connections between the socket thread and the serve thread, and the
 * answers to status, keys, stats, stop and sample, written as text that
 * is cut between lines, never inside one, when it does not fit.
 *
 * stats tells the links' traffic too (hosts.c counts it) and each key's
 * rows (the round's counts); stats-short leaves out what is per key, as
 * a job of many keys would fill the text with it.
 *
 * Two sides. control_accept runs on the socket thread: it decodes and checks
 * the request, then queues the connection or refuses it; that side never
 * looks at the engine, the rounds or the counters. control_serve runs on the
 * serve thread, which alone owns the job's state: it writes each answer,
 * sends it with a short deadline and closes the connection. Nothing here
 * changes the store or a worker, and nothing waits without a deadline;
 * stop only tells the serve loop to end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "bridge.h"
#include "collectives.h"
#include "combined.h"
#include "commits.h"
#include "hosts.h"
#include "job.h"
#include "rounds.h"
#include "waits.h"

#include "shm/shm.h"

#define CTL_SEND_NS     (50 * 1000000ll)   /* the serve thread's wait to send one answer */
#define CTL_TAIL_ROOM   80             /* room kept in a listing for "... N more" */

/* ---- control: kvsctl's requests --------------------------------------- */

/* An answer being written into a reply's text. A piece that does not fit
 * is left out whole and marks the text full: an answer is cut between
 * lines, never inside one. */
struct text {
    char *buf;
    size_t len, cap;
    int full;
};

static void text_raw(struct text *t, const char *s, size_t n)
{
    if (t->full || n > t->cap - t->len) {
        t->full = 1;
        return;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_add(struct text *t, const char *fmt, ...)
{
    char line[1024], safe[4 * sizeof line];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    text_raw(t, safe,
             kvs__ctl_text_escape(safe, sizeof safe, line, strnlen(line, sizeof line), 0));
}

/* 7, or "name" quoted and escaped. */
static void key_text(char *buf, size_t size, kvs_key_t key)
{
    size_t n;

    if (!key.name) {
        snprintf(buf, size, "%" PRId64, key.id);
        return;
    }
    buf[0] = '"';
    n = 1 + kvs__ctl_text_escape(buf + 1, size - 2, key.name, strlen(key.name), 1);
    buf[n++] = '"';
    buf[n] = '\0';
}

/* As Python writes a shape: (), (4,), (2,3). */
static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, size, "(");

    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? "," : "", shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "%s)", ndim == 1 ? "," : "");
}

static void wait_line(void *ctx, const char *line)
{
    struct text *t = ctx;
    char esc[4 * (KVS_MAX_KEY_LEN + 320)];

    kvs__ctl_text_escape(esc, sizeof esc, line, strlen(line), 0);
    text_add(t, "waiting: %s\n", esc);
}

/* The job's workers as the socket thread knows them (it sets nworkers
 * and sync from the first hello), and those live and dead now. */
static void worker_counts(struct daemon *d, int *nworkers, int *sync, int *live, int *dead)
{
    pthread_mutex_lock(&d->lock);
    *nworkers = d->nworkers;
    *sync = d->sync;
    pthread_mutex_unlock(&d->lock);
    *live = *dead = 0;
    for (int i = 0; i < MAX_WORKERS; i++) {
        int st = atomic_load(&d->workers[i].state);

        *live += st == W_LIVE;
        *dead += st == W_DEAD;
    }
}

/* The job's restarts and last commit, for status. */
static void commit_lines(struct daemon *d, struct text *t)
{
    char msg[KVS__MSG_MAX];
    uint64_t disk, failures;
    struct timespec now;

    text_add(t, "generation: %d (restarts so far)\n", d->o.generation);
    if (d->resume_step < 0) {
        text_add(t, "last commit: none\n");
    } else if (!d->o.recover) {
        clock_gettime(CLOCK_REALTIME, &now);
        text_add(t, "last commit: step %lld, commit %llu, %.1f s ago, no snapshot (the job "
                 "does not recover: no --restarts or --checkpoint)\n",
                 (long long)d->resume_step, (unsigned long long)d->commit_seq,
                 (double)(now.tv_sec * 1000000000ll + now.tv_nsec - d->commit_ns) / 1e9);
    } else {
        clock_gettime(CLOCK_REALTIME, &now);
        text_add(t, "last commit: step %lld, commit %llu, %.1f s ago, %llu bytes, %s %s\n",
                 (long long)d->resume_step, (unsigned long long)d->commit_seq,
                 (double)(now.tv_sec * 1000000000ll + now.tv_nsec - d->commit_ns) / 1e9,
                 (unsigned long long)d->commit_bytes,
                 d->restored_from[0] ? "restored from" : "in", d->restored_from[0]
                     ? d->restored_from : d->snap_path);
    }
    if (!d->o.checkpoint) {
        text_add(t, "checkpoint: none (no --checkpoint)\n");
        return;
    }
    commits_disk(d, &disk, &failures, msg, sizeof msg);
    text_add(t, "checkpoint: %s%s, last on disk: ", d->o.checkpoint,
             d->o.checkpoint_sync ? " (sync)" : "");
    if (disk)
        text_add(t, "commit %llu%s\n", (unsigned long long)disk,
                 disk == d->commit_seq ? ", the last" : ", not the last yet");
    else
        text_add(t, "none\n");
    if (failures)
        text_add(t, "checkpoint failures: %llu, the last: %s\n",
                 (unsigned long long)failures, msg);
}

static void ctl_status(struct daemon *d, struct text *t)
{
    const char *spec = kvs__engine_optimizer(d->eng);
    int nworkers, sync, live, dead;

    worker_counts(d, &nworkers, &sync, &live, &dead);
    text_add(t, "job: %s\n", d->o.job);
    text_add(t, "kvsd pid: %ld\n", (long)getpid());
    text_add(t, "mode: %s\n", sync < 0 ? "unknown yet" : sync ? "sync" : "async");
    if (nworkers > 0)
        text_add(t, "workers: %d expected, %d connected, %d left, %d dead\n", nworkers, live,
                 d->left, dead);
    else
        text_add(t, "workers: unknown yet, %d connected, %d left, %d dead\n", live, d->left,
                 dead);
    text_add(t, "keys: %zu\n", kvs__engine_nkeys(d->eng));
    text_add(t, "optimizer: %s\n", spec ? spec : "none");
    if (d->failed)
        text_add(t, "failed: yes: %s\n", d->fail_msg);
    else
        text_add(t, "failed: no\n");
    commit_lines(d, t);
    waits_list(d, wait_line, t);
}

static int count_on_gpu(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    (void)key;
    *(size_t *)ctx += info->device != KVS_HOST;
    return 0;
}

/* Live workers whose pushes kvsd may read out of their memory. */
static int remote_readers(const struct daemon *d)
{
    int n = 0;

    for (int i = 0; i < d->nworkers; i++)
        n += atomic_load(&d->workers[i].state) == W_LIVE && d->workers[i].pidfd >= 0;
    return n;
}

/* The keys whose values kvsd keeps on a GPU (0 when it cannot count). */
static size_t values_on_gpus(struct daemon *d)
{
    size_t n = 0;

    kvs__engine_foreach(d->eng, count_on_gpu, &n, NULL);
    return n;
}

/* ---- latencies: the keys, busiest first --------------------------------- */

#define KEY_TEXT_MAX   (4 * KVS_MAX_KEY_LEN + 3)
#define BUSY_MAX       1000                /* keys a listing of latencies takes at most */
#define WIDTH_MAX      40                  /* a longer key only shifts its own line */

static int width(int w, size_t n)
{
    return n > (size_t)w ? (n > WIDTH_MAX ? WIDTH_MAX : (int)n) : w;
}

/* Columns a terminal gives the text: one per character, not per byte (a
 * name may hold UTF-8; what it shows wider is not worth a table). */
static size_t columns(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* A key kept for a listing of latencies. */
struct busy {
    uint64_t rounds;
    size_t order;                      /* its place in key order: ties go by it */
    const struct round *rd;            /* NULL: never pushed nor pulled */
    kvs_key_t key;                     /* name: malloc'd */
};

/* The BUSY_MAX keys with the most rounds, as a heap whose root is the
 * least busy of them; nomem when a name could not be kept. */
struct busiest {
    const struct daemon *d;
    struct busy *h;
    size_t n, seen, total;
    int nomem;
};

/* 1 when a has done more rounds than b (or as many, and comes first). */
static int busier(const struct busy *a, const struct busy *b)
{
    return a->rounds != b->rounds ? a->rounds > b->rounds : a->order < b->order;
}

static void sift_down(struct busy *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        struct busy tmp;

        if (l < n && busier(&h[m], &h[l]))
            m = l;
        if (l + 1 < n && busier(&h[m], &h[l + 1]))
            m = l + 1;
        if (m == i)
            return;
        tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
}

static int busy_key(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct busiest *b = ctx;
    const struct round *rd = *info->front;
    struct busy k = { .order = b->seen++, .rd = rd, .key = key };

    k.rounds = !rd ? 0 : rd->cb ? cb_key_rounds(b->d, rd) : rd->done;
    if (b->n == BUSY_MAX && !busier(&k, &b->h[0]))
        return 0;
    if (key.name && !(k.key.name = strdup(key.name))) {
        b->nomem = 1;
        return 0;
    }
    if (b->n < BUSY_MAX) {
        /* Up the heap: a parent is never busier than its children. */
        size_t i = b->n++;

        b->h[i] = k;
        while (i > 0 && busier(&b->h[(i - 1) / 2], &b->h[i])) {
            struct busy tmp = b->h[i];

            b->h[i] = b->h[(i - 1) / 2];
            b->h[(i - 1) / 2] = tmp;
            i = (i - 1) / 2;
        }
        return 0;
    }
    free((char *)b->h[0].key.name);
    b->h[0] = k;
    sift_down(b->h, b->n, 0);
    return 0;
}

static int busiest_first(const void *x, const void *y)
{
    return busier(x, y) ? -1 : busier(y, x) ? 1 : 0;
}

/* Fills b with the busiest keys, busiest first. 0, or -ENOMEM. */
static int busiest_keys(struct daemon *d, struct busiest *b, struct kvs__err *e)
{
    int rc;

    *b = (struct busiest){ .d = d, .total = kvs__engine_nkeys(d->eng) };
    if (!(b->h = malloc(BUSY_MAX * sizeof *b->h)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    if ((rc = kvs__engine_foreach(d->eng, busy_key, b, e)) == 0 && b->nomem)
        rc = kvs__fail(e, -ENOMEM, "out of memory");
    qsort(b->h, b->n, sizeof *b->h, busiest_first);
    return rc;
}

static void busiest_free(struct busiest *b)
{
    for (size_t i = 0; i < b->n; i++)
        free((char *)b->h[i].key.name);
    free(b->h);
}

/* A key's round latencies: kvsd's, or those its workers counted. */
static void key_latency(const struct daemon *d, const struct round *rd, uint64_t *lat)
{
    for (int i = 0; i < KVS__LAT_BUCKETS; i++)
        lat[i] = rd ? rd->lat[i] : 0;
    if (rd && rd->cb)
        cb_key_latency(d, rd, lat);
}

/* The per-key part of stats: rounds and latencies, as many keys as fit. */
static void stats_keys(struct daemon *d, struct text *t, struct kvs__err *e)
{
    struct busiest b;
    char ks[KEY_TEXT_MAX + 1], line[KEY_TEXT_MAX + 128], q[3][16];
    uint64_t lat[KVS__LAT_BUCKETS];
    int wkey = 3, n;
    size_t shown = 0;

    if (busiest_keys(d, &b, e) != 0) {
        text_add(t, "latencies: not shown: %s\n", e->msg);
        busiest_free(&b);
        return;
    }
    for (size_t i = 0; i < b.n; i++) {
        key_text(ks, sizeof ks, b.h[i].key);
        wkey = width(wkey, columns(ks));
    }
    text_add(t, "rounds per key, busiest first; a round's latency runs from its first "
             "push to its end,\nand P50, P99 and MAX are upper bounds: those of its "
             "histogram's buckets (2^i ns):\n");
    text_add(t, "%-*s  %10s  %7s  %7s  %7s\n", wkey, "KEY", "ROUNDS", "P50", "P99", "MAX");
    for (size_t i = 0; i < b.n; i++) {
        size_t kcols;

        key_text(ks, sizeof ks, b.h[i].key);
        kcols = columns(ks);
        key_latency(d, b.h[i].rd, lat);
        kvs__lat_format(q[0], sizeof q[0], kvs__lat_quantile(lat, 0.5));
        kvs__lat_format(q[1], sizeof q[1], kvs__lat_quantile(lat, 0.99));
        kvs__lat_format(q[2], sizeof q[2], kvs__lat_quantile(lat, 1));
        n = snprintf(line, sizeof line, "%s%*s  %10" PRIu64 "  %7s  %7s  %7s\n", ks,
                     kcols < (size_t)wkey ? wkey - (int)kcols : 0, "", b.h[i].rounds, q[0],
                     q[1], q[2]);
        if (n < 0 || (size_t)n >= sizeof line || t->len + (size_t)n + CTL_TAIL_ROOM > t->cap)
            break;
        text_raw(t, line, (size_t)n);
        shown++;
    }
    if (shown < b.total)
        text_add(t, "... and %zu more keys, not shown\n", b.total - shown);
    busiest_free(&b);
}

/* ---- the traffic between hosts: links, and rows per key ----------------- */

/* Every link's frames and bytes, in all. */
static void links_total(const struct daemon *d, struct hosts_traffic *all)
{
    struct hosts_traffic tr;

    *all = (struct hosts_traffic){ 0 };
    for (int h = 0; h < d->nhosts; h++)
        if (hosts_traffic(d, h, &tr) == 0) {
            all->frames_out += tr.frames_out;
            all->bytes_out += tr.bytes_out;
            all->frames_in += tr.frames_in;
            all->bytes_in += tr.bytes_in;
        }
}

static void stats_links(struct daemon *d, struct text *t)
{
    struct hosts_traffic tr;
    int wname = 4;

    if (d->nhosts < 2)
        return;
    for (int h = 0; h < d->nhosts; h++)
        if (hosts_traffic(d, h, &tr) == 0)
            wname = width(wname, columns(hosts_name(d, h)));
    text_add(t, "links to the other hosts: the frames sent and received since the hosts "
             "joined\nand their bytes as they went on the wire, heads and heartbeats "
             "included:\n");
    text_add(t, "%-*s  %10s  %14s  %10s  %14s\n", wname, "HOST", "FRAMES OUT", "BYTES OUT",
             "FRAMES IN", "BYTES IN");
    for (int h = 0; h < d->nhosts; h++)
        if (hosts_traffic(d, h, &tr) == 0)
            text_add(t, "%-*s  %10" PRIu64 "  %14" PRIu64 "  %10" PRIu64 "  %14" PRIu64 "\n",
                     wname, hosts_name(d, h), tr.frames_out, tr.bytes_out, tr.frames_in,
                     tr.bytes_in);
}

/* A key whose rows were counted (struct round's counts). */
struct rowkey {
    uint64_t pushed, pulled, sent, received;
    size_t order;                      /* its place in key order: ties go by it */
    kvs_key_t key;                     /* name: malloc'd */
};

/* The keys with rows counted, when keep says to list them (else only the
 * totals); nomem when one could not be kept. */
struct rowkeys {
    int keep, nomem;
    struct rowkey *k;
    size_t n, cap, seen, nkeys;
    uint64_t sent, received;           /* over every key */
};

static int row_key(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct rowkeys *rk = ctx;
    const struct round *rd = *info->front;
    struct rowkey k;
    size_t order = rk->seen++;

    if (!rd || !(rd->rows_pushed || rd->rows_pulled || rd->rows_sent || rd->rows_received))
        return 0;
    rk->nkeys++;
    rk->sent += rd->rows_sent;
    rk->received += rd->rows_received;
    if (!rk->keep || rk->nomem)
        return 0;
    if (rk->n == rk->cap) {
        size_t cap = rk->cap ? 2 * rk->cap : 64;
        struct rowkey *nk = realloc(rk->k, cap * sizeof *nk);

        if (!nk) {
            rk->nomem = 1;
            return 0;
        }
        rk->k = nk;
        rk->cap = cap;
    }
    k = (struct rowkey){ rd->rows_pushed, rd->rows_pulled, rd->rows_sent, rd->rows_received,
                         order, key };
    if (key.name && !(k.key.name = strdup(key.name))) {
        rk->nomem = 1;
        return 0;
    }
    rk->k[rk->n++] = k;
    return 0;
}

static uint64_t rowkey_rows(const struct rowkey *k)
{
    return k->pushed + k->pulled + k->sent + k->received;
}

static int most_rows_first(const void *x, const void *y)
{
    const struct rowkey *a = x, *b = y;
    uint64_t ra = rowkey_rows(a), rb = rowkey_rows(b);

    if (ra != rb)
        return ra > rb ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* Walks the keys for their rows: the totals, and with keep the keys, the
 * most rows first. 0, or -ENOMEM (the totals are still whole). */
static int rows_walk(struct daemon *d, int keep, struct rowkeys *rk, struct kvs__err *e)
{
    int rc;

    *rk = (struct rowkeys){ .keep = keep };
    if ((rc = kvs__engine_foreach(d->eng, row_key, rk, e)) == 0 && rk->nomem)
        rc = kvs__fail(e, -ENOMEM, "out of memory");
    if (rk->n)
        qsort(rk->k, rk->n, sizeof *rk->k, most_rows_first);
    return rc;
}

static void rows_free(struct rowkeys *rk)
{
    for (size_t i = 0; i < rk->n; i++)
        free((char *)rk->k[i].key.name);
    free(rk->k);
}

/* The per-key part of stats for row-sparse keys: each key's rows, as
 * many keys as fit. */
static void stats_rows(struct text *t, struct rowkeys *rk)
{
    char ks[KEY_TEXT_MAX + 1], line[KEY_TEXT_MAX + 128];
    int wkey = 3, n;
    size_t shown = 0;

    if (rk->nkeys == 0)
        return;
    for (size_t i = 0; i < rk->n; i++) {
        key_text(ks, sizeof ks, rk->k[i].key);
        wkey = width(wkey, columns(ks));
    }
    text_add(t, "rows per key, the most first: PUSHED, the rows of this host's workers' "
             "row-sparse\npushes (ids as pushed, repeats too); PULLED, the rows their "
             "compact pulls got;\nSENT and RECEIVED, the rows of the rows messages to and "
             "from other hosts (this\nhost's sums to the rows' owners, the changed rows "
             "back), counted per host sent to:\n");
    text_add(t, "%-*s  %12s  %12s  %12s  %12s\n", wkey, "KEY", "PUSHED", "PULLED", "SENT",
             "RECEIVED");
    for (size_t i = 0; i < rk->n; i++) {
        const struct rowkey *k = &rk->k[i];
        size_t kcols;

        key_text(ks, sizeof ks, k->key);
        kcols = columns(ks);
        n = snprintf(line, sizeof line, "%s%*s  %12" PRIu64 "  %12" PRIu64 "  %12" PRIu64
                     "  %12" PRIu64 "\n", ks, kcols < (size_t)wkey ? wkey - (int)kcols : 0, "",
                     k->pushed, k->pulled, k->sent, k->received);
        if (n < 0 || (size_t)n >= sizeof line || t->len + (size_t)n + CTL_TAIL_ROOM > t->cap)
            break;
        text_raw(t, line, (size_t)n);
        shown++;
    }
    if (shown < rk->nkeys)
        text_add(t, "... and %zu more keys with rows, not shown\n", rk->nkeys - shown);
}

/* stats; brief (stats-short): without the listings per key. */
static void ctl_stats(struct daemon *d, struct text *t, int brief, struct kvs__err *e)
{
    const struct stats *s = &d->st;
    struct kvs__err re = { 0, "" };
    struct rowkeys rk;
    int rrc = rows_walk(d, !brief, &rk, &re);

    text_add(t, "rounds: %" PRIu64 "\n", s->rounds);
    text_add(t, "pushes: %" PRIu64 "\n", s->pushes);
    text_add(t, "pulls: %" PRIu64 "\n", s->pulls);
    text_add(t, "bytes pushed: %" PRIu64 "\n", s->bytes_pushed);
    text_add(t, "bytes pulled: %" PRIu64 "\n", s->bytes_pulled);
    text_add(t, "rows pushed: %" PRIu64 "\n", s->rows_pushed);
    text_add(t, "rows pulled: %" PRIu64 "\n", s->rows_pulled);
    if (d->nhosts > 1) {
        text_add(t, "rows sent to other hosts: %" PRIu64 "\n", rk.sent);
        text_add(t, "rows received from other hosts: %" PRIu64 "\n", rk.received);
    }
    text_add(t, "collectives: %" PRIu64 "\n", s->collectives);
    text_add(t, "waits: %" PRIu64 "\n", s->waits);
    text_add(t, "requests failed: %" PRIu64 "\n", s->failed);
    text_add(t, "device buffers: %d open, %" PRIu64 " registered\n", d->devbufs_open,
             s->devbufs_opened);
    text_add(t, "device pushes: %" PRIu64 "\n", s->device_pushes);
    text_add(t, "device pulls: %" PRIu64 "\n", s->device_pulls);
    text_add(t, "values on GPUs: %zu\n", values_on_gpus(d));
    text_add(t, "remote pushes: %" PRIu64 " (workers whose memory kvsd reads: %d)\n",
             s->remote_pushes, remote_readers(d));
    text_add(t, "outs written in place: %" PRIu64 "\n", s->outs_written);
    text_add(t, "combined rounds: %" PRIu64 " (keys the workers combine: %zu)\n", cb_rounds(d),
             d->cb_n);
    stats_links(d, t);
    if (brief) {
        text_add(t, "keys: %zu, of them %zu with rows counted; each key's rounds, latencies "
                 "and rows left\nout (kvsctl stats without --short lists them)\n",
                 kvs__engine_nkeys(d->eng), rk.nkeys);
    } else {
        /* The keys with rows first: they are few, and the rounds of
         * every key can fill the text. */
        if (rrc != 0)
            text_add(t, "rows per key: not shown: %s\n", re.msg);
        else
            stats_rows(t, &rk);
        stats_keys(d, t, e);
    }
    rows_free(&rk);
}

/* ---- sample: counters for programs (proto.h) ----------------------------- */

#define SAMPLE_COUNT_MAX ((uint64_t)1 << 62)   /* what a worker's counter counts for at most */
#define SAMPLE_LINE_MAX  (KEY_TEXT_MAX + KVS__LAT_BUCKETS * 24 + 64)

/* Adds a line of n bytes when it fits with room left for the tail: 1;
 * 0 when the text is full. */
static int sample_line(struct text *t, const char *line, int n)
{
    if (n < 0 || n >= SAMPLE_LINE_MAX || t->len + (size_t)n + CTL_TAIL_ROOM > t->cap)
        return 0;
    text_raw(t, line, (size_t)n);
    return 1;
}

/* A worker's counter, which it alone writes: shown, never trusted. */
static uint64_t worker_count(const _Atomic uint64_t *p)
{
    uint64_t v = atomic_load_explicit(p, memory_order_relaxed);

    return v < SAMPLE_COUNT_MAX ? v : SAMPLE_COUNT_MAX;
}

static uint64_t tv_ns(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

static void sample_workers(struct daemon *d, struct text *t)
{
    int nslots = atomic_load(&d->nslots), left = 0;
    char line[SAMPLE_LINE_MAX];

    for (int i = 0; i < nslots && i < MAX_WORKERS; i++) {
        const struct worker *w = &d->workers[i];
        const struct kvs__seg_stats *st;
        int n;

        /* A live worker's segment stays mapped until this thread
         * releases it. */
        if (atomic_load(&w->state) != W_LIVE || !w->seg)
            continue;
        st = &((const struct kvs__seg_head *)w->seg)->stats;
        n = snprintf(line, sizeof line, "worker %d %ld %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                     w->rank, (long)w->pid, worker_count(&st->pushes),
                     worker_count(&st->bytes), worker_count(&st->wait_ns));
        left += !sample_line(t, line, n);
    }
    if (left)
        text_add(t, "more workers %d\n", left);
}

static int sample_keys(struct daemon *d, struct text *t, struct kvs__err *e)
{
    char line[SAMPLE_LINE_MAX];
    uint64_t lat[KVS__LAT_BUCKETS];
    struct busiest b;
    size_t shown = 0;
    int rc;

    if ((rc = busiest_keys(d, &b, e)) != 0) {
        busiest_free(&b);
        return rc;
    }
    for (size_t i = 0; i < b.n; i++) {
        const struct round *rd = b.h[i].rd;
        size_t o;

        o = (size_t)snprintf(line, sizeof line, "key ");
        key_text(line + o, KEY_TEXT_MAX + 1, b.h[i].key);
        o += strlen(line + o);
        o += (size_t)snprintf(line + o, sizeof line - o, " %s %" PRIu64,
                              rd && rd->cb ? "workers" : "kvsd", b.h[i].rounds);
        key_latency(d, rd, lat);
        for (int k = 0; k < KVS__LAT_BUCKETS && o < sizeof line; k++)
            if (lat[k])
                o += (size_t)snprintf(line + o, sizeof line - o, " %d:%" PRIu64, k, lat[k]);
        if (o + 1 >= sizeof line)
            break;
        line[o++] = '\n';
        if (!sample_line(t, line, (int)o))
            break;
        shown++;
    }
    if (shown < b.total)
        text_add(t, "more keys %zu\n", b.total - shown);
    busiest_free(&b);
    return 0;
}

/* The links' lines: a few, one per other host. */
static void sample_links(struct daemon *d, struct text *t)
{
    struct hosts_traffic tr;

    for (int h = 0; h < d->nhosts; h++)
        if (hosts_traffic(d, h, &tr) == 0)
            text_add(t, "link %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", h,
                     tr.frames_out, tr.bytes_out, tr.frames_in, tr.bytes_in);
}

static void sample_rows(struct text *t, const struct rowkeys *rk)
{
    char line[SAMPLE_LINE_MAX];
    size_t shown = 0;

    for (size_t i = 0; i < rk->n; i++) {
        const struct rowkey *k = &rk->k[i];
        size_t o = (size_t)snprintf(line, sizeof line, "rows ");

        key_text(line + o, KEY_TEXT_MAX + 1, k->key);
        o += strlen(line + o);
        o += (size_t)snprintf(line + o, sizeof line - o, " %" PRIu64 " %" PRIu64 " %" PRIu64
                              " %" PRIu64 "\n", k->pushed, k->pulled, k->sent, k->received);
        if (o >= sizeof line || !sample_line(t, line, (int)o))
            break;
        shown++;
    }
    if (shown < rk->nkeys)
        text_add(t, "more rows %zu\n", rk->nkeys - shown);
}

static int ctl_sample(struct daemon *d, struct text *t, struct kvs__err *e)
{
    const struct stats *s = &d->st;
    struct hosts_traffic link;
    struct rowkeys rk;
    int rc;

    if ((rc = rows_walk(d, 1, &rk, e)) != 0) {
        rows_free(&rk);
        return rc;
    }
    links_total(d, &link);
    const struct { const char *name; uint64_t v; } counters[] = {
        { "rounds", s->rounds }, { "pushes", s->pushes }, { "pulls", s->pulls },
        { "bytes_pushed", s->bytes_pushed }, { "bytes_pulled", s->bytes_pulled },
        { "rows_pushed", s->rows_pushed }, { "rows_pulled", s->rows_pulled },
        { "collectives", s->collectives }, { "waits", s->waits },
        { "requests_failed", s->failed }, { "devbufs_open", (uint64_t)d->devbufs_open },
        { "devbufs_registered", s->devbufs_opened }, { "device_pushes", s->device_pushes },
        { "device_pulls", s->device_pulls }, { "values_on_gpus", values_on_gpus(d) },
        { "remote_pushes", s->remote_pushes }, { "remote_readers", (uint64_t)remote_readers(d) },
        { "outs_written", s->outs_written },
        { "combined_rounds", cb_rounds(d) }, { "combined_keys", d->cb_n },
        { "keys", kvs__engine_nkeys(d->eng) },
        { "rows_sent", rk.sent }, { "rows_received", rk.received },
        { "link_frames_out", link.frames_out }, { "link_bytes_out", link.bytes_out },
        { "link_frames_in", link.frames_in }, { "link_bytes_in", link.bytes_in },
    };
    struct rusage ru;
    int nworkers, sync, live, dead;

    worker_counts(d, &nworkers, &sync, &live, &dead);
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        memset(&ru, 0, sizeof ru);
    text_add(t, "kvs-sample 2\n");
    text_add(t, "clock %" PRId64 "\n", kvs__now_ns());
    text_add(t, "cpu %" PRIu64 " %" PRIu64 "\n", tv_ns(ru.ru_utime), tv_ns(ru.ru_stime));
    text_add(t, "mode %s\n", sync < 0 ? "unknown" : sync ? "sync" : "async");
    text_add(t, "workers %d %d %d %d\n", nworkers > 0 ? nworkers : 0, live, d->left, dead);
    text_add(t, "failed %d\n", d->failed != 0);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        text_add(t, "counter %s %" PRIu64 "\n", counters[i].name, counters[i].v);
    sample_links(d, t);
    sample_workers(d, t);
    sample_rows(t, &rk);
    rows_free(&rk);
    if ((rc = sample_keys(d, t, e)) != 0)
        return rc;
    text_add(t, "end\n");
    return 0;
}

/* The keys listing takes two walks: one for the columns' widths, one for
 * the lines, as many as fit. */
struct listing {
    const struct daemon *d;
    struct text *t;
    int pass;
    int wkey, wdtype, wshape, wversion;
    size_t shown;
};

#define SHAPE_TEXT_MAX (KVS_MAX_NDIM * 21 + 4)

static int list_key(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct listing *l = ctx;
    char ks[KEY_TEXT_MAX + 1], shape[SHAPE_TEXT_MAX], version[24];
    char line[KEY_TEXT_MAX + SHAPE_TEXT_MAX + 128];
    const struct round *rd = *info->front;
    uint64_t done;
    size_t kcols;
    int n;

    key_text(ks, sizeof ks, key);
    kcols = columns(ks);
    shape_text(shape, sizeof shape, info->ndim, info->shape);
    /* A key the workers combine: kvsd's entry keeps its init's version,
     * each round since is in the combine area. */
    done = !rd ? 0 : rd->cb ? cb_key_rounds(l->d, rd) : rd->done;
    snprintf(version, sizeof version, "%" PRIu64, info->version + (rd && rd->cb ? done : 0));
    if (l->pass == 0) {
        l->wkey = width(l->wkey, kcols);
        l->wdtype = width(l->wdtype, strlen(kvs_dtype_name(info->dtype)));
        l->wshape = width(l->wshape, strlen(shape));
        l->wversion = width(l->wversion, strlen(version));
        return 0;
    }
    /* The key is padded by columns, the other fields are ASCII. */
    n = snprintf(line, sizeof line, "%s%*s  %-*s  %-*s  %-*s  %" PRIu64 "\n", ks,
                 kcols < (size_t)l->wkey ? l->wkey - (int)kcols : 0, "", l->wdtype,
                 kvs_dtype_name(info->dtype), l->wshape, shape, l->wversion, version, done);
    if (n < 0 || (size_t)n >= sizeof line || l->t->len + (size_t)n + CTL_TAIL_ROOM > l->t->cap)
        return 1;                      /* full: the rest is counted, not shown */
    text_raw(l->t, line, (size_t)n);
    l->shown++;
    return 0;
}

static int ctl_keys(struct daemon *d, struct text *t, struct kvs__err *e)
{
    struct listing l = { .d = d, .t = t, .wkey = 3, .wdtype = 5, .wshape = 5, .wversion = 7 };
    size_t total = kvs__engine_nkeys(d->eng);
    int rc;

    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    text_add(t, "%-*s  %-*s  %-*s  %-*s  %s\n", l.wkey, "KEY", l.wdtype, "DTYPE", l.wshape,
             "SHAPE", l.wversion, "VERSION", "ROUNDS");
    l.pass = 1;
    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    if (l.shown < total)
        text_add(t, "... and %zu more keys, not shown\n", total - l.shown);
    return 0;
}

/* kvsrun's word that rank `rank` of this host ended, with exit code
 * `code`. A worker that connected is its socket's business. One that
 * never did would be waited for until the job's timeout, here and on the
 * other hosts: it counts at once as left when it succeeded (as a worker
 * that joined and closed at once), and as dead, failing the job, when it
 * did not. The slot goes from FREE under d->lock, as admit() takes it, so
 * a hello of that rank is refused after this. */
static int ctl_gone(struct daemon *d, int rank, int code, struct text *t, struct kvs__err *e)
{
    int wi = rank - d->rank0, st;

    if (d->nworkers <= 0 || wi < 0 || wi >= d->nworkers)
        return kvs__fail(e, KVS_EBADARG, "rank %d is not one of this host's ranks", rank);
    pthread_mutex_lock(&d->lock);
    st = atomic_load(&d->workers[wi].state);
    if (st == W_FREE)
        atomic_store(&d->workers[wi].state, code ? W_DEAD : W_LEFT);
    pthread_mutex_unlock(&d->lock);
    if (st != W_FREE) {
        text_add(t, "rank %d connected: its socket tells\n", rank);
        return 0;
    }
    atomic_fetch_add(&d->connected, 1);
    text_add(t, "rank %d never connected: counted as %s\n", rank, code ? "dead" : "left");
    if (code) {
        job_fail(d, KVS_EPEERDEAD, "rank %d ended (exit code %d) before it connected", rank,
                 code);
        return 0;
    }
    d->left++;
    say(d, "rank %d ended before it connected: counted as left", rank);
    bridge_worker_left(d, wi);
    return 0;
}

/* Sends one reply and waits at most until deadline_ns; the connection is
 * the caller's to close. Errors only cost kvsctl its answer. */
static void ctl_send(int fd, const struct kvs__ctl_reply *r, int64_t deadline_ns)
{
    unsigned char *msg = malloc(KVS__CTL_REPLY_HEAD + (size_t)r->len);
    size_t len;

    if (!msg)
        return;
    if ((len = kvs__ctl_reply_encode(r, msg)) != 0)
        kvs__sock_send(fd, msg, len, NULL, 0, deadline_ns, NULL);
    free(msg);
}

/* Answers the control requests the socket thread queued (serve thread).
 * Returns 1 when one of them was stop. */
int control_serve(struct daemon *d)
{
    struct ctl_conn q[CTL_QUEUE_MAX];
    int n, stop = 0;

    pthread_mutex_lock(&d->ctl_lock);
    n = d->nctl;
    memcpy(q, d->ctlq, sizeof q[0] * (size_t)n);
    d->nctl = 0;
    pthread_mutex_unlock(&d->ctl_lock);
    for (int i = 0; i < n; i++) {
        struct kvs__ctl_reply *r = &d->reply;
        struct text t = { r->text, 0, KVS__CTL_TEXT_MAX, 0 };
        struct kvs__err e = { 0, "" };
        int rc = 0;

        switch (q[i].command) {
        case KVS__CTL_STATUS:
            ctl_status(d, &t);
            break;
        case KVS__CTL_KEYS:
            rc = ctl_keys(d, &t, &e);
            break;
        case KVS__CTL_STATS:
        case KVS__CTL_STATS_SHORT:
            ctl_stats(d, &t, q[i].command == KVS__CTL_STATS_SHORT, &e);
            break;
        case KVS__CTL_SAMPLE:
            rc = ctl_sample(d, &t, &e);
            break;
        case KVS__CTL_CHECKPOINT:
            if ((rc = commits_force(d, &e)) == 0)
                text_add(&t, "commit %llu (step %lld) is on disk in %s\n",
                         (unsigned long long)d->commit_seq, (long long)d->resume_step,
                         d->o.checkpoint);
            break;
        case KVS__CTL_STOP:
            text_add(&t, "stopping\n");
            stop = 1;
            say(d, "told to stop by kvsctl (pid %d)", (int)q[i].pid);
            break;
        case KVS__CTL_GONE:
            rc = ctl_gone(d, q[i].rank, q[i].code, &t, &e);
            break;
        default:                       /* the decoder let no other through */
            rc = kvs__fail(&e, KVS_EPROTO, "unknown command");
        }
        if (rc != 0) {
            t.len = 0;
            t.full = 0;
            text_add(&t, "%s\n", e.msg);
        }
        r->version = KVS__PROTO_VERSION;
        r->status = rc;
        r->len = (uint32_t)t.len;
        ctl_send(q[i].fd, r, kvs__now_ns() + CTL_SEND_NS);
        close(q[i].fd);
    }
    return stop;
}

static void ctl_refuse(int fd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An answer from the socket thread: a request it will not queue. */
static void ctl_refuse(int fd, int status, const char *fmt, ...)
{
    struct kvs__ctl_reply *r = malloc(sizeof *r);
    char msg[KVS__ERR_MSG_MAX];
    va_list ap;

    if (!r)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->version = KVS__PROTO_VERSION;
    r->status = status;
    r->len = (uint32_t)kvs__ctl_text_escape(r->text, KVS__CTL_TEXT_MAX + 1, msg, strlen(msg),
                                            0);
    ctl_send(fd, r, kvs__now_ns() + HANDSHAKE_NS);
    free(r);
}

/* A connection whose first message is a control request (socket thread):
 * checked, then queued for the serve thread, which answers and closes it.
 * Takes fd. */
void control_accept(struct daemon *d, int fd, const void *msg, size_t len, pid_t pid)
{
    struct kvs__err e = { 0, "" };
    struct kvs__ctl_request q;
    int queued = 0;

    if (kvs__ctl_request_decode(msg, len, &q, &e) != 0) {
        ctl_refuse(fd, KVS_EPROTO, "%s", e.msg);
    } else if (strcmp(q.job, d->o.job) != 0) {
        ctl_refuse(fd, KVS_EBADARG, "this kvsd serves job '%s', not '%s'", d->o.job, q.job);
    } else {
        pthread_mutex_lock(&d->ctl_lock);
        if (d->nctl < CTL_QUEUE_MAX) {
            d->ctlq[d->nctl++] = (struct ctl_conn){ .fd = fd, .command = q.command, .pid = pid,
                                                    .rank = q.rank, .code = q.code };
            queued = 1;
        }
        pthread_mutex_unlock(&d->ctl_lock);
        if (queued) {
            kvs__bell_ring(d->bell);
            return;
        }
        ctl_refuse(fd, -EBUSY, "kvsd has %d control requests waiting; try again",
                   CTL_QUEUE_MAX);
    }
    close(fd);
}
