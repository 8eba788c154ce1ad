/*
 * ctltext.c - the text of kvsctl's answers, written into a reply's text
 * and cut between lines, never inside one, when it does not fit.
 *
 * It only writes into the text it is given: it must never look at the
 * daemon's state, nor send or wait for anything.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctltext.h"

#include "proto/ctl.h"

#define WIDTH_MAX      40                  /* a longer key only shifts its own line */

void text_raw(struct text *t, const char *s, size_t n)
{
    if (t->full || n > t->cap - t->len) {
        t->full = 1;
        return;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

void text_add(struct text *t, const char *fmt, ...)
{
    char line[1024], safe[4 * sizeof line];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    text_raw(t, safe,
             kvs__ctl_text_escape(safe, sizeof safe, line, strnlen(line, sizeof line), 0));
}

int text_line(struct text *t, const char *line, int n, size_t size)
{
    if (n < 0 || (size_t)n >= size || t->len + (size_t)n + CTL_TAIL_ROOM > t->cap)
        return 0;
    text_raw(t, line, (size_t)n);
    return 1;
}

void key_text(char *buf, size_t size, kvs_key_t key)
{
    size_t n;

    if (!key.name) {
        snprintf(buf, size, "%" PRId64, key.id);
        return;
    }
    buf[0] = '"';
    n = 1 + kvs__ctl_text_escape(buf + 1, size - 2, key.name, strlen(key.name), 1);
    buf[n++] = '"';
    buf[n] = '\0';
}

/* A name may hold UTF-8; what a terminal shows wider than one column is
 * not worth a table. */
size_t text_columns(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

int text_width(int w, size_t n)
{
    return n > (size_t)w ? (n > WIDTH_MAX ? WIDTH_MAX : (int)n) : w;
}
