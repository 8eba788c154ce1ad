/*
 * trace.c - the timeline's buffer, names and files (see trace.h).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/array.h"
#include "shm/ring.h"
#include "shm/shm.h"
#include "base/spec.h"
#include "proto/trace.h"

#define EVENTS_DEFAULT (1 << 17)       /* ~10 MiB a process */
#define EVENTS_MIN     1024
#define EVENTS_MAX     (1 << 26)
#define LINE_MAX_BYTES 65536           /* a part's line longer than this is not ours */
#define PART_SUFFIX    ".part"

/* An event: cut from the buffer with one atomic add, published by ready. */
struct ev {
    _Atomic int ready;
    uint16_t what;
    uint8_t instant, has_key, has_priority;
    int32_t pid, tid, nkeys, priority, status;
    int64_t t0, t1, round, rank, key_id;
    const char *key_name;              /* interned */
    uint64_t bytes;
    char *msg;                         /* malloc'd, or NULL */
};

/* A name in the file: a process (tid -1) or a thread or track. */
struct name {
    int32_t pid, tid;
    int sort;
    char text[80];
};

/* An interned key: its index names its tracks. */
struct key {
    int used;
    int64_t id;
    char *name;
    int32_t idx;
};

enum { MODE_OFF, MODE_ENV, MODE_API };

int kvs__tr_on;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int mode, setup_done, joined, is_kvsd, exit_hooked;
static char path[PATH_MAX];            /* the file to write */
static char part_dir[PATH_MAX];        /* a dist worker's: where its parts go */
static struct ev *evs;
static size_t cap, written;            /* written: events already in a part */
static _Atomic size_t nev;
static _Atomic uint64_t dropped;
static struct name *names;             /* under lock */
static size_t nnames, names_cap;
static struct key *keys;               /* open addressing, under lock */
static size_t nkeys, keys_cap;
static kvs_key_t *by_idx;              /* the keys by index, names interned */
static size_t by_cap;
static int32_t self_pid;               /* 0 until named: the OS pid then */
static _Atomic int32_t next_tid = 2;
static _Thread_local int32_t my_tid;
static int part_seq;

static const char *const what_names[KVS__TR_NWHAT] = {
    [KVS__TR_INIT] = "init", [KVS__TR_PUSH] = "push", [KVS__TR_PULL] = "pull",
    [KVS__TR_PUSHPULL] = "pushpull", [KVS__TR_ROW_SPARSE_PULL] = "row_sparse_pull",
    [KVS__TR_PULL_VIEW] = "pull_view", [KVS__TR_PUSHPULL_VIEW] = "pushpull_view",
    [KVS__TR_PUSH_ROWS] = "push_row_sparse", [KVS__TR_PULL_ROWS] = "pull_rows",
    [KVS__TR_PUSHPULL_ROWS] = "pushpull_row_sparse", [KVS__TR_INIT_ROWS] = "init_row_sparse",
    [KVS__TR_BARRIER] = "barrier", [KVS__TR_SET_OPTIMIZER] = "set_optimizer",
    [KVS__TR_SAVE_STATES] = "save_optimizer_states",
    [KVS__TR_LOAD_STATES] = "load_optimizer_states",
    [KVS__TR_COPY_IN] = "copy in", [KVS__TR_COPY_OUT] = "copy out",
    [KVS__TR_WAIT_KVSD] = "waiting for kvsd", [KVS__TR_QUEUED] = "queued",
    [KVS__TR_WAIT_OTHERS] = "waiting for others", [KVS__TR_COMBINE] = "sum + optimizer",
    [KVS__TR_SUM] = "sum", [KVS__TR_SUM_OPTIM] = "sum + optimizer",
    [KVS__TR_HOSTS] = "across hosts", [KVS__TR_CLOSE] = "close rounds",
    [KVS__TR_JOINED] = "joined", [KVS__TR_LEFT] = "left", [KVS__TR_DIED] = "died",
    [KVS__TR_EVICTED] = "evicted", [KVS__TR_ERROR] = "error", [KVS__TR_JOB_FAILED] = "job failed",
};

static const char *category(int what)
{
    if (what <= KVS__TR_LOAD_STATES)
        return "call";
    if (what >= KVS__TR_JOINED)
        return "event";
    if (is_kvsd)
        return "kvsd";
    return what == KVS__TR_QUEUED || what == KVS__TR_WAIT_OTHERS || what == KVS__TR_COMBINE
               ? "combine" : "worker";
}

int64_t kvs__tr_now(void)
{
    return kvs__now_ns();
}

/* ---- set-up ------------------------------------------------------------ */

static void at_exit(void);

/* The buffer, made at the first switch on (lock held). */
static int buffer_make(struct kvs__err *e)
{
    const char *s = getenv("KVS_TIMELINE_EVENTS");
    char *end;
    long long n = EVENTS_DEFAULT;
    void *p;

    if (evs)
        return 0;
    if (s && *s) {
        errno = 0;
        n = strtoll(s, &end, 10);
        if (errno || *end || n < EVENTS_MIN || n > EVENTS_MAX)
            return kvs__fail(e, KVS_EBADARG, "KVS_TIMELINE_EVENTS='%.32s': not a number of "
                             "events in [%d, %d]", s, EVENTS_MIN, EVENTS_MAX);
    }
    /* Touched now, not page by page as events come: a fault on the path
     * of a call would cost more than the event. */
    p = mmap(NULL, (size_t)n * sizeof *evs, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        return kvs__fail(e, -ENOMEM, "out of memory for a timeline of %lld events", n);
    evs = p;
    cap = (size_t)n;
    return 0;
}

/* The file's path made absolute, so that a chdir later changes nothing. */
static int path_set(const char *p, struct kvs__err *e)
{
    char cwd[PATH_MAX];
    int n;

    if (!p || !*p)
        return kvs__fail(e, KVS_EBADARG, "the timeline's path is empty");
    if (p[0] == '/')
        n = snprintf(path, sizeof path, "%s", p);
    else if (!getcwd(cwd, sizeof cwd))
        return kvs__fail(e, -errno, "timeline '%.64s': the working directory: %s", p,
                         strerror(errno));
    else
        n = snprintf(path, sizeof path, "%s/%s", cwd, p);
    if (n < 0 || (size_t)n >= sizeof path)
        return kvs__fail(e, KVS_EBADARG, "timeline '%.64s': the path is too long", p);
    return 0;
}

static int switch_on(int m, const char *p, struct kvs__err *e)
{
    int rc;

    if ((rc = path_set(p, e)) != 0 || (rc = buffer_make(e)) != 0)
        return rc;
    if (!exit_hooked && atexit(at_exit) == 0)
        exit_hooked = 1;
    mode = m;
    __atomic_store_n(&kvs__tr_on, 1, __ATOMIC_RELEASE);
    return 0;
}

int kvs__tr_setup(struct kvs__err *e)
{
    const char *p;
    int rc = 0;

    if (__atomic_load_n(&setup_done, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&lock);
    if (!setup_done) {
        p = getenv("KVS_TIMELINE");
        if (p && *p && mode == MODE_OFF)
            rc = switch_on(MODE_ENV, p, e);
        if (rc == 0)
            __atomic_store_n(&setup_done, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *kvs__tr_path(void)
{
    return mode != MODE_OFF ? path : NULL;
}

/* ---- names --------------------------------------------------------------- */

/* Adds or renames (pid, tid) (lock held). */
static void name_put(int32_t pid, int32_t tid, const char *text, int sort)
{
    struct name *n = NULL;

    for (size_t i = 0; i < nnames; i++)
        if (names[i].pid == pid && names[i].tid == tid)
            n = &names[i];
    if (!n) {
        if (nnames == names_cap) {
            size_t c = names_cap ? 2 * names_cap : 64;
            struct name *m = realloc(names, c * sizeof *m);

            if (!m)
                return;                /* the track goes unnamed */
            names = m;
            names_cap = c;
        }
        n = &names[nnames++];
    }
    n->pid = pid;
    n->tid = tid;
    n->sort = sort;
    snprintf(n->text, sizeof n->text, "%s", text);
}

static int32_t this_pid(void)
{
    return self_pid ? self_pid : (int32_t)getpid();
}

/* The calling thread's tid in the file, named at its first event. */
static int32_t thread_tid(void)
{
    char text[32];

    if (my_tid)
        return my_tid;
    if ((pid_t)syscall(SYS_gettid) == getpid()) {
        my_tid = 1;
        snprintf(text, sizeof text, "main");
    } else {
        my_tid = atomic_fetch_add(&next_tid, 1);
        snprintf(text, sizeof text, "thread %d", (int)my_tid - 1);
    }
    pthread_mutex_lock(&lock);
    name_put(0, my_tid, text, my_tid);
    pthread_mutex_unlock(&lock);
    return my_tid;
}

void kvs__tr_process(int32_t pid, const char *name, int sort)
{
    pthread_mutex_lock(&lock);
    self_pid = pid;
    is_kvsd = pid >= KVS__TR_KVSD_PID;
    name_put(0, -1, name, sort);
    pthread_mutex_unlock(&lock);
}

void kvs__tr_name_process(int32_t pid, const char *name, int sort)
{
    pthread_mutex_lock(&lock);
    name_put(pid, -1, name, sort);
    pthread_mutex_unlock(&lock);
}

void kvs__tr_thread(const char *name)
{
    int32_t tid = thread_tid();

    pthread_mutex_lock(&lock);
    name_put(0, tid, name, tid);
    pthread_mutex_unlock(&lock);
}

/* ---- keys ---------------------------------------------------------------- */

static uint64_t key_hash(kvs_key_t k)
{
    uint64_t h = 1469598103934665603ull;

    if (!k.name)
        return (uint64_t)k.id * 0x9e3779b97f4a7c15ull;
    for (const unsigned char *p = (const unsigned char *)k.name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

/* key's entry, made if new (lock held); NULL without memory. */
static struct key *key_get(kvs_key_t k)
{
    size_t i;

    if (2 * (nkeys + 1) > keys_cap) {
        size_t c = keys_cap ? 2 * keys_cap : 256;
        struct key *t = calloc(c, sizeof *t);

        if (!t)
            return NULL;
        for (size_t j = 0; j < keys_cap; j++) {
            kvs_key_t o = { keys[j].id, keys[j].name };

            if (!keys[j].used)
                continue;
            for (i = key_hash(o) & (c - 1); t[i].used; i = (i + 1) & (c - 1))
                ;
            t[i] = keys[j];
        }
        free(keys);
        keys = t;
        keys_cap = c;
    }
    for (i = key_hash(k) & (keys_cap - 1); keys[i].used; i = (i + 1) & (keys_cap - 1))
        if (k.name ? keys[i].name && strcmp(keys[i].name, k.name) == 0
                   : !keys[i].name && keys[i].id == k.id)
            return &keys[i];
    if (nkeys == by_cap) {
        size_t c = by_cap ? 2 * by_cap : 256;
        kvs_key_t *t = realloc(by_idx, c * sizeof *t);

        if (!t)
            return NULL;
        by_idx = t;
        by_cap = c;
    }
    if (k.name && !(keys[i].name = strdup(k.name)))
        return NULL;
    by_idx[nkeys] = (kvs_key_t){ k.id, keys[i].name };
    keys[i].used = 1;
    keys[i].id = k.id;
    keys[i].idx = (int32_t)nkeys++;
    return &keys[i];
}

int32_t kvs__tr_key_track(kvs_key_t key)
{
    struct key *k;
    int32_t tid = 0;

    pthread_mutex_lock(&lock);
    if ((k = key_get(key)) != NULL)
        tid = KVS__TR_KEY_TID + k->idx;
    pthread_mutex_unlock(&lock);
    return tid;
}

/* ---- events -------------------------------------------------------------- */

void kvs__tr_put(int what, int64_t t0, int64_t t1, const struct kvs__tr_args *a, int status,
                 const char *msg)
{
    size_t i;
    struct ev *v;
    const char *kname = NULL;

    if (!__atomic_load_n(&kvs__tr_on, __ATOMIC_ACQUIRE) || what < 0 || what >= KVS__TR_NWHAT)
        return;
    if (a && a->has_key && a->key.name) {
        struct key *k;

        pthread_mutex_lock(&lock);
        k = key_get(a->key);
        kname = k ? k->name : NULL;
        pthread_mutex_unlock(&lock);
        if (!kname) {
            atomic_fetch_add(&dropped, 1);
            return;
        }
    }
    if ((i = atomic_fetch_add(&nev, 1)) >= cap) {
        atomic_fetch_add(&dropped, 1);
        return;
    }
    v = &evs[i];
    v->what = (uint16_t)what;
    v->instant = t0 == 0;
    v->t0 = t0 ? t0 : kvs__now_ns();
    v->t1 = t0 == 0 ? v->t0 : t1 ? t1 : kvs__now_ns();
    v->pid = a ? a->pid : 0;
    v->tid = a && a->tid ? a->tid : a && a->pid ? 0 : thread_tid();
    v->has_key = a && a->has_key;
    v->key_id = a ? a->key.id : 0;
    v->key_name = kname;
    v->bytes = a ? a->bytes : 0;
    v->nkeys = a ? a->nkeys : 0;
    v->has_priority = a && a->has_priority;
    v->priority = a ? a->priority : 0;
    v->round = a ? a->round : -1;
    v->rank = a ? a->rank : -1;
    v->status = status;
    v->msg = msg && *msg ? strdup(msg) : NULL;
    atomic_store_explicit(&v->ready, 1, memory_order_release);
}

void kvs__tr_key_span(int what, int64_t t0, int64_t t1, kvs_key_t key, uint64_t bytes,
                      int64_t round)
{
    struct kvs__tr_args a = KVS__TR_ARGS;

    a.key = key;
    a.has_key = 1;
    a.bytes = bytes;
    a.round = round;
    kvs__tr_put(what, t0, t1, &a, 0, NULL);
}

void kvs__tr_instant(int what, const struct kvs__tr_args *a, int status, const char *msg)
{
    kvs__tr_put(what, 0, 0, a, status, msg);
}

/* A worker's call of n keys and bytes ended. */
static void tr_call_bytes(int what, int64_t t0, int n, const kvs_key_t *ks, uint64_t bytes,
                          int priority, int rc, const char *msg)
{
    struct kvs__tr_args a = KVS__TR_ARGS;

    if (n > 0 && ks) {
        a.key = ks[0];
        a.has_key = 1;
        a.nkeys = n;
    }
    a.bytes = bytes;
    a.priority = priority;
    a.has_priority = what >= KVS__TR_PUSH && what <= KVS__TR_PUSHPULL_ROWS;
    kvs__tr_put(what, t0, 0, &a, 0, NULL);
    if (rc != 0)
        kvs__tr_put(KVS__TR_ERROR, 0, 0, &a, rc, msg);
}

void kvs__tr_call(int what, int64_t t0, int n, const kvs_key_t *ks, const kvs_array_t *values,
                  int priority, int rc, const char *msg)
{
    uint64_t bytes = 0;

    if (!t0)
        return;
    for (int i = 0; values && i < n; i++)
        bytes += kvs__array_count(&values[i]) * kvs_dtype_size(values[i].dtype);
    tr_call_bytes(what, t0, n, ks, bytes, priority, rc, msg);
}

void kvs__tr_call_rows(int what, int64_t t0, int n, const kvs_key_t *ks,
                       const kvs_row_sparse_t *values, int priority, int rc, const char *msg)
{
    uint64_t bytes = 0;

    if (!t0)
        return;
    for (int i = 0; values && i < n; i++) {
        uint64_t row = kvs_dtype_size(values[i].dtype);

        for (int d = 1; d < values[i].ndim && d < KVS_MAX_NDIM; d++)
            row *= (uint64_t)(values[i].shape[d] > 0 ? values[i].shape[d] : 0);
        bytes += row * (uint64_t)(values[i].nnz > 0 ? values[i].nnz : 0);
    }
    tr_call_bytes(what, t0, n, ks, bytes, priority, rc, msg);
}

/* ---- writing ------------------------------------------------------------- */

/* s as a JSON string's body into f. */
static void json_str(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
}

static void write_names(FILE *f, int32_t me)
{
    for (size_t i = 0; i < nnames; i++) {
        const struct name *n = &names[i];
        int32_t pid = n->pid ? n->pid : me;

        if (n->tid < 0) {
            fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                    "\"args\":{\"name\":\"", (int)pid);
            json_str(f, n->text);
            fprintf(f, "\"}}\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                    "\"tid\":0,\"args\":{\"sort_index\":%d}}\n", (int)pid, n->sort);
        } else {
            fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"", (int)pid, (int)n->tid);
            json_str(f, n->text);
            fprintf(f, "\"}}\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                    "\"tid\":%d,\"args\":{\"sort_index\":%d}}\n", (int)pid, (int)n->tid,
                    n->sort);
        }
    }
}

static void write_event(FILE *f, const struct ev *v, int32_t me)
{
    const char *sep = "";

    fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%s\",", what_names[v->what],
            category(v->what), v->instant ? "i" : "X");
    if (v->instant)
        fprintf(f, "\"s\":\"%s\",", v->tid ? "t" : "p");
    fprintf(f, "\"pid\":%d,\"tid\":%d,\"ts\":%.3f", (int)(v->pid ? v->pid : me), (int)v->tid,
            (double)v->t0 / 1e3);
    if (!v->instant)
        fprintf(f, ",\"dur\":%.3f", (double)(v->t1 > v->t0 ? v->t1 - v->t0 : 0) / 1e3);
    fprintf(f, ",\"args\":{");
    if (v->has_key) {
        if (v->key_name) {
            fprintf(f, "\"key\":\"");
            json_str(f, v->key_name);
            fprintf(f, "\"");
        } else {
            fprintf(f, "\"key\":%lld", (long long)v->key_id);
        }
        sep = ",";
    }
#define ARG(cond, fmt, val)                                                   \
    do {                                                                      \
        if (cond) {                                                           \
            fprintf(f, "%s\"" fmt, sep, val);                                 \
            sep = ",";                                                        \
        }                                                                     \
    } while (0)
    ARG(v->nkeys > 1, "keys\":%d", (int)v->nkeys);
    ARG(v->bytes, "bytes\":%llu", (unsigned long long)v->bytes);
    ARG(v->has_priority, "priority\":%d", (int)v->priority);
    ARG(v->round >= 0, "round\":%lld", (long long)v->round);
    ARG(v->rank >= 0, "rank\":%lld", (long long)v->rank);
    ARG(v->status, "status\":%d", (int)v->status);
    ARG(v->status, "error\":\"%s", kvs_err_name(v->status));
    if (v->status)
        fprintf(f, "\"");
#undef ARG
    if (v->msg) {
        fprintf(f, "%s\"msg\":\"", sep);
        json_str(f, v->msg);
        fprintf(f, "\"");
    }
    fprintf(f, "}}\n");
}

static int pair_order(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Names the key tracks that events [from, n) use, each (pid, tid) once:
 * "key K in kvsd" (lock held). */
static void write_key_tracks(FILE *f, size_t from, size_t n, int32_t me)
{
    int64_t *pairs = malloc(sizeof *pairs * (n - from + 1));
    size_t m = 0;
    char ks[KVS_MAX_KEY_LEN + 8];

    if (!pairs)
        return;
    for (size_t i = from; i < n; i++)
        if (evs[i].tid >= KVS__TR_KEY_TID && (size_t)(evs[i].tid - KVS__TR_KEY_TID) < nkeys)
            pairs[m++] = (int64_t)(evs[i].pid ? evs[i].pid : me) << 32 | evs[i].tid;
    qsort(pairs, m, sizeof *pairs, pair_order);
    for (size_t i = 0; i < m; i++) {
        int32_t pid = (int32_t)(pairs[i] >> 32), tid = (int32_t)(pairs[i] & 0xffffffff);

        if (i > 0 && pairs[i] == pairs[i - 1])
            continue;
        kvs__key_str(ks, sizeof ks, by_idx[tid - KVS__TR_KEY_TID]);
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"name\":\"key ", (int)pid, (int)tid);
        json_str(f, ks);
        fprintf(f, " in kvsd\"}}\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                "\"tid\":%d,\"args\":{\"sort_index\":%d}}\n", (int)pid, (int)tid, (int)tid);
    }
    free(pairs);
}

/* This process's names and its events from `written` on, one per line
 * (lock held); returns the events written. */
static size_t write_lines(FILE *f)
{
    size_t n = atomic_load(&nev), k = 0;
    int32_t me = this_pid();

    if (n > cap)
        n = cap;
    write_names(f, me);
    write_key_tracks(f, written, n, me);
    for (size_t i = written; i < n; i++) {
        struct ev *v = &evs[i];

        if (!atomic_load_explicit(&v->ready, memory_order_acquire))
            continue;                  /* still being written by its thread: lost */
        write_event(f, v, me);
        free(v->msg);
        v->msg = NULL;
        k++;
    }
    written = n;
    return k;
}

int kvs__tr_part_dir(const char *job, char *buf, size_t size, struct kvs__err *e)
{
    char rt[PATH_MAX];
    int rc, n;

    if ((rc = kvs__runtime_dir(rt, sizeof rt, e)) != 0)
        return rc;
    n = snprintf(buf, size, "%s/%s.timeline", rt, job);
    if (n < 0 || (size_t)n >= size)
        return kvs__fail(e, KVS_EBADARG, "the timeline's directory is too long");
    return 0;
}

void kvs__tr_joined(const char *job)
{
    struct kvs__err e = { 0, "" };

    pthread_mutex_lock(&lock);
    if (mode == MODE_ENV && !joined && kvs__tr_part_dir(job, part_dir, sizeof part_dir, &e) == 0)
        joined = 1;
    pthread_mutex_unlock(&lock);
}

/* Writes the events not written yet as a part file in part_dir (lock held). */
static void part_write(void)
{
    char tmp[PATH_MAX + 64], fin[PATH_MAX + 64];
    uint64_t lost = atomic_exchange(&dropped, 0);
    FILE *f;
    int fd;

    if (mkdir(part_dir, 0700) != 0 && errno != EEXIST)
        return;
    snprintf(tmp, sizeof tmp, "%s/%d-%d.tmp", part_dir, (int)getpid(), part_seq);
    snprintf(fin, sizeof fin, "%s/%d-%d" PART_SUFFIX, part_dir, (int)getpid(), part_seq++);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        return;
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(tmp);
        return;
    }
    fprintf(f, "#kvs-part dropped=%llu\n", (unsigned long long)lost);
    write_lines(f);
    if (fclose(f) != 0 || rename(tmp, fin) != 0)
        unlink(tmp);
}

void kvs__tr_flush(void)
{
    pthread_mutex_lock(&lock);
    if (joined && mode == MODE_ENV)
        part_write();
    pthread_mutex_unlock(&lock);
}

/* Copies a part's event lines into f (each line checked to be one JSON
 * object's line of printable bytes); adds its dropped count to *lost.
 * Returns the lines copied. */
static size_t part_copy(FILE *f, FILE *in, uint64_t *lost, size_t *bad)
{
    char *line = NULL;
    size_t size = 0, k = 0;
    ssize_t len;
    unsigned long long d;

    while ((len = getline(&line, &size, in)) > 0) {
        int ok = 1;

        if (line[len - 1] == '\n')
            line[--len] = 0;
        if (sscanf(line, "#kvs-part dropped=%llu", &d) == 1) {
            *lost += d;
            continue;
        }
        ok = len >= 2 && len <= LINE_MAX_BYTES && line[0] == '{' && line[len - 1] == '}';
        for (ssize_t i = 0; ok && i < len; i++)
            ok = (unsigned char)line[i] >= 0x20 && line[i] != 0x7f;
        if (!ok) {
            (*bad)++;
            continue;
        }
        fprintf(f, "%s\n", line);
        k++;
    }
    free(line);
    return k;
}

void kvs__tr_clear_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *de;

    if (!dp)
        return;
    while ((de = readdir(dp)) != NULL)
        if (de->d_name[0] != '.')
            unlinkat(dirfd(dp), de->d_name, 0);
    closedir(dp);
    rmdir(dir);
}

/* The file at out (lock held): this process's events, then the parts in
 * dir (NULL: none), as one trace-event JSON document. */
static int merge_locked(const char *dir, const char *out, const char *meta, struct kvs__err *e)
{
    char tmp[PATH_MAX + 64];
    uint64_t lost = atomic_exchange(&dropped, 0);
    size_t bad = 0, parts = 0;
    FILE *f;
    DIR *dp;
    int fd;

    snprintf(tmp, sizeof tmp, "%s.%d.tmp", out, (int)getpid());
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return kvs__fail(e, -errno, "timeline %s: %s", tmp, strerror(errno));
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(tmp);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    /* Lines are joined by ",\n": each is written, then the separator
     * before the next, which a filter adds as it copies. */
    {
        char *buf = NULL;
        size_t blen = 0;
        FILE *m = open_memstream(&buf, &blen);

        if (!m) {
            fclose(f);
            unlink(tmp);
            return kvs__fail(e, -ENOMEM, "out of memory");
        }
        write_lines(m);
        if (dir && (dp = opendir(dir)) != NULL) {
            struct dirent *de;

            while ((de = readdir(dp)) != NULL) {
                size_t l = strlen(de->d_name);
                FILE *in;
                int pfd;

                if (l <= strlen(PART_SUFFIX)
                    || strcmp(de->d_name + l - strlen(PART_SUFFIX), PART_SUFFIX) != 0)
                    continue;
                pfd = openat(dirfd(dp), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (pfd < 0 || !(in = fdopen(pfd, "r"))) {
                    if (pfd >= 0)
                        close(pfd);
                    continue;
                }
                part_copy(m, in, &lost, &bad);
                fclose(in);
                unlinkat(dirfd(dp), de->d_name, 0);
                parts++;
            }
            closedir(dp);
        }
        fclose(m);
        fprintf(f, "{\"traceEvents\":[\n");
        for (char *p = buf, *nl; p && *p; p = nl + 1) {
            if (!(nl = strchr(p, '\n')))
                break;
            fprintf(f, "%.*s%s\n", (int)(nl - p), p, nl[1] ? "," : "");
        }
        free(buf);
    }
    fprintf(f, "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"" KVS__TR_FORMAT
            "\",\"clock\":\"CLOCK_MONOTONIC\",\"dropped_events\":%llu,\"parts\":%zu,"
            "\"bad_lines\":%zu%s%s}}\n", (unsigned long long)lost, parts, bad,
            meta && *meta ? "," : "", meta ? meta : "");
    if (fclose(f) != 0 || rename(tmp, out) != 0) {
        int err = errno;

        unlink(tmp);
        return kvs__fail(e, -err, "timeline %s: %s", out, strerror(err));
    }
    if (lost)
        fprintf(stderr, "kvs: timeline %s: %llu events dropped (a full buffer: "
                "KVS_TIMELINE_EVENTS sets its size)\n", out, (unsigned long long)lost);
    return 0;
}

int kvs__tr_merge(const char *dir, const char *out, const char *meta, struct kvs__err *e)
{
    int rc;

    pthread_mutex_lock(&lock);
    rc = merge_locked(dir, out ? out : path, meta, e);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* At exit: a worker's last events go to its job as a part; a process that
 * joined no job writes the file itself. */
static void at_exit(void)
{
    struct kvs__err e = { 0, "" };

    pthread_mutex_lock(&lock);
    if (__atomic_load_n(&kvs__tr_on, __ATOMIC_ACQUIRE) && !is_kvsd) {
        if (joined)
            part_write();
        else if (merge_locked(NULL, path, NULL, &e) != 0)
            fprintf(stderr, "kvs: %s\n", e.msg);
    }
    __atomic_store_n(&kvs__tr_on, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

/* ---- kvs_timeline_start / stop -------------------------------------------- */

int kvs__tr_start(const char *p, struct kvs__err *e)
{
    int rc;

    if (!p)
        return kvs__fail(e, KVS_EBADARG, "kvs_timeline_start: path is NULL");
    pthread_mutex_lock(&lock);
    setup_done = 1;                    /* KVS_TIMELINE no longer applies */
    if (mode != MODE_OFF)
        rc = kvs__fail(e, KVS_EBADARG, "kvs_timeline_start: the timeline is on already "
                       "(into %s)", path);
    else
        rc = switch_on(MODE_API, p, e);
    pthread_mutex_unlock(&lock);
    return rc;
}

int kvs__tr_stop(struct kvs__err *e)
{
    int rc;

    pthread_mutex_lock(&lock);
    if (mode != MODE_API) {
        pthread_mutex_unlock(&lock);
        return kvs__fail(e, KVS_EBADARG, "kvs_timeline_stop: no timeline started by "
                         "kvs_timeline_start");
    }
    __atomic_store_n(&kvs__tr_on, 0, __ATOMIC_RELEASE);
    rc = merge_locked(NULL, path, NULL, e);
    atomic_store(&nev, 0);
    written = 0;
    mode = MODE_OFF;
    pthread_mutex_unlock(&lock);
    return rc;
}
