/*
 * tp_socket.h - the "socket" transport (tp_socket.c): its ops table, for
 * the loader to offer as a built-in. Declares nothing else; the backend
 * itself stands on kvs-transport.h and tp_util.h only.
 */
#ifndef KVSD_TP_SOCKET_H
#define KVSD_TP_SOCKET_H

#include "kvs-transport.h"

extern const struct kvs_transport_ops kvs__tp_socket;

#endif
