/*
 * kvsrun.h - what the files of kvsrun share: its limits and deadlines,
 * the options it was given, and the state of one run (the job's files,
 * the signals, the kvsd it started, the workers), then each file's calls.
 * kvsrun is one thread; nothing here is for threads.
 */
#ifndef KVSRUN_KVSRUN_H
#define KVSRUN_KVSRUN_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "proto/proto.h"

#define MAX_WORKERS    1024
#define SEC_NS         1000000000ll
#define KVSD_START_NS  (10 * SEC_NS)   /* kvsd's socket must accept by then */
#define KVSD_LEAVE_NS  (3 * SEC_NS)    /* kvsd's own exit after a job that succeeded */
#define KILL_AFTER_NS  (2 * SEC_NS)    /* from SIGTERM to SIGKILL */
#define GONE_NS        (5 * SEC_NS)    /* from SIGKILL to giving up on a process */
#define EXITING_NS     (120 * SEC_NS)  /* a process in the kernel's exit, giving its
                                        * memory back (gigabytes of store: seconds) */
#define EXEC_NS        (10 * SEC_NS)   /* fork to exec, as the error pipe tells */
#define SLICE_MS       100             /* longest sleep between looks at children */
#define PROBE_MS       20              /* between probes of a starting kvsd */
#define JOIN_NS        (60 * SEC_NS)   /* every host of a job must have joined by then
                                        * (--join-timeout) */
#define HOSTS_LEAVE_NS (3600 * SEC_NS) /* kvsd's exit after this host's workers, across
                                        * hosts: it stays while the others still push */
#define COORD_PORT     "47470"         /* the coordinator's port when none is named */
#define OWN_EXIT_NS    (1 * SEC_NS)    /* a kvsd --recover's own exit after a death */
#define CTL_NS         (2 * SEC_NS)    /* one control request to kvsd, answer included */
#define MAX_RESTARTS   1000000

struct options {
    int nworkers;
    char job[KVS__JOB_MAX + 1];
    int job_picked;                    /* no -j: kvsrun made the name up */
    int64_t grace_ns;
    const char *kvsd;                  /* NULL: look for it */
    const char *timeout;               /* NULL: KVS_TIMEOUT is left as it is */
    const char *staging;               /* NULL: kvsd's default */
    const char *arena;                 /* NULL: kvsd's default */
    char **argv;                       /* the workers' program and its arguments */
    /* across hosts: nodes 1 is one host */
    int nodes, node_rank;
    char coord[300];
    const char *bind, *secret_file;
    char net_job[KVS__JOB_MAX + 1];    /* the job's name; job is then net_job.hR */
    /* recovery */
    int restarts;                      /* per worker rank, and for kvsd; 0: none */
    const char *checkpoint;            /* kvsd's --checkpoint DIR, or NULL */
    int64_t stall_ns;                  /* --stall-timeout; 0: off */
    const char *join;                  /* --join-timeout as given, for kvsd; NULL: */
    int64_t join_ns;                   /* kvsd's default, JOIN_NS */
};

struct worker {
    pid_t pid;                         /* also its process group; 0: not started */
    int done;                          /* reaped */
    int restarts;                      /* replacements started so far */
    int pending;                       /* died, a replacement is due */
    int status;                        /* its wait status, once reaped */
    int tell;                          /* reaped: kvsd is still to hear it ended */
    int64_t waited_since;              /* the others wait on it since (--stall-timeout) */
    uint32_t waited_on;                /* a hash of what they wait for */
};

struct run {
    struct options o;
    char dir[PATH_MAX];
    char sock_path[PATH_MAX + 80], lock_path[PATH_MAX + 80], run_path[PATH_MAX + 80];
    int run_fd;                        /* run_path, locked: this kvsrun runs the job */
    sigset_t stop_set;                 /* the signals passed on to the workers */
    sigset_t old_mask;                 /* restored in every child */
    int sfd;                           /* signalfd: stop signals and SIGCHLD */
    pid_t kvsd;                        /* the kvsd this kvsrun started, or 0 */
    int kvsd_done, kvsd_status;
    int kvsd_told;                     /* its ending has been reported */
    struct worker *w;
    int nstarted, nlive;
    int first_status;                  /* first failure as an exit code; -1 none */
    int stopping;                      /* a failure or a signal: the job ends */
    int64_t term_at, kill_at, give_up_at; /* 0: not (yet) due */
    int rank0, total;                  /* this host's first global rank, the job's workers */
    time_t started;                    /* kvsrun's start: a timeline older is not this job's */
    /* recovery (restart.c) */
    int recover;                       /* --restarts > 0 or --checkpoint */
    int kvsd_up;                       /* the kvsd kvsrun started serves the job */
    int kvsd_lost;                     /* it ended unasked: a restart is due */
    int kvsd_restarts, gen;            /* kvsd's own restarts; kvsd starts after the first */
    int npending;                      /* workers whose replacement is due */
    int64_t death_at;                  /* the first death of the recovery due; 0: none */
    int64_t last_death;                /* the last worker's death seen */
    int64_t kvsd_started;              /* when the kvsd kvsrun started last was forked */
    int64_t longest_ns;                /* the longest recovery, death to kvsd serving */
    unsigned kvsd_has;                 /* KVSD_HAS_*: the options kvsd's --help lists */
    int gone_off;                      /* this kvsd did not answer a gone: ask no more */
    int64_t next_poll;                 /* --stall-timeout's next look at kvsd's waits */
};

#define KVSD_HAS_KNOWN      1u         /* kvsd_has was read */
#define KVSD_HAS_RESTORE    2u
#define KVSD_HAS_GENERATION 4u
#define KVSD_HAS_CHECKPOINT 8u
#define KVSD_HAS_RECOVER    16u

/* ---- options.c: the command line --------------------------------------- */

/* Reads the command line into *o, with the hosts and the job's name
 * placed (placement.c). Returns -1 to go on, else the exit status (0
 * after --help/--version, 2 on a usage error, with the message already
 * written). Sets KVS_TIMELINE for --timeline. */
int parse_options(struct options *o, int argc, char **argv);

/* ---- placement.c: hosts, ranks, names, the workers' variables ---------- */

/* The hosts of the job: options first, then KVS_*, then Slurm's, then
 * Open MPI's variables. -1 to go on, else the exit status (said). */
int hosts_options(struct options *o);

/* The job's name: -j, else run-PID; across hosts, this host's part is
 * NAME.hR. -1 to go on, else the exit status (said). */
int name_job(struct options *o);

/* The job's socket, lock and .run file in the runtime directory. 0, else
 * kvsrun's exit status (said). */
int job_paths(struct run *r);

/* In a worker's child, before the exec: KVS_RANK (this host's first
 * global rank plus rank), KVS_NUM_WORKERS, KVS_JOB and KVS_TIMEOUT.
 * 0, or -1 with errno. */
int worker_env(const struct run *r, int rank);

/* Reads kvsd's "RANK0 TOTAL" line from fd (non-blocking) into r: 1 once
 * whole, 0 not yet, -1 when kvsd closed the pipe without it. */
int read_ready(struct run *r, int fd, char *buf, size_t *got, size_t size);

/* ---- supervise.c: children, signals, the workers' run ------------------ */

/* How a child ended, in words; and as the shell's exit code. */
void describe(char *buf, size_t size, int status);
int exit_code(int status);

/* The stop signals kvsrun takes over, through a signalfd. 0, or -errno. */
int setup_signals(struct run *r);

/* Reads every pending signal, passing stop signals on to the workers;
 * one starts the stop. Returns the last stop signal read, 0 when none
 * came. */
int take_signals(struct run *r);

/* Sleeps until a signal comes or deadline_ns passes, SLICE_MS at most. */
void wait_slice(struct run *r, int64_t deadline_ns);

/* Collects every child that has ended: workers, the kvsd, orphans. */
void reap(struct run *r);

/* Child p ended with wait status st (reap's step, for one child). */
void child_ended(struct run *r, pid_t p, int st);

/* Forks a child in a process group of its own that runs argv: a worker
 * (rank >= 0) or the kvsd (rank < 0). 0 and *pid, or -errno. */
int spawn(struct run *r, char *const argv[], int rank, pid_t *pid);

/* The job is ending: the live workers get until term_at, then SIGTERM. */
void begin_stop(struct run *r, int64_t term_at);

/* Starts the workers: 0, else kvsrun's exit status (said). */
int start_workers(struct run *r);

/* Starts rank i's worker (again): 0, else kvsrun's exit status (said). */
int start_worker(struct run *r, int i);

/* Sends sig to the process group of every worker not yet reaped. */
void signal_workers(struct run *r, int sig);

/* A worker reaped: 1 when it is to be replaced (restart.c), its death
 * noted. The kvsd reaped while the job runs: 1 when it is to be
 * restarted. */
int restart_worker_due(struct run *r, int i);
int restart_kvsd_due(struct run *r);

/* ---- kvsd_child.c: the kvsd kvsrun starts ------------------------------- */

/* 1 when a kvsd listens at the socket path; *pid (may be NULL): its
 * process when known, else 0. */
int probe(const char *path, pid_t *pid);

/* Starts kvsd for the job and waits until it serves it. 0, else kvsrun's
 * exit status (said). */
int start_kvsd(struct run *r);

/* Ends the kvsd kvsrun started. 0, or 1 when it could not be ended. */
int stop_kvsd(struct run *r, int wait_first);

/* A recovery's first step: the kvsd gone, by its own exit (OWN_EXIT_NS)
 * or else SIGKILL. 0, or 1 when it outlived SIGKILL (said). */
int end_kvsd_now(struct run *r);

/* ---- restart.c: a job that recovers ------------------------------------- */

/* Does the recovery due: the kvsd ended, a new one serving, the dead
 * workers replaced; or, with restarts used up or the job stopping, the
 * restarts due dropped (said) and the job's failure begun. */
void recover(struct run *r);

/* start_kvsd, again (said) while a job that recovers loses the new kvsd
 * to a signal or to another host's rollback before it serves. */
int start_kvsd_recovering(struct run *r);

/* Across hosts, this host's workers all ended well: a kvsd that rolls back
 * with another host is started again, for the others to join. */
void rejoin_ended(struct run *r);

/* The restarts of the job, in one line, when any happened. */
void restart_summary(const struct run *r);

/* ---- kvsd_ctl.c: what kvsrun tells and asks the kvsd ------------------- */

/* Tells kvsd that rank i of this host ended, with exit code code, so that
 * one that never connected is not waited for. */
void tell_gone(struct run *r, int i, int code);

/* --stall-timeout: looks at what kvsd's requests wait for, and kills a
 * worker the others have waited on for longer. */
void stall_check(struct run *r);

/* ---- watch.c: the job's run --------------------------------------------- */

/* Runs until every started worker is reaped. 0, or 1 when some worker
 * outlived SIGKILL. */
int supervise(struct run *r);

/* ---- cleanup.c: what kvsrun holds of the job, given back ---------------- */

/* Takes the job's name (its .run file, locked). 0, else kvsrun's exit
 * status (said). release_job gives it back. */
int claim_job(struct run *r);
void release_job(struct run *r);

/* The socket and lock file a kvsd that did not end cleanly left. */
void remove_job_files(struct run *r);

/* Ends what the workers left running in their process groups. */
void sweep(struct run *r);

/* Says where the job's timeline was written, once kvsd has ended. */
void say_timeline(const struct run *r);

#endif
