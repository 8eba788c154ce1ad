# daemon/net.mk - transport plug-ins kvsd loads at run time.

# Transport plug-ins, loaded by kvsd (KVS_TRANSPORT=NAME) from pkglibdir.
if HAVE_UCX
pkglib_LTLIBRARIES += daemon/kvs-transport-ucx.la
daemon_kvs_transport_ucx_la_SOURCES = daemon/tp_ucx.c daemon/tp_util.h daemon/transport.h
daemon_kvs_transport_ucx_la_CFLAGS = $(AM_CFLAGS) $(UCX_CFLAGS) -fvisibility=hidden \
	-I$(top_srcdir)/daemon
daemon_kvs_transport_ucx_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared
daemon_kvs_transport_ucx_la_LIBADD = $(UCX_LIBS)
endif
