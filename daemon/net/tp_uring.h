/*
 * tp_uring.h - the "uring" transport (tp_uring.c, built with liburing
 * only): its ops table, for the loader to offer as a built-in. Declares
 * nothing else; the backend itself stands on kvs-transport.h and
 * tp_util.h only.
 */
#ifndef KVSD_TP_URING_H
#define KVSD_TP_URING_H

#include "kvs-transport.h"

#ifdef HAVE_LIBURING
extern const struct kvs_transport_ops kvs__tp_uring;
#endif

#endif
