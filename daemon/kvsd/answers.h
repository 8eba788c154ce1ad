/*
 * answers.h - how kvsd answers the workers' requests: completions, results
 * in tables, early answers of sync pushes and the release of their data,
 * backlogs of full CQs, waking the workers.
 */
#ifndef KVSD_ANSWERS_H
#define KVSD_ANSWERS_H

#include "daemon.h"

/* Answers r (not freeing it), with its completion or its result in its
 * table; value: the round whose value the answer hands over (in the arena,
 * or written into a device pull's buffer), or NULL. */
void answer_req(struct daemon *d, struct req *r, int status, const char *msg, struct round *value);

/* Answers r with status (msg its detail when status != 0) and frees it;
 * answer_complete_list does so for every request of a list. */
void answer_complete(struct daemon *d, struct req *r, int status, const char *msg);
void answer_complete_list(struct daemon *d, struct req *r, int status, const char *msg);

/* A sync push taken: answered at once (HELD), its data still lent. */
void answer_ack(struct daemon *d, struct req *r);

/* Ends r: one answered early gets its data released if still lent,
 * any other its completion; frees it. */
void answer_finish(struct daemon *d, struct req *r, int status, const char *msg);

/* kvsd no longer reads r's data from staging: the worker gets it back now
 * (release non-zero) or with r's completion. */
void answer_lending_ends(struct daemon *d, struct req *r, int release);

/* Copies a lent push's data out of staging (or, a remote push, out of
 * its worker's memory) and releases it at once. 0, -ENOMEM, or a remote
 * read's error. */
int answer_unlend(struct daemon *d, struct req *r);

/* Rings the bell of every worker that got completions or ring room since
 * the last call. */
void answer_wake_workers(struct daemon *d);

/* Posts what w's full CQ held back; answer_backlog_free drops it. */
void answer_flush_backlog(struct daemon *d, struct worker *w);
void answer_backlog_free(struct worker *w);

#endif
