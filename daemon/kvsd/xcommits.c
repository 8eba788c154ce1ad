/*
 * xcommits.c - the snapshots of a job across hosts. Each host's kvsd
 * commits its own snapshot (every key's value, which every host holds
 * whole, and the optimizer's states of the parts it owns), at the same
 * point of the job (collectives.c: a commit across hosts goes through
 * host 0). A host may die between two hosts' captures, so each keeps its
 * two newest in its runtime dir (<job>.snap and <job>.snap.prev) besides
 * those of its checkpoint directory; when the hosts restart after a roll
 * back, each offers the steps it holds whole in its join, host 0 picks the
 * newest every host holds (join.c), and each restores that one: the job
 * goes back to one point, the same everywhere.
 *
 * Serve thread, before any worker is served (xcommits_held,
 * xcommits_restore), or with the writer idle (xcommits_keep_last).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "xcommits.h"

#include "store/ckpt.h"
#include "store/snapshot.h"

static void kept_path(const struct daemon *d, char *buf, size_t len)
{
    snprintf(buf, len, "%s.prev", d->snap_path);
}

/* The snapshot at path when it checks whole and is this job's (said
 * when it does not), else NULL. */
static struct kvs__snapshot *open_ours(const struct daemon *d, const char *path)
{
    struct kvs__err e = { 0, "" };
    struct kvs__snapshot *s = NULL;
    int rc = kvs__snapshot_open(path, &s, &e);

    if (rc != 0) {
        if (rc != -ENOENT)
            warn(d, "restore: passing over %s: %s", path, e.msg);
        return NULL;
    }
    if (strcmp(kvs__snapshot_meta(s)->job, d->o.job) != 0) {
        warn(d, "restore: passing over %s: a snapshot of job '%s', not '%s'", path,
             kvs__snapshot_meta(s)->job, d->o.job);
        kvs__snapshot_free(s);
        return NULL;
    }
    return s;
}

/* The checkpoint folder's commits after seq were rolled back past: set
 * aside, so that a later join never offers them (a host would restore the
 * old commit of a step the others hold anew). */
static void set_aside(const struct daemon *d, uint64_t seq)
{
    int n = kvs__ckpt_set_aside(d->o.checkpoint, seq);

    if (n > 0)
        say(d, "restore: %d snapshot%s of %s after the commit restored set aside "
            "(*.rolled-back)", n, n == 1 ? "" : "s", d->o.checkpoint);
}

static void add_step(struct daemon *d, int64_t step)
{
    for (int i = 0; i < d->nheld; i++)
        if (d->held_steps[i] == step)
            return;
    if (d->nheld < KVS__WIRE_JOIN_STEPS)
        d->held_steps[d->nheld++] = step;
}

int xcommits_held(struct daemon *d, struct kvs__err *e)
{
    char kept[sizeof d->snap_path + 8], newest[sizeof d->restored_from];
    const char *paths[2] = { d->snap_path, kept };
    int64_t steps[KVS__WIRE_JOIN_STEPS];
    struct kvs__snapshot *s = NULL;
    size_t n;
    int rc;

    /* A folder whose newest snapshot is another job's is refused, as on
     * one host: the folder was given by mistake. */
    if (d->o.checkpoint
        && kvs__ckpt_newest(d->o.checkpoint, &s, newest, sizeof newest, NULL, NULL, e) == 0
        && s) {
        rc = strcmp(kvs__snapshot_meta(s)->job, d->o.job) != 0
                 ? kvs__fail(e, KVS_EBADARG, "restore: %s is a snapshot of job '%s', not '%s'",
                             newest, kvs__snapshot_meta(s)->job, d->o.job)
                 : 0;
        kvs__snapshot_free(s);
        if (rc != 0)
            return rc;
    }
    e->code = 0;
    e->msg[0] = '\0';
    kept_path(d, kept, sizeof kept);
    d->nheld = 0;
    for (int i = 0; i < 2; i++)
        if ((s = open_ours(d, paths[i])) != NULL) {
            add_step(d, kvs__snapshot_meta(s)->step);
            kvs__snapshot_free(s);
        }
    n = kvs__ckpt_steps(d->o.checkpoint, d->o.job, steps, KVS__WIRE_JOIN_STEPS);
    for (size_t i = 0; i < n; i++)
        add_step(d, steps[i]);
    return 0;
}

int xcommits_find(struct daemon *d, struct kvs__snapshot **out, char *from, size_t len,
                  struct kvs__err *e)
{
    char kept[sizeof d->snap_path + 8];
    const char *paths[2] = { d->snap_path, kept };
    struct kvs__snapshot *s = NULL;
    int64_t step = d->agreed_step;
    int at = -1, rc;

    *out = NULL;
    kept_path(d, kept, sizeof kept);
    if (step < 0) {
        say(d, "restore: no snapshot that every host holds (this host holds %d): starting "
            "with an empty store", d->nheld);
        unlink(d->snap_path);
        unlink(kept);
        set_aside(d, 0);
        return 0;
    }
    for (int i = 0; i < 2 && !s; i++)
        if ((s = open_ours(d, paths[i])) != NULL && kvs__snapshot_meta(s)->step != step) {
            kvs__snapshot_free(s);
            s = NULL;
        } else if (s) {
            at = i;
            snprintf(from, len, "%s", paths[i]);
        }
    if (!s && d->o.checkpoint
        && (rc = kvs__ckpt_find(d->o.checkpoint, step, &s, from, len, e)) != 0)
        return rc;
    if (!s)
        return kvs__fail(e, KVS_EBADARG, "restore: the hosts agreed on the commit of step "
                         "%lld, which this host no longer holds", (long long)step);
    /* What is newer than the step agreed on never was the job's: the
     * runtime dir keeps the one restored as the last commit (and the one
     * before it, when that is the kept one already). */
    if (at == 1)
        rename(kept, d->snap_path);
    else if (at < 0) {
        unlink(d->snap_path);
        unlink(kept);
    }
    if (at == 1)
        snprintf(from, len, "%s", d->snap_path);
    set_aside(d, kvs__snapshot_meta(s)->seq);
    say(d, "restore: the hosts' newest common commit is step %lld", (long long)step);
    *out = s;
    return 0;
}

void xcommits_keep_last(struct daemon *d)
{
    char kept[sizeof d->snap_path + 8];

    kept_path(d, kept, sizeof kept);
    if (rename(d->snap_path, kept) != 0 && errno != ENOENT)
        warn(d, "cannot keep %s as %s: %s", d->snap_path, kept, strerror(errno));
}

void xcommits_drop_kept(struct daemon *d)
{
    char kept[sizeof d->snap_path + 8];

    kept_path(d, kept, sizeof kept);
    unlink(kept);
}
