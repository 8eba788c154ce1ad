# daemon/net/local.mk - the transports between hosts: what kvsd links in
# (libkvs_net.la: the loader, TCP, the handshake and its proofs, the socket
# and io_uring loops) and the plug-ins it loads at run time.

# kvsd and the tests of the transports link this; its users link
# src/libkvs_core.la after it (errors, rings, wire frames).
noinst_LTLIBRARIES += daemon/net/libkvs_net.la
daemon_net_libkvs_net_la_SOURCES = daemon/net/loader.h daemon/net/loader.c \
	daemon/net/tcp.h daemon/net/tcp.c daemon/net/tp_util.h \
	daemon/net/tp_socket.h daemon/net/tp_socket.c daemon/net/tp_uring.h \
	daemon/net/handshake.h daemon/net/handshake.c daemon/net/auth.h daemon/net/auth.c
daemon_net_libkvs_net_la_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
# Where the loader finds transport plug-ins (KVS_TRANSPORT=NAME).
daemon_net_libkvs_net_la_CPPFLAGS = $(AM_CPPFLAGS) -DKVS__TRANSPORT_DIR='"$(pkglibdir)"'
daemon_net_libkvs_net_la_LIBADD = $(SODIUM_LIBS) -ldl
if HAVE_LIBURING
daemon_net_libkvs_net_la_SOURCES += daemon/net/tp_uring.c
daemon_net_libkvs_net_la_CFLAGS += $(LIBURING_CFLAGS) -DHAVE_LIBURING
daemon_net_libkvs_net_la_LIBADD += $(LIBURING_LIBS)
endif

# Transport plug-ins, loaded by kvsd (KVS_TRANSPORT=NAME) from pkglibdir.
# The built file stays daemon/.libs/kvs-transport-ucx.so, where the tests
# and scripts look for it.
if HAVE_UCX
pkglib_LTLIBRARIES += daemon/kvs-transport-ucx.la
daemon_kvs_transport_ucx_la_SOURCES = daemon/net/tp_ucx.c daemon/net/tp_util.h
daemon_kvs_transport_ucx_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS) -fvisibility=hidden
daemon_kvs_transport_ucx_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared
daemon_kvs_transport_ucx_la_LIBADD = $(UCX_LIBS)
endif
