# daemon/kvsd.mk - kvsd, the host daemon, with the transports it links in.

# The programs link the library's code statically: kvsd runs the engine
# itself, and they use internal parts (runtime directory, protocol).
bin_PROGRAMS += daemon/kvsd
daemon_kvsd_SOURCES = daemon/kvsd.c daemon/kvsd.h daemon/arena.c daemon/requests.c \
	daemon/answers.c daemon/collectives.c daemon/control.c daemon/accept.c \
	daemon/hosts.c daemon/bridge.c daemon/states.c daemon/devbufs.c daemon/remote.c \
	daemon/combined.c daemon/trace.c daemon/handshake.c daemon/handshake.h daemon/auth.c daemon/auth.h \
	daemon/transport.h daemon/transport.c daemon/tcp.c daemon/tp_socket.c daemon/tp_util.h
daemon_kvsd_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
# Where kvsd finds transport plug-ins (KVS_TRANSPORT=NAME).
daemon_kvsd_CPPFLAGS = $(AM_CPPFLAGS) -DKVS__TRANSPORT_DIR='"$(pkglibdir)"'
daemon_kvsd_LDADD = src/libkvs_core.la $(SODIUM_LIBS) -ldl
if HAVE_LIBURING
daemon_kvsd_SOURCES += daemon/tp_uring.c
daemon_kvsd_CFLAGS += $(LIBURING_CFLAGS) -DHAVE_LIBURING
daemon_kvsd_LDADD += $(LIBURING_LIBS)
endif
