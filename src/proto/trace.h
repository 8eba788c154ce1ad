/*
 * trace.h - the timeline: what each process of a job did and when, for a
 * trace viewer (Chrome's trace-event JSON; Perfetto, chrome://tracing).
 *
 * KVS_TIMELINE=FILE turns it on for the process (read once, at its first
 * handle or at kvsd's start; kvs_timeline_start does so at run time).
 * Each process records into a bounded buffer of its own: an event is a
 * fixed-size record cut with one atomic add, its key's name interned once,
 * nothing written anywhere until the end. A full buffer drops the events
 * after it and counts them. Off, a traced call costs one load and one
 * predictable branch (kvs__tr_begin), and a span's end another.
 *
 * At the end the events become lines of JSON: a dist worker writes them, at
 * its last handle's close, as a part file in its job's runtime directory
 * (kvs__tr_part_dir); kvsd, the last of the job's processes on its host,
 * merges every part with its own events into FILE (kvs__tr_merge). A
 * process that never joined a job (the local store) writes FILE itself at
 * exit. One event is one line, so that tools read a file line by line.
 *
 * Timestamps are CLOCK_MONOTONIC (kvs__now_ns), one clock per host. The
 * processes are named as people read them: a worker "rank R" (its trace
 * pid R + 1), kvsd "kvsd" or "kvsd host H" (KVS__TR_KVSD_PID + H).
 */
#ifndef KVS_TRACE_H
#define KVS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

#define KVS__TR_KVSD_PID  100000       /* kvsd of host H: this + H */
#define KVS__TR_KEY_TID   1000000      /* a key's track in kvsd's records: this + its index */
#define KVS__TR_FORMAT    "kvs timeline 1"

/* What an event is: its name in the file, in this order (trace.c). */
enum kvs__tr_what {
    /* a worker's calls, on the calling thread */
    KVS__TR_INIT, KVS__TR_PUSH, KVS__TR_PULL, KVS__TR_PUSHPULL, KVS__TR_ROW_SPARSE_PULL,
    KVS__TR_PULL_VIEW, KVS__TR_PUSHPULL_VIEW, KVS__TR_PUSH_ROWS, KVS__TR_PULL_ROWS,
    KVS__TR_PUSHPULL_ROWS, KVS__TR_INIT_ROWS, KVS__TR_BARRIER, KVS__TR_SET_OPTIMIZER,
    KVS__TR_SAVE_STATES, KVS__TR_LOAD_STATES,
    /* phases inside them */
    KVS__TR_COPY_IN, KVS__TR_COPY_OUT, KVS__TR_WAIT_KVSD, KVS__TR_QUEUED, KVS__TR_WAIT_OTHERS,
    KVS__TR_COMBINE,
    /* phases kvsd measures for a worker's push, on its key's track */
    KVS__TR_SUM, KVS__TR_SUM_OPTIM, KVS__TR_HOSTS,
    /* kvsd's own work: the rounds of a serve pass closed together */
    KVS__TR_CLOSE,
    /* instants */
    KVS__TR_JOINED, KVS__TR_LEFT, KVS__TR_DIED, KVS__TR_EVICTED, KVS__TR_ERROR,
    KVS__TR_JOB_FAILED,
    KVS__TR_NWHAT
};

/* What an event says beside its name and time; fields left at their
 * defaults (KVS__TR_ARGS) are not written. */
struct kvs__tr_args {
    kvs_key_t key;
    int has_key;
    int32_t pid;                       /* 0: this process */
    int32_t tid;                       /* 0: the calling thread */
    int32_t nkeys;                     /* 0: not written */
    int32_t priority;
    int has_priority;
    int64_t round;                     /* -1: not written */
    int64_t rank;                      /* -1: not written */
    uint64_t bytes;                    /* 0: not written */
};
#define KVS__TR_ARGS { .round = -1, .rank = -1 }

extern int kvs__tr_on;                 /* read by the inline checks below only */

/* Reads KVS_TIMELINE (once; later calls do nothing): 0, or the error of a
 * bad KVS_TIMELINE_EVENTS (the buffer's size in events), or -ENOMEM. */
int kvs__tr_setup(struct kvs__err *e);

/* Whether the timeline is on; the start of a span: its time, or 0 when
 * the timeline is off. */
static inline int kvs__tr_is_on(void)
{
    return __builtin_expect(kvs__tr_on, 0);
}
int64_t kvs__tr_now(void);
static inline int64_t kvs__tr_begin(void)
{
    return kvs__tr_is_on() ? kvs__tr_now() : 0;
}

/* Records a span [t0, now) (t0 from kvs__tr_begin; 0 records nothing), or
 * [t0, t1) with kvs__tr_span_at, or an instant at now. status, msg: an
 * error the event carries (0, NULL: none). */
void kvs__tr_put(int what, int64_t t0, int64_t t1, const struct kvs__tr_args *a, int status,
                 const char *msg);
static inline void kvs__tr_span(int what, int64_t t0, const struct kvs__tr_args *a)
{
    if (__builtin_expect(t0 != 0, 0))
        kvs__tr_put(what, t0, 0, a, 0, NULL);
}
/* A span [t0, t1) of one key (t1 0: now), the common case; _on: when the
 * timeline is on, from times the caller read anyway. */
void kvs__tr_key_span(int what, int64_t t0, int64_t t1, kvs_key_t key, uint64_t bytes,
                      int64_t round);
static inline void kvs__tr_span_key(int what, int64_t t0, kvs_key_t key, uint64_t bytes,
                                    int64_t round)
{
    if (__builtin_expect(t0 != 0, 0))
        kvs__tr_key_span(what, t0, 0, key, bytes, round);
}
static inline void kvs__tr_span_key_on(int what, int64_t t0, int64_t t1, kvs_key_t key,
                                       uint64_t bytes, int64_t round)
{
    if (kvs__tr_is_on())
        kvs__tr_key_span(what, t0, t1, key, bytes, round);
}
void kvs__tr_instant(int what, const struct kvs__tr_args *a, int status, const char *msg);

/* A worker's call ended: its span [t0, now) with its keys, their bytes and
 * priority, and its error as an instant when rc != 0. values: the call's
 * arrays (NULL: none). */
void kvs__tr_call(int what, int64_t t0, int n, const kvs_key_t *keys, const kvs_array_t *values,
                  int priority, int rc, const char *msg);
/* kvs__tr_call of a call of row-sparse values (NULL: none): their bytes
 * are the rows they hold. */
void kvs__tr_call_rows(int what, int64_t t0, int n, const kvs_key_t *keys,
                       const kvs_row_sparse_t *values, int priority, int rc, const char *msg);
/* A phase of a call of n keys (their arrays: values), as its span. */
static inline void kvs__tr_list(int what, int64_t t0, int n, const kvs_key_t *keys,
                                const kvs_array_t *values)
{
    if (__builtin_expect(t0 != 0, 0))
        kvs__tr_call(what, t0, n, keys, values, 0, 0, NULL);
}

/* Names: this process in the file (pid, name, sort index); the calling
 * thread; another process's (kvsd names its workers, which may have died
 * before writing). kvs__tr_key_track: the tid of key's track, for the
 * events kvsd records in a worker's process ("key K in kvsd"); 0 without
 * memory. */
void kvs__tr_process(int32_t pid, const char *name, int sort);
void kvs__tr_thread(const char *name);
void kvs__tr_name_process(int32_t pid, const char *name, int sort);
int32_t kvs__tr_key_track(kvs_key_t key);

/* The directory where job's workers leave their parts: DIR/JOB.timeline
 * in the runtime directory. */
int kvs__tr_part_dir(const char *job, char *buf, size_t size, struct kvs__err *e);

/* A dist handle of job joined it: from then on this process's events go,
 * as part files, into the job's part directory, for its kvsd to merge. */
void kvs__tr_joined(const char *job);

/* Writes the events recorded so far as a part file (a dist handle's
 * close), and forgets them; nothing when the process joined no job. */
void kvs__tr_flush(void);

/* kvsd's end: the file KVS_TIMELINE named, with its own events, every part
 * in dir (each removed once read) and meta (a JSON object's members, e.g.
 * the clock offsets, or NULL) in otherData. path: written to this path
 * instead (NULL: KVS_TIMELINE's); written atomically (a temporary file,
 * then rename). Says on stderr how many events were dropped, if any. */
int kvs__tr_merge(const char *dir, const char *path, const char *meta, struct kvs__err *e);

/* Removes dir's parts and dir (a job's start: parts of an older job). */
void kvs__tr_clear_dir(const char *dir);

/* The path KVS_TIMELINE named (absolute), or NULL when off. */
const char *kvs__tr_path(void);

/* kvs_timeline_start/stop (kvs.h): on for this process, into path; off,
 * writing the file. */
int kvs__tr_start(const char *path, struct kvs__err *e);
int kvs__tr_stop(struct kvs__err *e);

#endif
