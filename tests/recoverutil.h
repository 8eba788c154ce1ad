/*
 * recoverutil.h - what the worker programs of the restart tests share
 * (tests/recover_train.c, tests/recover_faults.c): the job's handle and
 * rank, the end of a worker on an error, the float arrays of its keys, and
 * the check that tells KVS_ERESTART (resume from the last commit) from a
 * failure. Included once per program, after the program has defined
 * rows[] and cols[] (its keys' shapes) and on_restart() (what it records
 * at each KVS_ERESTART). It never decides what a worker does after a
 * restart.
 */
#ifndef KVS_TESTS_RECOVERUTIL_H
#define KVS_TESTS_RECOVERUTIL_H

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include <kvs.h>

static kvs_t *kv;
static int rank;

static void on_restart(void);

/* At once, without exit handlers: the test reads only the message. */
static void die(const char *what, int rc) __attribute__((noreturn));
static void die(const char *what, int rc)
{
    fprintf(stderr, "%s rank %d: %s: %s (%s)\n", program_invocation_short_name, rank, what,
            kvs_err_name(rc), kvs_last_error(kv));
    _exit(1);
}

static kvs_array_t arr(float *p, int k)
{
    return (kvs_array_t){ .data = p, .dtype = KVS_FLOAT32, .ndim = 2,
                          .shape = { rows[k], cols[k] } };
}

static size_t count(int k)
{
    return (size_t)(rows[k] * cols[k]);
}

/* 0, 1 for KVS_ERESTART (the caller resumes), else the worker ends. */
static int check(int rc, const char *what)
{
    if (rc == KVS_ERESTART) {
        on_restart();
        return 1;
    }
    if (rc != 0)
        die(what, rc);
    return 0;
}

#endif
