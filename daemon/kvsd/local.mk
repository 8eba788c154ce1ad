# daemon/kvsd/local.mk - kvsd, the host daemon.
#
# The program is built at daemon/kvsd/kvsd: its objects go in daemon/kvsd/
# of the build tree, where a file daemon/kvsd cannot be too. It installs as
# kvsd.

# The programs link the library's code statically: kvsd runs the engine
# itself, and they use internal parts (runtime directory, protocol).
bin_PROGRAMS += daemon/kvsd/kvsd
daemon_kvsd_kvsd_SOURCES = daemon/kvsd/main.c daemon/kvsd/daemon.h daemon/kvsd/daemon.c \
	daemon/kvsd/arena.c daemon/kvsd/arena.h daemon/kvsd/devbufs.c daemon/kvsd/devbufs.h \
	daemon/kvsd/remote.c daemon/kvsd/remote.h daemon/kvsd/owners.c daemon/kvsd/owners.h \
	daemon/kvsd/join.c daemon/kvsd/join.h \
	daemon/kvsd/hosts.c daemon/kvsd/hosts.h daemon/kvsd/req.c daemon/kvsd/req.h \
	daemon/kvsd/tracing.c daemon/kvsd/tracing.h daemon/kvsd/answers.c daemon/kvsd/answers.h \
	daemon/kvsd/job.c daemon/kvsd/job.h daemon/kvsd/rows.c daemon/kvsd/rows.h \
	daemon/kvsd/rounds.c daemon/kvsd/rounds.h \
	daemon/kvsd/combined.c daemon/kvsd/combined.h daemon/kvsd/collectives.c daemon/kvsd/commits.c daemon/kvsd/commits.h \
	daemon/kvsd/xcommits.c daemon/kvsd/xcommits.h \
	daemon/kvsd/collectives.h daemon/kvsd/states.c daemon/kvsd/states.h \
	daemon/kvsd/hostmsg.c daemon/kvsd/hostmsg.h daemon/kvsd/xrounds.c daemon/kvsd/xrounds.h \
	daemon/kvsd/xrows.c daemon/kvsd/xrows.h \
	daemon/kvsd/forwards.c daemon/kvsd/forwards.h \
	daemon/kvsd/bridge.c daemon/kvsd/bridge.h daemon/kvsd/waits.c daemon/kvsd/waits.h \
	daemon/kvsd/requests.c daemon/kvsd/requests.h daemon/kvsd/control.c daemon/kvsd/control.h \
	daemon/kvsd/ctltext.c daemon/kvsd/ctltext.h daemon/kvsd/stats.c daemon/kvsd/stats.h \
	daemon/kvsd/serve.c daemon/kvsd/serve.h daemon/kvsd/accept.c daemon/kvsd/accept.h
daemon_kvsd_kvsd_CFLAGS = $(AM_CFLAGS) $(SODIUM_CFLAGS)
# The transports (daemon/net/, linked as libkvs_net) are included as
# "net/loader.h" and "net/tcp.h".
daemon_kvsd_kvsd_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
daemon_kvsd_kvsd_LDADD = daemon/net/libkvs_net.la src/libkvs_core.la $(SODIUM_LIBS) -ldl
