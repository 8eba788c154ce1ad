/*
 * waits.h - what waits in kvsd, in words.
 */
#ifndef KVSD_WAITS_H
#define KVSD_WAITS_H

#include "daemon.h"

/* What worker wi's request seq waits for, in words: the call, the key, the
 * round, and the ranks that have not come ("" when nothing of it waits). */
void waits_explain(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size);

/* One line per wait in kvsd (open rounds, collectives) and who is missing,
 * for kvsctl status: calls line(ctx, text) for each. */
void waits_list(const struct daemon *d, void (*line)(void *ctx, const char *text), void *ctx);

#endif
