/*
 * error.h - the detail message that travels with an error code inside the
 * library. Every internal function that can fail takes a struct kvs__err *,
 * fills it through kvs__fail() and returns the code; the front copies the
 * message to the handle for kvs_last_error().
 */
#ifndef KVS_ERROR_H
#define KVS_ERROR_H

#include "kvs.h"

#define KVS__ERR_MSG_MAX 256

struct kvs__err {
    int code;
    char msg[KVS__ERR_MSG_MAX];
};

/* Records code and a printf-style detail in e (which may be NULL) and
 * returns code, so that callers write: return kvs__fail(e, KVS_ESHAPE, ...). */
int kvs__fail(struct kvs__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a key as text: "7" for an int key, "\"w0\"" for a string key. */
void kvs__key_str(char *buf, size_t size, kvs_key_t key);

#endif
