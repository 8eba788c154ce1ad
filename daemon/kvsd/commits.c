/*
 * commits.c - the job's commits. When a commit's workers have all come
 * and their pushes are applied (collectives.c decides), the engine's
 * snapshot (store/snapshot.h) is written to <dir>/<job>.snap in kvsd's
 * runtime dir, which outlives kvsd: the kvsd that kvsrun starts after a
 * death (--restore) loads it, or, when it is gone, the newest valid one
 * of the checkpoint directory. With --checkpoint DIR one thread of its
 * own copies each commit's snapshot there durably, the two newest kept,
 * so that the serve thread never waits on a disk unless told to
 * (KVS_CHECKPOINT_SYNC=1, kvsctl checkpoint).
 *
 * The thread copies a hard link of the snapshot made at the commit
 * (<dir>/<job>.snap.SEQ), never <job>.snap itself, which the next commit
 * may replace while the copy runs; a link not copied yet when a newer
 * commit comes is dropped (the newer one is what a restart needs).
 *
 * A commit does not write the snapshot in the serve thread: it captures
 * it (store/snapshot.h: every key's record and where its value lies, the
 * optimizer's spec and states copied), marks every key's value as held by
 * that snapshot, answers the workers, and a writer thread of its own
 * writes the file while rounds go on. Before the serve thread changes a
 * held value (daemon_keep_value, where a round writes one), the
 * part of it not written yet is copied aside, and the writer takes it
 * from there: the file is the one a write at the commit would have made.
 * The writer reads values the serve thread never changes meanwhile, a
 * piece (1 MiB) at a time under struct snapw's mutex. The commit is
 * claimed (d->commit_seq, d->resume_step, the copy into the checkpoint
 * directory) once its file is whole: a kvsd that dies before that, or
 * leaves at once at a worker's death (job.c's rollback, which does not
 * wait for the write: a recovery costs no write of the store), is
 * replaced by one that restores the commit before, and tells the
 * workers so (resume_step). With KVS_CHECKPOINT_SYNC the commit writes
 * and copies before it answers, as it always did.
 *
 * The serve thread makes commits and restores; the checkpoint thread
 * touches only struct ckpt, under its mutex, and the files; the writer
 * only struct snapw, under its mutex, the capture and the values it
 * holds. Neither must ever touch the engine, the rounds or the workers. A
 * failed copy is said and counted, never fails the job: the snapshot in
 * memory holds.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commits.h"
#include "hosts.h"
#include "rounds.h"
#include "xcommits.h"

#include "store/ckpt.h"
#include "store/snapshot.h"

/* How long a commit with KVS_CHECKPOINT_SYNC, or kvsctl checkpoint, waits
 * for the copy on disk, and the end of kvsd for the last one. */
#define CKPT_WAIT_NS (600 * 1000000000ll)
/* How long a commit, kvsctl checkpoint or kvsd's end waits for the
 * snapshot before it to be written (a store of many GiB, a slow machine). */
#define SNAP_WAIT_NS (600 * 1000000000ll)

/* A key held by the snapshot being written: the bytes from off on are
 * not in the file yet; aside, once the serve thread had to change the
 * value, holds them as they were (at the same offsets). aside is spare,
 * a buffer kept from one commit to the next for the key at this place:
 * memory touched before copies at memcpy's speed, where new memory costs
 * a page fault per page, several times the copy. Spares the last commit
 * did not need are freed: a job whose rounds leave the writer time keeps
 * none. */
struct held {
    const uint8_t *live;
    uint64_t bytes;
    uint64_t off;
    uint8_t *aside;
    uint8_t *spare;
    uint64_t spare_len;
    int used;                          /* spare was needed for this commit */
};

struct snapw {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* CLOCK_MONOTONIC */
    atomic_int want;                   /* the serve thread waits for mu: the writer
                                        * lets it in before its next piece */
    struct kvs__snap_capture *cap;     /* the commit being written, or NULL */
    struct kvs__snap_meta m;           /* its meta */
    struct held *keys;                 /* [nkeys], in the capture's order */
    size_t nkeys, ncaptured;
    int64_t t_made;                    /* when captured (CLOCK_MONOTONIC) */
    atomic_int written;                /* the write of cap ended: for commits_poll */
    int rc;                            /* and how */
    char msg[KVS__MSG_MAX];
    uint64_t bytes;
    int64_t took_ns;                   /* from the capture to the file whole */
    const char *hold;                  /* tests: KVS_TEST_SNAPSHOT_HOLD, a path */
    int held;                          /* it existed at this file's capture */
    unsigned pieces;                   /* written of this file (writer thread only) */
    int stop;
    struct daemon *d;                  /* d->snap_path, d->ck, say() only */
};

struct ckpt {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* CLOCK_MONOTONIC */
    uint64_t want;                     /* the newest commit to copy, its link made; 0: none */
    uint64_t tried;                    /* the newest commit whose copy ended, */
    int tried_rc;                      /* and how */
    uint64_t disk;                     /* the newest commit on disk */
    uint64_t failures;
    char msg[KVS__MSG_MAX];            /* the newest failure's */
    int stop;
    const struct daemon *d;            /* for say(), d->o and d->dir only */
};

static void link_path(const struct daemon *d, uint64_t seq, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%" PRIu64, d->snap_path, seq);
}

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int64_t real_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void *ckpt_thread(void *arg)
{
    struct ckpt *ck = arg;
    const struct daemon *d = ck->d;

    pthread_mutex_lock(&ck->mu);
    for (;;) {
        struct kvs__err e = { 0, "" };
        char src[sizeof d->snap_path + 24];
        uint64_t seq;
        int rc;

        while (!ck->stop && ck->want <= ck->tried)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (ck->want <= ck->tried)     /* stopping, nothing left to copy */
            break;
        seq = ck->want;
        pthread_mutex_unlock(&ck->mu);
        link_path(d, seq, src, sizeof src);
        rc = kvs__ckpt_save(d->o.checkpoint, src, seq, &e);
        unlink(src);
        pthread_mutex_lock(&ck->mu);
        /* The first failure of a run is said even under kvsrun; the next
         * ones as every message is, and the failures count in status. */
        if (rc != 0 && ck->tried_rc == 0)
            warn(d, "checkpoint of commit %" PRIu64 " into %s failed: %s (the commit holds in "
                 "memory; the job goes on; kvsctl status counts the failures)", seq,
                 d->o.checkpoint, e.msg);
        else if (rc != 0)
            say(d, "checkpoint of commit %" PRIu64 " into %s failed: %s", seq,
                d->o.checkpoint, e.msg);
        else if (ck->tried_rc != 0)
            warn(d, "checkpoint of commit %" PRIu64 " into %s made: copies succeed again", seq,
                 d->o.checkpoint);
        ck->tried = seq;
        ck->tried_rc = rc;
        if (rc == 0) {
            ck->disk = seq;
        } else {
            ck->failures++;
            snprintf(ck->msg, sizeof ck->msg, "commit %" PRIu64 ": %s", seq, e.msg);
        }
        pthread_cond_broadcast(&ck->cv);
    }
    pthread_mutex_unlock(&ck->mu);
    return NULL;
}

/* Hands commit seq's snapshot to the thread: a link of it made for the
 * copy, the link of a commit not copied yet dropped. */
static void ckpt_post(struct daemon *d, uint64_t seq)
{
    struct ckpt *ck = d->ck;
    char path[sizeof d->snap_path + 24];

    link_path(d, seq, path, sizeof path);
    unlink(path);
    if (link(d->snap_path, path) != 0) {
        pthread_mutex_lock(&ck->mu);
        ck->failures++;
        snprintf(ck->msg, sizeof ck->msg, "commit %" PRIu64 ": no link for its copy: %s", seq,
                 strerror(errno));
        pthread_mutex_unlock(&ck->mu);
        say(d, "checkpoint of commit %" PRIu64 " not made: %s: %s", seq, path, strerror(errno));
        return;
    }
    pthread_mutex_lock(&ck->mu);
    if (ck->want > ck->tried) {        /* not taken yet: the newer one replaces it */
        char old[sizeof d->snap_path + 24];

        link_path(d, ck->want, old, sizeof old);
        unlink(old);
    }
    ck->want = seq;
    pthread_cond_broadcast(&ck->cv);
    pthread_mutex_unlock(&ck->mu);
}

/* Waits until the thread has ended commit seq's copy (or a newer one's):
 * 0 when seq or newer is on disk, else the error. */
static int ckpt_wait(struct daemon *d, uint64_t seq, struct kvs__err *e)
{
    struct ckpt *ck = d->ck;
    int64_t end = mono_ns() + CKPT_WAIT_NS;
    struct timespec ts = { end / 1000000000ll, end % 1000000000ll };
    int rc = 0;

    pthread_mutex_lock(&ck->mu);
    while (ck->tried < seq && ck->want >= seq && rc == 0)
        rc = pthread_cond_timedwait(&ck->cv, &ck->mu, &ts);
    if (ck->disk >= seq)
        rc = 0;
    else if (rc == ETIMEDOUT)
        rc = kvs__fail(e, KVS_ETIMEDOUT, "the checkpoint of commit %" PRIu64 " into %s is "
                       "not done after %lld s", seq, d->o.checkpoint,
                       CKPT_WAIT_NS / 1000000000ll);
    else
        rc = kvs__fail(e, ck->tried_rc ? ck->tried_rc : -EIO, "the checkpoint of commit "
                       "%" PRIu64 " into %s failed: %s", seq, d->o.checkpoint,
                       ck->msg[0] ? ck->msg : "no link for its copy");
    pthread_mutex_unlock(&ck->mu);
    return rc;
}

void commits_disk(const struct daemon *d, uint64_t *seq, uint64_t *failures, char *msg,
                  size_t msg_len)
{
    struct ckpt *ck = d->ck;

    *seq = *failures = 0;
    if (msg_len)
        msg[0] = '\0';
    if (!ck)
        return;
    pthread_mutex_lock(&ck->mu);
    *seq = ck->disk;
    *failures = ck->failures;
    if (msg_len)
        snprintf(msg, msg_len, "%s", ck->msg);
    pthread_mutex_unlock(&ck->mu);
}

/* ---- the snapshot writer ------------------------------------------------ */

static struct timespec deadline(int64_t ns)
{
    int64_t end = mono_ns() + ns;

    return (struct timespec){ end / 1000000000ll, end % 1000000000ll };
}

/* The writer's source: a piece of a held value, from the live value while
 * the serve thread has not changed it, else from the copy it made. mu is
 * held from begin to end, so the serve thread never changes a value the
 * writer is reading; it is let in between pieces when it asks (want). */
static const void *held_begin(void *ctx, size_t i, const void *live, uint64_t off, size_t n)
{
    struct snapw *sw = ctx;
    const struct held *h;

    (void)n;
    pthread_mutex_lock(&sw->mu);
    while (atomic_load_explicit(&sw->want, memory_order_acquire))
        pthread_cond_wait(&sw->cv, &sw->mu);
    h = &sw->keys[i];
    return h->aside ? h->aside + off : (const uint8_t *)live + off;
}

/* Tests only (KVS_TEST_SNAPSHOT_HOLD=PATH): from its HOLD_FROM_PIECE-th
 * piece of a file on, the writer waits while PATH exists (up to
 * SNAP_WAIT_NS), so that a test knows that rounds, a worker's death or a
 * kill meet the write half done, whatever the machine's speed. The
 * serve thread goes on meanwhile: the lock is not held. Only a file
 * captured while PATH existed is held: the write of an earlier commit
 * still under way when the test makes PATH goes on, or the next commit
 * would wait for it (snap_wait) and never be captured. */
#define HOLD_FROM_PIECE 8

static void hold_while(const char *path)
{
    int64_t end = mono_ns() + SNAP_WAIT_NS;

    while (access(path, F_OK) == 0 && mono_ns() < end)
        usleep(10000);
}

static void held_end(void *ctx, size_t i, uint64_t off, size_t n)
{
    struct snapw *sw = ctx;
    struct held *h = &sw->keys[i];

    h->off = off + n;
    if (h->off >= h->bytes) {
        h->aside = NULL;
        pthread_cond_broadcast(&sw->cv);   /* a change that waits for this key */
    }
    pthread_mutex_unlock(&sw->mu);
    if (sw->held && ++sw->pieces >= HOLD_FROM_PIECE)
        hold_while(sw->hold);
}

static void *snap_thread(void *arg)
{
    struct snapw *sw = arg;
    struct daemon *d = sw->d;
    const struct kvs__snap_source src = { held_begin, held_end, sw };

    pthread_mutex_lock(&sw->mu);
    for (;;) {
        struct kvs__err e = { 0, "" };
        struct kvs__snap_capture *cap;
        uint64_t bytes = 0, seq;
        int rc;

        while (!sw->stop && (!sw->cap || atomic_load(&sw->written)))
            pthread_cond_wait(&sw->cv, &sw->mu);
        if (!sw->cap || atomic_load(&sw->written))
            break;                     /* stopping, nothing left to write */
        cap = sw->cap;
        seq = sw->m.seq;
        pthread_mutex_unlock(&sw->mu);
        sw->pieces = 0;
        rc = kvs__snapshot_write_capture(cap, &src, d->snap_path, 0, &bytes, &e);
        if (rc != 0)
            say(d, "the snapshot of commit %" PRIu64 " was not written: %s (a restart "
                "resumes from the commit before)", seq, e.msg);
        else if (d->ck)
            ckpt_post(d, seq);         /* before the next commit may replace the file */
        pthread_mutex_lock(&sw->mu);
        for (size_t i = 0; i < sw->ncaptured; i++)
            sw->keys[i].aside = NULL;
        sw->rc = rc;
        snprintf(sw->msg, sizeof sw->msg, "%s", e.msg);
        sw->bytes = bytes;
        sw->took_ns = mono_ns() - sw->t_made;
        atomic_store(&sw->written, 1);
        pthread_cond_broadcast(&sw->cv);
        kvs__bell_ring(d->bell);       /* the serve thread claims it at once */
    }
    pthread_mutex_unlock(&sw->mu);
    return NULL;
}

/* Serve thread: a written snapshot claimed as the last commit (or its
 * failure said), and the capture freed. */
static void snap_claim(struct daemon *d)
{
    struct snapw *sw = d->sw;

    pthread_mutex_lock(&sw->mu);
    if (sw->cap && atomic_load(&sw->written)) {
        if (sw->rc == 0) {
            d->commit_seq = sw->m.seq;
            d->commit_ns = sw->m.made_ns;
            d->commit_bytes = sw->bytes;
            d->commit_took_ns = sw->took_ns;
            d->resume_step = sw->m.step;
            d->restored_from[0] = '\0';
        }
        for (size_t i = 0; i < sw->nkeys; i++) {
            struct held *h = &sw->keys[i];

            if (!h->used || i >= sw->ncaptured) {
                free(h->spare);
                h->spare = NULL;
                h->spare_len = 0;
            }
            h->used = 0;
        }
        kvs__capture_free(sw->cap);
        sw->cap = NULL;
        sw->ncaptured = 0;
        atomic_store(&sw->written, 0);
        d->snap_writing = 0;
    }
    pthread_mutex_unlock(&sw->mu);
}

void commits_poll(struct daemon *d)
{
    if (d->snap_writing && atomic_load_explicit(&d->sw->written, memory_order_acquire))
        snap_claim(d);
}

/* Waits until the snapshot being written (if any) is whole or failed,
 * and with claim claims it: 0, or KVS_ETIMEDOUT. Serve thread. */
static int snap_wait(struct daemon *d, int claim, struct kvs__err *e)
{
    struct snapw *sw = d->sw;
    struct timespec ts = deadline(SNAP_WAIT_NS);
    int rc = 0;

    if (!sw)
        return 0;
    pthread_mutex_lock(&sw->mu);
    while (sw->cap && !atomic_load(&sw->written) && rc == 0)
        rc = pthread_cond_timedwait(&sw->cv, &sw->mu, &ts);
    if (sw->cap && !atomic_load(&sw->written))
        rc = kvs__fail(e, KVS_ETIMEDOUT, "the snapshot of commit %" PRIu64 " is not "
                       "written after %lld s", sw->m.seq, SNAP_WAIT_NS / 1000000000ll);
    else
        rc = 0;
    pthread_mutex_unlock(&sw->mu);
    if (rc == 0 && claim)
        snap_claim(d);
    return rc;
}

/* d->snap_finish: a worker died while a commit's snapshot was being
 * written. The workers were answered: the commit is theirs, so the roll
 * back goes to it, once the file is whole (its write is already under
 * way: at most the rest of one store's bytes). A write that fails or
 * takes longer than SNAP_WAIT_NS leaves the commit before. */
static void finish_before_rollback(struct daemon *d)
{
    struct kvs__err e = { 0, "" };

    if (d->snap_writing && snap_wait(d, 1, &e) != 0)
        say(d, "%s", e.msg);
}

/* d->snap_keep (daemon_keep_value): a held value about to change. */
static void keep_value(struct daemon *d, struct round *rd)
{
    struct snapw *sw = d->sw;
    struct held *h;

    atomic_fetch_add_explicit(&sw->want, 1, memory_order_acq_rel);
    pthread_mutex_lock(&sw->mu);
    if (sw->cap && !atomic_load(&sw->written) && sw->m.seq == rd->snap_seq
        && rd->snap_i < sw->ncaptured) {
        h = &sw->keys[rd->snap_i];
        if (h->off < h->bytes && !h->aside) {
            if (h->spare_len != h->bytes) {
                free(h->spare);
                h->spare_len = (h->spare = malloc(h->bytes)) ? h->bytes : 0;
            }
            if ((h->aside = h->spare) != NULL) {
                h->used = 1;
                memcpy(h->aside + h->off, h->live + h->off, h->bytes - h->off);
            } else {
                /* No memory for a copy: the writer goes on past this key
                 * (want dropped meanwhile), and the change waits for it. */
                struct timespec ts = deadline(SNAP_WAIT_NS);

                atomic_fetch_sub_explicit(&sw->want, 1, memory_order_acq_rel);
                pthread_cond_broadcast(&sw->cv);
                while (h->off < h->bytes && !atomic_load(&sw->written)
                       && pthread_cond_timedwait(&sw->cv, &sw->mu, &ts) == 0)
                    ;
                atomic_fetch_add_explicit(&sw->want, 1, memory_order_acq_rel);
            }
        }
    }
    atomic_fetch_sub_explicit(&sw->want, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    rd->snap_seq = 0;
}

/* ---- making a commit ---------------------------------------------------- */

/* A key's rounds applied, for the snapshot (0: the key has no rounds yet). */
static uint64_t key_rounds(void *ctx, const struct kvs__entry_info *info)
{
    const struct round *r = *info->front;

    (void)ctx;
    return r ? r->done : 0;
}

/* A key captured for the writer: its value held until written. */
static uint64_t key_held(void *ctx, const struct kvs__entry_info *info)
{
    struct daemon *d = ctx;
    struct snapw *sw = d->sw;
    struct round *r = *info->front;

    if (sw->ncaptured < sw->nkeys) {
        struct held *h = &sw->keys[sw->ncaptured];

        h->live = info->value;
        h->bytes = info->bytes;
        h->off = 0;
        h->aside = NULL;
        h->used = 0;
        r->snap_seq = sw->m.seq;
        r->snap_i = sw->ncaptured++;
    }
    return r->done;
}

struct walk {
    struct daemon *d;
    struct kvs__err *e;
};

/* Keys kept on a GPU are not in a snapshot yet. A key with no rounds yet
 * gets them, so that a push to it after the commit sees its value held. */
static int on_host(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct walk *w = ctx;
    char ks[KVS_MAX_KEY_LEN + 8];

    if (info->device != KVS_HOST) {
        kvs__key_str(ks, sizeof ks, key);
        return kvs__fail(w->e, KVS_ENOTSUP, "kvs_commit: key %s is kept on a GPU: commits "
                         "of such keys are not supported yet", ks);
    }
    if (w->d->sw && !*info->front && !rounds_of(w->d, info, key))
        return kvs__fail(w->e, -ENOMEM, "kvsd: out of memory for a key's rounds");
    return 0;
}

/* The snapshot captured and handed to the writer: 0, or the error (the
 * commit then changes nothing). */
static int snap_start(struct daemon *d, const struct kvs__snap_meta *m, struct kvs__err *e)
{
    struct snapw *sw = d->sw;
    size_t n = kvs__engine_nkeys(d->eng);
    struct kvs__snap_capture *cap;
    int rc;

    if (n > sw->nkeys) {
        struct held *k = realloc(sw->keys, sizeof *k * n);

        if (!k)
            return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a commit of %zu keys", n);
        memset(k + sw->nkeys, 0, sizeof *k * (n - sw->nkeys));
        sw->keys = k;
        sw->nkeys = n;
    }
    /* The writer is idle (snap_wait): its fields are the serve thread's
     * until cap is handed over under mu. */
    sw->m = *m;
    sw->ncaptured = 0;
    sw->t_made = mono_ns();
    sw->held = sw->hold && access(sw->hold, F_OK) == 0;
    if ((rc = kvs__snapshot_capture(d->eng, m, key_held, d, &cap, e)) != 0) {
        for (size_t i = 0; i < sw->ncaptured; i++)
            sw->keys[i].off = sw->keys[i].bytes;
        sw->ncaptured = 0;
        return rc;
    }
    pthread_mutex_lock(&sw->mu);
    sw->cap = cap;
    atomic_store(&sw->written, 0);
    pthread_cond_broadcast(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    d->snap_writing = m->seq;
    return 0;
}

int commits_make(struct daemon *d, int64_t step, struct kvs__err *e)
{
    struct kvs__snap_meta m = { .step = step, .nworkers = d->total, .sync = d->sync,
                                .seq = d->commit_seq + 1, .made_ns = real_ns() };
    struct walk w = { d, e };
    int64_t t0 = mono_ns();
    uint64_t bytes = 0;
    int rc;

    /* A job that does not recover has no use for a snapshot: nothing
     * would ever restore it. Its commit is the collective and the step, so
     * that a program that commits runs the same under a plain kvsrun. */
    if (!d->o.recover) {
        d->commit_seq = m.seq;
        d->commit_ns = m.made_ns;
        d->commit_bytes = 0;
        d->commit_took_ns = 0;
        d->resume_step = step;
        return 0;
    }
    /* The commit before is written first: one capture at a time, and the
     * new one's seq follows the last one claimed. Across hosts it stays
     * beside the new one (xcommits.c). */
    if ((rc = snap_wait(d, 1, e)) != 0)
        return rc;
    if (d->o.nhosts > 1)
        xcommits_keep_last(d);
    m.seq = d->commit_seq + 1;
    if ((rc = kvs__engine_foreach(d->eng, on_host, &w, e)) != 0)
        return rc;
    snprintf(m.job, sizeof m.job, "%s", d->o.job);
    if (d->sw && !d->o.checkpoint_sync)
        return snap_start(d, &m, e);
    if ((rc = kvs__snapshot_write(d->eng, &m, key_rounds, d, d->snap_path, 0, &bytes, e)) != 0)
        return rc;
    d->commit_seq = m.seq;
    d->commit_ns = m.made_ns;
    d->commit_bytes = bytes;
    d->commit_took_ns = mono_ns() - t0;
    d->resume_step = step;
    d->restored_from[0] = '\0';
    if (!d->ck)
        return 0;
    ckpt_post(d, m.seq);
    if (d->o.checkpoint_sync && (rc = ckpt_wait(d, m.seq, e)) != 0) {
        /* The commit holds in memory: said, counted, not failed. */
        say(d, "%s", e->msg);
        e->code = 0;
        e->msg[0] = '\0';
    }
    return 0;
}

int commits_force(struct daemon *d, struct kvs__err *e)
{
    int rc;

    if (!d->ck)
        return kvs__fail(e, KVS_EBADARG, "kvsd has no checkpoint directory (--checkpoint DIR)");
    if ((rc = snap_wait(d, 1, e)) != 0)
        return rc;
    if (d->commit_seq == 0 || access(d->snap_path, R_OK) != 0)
        return kvs__fail(e, KVS_ENOKEY, "no commit to write: the job has made none%s",
                         d->restored_from[0] ? " since it was restored" : "");
    pthread_mutex_lock(&d->ck->mu);
    if (d->ck->disk >= d->commit_seq) {
        pthread_mutex_unlock(&d->ck->mu);
        return 0;                      /* on disk already */
    }
    /* A failed copy is tried again: the thread copies what is newer than
     * what it tried. */
    if (d->ck->tried >= d->commit_seq)
        d->ck->tried = d->commit_seq - 1;
    pthread_mutex_unlock(&d->ck->mu);
    ckpt_post(d, d->commit_seq);
    return ckpt_wait(d, d->commit_seq, e);
}

/* ---- a start from a snapshot -------------------------------------------- */

/* A restored key: its rounds made as a first push or pull makes them,
 * with the rounds the snapshot counted as applied. */
static int key_made(void *ctx, kvs_key_t key, const struct kvs__entry_info *info,
                    uint64_t rounds, struct kvs__err *e)
{
    struct daemon *d = ctx;
    struct round *r = rounds_of(d, info, key);

    if (!r)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a restored key's rounds");
    r->done = rounds;
    r->restored = 1;
    if (r->ops && r->ops->restored)
        r->ops->restored(r);
    /* The other hosts may name it now (a worker's init of it answers at
     * once, and says nothing to the links). */
    hosts_expect(d, info->bytes, info->ndim > 0 ? (uint64_t)info->shape[0] : 0);
    return 0;
}

/* Said even under --quiet (kvsrun runs kvsd so): the job goes back further
 * than its last commit, which its user must learn. */
static void passed_over(void *ctx, const char *path, const char *why)
{
    const struct daemon *d = ctx;

    warn(d, "restore: passing over %s: %s", path, why);
}

/* The snapshot to start from, or *s NULL: none. */
static int find_snapshot(struct daemon *d, struct kvs__snapshot **s, char *from, size_t len,
                         struct kvs__err *e)
{
    int rc = kvs__snapshot_open(d->snap_path, s, e);

    if (rc == 0) {
        snprintf(from, len, "%s", d->snap_path);
        return 0;
    }
    if (rc != -ENOENT)
        passed_over(d, d->snap_path, e->msg);
    *s = NULL;
    if (!d->o.checkpoint)
        return 0;
    e->code = 0;
    e->msg[0] = '\0';
    rc = kvs__ckpt_newest(d->o.checkpoint, s, from, len, passed_over, d, e);
    if (rc == -ENOENT) {
        *s = NULL;
        return 0;
    }
    return rc;
}

/* A snapshot of another job is refused: what differs, in e. */
static int same_job(const struct daemon *d, const struct kvs__snap_meta *m, const char *from,
                    struct kvs__err *e)
{
    if (strcmp(m->job, d->o.job) != 0)
        return kvs__fail(e, KVS_EBADARG, "restore: %s is a snapshot of job '%s', not '%s'",
                         from, m->job, d->o.job);
    if (d->o.nhosts > 1 && m->nworkers != d->total)
        return kvs__fail(e, KVS_EBADARG, "restore: %s is a snapshot of a job of %d workers, "
                         "not %d (the hosts' workers)", from, (int)m->nworkers, d->total);
    if (d->o.nhosts <= 1 && d->o.nworkers && m->nworkers != d->o.nworkers)
        return kvs__fail(e, KVS_EBADARG, "restore: %s is a snapshot of a job of %d workers, "
                         "not %d (--workers)", from, (int)m->nworkers, d->o.nworkers);
    if (m->nworkers < 1 || m->nworkers > MAX_WORKERS || (m->sync != 0 && m->sync != 1))
        return kvs__fail(e, KVS_EBADARG, "restore: %s is a snapshot of %d workers in mode "
                         "%d, which no kvsd job is", from, (int)m->nworkers, (int)m->sync);
    return 0;
}

int commits_apply(struct daemon *d, struct kvs__snapshot *s, const char *from,
                  struct kvs__err *e)
{
    const struct kvs__snap_meta *m = kvs__snapshot_meta(s);
    int rc;

    if ((rc = same_job(d, m, from, e)) != 0) {
        kvs__snapshot_free(s);
        return rc;
    }
    /* The job's size and mode are the snapshot's: workers of another are
     * refused at their hello (accept.c), and the rounds need the size.
     * Across hosts the size is the roster's, which same_job checked. */
    if (d->o.nhosts <= 1)
        d->nworkers = d->total = m->nworkers;
    d->sync = m->sync;
    if ((rc = kvs__snapshot_restore(d->eng, s, key_made, d, e)) != 0) {
        kvs__snapshot_free(s);
        say(d, "restore from %s failed", from);
        return rc;
    }
    d->resume_step = m->step;
    d->commit_seq = m->seq;
    d->commit_ns = m->made_ns;
    d->commit_bytes = kvs__snapshot_bytes(s);
    snprintf(d->restored_from, sizeof d->restored_from, "%s", from);
    say(d, "restored %zu keys from %s: step %lld, commit %" PRIu64 " of a %s job of %d "
        "workers", kvs__snapshot_nkeys(s), from, (long long)m->step, m->seq,
        m->sync ? "dist_sync" : "dist_async", (int)m->nworkers);
    kvs__snapshot_free(s);
    /* Across hosts the checkpoint thread runs already: a commit restored
     * from memory that the folder lacks is copied, as commits_start does
     * on one host. */
    if (d->ck && strcmp(from, d->snap_path) == 0 && !kvs__ckpt_has(d->o.checkpoint, d->commit_seq))
        ckpt_post(d, d->commit_seq);
    return 0;
}

static int restore(struct daemon *d, struct kvs__err *e)
{
    struct kvs__snapshot *s = NULL;
    char from[sizeof d->restored_from];
    int rc;

    if ((rc = find_snapshot(d, &s, from, sizeof from, e)) != 0)
        return rc;
    if (!s) {
        say(d, "restore: no snapshot of job '%s' (%s%s%s): starting with an empty store",
            d->o.job, d->snap_path, d->o.checkpoint ? ", " : "",
            d->o.checkpoint ? d->o.checkpoint : "");
        return 0;
    }
    return commits_apply(d, s, from, e);
}

/* Links of commits a kvsd that rolled back left uncopied, and a snapshot
 * half written by a kvsd killed meanwhile (<job>.snap.tmp.PID): each holds
 * up to a whole snapshot's memory. */
static void drop_links(struct daemon *d)
{
    char prefix[KVS__JOB_MAX + 8], path[sizeof d->snap_path + 300];
    DIR *dir = opendir(d->dir);
    struct dirent *de;
    size_t n;

    if (!dir)
        return;
    n = (size_t)snprintf(prefix, sizeof prefix, "%s.snap.", d->o.job);
    while ((de = readdir(dir)) != NULL) {
        const char *tail = de->d_name + n;

        if (strncmp(de->d_name, prefix, n) != 0)
            continue;
        if (strncmp(tail, "tmp.", 4) == 0)
            tail += 4;
        if (!*tail || strspn(tail, "0123456789") != strlen(tail))
            continue;
        snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
        unlink(path);
    }
    closedir(dir);
}

static void mono_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static int snap_thread_start(struct daemon *d, struct kvs__err *e)
{
    struct snapw *sw = calloc(1, sizeof *sw);
    const char *env;
    int rc;

    if (!sw)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory");
    sw->d = d;
    if ((env = getenv("KVS_TEST_SNAPSHOT_HOLD")) != NULL && *env)
        sw->hold = env;
    mono_cond_init(&sw->cv);
    pthread_mutex_init(&sw->mu, NULL);
    if ((rc = pthread_create(&sw->th, NULL, snap_thread, sw)) != 0) {
        pthread_mutex_destroy(&sw->mu);
        pthread_cond_destroy(&sw->cv);
        free(sw);
        return kvs__fail(e, -rc, "cannot start the snapshot thread: %s", strerror(rc));
    }
    d->sw = sw;
    d->snap_keep = keep_value;
    d->snap_finish = finish_before_rollback;
    return 0;
}

static void snap_thread_stop(struct daemon *d)
{
    struct snapw *sw = d->sw;
    struct kvs__err e = { 0, "" };

    if (!sw)
        return;
    /* A commit answered is written before kvsd goes, whatever ends it. */
    if (snap_wait(d, 1, &e) != 0)
        say(d, "at exit: %s", e.msg);
    pthread_mutex_lock(&sw->mu);
    sw->stop = 1;
    pthread_cond_broadcast(&sw->cv);
    pthread_mutex_unlock(&sw->mu);
    pthread_join(sw->th, NULL);
    kvs__capture_free(sw->cap);
    for (size_t i = 0; i < sw->nkeys; i++)
        free(sw->keys[i].spare);
    free(sw->keys);
    pthread_mutex_destroy(&sw->mu);
    pthread_cond_destroy(&sw->cv);
    free(sw);
    d->sw = NULL;
    d->snap_writing = 0;
}

int commits_start(struct daemon *d, struct kvs__err *e)
{
    const char *env = getenv("KVS_CHECKPOINT_SYNC");
    int rc;

    snprintf(d->snap_path, sizeof d->snap_path, "%s/%s.snap", d->dir, d->o.job);
    if (env && strcmp(env, "1") == 0)
        d->o.checkpoint_sync = 1;
    drop_links(d);
    /* Across hosts the hosts agree on the step first (xcommits.c). */
    if (d->o.nhosts > 1 && d->o.restore) {
        if ((rc = xcommits_held(d, e)) != 0)
            return rc;
    } else if (d->o.restore && (rc = restore(d, e)) != 0)
        return rc;
    if (d->o.recover && (rc = snap_thread_start(d, e)) != 0)
        return rc;
    if (!d->o.checkpoint)
        return 0;
    if (!(d->ck = calloc(1, sizeof *d->ck)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory");
    d->ck->d = d;
    mono_cond_init(&d->ck->cv);
    pthread_mutex_init(&d->ck->mu, NULL);
    if ((rc = pthread_create(&d->ck->th, NULL, ckpt_thread, d->ck)) != 0) {
        free(d->ck);
        d->ck = NULL;
        return kvs__fail(e, -rc, "cannot start the checkpoint thread: %s", strerror(rc));
    }
    /* A commit restored from memory that the kvsd before was killed while
     * copying (or before): copied now, else the folder's newest would stay
     * older than the job's last commit, even after the job ended. */
    if (d->commit_seq && strcmp(d->restored_from, d->snap_path) == 0
        && !kvs__ckpt_has(d->o.checkpoint, d->commit_seq))
        ckpt_post(d, d->commit_seq);
    return 0;
}

void commits_stop(struct daemon *d, int done)
{
    struct kvs__err e = { 0, "" };

    snap_thread_stop(d);
    if (d->ck) {
        int posted;

        pthread_mutex_lock(&d->ck->mu);
        posted = d->ck->want >= d->commit_seq;     /* the restored commit's copy too */
        pthread_mutex_unlock(&d->ck->mu);
        if (done && d->commit_seq && (!d->restored_from[0] || posted)
            && ckpt_wait(d, d->commit_seq, &e))
            say(d, "at exit: %s", e.msg);
        pthread_mutex_lock(&d->ck->mu);
        d->ck->stop = 1;
        if (d->ck->want > d->ck->tried) {  /* not copied: dropped */
            char old[sizeof d->snap_path + 24];

            link_path(d, d->ck->want, old, sizeof old);
            unlink(old);
            d->ck->want = d->ck->tried;
        }
        pthread_cond_broadcast(&d->ck->cv);
        pthread_mutex_unlock(&d->ck->mu);
        pthread_join(d->ck->th, NULL);
        pthread_mutex_destroy(&d->ck->mu);
        pthread_cond_destroy(&d->ck->cv);
        free(d->ck);
        d->ck = NULL;
    }
    /* The job is over: its snapshot would only hold memory. */
    if (done && d->snap_path[0]) {
        unlink(d->snap_path);
        xcommits_drop_kept(d);
    }
}
