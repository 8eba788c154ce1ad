/*
 * error.c - error codes and their text: kvs_strerror(), kvs_err_name(), and
 * the detail message (struct kvs__err) that internal calls fill. All text
 * comes from the one list KVS_ERRNO_MAP in kvs.h. Never touches errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

KVS_API const char *kvs_strerror(int err)
{
    const char *s;

    switch (err) {
    case 0:
        return "success";
#define KVS_ERR_MSG_(name, value, msg) case (value): return msg;
    KVS_ERRNO_MAP(KVS_ERR_MSG_)
#undef KVS_ERR_MSG_
    default:
        break;
    }
    /* strerrordesc_np is static text, unlike strerror: safe from any thread. */
    if (err < 0 && err > -4096 && (s = strerrordesc_np(-err)) != NULL)
        return s;
    return "unknown error";
}

KVS_API const char *kvs_err_name(int err)
{
    const char *s;

    switch (err) {
    case 0:
        return "OK";
#define KVS_ERR_NAME_(name, value, msg) case (value): return "KVS_E" #name;
    KVS_ERRNO_MAP(KVS_ERR_NAME_)
#undef KVS_ERR_NAME_
    default:
        break;
    }
    if (err < 0 && err > -4096 && (s = strerrorname_np(-err)) != NULL)
        return s;
    return "UNKNOWN";
}

int kvs__fail(struct kvs__err *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (e == NULL)
        return code;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

void kvs__key_str(char *buf, size_t size, kvs_key_t key)
{
    if (key.name != NULL)
        snprintf(buf, size, "\"%.*s\"", KVS_MAX_KEY_LEN, key.name);
    else
        snprintf(buf, size, "%" PRId64, key.id);
}
