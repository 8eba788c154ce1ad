/*
 * daemon.h - kvsd's state model: struct daemon and the records it holds
 * (workers, requests, rounds, collectives, frames, the control queue), the
 * limits more than one module uses, the hooks through which a module tells
 * those above it, and say(), which daemon.c defines.
 *
 * It declares no module's calls: each module's are in its own header,
 * which includes only the headers of the modules below it. It must never
 * define a function or an object, and nothing but kvsd's own files
 * includes it. Which thread may touch what is said at each field.
 */
#ifndef KVSD_DAEMON_H
#define KVSD_DAEMON_H

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
    const char *secret_file;           /* or NULL: loopback only, with the
                                        * job's own secret (net/auth.h) */
    int64_t heartbeat_ns;              /* a host silent this long is dead */
    int64_t join_ns;                   /* every host must have joined by then */
    int ready_fd;                      /* told "RANK0 TOTAL" once the hosts are joined */
    uint64_t staging, arena;
    uint32_t sq_entries, cq_entries;
    int threads;
    int quiet;
    int recover;                       /* --recover: a worker's death ends kvsd (exit
                                        * KVS__KVSD_EXIT_ROLLBACK); no combined keys */
    int restore;                       /* --restore: start from the last snapshot */
    const char *checkpoint;            /* --checkpoint DIR: each commit copied there, or NULL */
    int checkpoint_sync;               /* a commit answers once on disk (--checkpoint-sync,
                                        * KVS_CHECKPOINT_SYNC=1) */
    int generation;                    /* --generation: the job's restarts so far */
    int exit_when_done;                /* --exit-when-done: kvsd started by a worker on
                                        * demand leaves once no worker is live after a
                                        * failure, and fails a job whose workers do not
                                        * all connect within connect_ns */
    int64_t connect_ns;                /* --connect-timeout */
};

/* ---- state ------------------------------------------------------------ */

enum wstate { W_FREE, W_LIVE, W_LEFT, W_DEAD };

/* What kvsd keeps of a request slot, once proto/slots.c has checked it: the
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
    int64_t *ridx;                     /* a row-sparse push (KVS__SQE_ROWS): kvsd's own
                                        * copy of its row ids, checked; its rows stay
                                        * at s.arg * 8 into its data */
    struct round *rd;                  /* PUSH, PULL: its key's rounds */
    uint64_t out;                      /* a remote push: its out in the worker's memory
                                        * (s.arg), which kvsd may write; else 0 */
    int written;                       /* out holds the value the push made */
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
    int sock;                          /* -1 once closed: by the serve thread, under
                                        * d->lock, which the socket thread holds to
                                        * read it and peek at it */
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
    int may_write;                     /* kvsd may write outs into its memory (remote.c) */
    _Atomic int nowrite;               /* set by the serve thread once kvsd has answered
                                        * the worker's EXPLAIN or CLOSE: kvsd writes
                                        * nothing into it from then on */
    int write_noted;                   /* a failed write was said in the log */
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
                                        * finished here, from t_open to rounds_finish
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
    int restored;                      /* the key came from a snapshot (--restore) */
    uint64_t snap_seq;                 /* the commit whose snapshot, being written, holds
                                        * this value as it was (daemon_keep_value); 0: none */
    size_t snap_i;                     /* the key's place in that snapshot */
    int cb;                            /* the workers combine its rounds (combined.c):
                                        * kvsd takes no push or pull of it; its slot
                                        * in d->cb_keys, plus 1 (0: not combined) */
    kvs_dtype_t dtype;
    int64_t nrows;                     /* the value's first extent (0 for a scalar), */
    uint64_t row_bytes;                /* and the bytes of one row */
    uint64_t meta_off;                 /* its shape record in the arena (layout.h),
                                        * made at its first row-sparse pull; 0: none */
    int owner;                         /* the host that owns the key (0 on one host), or
                                        * its part 0 */
    int nparts;                        /* across hosts: 1, or for a big key owners_nparts(),
                                        * part p (kvs__wire_part) owned by owners_part() */
    int inflight;                      /* across hosts: this host's sums of the open round
                                        * are done (sent, or in at the parts' owner) */
    int parts_left;                    /* sync: parts whose value the open round awaits */
    int own_left;                      /* sync: of them, those this host applies */
    int xstatus;                       /* sync: the open round's first failed part, */
    char *xmsg;                        /* and its message (malloc'd) */
    uint8_t *pgot;                     /* [nparts]: the part's value has come this round */
    struct xround *x;                  /* [nparts] where this host owns a part: the other
                                        * hosts' sums of the parts it owns; else NULL */
    struct xrows *xr;                  /* sync across hosts: this host's sum of the open
                                        * round's rows when a push is row-sparse (xrows.c) */
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
    /* The key's rows, for kvsctl stats: of this host's workers' row-sparse
     * pushes (ids as pushed, repeats too) and compact pulls (rows answered);
     * and of the rows messages between hosts, sent (per host sent to) and
     * received. */
    uint64_t rows_pushed, rows_pulled, rows_sent, rows_received;
    const struct round_ops *ops;       /* d->round_ops when it was made: the engine
                                        * frees a round without the daemon */
    /* contrib, last, queued, lat and pgot point here, in the same allocation */
};

/* A collective (init of a key, barrier, commit): completes when every worker
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
    unsigned char *hmark, *hack;       /* COMMIT across hosts, per host: its mark (every
                                        * frame it sent before is in), its capture made */
    int64_t step;                      /* COMMIT across hosts: the step (host 0: the
                                        * first host's), KVS__COMMIT_ANY: none yet */
    int phase;                         /* COMMIT across hosts: 0 arriving, 1 decided
                                        * (capture once marked), 2 captured */
    int status;                        /* ... a mismatch's or a capture's failure */
    char *why;                         /* and its message (malloc'd) */
    unsigned char arrived[];           /* per worker; in the same allocation */
};
#define KVS__COMMIT_ANY (-2)           /* no worker of the host made the commit */

/* A control connection, checked by the socket thread, waiting for its
 * answer from the serve thread. */
struct ctl_conn {
    int fd;
    uint8_t command;                   /* enum kvs__ctl_command */
    pid_t pid;                         /* kvsctl's, for messages */
    int rank, code;                    /* KVS__CTL_GONE's */
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
    uint64_t outs_written;             /* their values written into the workers' outs */
    uint64_t rows_pushed;              /* rows of the row-sparse pushes among them */
    uint64_t rows_pulled;              /* rows the row-sparse pulls were answered for */
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

struct daemon;

/* What a module above job.c does when the job fails (job_hook registers
 * it, at start-up): failed, once, at the first failure (telling those who
 * must know: the other hosts, the workers combining); waiting, at every
 * job_fail_waiting, completes with status and msg the requests the module
 * holds. Either may be NULL. They run in the order registered. */
struct fail_hook {
    void (*failed)(struct daemon *d, int status, const char *msg);
    void (*waiting)(struct daemon *d, int status, const char *msg);
};
#define FAIL_HOOKS_MAX 8

/* What rounds.c tells the module that runs rounds across hosts (xrounds.c;
 * bridge.c registers it in d->round_ops at start-up): made, a key's rounds were made
 * (its state across hosts is made too: 0, or -ENOMEM); ready, a round
 * whose every push here is in, in a job across hosts (d->hx): its sums go
 * to the owners; freed, a key's rounds go; restored, a key restored from
 * a snapshot had its rounds counted (commits.c). */
struct round_ops {
    int (*made)(struct daemon *d, struct round *rd);
    void (*ready)(struct daemon *d, struct round *rd);
    void (*freed)(struct round *rd);
    void (*restored)(struct round *rd);
};

struct hosts;                          /* hosts.c */
struct xround;                         /* xrounds.c */
struct xrows;                          /* xrows.c */
struct stq;                            /* states.c */
struct ckpt;                           /* commits.c */
struct snapw;                          /* commits.c */

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

    pthread_mutex_t lock;              /* workers[] slots and states, and the workers'
                                        * sockets, vs the socket thread */
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
    int fail_remote;                   /* job_fail: the failure came from another host */
    int remote_read;                   /* remote_sources marked workers for job_remote_check */
    int left_told;                     /* the others know this host's workers all left */
    struct req *fwd;                   /* async pushes waiting for their owner's answer */
    struct stq *stq;                   /* saves and loads of states waiting for the hosts */
    const struct fail_hook *fail_hooks[FAIL_HOOKS_MAX];  /* job.c tells those above */
    int nfail_hooks;
    const struct round_ops *round_ops; /* rounds.c tells xrounds.c, or NULL */
    int clock0_known;                  /* hosts_stop: host 0's clock less this host's, */
    int64_t clock0_offset, clock0_error;/* estimated from heartbeats, within the error (ns) */
    uint64_t next_token;
    _Atomic int connected;             /* workers ever connected */
    int left;                          /* workers that left cleanly */
    int64_t resume_step;               /* the step of the snapshot this kvsd holds, -1:
                                        * none; told to each worker in its welcome */
    /* commits (commits.c); serve thread, but the checkpoint thread's own */
    char snap_path[PATH_MAX + 80];     /* <dir>/<job>.snap, the last commit's snapshot */
    uint64_t commit_seq;               /* commits made, a restored snapshot's counted */
    int64_t commit_ns;                 /* when the last was made (CLOCK_REALTIME); 0: none */
    uint64_t commit_bytes;             /* its snapshot's bytes */
    int64_t commit_took_ns;            /* how long writing it took */
    int commit_waits;                  /* a commit's workers have all come: it waits
                                        * for their pushes (colls_commit_check) */
    char restored_from[PATH_MAX + 80]; /* the snapshot file restored at start, or "" */
    int64_t held_steps[KVS__WIRE_JOIN_STEPS];  /* across hosts, --restore: the steps of
                                        * the snapshots this host holds whole, newest */
    int nheld;                         /* first, offered in its join */
    int64_t agreed_step;               /* the step every host restores (the roster's);
                                        * -1: none, an empty store */
    int rollback_host;                 /* the roll back is another host's (its link
                                        * ended): kvsd exits KVS__KVSD_EXIT_HOSTS */
    struct ckpt *ck;                   /* the checkpoint thread (--checkpoint), or NULL */
    struct snapw *sw;                  /* the snapshot writer thread (--recover), or NULL */
    uint64_t snap_writing;             /* the commit it writes now; 0: none */
    void (*snap_keep)(struct daemon *d, struct round *rd);  /* commits.c's, for
                                        * daemon_keep_value */
    void (*snap_finish)(struct daemon *d);  /* commits.c's: the snapshot being
                                        * written made whole, before a roll back */
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
    struct coll *inits;                /* inits complete, values to store: colls_finish_inits */
    struct req_block *blk;             /* the block requests are cut from, or NULL */
    struct req_block *spare_blk;       /* an emptied block kept for the next, or NULL */
    size_t coll_cap, ncolls;           /* cap: 0 or a power of two */
    struct stats st;
    int devbufs_open;                  /* device buffers open now, over every worker */

    /* rounds the workers combine (combined.c) */
    void *cb;                          /* the combine area, or NULL */
    int cb_fd;
    _Atomic int cb_on;                 /* -1 until the first hello; then 1 when this
                                        * job's small keys are combined by its workers.
                                        * Written once, by the socket thread (cb_join,
                                        * under lock) while the serve thread reads it
                                        * each pass (cb_check): atomic */
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

/* Before the serve thread changes a key's value in the arena (rounds.c,
 * rows.c): when the snapshot being written holds it and has not written
 * all of it yet, commits.c copies the rest aside first (the file must be
 * the commit's). A hook, so that the rounds do not call the commits that
 * call them. */
static inline void daemon_keep_value(struct daemon *d, struct round *rd)
{
    if (rd->snap_seq && rd->snap_seq == d->snap_writing)
        d->snap_keep(d, rd);
}

/* Set by SIGINT/SIGTERM, and by main when the serve loop ends: both threads
 * stop at their next turn. Atomic, not a volatile sig_atomic_t: main's
 * store (the serve thread) and the socket thread's loads are two threads,
 * which volatile does not order; a lock-free atomic may also be stored by
 * a signal handler (daemon.c checks that it is lock-free). */
extern atomic_int stop_signal;

/* ---- daemon.c ---------------------------------------------------------- */

/* A message on stderr, prefixed with the job, unless --quiet. Any thread. */
void say(const struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same even under --quiet (kvsrun runs kvsd so): what a user must
 * hear, such as a snapshot passed over or a checkpoint folder that takes
 * no more copies. Any thread. */
void warn(const struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));


#endif
