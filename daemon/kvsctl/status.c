/*
 * status.c - kvsctl's one-question commands: status, keys, stats (as text,
 * whole or --short, or --json: its sample, checked, as JSON) and stop. Each is one control
 * request to the job's kvsd (ask.c) and its answer on stdout; stop then
 * waits until kvsd has gone.
 *
 * It prints nothing of kvsd's it has not had checked: the reply by
 * proto/ctl.c, a sample by sample.c. It never signals a process and never
 * removes a file; stop is kvsd's own doing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ask.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "sample.h"
#include "status.h"

/* Writes text as it came, with a final newline. 0, or 1 when stdout
 * failed (a closed pipe, a full disk). */
static int print_text(const struct kvs__ctl_reply *r)
{
    if (r->len > 0 && fwrite(r->text, 1, r->len, stdout) != r->len)
        return 1;
    if (r->len > 0 && r->text[r->len - 1] != '\n')
        putchar('\n');
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvsctl: cannot write the answer: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

/* stats --json: the sample, checked, as JSON. */
static int print_json(const char *job, const struct kvs__ctl_reply *r)
{
    struct sample smp;
    char why[256];
    int rc;

    if (sample_parse(r->text, r->len, &smp, why, sizeof why) != 0) {
        fprintf(stderr, "kvsctl: a bad sample from the kvsd of job '%s': %s\n", job, why);
        return 1;
    }
    rc = sample_json(stdout, job, &smp);
    sample_free(&smp);
    if (rc != 0) {
        fprintf(stderr, "kvsctl: cannot write the answer: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int status_main(const char *job, int command, int json)
{
    static struct kvs__ctl_reply reply;
    struct ctl_where at;
    char msg[PATH_MAX + 512];

    if (ctl_ask_at(job, command, &reply, &at, msg, sizeof msg) != ASK_OK) {
        fprintf(stderr, "kvsctl: %s\n", msg);
        return 1;
    }
    if (json)
        return print_json(job, &reply);
    if (print_text(&reply) != 0)
        return 1;
    /* kvsd has answered and is on its way out: it removes its socket as
     * it ends, once the workers' requests are failed. */
    if (command == KVS__CTL_STOP && !ctl_wait_gone(&at, kvs__now_ns() + DEADLINE_NS)) {
        fprintf(stderr, "kvsctl: the kvsd of job '%s' said it was stopping, but is still "
                "there after %lld s\n", job, DEADLINE_NS / SEC_NS);
        return 1;
    }
    return 0;
}
