/*
 * ctltext.h - the text of kvsctl's answers: lines added to a reply's
 * text, cut between lines, never inside one, and keys and shapes as
 * kvsctl shows them.
 */
#ifndef KVSD_CTLTEXT_H
#define KVSD_CTLTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"

#define CTL_TAIL_ROOM  80                  /* room kept in a listing for "... N more" */
#define KEY_TEXT_MAX   (4 * KVS_MAX_KEY_LEN + 3)   /* key_text's longest, without the NUL */

/* An answer being written into a reply's text (buf of cap bytes, len used).
 * A piece that does not fit is left out whole and marks the text full. */
struct text {
    char *buf;
    size_t len, cap;
    int full;
};

/* Adds the n bytes at s as they are, or sets full when they do not fit. */
void text_raw(struct text *t, const char *s, size_t n);

/* Adds what fmt writes (at most 1023 bytes), escaped as the control
 * protocol's text must be, or sets full when it does not fit. */
void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Adds a line of a listing, n bytes that snprintf wrote into line, a
 * buffer of size bytes, when it was not cut and fits with CTL_TAIL_ROOM
 * left for the listing's tail: 1; 0 when it does not (nothing added). */
int text_line(struct text *t, const char *line, int n, size_t size);

/* Writes key into buf (size bytes, KEY_TEXT_MAX + 1 hold any key): 7, or
 * "name" quoted and escaped. */
void key_text(char *buf, size_t size, kvs_key_t key);

/* The columns a terminal gives s: one per character, not per byte. */
size_t text_columns(const char *s);

/* A column's width w, widened to n (up to a cap past which a longer
 * field only shifts its own line). */
int text_width(int w, size_t n);

#endif
