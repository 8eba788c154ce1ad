/*
 * stats.c - kvsctl stats and kvsctl sample: the job's counters, the links
 * between hosts, each key's rows and the busiest keys' rounds and
 * latencies, as text for people (stats) and as lines for programs
 * (sample, whose form proto/ctl.h gives).
 *
 * stats tells the links' traffic too (hosts.c counts it) and each key's
 * rows (the round's counts); stats-short leaves out what is per key, as
 * a job of many keys would fill the text with it.
 *
 * Serve thread only, which alone owns the job's state. It only reads: it
 * must never change the store, a round, a worker or a counter, and never
 * waits. A worker's counters in its segment are shown, never trusted.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "stats.h"
#include "combined.h"
#include "hosts.h"

#define BUSY_MAX       1000                /* keys a listing of latencies takes at most */

void stats_workers(struct daemon *d, int *nworkers, int *sync, int *live, int *dead)
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
        wkey = text_width(wkey, text_columns(ks));
    }
    text_add(t, "rounds per key, busiest first; a round's latency runs from its first "
             "push to its end,\nand P50, P99 and MAX are upper bounds: those of its "
             "histogram's buckets (2^i ns):\n");
    text_add(t, "%-*s  %10s  %7s  %7s  %7s\n", wkey, "KEY", "ROUNDS", "P50", "P99", "MAX");
    for (size_t i = 0; i < b.n; i++) {
        size_t kcols;

        key_text(ks, sizeof ks, b.h[i].key);
        kcols = text_columns(ks);
        key_latency(d, b.h[i].rd, lat);
        kvs__lat_format(q[0], sizeof q[0], kvs__lat_quantile(lat, 0.5));
        kvs__lat_format(q[1], sizeof q[1], kvs__lat_quantile(lat, 0.99));
        kvs__lat_format(q[2], sizeof q[2], kvs__lat_quantile(lat, 1));
        n = snprintf(line, sizeof line, "%s%*s  %10" PRIu64 "  %7s  %7s  %7s\n", ks,
                     kcols < (size_t)wkey ? wkey - (int)kcols : 0, "", b.h[i].rounds, q[0],
                     q[1], q[2]);
        if (!text_line(t, line, n, sizeof line))
            break;
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
            wname = text_width(wname, text_columns(hosts_name(d, h)));
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
        wkey = text_width(wkey, text_columns(ks));
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
        kcols = text_columns(ks);
        n = snprintf(line, sizeof line, "%s%*s  %12" PRIu64 "  %12" PRIu64 "  %12" PRIu64
                     "  %12" PRIu64 "\n", ks, kcols < (size_t)wkey ? wkey - (int)kcols : 0, "",
                     k->pushed, k->pulled, k->sent, k->received);
        if (!text_line(t, line, n, sizeof line))
            break;
        shown++;
    }
    if (shown < rk->nkeys)
        text_add(t, "... and %zu more keys with rows, not shown\n", rk->nkeys - shown);
}

/* stats; brief (stats-short): without the listings per key. */
void stats_answer(struct daemon *d, struct text *t, int brief, struct kvs__err *e)
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
        left += !text_line(t, line, n, sizeof line);
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
        if (!text_line(t, line, (int)o, sizeof line))
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
        if (o >= sizeof line || !text_line(t, line, (int)o, sizeof line))
            break;
        shown++;
    }
    if (shown < rk->nkeys)
        text_add(t, "more rows %zu\n", rk->nkeys - shown);
}

int stats_sample(struct daemon *d, struct text *t, struct kvs__err *e)
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

    stats_workers(d, &nworkers, &sync, &live, &dead);
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
