/*
 * kvsd.h - what kvsd's files share: the daemon's state (struct daemon, its
 * workers, requests, rounds, collectives and control queue), the limits
 * more than one file uses, and the calls one file makes into another.
 *
 * It declares only: it must never define a function or an object, and
 * nothing but kvsd's own files includes it. Which thread may touch what is
 * said at each field and each call.
 */
#ifndef KVSD_H
#define KVSD_H

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernels/array.h"
#include "proto/combine.h"
#include "store/engine.h"
#include "kernels/optim.h"
#include "base/latency.h"
#include "proto/layout.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "proto/shard.h"
#include "proto/trace.h"
#include "proto/wire.h"

#define MAX_WORKERS     1024
#define HANDSHAKE_NS    (2 * 1000000000ll)
#define CTL_QUEUE_MAX   16             /* control connections waiting for the serve thread */

/* ---- options ---------------------------------------------------------- */

struct options {
    char job[KVS__JOB_MAX + 1];        /* this host's part: its socket, workers, kvsctl */
    char net_job[KVS__JOB_MAX + 1];    /* the job's name between hosts: job is then
                                        * net_job.hR, so that hosts share a machine */
    int nworkers;                      /* this host's; 0: from the first worker's hello */
    /* across hosts (hosts.c); nhosts 1: this host alone */
    int nhosts, host;
    const char *coord;                 /* HOST:PORT of host 0 */
    const char *bind;                  /* the address to listen on, or NULL */
    const char *secret_file;           /* or NULL: loopback only */
    int64_t heartbeat_ns;              /* a host silent this long is dead */
    int64_t join_ns;                   /* every host must have joined by then */
    int ready_fd;                      /* told "RANK0 TOTAL" once the hosts are joined */
    uint64_t staging, arena;
    uint32_t sq_entries, cq_entries;
    int threads;
    int quiet;
};

/* ---- state ------------------------------------------------------------ */

enum wstate { W_FREE, W_LIVE, W_LEFT, W_DEAD };

/* What kvsd keeps of a request slot, once proto.c has checked it: the
 * slot's fields but the key name, which only a string key has (then
 * key_name is kvsd's own copy, else NULL). A list of many small keys makes
 * hundreds of thousands of these: no room for a name that is seldom there. */
struct rargs {
    uint8_t op, flags;                 /* enum kvs__op, KVS__SQE_* */
    kvs_dtype_t dtype;
    int ndim;
    int32_t priority;
    uint64_t seq;
    int64_t key_id;
    char *key_name;
    uint64_t data_off, data_len, arg;
    int64_t shape[KVS_MAX_NDIM];
};

/* The requests of one table slot (KVS__SQE_TABLE, proto.h): they share its
 * seq and are answered through it, each writing its result into the
 * table in the worker's staging, the slot answered once for all. */
struct tab {
    uint64_t seq;
    uint64_t res_off;                  /* the results, in the worker's staging */
    int w;                             /* worker index */
    uint32_t n;                        /* requests */
    uint32_t live;                     /* of them, not freed yet: frees the table */
    uint32_t answered;                 /* answered: at n, the table's completion */
    uint32_t acked;                    /* taken early (sync pushes): at n, one HELD */
    uint32_t lent;                     /* whose data kvsd still reads from staging */
    uint8_t held;                      /* the HELD completion went out */
    int32_t fail_idx, fail_status;     /* the first request that failed, -1: none */
    char fail_msg[KVS__MSG_MAX];
};

/* A request. A push's or an init's data is read from its worker's staging
 * area while `lent` (see KVS__CQE_HELD in proto.h), else from `copy`, which
 * kvsd made (a SPILL, a worker leaving, an init waiting for the others).
 * Requests are cut from blocks (struct req_block), not allocated one by one. */
struct req {
    struct rargs s;
    int w;                             /* worker index */
    uint8_t lent;                      /* data still in the worker's staging */
    uint8_t acked;                     /* completed early with KVS__CQE_HELD: the
                                        * worker waits for a release, not a completion */
    uint64_t token;                    /* an async push forwarded to its key's owner */
    int nwait;                         /* its parts whose owners have not answered */
    int xstatus;                       /* the first of them that failed, */
    char *xmsg;                        /* and its message (malloc'd) */
    void *copy;                        /* kvsd's copy of the data, or NULL, */
    int copy_dev;                      /* on this device: KVS_HOST, or a device push's
                                        * on its key's GPU (from devcopy_new) */
    void *coded;                       /* a 2bit push across hosts: its words, as the
                                        * worker sent them (copy: dequantized) */
    struct round *rd;                  /* PUSH, PULL: its key's rounds */
    struct req *next;
    struct req_block *blk;             /* the block it was cut from */
    struct tab *tab;                   /* its table, or NULL: a slot of its own */
    uint32_t idx;                      /* its place in the table */
    int64_t t_in, t_join;              /* timeline on: when it came, when (a sync push)
                                        * it joined its round; else 0 */
};

/* Requests of consecutive slots, cut in order from one allocation: freed
 * when the last of them is, once no longer the block being cut from. */
#define REQ_BLOCK 512
struct req_block {
    int used, live;                    /* cut so far; of them, not freed yet */
    struct req r[REQ_BLOCK];
};

/* A completion held back while its worker's CQ is full: a long list's
 * answers wait here by the hundred thousand, so only a failure's message
 * takes more room (msg: kvsd's copy, or NULL). */
struct held_cqe {
    uint64_t seq, value_off, value_len, round;
    int32_t status;
    uint32_t flags;
    char *msg;
};

/* A device buffer a worker registered (devbufs.c): the allocation as
 * opened here, its size as this process's runtime sees it, its device. */
struct devbuf {
    void *base;                        /* NULL: the number is free */
    size_t size;
    int device;
};

struct worker {
    _Atomic int state;                 /* enum wstate; written by the serve thread,
                                        * but FREE -> LIVE by the socket thread */
    int rank;
    pid_t pid;
    int sock;
    _Atomic int hup;                   /* set by the socket thread */
    void *seg;
    size_t seg_size;
    struct kvs__ring sq, cq;
    struct kvs__bell *bell;
    unsigned char *staging;
    uint64_t staging_size;
    struct req *batch, **batch_tail;   /* requests of a list call not yet ended */
    struct held_cqe *backlog;          /* completions a full CQ had no room for: */
    size_t backlog_head, backlog_len,  /* a ring of backlog_cap (0 or a power of */
           backlog_cap;                /* two), oldest at head */
    int batch_len;
    int wake;                          /* ring its bell at the end of the serve pass:
                                        * once for all the completions of a pass */
    struct devbuf *devbufs;            /* [KVS__DEVBUF_MAX] by number, made at the
                                        * first registration, or NULL */
    int pidfd;                         /* kvsd reads pushes out of the worker's memory
                                        * (remote.c): its pidfd; else -1 */
    int remote_used;                   /* a push of it was read in this close */
    _Atomic int remote_bad;            /* the first read of it that failed (-errno) */
};

/* Per key, what kvsd keeps beside the engine (the entry's front pointer),
 * made at the key's first push or pull: where its value lies, and its sync
 * rounds. The open round holds its pushes, not a sum: each push's data
 * stays lent in its worker's staging area until the round closes (or kvsd
 * copies it), and the engine sums them all at once when the round closes.
 * So a worker's segment must stay mapped while a push of it here is lent. */
struct round {
    void *value;                       /* the key's value in the arena, and its bytes; */
    uint64_t bytes;
    void *dvalue;                      /* for a key kept on a GPU (device), the value
                                        * itself, which the arena's copy follows when a
                                        * pull needs it (stale: not yet); else value */
    int device, stale;
    void **spare;                      /* device: copies of device pushes kept for the
                                        * next rounds (devcopy_new), nspare of them */
    int nspare;
    void *entry;                       /* the key's engine entry (kvs__push_item) */
    uint64_t done;                     /* rounds applied */
    int ncontrib;                      /* pushes in the open round */
    int64_t t_open;                    /* when the open round's first push joined it
                                        * (kvs__now_ns); 0: no round open */
    uint32_t *lat;                     /* [KVS__LAT_BUCKETS]: the latencies of the rounds
                                        * finished here, from t_open to finish_round
                                        * (latency.h); counts saturate */
    int nlive;                         /* of them, from workers still in the job: the
                                        * round closes when every one of those pushed */
    struct req **contrib;              /* per worker: its push in the open round, or NULL */
    uint64_t *last;                    /* per worker: the round its last push is in */
    int *queued;                       /* per worker: its pushes waiting in pending for a
                                        * later round; its pulls wait for them too */
    uint64_t failed_round;             /* the last round whose update failed (0: none):
                                        * pulls waiting for it get its status */
    int fail_status;
    char fail_msg[KVS__MSG_MAX];
    struct round *next, **pprev;       /* in the daemon's open list while ncontrib > 0,
                                        * or while other hosts' sums wait here */
    int ready;                         /* every push is in: in the daemon's ready[] */
    int cb;                            /* the workers combine its rounds (combined.c):
                                        * kvsd takes no push or pull of it; its slot
                                        * in d->cb_keys, plus 1 (0: not combined) */
    kvs_dtype_t dtype;
    int owner;                         /* the host that owns the key (0 on one host), or
                                        * its part 0 */
    int nparts;                        /* across hosts: 1, or for a big key key_parts(),
                                        * part p (kvs__wire_part) owned by part_owner() */
    int inflight;                      /* across hosts: this host's sums of the open round
                                        * are done (sent, or in at the parts' owner) */
    int parts_left;                    /* sync: parts whose value the open round awaits */
    int own_left;                      /* sync: of them, those this host applies */
    int xstatus;                       /* sync: the open round's first failed part, */
    char *xmsg;                        /* and its message (malloc'd) */
    uint8_t *pgot;                     /* [nparts]: the part's value has come this round */
    struct xround *x;                  /* [nparts] where this host owns a part: the other
                                        * hosts' sums of the parts it owns; else NULL */
    uint64_t step_round, step;         /* sync: the round whose parts this host applies
                                        * as the optimizer's step `step` */
    uint64_t *fwd;                     /* async, where this host owns a part, [2 * hosts]:
                                        * per host, the token of its last push forwarded
                                        * here and the step its parts count as */
    /* timeline on (else 0): when the open round had every push, when its
     * last sum began and ended, when the round before it finished; the
     * key's track */
    int64_t t_ready, t_sum0, t_sum1, t_prev;
    int32_t tr_tid;
    /* contrib, last, queued, lat and pgot point here, in the same allocation */
};

/* A collective (init of a key, barrier): completes when every worker
 * still in the job has arrived. */
struct coll {
    uint8_t op;
    kvs_key_t key;                     /* INIT: name owned */
    int narrived;
    int sent;                          /* across hosts: this host's arrival went to host 0 */
    struct req *reqs;                  /* waiting, completed together */
    struct coll *next, **pprev;        /* the daemon's list */
    struct coll *hnext;                /* its bucket in the daemon's table */
    void *value;                       /* INIT: the lowest rank's value so far (of */
    uint64_t value_len;                /* the first arrival's size), on value_dev */
    int value_dev;                     /* (kvs__mem_alloc'd: KVS_HOST, or the GPU */
    int value_rank;                    /* a device init came from); that rank, INT_MAX:
                                        * none yet */
    unsigned char *harrived;           /* per host, in the same allocation */
    unsigned char arrived[];           /* per worker; in the same allocation */
};

/* A control connection, checked by the socket thread, waiting for its
 * answer from the serve thread. */
struct ctl_conn {
    int fd;
    uint8_t command;                   /* enum kvs__ctl_command */
    pid_t pid;                         /* kvsctl's, for messages */
};

/* What kvsd has done, for kvsctl stats. Serve thread only. */
struct stats {
    uint64_t rounds;                   /* sync rounds closed, over every key */
    uint64_t pushes, pulls;            /* push and pull requests that succeeded */
    uint64_t bytes_pushed;             /* their data: each request's, as the worker sent it */
    uint64_t bytes_pulled;             /* the values the pulls were answered with */
    uint64_t collectives;              /* inits of a key, barriers: finished */
    uint64_t waits;                    /* sleeps of the serve loop on its doorbell */
    uint64_t failed;                   /* requests completed with an error */
    uint64_t devbufs_opened;           /* device buffers registered */
    uint64_t device_pushes;            /* pushes read from them */
    uint64_t device_pulls;             /* pulls written into them */
    uint64_t remote_pushes;            /* pushes read out of a worker's memory */
};

/* A frame to send to other hosts: head and payload in one buffer, freed
 * once sent to each (refs). */
struct frame {
    int refs;                          /* the links' thread's, once posted */
    int32_t priority;                  /* a value's (PARTIAL, VALUE, FORWARD): such frames
                                        * go before those of lower priority queued for the
                                        * same link since its last frame of another type */
    int value;                         /* it is one of those */
    size_t len;
    unsigned char buf[];
};

/* What the links' thread hands the serve thread: a frame from another
 * host (type, its payload), or what happened to a link (LINK_*). */
enum { LINK_CLOSED = -1, LINK_SILENT = -2, LINK_BAD = -3 };
struct inmsg {
    struct inmsg *next;
    int host;
    int type;                          /* enum kvs__frame_type, or LINK_* */
    size_t len;
    unsigned char *pay;                /* malloc'd payload */
    char why[KVS__MSG_MAX];            /* LINK_*: in words */
};

enum { HOST_IN = 0, HOST_LEFT = 1, HOST_ENDED = 2 };  /* daemon.host_out */

struct hosts;                          /* hosts.c */
struct xround;                         /* bridge.c */
struct stq;                            /* states.c */

struct daemon {
    struct options o;
    char dir[PATH_MAX], sock_path[PATH_MAX + 80], lock_path[PATH_MAX + 80];
    int lock_fd, listen_fd;
    int sync;                          /* 1 dist_sync, 0 dist_async, -1 unknown yet */
    int ctl_fd, arena_fd, arena_ro_fd;
    void *ctl;
    unsigned char *arena;
    uint64_t arena_next;               /* bump pointer */
    struct kvs__bell *bell;
    struct kvs__engine *eng;
    struct kvs__worker_layout wl;      /* every worker segment's layout */

    pthread_mutex_t lock;              /* workers[] slots and states vs the socket thread */
    struct worker workers[MAX_WORKERS];
    _Atomic int nslots;                /* workers[] slots ever used: the highest + 1; raised
                                        * by the socket thread before a slot turns LIVE */
    int nworkers;                      /* this host's workers, once known */
    int rank0, total;                  /* the global rank of worker 0 here, and the
                                        * job's workers on every host */
    struct hosts *hx;                  /* the links to the other hosts (hosts.c), or NULL */
    int nhosts, me;                    /* the job's hosts, and this one's rank */
    uint8_t *host_out;                 /* per host: HOST_IN, HOST_LEFT (its workers all
                                        * left) or HOST_ENDED (bye, or gone); serve
                                        * thread */
    struct inmsg *deferred;            /* messages of keys not stored here yet, newest first */
    size_t deferred_nkeys;             /* the keys stored when they were last tried */
    int fail_remote;                   /* fail_job: the failure came from another host */
    int remote_read;                   /* remote_sources marked workers for remote_check */
    int left_told;                     /* the others know this host's workers all left */
    struct req *fwd;                   /* async pushes waiting for their owner's answer */
    struct stq *stq;                   /* saves and loads of states waiting for the hosts */
    int clock0_known;                  /* hosts_stop: host 0's clock less this host's, */
    int64_t clock0_offset, clock0_error;/* estimated from heartbeats, within the error (ns) */
    uint64_t next_token;
    _Atomic int connected;             /* workers ever connected */
    int left;                          /* workers that left cleanly */
    int failed;                        /* 0, or why every request now fails: a worker
                                        * died or was evicted (KVS_EPEERDEAD), one gave
                                        * up waiting (KVS_ETIMEDOUT) */
    char fail_msg[KVS__MSG_MAX];

    struct req *pending;               /* sorted: priority high first, then arrival;
                                        * pulls, and sync pushes not in a round yet */
    struct round *open;                /* rounds holding pushes */
    struct round **ready;              /* of them, those a serve pass closes together */
    size_t nready, ready_cap;
    struct coll *colls;                /* waiting: a list, and a table by op and key */
    struct coll **coll_tab;
    struct coll *inits;                /* inits complete, values to store: finish_inits */
    struct req_block *blk;             /* the block requests are cut from, or NULL */
    struct req_block *spare_blk;       /* an emptied block kept for the next, or NULL */
    size_t coll_cap, ncolls;           /* cap: 0 or a power of two */
    struct stats st;
    int devbufs_open;                  /* device buffers open now, over every worker */

    /* rounds the workers combine (combined.c) */
    void *cb;                          /* the combine area, or NULL */
    int cb_fd;
    int cb_on;                         /* -1 until the first hello; then 1 when this
                                        * job's small keys are combined by its workers */
    uint64_t cb_size, cb_next;         /* the area's bytes, and its bump pointer */
    uint64_t cb_max;                   /* the biggest key combined, in bytes */
    struct cb_key *cb_keys;            /* every combined key, in slot order */
    size_t cb_n, cb_cap;
    struct kvs__optim *cb_opt;         /* the optimizer as the area has it, */
    uint64_t cb_opt_gen;               /* and its generation there */

    char tr_dir[PATH_MAX + 80];        /* where the workers leave their timelines */

    pthread_mutex_t ctl_lock;          /* ctlq between the socket and serve threads */
    struct ctl_conn ctlq[CTL_QUEUE_MAX];
    int nctl;
    struct kvs__ctl_reply reply;       /* the serve thread's answer being written */
};

/* A key the workers combine, as kvsd keeps it (combined.c). */
struct cb_key {
    struct kvs__cb_plan plan;          /* its slot's layout, kvsd's own copy */
    kvs_key_t key;                     /* name malloc'd */
    void *entry;                       /* its engine entry: its state after a load */
};

/* Set by SIGINT/SIGTERM, and by main when the serve loop ends: both threads
 * stop at their next turn. */
extern volatile sig_atomic_t stop_signal;

/* ---- kvsd.c ------------------------------------------------------------ */

/* A message on stderr, prefixed with the job, unless --quiet. Any thread. */
void say(const struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- arena.c: shared segments and the arena --------------------------- */

/* Writes a segment's head (magic, layout, kind, size) at seg. */
void head_init(void *seg, uint32_t kind, uint64_t size);

/* The engine's allocator (struct kvs__mem, ctx is the daemon): values in
 * the shared arena. Serve thread only, once setup is done. */
void *arena_alloc(void *ctx, size_t bytes);
/* Bytes of the arena not handed out yet. */
uint64_t arena_room(const struct daemon *d);
void arena_free(void *ctx, void *p, size_t bytes);

/* Bracket a write of a value in the arena with its block's seqlock: a
 * worker copying the value meanwhile sees the sequence move and copies it
 * again. */
void seq_begin(void *value);
void seq_end(void *value);

/* ---- combined.c: rounds the workers combine (serve thread) ----------- */

/* Makes the combine area when KVS_COMBINE=1 on one host (main, at setup). */
int cb_setup(struct daemon *d, struct kvs__err *e);
/* Decides, at the first hello, whether the job's workers combine rounds
 * (socket thread, d->lock held). */
void cb_join(struct daemon *d);
/* Adds the area to a welcome: 1 and its descriptor in *fd when it does. */
int cb_welcome(const struct daemon *d, struct kvs__welcome *w, int *fd);
/* Lays out and publishes a slot for each of the newly stored keys that
 * the workers may combine. */
void cb_add_keys(struct daemon *d, int n, const kvs_key_t *keys);
/* Hands the engine's optimizer, newly set, to the workers. */
void cb_optimizer(struct daemon *d);
/* Worker wi left: completes the rounds that only it was missing from. */
void cb_leave(struct daemon *d, int wi);
/* The job failed: every worker waiting in the area learns why. */
void cb_fail(struct daemon *d, int status, const char *msg);
/* Fails the job when a worker gave up waiting in the area. */
void cb_check(struct daemon *d);
/* Saves the job's optimizer states to path (a state file, as
 * kvs__engine_save_states writes it): the engine's of the keys kvsd
 * updates, and those the combined keys' last rounds published. Errors:
 * the engine's, KVS_ETIMEDOUT when a combined key's round stays mid-write. */
int cb_save_states(struct daemon *d, const char *path, int dump_optimizer, struct kvs__err *e);
/* Loads a state file into the engine (kvs__engine_load_states) and hands
 * each combined key's loaded state, or none, to its next round. */
int cb_load_states(struct daemon *d, const char *path, struct kvs__err *e);
/* Rounds the workers combined, over every key. */
uint64_t cb_rounds(const struct daemon *d);
/* The rounds published of a key the workers combine (rd->cb != 0). */
uint64_t cb_key_rounds(const struct daemon *d, const struct round *rd);
/* The round latencies of a key the workers combine (rd->cb != 0), as its
 * slot in the area counts them: KVS__LAT_BUCKETS counts into lat, each
 * clamped (the area is the workers'). */
void cb_key_latency(const struct daemon *d, const struct round *rd, uint64_t *lat);
/* The open round of d->cb_keys[i] as kvsctl status says it, in buf: 1;
 * 0 when none is open. */
int cb_round_text(const struct daemon *d, size_t i, char *buf, size_t size);
void cb_free(struct daemon *d);

/* ---- answers.c: requests' life and their answers (serve thread) ------ */

/* A new request of worker wi, cut from the current block; NULL without
 * memory. req_free frees it (its copy, name and table with it). */
struct req *req_new(struct daemon *d, int wi);
void req_free(struct daemon *d, struct req *r);

/* Frees the request blocks kept for reuse (at teardown). */
void reqs_cache_free(struct daemon *d);

/* A request's key, its array (data: where its value lies), and where its
 * data is now (kvsd's copy, or the worker's staging; NULL while a remote
 * push's is still in its worker's memory) and on which device. */
kvs_key_t req_key(const struct rargs *s);
kvs_array_t req_array(const struct rargs *s, void *data);
void *req_data(const struct daemon *d, const struct req *r);
int req_device(const struct req *r);

/* Answers r (not freeing it), with its completion or its result in its
 * table; value: the round whose value the answer hands over (in the arena,
 * or written into a device pull's buffer), or NULL. */
void answer(struct daemon *d, struct req *r, int status, const char *msg, struct round *value);

/* Answers r with status (msg its detail when status != 0) and frees it;
 * complete_list does so for every request of a list. */
void complete(struct daemon *d, struct req *r, int status, const char *msg);
void complete_list(struct daemon *d, struct req *r, int status, const char *msg);

/* A sync push taken: answered at once (HELD), its data still lent. */
void ack(struct daemon *d, struct req *r);

/* Ends r: one answered early gets its data released if still lent,
 * any other its completion; frees it. */
void finish(struct daemon *d, struct req *r, int status, const char *msg);

/* kvsd no longer reads r's data from staging: the worker gets it back now
 * (release non-zero) or with r's completion. */
void lending_ends(struct daemon *d, struct req *r, int release);

/* Copies a lent push's data out of staging (or, a remote push, out of
 * its worker's memory) and releases it at once. 0, -ENOMEM, or a remote
 * read's error. */
int unlend(struct daemon *d, struct req *r);

/* A 2bit push (KVS__SQE_2BIT): its words dequantized from staging into
 * its copy (and, across hosts, kept as they came). 0 or -ENOMEM. */
int decode_2bit(struct daemon *d, struct req *r, struct kvs__err *e);

/* Rings the bell of every worker that got completions or ring room since
 * the last call. */
void wake_workers(struct daemon *d);

/* Posts what w's full CQ held back; backlog_free drops it. */
void flush_backlog(struct daemon *d, struct worker *w);
void backlog_free(struct worker *w);

/* ---- requests.c: the workers' requests (serve thread only) ------------ */

/* Completes every waiting request (pending, in rounds and in collectives)
 * with status and msg. */
void fail_waiting(struct daemon *d, int status, const char *msg);

/* A worker died, was evicted, or gave up waiting: fails every waiting
 * request now, and through d->failed every later one, with status (the
 * first failure's) and its message, which is kept and said. */
void fail_job(struct daemon *d, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What worker wi's request seq waits for, in words: the call, the key, the
 * round, and the ranks that have not come ("" when nothing of it waits). */
void explain_wait(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size);

/* One line per wait in kvsd (open rounds, collectives) and who is missing,
 * for kvsctl status: calls line(ctx, text) for each. */
void list_waits(const struct daemon *d, void (*line)(void *ctx, const char *text), void *ctx);

/* Frees what a worker holds: its unfinished list call (completed with
 * KVS_EPEERDEAD), its waiting requests, its backlog, its segment and its
 * socket. A push of it still waiting whose data is in the segment (a
 * worker that died) fails the job (fail_job) before the segment goes. */
void worker_release(struct daemon *d, struct worker *w);
/* Evicts a worker that broke the protocol (why says how): the job fails,
 * then the worker is released. */
void evict(struct daemon *d, struct worker *w, const char *why);

/* Frees a key's rounds (the engine's front free). */
void round_free(void *p);

/* Sets the optimizer from spec, as worker or host `who` asked: the same
 * spec again keeps the state. */
int optimizer_set(struct daemon *d, const char *spec, const char *who, struct kvs__err *e);

/* One pass over the pending requests; 1 when something completed. */
int serve_pending(struct daemon *d);

/* Reads and runs every request worker wi has posted; 1 on progress. */
int drain(struct daemon *d, int wi);

/* How many workers a round or a collective waits for: those still in the job. */
int expected(const struct daemon *d);

/* Rounds, for bridge.c: the key's rounds, pushes applied to a part, a
 * round finished (its pushes ended, pulls waiting on it let go), the open
 * list. */
struct round *round_of(struct daemon *d, const struct kvs__entry_info *info, kvs_key_t key);
/* The push of the k inputs in[] (each part p's elements; p -1: the whole
 * key's) to part p of rd's key, under its value's seqlock; an optimizer
 * counts a part's update as step `step` (kvs__engine_push_range). dev[]:
 * the inputs' devices for a key on a GPU (NULL: the host); a host key's
 * are all on the host, and dev is not read. */
int apply_part(struct daemon *d, struct round *rd, int p, int k, const void **in, const int *dev,
               uint64_t step, struct kvs__err *e);
void finish_round(struct daemon *d, struct round *rd, int status, const char *msg);
void open_link(struct daemon *d, struct round *rd);

/* ---- remote.c: pushes read out of a worker's memory ------------------ */

/* At the handshake (socket thread): 1 when kvsd read the cookie at addr
 * (the hello's probe; 0: none) out of process pid, which then gets remote
 * pushes; w->pidfd is set then, else -1. remote_close undoes it. */
int remote_probe(struct worker *w, pid_t pid, uint64_t addr, const uint8_t *cookie);
void remote_close(struct worker *w);
/* 1 when r's data is still in its worker's memory (not copied). */
static inline int req_remote(const struct req *r)
{
    return (r->s.flags & KVS__SQE_REMOTE) && !r->copy;
}
/* The sources of the closing round rd's inputs, in worker order as
 * apply_rounds lists them (kvs__push_item.src): src[j] for each remote
 * one (else read NULL), each with its context in ctx (ncontrib of
 * remote_ctx_size() bytes). Returns how many are remote. Their workers
 * are marked for remote_check. */
int remote_sources(struct daemon *d, const struct round *rd, struct kvs__source *src,
                   void *ctx);
size_t remote_ctx_size(void);
/* After an engine call with sources: evicts each worker marked whose read
 * failed or who has exited since (the job fails), and clears the marks.
 * 0, or -1 when the job failed so. */
int remote_check(struct daemon *d);
/* Copies the remote push r into r->copy (on the host) now. 0, -ENOMEM, or
 * the read's error (the worker's address was bad, or it is gone). */
int remote_copy(struct daemon *d, struct req *r);

/* ---- devbufs.c: workers' device buffers (serve thread only) --------- */

/* r (KVS__OP_REGISTER) opens the handle in its worker's staging as the
 * worker's buffer r->s.arg, closing the buffer of that number before (a
 * handle of zeros: only that).
 * KVS_EDEVICE when it does not open here (no CUDA, a bad handle), -ENOMEM. */
int devbuf_register(struct daemon *d, const struct req *r, struct kvs__err *e);
/* The device request r's range (KVS__SQE_DEVICE) checked against its
 * worker's buffer: KVS_EBADARG for a buffer not registered or a range past
 * its end. devbuf_device: the device it lies on here. devbuf_read: its
 * bytes copied into dst on device `to`, and finished; also KVS_EDEVICE.
 * devbuf_write: src's bytes, on device from, written there and finished. */
int devbuf_device(const struct daemon *d, const struct req *r, int *device, struct kvs__err *e);
int devbuf_read(const struct daemon *d, const struct req *r, void *dst, int to,
                struct kvs__err *e);
int devbuf_write(const struct daemon *d, const struct req *r, const void *src, int from,
                 struct kvs__err *e);
/* Memory on rd's key's device for a device push's copy, and its end: a
 * key on a GPU keeps some for its next rounds. -ENOMEM,
 * KVS_EDEVICE. devcopies_free: what the key kept. */
int devcopy_new(struct round *rd, void **out, struct kvs__err *e);
void devcopy_drop(const struct daemon *d, struct round *rd, void *p);
void devcopies_free(struct round *rd);
/* Closes every buffer w registered (it left, or died). */
void devbufs_close(struct daemon *d, struct worker *w);

/* ---- collectives.c: init of a key, barrier (serve thread only) -------- */

/* A worker's init or barrier arrives; the collective completes when every
 * worker still in the job has come. */
void coll_arrive(struct daemon *d, struct req *r);

/* Completes the collectives that a worker's (or a host's) leaving leaves
 * complete. */
void colls_check(struct daemon *d);

/* Across hosts: host h's workers all made collective m->op (host 0 hears
 * it), or host 0 says every host did (the others hear it, with an init's
 * value). */
void coll_remote_arrive(struct daemon *d, int h, const struct kvs__wire_msg *m);
void coll_remote_done(struct daemon *d, int h, const struct kvs__wire_msg *m);

/* Stores the values of the inits completed since the last call, in one
 * engine call, and answers their workers. run_list calls it at its end. */
void finish_inits(struct daemon *d);

/* Fails every collective waiting with status and msg. */
void colls_fail(struct daemon *d, int status, const char *msg);

/* ---- control.c: kvsctl's channel -------------------------------------- */

/* Answers the queued control requests (serve thread); 1 when one was stop. */
int ctl_serve(struct daemon *d);

/* Checks and queues a control connection whose first message is msg
 * (socket thread). Takes fd. */
void ctl_accept(struct daemon *d, int fd, const void *msg, size_t len, pid_t pid);

/* ---- hosts.c: the links between the hosts of a job -------------------- */

/* Joins the job's other hosts (opts nhosts, host, coord, ...): host 0
 * takes every other host's join, then each host connects to those of lower
 * rank and takes the connections of those above, every one authenticated.
 * Sets d->rank0 and d->total, tells the ready fd, starts the thread that
 * moves frames. Main thread, before the serve loop. */
int hosts_start(struct daemon *d, struct kvs__err *e);

/* Ends the links: with bye when clean (every frame queued before goes
 * first, within a deadline), else at once; keeps the estimate of host 0's
 * clock (d->clock0_*). Main thread, after the serve loop. */
void hosts_stop(struct daemon *d, int clean);

/* A message frame of type from this host, data (m->len bytes) copied
 * from m->data unless that is NULL: then *data is where the caller writes
 * it before hosts_post. NULL without memory. */
struct frame *frame_new(const struct daemon *d, int type, const struct kvs__wire_msg *m,
                        void **data);
/* Queues f for host to, for every other host still in the job (HOSTS_IN:
 * not d->host_out) or for every other host (HOSTS_ALL), and frees it once
 * sent. Serve thread. */
enum { HOSTS_IN = -1, HOSTS_ALL = -2 };
void hosts_post(struct daemon *d, struct frame *f, int to);

/* What the links' thread handed up since the last call, oldest first.
 * Serve thread. */
struct inmsg *hosts_take(struct daemon *d);

/* A host of the job, by rank, in words for messages: "host 1 (10.0.0.2)". */
const char *host_name(const struct daemon *d, int host);

/* ---- bridge.c: what the hosts' messages do (serve thread) ------------- */

/* The host that owns key (part 0 of a big key). This and the three below
 * are src/shard.c's rule for this job's hosts, in kvsd's terms. */
int key_owner(const struct daemon *d, kvs_key_t key);
/* The parts a key of bytes is split in across hosts: 1 (one owner), or
 * above KVS__SPLIT_BYTES a multiple of the hosts, each part of at most
 * KVS__PART_BYTES where KVS__PARTS_MAX allows. */
int key_parts(const struct daemon *d, uint64_t bytes);
/* The host that owns part p of rd's key: each host an equal block of its
 * parts in a row, from the key's owner on. */
int part_owner(const struct daemon *d, const struct round *rd, int p);
/* Elements [*first, *first + *n) of a key of count elements of dtype are
 * those that host h owns: 1, or 0 when the key is not split. */
int host_range(const struct daemon *d, kvs_key_t key, uint64_t count, kvs_dtype_t dtype, int h,
               uint64_t *first, uint64_t *n);
/* Elements [*first, *first + *n) are part p of rd's key. */
void part_range(const struct round *rd, int p, uint64_t *first, uint64_t *n);
/* Makes rd's state across hosts (0, or -ENOMEM). */
int bridge_round_new(struct daemon *d, struct round *rd);

/* Acts on what the other hosts sent since the last call; 1 on progress. */
int bridge_serve(struct daemon *d);

/* A round whose every local push is in, across hosts: its sum goes to the
 * owner (or waits there for the other hosts'). */
void bridge_round_ready(struct daemon *d, struct round *rd);

/* An async push across hosts: applied here to what this host owns of its
 * key, forwarded to the owners of the rest, completed when they all have
 * answered. */
void bridge_async_push(struct daemon *d, struct req *r);

/* The owner's rounds and host 0's collectives that hosts leaving (or this
 * host's workers) left complete, complete. */
void bridge_recheck(struct daemon *d);

/* Frees rd's state across hosts (what waits there for other hosts). */
void bridge_round_free(struct round *rd);

/* Frees the messages that still wait for their keys (at teardown). */
void bridge_free(struct daemon *d);

/* The optimizer was set here: every other host sets it too. */
void bridge_optimizer(struct daemon *d, const char *spec);

/* Every worker of this host has left: the others stop waiting for it. */
void bridge_left(struct daemon *d);

/* The job failed here (status, msg): the others fail too. */
void bridge_fail(struct daemon *d, int status, const char *msg);

/* 1 when every other host has left or ended. */
int bridge_all_left(const struct daemon *d);

/* ---- states.c: optimizer states across hosts (serve thread) ---------- */

/* A worker's save or load (r, its absolute path) in a job across hosts:
 * 1 when it waits for the other hosts (completed when they answered),
 * else the error that ends it now (nothing changed anywhere). */
int states_start(struct daemon *d, struct req *r, const char *path, struct kvs__err *e);

/* Host h asks for this host's states, or sends a file to load (m); host h
 * answers this host's ask. */
void states_on_ask(struct daemon *d, int h, const struct kvs__wire_msg *m);
void states_on_answer(struct daemon *d, int h, const struct kvs__wire_msg *m);

/* What worker wi's save or load seq waits for, in words, into buf (left
 * alone when it waits for nothing here). */
void states_explain(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size);

/* Completes every save and load waiting for the hosts with status, msg. */
void states_fail(struct daemon *d, int status, const char *msg);

/* ---- trace.c: kvsd's part of the timeline ----------------------------- */

/* With KVS_TIMELINE set: names kvsd in it, and clears the directory where
 * the workers leave their parts (an older job's). Main thread, at setup,
 * with the job's lock held. */
int trace_setup(struct daemon *d, struct kvs__err *e);
/* Writes the host's timeline (KVS_TIMELINE; host H > 0: with ".hostH"
 * appended), kvsd's events and every part the workers left, then removes
 * the parts. Main thread, at the end. */
void trace_write(struct daemon *d);
/* Round rd of a key finishes (serve thread; the timeline is on): each
 * push's phases in its worker's process, on the key's track: queued,
 * waiting for others, summed (and updated), or across hosts. */
void trace_round(struct daemon *d, struct round *rd);
/* Request r failed with status and msg: an instant in its worker's process. */
void trace_error(struct daemon *d, const struct req *r, int status, const char *msg);
/* Worker w joined, left, died or was evicted (what: KVS__TR_JOINED...),
 * msg: why, or NULL. Any thread. */
void trace_worker(const struct worker *w, int what, const char *msg);

/* ---- accept.c: the socket thread -------------------------------------- */

/* The socket thread's body (arg is the daemon): runs until stop_signal. */
void *socket_thread(void *arg);

#endif
