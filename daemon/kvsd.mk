# daemon/kvsd.mk - kvsd, the host daemon.

# The programs link the library's code statically: kvsd runs the engine
# itself, and they use internal parts (runtime directory, protocol).
bin_PROGRAMS += daemon/kvsd
daemon_kvsd_SOURCES = daemon/kvsd.c daemon/kvsd.h daemon/arena.c daemon/requests.c \
	daemon/answers.c daemon/collectives.c daemon/control.c daemon/accept.c \
	daemon/hosts.c daemon/bridge.c daemon/states.c daemon/devbufs.c daemon/remote.c \
	daemon/combined.c daemon/trace.c
daemon_kvsd_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
# The transports (daemon/net/) are included as "net/loader.h", "net/tcp.h".
daemon_kvsd_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
daemon_kvsd_LDADD = daemon/net/libkvs_net.la src/libkvs_core.la $(SODIUM_LIBS) -ldl
